//! The classic consumer protocol embedded in JoinGroup and SyncGroup
//! (`ConsumerProtocolSubscription` / `ConsumerProtocolAssignment`, with user
//! data, owned partitions and generation for cooperative-sticky), then every
//! assignor over the decoded subscriptions: other members' metadata comes
//! through the broker, so the leader must survive anything in it.
//!
//! Input: a selector byte, then chunks each prefixed by a one-byte length.
//! Selector 0 decodes the rest as one assignment; otherwise each chunk is a
//! member's subscription, and each subscribed topic gets a partition count
//! (0..=8, or none for every fourth topic) derived from the selector.

use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;
use purekafka::consumer::group::assignor::{assign, Member, PartitionCounts};
use purekafka::consumer::AssignmentStrategy;
use purekafka::protocol::consumer_protocol::{decode_assignment, decode_subscription};

/// One input, laid out as the module says.
pub fn run(data: &[u8]) {
    let Some((&selector, mut rest)) = data.split_first() else {
        return;
    };
    if selector == 0 {
        if let Ok(parts) = decode_assignment(Bytes::copy_from_slice(rest)) {
            assert!(
                parts.windows(2).all(|w| w[0] < w[1]),
                "sorted, no duplicates"
            );
        }
        return;
    }
    let mut members = Vec::new();
    while let Some((&len, tail)) = rest.split_first() {
        let len = usize::from(len).min(tail.len());
        let (chunk, next) = tail.split_at(len);
        rest = next;
        if let Ok(subscription) = decode_subscription(Bytes::copy_from_slice(chunk)) {
            members.push(Member {
                member_id: format!("m{}", members.len()),
                instance_id: (members.len() % 2 == 1).then(|| format!("i{}", members.len() / 3)),
                subscription,
            });
        }
    }
    // Counts 0..=8 per subscribed topic; every fourth topic is missing
    // from the metadata.
    let mut counts = PartitionCounts::new();
    let topics: BTreeSet<&String> = members
        .iter()
        .flat_map(|m| &m.subscription.topics)
        .collect();
    for (i, t) in topics.into_iter().enumerate() {
        if i % 4 != 3 {
            counts.insert(t.clone(), (i32::from(selector) + 5 * i as i32) % 9);
        }
    }
    for strategy in [
        AssignmentStrategy::Range,
        AssignmentStrategy::RoundRobin,
        AssignmentStrategy::CooperativeSticky,
    ] {
        check(
            strategy,
            &members,
            &counts,
            assign(strategy, &members, &counts),
        );
    }
}

/// Every member has an entry; every assigned partition exists, is of a
/// topic the member subscribes to, and is assigned once.
fn check(
    strategy: AssignmentStrategy,
    members: &[Member],
    counts: &PartitionCounts,
    assignment: BTreeMap<String, Vec<purekafka::TopicPartition>>,
) {
    let mut seen = BTreeSet::new();
    for m in members {
        let parts = assignment
            .get(&m.member_id)
            .unwrap_or_else(|| panic!("{strategy:?}: {} has no entry", m.member_id));
        for tp in parts {
            let count = counts.get(&*tp.topic).copied().unwrap_or(0);
            assert!(
                (0..count).contains(&tp.partition),
                "{strategy:?}: {tp} does not exist (count {count})"
            );
            assert!(
                m.subscription.topics.iter().any(|t| **t == *tp.topic),
                "{strategy:?}: {} got {tp} without subscribing",
                m.member_id
            );
            assert!(seen.insert(tp.clone()), "{strategy:?}: {tp} assigned twice");
        }
    }
}
