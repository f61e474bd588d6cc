//! [`CommitWatermark`]: the lowest offset of a partition not yet fully done,
//! whatever order records finish in (the answer to KAFKA-6989's "commit only
//! what is done" for out-of-order processing). Pure: no I/O, no clock.

use std::collections::VecDeque;

/// Tracks one partition's records from the moment they are taken from the
/// consumer until they are done, and says which offset may be committed.
///
/// Records are registered in offset order (the order `poll` returns them);
/// they may complete in any order. [`committable`](Self::committable) is the
/// Kafka commit offset (the next offset to read): the lowest registered
/// offset not done yet, or one past the last registered record when all are
/// done. Offsets may have gaps (compaction, transaction markers).
///
/// Kept as a ring of the pending offsets, in offset order (they are
/// registered in order): registering appends, completing finds the offset
/// by binary search and removes it, shifting the shorter side (records
/// finish near the front, the oldest being the ones started). Only pending
/// records are held, so memory is bounded by the task's buffer and
/// in-flight window, and the ring's storage is reused: the record path
/// allocates nothing once it has grown.
#[derive(Debug, Clone, Default)]
pub struct CommitWatermark {
    /// Registered records not done yet, in offset order.
    pending: VecDeque<i64>,
    /// One past the highest registered offset; `None` before the first.
    end: Option<i64>,
}

impl CommitWatermark {
    /// An empty watermark (nothing to commit yet).
    pub fn new() -> CommitWatermark {
        CommitWatermark::default()
    }

    /// Registers the record at `offset`. Offsets must increase; an offset
    /// at or below the last one registered is ignored (a re-delivery after
    /// a seek that the watermark already covers) and `false` is returned.
    pub fn register(&mut self, offset: i64) -> bool {
        // An offset with no successor (i64::MAX, only from a hostile
        // broker) or a negative one can never be committed past: refused.
        let Some(next) = offset.checked_add(1).filter(|_| offset >= 0) else {
            return false;
        };
        if self.end.is_some_and(|end| offset < end) {
            return false;
        }
        self.pending.push_back(offset);
        self.end = Some(next);
        true
    }

    /// Marks `offset` done; `false` when it was not pending.
    pub fn complete(&mut self, offset: i64) -> bool {
        if self.pending.front() == Some(&offset) {
            self.pending.pop_front();
            return true;
        }
        match self.pending.binary_search(&offset) {
            Ok(i) => self.pending.remove(i).is_some(),
            Err(_) => false,
        }
    }

    /// The offset to commit: the lowest pending one, else one past the last
    /// registered record; `None` before any record was registered.
    pub fn committable(&self) -> Option<i64> {
        self.pending.front().copied().or(self.end)
    }

    /// Records registered and not done.
    pub fn pending(&self) -> usize {
        self.pending.len()
    }

    /// Drops every pending record (their partition was lost); the committable
    /// offset becomes one past the last registered record, so it must not be
    /// committed afterwards.
    pub fn clear(&mut self) {
        self.pending.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeSet;

    #[test]
    fn empty_has_nothing_to_commit() {
        assert_eq!(CommitWatermark::new().committable(), None);
    }

    #[test]
    fn offsets_without_a_committable_successor_are_refused() {
        let mut w = CommitWatermark::new();
        assert!(!w.register(i64::MAX));
        assert!(!w.register(-1));
        assert_eq!(w.committable(), None);
        assert!(w.register(i64::MAX - 1));
        assert_eq!(w.committable(), Some(i64::MAX - 1));
        assert!(w.complete(i64::MAX - 1));
        assert_eq!(w.committable(), Some(i64::MAX));
    }

    #[test]
    fn out_of_order_completion_holds_at_the_gap() {
        let mut w = CommitWatermark::new();
        for o in [10, 11, 13, 14] {
            assert!(w.register(o));
        }
        assert!(!w.register(12), "offsets must increase");
        assert_eq!(w.committable(), Some(10));
        assert!(w.complete(11));
        assert!(w.complete(14));
        assert_eq!(w.committable(), Some(10));
        assert!(w.complete(10));
        assert_eq!(w.committable(), Some(13));
        assert!(w.complete(13));
        assert_eq!(w.committable(), Some(15));
        assert!(!w.complete(13), "completing twice is reported");
        assert_eq!(w.pending(), 0);
    }

    proptest! {
        /// For any gaps and any completion order, the committable offset
        /// never passes an unfinished record, never goes backwards, and
        /// reaches one past the last record when all are done.
        #[test]
        fn never_passes_an_unfinished_record(
            gaps in proptest::collection::vec(1i64..4, 1..200),
            seed in any::<u64>(),
        ) {
            let mut offsets = Vec::new();
            let mut o = 0;
            for g in gaps {
                o += g;
                offsets.push(o);
            }
            let mut w = CommitWatermark::new();
            for &o in &offsets {
                prop_assert!(w.register(o));
            }
            let mut order = offsets.clone();
            let mut rng = fastrand::Rng::with_seed(seed);
            rng.shuffle(&mut order);
            let mut done = BTreeSet::new();
            let mut last = w.committable().unwrap();
            for o in order {
                w.complete(o);
                done.insert(o);
                let c = w.committable().unwrap();
                prop_assert!(c >= last, "went backwards: {last} -> {c}");
                last = c;
                for &u in offsets.iter().filter(|u| !done.contains(u)) {
                    prop_assert!(c <= u, "committable {c} passes unfinished {u}");
                }
            }
            prop_assert_eq!(w.committable(), Some(offsets.last().unwrap() + 1));
        }
    }
}
