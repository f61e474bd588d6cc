//! The round-robin assignor: every partition of every subscribed topic, in
//! (topic, partition) order, dealt to members in turn, skipping members not
//! subscribed to the partition's topic. Eager.

use std::sync::Arc;

use super::{finish, sorted_members, Assignment, Member, PartitionCounts};
use crate::TopicPartition;

/// Round-robin assignment of `counts` over `members`.
pub fn round_robin(members: &[Member], counts: &PartitionCounts) -> Assignment {
    let (sorted, mut out) = sorted_members(members);
    if sorted.is_empty() {
        return out;
    }
    let mut cursor = 0usize;
    for (topic, &n) in counts {
        if !sorted.iter().any(|m| m.subscribes(topic)) {
            continue;
        }
        let name: Arc<str> = topic.as_str().into();
        for p in 0..n.max(0) {
            // At least one member subscribes, so this finds one within a lap.
            for _ in 0..sorted.len() {
                let m = sorted[cursor % sorted.len()];
                cursor += 1;
                if m.subscribes(topic) {
                    if let Some(ps) = out.get_mut(&m.member_id) {
                        ps.push(TopicPartition::new(name.clone(), p));
                    }
                    break;
                }
            }
        }
    }
    finish(out)
}

#[cfg(test)]
mod tests {
    use super::super::test_support::*;
    use super::*;

    #[test]
    fn deals_across_topics() {
        let members = [member("a", &["t", "u"]), member("b", &["t", "u"])];
        let c = counts(&[("t", 3), ("u", 3)]);
        let a = round_robin(&members, &c);
        check_valid(&members, &c, &a, true);
        let names = |m: &str| a[m].iter().map(ToString::to_string).collect::<Vec<_>>();
        assert_eq!(names("a"), vec!["t-0", "t-2", "u-1"]);
        assert_eq!(names("b"), vec!["t-1", "u-0", "u-2"]);
    }

    #[test]
    fn skips_unsubscribed_members() {
        let members = [
            member("a", &["t"]),
            member("b", &["u"]),
            member("c", &["t", "u"]),
        ];
        let c = counts(&[("t", 4), ("u", 2)]);
        let a = round_robin(&members, &c);
        check_valid(&members, &c, &a, true);
        assert_eq!(a.values().map(Vec::len).sum::<usize>(), 6);
    }
}
