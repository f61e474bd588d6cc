//! Which buffered records of a task (one input partition) may start now,
//! by [`Ordering`] mode and in-flight limits, and when fetching the
//! partition should pause for backpressure. Pure: no I/O, no clock.

use std::collections::{HashSet, VecDeque};

use bytes::Bytes;

/// What order records of one partition are processed in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Ordering {
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
#[derive(Debug)]
pub struct TaskQueue<T> {
    buffer: VecDeque<(Option<Bytes>, T)>,
    in_flight: usize,
    busy_keys: HashSet<Option<Bytes>>,
    paused: bool,
}

impl<T> Default for TaskQueue<T> {
    fn default() -> Self {
        TaskQueue {
            buffer: VecDeque::new(),
            in_flight: 0,
            busy_keys: HashSet::new(),
            paused: false,
        }
    }
}

impl<T> TaskQueue<T> {
    /// Appends a fetched record (records arrive in offset order).
    pub fn push(&mut self, key: Option<Bytes>, item: T) {
        self.buffer.push_back((key, item));
    }

    /// Records waiting to start.
    pub fn buffered(&self) -> usize {
        self.buffer.len()
    }

    /// Records started and not finished.
    pub fn in_flight(&self) -> usize {
        self.in_flight
    }

    /// Takes the records that may start now, at most `task_limit` in flight
    /// for this task and at most `*budget` more for the instance (which is
    /// decreased). Each returned record is in flight until
    /// [`finish`](Self::finish) is called with its key.
    pub fn take_startable(
        &mut self,
        ordering: Ordering,
        task_limit: usize,
        budget: &mut usize,
    ) -> Vec<(Option<Bytes>, T)> {
        let mut room = task_limit.saturating_sub(self.in_flight).min(*budget);
        if ordering == Ordering::Partition {
            room = room.min(usize::from(self.in_flight == 0));
        }
        let mut out = Vec::new();
        if room == 0 || self.buffer.is_empty() {
            return out;
        }
        match ordering {
            Ordering::Partition | Ordering::Unordered => {
                let n = room.min(self.buffer.len());
                out.extend(self.buffer.drain(..n));
            }
            Ordering::Key => {
                // Keys skipped in this scan stay blocked for the rest of it,
                // so a key's later record never overtakes its earlier one.
                let mut blocked: HashSet<Option<Bytes>> = HashSet::new();
                let mut kept = VecDeque::with_capacity(self.buffer.len());
                while let Some((key, item)) = self.buffer.pop_front() {
                    if out.len() == room {
                        kept.push_back((key, item));
                        kept.append(&mut self.buffer);
                        break;
                    }
                    if self.busy_keys.contains(&key) || blocked.contains(&key) {
                        blocked.insert(key.clone());
                        kept.push_back((key, item));
                    } else {
                        self.busy_keys.insert(key.clone());
                        out.push((key, item));
                    }
                }
                self.buffer = kept;
            }
        }
        self.in_flight += out.len();
        *budget -= out.len();
        out
    }

    /// A record with `key` finished (done or handed to the retry lane).
    pub fn finish(&mut self, key: &Option<Bytes>) {
        self.in_flight = self.in_flight.saturating_sub(1);
        self.busy_keys.remove(key);
    }

    /// Drops the records not started (their partition is being revoked).
    pub fn clear_buffer(&mut self) {
        self.buffer.clear();
    }

    /// Pause at `high` buffered records, resume at `low` or fewer; `None`
    /// when nothing changes. Remembers the decision.
    pub fn flow(&mut self, high: usize, low: usize) -> Option<Flow> {
        if !self.paused && self.buffer.len() >= high {
            self.paused = true;
            Some(Flow::Pause)
        } else if self.paused && self.buffer.len() <= low {
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
        let mut q = TaskQueue::default();
        for i in 0..3 {
            q.push(key(i), i);
        }
        let mut budget = 100;
        let got = q.take_startable(Ordering::Partition, 10, &mut budget);
        assert_eq!(got.len(), 1);
        assert!(q
            .take_startable(Ordering::Partition, 10, &mut budget)
            .is_empty());
        q.finish(&got[0].0);
        assert_eq!(
            q.take_startable(Ordering::Partition, 10, &mut budget)[0].1,
            1
        );
        assert_eq!(budget, 98);
    }

    #[test]
    fn key_mode_lets_other_keys_overtake() {
        let mut q = TaskQueue::default();
        for (k, v) in [(1, 0), (1, 1), (2, 2), (1, 3), (3, 4)] {
            q.push(key(k), v);
        }
        let mut budget = 100;
        let got: Vec<i32> = q
            .take_startable(Ordering::Key, 10, &mut budget)
            .into_iter()
            .map(|(_, v)| v)
            .collect();
        assert_eq!(got, vec![0, 2, 4]);
        q.finish(&key(1));
        let got: Vec<i32> = q
            .take_startable(Ordering::Key, 10, &mut budget)
            .into_iter()
            .map(|(_, v)| v)
            .collect();
        assert_eq!(got, vec![1]);
    }

    #[test]
    fn limits_and_flow() {
        let mut q = TaskQueue::default();
        for i in 0..10 {
            q.push(key(i), i);
        }
        let mut budget = 3;
        assert_eq!(
            q.take_startable(Ordering::Unordered, 5, &mut budget).len(),
            3
        );
        assert_eq!(budget, 0);
        let mut budget = 100;
        assert_eq!(
            q.take_startable(Ordering::Unordered, 5, &mut budget).len(),
            2
        );
        assert_eq!(q.flow(5, 2), Some(Flow::Pause));
        assert_eq!(q.flow(5, 2), None);
        for _ in 0..5 {
            q.finish(&None);
        }
        assert_eq!(
            q.take_startable(Ordering::Unordered, 5, &mut budget).len(),
            5
        );
        assert_eq!(q.buffered(), 0);
        assert_eq!(q.flow(5, 2), Some(Flow::Resume));
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
            let mut q = TaskQueue::default();
            for (i, k) in keys.iter().enumerate() {
                q.push(key(*k), i);
            }
            let mut rng = fastrand::Rng::with_seed(seed);
            let mut running: Vec<(Option<Bytes>, usize)> = Vec::new();
            let mut started: Vec<usize> = Vec::new();
            loop {
                let mut budget = usize::MAX;
                for (k, i) in q.take_startable(Ordering::Key, limit, &mut budget) {
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
