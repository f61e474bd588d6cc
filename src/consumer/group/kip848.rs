//! The KIP-848 consumer group protocol's driver (`group.protocol=consumer`):
//! one task per member executes the actions of the
//! [`Kip848Member`](super::kip848_member::Kip848Member) state machine (send
//! ConsumerGroupHeartbeat, resolve topic ids, revoke, lose, assign, wait)
//! and feeds back answers, timers, polls and close as events. Since
//! ConsumerGroupHeartbeat v1 the client generates its member id (KIP-1082),
//! which is done here. Protocol:
//! <https://cwiki.apache.org/confluence/display/KAFKA/KIP-848%3A+The+Next+Generation+of+the+Consumer+Rebalance+Protocol>.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::hash::{BuildHasher, Hasher};
use std::sync::Arc;
use std::time::Duration;

use kafka_protocol::messages::consumer_group_heartbeat_request::TopicPartitions;
use kafka_protocol::messages::{
    ConsumerGroupHeartbeatRequest, ConsumerGroupHeartbeatResponse, GroupId, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use tokio::time::Instant;
use tracing::warn;

use super::config::wire_ms;
use super::events::GroupEvent;
use super::kip848_member::{Action, Event, Kip848Member};
use super::member::{coordinator, Driver};
use crate::cluster::CoordinatorKind;
use crate::error::Result;
use crate::protocol::versions::Versions;
use crate::TopicPartition;

const HEARTBEAT_VERSIONS: Versions = Versions::new(0, 1);

/// A random member id in Kafka's `Uuid` text form (22 characters of
/// URL-safe base64), as KIP-1082 asks clients to generate.
fn new_member_id() -> String {
    let mut bytes = [0u8; 16];
    for (i, chunk) in bytes.chunks_mut(8).enumerate() {
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_usize(i);
        h.write_u128(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos())
                .unwrap_or(0),
        );
        chunk.copy_from_slice(&h.finish().to_be_bytes());
    }
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut bits = u128::from_be_bytes(bytes);
    let mut out = String::with_capacity(22);
    // 22 sextets cover 132 bits; the top four are zero padding.
    for _ in 0..22 {
        out.insert(0, ALPHABET[(bits & 63) as usize] as char);
        bits >>= 6;
    }
    out
}

/// Runs membership until close or a fatal error, on a thread of its own
/// (see [`on_own_thread`](super::classic::on_own_thread)).
pub(crate) async fn run(d: Driver) {
    let group = d.shared.group_id.clone();
    super::classic::on_own_thread(&group, d, drive).await;
}

/// Executes the machine's actions in order, feeding back what each
/// produced, until close or a fatal error.
async fn drive(d: Driver) {
    let mut m = Kip848Member::new(
        d.shared.group_id.clone(),
        new_member_id(),
        d.shared.instance_id.is_some(),
        d.config.heartbeat_interval,
    );
    let mut k = Kip848 {
        subscription_changed: Box::pin(d.subscription_changed()),
        d,
    };
    let mut queue: VecDeque<Action> = m.handle(Event::Start).into();
    while let Some(action) = queue.pop_front() {
        let event = match action {
            Action::Publish {
                member_id,
                epoch,
                owned,
            } => {
                k.d.publish(&member_id, epoch, &owned);
                None
            }
            Action::Heartbeat {
                member_id,
                epoch,
                owned,
            } if epoch >= 0 => Some(if k.d.closing() {
                Event::Close
            } else if k.d.poll_expired() {
                Event::PollExpired
            } else {
                let closed = k.d.close_signal();
                tokio::select! {
                    r = k.send(&member_id, epoch, &owned) => Event::Heartbeat(r),
                    _ = closed => Event::Close,
                }
            }),
            // A leave: best effort, never cancelled.
            Action::Heartbeat {
                member_id,
                epoch,
                owned,
            } => Some(Event::Heartbeat(k.send(&member_id, epoch, &owned).await)),
            Action::Resolve(wire) => {
                k.d.shared.metrics.rebalance_started();
                Some(Event::Resolved(k.resolve(&wire).await))
            }
            Action::Revoke(parts) => {
                k.revoke(&mut m, &parts).await;
                Some(Event::RevokeDone)
            }
            Action::Lose(mut parts) => {
                k.d.shared.metrics.rebalance_failed(false);
                k.d.lose(&mut parts).await;
                None
            }
            Action::Assigned(added) => {
                k.d.shared.metrics.rebalance_completed();
                k.d.emit(GroupEvent::Assigned(added)).await;
                None
            }
            Action::Wait { interval } => {
                // Settled: a target that changed nothing was no rebalance.
                k.d.shared.metrics.rebalance_abandoned();
                Some(k.wait(interval).await)
            }
            Action::Rediscover => {
                k.d.cluster
                    .invalidate_coordinator(CoordinatorKind::Group, &k.d.shared.group_id);
                None
            }
            Action::Backoff { attempt } => {
                let mut attempt = attempt;
                k.d.backoff(&mut attempt).await;
                Some(if k.d.closing() {
                    Event::Close
                } else {
                    Event::BackoffDone
                })
            }
            Action::WaitForPoll => {
                k.d.wait_for_poll().await;
                Some(if k.d.closing() {
                    Event::Close
                } else {
                    Event::Polled
                })
            }
            Action::Fatal(e) => {
                k.d.shared.metrics.rebalance_failed(false);
                k.d.fail(e).await;
                return;
            }
            Action::Stop => return,
        };
        if let Some(event) = event {
            m.at(k.d.shared.state().coordinator.clone());
            queue.extend(m.handle(event));
        }
    }
}

/// The I/O half of a KIP-848 member.
struct Kip848 {
    d: Driver,
    /// Resolves when the subscription changes (sent at the next heartbeat,
    /// at once).
    subscription_changed: std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send + Sync>>,
}

impl Kip848 {
    /// Topic ids for what we own (from metadata); partitions of topics the
    /// metadata no longer knows are left out.
    fn owned_wire(&self, owned: &BTreeSet<TopicPartition>) -> Vec<TopicPartitions> {
        let meta = self.d.cluster.metadata();
        let mut by_topic: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
        for tp in owned {
            by_topic.entry(&tp.topic).or_default().push(tp.partition);
        }
        by_topic
            .into_iter()
            .filter_map(|(t, ps)| {
                let id = meta.topics.get(t)?.id;
                let uuid = id.to_vec().try_into().ok()?;
                Some(
                    TopicPartitions::default()
                        .with_topic_id(uuid)
                        .with_partitions(ps),
                )
            })
            .collect()
    }

    fn request(
        &self,
        member_id: &str,
        epoch: i32,
        owned: &BTreeSet<TopicPartition>,
    ) -> ConsumerGroupHeartbeatRequest {
        let base = ConsumerGroupHeartbeatRequest::default()
            .with_group_id(GroupId(StrBytes::from_string(
                self.d.shared.group_id.clone(),
            )))
            .with_member_id(StrBytes::from_string(member_id.to_owned()))
            .with_member_epoch(epoch)
            .with_instance_id(self.d.shared.instance_id.clone().map(StrBytes::from_string));
        if epoch < 0 {
            return base;
        }
        base.with_rebalance_timeout_ms(wire_ms(self.d.config.rebalance_timeout()))
            .with_subscribed_topic_names(Some(
                self.d
                    .topics()
                    .into_iter()
                    .map(|t| TopicName(StrBytes::from_string(t)))
                    .collect(),
            ))
            .with_server_assignor(
                self.d
                    .config
                    .remote_assignor
                    .clone()
                    .map(StrBytes::from_string),
            )
            .with_topic_partitions(Some(self.owned_wire(owned)))
    }

    async fn send(
        &self,
        member_id: &str,
        epoch: i32,
        owned: &BTreeSet<TopicPartition>,
    ) -> Result<ConsumerGroupHeartbeatResponse> {
        let req = self.request(member_id, epoch, owned);
        let (_, conn) = coordinator(&self.d.cluster, &self.d.shared).await?;
        let version = conn.version_for::<ConsumerGroupHeartbeatRequest>(HEARTBEAT_VERSIONS)?;
        let resp = conn.send_at(&req, version).await?;
        self.d.shared.metrics.heartbeat();
        Ok(resp)
    }

    /// Waits `interval`, for the poll deadline, a subscription change (sent
    /// at once) or close.
    async fn wait(&mut self, interval: Duration) -> Event {
        let closed = self.d.close_signal();
        tokio::select! {
            _ = tokio::time::sleep(interval) => {}
            _ = tokio::time::sleep_until(self.d.poll_deadline()) => {}
            _ = self.subscription_changed.as_mut() => {
                self.d.read_topics();
                self.subscription_changed = Box::pin(self.d.subscription_changed());
            }
            _ = closed => return Event::Close,
        }
        Event::HeartbeatDue
    }

    /// Topic ids to names, refreshing metadata once for unknown ids or
    /// partitions. What the refreshed metadata still lacks (an unknown id,
    /// a partition past the topic's count) is left out of the assignment,
    /// so the fetcher never holds a partition no broker leads.
    async fn resolve(
        &self,
        wire: &[kafka_protocol::messages::consumer_group_heartbeat_response::TopicPartitions],
    ) -> BTreeSet<TopicPartition> {
        let lookup = |meta: &crate::ClusterMetadata| -> (BTreeSet<TopicPartition>, bool) {
            let topics: BTreeMap<[u8; 16], &crate::cluster::TopicInfo> =
                meta.topics.values().map(|t| (t.id, t)).collect();
            let mut missing = false;
            let mut out = BTreeSet::new();
            for t in wire {
                let Some(info) = topics.get(t.topic_id.as_bytes()) else {
                    missing = true;
                    continue;
                };
                let name: Arc<str> = Arc::from(info.name.as_str());
                for p in &t.partitions {
                    if meta.partition(&info.name, *p).is_some() {
                        out.insert(TopicPartition::new(name.clone(), *p));
                    } else {
                        missing = true;
                    }
                }
            }
            (out, missing)
        };
        let (out, missing) = lookup(&self.d.cluster.metadata());
        if !missing {
            return out;
        }
        match self
            .d
            .cluster
            .refresh_metadata(Some(&self.d.topics()))
            .await
        {
            Ok(meta) => {
                let (out, missing) = lookup(&meta);
                if missing {
                    warn!(group = %self.d.shared.group_id, "assigned topic ids or partitions unknown to metadata after a refresh; left out of the assignment");
                }
                out
            }
            Err(e) => {
                warn!(group = %self.d.shared.group_id, error = %e, "cannot resolve assigned topic ids");
                out
            }
        }
    }

    /// Revokes `parts`, heartbeating (with what we still own) meanwhile and
    /// feeding the answers to the machine.
    async fn revoke(&mut self, m: &mut Kip848Member, parts: &BTreeSet<TopicPartition>) {
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
                _ = tokio::time::sleep(m.interval()) => {
                    let Action::Heartbeat { member_id, epoch, owned } = m.heartbeat_action() else {
                        continue;
                    };
                    let r = self.send(&member_id, epoch, &owned).await;
                    m.at(self.d.shared.state().coordinator.clone());
                    for action in m.handle(Event::Heartbeat(r)) {
                        if let Action::Publish { member_id, epoch, owned } = action {
                            self.d.publish(&member_id, epoch, &owned);
                        }
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn member_ids_look_like_kafka_uuids_and_differ() {
        let a = new_member_id();
        let b = new_member_id();
        assert_eq!(a.len(), 22);
        assert!(a
            .bytes()
            .all(|c| c.is_ascii_alphanumeric() || c == b'-' || c == b'_'));
        assert_ne!(a, b);
    }
}
