//! The cooperative-sticky assignor (KIP-429, with KIP-54's stickiness).
//!
//! 1. Previous ownership comes from each member's subscription (owned
//!    partitions and generation, ConsumerProtocol v1+). When two members
//!    claim one partition, the higher generation wins; equal claims cancel
//!    (neither keeps it), as the Java assignor does.
//! 2. Members keep what they owned; unowned partitions go one by one to the
//!    eligible member with the fewest.
//! 3. While some member has two more than an eligible other, one partition
//!    moves (partitions it did not own before go first). Each move lowers
//!    the sum of squared counts, so this ends.
//! 4. Two-phase hand-over: a partition whose new owner differs from its
//!    previous owner is left out of this round. The previous owner sees it
//!    missing, revokes it and rejoins; the follow-up rebalance assigns it.
//!    So a partition is never given to one member while another still owns
//!    it in the same generation.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use super::{finish, sorted_members, Assignment, Member, PartitionCounts};
use crate::TopicPartition;

/// Cooperative-sticky assignment of `counts` over `members`.
pub fn cooperative_sticky(members: &[Member], counts: &PartitionCounts) -> Assignment {
    let (sorted, mut out) = sorted_members(members);
    let order: BTreeMap<&str, usize> = sorted
        .iter()
        .enumerate()
        .map(|(i, m)| (m.member_id.as_str(), i))
        .collect();
    let by_id: BTreeMap<&str, &Member> =
        sorted.iter().map(|m| (m.member_id.as_str(), *m)).collect();

    let mut all = BTreeSet::new();
    for (topic, &n) in counts {
        if sorted.iter().any(|m| m.subscribes(topic)) {
            let name: Arc<str> = topic.as_str().into();
            all.extend((0..n.max(0)).map(|p| TopicPartition::new(name.clone(), p)));
        }
    }

    // 1. Valid previous owners.
    let mut claims: BTreeMap<TopicPartition, (i32, Option<&str>)> = BTreeMap::new();
    for m in &sorted {
        let gen = m.subscription.generation;
        for tp in &m.subscription.owned {
            if !all.contains(tp) || !m.subscribes(&tp.topic) {
                continue;
            }
            match claims.get_mut(tp) {
                None => {
                    claims.insert(tp.clone(), (gen, Some(m.member_id.as_str())));
                }
                Some((g, owner)) => {
                    if gen > *g {
                        *g = gen;
                        *owner = Some(m.member_id.as_str());
                    } else if gen == *g && *owner != Some(m.member_id.as_str()) {
                        *owner = None;
                    }
                }
            }
        }
    }
    let previous: BTreeMap<TopicPartition, &str> = claims
        .into_iter()
        .filter_map(|(tp, (_, owner))| owner.map(|o| (tp, o)))
        .collect();

    // 2. Keep, then fill.
    let mut current: BTreeMap<&str, BTreeSet<TopicPartition>> =
        order.keys().map(|id| (*id, BTreeSet::new())).collect();
    for (tp, owner) in &previous {
        if let Some(set) = current.get_mut(owner) {
            set.insert(tp.clone());
        }
    }
    for tp in all.iter().filter(|tp| !previous.contains_key(*tp)) {
        let target = current
            .iter()
            .filter(|(id, _)| by_id.get(*id).is_some_and(|m| m.subscribes(&tp.topic)))
            .min_by_key(|(id, set)| (set.len(), order.get(*id).copied()))
            .map(|(id, _)| *id);
        if let Some(id) = target {
            if let Some(set) = current.get_mut(id) {
                set.insert(tp.clone());
            }
        }
    }

    // 3. Balance.
    while let Some((from, to, tp)) = find_move(&current, &by_id, &order, &previous) {
        if let Some(set) = current.get_mut(from) {
            set.remove(&tp);
        }
        if let Some(set) = current.get_mut(to) {
            set.insert(tp);
        }
    }

    // 4. Two-phase hand-over.
    for (id, set) in current {
        if let Some(ps) = out.get_mut(id) {
            ps.extend(
                set.into_iter()
                    .filter(|tp| previous.get(tp).is_none_or(|owner| *owner == id)),
            );
        }
    }
    finish(out)
}

/// One move from the fullest member that has a partition some eligible
/// member with at least two fewer could take.
fn find_move<'a>(
    current: &BTreeMap<&'a str, BTreeSet<TopicPartition>>,
    by_id: &BTreeMap<&str, &Member>,
    order: &BTreeMap<&str, usize>,
    previous: &BTreeMap<TopicPartition, &str>,
) -> Option<(&'a str, &'a str, TopicPartition)> {
    let mut donors: Vec<(&&'a str, &BTreeSet<TopicPartition>)> = current.iter().collect();
    donors.sort_by_key(|(id, set)| (std::cmp::Reverse(set.len()), order.get(**id).copied()));
    for (from, set) in donors {
        // Partitions the donor did not own before move first (no revocation).
        let mut candidates: Vec<&TopicPartition> = set.iter().collect();
        candidates.sort_by_key(|tp| (previous.get(*tp) == Some(from), std::cmp::Reverse(*tp)));
        for tp in candidates {
            let to = current
                .iter()
                .filter(|(id, other)| {
                    other.len() + 1 < set.len()
                        && by_id.get(**id).is_some_and(|m| m.subscribes(&tp.topic))
                })
                .min_by_key(|(id, other)| (other.len(), order.get(**id).copied()))
                .map(|(id, _)| *id);
            if let Some(to) = to {
                return Some((from, to, tp.clone()));
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::super::test_support::*;
    use super::*;

    fn owning(mut m: Member, owned: &[(&str, i32)], generation: i32) -> Member {
        m.subscription.owned = owned
            .iter()
            .map(|(t, p)| TopicPartition::new(*t, *p))
            .collect();
        m.subscription.generation = generation;
        m
    }

    #[test]
    fn fresh_group_is_balanced() {
        let members = [
            member("a", &["t"]),
            member("b", &["t"]),
            member("c", &["t"]),
        ];
        let c = counts(&[("t", 7)]);
        let a = cooperative_sticky(&members, &c);
        check_valid(&members, &c, &a, true);
        let mut s = sizes(&a);
        s.sort();
        assert_eq!(s, vec![2, 2, 3]);
    }

    #[test]
    fn new_member_takes_over_in_two_phases_and_others_keep_theirs() {
        let t: Vec<(&str, i32)> = (0..6).map(|p| ("t", p)).collect();
        let a0 = owning(member("a", &["t"]), &t[..3], 1);
        let b0 = owning(member("b", &["t"]), &t[3..], 1);
        let c0 = member("c", &["t"]);
        let c = counts(&[("t", 6)]);
        // Round 1: c gets nothing yet (all six are still owned); a and b
        // each give up exactly one partition.
        let r1 = cooperative_sticky(&[a0.clone(), b0.clone(), c0.clone()], &c);
        check_valid(&[a0.clone(), b0.clone(), c0.clone()], &c, &r1, false);
        assert!(r1["c"].is_empty());
        assert_eq!(r1["a"].len(), 2);
        assert_eq!(r1["b"].len(), 2);
        for tp in r1["a"].iter().chain(&r1["b"]) {
            let was: Vec<TopicPartition> = a0
                .subscription
                .owned
                .iter()
                .chain(&b0.subscription.owned)
                .cloned()
                .collect();
            assert!(was.contains(tp));
        }
        // Round 2: a and b own what they kept; c gets the released two.
        let own = |m: &str| {
            r1[m]
                .iter()
                .map(|tp| (tp.topic.clone(), tp.partition))
                .collect::<Vec<_>>()
        };
        let to_pairs = |v: Vec<(Arc<str>, i32)>| {
            v.iter()
                .map(|(t, p)| (t.to_string(), *p))
                .collect::<Vec<_>>()
        };
        let a_own = to_pairs(own("a"));
        let b_own = to_pairs(own("b"));
        let a1 = owning(
            member("a", &["t"]),
            &a_own
                .iter()
                .map(|(t, p)| (t.as_str(), *p))
                .collect::<Vec<_>>(),
            2,
        );
        let b1 = owning(
            member("b", &["t"]),
            &b_own
                .iter()
                .map(|(t, p)| (t.as_str(), *p))
                .collect::<Vec<_>>(),
            2,
        );
        let members = [a1, b1, c0];
        let r2 = cooperative_sticky(&members, &c);
        check_valid(&members, &c, &r2, true);
        assert_eq!(sizes(&r2), vec![2, 2, 2]);
        assert_eq!(r2["a"], r1["a"]);
        assert_eq!(r2["b"], r1["b"]);
    }

    #[test]
    fn departed_members_partitions_are_spread_without_moving_others() {
        let a0 = owning(member("a", &["t"]), &[("t", 0), ("t", 1)], 3);
        let b0 = owning(member("b", &["t"]), &[("t", 2), ("t", 3)], 3);
        let c = counts(&[("t", 6)]);
        let members = [a0, b0];
        let r = cooperative_sticky(&members, &c);
        check_valid(&members, &c, &r, true);
        assert_eq!(sizes(&r), vec![3, 3]);
        assert!(r["a"].contains(&TopicPartition::new("t", 0)));
        assert!(r["a"].contains(&TopicPartition::new("t", 1)));
        assert!(r["b"].contains(&TopicPartition::new("t", 2)));
        assert!(r["b"].contains(&TopicPartition::new("t", 3)));
    }

    #[test]
    fn conflicting_claims_higher_generation_wins_equal_cancel() {
        let c = counts(&[("t", 2)]);
        let stale = owning(member("a", &["t"]), &[("t", 0)], 1);
        let fresh = owning(member("b", &["t"]), &[("t", 0)], 2);
        let r = cooperative_sticky(&[stale, fresh], &c);
        assert_eq!(r["b"], vec![TopicPartition::new("t", 0)]);
        let x = owning(member("a", &["t"]), &[("t", 0)], 2);
        let y = owning(member("b", &["t"]), &[("t", 0)], 2);
        let r = cooperative_sticky(&[x.clone(), y.clone()], &c);
        check_valid(&[x, y], &c, &r, true);
    }

    #[test]
    fn unequal_subscriptions_stay_valid() {
        let members = [
            member("a", &["t", "u"]),
            member("b", &["t"]),
            member("c", &["u"]),
        ];
        let c = counts(&[("t", 4), ("u", 4)]);
        let r = cooperative_sticky(&members, &c);
        check_valid(&members, &c, &r, true);
        let mut s = sizes(&r);
        s.sort();
        assert!(s[2] - s[0] <= 1, "{s:?}");
    }
}
