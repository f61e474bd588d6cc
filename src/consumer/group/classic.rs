//! The classic group protocol, driven by one task per member
//! (<https://kafka.apache.org/protocol#The_Messages_JoinGroup>, KIP-62,
//! KIP-345, KIP-394, KIP-429, KIP-814).
//!
//! FindCoordinator → JoinGroup (a dynamic member first gets
//! MEMBER_ID_REQUIRED and a member id, KIP-394) → the leader runs the chosen
//! assignor over every member's subscription → SyncGroup → Heartbeat every
//! `heartbeat.interval.ms`. REBALANCE_IN_PROGRESS means rejoin;
//! UNKNOWN_MEMBER_ID / ILLEGAL_GENERATION mean we were fenced: the
//! partitions are lost and we rejoin from scratch; coordinator errors and
//! disconnects mean look the coordinator up again.
//!
//! Eager assignors (range, roundrobin) revoke everything before rejoining.
//! When every configured assignor is cooperative (KIP-429), only the
//! partitions missing from the new assignment are revoked, after SyncGroup,
//! and the member then rejoins so the freed partitions can be handed on.
//!
//! Static members (KIP-345) send `group.instance.id`, send no LeaveGroup on
//! close, and get their previous assignment back without a rebalance when
//! they return within `session.timeout.ms` (the coordinator may skip the
//! leader's assignment, KIP-814).

use std::collections::BTreeSet;
use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::messages::join_group_request::JoinGroupRequestProtocol;
use kafka_protocol::messages::leave_group_request::MemberIdentity;
use kafka_protocol::messages::sync_group_request::SyncGroupRequestAssignment;
use kafka_protocol::messages::{
    GroupId, HeartbeatRequest, JoinGroupRequest, JoinGroupResponse, LeaveGroupRequest,
    SyncGroupRequest,
};
use kafka_protocol::protocol::StrBytes;
use tokio::time::Instant;
use tracing::{debug, info, warn};

use super::assignor::{self, Member, PartitionCounts};
use super::config::{wire_ms, AssignmentStrategy};
use super::events::GroupEvent;
use super::member::{coordinator, kafka_error, needs_rediscovery, Driver};
use crate::cluster::{ClusterMetadata, CoordinatorKind};
use crate::error::{Error, KafkaCode, Result};
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

const REBALANCE_IN_PROGRESS: i16 = 27;
const UNKNOWN_MEMBER_ID: i16 = 25;
const ILLEGAL_GENERATION: i16 = 22;
const MEMBER_ID_REQUIRED: i16 = 79;
const COORDINATOR_LOAD_IN_PROGRESS: i16 = 14;

/// What to do after a step failed or the heartbeat loop stopped.
#[derive(Debug)]
enum Next {
    /// A new rebalance started: rejoin now.
    Rejoin,
    /// A transient failure: rejoin after a backoff.
    Retry,
    /// Fenced: lose partitions, forget the generation (and the member id).
    Reset {
        forget_member_id: bool,
    },
    Rediscover,
    PollExpired,
    Close,
    Fatal(Error),
}

fn classify(e: Error) -> Next {
    match e.kafka_code().map(KafkaCode::code) {
        Some(REBALANCE_IN_PROGRESS) => Next::Rejoin,
        Some(UNKNOWN_MEMBER_ID) => Next::Reset {
            forget_member_id: true,
        },
        Some(ILLEGAL_GENERATION) => Next::Reset {
            forget_member_id: false,
        },
        Some(COORDINATOR_LOAD_IN_PROGRESS) => Next::Retry,
        _ if needs_rediscovery(&e) => Next::Rediscover,
        _ if e.is_retriable() => Next::Retry,
        _ => Next::Fatal(e),
    }
}

/// Partition counts of `topics` that metadata knows without error.
fn partition_counts(meta: &ClusterMetadata, topics: &[String]) -> PartitionCounts {
    topics
        .iter()
        .filter_map(|t| {
            let info = meta.topics.get(t)?;
            info.error
                .is_none()
                .then(|| (t.clone(), info.partitions.len() as i32))
        })
        .collect()
}

/// A classic member's private state.
struct Classic {
    d: Driver,
    member_id: String,
    generation: i32,
    owned: BTreeSet<TopicPartition>,
    cooperative: bool,
    /// As leader: the partition counts the assignment was computed from. A
    /// change seen in later metadata (partitions added) triggers a rejoin.
    assigned_counts: Option<PartitionCounts>,
}

/// Runs membership until close or a fatal error.
pub(crate) async fn run(d: Driver) {
    let cooperative = d.config.is_cooperative();
    let mut m = Classic {
        d,
        member_id: String::new(),
        generation: -1,
        owned: BTreeSet::new(),
        cooperative,
        assigned_counts: None,
    };
    let mut attempt = 0u32;
    loop {
        let next = match m.join_and_sync().await {
            Ok(follow_up) => {
                attempt = 0;
                if follow_up {
                    continue;
                }
                m.heartbeat_loop().await
            }
            Err(next) => next,
        };
        match next {
            // At once after a stable period; with backoff when rebalances
            // keep failing (so a flapping group is never hammered).
            Next::Rejoin if attempt == 0 => attempt = 1,
            Next::Rejoin | Next::Retry => m.d.backoff(&mut attempt).await,
            Next::Rediscover => {
                m.d.cluster
                    .invalidate_coordinator(CoordinatorKind::Group, &m.d.shared.group_id);
                m.d.backoff(&mut attempt).await;
            }
            Next::Reset { forget_member_id } => {
                info!(group = %m.d.shared.group_id, member = %m.member_id, "fenced; partitions lost, rejoining");
                m.reset(forget_member_id).await;
            }
            Next::PollExpired => {
                warn!(
                    group = %m.d.shared.group_id,
                    member = %m.member_id,
                    "max.poll.interval.ms expired without a poll; leaving the group"
                );
                m.leave("consumer poll timeout has expired").await;
                m.reset(true).await;
                m.d.wait_for_poll().await;
            }
            Next::Close => {
                m.close().await;
                return;
            }
            Next::Fatal(e) => {
                warn!(group = %m.d.shared.group_id, error = %e, "membership failed");
                m.d.emit(GroupEvent::Fatal(e)).await;
                return;
            }
        }
        if m.d.closing() {
            m.close().await;
            return;
        }
    }
}

impl Classic {
    async fn reset(&mut self, forget_member_id: bool) {
        self.generation = -1;
        if forget_member_id {
            self.member_id.clear();
        }
        self.d.publish(&self.member_id, -1, &BTreeSet::new());
        self.d.lose(&mut self.owned).await;
    }

    /// Revokes `parts` and waits for the ack, heartbeating meanwhile so a
    /// slow rebalance listener does not cost us the session.
    async fn revoke(&mut self, parts: &BTreeSet<TopicPartition>) {
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
                    let _ = self.heartbeat().await;
                }
            }
        }
        self.owned.retain(|tp| !parts.contains(tp));
        self.d.shared.state().assignment = self.owned.clone();
    }

    /// One rebalance. `Ok(true)` asks for a follow-up rebalance (cooperative
    /// revocation happened).
    async fn join_and_sync(&mut self) -> Result<bool, Next> {
        if self.d.closing() {
            return Err(Next::Close);
        }
        if self.d.poll_expired() {
            return Err(Next::PollExpired);
        }
        if !self.cooperative && !self.owned.is_empty() {
            let all = self.owned.clone();
            self.revoke(&all).await;
        }
        let closed = self.d.close_signal();
        let join = tokio::select! {
            r = self.join() => r.map_err(classify)?,
            _ = closed => return Err(Next::Close),
        };
        self.assigned_counts = None;
        let assignments = if join.leader == join.member_id && !join.skip_assignment {
            let (assignments, counts) = self.lead(&join).await.map_err(classify)?;
            self.assigned_counts = Some(counts);
            assignments
        } else {
            Vec::new()
        };
        let closed = self.d.close_signal();
        let assigned = tokio::select! {
            r = self.sync(&join, assignments) => r.map_err(classify)?,
            _ = closed => return Err(Next::Close),
        };
        let assigned: BTreeSet<TopicPartition> = assigned.into_iter().collect();
        let revoked: BTreeSet<TopicPartition> = self.owned.difference(&assigned).cloned().collect();
        let added: Vec<TopicPartition> = assigned.difference(&self.owned).cloned().collect();
        info!(
            group = %self.d.shared.group_id,
            member = %self.member_id,
            generation = self.generation,
            assigned = assigned.len(),
            revoked = revoked.len(),
            "joined"
        );
        self.revoke(&revoked).await;
        self.owned = assigned;
        self.d
            .publish(&self.member_id, self.generation, &self.owned);
        self.d.emit(GroupEvent::Assigned(added)).await;
        Ok(self.cooperative && !revoked.is_empty())
    }

    fn protocols(&mut self) -> Result<Vec<JoinGroupRequestProtocol>> {
        let sub = Subscription {
            topics: self.d.read_topics(),
            owned: self.owned.iter().cloned().collect(),
            generation: self.generation,
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

    async fn join(&mut self) -> Result<JoinGroupResponse> {
        let (_, conn) = coordinator(&self.d.cluster, &self.d.shared).await?;
        let version = conn.version_for::<JoinGroupRequest>(JOIN_GROUP_VERSIONS)?;
        let timeout = self.d.config.rebalance_timeout() + JOIN_SLACK;
        // At most one MEMBER_ID_REQUIRED round (KIP-394).
        for _ in 0..2 {
            let req = JoinGroupRequest::default()
                .with_group_id(GroupId(StrBytes::from_string(
                    self.d.shared.group_id.clone(),
                )))
                .with_session_timeout_ms(wire_ms(self.d.config.session_timeout))
                .with_rebalance_timeout_ms(wire_ms(self.d.config.rebalance_timeout()))
                .with_member_id(StrBytes::from_string(self.member_id.clone()))
                .with_group_instance_id(
                    self.d.shared.instance_id.clone().map(StrBytes::from_string),
                )
                .with_protocol_type(StrBytes::from_static_str("consumer"))
                .with_protocols(self.protocols()?);
            let resp = conn.send_at_with_timeout(&req, version, timeout).await?;
            if resp.error_code == MEMBER_ID_REQUIRED {
                self.member_id = resp.member_id.as_str().to_owned();
                debug!(group = %self.d.shared.group_id, member = %self.member_id, "member id assigned");
                continue;
            }
            if let Some(code) = KafkaCode::from_code(resp.error_code) {
                return Err(kafka_error(code, "JoinGroup", &self.d.shared));
            }
            self.member_id = resp.member_id.as_str().to_owned();
            self.generation = resp.generation_id;
            self.d
                .publish(&self.member_id, self.generation, &self.owned);
            return Ok(resp);
        }
        Err(kafka_error(
            KafkaCode::from_code(MEMBER_ID_REQUIRED).unwrap_or(KafkaCode::NOT_COORDINATOR),
            "JoinGroup (member id required twice)",
            &self.d.shared,
        ))
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
        let assignment = assignor::assign(strategy, &members, &counts);
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

    /// As leader, whether metadata now shows other partition counts than
    /// the assignment used (the Java leader rejoins then too).
    fn metadata_changed(&self) -> bool {
        let Some(used) = &self.assigned_counts else {
            return false;
        };
        let topics: Vec<String> = used.keys().cloned().collect();
        partition_counts(&self.d.cluster.metadata(), &topics) != *used
    }

    async fn sync(
        &mut self,
        join: &JoinGroupResponse,
        assignments: Vec<SyncGroupRequestAssignment>,
    ) -> Result<Vec<TopicPartition>> {
        let (_, conn) = coordinator(&self.d.cluster, &self.d.shared).await?;
        let version = conn.version_for::<SyncGroupRequest>(SYNC_GROUP_VERSIONS)?;
        let req = SyncGroupRequest::default()
            .with_group_id(GroupId(StrBytes::from_string(
                self.d.shared.group_id.clone(),
            )))
            .with_generation_id(self.generation)
            .with_member_id(StrBytes::from_string(self.member_id.clone()))
            .with_group_instance_id(self.d.shared.instance_id.clone().map(StrBytes::from_string))
            .with_protocol_type(Some(StrBytes::from_static_str("consumer")))
            .with_protocol_name(join.protocol_name.clone())
            .with_assignments(assignments);
        let timeout = self.d.config.rebalance_timeout() + JOIN_SLACK;
        let resp = conn.send_at_with_timeout(&req, version, timeout).await?;
        if let Some(code) = KafkaCode::from_code(resp.error_code) {
            return Err(kafka_error(code, "SyncGroup", &self.d.shared));
        }
        let bytes: Bytes = resp.assignment;
        subscription::decode_assignment(bytes).map_err(|source| Error::Protocol {
            broker: self.d.shared.describe().into(),
            api: format!("SyncGroup v{version} assignment"),
            source,
        })
    }

    async fn heartbeat(&self) -> Result<()> {
        let (_, conn) = coordinator(&self.d.cluster, &self.d.shared).await?;
        let version = conn.version_for::<HeartbeatRequest>(HEARTBEAT_VERSIONS)?;
        let req = HeartbeatRequest::default()
            .with_group_id(GroupId(StrBytes::from_string(
                self.d.shared.group_id.clone(),
            )))
            .with_generation_id(self.generation)
            .with_member_id(StrBytes::from_string(self.member_id.clone()))
            .with_group_instance_id(self.d.shared.instance_id.clone().map(StrBytes::from_string));
        let resp = conn.send_at(&req, version).await?;
        match KafkaCode::from_code(resp.error_code) {
            None => Ok(()),
            Some(code) => Err(kafka_error(code, "Heartbeat", &self.d.shared)),
        }
    }

    /// Heartbeats until something needs the membership loop.
    async fn heartbeat_loop(&mut self) -> Next {
        let mut attempt = 0u32;
        let subscription_changed = self.d.subscription_changed();
        tokio::pin!(subscription_changed);
        loop {
            tokio::select! {
                _ = tokio::time::sleep(self.d.config.heartbeat_interval) => {}
                _ = tokio::time::sleep_until(self.d.poll_deadline()) => {}
                _ = &mut subscription_changed => {
                    info!(group = %self.d.shared.group_id, "subscription changed; rebalancing");
                    return Next::Rejoin;
                }
                _ = self.d.closed() => return Next::Close,
            }
            if self.d.poll_expired() {
                return Next::PollExpired;
            }
            if self.metadata_changed() {
                info!(group = %self.d.shared.group_id, "subscribed topics' partitions changed; rebalancing");
                return Next::Rejoin;
            }
            match self.heartbeat().await {
                Ok(()) => attempt = 0,
                Err(e) => match classify(e) {
                    // The member may still be in the group: find the
                    // coordinator and keep heartbeating.
                    Next::Rediscover => {
                        self.d.cluster.invalidate_coordinator(
                            CoordinatorKind::Group,
                            &self.d.shared.group_id,
                        );
                        self.d.backoff(&mut attempt).await;
                    }
                    next => return next,
                },
            }
        }
    }

    /// LeaveGroup, for dynamic members only (KIP-345: a static member's
    /// absence is noticed by session timeout, so a quick restart costs no
    /// rebalance). Best effort, bounded by `request.timeout.ms`.
    async fn leave(&self, reason: &str) {
        if self.d.shared.instance_id.is_some() || self.member_id.is_empty() {
            return;
        }
        let result: Result<()> = async {
            let (_, conn) = coordinator(&self.d.cluster, &self.d.shared).await?;
            let version = conn.version_for::<LeaveGroupRequest>(LEAVE_GROUP_VERSIONS)?;
            let member = StrBytes::from_string(self.member_id.clone());
            let mut req = LeaveGroupRequest::default().with_group_id(GroupId(
                StrBytes::from_string(self.d.shared.group_id.clone()),
            ));
            if version >= 3 {
                req = req.with_members(vec![MemberIdentity::default()
                    .with_member_id(member)
                    .with_reason(
                        (version >= 5).then(|| StrBytes::from_string(reason.to_owned())),
                    )]);
            } else {
                req = req.with_member_id(member);
            }
            let resp = conn.send_at(&req, version).await?;
            let code = resp
                .members
                .iter()
                .map(|m| m.error_code)
                .find(|c| *c != 0)
                .unwrap_or(resp.error_code);
            match KafkaCode::from_code(code) {
                None => Ok(()),
                Some(code) => Err(kafka_error(code, "LeaveGroup", &self.d.shared)),
            }
        }
        .await;
        if let Err(e) = result {
            debug!(group = %self.d.shared.group_id, error = %e, "LeaveGroup failed");
        }
    }

    /// Java semantics: revoke what we own (so the consumer can commit), then
    /// leave (dynamic members only).
    async fn close(&mut self) {
        let owned = self.owned.clone();
        self.revoke(&owned).await;
        self.leave("the consumer is being closed").await;
        self.d.publish("", -1, &BTreeSet::new());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kafka(code: i16) -> Error {
        Error::Kafka {
            code: KafkaCode::from_code(code).unwrap(),
            context: "test".into(),
        }
    }

    #[test]
    fn errors_map_to_the_java_reactions() {
        assert!(matches!(classify(kafka(27)), Next::Rejoin));
        assert!(matches!(
            classify(kafka(25)),
            Next::Reset {
                forget_member_id: true
            }
        ));
        assert!(matches!(
            classify(kafka(22)),
            Next::Reset {
                forget_member_id: false
            }
        ));
        assert!(matches!(classify(kafka(16)), Next::Rediscover));
        assert!(matches!(classify(kafka(15)), Next::Rediscover));
        assert!(matches!(classify(kafka(14)), Next::Retry));
        let gone = Error::Disconnected {
            broker: "broker 1".into(),
            api: Some("Heartbeat".into()),
            reason: "closed".into(),
        };
        assert!(matches!(classify(gone), Next::Rediscover));
        // FENCED_INSTANCE_ID, GROUP_AUTHORIZATION_FAILED,
        // INCONSISTENT_GROUP_PROTOCOL are fatal.
        for fatal in [82, 30, 23] {
            assert!(matches!(classify(kafka(fatal)), Next::Fatal(_)), "{fatal}");
        }
    }

    #[test]
    fn partition_counts_skip_unknown_and_failed_topics() {
        let meta = ClusterMetadata::default();
        assert!(partition_counts(&meta, &["t".into()]).is_empty());
    }
}
