//! The range assignor: for each topic, members subscribed to it (in stable
//! order) each get a contiguous range; the first `partitions % members` get
//! one extra. Eager.

use std::sync::Arc;

use super::{finish, sorted_members, Assignment, Member, PartitionCounts};
use crate::TopicPartition;

/// Range assignment of `counts` over `members`.
pub fn range(members: &[Member], counts: &PartitionCounts) -> Assignment {
    let (sorted, mut out) = sorted_members(members);
    for (topic, &n) in counts {
        let subscribed: Vec<&&Member> = sorted.iter().filter(|m| m.subscribes(topic)).collect();
        if subscribed.is_empty() || n <= 0 {
            continue;
        }
        let topic: Arc<str> = topic.as_str().into();
        let k = subscribed.len() as i32;
        let (per, extra) = (n / k, n % k);
        let mut next = 0;
        for (i, m) in subscribed.iter().enumerate() {
            let len = per + i32::from((i as i32) < extra);
            if let Some(ps) = out.get_mut(&m.member_id) {
                ps.extend((next..next + len).map(|p| TopicPartition::new(topic.clone(), p)));
            }
            next += len;
        }
    }
    finish(out)
}

#[cfg(test)]
mod tests {
    use super::super::test_support::*;
    use super::*;

    #[test]
    fn contiguous_ranges_with_extras_first() {
        let members = [member("b", &["t"]), member("a", &["t"])];
        let c = counts(&[("t", 5)]);
        let a = range(&members, &c);
        check_valid(&members, &c, &a, true);
        let parts = |m: &str| a[m].iter().map(|tp| tp.partition).collect::<Vec<_>>();
        assert_eq!(parts("a"), vec![0, 1, 2]);
        assert_eq!(parts("b"), vec![3, 4]);
    }

    #[test]
    fn per_topic_and_only_subscribers() {
        let members = [
            member("a", &["t", "u"]),
            member("b", &["t"]),
            member("c", &["u"]),
        ];
        let c = counts(&[("t", 6), ("u", 2), ("other", 4)]);
        let a = range(&members, &c);
        check_valid(&members, &c, &a, true);
        assert_eq!(sizes(&a), vec![4, 3, 1]);
    }

    #[test]
    fn more_members_than_partitions() {
        let members = [
            member("a", &["t"]),
            member("b", &["t"]),
            member("c", &["t"]),
        ];
        let c = counts(&[("t", 2)]);
        let a = range(&members, &c);
        check_valid(&members, &c, &a, true);
        assert!(a["c"].is_empty());
    }
}
