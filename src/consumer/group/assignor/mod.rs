//! Client-side assignors for classic groups, as pure functions of the
//! members' subscriptions and the partition counts: no I/O, no clock.
//!
//! - [`range`]: per topic, each member gets a contiguous range (eager);
//! - [`round_robin`]: every partition dealt in turn (eager);
//! - [`cooperative_sticky`]: balanced and sticky, two-phase (KIP-429).

mod range;
mod round_robin;
mod sticky;

use std::collections::BTreeMap;

pub use range::range;
pub use round_robin::round_robin;
pub use sticky::cooperative_sticky;

use super::config::AssignmentStrategy;
use crate::protocol::consumer_protocol::Subscription;
use crate::TopicPartition;

/// One member as the leader sees it in the JoinGroup response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    /// Member id.
    pub member_id: String,
    /// `group.instance.id` of static members.
    pub instance_id: Option<String>,
    /// Decoded subscription.
    pub subscription: Subscription,
}

impl Member {
    /// The key members are ordered by: the instance id for static members
    /// (stable across restarts), else the member id.
    fn sort_key(&self) -> &str {
        self.instance_id.as_deref().unwrap_or(&self.member_id)
    }

    fn subscribes(&self, topic: &str) -> bool {
        self.subscription.topics.iter().any(|t| t == topic)
    }
}

/// Member id → assigned partitions (sorted). Every member appears.
pub type Assignment = BTreeMap<String, Vec<TopicPartition>>;

/// Topic name → partition count, for the topics the members subscribe to.
pub type PartitionCounts = BTreeMap<String, i32>;

/// Runs `strategy`.
pub fn assign(
    strategy: AssignmentStrategy,
    members: &[Member],
    counts: &PartitionCounts,
) -> Assignment {
    match strategy {
        AssignmentStrategy::Range => range(members, counts),
        AssignmentStrategy::RoundRobin => round_robin(members, counts),
        AssignmentStrategy::CooperativeSticky => cooperative_sticky(members, counts),
    }
}

/// Members in a stable order, with an empty entry for each in `out`.
fn sorted_members(members: &[Member]) -> (Vec<&Member>, Assignment) {
    let mut sorted: Vec<&Member> = members.iter().collect();
    sorted.sort_by(|a, b| {
        a.sort_key()
            .cmp(b.sort_key())
            .then_with(|| a.member_id.cmp(&b.member_id))
    });
    let out = members
        .iter()
        .map(|m| (m.member_id.clone(), Vec::new()))
        .collect();
    (sorted, out)
}

fn finish(mut out: Assignment) -> Assignment {
    for ps in out.values_mut() {
        ps.sort();
    }
    out
}

#[cfg(test)]
pub(crate) mod test_support {
    use super::*;
    use std::collections::BTreeSet;

    pub fn member(id: &str, topics: &[&str]) -> Member {
        Member {
            member_id: id.into(),
            instance_id: None,
            subscription: Subscription {
                topics: topics.iter().map(|t| t.to_string()).collect(),
                owned: Vec::new(),
                generation: -1,
            },
        }
    }

    pub fn counts(topics: &[(&str, i32)]) -> PartitionCounts {
        topics.iter().map(|(t, n)| (t.to_string(), *n)).collect()
    }

    /// Asserts the assignment is disjoint, only gives members topics they
    /// subscribe to, and (when `complete`) covers every subscribed partition.
    pub fn check_valid(
        members: &[Member],
        counts: &PartitionCounts,
        a: &Assignment,
        complete: bool,
    ) {
        let mut seen = BTreeSet::new();
        for m in members {
            for tp in &a[&m.member_id] {
                assert!(
                    m.subscribes(&tp.topic),
                    "{} got unsubscribed {tp}",
                    m.member_id
                );
                assert!(seen.insert(tp.clone()), "{tp} assigned twice");
            }
        }
        if complete {
            for (t, n) in counts {
                if members.iter().any(|m| m.subscribes(t)) {
                    for p in 0..*n {
                        assert!(
                            seen.contains(&TopicPartition::new(t.as_str(), p)),
                            "{t}-{p} unassigned"
                        );
                    }
                }
            }
        }
    }

    pub fn sizes(a: &Assignment) -> Vec<usize> {
        a.values().map(Vec::len).collect()
    }
}
