//! The thin task around [`ShareMember`]: sends ShareGroupHeartbeat (API
//! 76) to the group coordinator, publishes assignments, sleeps, backs off,
//! and feeds each outcome back as an event. Ends when the member stops
//! (left the group, or a fatal error, which `poll` then reports).
//! Protocol: <https://kafka.apache.org/protocol#The_Messages_ShareGroupHeartbeat>.

use std::collections::{BTreeSet, VecDeque};
use std::sync::Arc;

use kafka_protocol::messages::{GroupId, ShareGroupHeartbeatRequest, TopicName};
use kafka_protocol::protocol::StrBytes;
use tokio::sync::watch;
use tracing::debug;

use super::member::{Action, Event, HeartbeatAnswer, ShareMember};
use super::ShareShared;
use crate::cluster::CoordinatorKind;
use crate::error::Result;
use crate::net::Workload;
use crate::protocol::versions::Versions;

/// ShareGroupHeartbeat versions this client implements.
const HEARTBEAT_VERSIONS: Versions = Versions::new(1, 1);

/// A member id as KIP-932 asks clients to generate it: a random UUID in
/// Kafka's text form (22 characters of URL-safe base64, no padding).
pub(crate) fn new_member_id() -> String {
    use base64::Engine;
    let mut bytes = [0u8; 16];
    if getrandom::fill(&mut bytes).is_err() {
        // No OS randomness: a seeded generator still makes ids differ.
        bytes = (u128::from(fastrand::u64(..)) << 64 | u128::from(fastrand::u64(..))).to_be_bytes();
    }
    // Version 4, variant 1 (RFC 9562).
    bytes[6] = (bytes[6] & 0x0f) | 0x40;
    bytes[8] = (bytes[8] & 0x3f) | 0x80;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

/// Runs the member until it stops.
pub(crate) async fn run(
    s: Arc<ShareShared>,
    mut subscription: watch::Receiver<Vec<String>>,
    mut close: watch::Receiver<bool>,
) {
    let topics = subscription.borrow_and_update().clone();
    let mut m = ShareMember::new(s.config.group_id.clone(), s.member_id.clone(), topics);
    let mut queue: VecDeque<Action> = m.handle(Event::Start).into();
    while let Some(action) = queue.pop_front() {
        let event = match action {
            Action::Send {
                member_id,
                epoch,
                topics,
            } => Some(Event::Answer(send(&s, member_id, epoch, topics).await)),
            Action::Assigned(parts) => {
                debug!(group = %s.config.group_id, partitions = parts.len(), epoch = m.epoch(), "share assignment");
                if *s.assignment_tx.borrow() != parts {
                    s.counters.rebalance();
                }
                s.assignment_tx.send_replace(parts);
                None
            }
            Action::Wait(d) => Some(if *close.borrow() {
                Event::Close
            } else {
                tokio::select! {
                    _ = tokio::time::sleep(d) => Event::Due,
                    r = subscription.changed() => match r {
                        Ok(()) => Event::Subscribed(subscription.borrow_and_update().clone()),
                        Err(_) => Event::Close,
                    },
                    _ = close.changed() => Event::Close,
                }
            }),
            Action::Rediscover => {
                s.cluster
                    .invalidate_coordinator(CoordinatorKind::Group, &s.config.group_id);
                None
            }
            Action::Backoff(attempt) => {
                let cfg = s.cluster.config();
                let wait = cfg
                    .retry_backoff
                    .saturating_mul(1 << attempt.min(10))
                    .min(cfg.retry_backoff_max);
                Some(if *close.borrow() {
                    Event::Close
                } else {
                    tokio::select! {
                        _ = tokio::time::sleep(wait) => Event::Due,
                        _ = close.changed() => Event::Close,
                    }
                })
            }
            Action::Fatal(e) => {
                *s.fatal.lock().unwrap_or_else(|p| p.into_inner()) = Some(e);
                s.assignment_tx.send_replace(BTreeSet::new());
                None
            }
            Action::Stop => return,
        };
        if let Some(event) = event {
            queue.extend(m.handle(event));
        }
    }
}

async fn send(
    s: &ShareShared,
    member_id: String,
    epoch: i32,
    topics: Option<Vec<String>>,
) -> Result<HeartbeatAnswer> {
    let group = &s.config.group_id;
    let addr = s.cluster.coordinator(CoordinatorKind::Group, group).await?;
    let conn = s.cluster.connection(&addr, Workload::Group).await?;
    let req = ShareGroupHeartbeatRequest::default()
        .with_group_id(GroupId(StrBytes::from_string(group.clone())))
        .with_member_id(StrBytes::from_string(member_id))
        .with_member_epoch(epoch)
        .with_rack_id(s.config.client_rack.clone().map(StrBytes::from_string))
        .with_subscribed_topic_names(topics.map(|ts| {
            ts.into_iter()
                .map(|t| TopicName(StrBytes::from_string(t)))
                .collect()
        }));
    let resp = conn.send(&req, HEARTBEAT_VERSIONS).await?;
    s.counters.heartbeat();
    Ok(HeartbeatAnswer {
        broker: conn.broker().to_owned(),
        error_code: resp.error_code,
        error_message: resp.error_message.map(|m| m.to_string()),
        member_epoch: resp.member_epoch,
        heartbeat_interval_ms: resp.heartbeat_interval_ms,
        assignment: resp.assignment.map(|a| {
            a.topic_partitions
                .iter()
                .flat_map(|t| {
                    let id = *t.topic_id.as_bytes();
                    t.partitions.iter().map(move |p| (id, *p))
                })
                .collect()
        }),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn member_ids_are_22_character_url_safe_uuids_and_differ() {
        let a = new_member_id();
        let b = new_member_id();
        assert_eq!(a.len(), 22);
        assert!(a
            .bytes()
            .all(|c| c.is_ascii_alphanumeric() || c == b'-' || c == b'_'));
        assert_ne!(a, b);
    }
}
