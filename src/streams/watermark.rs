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
/// Kept as a ring of registered offsets in offset order, each marked done
/// or not (they are registered in order): registering appends, completing
/// finds the offset by binary search and marks it, and the done prefix is
/// popped. Nothing shifts per completion (removing from the middle moved up
/// to the whole in-flight window per record: O(in-flight)); done entries
/// behind an unfinished one are dropped in one pass once they are half the
/// ring, so memory stays within twice the task's buffer and in-flight
/// window, and the ring's storage is reused: the record path allocates
/// nothing once it has grown, until a backlog drains (below a quarter full,
/// it shrinks back toward 1,024 entries).
#[derive(Debug, Clone, Default)]
pub struct CommitWatermark {
    /// Registered offsets in offset order, with whether each is done; the
    /// front one is never done.
    entries: VecDeque<(i64, bool)>,
    /// Entries marked done (behind an unfinished one).
    done: usize,
    /// One past the highest registered offset; `None` before the first.
    end: Option<i64>,
}

/// Done entries are dropped from the middle of the ring once there are at
/// least this many and they are half of it (a pass over the ring per this
/// many completions at least: O(1) per record).
const COMPACT_MIN: usize = 64;

/// Entries the ring keeps room for whatever it held before: after a backlog
/// (an outage leaves a partition's records registered and not done) the
/// storage shrinks back once it is less than a quarter full, down to this
/// many (16 KiB), so a high-water mark does not stay allocated for good.
const KEEP: usize = 1024;

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
        self.entries.push_back((offset, false));
        self.end = Some(next);
        true
    }

    /// Marks `offset` done; `false` when it was not pending.
    pub fn complete(&mut self, offset: i64) -> bool {
        let i = if self.entries.front().map(|e| e.0) == Some(offset) {
            0
        } else {
            match self.entries.binary_search_by_key(&offset, |e| e.0) {
                Ok(i) if !self.entries[i].1 => i,
                _ => return false,
            }
        };
        if i > 0 {
            self.entries[i].1 = true;
            self.done += 1;
        } else {
            self.entries.pop_front();
            while self.entries.front().is_some_and(|e| e.1) {
                self.entries.pop_front();
                self.done -= 1;
            }
        }
        if self.done >= COMPACT_MIN && self.done * 2 >= self.entries.len() {
            self.entries.retain(|e| !e.1);
            self.done = 0;
        }
        let capacity = self.entries.capacity();
        if capacity > KEEP && self.entries.len() * 4 < capacity {
            // Amortised O(1): it takes capacity/4 more registrations to
            // grow again, and this copies fewer than that.
            self.entries.shrink_to((self.entries.len() * 2).max(KEEP));
        }
        true
    }

    /// The offset to commit: the lowest pending one, else one past the last
    /// registered record; `None` before any record was registered.
    pub fn committable(&self) -> Option<i64> {
        self.entries.front().map(|e| e.0).or(self.end)
    }

    /// Records registered and not done.
    pub fn pending(&self) -> usize {
        self.entries.len() - self.done
    }

    /// Drops every pending record (their partition was lost); the committable
    /// offset becomes one past the last registered record, so it must not be
    /// committed afterwards.
    pub fn clear(&mut self) {
        self.entries.clear();
        self.done = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeSet;

    #[test]
    fn a_drained_backlog_gives_its_room_back() {
        let mut w = CommitWatermark::new();
        for o in 0..100_000 {
            assert!(w.register(o));
        }
        assert!(w.entries.capacity() >= 100_000);
        // Out of order, as async processing finishes them, then the rest.
        for o in (1..100_000).step_by(2) {
            assert!(w.complete(o));
        }
        for o in (0..100_000).step_by(2) {
            assert!(w.complete(o));
        }
        assert_eq!(w.committable(), Some(100_000));
        assert!(
            w.entries.capacity() <= 2 * KEEP,
            "kept {} entries of room",
            w.entries.capacity()
        );
        // Still correct afterwards.
        assert!(w.register(100_005));
        assert_eq!(w.committable(), Some(100_005));
        assert!(w.complete(100_005));
        assert_eq!(w.committable(), Some(100_006));
    }

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
        assert!(!w.complete(11), "completing twice behind a gap is reported");
        assert!(w.complete(14));
        assert_eq!(w.pending(), 2);
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
            gaps in proptest::collection::vec(1i64..4, 1..600),
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
                prop_assert_eq!(w.pending(), offsets.len() - done.len());
                prop_assert!(
                    w.entries.len() < 2 * w.pending() + COMPACT_MIN,
                    "{} entries for {} pending", w.entries.len(), w.pending()
                );
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
