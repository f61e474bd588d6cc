//! The classic group protocol's driver: one task per member executes the
//! actions of the [`ClassicMember`](super::classic_member::ClassicMember)
//! state machine (send JoinGroup, SyncGroup, Heartbeat, LeaveGroup; run the
//! leader's assignor; revoke, lose, assign; wait) and feeds back answers,
//! timers, polls and close as events. The protocol decisions (KIP-62,
//! KIP-345, KIP-394, KIP-429, KIP-814) live in the machine; this file does
//! I/O only. Protocol: <https://kafka.apache.org/protocol#The_Messages_JoinGroup>.

use std::collections::{BTreeSet, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kafka_protocol::messages::join_group_request::JoinGroupRequestProtocol;
use kafka_protocol::messages::leave_group_request::MemberIdentity;
use kafka_protocol::messages::sync_group_request::SyncGroupRequestAssignment;
use kafka_protocol::messages::{
    GroupId, HeartbeatRequest, HeartbeatResponse, JoinGroupRequest, JoinGroupResponse,
    LeaveGroupRequest, LeaveGroupResponse, SyncGroupRequest, SyncGroupResponse,
};
use kafka_protocol::protocol::StrBytes;
use tokio::sync::oneshot;
use tokio::time::Instant;
use tracing::{debug, warn, Instrument};

use super::assignor::{self, Member, PartitionCounts};
use super::classic_member::{Action, ClassicMember, Event, MEMBER_ID_REQUIRED};
use super::config::{wire_ms, AssignmentStrategy};
use super::events::GroupEvent;
use super::member::{coordinator, Driver};
use crate::cluster::{ClusterMetadata, CoordinatorKind};
use crate::error::{Error, Result};
use crate::protocol::consumer_protocol::{self as subscription, Subscription};
use crate::protocol::versions::Versions;
use crate::TopicPartition;

const JOIN_GROUP_VERSIONS: Versions = Versions::new(2, 9);
const SYNC_GROUP_VERSIONS: Versions = Versions::new(1, 5);
const HEARTBEAT_VERSIONS: Versions = Versions::new(1, 4);
const LEAVE_GROUP_VERSIONS: Versions = Versions::new(1, 5);
/// Slack on top of the rebalance timeout for JoinGroup and SyncGroup, which
/// the coordinator holds until the rebalance completes (as the Java client).
const JOIN_SLACK: Duration = Duration::from_secs(5);

/// Partition counts of `topics`, 0 for a topic metadata does not know (yet)
/// or knows only with an error: the leader compares them at every heartbeat, so
/// a topic that appears after the assignment makes it rebalance, as a topic
/// that grows does.
fn partition_counts(meta: &ClusterMetadata, topics: &[String]) -> PartitionCounts {
    topics
        .iter()
        .map(|t| {
            let n = meta
                .topics
                .get(t)
                .filter(|info| info.error.is_none())
                .map_or(0, |info| info.partitions.len() as i32);
            (t.clone(), n)
        })
        .collect()
}

/// Runs membership until close or a fatal error, on a thread of its own
/// (see [`on_own_thread`]).
pub(crate) async fn run(d: Driver) {
    let group = d.shared.group_id.clone();
    on_own_thread(&group, d, drive).await;
}

/// Runs `drive(d)` on a thread of its own with a one-thread runtime and
/// resolves when it ends. Heartbeats must not wait for the application's
/// runtime: on a current-thread runtime (every `#[tokio::test]`) or one
/// whose workers are busy, a task that computes or blocks for a while
/// (a streams app's state store commits) delays the heartbeat timer and
/// the socket it writes to, and a loaded machine stretches that past
/// `session.timeout.ms`, so the coordinator evicts a live member. The Java
/// consumer heartbeats from its own thread for the same reason (KIP-62).
/// The coordinator connection the driver dials lives on that thread too.
/// The thread ends with the driver, or as soon as this future is dropped
/// (its runtime shut down, or the task aborted): the member then stops
/// where it is, without leaving, as the task on that runtime did. If the
/// thread cannot be started the driver runs here, as before.
pub(super) async fn on_own_thread<F, Fut>(group: &str, d: Driver, drive: F)
where
    F: FnOnce(Driver) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()> + 'static,
{
    let span = tracing::Span::current();
    // Shared so that a thread that fails to start, or to build its
    // runtime, hands the driver back.
    let slot = Arc::new(Mutex::new(Some((d, drive))));
    // `Err`: the thread has no runtime and the driver is back in the slot.
    let (done, finished) = oneshot::channel::<Result<(), String>>();
    // Dropped with this future: the thread's driver stops.
    let (_dropped_with_this_future, mut caller_gone) = oneshot::channel::<()>();
    let taken = slot.clone();
    // The runtime is built on the thread (named by then) and dropped there
    // before the thread reports back, so its descriptors (epoll, eventfd)
    // exist only while its named thread does: a leak check can count them
    // per membership thread without a window at a member's start or end.
    let spawned = std::thread::Builder::new()
        .name(format!("purekafka-group-{group}"))
        .spawn(move || {
            let rt = match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(rt) => rt,
                Err(e) => {
                    let _ = done.send(Err(e.to_string()));
                    return;
                }
            };
            let job = taken.lock().unwrap_or_else(|p| p.into_inner()).take();
            if let Some((d, drive)) = job {
                rt.block_on(async move {
                    tokio::select! {
                        () = drive(d).instrument(span) => {}
                        _ = &mut caller_gone => {}
                    }
                });
            }
            drop(rt);
            let _ = done.send(Ok(()));
        });
    let outcome = match spawned {
        // A thread that panicked dropped its sender: the driver ended.
        Ok(_) => finished.await.unwrap_or(Ok(())),
        Err(e) => Err(e.to_string()),
    };
    if let Err(e) = outcome {
        warn!(group, error = %e, "no thread for the group membership; it runs on the caller's runtime");
        let job = slot.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some((d, drive)) = job {
            drive(d).await;
        }
    }
}

/// Executes the machine's actions in order, feeding back what each
/// produced, until close or a fatal error.
async fn drive(d: Driver) {
    let mut m = ClassicMember::new(
        d.shared.group_id.clone(),
        d.shared.instance_id.is_some(),
        d.config.is_cooperative(),
    );
    let mut c = Classic { d };
    let mut queue: VecDeque<Action> = m.handle(Event::Start).into();
    while let Some(action) = queue.pop_front() {
        let event = match action {
            Action::Publish {
                member_id,
                generation,
                owned,
            } => {
                c.d.publish(&member_id, generation, &owned);
                None
            }
            Action::Revoke(parts) => {
                c.revoke(&m, &parts).await;
                Some(Event::RevokeDone)
            }
            Action::Lose(mut parts) => {
                c.d.lose(&mut parts).await;
                None
            }
            Action::Assigned(added) => {
                c.d.shared.metrics.rebalance_completed();
                c.d.emit(GroupEvent::Assigned(added)).await;
                None
            }
            Action::Join {
                member_id,
                generation,
                owned,
            } => Some(if c.d.closing() {
                Event::Close
            } else if c.d.poll_expired() {
                Event::PollExpired
            } else {
                c.d.shared.metrics.rebalance_started();
                let closed = c.d.close_signal();
                tokio::select! {
                    r = c.join(&member_id, generation, owned) => Event::Joined(r),
                    _ = closed => Event::Close,
                }
            }),
            Action::Lead(join) => Some(Event::Led(c.lead(&join).await)),
            Action::Sync {
                member_id,
                generation,
                protocol,
                assignments,
            } => {
                let closed = c.d.close_signal();
                Some(tokio::select! {
                    r = c.sync(&member_id, generation, protocol, assignments) => Event::Synced(r),
                    _ = closed => Event::Close,
                })
            }
            Action::Wait => Some(c.wait(&m).await),
            Action::Heartbeat {
                member_id,
                generation,
            } => Some(Event::Heartbeat(c.heartbeat(&member_id, generation).await)),
            Action::Rediscover => {
                c.d.cluster
                    .invalidate_coordinator(CoordinatorKind::Group, &c.d.shared.group_id);
                None
            }
            Action::Backoff { attempt } => {
                let mut attempt = attempt;
                c.d.backoff(&mut attempt).await;
                Some(if c.d.closing() {
                    Event::Close
                } else {
                    Event::BackoffDone
                })
            }
            Action::Leave { member_id, reason } => {
                Some(Event::Left(c.leave(&member_id, &reason).await))
            }
            Action::WaitForPoll => {
                c.d.wait_for_poll().await;
                Some(if c.d.closing() {
                    Event::Close
                } else {
                    Event::Polled
                })
            }
            Action::Fatal(e) => {
                c.d.shared.metrics.rebalance_failed(false);
                c.d.fail(e).await;
                return;
            }
            Action::Stop => return,
        };
        if let Some(event) = event {
            count_failed_round(&c.d, &event);
            m.at(c.d.shared.state().coordinator.clone());
            queue.extend(m.handle(event));
        }
    }
}

/// Counts a JoinGroup or SyncGroup round that failed (the first join's
/// MEMBER_ID_REQUIRED is part of joining, KIP-394); the next round goes on
/// with the same rebalance.
fn count_failed_round(d: &Driver, event: &Event) {
    let failed = match event {
        Event::Joined(r) => r.as_ref().map_or(true, |j| {
            j.error_code != 0 && j.error_code != MEMBER_ID_REQUIRED
        }),
        Event::Synced(r) => r.as_ref().map_or(true, |s| s.error_code != 0),
        _ => false,
    };
    if failed {
        d.shared.metrics.rebalance_failed(true);
    }
}

/// The I/O half of a classic member.
struct Classic {
    d: Driver,
}

impl Classic {
    /// Revokes `parts` and waits for the ack, heartbeating meanwhile so a
    /// slow rebalance listener does not cost us the session (heartbeat
    /// answers are ignored here: the next rebalance step reports the same
    /// errors).
    async fn revoke(&mut self, m: &ClassicMember, parts: &BTreeSet<TopicPartition>) {
        let Some(mut rx) = self.d.start_revoke(parts).await else {
            return;
        };
        let deadline = Instant::now() + self.d.config.rebalance_timeout();
        loop {
            tokio::select! {
                _ = &mut rx => break,
                _ = tokio::time::sleep_until(deadline) => {
                    warn!(group = %self.d.shared.group_id, "revocation not acknowledged within the rebalance timeout");
                    break;
                }
                _ = tokio::time::sleep(self.d.config.heartbeat_interval) => {
                    if let Some((member_id, generation)) = m.heartbeat_identity() {
                        let _ = self.heartbeat(&member_id, generation).await;
                    }
                }
            }
        }
        let mut s = self.d.shared.state();
        s.assignment.retain(|tp| !parts.contains(tp));
    }

    /// Waits for the next heartbeat, a subscription change, a poll expiry or
    /// close.
    async fn wait(&mut self, m: &ClassicMember) -> Event {
        let subscription_changed = self.d.subscription_changed();
        tokio::select! {
                _ = tokio::time::sleep(self.d.config.heartbeat_interval) => {}
                _ = tokio::time::sleep_until(self.d.poll_deadline()) => {}
                _ = subscription_changed => {
                    tracing::info!(group = %self.d.shared.group_id, "subscription changed; rebalancing");
                    return Event::SubscriptionChanged;
                }
                _ = self.d.closed() => return Event::Close,
        }
        if self.d.poll_expired() {
            return Event::PollExpired;
        }
        let counts = partition_counts(&self.d.cluster.metadata(), &m.leader_topics());
        Event::HeartbeatDue { counts }
    }

    fn protocols(
        &mut self,
        owned: Vec<TopicPartition>,
        generation: i32,
    ) -> Result<Vec<JoinGroupRequestProtocol>> {
        let sub = Subscription {
            topics: self.d.read_topics(),
            owned,
            generation,
        };
        let metadata =
            subscription::encode_subscription(&sub).map_err(|source| Error::Protocol {
                broker: crate::error::Origin::Client,
                api: "JoinGroup metadata".into(),
                source,
            })?;
        Ok(self
            .d
            .config
            .assignment_strategies
            .iter()
            .map(|s| {
                JoinGroupRequestProtocol::default()
                    .with_name(StrBytes::from_static_str(s.name()))
                    .with_metadata(metadata.clone())
            })
            .collect())
    }

    async fn join(
        &mut self,
        member_id: &str,
        generation: i32,
        owned: Vec<TopicPartition>,
    ) -> Result<JoinGroupResponse> {
        let (_, conn) = coordinator(&self.d.cluster, &self.d.shared).await?;
        let version = conn.version_for::<JoinGroupRequest>(JOIN_GROUP_VERSIONS)?;
        let timeout = self.d.config.rebalance_timeout() + JOIN_SLACK;
        let req = JoinGroupRequest::default()
            .with_group_id(GroupId(StrBytes::from_string(
                self.d.shared.group_id.clone(),
            )))
            .with_session_timeout_ms(wire_ms(self.d.config.session_timeout))
            .with_rebalance_timeout_ms(wire_ms(self.d.config.rebalance_timeout()))
            .with_member_id(StrBytes::from_string(member_id.to_owned()))
            .with_group_instance_id(self.d.shared.instance_id.clone().map(StrBytes::from_string))
            .with_protocol_type(StrBytes::from_static_str("consumer"))
            .with_protocols(self.protocols(owned, generation)?);
        conn.send_at_with_timeout(&req, version, timeout).await
    }

    /// The leader's job: decode every subscription, run the assignor.
    async fn lead(
        &self,
        join: &JoinGroupResponse,
    ) -> Result<(Vec<SyncGroupRequestAssignment>, PartitionCounts)> {
        let protocol = join
            .protocol_name
            .as_ref()
            .map(|p| p.as_str())
            .unwrap_or("");
        let strategy = AssignmentStrategy::from_name(protocol).ok_or_else(|| {
            Error::config(
                "partition.assignment.strategy",
                format!("coordinator chose `{protocol}`, which this client does not implement"),
            )
        })?;
        let mut members = Vec::with_capacity(join.members.len());
        for m in &join.members {
            match subscription::decode_subscription(m.metadata.clone()) {
                Ok(sub) => members.push(Member {
                    member_id: m.member_id.as_str().to_owned(),
                    instance_id: m.group_instance_id.as_ref().map(|s| s.as_str().to_owned()),
                    subscription: sub,
                }),
                Err(e) => warn!(
                    group = %self.d.shared.group_id,
                    member = %m.member_id.as_str(),
                    error = %e,
                    "undecodable subscription; the member gets no partitions"
                ),
            }
        }
        let topics: Vec<String> = members
            .iter()
            .flat_map(|m| m.subscription.topics.iter().cloned())
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        self.d.cluster.track_topics(topics.iter().cloned());
        let meta = self.d.cluster.refresh_metadata(Some(&topics)).await?;
        let counts = partition_counts(&meta, &topics);
        let known: PartitionCounts = counts
            .iter()
            .filter(|(_, n)| **n > 0)
            .map(|(t, n)| (t.clone(), *n))
            .collect();
        let assignment = assignor::assign(strategy, &members, &known);
        debug!(group = %self.d.shared.group_id, ?strategy, members = members.len(), "leader assigned");
        let mut out = Vec::with_capacity(join.members.len());
        for m in &join.members {
            let parts = assignment
                .get(m.member_id.as_str())
                .map(Vec::as_slice)
                .unwrap_or(&[]);
            let bytes =
                subscription::encode_assignment(parts).map_err(|source| Error::Protocol {
                    broker: crate::error::Origin::Client,
                    api: "SyncGroup assignment".into(),
                    source,
                })?;
            out.push(
                SyncGroupRequestAssignment::default()
                    .with_member_id(m.member_id.clone())
                    .with_assignment(bytes),
            );
        }
        Ok((out, counts))
    }

    async fn sync(
        &mut self,
        member_id: &str,
        generation: i32,
        protocol: Option<StrBytes>,
        assignments: Vec<SyncGroupRequestAssignment>,
    ) -> Result<SyncGroupResponse> {
        let (_, conn) = coordinator(&self.d.cluster, &self.d.shared).await?;
        let version = conn.version_for::<SyncGroupRequest>(SYNC_GROUP_VERSIONS)?;
        let req = SyncGroupRequest::default()
            .with_group_id(GroupId(StrBytes::from_string(
                self.d.shared.group_id.clone(),
            )))
            .with_generation_id(generation)
            .with_member_id(StrBytes::from_string(member_id.to_owned()))
            .with_group_instance_id(self.d.shared.instance_id.clone().map(StrBytes::from_string))
            .with_protocol_type(Some(StrBytes::from_static_str("consumer")))
            .with_protocol_name(protocol)
            .with_assignments(assignments);
        let timeout = self.d.config.rebalance_timeout() + JOIN_SLACK;
        conn.send_at_with_timeout(&req, version, timeout).await
    }

    async fn heartbeat(&self, member_id: &str, generation: i32) -> Result<HeartbeatResponse> {
        let (_, conn) = coordinator(&self.d.cluster, &self.d.shared).await?;
        let version = conn.version_for::<HeartbeatRequest>(HEARTBEAT_VERSIONS)?;
        let req = HeartbeatRequest::default()
            .with_group_id(GroupId(StrBytes::from_string(
                self.d.shared.group_id.clone(),
            )))
            .with_generation_id(generation)
            .with_member_id(StrBytes::from_string(member_id.to_owned()))
            .with_group_instance_id(self.d.shared.instance_id.clone().map(StrBytes::from_string));
        let resp = conn.send_at(&req, version).await?;
        self.d.shared.metrics.heartbeat();
        Ok(resp)
    }

    /// LeaveGroup, best effort, bounded by `request.timeout.ms`.
    async fn leave(&self, member_id: &str, reason: &str) -> Result<LeaveGroupResponse> {
        let (_, conn) = coordinator(&self.d.cluster, &self.d.shared).await?;
        let version = conn.version_for::<LeaveGroupRequest>(LEAVE_GROUP_VERSIONS)?;
        let member = StrBytes::from_string(member_id.to_owned());
        let mut req = LeaveGroupRequest::default().with_group_id(GroupId(StrBytes::from_string(
            self.d.shared.group_id.clone(),
        )));
        if version >= 3 {
            req = req.with_members(vec![MemberIdentity::default()
                .with_member_id(member)
                .with_reason((version >= 5).then(|| StrBytes::from_string(reason.to_owned())))]);
        } else {
            req = req.with_member_id(member);
        }
        conn.send_at(&req, version).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partition_counts_give_unknown_topics_zero() {
        let meta = ClusterMetadata::default();
        let counts = partition_counts(&meta, &["t".into()]);
        assert_eq!(counts.get("t"), Some(&0), "{counts:?}");
    }
}
