//! The runtime's two slabs: the tasks by partition (each also reachable by
//! an index a job keeps, so the record path hashes no partition name), and
//! the records waiting for their outputs' acknowledgements (by the tag the
//! outputs were sent with, KIP-311's "done means acknowledged").

use std::collections::HashMap;

use tokio::time::Instant;

use crate::consumer::room::RecentPeak;
use crate::consumer::ConsumerRecord;
use crate::error::Error;
use crate::TopicPartition;

/// Slots a slab keeps at least when it empties: room beyond this and
/// beyond what recent records needed, grown by a backlog, is given back
/// (issue #17: after an outage the acking slab held 10 MiB for the life of
/// the process).
const KEPT_SLOTS: usize = 1024;

/// Tasks by partition. A task's index stays its own until it is removed;
/// an index can be reused after that, so whoever holds one checks the
/// task's generation too.
pub(super) struct Tasks<T> {
    slots: Vec<Option<(TopicPartition, T)>>,
    index: HashMap<TopicPartition, usize>,
    free: Vec<usize>,
}

impl<T> Default for Tasks<T> {
    fn default() -> Self {
        Tasks {
            slots: Vec::new(),
            index: HashMap::new(),
            free: Vec::new(),
        }
    }
}

impl<T> Tasks<T> {
    /// The task of `tp` with its index, made by `new` if there is none.
    pub(super) fn get_or_insert_with(
        &mut self,
        tp: &TopicPartition,
        new: impl FnOnce() -> T,
    ) -> (usize, &mut T) {
        let i = match self.index.get(tp) {
            Some(i) => *i,
            None => {
                let entry = Some((tp.clone(), new()));
                let i = match self.free.pop() {
                    Some(i) => {
                        self.slots[i] = entry;
                        i
                    }
                    None => {
                        self.slots.push(entry);
                        self.slots.len() - 1
                    }
                };
                self.index.insert(tp.clone(), i);
                i
            }
        };
        let (_, task) = self.slots[i].as_mut().expect("indexed slots are full");
        (i, task)
    }

    pub(super) fn get(&self, tp: &TopicPartition) -> Option<&T> {
        let i = *self.index.get(tp)?;
        self.slots[i].as_ref().map(|(_, t)| t)
    }

    pub(super) fn get_mut(&mut self, tp: &TopicPartition) -> Option<&mut T> {
        let i = *self.index.get(tp)?;
        self.slots[i].as_mut().map(|(_, t)| t)
    }

    /// The task at index `i` (no hashing), if there is one.
    pub(super) fn at_mut(&mut self, i: usize) -> Option<&mut T> {
        self.slots.get_mut(i)?.as_mut().map(|(_, t)| t)
    }

    pub(super) fn remove(&mut self, tp: &TopicPartition) -> Option<T> {
        let i = self.index.remove(tp)?;
        let (_, task) = self.slots[i].take()?;
        self.free.push(i);
        Some(task)
    }

    pub(super) fn iter(&self) -> impl Iterator<Item = (&TopicPartition, &T)> {
        self.slots.iter().flatten().map(|(tp, t)| (tp, t))
    }

    /// Every task with its index.
    pub(super) fn iter_mut(&mut self) -> impl Iterator<Item = (usize, &TopicPartition, &mut T)> {
        self.slots
            .iter_mut()
            .enumerate()
            .filter_map(|(i, s)| s.as_mut().map(|(tp, t)| (i, &*tp, t)))
    }

    pub(super) fn keys(&self) -> impl Iterator<Item = &TopicPartition> {
        self.iter().map(|(tp, _)| tp)
    }
}

/// A record whose outputs are being sent or are not all acknowledged; its
/// index in [`Awaiting`] is the tag its outputs are sent with.
pub(super) struct Acked {
    pub(super) partition: TopicPartition,
    /// Its task's index in [`Tasks`] and generation.
    pub(super) task: usize,
    pub(super) generation: u64,
    pub(super) offset: i64,
    /// Outputs not acknowledged yet; while the record still runs, also
    /// [`UNKNOWN_OUTPUTS`] (see [`Awaiting::reserve`]).
    pub(super) remaining: usize,
    pub(super) started: Instant,
    /// The first failure among its outputs (boxed: rare, and an [`Error`]
    /// inline would double the slot, which every record in flight holds).
    pub(super) error: Option<Box<Error>>,
    /// Under `FailurePolicy::RetryLane`, the record itself: if one of its
    /// outputs fails, it is handed to the retry topic instead of failing
    /// the application. Set when its worker confirms the outputs.
    pub(super) lane: Option<Box<ConsumerRecord>>,
}

/// Counted in a reserved record's outputs until its worker knows how many
/// it sent: no acknowledgement can complete it before then.
pub(super) const UNKNOWN_OUTPUTS: usize = usize::MAX / 2;

/// The records waiting for acknowledgements, by tag (a slab: slots are
/// reused, so the record path stops allocating once it has grown). Each
/// time it empties it notes how many records it held at most since it
/// last emptied, and keeps room for twice the recent peak (at least
/// `KEPT_SLOTS`, see `consumer::room`): shrinking to `KEPT_SLOTS` at every
/// empty made a pass-through grow it again by doubling at every burst,
/// its largest allocation per record after the consumer's (issue #22).
/// A backlog's room goes back after a few dozen smaller bursts.
#[derive(Default)]
pub(super) struct Awaiting {
    slots: Vec<Option<Acked>>,
    free: Vec<usize>,
    /// Records reserved and still running (not acking yet).
    reserved: usize,
    /// The records held at once between empties, decaying.
    peak: RecentPeak,
}

impl Awaiting {
    /// Records waiting for acknowledgements (reserved ones not counted).
    pub(super) fn len(&self) -> usize {
        self.slots.len() - self.free.len() - self.reserved
    }

    /// Reserves a tag for a record about to run, so that its worker can
    /// send its outputs and register them in one step afterwards (the
    /// reservation is taken under the lock that starts the record):
    /// acknowledgements that come first count down from
    /// [`UNKNOWN_OUTPUTS`] and cannot complete it. Ends with
    /// [`confirm`](Self::confirm) or [`cancel`](Self::cancel).
    pub(super) fn reserve(&mut self, acked: Acked) -> u64 {
        debug_assert_eq!(acked.remaining, UNKNOWN_OUTPUTS);
        self.reserved += 1;
        self.insert(acked)
    }

    /// A reserved record sent `n` outputs: it is acking now. Its entry,
    /// to complete it at once if every output is settled already.
    pub(super) fn confirm(&mut self, tag: u64, n: usize) -> Option<&mut Acked> {
        let acked = self.get_mut(tag)?;
        acked.remaining = acked.remaining.saturating_sub(UNKNOWN_OUTPUTS - n);
        self.reserved = self.reserved.saturating_sub(1);
        self.get_mut(tag)
    }

    /// A reserved record sent nothing (no outputs, or it failed).
    pub(super) fn cancel(&mut self, tag: u64) {
        if self.remove(tag).is_some() {
            self.reserved = self.reserved.saturating_sub(1);
            self.release_if_empty();
        }
    }

    pub(super) fn insert(&mut self, acked: Acked) -> u64 {
        let i = match self.free.pop() {
            Some(i) => {
                self.slots[i] = Some(acked);
                i
            }
            None => {
                self.slots.push(Some(acked));
                self.slots.len() - 1
            }
        };
        i as u64
    }

    pub(super) fn get_mut(&mut self, tag: u64) -> Option<&mut Acked> {
        self.slots.get_mut(usize::try_from(tag).ok()?)?.as_mut()
    }

    /// Takes a settled record out (see [`cancel`](Self::cancel) for a
    /// reserved one).
    pub(super) fn remove(&mut self, tag: u64) -> Option<Acked> {
        let i = usize::try_from(tag).ok()?;
        let acked = self.slots.get_mut(i)?.take()?;
        self.free.push(i);
        self.release_if_empty();
        Some(acked)
    }

    /// Once nothing waits, the slab starts over, and room beyond what
    /// recent bursts needed goes back (tags are slot indexes, so a slab
    /// holding any record cannot be compacted). Slots are only added when
    /// none is free, so their count is the most records held at once since
    /// the last empty.
    fn release_if_empty(&mut self) {
        if self.free.len() != self.slots.len() {
            return;
        }
        self.peak.fill(self.slots.len());
        self.slots.clear();
        self.free.clear();
        if let Some(to) = self.peak.shrink_target(self.slots.capacity(), KEPT_SLOTS) {
            self.slots.shrink_to(to);
        }
        if let Some(to) = self.peak.shrink_target(self.free.capacity(), KEPT_SLOTS) {
            self.free.shrink_to(to);
        }
    }

    /// Slots allocated (tests: the room it holds).
    #[cfg(test)]
    fn capacity(&self) -> usize {
        self.slots.capacity()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tp(p: i32) -> TopicPartition {
        TopicPartition::new("t", p)
    }

    fn acked(offset: i64, remaining: usize) -> Acked {
        Acked {
            partition: tp(0),
            task: 0,
            generation: 1,
            offset,
            remaining,
            started: Instant::now(),
            error: None,
            lane: None,
        }
    }

    #[test]
    fn tasks_keep_their_index_and_reuse_a_removed_one() {
        let mut tasks = Tasks::default();
        let (a, _) = tasks.get_or_insert_with(&tp(0), || "a");
        let (b, _) = tasks.get_or_insert_with(&tp(1), || "b");
        assert_ne!(a, b);
        assert_eq!(tasks.get_or_insert_with(&tp(0), || "again"), (a, &mut "a"));
        assert_eq!(tasks.at_mut(b), Some(&mut "b"));
        assert_eq!(tasks.remove(&tp(0)), Some("a"));
        assert_eq!(tasks.at_mut(a), None);
        assert_eq!(tasks.get(&tp(0)), None);
        let (c, _) = tasks.get_or_insert_with(&tp(2), || "c");
        assert_eq!(c, a, "a removed task's index is reused");
        let mut all: Vec<_> = tasks.iter().map(|(tp, t)| (tp.partition, *t)).collect();
        all.sort();
        assert_eq!(all, [(1, "b"), (2, "c")]);
        assert_eq!(tasks.keys().count(), 2);
        *tasks.get_mut(&tp(1)).unwrap() = "b2";
        let indexed: Vec<_> = tasks.iter_mut().map(|(i, _, t)| (i, *t)).collect();
        assert!(indexed.contains(&(b, "b2")) && indexed.contains(&(c, "c")));
    }

    #[test]
    fn a_reserved_record_completes_only_once_its_outputs_are_known() {
        let mut w = Awaiting::default();
        let tag = w.reserve(acked(5, UNKNOWN_OUTPUTS));
        assert_eq!(w.len(), 0, "a reserved record is not acking yet");
        // Two outputs, both acknowledged before the worker confirms.
        for _ in 0..2 {
            let a = w.get_mut(tag).unwrap();
            a.remaining -= 1;
            assert!(a.remaining > 0);
        }
        assert_eq!(w.confirm(tag, 2).map(|a| a.remaining), Some(0));
        assert_eq!(w.len(), 1);
        assert_eq!(w.remove(tag).map(|a| a.offset), Some(5));
        // Confirmed first, acknowledged after.
        let tag = w.reserve(acked(6, UNKNOWN_OUTPUTS));
        assert_eq!(w.confirm(tag, 3).map(|a| a.remaining), Some(3));
        // Cancelled: nothing waits.
        let other = w.reserve(acked(7, UNKNOWN_OUTPUTS));
        w.cancel(other);
        assert_eq!(w.len(), 1);
        assert!(w.get_mut(other).is_none());
    }

    #[test]
    fn a_drained_awaiting_slab_gives_its_room_back() {
        let mut w = Awaiting::default();
        // A backlog: 50,000 records acking at once.
        let tags: Vec<u64> = (0..50_000).map(|o| w.insert(acked(o, 1))).collect();
        assert_eq!(w.len(), 50_000);
        assert!(w.capacity() >= 50_000);
        // All but one settle: a record still waits, so the room stays
        // (tags are slot indexes).
        for t in &tags[1..] {
            assert!(w.remove(*t).is_some());
        }
        assert!(w.capacity() >= 50_000);
        assert_eq!(w.len(), 1);
        assert!(w.remove(tags[0]).is_some());
        assert_eq!(w.len(), 0);
        // Bursts as large keep the room: no regrowth.
        let room = w.capacity();
        for _ in 0..5 {
            let tags: Vec<u64> = (0..50_000).map(|o| w.insert(acked(o, 1))).collect();
            for t in tags {
                assert!(w.remove(t).is_some());
            }
            assert_eq!(w.capacity(), room, "regrown or shrunk at a steady burst");
        }
        // Smaller bursts give it back after a few dozen.
        for _ in 0..100 {
            let t = w.insert(acked(1, 1));
            assert!(w.remove(t).is_some());
        }
        assert!(w.capacity() <= 2 * KEPT_SLOTS, "kept {}", w.capacity());
        // A cancelled reservation empties it too.
        for _ in 0..100 {
            let tags: Vec<u64> = (0..5_000)
                .map(|o| w.reserve(acked(o, UNKNOWN_OUTPUTS)))
                .collect();
            for t in tags {
                w.cancel(t);
            }
            assert_eq!(w.len(), 0);
        }
        for _ in 0..100 {
            let t = w.insert(acked(1, 1));
            assert!(w.remove(t).is_some());
        }
        assert!(w.capacity() <= 2 * KEPT_SLOTS, "kept {}", w.capacity());
        // And it still works after.
        let t = w.insert(acked(1, 1));
        assert_eq!(w.remove(t).map(|a| a.offset), Some(1));
    }
}
