//! The embedded consumer protocol of classic groups: the subscription a
//! member puts in JoinGroup metadata and the assignment the leader puts in
//! SyncGroup, each an i16 version followed by the body
//! (`ConsumerProtocolSubscription` / `ConsumerProtocolAssignment`, versions
//! 0-3; v1 adds owned partitions for KIP-429, v2 the generation, v3 the rack).
//!
//! Decoding is forward compatible as in the Java client: a newer version is
//! read with the newest layout we know, and trailing fields are ignored.

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::{Buf, Bytes, BytesMut};
use kafka_protocol::messages::consumer_protocol_assignment as wire_assignment;
use kafka_protocol::messages::consumer_protocol_subscription as wire_subscription;
use kafka_protocol::messages::{
    ConsumerProtocolAssignment, ConsumerProtocolSubscription, TopicName,
};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};

use crate::protocol::ProtocolError;
use crate::TopicPartition;

/// The version we write (the Java 4.x client writes 3).
pub const CONSUMER_PROTOCOL_VERSION: i16 = 3;

/// A member's subscription as the leader sees it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Subscription {
    /// Subscribed topics.
    pub topics: Vec<String>,
    /// Partitions the member owns now (cooperative protocols).
    pub owned: Vec<TopicPartition>,
    /// The generation in which it owned them; -1 if unknown.
    pub generation: i32,
}

fn invalid(what: &'static str, reason: impl ToString) -> ProtocolError {
    ProtocolError::Invalid {
        what,
        reason: reason.to_string(),
    }
}

fn read_version(buf: &mut Bytes, what: &'static str) -> Result<i16, ProtocolError> {
    if buf.remaining() < 2 {
        return Err(invalid(what, "shorter than its version field"));
    }
    let v = buf.get_i16();
    if v < 0 {
        return Err(invalid(what, format!("negative version {v}")));
    }
    Ok(v.min(CONSUMER_PROTOCOL_VERSION))
}

/// Groups partitions by topic, sorted, as the wire carries them.
fn by_topic(partitions: &[TopicPartition]) -> BTreeMap<Arc<str>, Vec<i32>> {
    let mut m: BTreeMap<Arc<str>, Vec<i32>> = BTreeMap::new();
    for tp in partitions {
        m.entry(tp.topic.clone()).or_default().push(tp.partition);
    }
    for ps in m.values_mut() {
        ps.sort_unstable();
        ps.dedup();
    }
    m
}

fn name(s: &str) -> TopicName {
    TopicName(StrBytes::from_string(s.to_owned()))
}

fn encode<M: Encodable>(msg: &M, what: &'static str) -> Result<Bytes, ProtocolError> {
    let mut buf = BytesMut::new();
    buf.extend_from_slice(&CONSUMER_PROTOCOL_VERSION.to_be_bytes());
    msg.encode(&mut buf, CONSUMER_PROTOCOL_VERSION)
        .map_err(|e| ProtocolError::Encode {
            what,
            reason: e.to_string(),
        })?;
    Ok(buf.freeze())
}

/// JoinGroup metadata for `sub`.
pub fn encode_subscription(sub: &Subscription) -> Result<Bytes, ProtocolError> {
    let msg = ConsumerProtocolSubscription::default()
        .with_topics(
            sub.topics
                .iter()
                .map(|t| StrBytes::from_string(t.clone()))
                .collect(),
        )
        .with_owned_partitions(
            by_topic(&sub.owned)
                .into_iter()
                .map(|(t, ps)| {
                    wire_subscription::TopicPartition::default()
                        .with_topic(name(&t))
                        .with_partitions(ps)
                })
                .collect(),
        )
        .with_generation_id(sub.generation);
    encode(&msg, "ConsumerProtocolSubscription")
}

/// Reads a member's JoinGroup metadata.
pub fn decode_subscription(mut bytes: Bytes) -> Result<Subscription, ProtocolError> {
    const WHAT: &str = "ConsumerProtocolSubscription";
    let version = read_version(&mut bytes, WHAT)?;
    let msg =
        ConsumerProtocolSubscription::decode(&mut bytes, version).map_err(|e| invalid(WHAT, e))?;
    let owned = msg
        .owned_partitions
        .iter()
        .flat_map(|t| {
            let topic: Arc<str> = t.topic.0.as_str().into();
            t.partitions
                .iter()
                .map(move |p| TopicPartition::new(topic.clone(), *p))
        })
        .collect();
    Ok(Subscription {
        topics: msg.topics.iter().map(|t| t.as_str().to_owned()).collect(),
        owned,
        generation: if version >= 2 { msg.generation_id } else { -1 },
    })
}

/// SyncGroup assignment bytes for one member.
pub fn encode_assignment(partitions: &[TopicPartition]) -> Result<Bytes, ProtocolError> {
    let msg = ConsumerProtocolAssignment::default().with_assigned_partitions(
        by_topic(partitions)
            .into_iter()
            .map(|(t, ps)| {
                wire_assignment::TopicPartition::default()
                    .with_topic(name(&t))
                    .with_partitions(ps)
            })
            .collect(),
    );
    encode(&msg, "ConsumerProtocolAssignment")
}

/// Reads our assignment from a SyncGroup response. Empty bytes mean no
/// partitions (what the coordinator sends a member the leader left out).
pub fn decode_assignment(mut bytes: Bytes) -> Result<Vec<TopicPartition>, ProtocolError> {
    const WHAT: &str = "ConsumerProtocolAssignment";
    if bytes.is_empty() {
        return Ok(Vec::new());
    }
    let version = read_version(&mut bytes, WHAT)?;
    let msg =
        ConsumerProtocolAssignment::decode(&mut bytes, version).map_err(|e| invalid(WHAT, e))?;
    let mut out: Vec<TopicPartition> = msg
        .assigned_partitions
        .iter()
        .flat_map(|t| {
            let topic: Arc<str> = t.topic.0.as_str().into();
            t.partitions
                .iter()
                .map(move |p| TopicPartition::new(topic.clone(), *p))
        })
        .collect();
    out.sort();
    out.dedup();
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tp(t: &str, p: i32) -> TopicPartition {
        TopicPartition::new(t, p)
    }

    #[test]
    fn subscription_v3_bytes_match_the_protocol_layout() {
        let sub = Subscription {
            topics: vec!["t".into()],
            owned: vec![tp("t", 1), tp("t", 0)],
            generation: 7,
        };
        let bytes = encode_subscription(&sub).unwrap();
        let expected: &[u8] = &[
            0, 3, // version
            0, 0, 0, 1, 0, 1, b't', // topics: ["t"]
            0xff, 0xff, 0xff, 0xff, // user_data: null
            0, 0, 0, 1, 0, 1, b't', 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 1, // owned t:[0,1]
            0, 0, 0, 7, // generation
            0xff, 0xff, // rack: null
        ];
        assert_eq!(&bytes[..], expected);
        let back = decode_subscription(bytes).unwrap();
        assert_eq!(back.topics, vec!["t"]);
        assert_eq!(back.owned, vec![tp("t", 0), tp("t", 1)]);
        assert_eq!(back.generation, 7);
    }

    #[test]
    fn v0_subscription_has_no_owned_partitions_or_generation() {
        let bytes = Bytes::from_static(&[0, 0, 0, 0, 0, 1, 0, 1, b'x', 0xff, 0xff, 0xff, 0xff]);
        let sub = decode_subscription(bytes).unwrap();
        assert_eq!(sub.topics, vec!["x"]);
        assert!(sub.owned.is_empty());
        assert_eq!(sub.generation, -1);
    }

    #[test]
    fn assignment_round_trips_and_newer_versions_are_read() {
        let parts = vec![tp("a", 2), tp("b", 0), tp("a", 0)];
        let bytes = encode_assignment(&parts).unwrap();
        assert_eq!(&bytes[..2], &[0, 3]);
        assert_eq!(
            decode_assignment(bytes.clone()).unwrap(),
            vec![tp("a", 0), tp("a", 2), tp("b", 0)]
        );
        // A future version 4 with an extra trailing field still decodes.
        let mut v4 = BytesMut::from(&bytes[..]);
        v4[1] = 4;
        v4.extend_from_slice(&[1, 2, 3]);
        assert_eq!(decode_assignment(v4.freeze()).unwrap().len(), 3);
        assert!(decode_assignment(Bytes::new()).unwrap().is_empty());
    }

    #[test]
    fn hostile_bytes_are_errors_not_panics() {
        for bad in [
            &[0u8][..],
            &[0xff, 0xff],
            &[0, 1, 0x7f, 0xff, 0xff, 0xff],
            &[0, 3, 0, 0, 0, 1, 0, 5, b'a'],
        ] {
            assert!(decode_subscription(Bytes::copy_from_slice(bad)).is_err());
            assert!(decode_assignment(Bytes::copy_from_slice(bad)).is_err());
        }
    }
}
