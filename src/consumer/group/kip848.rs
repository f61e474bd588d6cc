//! The consumer group protocol of KIP-848 (`group.protocol=consumer`): one
//! ConsumerGroupHeartbeat loop, a member epoch, and a server-side assignor.
//!
//! The member joins with epoch 0 and its subscription. Each response may
//! carry the member's new assignment (topic ids and partitions). The member
//! reconciles: partitions no longer assigned are revoked first (the consumer
//! acks), then new ones are added, and the next heartbeat reports what the
//! member now owns, which is how the coordinator learns a revocation is done
//! and may hand the partitions on. FENCED_MEMBER_EPOCH and UNKNOWN_MEMBER_ID
//! mean the partitions are lost; the member rejoins with epoch 0. Leaving
//! sends epoch -1, or -2 for a static member (KIP-345 semantics carried into
//! KIP-848: its assignment is kept for the session timeout). Since
//! ConsumerGroupHeartbeat v1 the client generates its member id (KIP-1082).

use std::collections::{BTreeMap, BTreeSet};
use std::hash::{BuildHasher, Hasher};
use std::sync::Arc;
use std::time::Duration;

use kafka_protocol::messages::consumer_group_heartbeat_request::TopicPartitions;
use kafka_protocol::messages::consumer_group_heartbeat_response::Assignment;
use kafka_protocol::messages::{
    ConsumerGroupHeartbeatRequest, ConsumerGroupHeartbeatResponse, GroupId, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use tokio::time::Instant;
use tracing::{debug, info, warn};

use super::config::wire_ms;
use super::events::GroupEvent;
use super::member::{coordinator, kafka_error, needs_rediscovery, Driver};
use crate::cluster::CoordinatorKind;
use crate::error::{KafkaCode, Result};
use crate::protocol::versions::Versions;
use crate::TopicPartition;

const HEARTBEAT_VERSIONS: Versions = Versions::new(0, 1);
const UNKNOWN_MEMBER_ID: i16 = 25;
const FENCED_MEMBER_EPOCH: i16 = 110;
const COORDINATOR_LOAD_IN_PROGRESS: i16 = 14;
const LEAVE_EPOCH: i32 = -1;
const LEAVE_STATIC_EPOCH: i32 = -2;

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

struct Kip848 {
    d: Driver,
    member_id: String,
    epoch: i32,
    owned: BTreeSet<TopicPartition>,
    interval: Duration,
    /// An assignment that arrived while a revocation was being acked: the
    /// coordinator sends each assignment once, so it is kept, not dropped.
    pending: Option<Assignment>,
}

/// Runs membership until close or a fatal error.
pub(crate) async fn run(d: Driver) {
    let interval = d.config.heartbeat_interval;
    let mut m = Kip848 {
        d,
        member_id: new_member_id(),
        epoch: 0,
        owned: BTreeSet::new(),
        interval,
        pending: None,
    };
    let mut attempt = 0u32;
    let mut subscription_changed = Box::pin(m.d.subscription_changed());
    loop {
        if m.d.closing() {
            m.leave(true).await;
            return;
        }
        if m.d.poll_expired() {
            warn!(group = %m.d.shared.group_id, member = %m.member_id, "max.poll.interval.ms expired without a poll; leaving the group");
            // The application is not polling: nobody would ack a revocation.
            m.leave(false).await;
            m.fenced().await;
            m.d.wait_for_poll().await;
            continue;
        }
        let closed = m.d.close_signal();
        let result = tokio::select! {
            r = m.heartbeat() => r,
            _ = closed => continue,
        };
        match result {
            Ok(changed) => {
                attempt = 0;
                if changed {
                    // Report the reconciled assignment right away.
                    continue;
                }
                let closed = m.d.close_signal();
                tokio::select! {
                    _ = tokio::time::sleep(m.interval) => {}
                    _ = tokio::time::sleep_until(m.d.poll_deadline()) => {}
                    // A new subscription is sent at once.
                    _ = subscription_changed.as_mut() => {
                        m.d.read_topics();
                        subscription_changed.set(m.d.subscription_changed());
                    }
                    _ = closed => {}
                }
            }
            Err(e) => match e.kafka_code().map(KafkaCode::code) {
                Some(FENCED_MEMBER_EPOCH | UNKNOWN_MEMBER_ID) => {
                    info!(group = %m.d.shared.group_id, member = %m.member_id, error = %e, "fenced; partitions lost, rejoining");
                    m.fenced().await;
                }
                Some(COORDINATOR_LOAD_IN_PROGRESS) => m.d.backoff(&mut attempt).await,
                _ if needs_rediscovery(&e) => {
                    m.d.cluster
                        .invalidate_coordinator(CoordinatorKind::Group, &m.d.shared.group_id);
                    m.d.backoff(&mut attempt).await;
                }
                _ if e.is_retriable() => m.d.backoff(&mut attempt).await,
                _ => {
                    warn!(group = %m.d.shared.group_id, error = %e, "membership failed");
                    m.d.emit(GroupEvent::Fatal(e)).await;
                    return;
                }
            },
        }
    }
}

impl Kip848 {
    async fn fenced(&mut self) {
        self.epoch = 0;
        self.pending = None;
        self.d.publish(&self.member_id, -1, &BTreeSet::new());
        self.d.lose(&mut self.owned).await;
    }

    /// Topic ids for what we own (from metadata); partitions of topics the
    /// metadata no longer knows are left out.
    fn owned_wire(&self) -> Vec<TopicPartitions> {
        let meta = self.d.cluster.metadata();
        let mut by_topic: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
        for tp in &self.owned {
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

    fn request(&self, epoch: i32) -> ConsumerGroupHeartbeatRequest {
        let base = ConsumerGroupHeartbeatRequest::default()
            .with_group_id(GroupId(StrBytes::from_string(
                self.d.shared.group_id.clone(),
            )))
            .with_member_id(StrBytes::from_string(self.member_id.clone()))
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
            .with_topic_partitions(Some(self.owned_wire()))
    }

    async fn send(
        &self,
        req: &ConsumerGroupHeartbeatRequest,
    ) -> Result<ConsumerGroupHeartbeatResponse> {
        let (_, conn) = coordinator(&self.d.cluster, &self.d.shared).await?;
        let version = conn.version_for::<ConsumerGroupHeartbeatRequest>(HEARTBEAT_VERSIONS)?;
        let resp = conn.send_at(req, version).await?;
        match KafkaCode::from_code(resp.error_code) {
            None => Ok(resp),
            Some(code) => {
                let msg = resp
                    .error_message
                    .as_ref()
                    .map(|m| m.as_str())
                    .unwrap_or("");
                let api = if msg.is_empty() {
                    "ConsumerGroupHeartbeat".to_owned()
                } else {
                    format!("ConsumerGroupHeartbeat ({msg})")
                };
                Err(kafka_error(code, &api, &self.d.shared))
            }
        }
    }

    /// Takes the member id, epoch and interval from a response; keeps its
    /// assignment, if any, in `pending`.
    fn absorb(&mut self, resp: ConsumerGroupHeartbeatResponse) {
        if let Some(id) = resp.member_id.as_ref().filter(|id| !id.is_empty()) {
            self.member_id = id.as_str().to_owned();
        }
        self.epoch = resp.member_epoch;
        if resp.heartbeat_interval_ms > 0 {
            self.interval = Duration::from_millis(resp.heartbeat_interval_ms as u64);
        }
        if resp.assignment.is_some() {
            self.pending = resp.assignment;
        }
        self.d.publish(&self.member_id, self.epoch, &self.owned);
    }

    /// One heartbeat; `Ok(true)` when the assignment changed.
    async fn heartbeat(&mut self) -> Result<bool> {
        let resp = self.send(&self.request(self.epoch)).await?;
        self.absorb(resp);
        let Some(assignment) = self.pending.take() else {
            return Ok(false);
        };
        let target = self.resolve(&assignment.topic_partitions).await;
        let revoked: BTreeSet<TopicPartition> = self.owned.difference(&target).cloned().collect();
        let added: Vec<TopicPartition> = target.difference(&self.owned).cloned().collect();
        if revoked.is_empty() && added.is_empty() {
            return Ok(false);
        }
        debug!(group = %self.d.shared.group_id, member = %self.member_id, epoch = self.epoch, revoked = revoked.len(), added = added.len(), "reconciling");
        self.revoke(&revoked).await;
        self.owned.extend(added.iter().cloned());
        self.d.publish(&self.member_id, self.epoch, &self.owned);
        self.d.emit(GroupEvent::Assigned(added)).await;
        Ok(true)
    }

    /// Topic ids to names, refreshing metadata once for unknown ids.
    async fn resolve(
        &self,
        wire: &[kafka_protocol::messages::consumer_group_heartbeat_response::TopicPartitions],
    ) -> BTreeSet<TopicPartition> {
        let lookup = |meta: &crate::ClusterMetadata| -> (BTreeSet<TopicPartition>, bool) {
            let names: BTreeMap<[u8; 16], Arc<str>> = meta
                .topics
                .values()
                .map(|t| (t.id, Arc::from(t.name.as_str())))
                .collect();
            let mut missing = false;
            let mut out = BTreeSet::new();
            for t in wire {
                match names.get(t.topic_id.as_bytes()) {
                    Some(name) => out.extend(
                        t.partitions
                            .iter()
                            .map(|p| TopicPartition::new(name.clone(), *p)),
                    ),
                    None => missing = true,
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
            Ok(meta) => lookup(&meta).0,
            Err(e) => {
                warn!(group = %self.d.shared.group_id, error = %e, "cannot resolve assigned topic ids");
                out
            }
        }
    }

    /// Revokes `parts`, heartbeating (with what we still own) meanwhile.
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
                _ = tokio::time::sleep(self.interval) => {
                    // Errors surface again at the next regular heartbeat.
                    if let Ok(resp) = self.send(&self.request(self.epoch)).await {
                        self.absorb(resp);
                    }
                }
            }
        }
        self.owned.retain(|tp| !parts.contains(tp));
        self.d.publish(&self.member_id, self.epoch, &self.owned);
    }

    /// Optionally revokes what we own (so the consumer can commit), then
    /// leaves with epoch -1, or -2 for a static member. Best effort.
    async fn leave(&mut self, revoke_first: bool) {
        if revoke_first {
            let owned = self.owned.clone();
            self.revoke(&owned).await;
        }
        let epoch = if self.d.shared.instance_id.is_some() {
            LEAVE_STATIC_EPOCH
        } else {
            LEAVE_EPOCH
        };
        if self.epoch > 0 {
            if let Err(e) = self.send(&self.request(epoch)).await {
                debug!(group = %self.d.shared.group_id, error = %e, "leave heartbeat failed");
            }
        }
        self.epoch = 0;
        let owned = self.owned.clone();
        self.d.publish(&self.member_id, -1, &owned);
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
