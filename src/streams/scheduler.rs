//! Which buffered records of a task (one input partition) may start now,
//! by [`OrderingMode`] mode and in-flight limits, and when fetching the
//! partition should pause for backpressure. Pure: no I/O, no clock.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::hash::{BuildHasher, BuildHasherDefault, Hash, Hasher, RandomState};

use bytes::Bytes;

/// What order records of one partition are processed in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum OrderingMode {
    /// One record in flight per partition: Kafka Streams' semantics.
    #[default]
    Partition,
    /// One record in flight per key; records of other keys overtake a slow
    /// one, records of one key keep their order. Null keys count as one key.
    Key,
    /// Any record may start as soon as there is room.
    Unordered,
}

/// Whether fetching a partition should pause or resume.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flow {
    /// Stop fetching: the buffer reached its high mark.
    Pause,
    /// Fetch again: the buffer fell to its low mark.
    Resume,
}

/// One task's buffered records (in offset order) and what is in flight.
///
/// In [`OrderingMode::Key`] mode the buffer is kept per key, with a queue of the
/// keys whose oldest record may start (ordered by arrival), so starting or
/// finishing a record costs O(log n) whatever the buffer holds; a key's
/// later record never passes its earlier one, and among startable keys the
/// oldest record starts first. Records sit in a slab (slots reused, so the
/// record path stops allocating once it has grown; the slab gives its room
/// back, down to `KEPT_SLOTS` (1,024 slots), each time it empties); each key's buffered
/// records are a list through the slab. A key is one small map entry
/// (whether it is in flight, and the slab indexes of its oldest and newest
/// buffered record), present while it is in flight or has buffered
/// records: the map stays small enough for its probes to hit the cache
/// with thousands of keys, and a record costs three lookups of its key.
/// A key is hashed once, when its record arrives (SipHash with the
/// queue's random keys, as a `HashMap` would); the record carries that
/// hash to its start and its finish, and a lookup with the very key the map
/// holds compares no bytes (issue #22: the key map's hashing and its key
/// comparisons, which read the fetched bytes again long after they were
/// decoded, were ~8 % of the CPU at 10,000 records in flight).
#[derive(Debug)]
pub struct TaskQueue<T> {
    ordering: OrderingMode,
    /// Partition and Unordered modes: the buffer in offset order, with
    /// arrival numbers.
    buffer: VecDeque<(u64, Option<Bytes>, T)>,
    /// Key mode: each key in flight or with buffered records.
    keyed: HashMap<QueuedKey, KeyState, BuildHasherDefault<KnownHash>>,
    /// Key mode: hashes each key once, when its record arrives.
    hasher: RandomState,
    /// Key mode: the buffered records.
    slots: Vec<Slot<T>>,
    /// Key mode: indexes of the empty slots.
    free: Vec<u32>,
    /// Key mode: keys not in flight with buffered records, by the arrival
    /// number of their oldest one, with its slot.
    ready: BinaryHeap<Reverse<(u64, u32)>>,
    arrivals: u64,
    started_end: u64,
    buffered: usize,
    in_flight: usize,
    paused: bool,
}

/// No slot (the end of a key's list).
const NONE: u32 = u32::MAX;

/// Record slots a queue keeps when it drains: room beyond this, grown by a
/// backlog, is given back (the Key-mode slab when it empties, the offset-order
/// buffer once below a quarter full), so one outage's backlog does not pin
/// its peak for the task's life.
const KEPT_SLOTS: usize = 1024;

/// One key of a Key-mode queue: whether a record of it is in flight, and
/// the slots of its oldest and newest buffered records (`NONE` when it has
/// none).
#[derive(Debug)]
struct KeyState {
    busy: bool,
    head: u32,
    tail: u32,
}

/// A buffered record of a Key-mode queue, with its key, its arrival number
/// and the slot of its key's next record.
#[derive(Debug)]
struct Slot<T> {
    arrival: u64,
    item: Option<(QueuedKey, T)>,
    next: u32,
}

/// A record's key as the queue keeps it: the key and its hash, computed
/// once when the record arrives. Given back by
/// [`TaskQueue::take_one_keyed`] and handed to
/// [`TaskQueue::finish_keyed`], so that neither hashes the key again.
#[derive(Debug, Clone)]
pub(crate) struct QueuedKey {
    hash: u64,
    key: Option<Bytes>,
}

impl QueuedKey {
    /// The key itself.
    pub(crate) fn into_key(self) -> Option<Bytes> {
        self.key
    }
}

impl PartialEq for QueuedKey {
    fn eq(&self, other: &Self) -> bool {
        // The same bytes (a record's key against the clone the map holds)
        // need no comparison.
        let same =
            |a: &Bytes, b: &Bytes| (a.as_ptr() == b.as_ptr() && a.len() == b.len()) || a == b;
        self.hash == other.hash
            && match (&self.key, &other.key) {
                (Some(a), Some(b)) => same(a, b),
                (None, None) => true,
                _ => false,
            }
    }
}

impl Eq for QueuedKey {}

impl Hash for QueuedKey {
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write_u64(self.hash);
    }
}

/// The hasher of the key map: a [`QueuedKey`] brings its hash, computed
/// with the queue's `RandomState` (so the map is as hard to flood as a
/// default `HashMap`); this hasher passes it on.
#[derive(Debug, Default)]
struct KnownHash(u64);

impl Hasher for KnownHash {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write_u64(&mut self, hash: u64) {
        self.0 = hash;
    }

    fn write(&mut self, bytes: &[u8]) {
        // Only `write_u64` is used (see `QueuedKey`'s `Hash`); anything
        // else still hashes, if poorly.
        for b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(*b);
        }
    }
}

impl<T> Default for TaskQueue<T> {
    fn default() -> Self {
        TaskQueue::new(OrderingMode::default())
    }
}

impl<T> TaskQueue<T> {
    /// An empty queue for `ordering`.
    pub fn new(ordering: OrderingMode) -> Self {
        TaskQueue {
            ordering,
            buffer: VecDeque::new(),
            keyed: HashMap::default(),
            hasher: RandomState::new(),
            slots: Vec::new(),
            free: Vec::new(),
            ready: BinaryHeap::new(),
            arrivals: 0,
            started_end: 0,
            buffered: 0,
            in_flight: 0,
            paused: false,
        }
    }

    /// The key as this queue keeps it (hashed in Key mode only).
    fn queued(&self, key: Option<Bytes>) -> QueuedKey {
        let hash = match self.ordering {
            OrderingMode::Key => self.hasher.hash_one(&key),
            _ => 0,
        };
        QueuedKey { hash, key }
    }

    /// Appends a fetched record (records arrive in offset order).
    pub fn push(&mut self, key: Option<Bytes>, item: T) {
        self.buffered += 1;
        self.arrivals += 1;
        if self.ordering != OrderingMode::Key {
            self.buffer.push_back((self.arrivals, key, item));
            return;
        }
        let key = self.queued(key);
        let arrival = self.arrivals;
        let state = self.keyed.entry(key.clone()).or_insert(KeyState {
            busy: false,
            head: NONE,
            tail: NONE,
        });
        let slot = Slot {
            arrival,
            item: Some((key, item)),
            next: NONE,
        };
        let index = match self.free.pop() {
            Some(i) => {
                self.slots[i as usize] = slot;
                i
            }
            None => {
                // The slab holds at most the buffered records, which the
                // buffer bound keeps far below u32::MAX.
                self.slots.push(slot);
                (self.slots.len() - 1) as u32
            }
        };
        if state.tail == NONE {
            state.head = index;
            if !state.busy {
                self.ready.push(Reverse((arrival, index)));
            }
        } else {
            self.slots[state.tail as usize].next = index;
        }
        state.tail = index;
    }

    /// Records waiting to start.
    pub fn buffered(&self) -> usize {
        self.buffered
    }

    /// Records started and not finished.
    pub fn in_flight(&self) -> usize {
        self.in_flight
    }

    /// Takes the records that may start now by the queue's ordering mode,
    /// at most `task_limit` in flight for this task and at most `*budget`
    /// more for the instance (which is decreased). Each returned record is
    /// in flight until [`finish`](Self::finish) is called with its key.
    pub fn take_startable(
        &mut self,
        task_limit: usize,
        budget: &mut usize,
    ) -> Vec<(Option<Bytes>, T)> {
        self.take_startable_below(task_limit, budget, u64::MAX)
    }

    /// Arrival number (1-based, counting every [`push`](Self::push)) one
    /// past the last record started: the fence of
    /// [`take_startable_below`](Self::take_startable_below).
    pub fn started_end(&self) -> u64 {
        self.started_end
    }

    /// Whether every record that arrived before `fence` has finished
    /// (nothing in flight, nothing older than `fence` buffered).
    pub fn done_below(&self, fence: u64) -> bool {
        if self.in_flight > 0 {
            return false;
        }
        // Nothing in flight: every key with buffered records is ready.
        let oldest = match self.ordering {
            OrderingMode::Key => self.ready.peek().map(|Reverse((a, _))| *a),
            _ => self.buffer.front().map(|(a, _, _)| *a),
        };
        oldest.is_none_or(|a| a >= fence)
    }

    /// [`take_startable`](Self::take_startable) limited to records that
    /// arrived before `fence` (an arrival number): exactly-once closes a
    /// transaction by finishing every record older than the newest one
    /// started, so that the committed offset covers every output.
    pub fn take_startable_below(
        &mut self,
        task_limit: usize,
        budget: &mut usize,
        fence: u64,
    ) -> Vec<(Option<Bytes>, T)> {
        let mut out = Vec::new();
        while *budget > 0 {
            let Some(next) = self.take_one_below(task_limit, fence) else {
                break;
            };
            *budget -= 1;
            out.push(next);
        }
        out
    }

    /// The oldest record that may start now (see
    /// [`take_startable_below`](Self::take_startable_below)), if any; it is
    /// in flight until [`finish`](Self::finish) is called with its key.
    pub fn take_one_below(&mut self, task_limit: usize, fence: u64) -> Option<(Option<Bytes>, T)> {
        self.take_one_keyed(task_limit, fence)
            .map(|(key, item)| (key.into_key(), item))
    }

    /// [`take_one_below`](Self::take_one_below) with the key as the queue
    /// keeps it, for [`finish_keyed`](Self::finish_keyed).
    pub(crate) fn take_one_keyed(
        &mut self,
        task_limit: usize,
        fence: u64,
    ) -> Option<(QueuedKey, T)> {
        let limit = match self.ordering {
            OrderingMode::Partition => task_limit.min(1),
            _ => task_limit,
        };
        if self.in_flight >= limit {
            return None;
        }
        let out = match self.ordering {
            OrderingMode::Partition | OrderingMode::Unordered => {
                if self.buffer.front().is_none_or(|b| b.0 >= fence) {
                    return None;
                }
                let (arrival, key, item) = self.buffer.pop_front()?;
                let key = QueuedKey { hash: 0, key };
                self.started_end = arrival + 1;
                let cap = self.buffer.capacity();
                if cap > KEPT_SLOTS && self.buffer.len() < cap / 4 {
                    self.buffer
                        .shrink_to((self.buffer.len() * 2).max(KEPT_SLOTS));
                }
                (key, item)
            }
            OrderingMode::Key => {
                if self.ready.peek().is_none_or(|Reverse((a, _))| *a >= fence) {
                    return None;
                }
                let Reverse((arrival, index)) = self.ready.pop()?;
                self.started_end = self.started_end.max(arrival + 1);
                let slot = &mut self.slots[index as usize];
                let (item, next) = (slot.item.take(), slot.next);
                let (key, item) = item.expect("ready slots hold a record");
                self.free.push(index);
                let state = self.keyed.get_mut(&key).expect("ready keys have records");
                state.busy = true;
                state.head = next;
                if next == NONE {
                    state.tail = NONE;
                }
                (key, item)
            }
        };
        self.buffered -= 1;
        self.in_flight += 1;
        if self.buffered == 0 {
            self.release_empty_slab();
        }
        Some(out)
    }

    /// Key mode, nothing buffered: every slot is free and no ready entry
    /// points into the slab, so it can be emptied and its spare room given
    /// back. Keys in flight keep their (empty) lists.
    fn release_empty_slab(&mut self) {
        if self.slots.capacity() <= KEPT_SLOTS {
            return;
        }
        self.slots.clear();
        self.free.clear();
        self.ready.clear();
        self.slots.shrink_to(KEPT_SLOTS);
        self.free.shrink_to(KEPT_SLOTS);
        self.ready.shrink_to(KEPT_SLOTS);
        if self.keyed.capacity() > KEPT_SLOTS && self.keyed.len() < self.keyed.capacity() / 4 {
            self.keyed.shrink_to((self.keyed.len() * 2).max(KEPT_SLOTS));
        }
    }

    /// A record with `key` finished (done or handed to the retry lane).
    pub fn finish(&mut self, key: &Option<Bytes>) {
        let key = self.queued(key.clone());
        self.finish_keyed(&key);
    }

    /// [`finish`](Self::finish) for a key from
    /// [`take_one_keyed`](Self::take_one_keyed).
    pub(crate) fn finish_keyed(&mut self, key: &QueuedKey) {
        self.in_flight = self.in_flight.saturating_sub(1);
        if self.ordering != OrderingMode::Key {
            return;
        }
        let Some(state) = self.keyed.get_mut(key).filter(|s| s.busy) else {
            return;
        };
        state.busy = false;
        match state.head {
            NONE => {
                self.keyed.remove(key);
            }
            head => {
                let arrival = self.slots[head as usize].arrival;
                self.ready.push(Reverse((arrival, head)));
            }
        }
    }

    /// Drops the records not started (their partition is being revoked).
    pub fn clear_buffer(&mut self) {
        self.buffer.clear();
        // Keys in flight stay, so that finishing them is still known.
        self.keyed.retain(|_, s| {
            s.head = NONE;
            s.tail = NONE;
            s.busy
        });
        self.slots.clear();
        self.free.clear();
        self.ready.clear();
        self.buffered = 0;
        self.release_empty_slab();
        self.buffer.shrink_to(KEPT_SLOTS);
    }

    /// Whether fetching must pause now, asked as records arrive: true
    /// every time `high` or more records are buffered (so records that a
    /// poll took while a pause was being applied get it applied again), and
    /// the queue remembers the pause as [`flow`](Self::flow) does, which
    /// resumes at its low mark. Asked after each `poll`, not only when
    /// records start, it bounds the buffer by `high` plus one poll's
    /// records (`max.poll.records`) whatever backlog the consumer holds.
    pub fn must_pause(&mut self, high: usize) -> bool {
        let full = self.buffered >= high;
        self.paused |= full;
        full
    }

    /// Whether [`flow`](Self::flow) would resume fetching now.
    pub fn wants_resume(&self, low: usize) -> bool {
        self.paused && self.buffered <= low
    }

    /// Pause at `high` buffered records, resume at `low` or fewer; `None`
    /// when nothing changes. Remembers the decision.
    pub fn flow(&mut self, high: usize, low: usize) -> Option<Flow> {
        if !self.paused && self.buffered >= high {
            self.paused = true;
            Some(Flow::Pause)
        } else if self.paused && self.buffered <= low {
            self.paused = false;
            Some(Flow::Resume)
        } else {
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn key(k: u8) -> Option<Bytes> {
        Some(Bytes::copy_from_slice(&[k]))
    }

    #[test]
    fn partition_mode_runs_one_at_a_time() {
        let mut q = TaskQueue::new(OrderingMode::Partition);
        for i in 0..3 {
            q.push(key(i), i);
        }
        let mut budget = 100;
        let got = q.take_startable(10, &mut budget);
        assert_eq!(got.len(), 1);
        assert!(q.take_startable(10, &mut budget).is_empty());
        q.finish(&got[0].0);
        assert_eq!(q.take_startable(10, &mut budget)[0].1, 1);
        assert_eq!(budget, 98);
    }

    #[test]
    fn key_mode_lets_other_keys_overtake() {
        let mut q = TaskQueue::new(OrderingMode::Key);
        for (k, v) in [(1, 0), (1, 1), (2, 2), (1, 3), (3, 4)] {
            q.push(key(k), v);
        }
        let mut budget = 100;
        let got: Vec<i32> = q
            .take_startable(10, &mut budget)
            .into_iter()
            .map(|(_, v)| v)
            .collect();
        assert_eq!(got, vec![0, 2, 4]);
        q.finish(&key(1));
        let got: Vec<i32> = q
            .take_startable(10, &mut budget)
            .into_iter()
            .map(|(_, v)| v)
            .collect();
        assert_eq!(got, vec![1]);
    }

    #[test]
    fn limits_and_flow() {
        let mut q = TaskQueue::new(OrderingMode::Unordered);
        for i in 0..10 {
            q.push(key(i), i);
        }
        let mut budget = 3;
        assert_eq!(q.take_startable(5, &mut budget).len(), 3);
        assert_eq!(budget, 0);
        let mut budget = 100;
        assert_eq!(q.take_startable(5, &mut budget).len(), 2);
        assert_eq!(q.flow(5, 2), Some(Flow::Pause));
        assert_eq!(q.flow(5, 2), None);
        for _ in 0..5 {
            q.finish(&None);
        }
        assert_eq!(q.take_startable(5, &mut budget).len(), 5);
        assert_eq!(q.buffered(), 0);
        assert_eq!(q.flow(5, 2), Some(Flow::Resume));
    }

    #[test]
    fn fence_finishes_older_records_and_starts_no_newer() {
        // Arrivals 1 and 2 start: the fence is 3, and arrival 3 (key 1
        // again) need not run before the transaction commits.
        let mut q = TaskQueue::new(OrderingMode::Key);
        for (k, v) in [(1, 1), (2, 2), (1, 3), (3, 4)] {
            q.push(key(k), v);
        }
        let mut budget = 2;
        let got: Vec<i32> = q
            .take_startable(10, &mut budget)
            .into_iter()
            .map(|(_, v)| v)
            .collect();
        assert_eq!(got, vec![1, 2]);
        let fence = q.started_end();
        assert_eq!(fence, 3);
        q.finish(&key(2));
        q.finish(&key(1));
        assert!(q.done_below(fence), "arrival 3 is not below the fence");
        // With arrival 4 started too, arrival 3 must finish first.
        let mut budget = usize::MAX;
        let mut q2 = TaskQueue::new(OrderingMode::Key);
        for (k, v) in [(1, 1), (1, 2), (2, 3)] {
            q2.push(key(k), v);
        }
        assert_eq!(q2.take_startable(10, &mut budget).len(), 2); // 1 and 3
        let fence = q2.started_end();
        assert_eq!(fence, 4);
        q2.finish(&key(1));
        q2.finish(&key(2));
        assert!(!q2.done_below(fence), "arrival 2 is older than 3, not done");
        let got = q2.take_startable_below(10, &mut budget, fence);
        assert_eq!(got.len(), 1);
        q2.finish(&key(1));
        assert!(q2.done_below(fence));
        q2.push(key(5), 9);
        assert!(q2.take_startable_below(10, &mut budget, fence).is_empty());
    }

    #[test]
    fn cleared_buffer_keeps_keys_in_flight_and_reuses_slots() {
        let mut q = TaskQueue::new(OrderingMode::Key);
        for (k, v) in [(1, 0), (1, 1), (2, 2)] {
            q.push(key(k), v);
        }
        let mut budget = 1;
        assert_eq!(q.take_startable(10, &mut budget)[0].1, 0);
        q.clear_buffer();
        assert_eq!(q.buffered(), 0);
        let mut budget = 100;
        assert!(q.take_startable(10, &mut budget).is_empty());
        // Key 1 is still in flight: its next record waits for the finish.
        q.push(key(1), 3);
        q.push(key(3), 4);
        let got: Vec<i32> = q
            .take_startable(10, &mut budget)
            .into_iter()
            .map(|(_, v)| v)
            .collect();
        assert_eq!(got, vec![4]);
        q.finish(&key(1));
        assert_eq!(q.take_startable(10, &mut budget)[0].1, 3);
        assert_eq!(q.in_flight(), 2);
    }

    #[test]
    fn a_drained_key_slab_gives_its_room_back() {
        let mut q = TaskQueue::new(OrderingMode::Key);
        for i in 0..50_000u32 {
            q.push(key((i % 200) as u8), i);
        }
        assert!(q.slots.capacity() >= 50_000);
        let mut budget = usize::MAX;
        let mut started = Vec::new();
        // One record per key in flight at a time: finish each round.
        while q.buffered() > 0 {
            let round = q.take_startable(usize::MAX, &mut budget);
            for (k, v) in round {
                q.finish(&k);
                started.push(v);
            }
        }
        assert_eq!(started.len(), 50_000);
        assert!(q.slots.capacity() <= KEPT_SLOTS, "{}", q.slots.capacity());
        assert!(q.free.capacity() <= KEPT_SLOTS, "{}", q.free.capacity());
        assert!(q.ready.capacity() <= KEPT_SLOTS, "{}", q.ready.capacity());
        // Each key's records started in arrival order.
        for k in 0..200u32 {
            let of_k: Vec<u32> = started.iter().copied().filter(|v| v % 200 == k).collect();
            assert!(of_k.windows(2).all(|w| w[0] < w[1]), "key {k}");
        }
        // A key still in flight when the slab empties keeps blocking its
        // next record, and the released slab serves new records.
        q.push(key(1), 1);
        q.push(key(2), 2);
        assert_eq!(q.take_startable(10, &mut budget).len(), 2);
        q.push(key(1), 3);
        q.push(key(3), 4);
        let got: Vec<u32> = q
            .take_startable(10, &mut budget)
            .into_iter()
            .map(|(_, v)| v)
            .collect();
        assert_eq!(got, vec![4]);
        q.finish(&key(1));
        assert_eq!(q.take_startable(10, &mut budget)[0].1, 3);
    }

    #[test]
    fn a_drained_offset_order_buffer_gives_its_room_back() {
        for mode in [OrderingMode::Partition, OrderingMode::Unordered] {
            let mut q = TaskQueue::new(mode);
            for i in 0..50_000u32 {
                q.push(None, i);
            }
            assert!(q.buffer.capacity() >= 50_000);
            let mut budget = usize::MAX;
            let mut next = 0;
            while q.buffered() > 0 {
                for (k, v) in q.take_startable(1, &mut budget) {
                    assert_eq!(v, next, "{mode:?} keeps offset order");
                    next += 1;
                    q.finish(&k);
                }
            }
            assert_eq!(next, 50_000);
            assert!(
                q.buffer.capacity() <= 2 * KEPT_SLOTS,
                "{mode:?}: {}",
                q.buffer.capacity()
            );
        }
    }

    #[test]
    fn a_cleared_backlog_gives_its_room_back() {
        let mut q = TaskQueue::new(OrderingMode::Key);
        for i in 0..20_000u32 {
            q.push(key((i % 7) as u8), i);
        }
        q.clear_buffer();
        assert!(q.slots.capacity() <= KEPT_SLOTS);
    }

    /// The runtime's poll loop against a consumer holding a backlog of
    /// 100,000 records: each poll returns up to 500 records of the
    /// partition unless it is paused, and after each poll the queue is
    /// asked whether to pause ([`TaskQueue::must_pause`]); a dispatcher
    /// that runs only every third poll starts 64 records and resumes at
    /// the low mark. The buffer never exceeds the high mark plus one poll
    /// (with the poll loop not applying the pause it peaks at 96,700), and
    /// every record starts, in order per key.
    #[test]
    fn a_backlog_is_buffered_up_to_the_high_mark_plus_one_poll() {
        const POLL: usize = 500;
        let (high, low) = (2_048, 1_024);
        let mut q = TaskQueue::new(OrderingMode::Key);
        let mut backlog = 0..100_000u32;
        let mut consumer_paused = false;
        let (mut pauses, mut peak, mut round) = (0, 0, 0u32);
        let mut started: Vec<u32> = Vec::new();
        while started.len() < 100_000 {
            round += 1;
            if !consumer_paused {
                for i in backlog.by_ref().take(POLL) {
                    q.push(key((i % 50) as u8), i);
                }
            }
            if q.must_pause(high) {
                consumer_paused = true;
                pauses += 1;
            }
            peak = peak.max(q.buffered());
            if round % 3 == 0 {
                let mut budget = 64;
                for (k, v) in q.take_startable(64, &mut budget) {
                    started.push(v);
                    q.finish(&k);
                }
                match q.flow(high, low) {
                    Some(Flow::Resume) => consumer_paused = false,
                    Some(Flow::Pause) => consumer_paused = true,
                    None => {}
                }
            }
        }
        assert!(pauses > 10, "the backlog made the queue pause: {pauses}");
        assert!(peak < high + POLL, "peak {peak}");
        assert!(peak >= high, "the high mark was reached: {peak}");
        for k in 0..50u32 {
            let of_k: Vec<u32> = started.iter().copied().filter(|v| v % 50 == k).collect();
            assert_eq!(of_k.len(), 2_000);
            assert!(of_k.windows(2).all(|w| w[0] < w[1]), "key {k}");
        }
    }

    proptest! {
        /// Random keys and random completion order: in Key mode no two
        /// records of a key are ever in flight together and each key's
        /// records start in offset order; every record starts.
        #[test]
        fn key_mode_keeps_per_key_order(
            keys in proptest::collection::vec(0u8..6, 1..120),
            seed in any::<u64>(),
            limit in 1usize..8,
        ) {
            let mut q = TaskQueue::new(OrderingMode::Key);
            for (i, k) in keys.iter().enumerate() {
                q.push(key(*k), i);
            }
            let mut rng = fastrand::Rng::with_seed(seed);
            let mut running: Vec<(Option<Bytes>, usize)> = Vec::new();
            let mut started: Vec<usize> = Vec::new();
            loop {
                let mut budget = usize::MAX;
                for (k, i) in q.take_startable(limit, &mut budget) {
                    prop_assert!(running.iter().all(|(rk, _)| *rk != k));
                    running.push((k, i));
                    started.push(i);
                }
                prop_assert!(running.len() <= limit);
                if running.is_empty() {
                    break;
                }
                let (k, _) = running.swap_remove(rng.usize(..running.len()));
                q.finish(&k);
            }
            prop_assert_eq!(started.len(), keys.len());
            for k in 0u8..6 {
                let of_k: Vec<usize> =
                    started.iter().copied().filter(|&i| keys[i] == k).collect();
                prop_assert!(of_k.windows(2).all(|w| w[0] < w[1]));
            }
        }
    }
}
