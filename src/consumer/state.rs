//! Per-partition consumer state shared by the application's `poll` and the
//! fetch tasks: positions, buffered records, pause flags, pending resets
//! and errors.
//!
//! Two offsets are kept per partition: the *position* (next record `poll`
//! returns, advanced only for records returned, as in the Java client) and
//! the *fetch offset* (next offset to fetch: the end of what is buffered).
//! Prefetching moves the fetch offset ahead while the application works.
//!
//! Memory bound: a partition is not fetched while its buffered bytes are at
//! or above `max.partition.fetch.bytes`, and one response adds at most
//! `max.partition.fetch.bytes` per partition (or one batch, if a single
//! batch is larger, KIP-74). So buffered record bytes stay below
//! 2 × `max.partition.fetch.bytes` (+ one oversized batch) per assigned
//! partition, and one response is bounded by `fetch.max.bytes`. Record
//! bytes are slices of their response frame, which stays allocated until
//! its last record is dropped.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;

use tokio::sync::Notify;

use super::config::{AutoOffsetReset, IsolationLevel};
use super::record::{ConsumerRecord, Position};
use super::room::RecentPeak;
use crate::error::Error;
use crate::TopicPartition;

/// Record slots a partition's buffer always keeps; room beyond this and
/// beyond twice what recent fetches filled it to is given back once the
/// buffer is below a quarter full (see [`RecentPeak`]).
const KEPT_RECORD_SLOTS: usize = 1024;

/// One assigned partition.
#[derive(Debug)]
pub(crate) struct PartitionState {
    /// Next offset `poll` returns; `None` until reset or seek.
    pub(crate) position: Option<Position>,
    /// Next offset to fetch (meaningful when `position` is set).
    pub(crate) fetch_offset: i64,
    /// Leader epoch of the record before `fetch_offset`, sent as the last
    /// fetched epoch so the leader can report a diverged log (KIP-320).
    pub(crate) fetch_epoch: Option<i32>,
    /// Fetched records not yet returned, in offset order.
    pub(crate) buffer: VecDeque<ConsumerRecord>,
    /// Bytes held by `buffer` (see [`ConsumerRecord::size`]).
    pub(crate) buffered_bytes: usize,
    /// How many records recent fetches left in `buffer`: the room it keeps.
    filled: RecentPeak,
    /// Paused by the application: not fetched, not returned.
    pub(crate) paused: bool,
    /// A reset to apply before fetching (no position, or out of range).
    pub(crate) reset: Option<AutoOffsetReset>,
    /// An error to report from `poll` once the buffer is drained.
    pub(crate) error: Option<Error>,
    /// Bumped by every seek and reset: a fetch response built for an older
    /// value is discarded.
    pub(crate) seq: u64,
    /// From the last fetch response.
    pub(crate) high_watermark: Option<i64>,
    /// Last stable offset, from the last fetch response.
    pub(crate) last_stable_offset: Option<i64>,
    /// Not fetched before this instant (after a partition error).
    pub(crate) retry_at: Option<tokio::time::Instant>,
}

impl PartitionState {
    fn new(reset: AutoOffsetReset) -> Self {
        PartitionState {
            position: None,
            fetch_offset: 0,
            fetch_epoch: None,
            buffer: VecDeque::new(),
            buffered_bytes: 0,
            filled: RecentPeak::default(),
            paused: false,
            reset: Some(reset),
            error: None,
            seq: 0,
            high_watermark: None,
            last_stable_offset: None,
            retry_at: None,
        }
    }

    /// Moves to `position`, dropping buffered records.
    pub(crate) fn seek(&mut self, position: Position) {
        self.position = Some(position);
        self.fetch_offset = position.offset;
        self.fetch_epoch = position.leader_epoch;
        self.buffer.clear();
        self.release_spare();
        self.buffered_bytes = 0;
        self.reset = None;
        self.error = None;
        self.retry_at = None;
        self.seq += 1;
    }

    /// Forgets the position; the next poll applies `reset`.
    pub(crate) fn request_reset(&mut self, reset: AutoOffsetReset) {
        self.position = None;
        self.buffer.clear();
        self.release_spare();
        self.buffered_bytes = 0;
        self.reset = Some(reset);
        self.error = None;
        self.seq += 1;
    }

    /// Whether a fetch task may fetch this partition now, and if not, why.
    pub(crate) fn readiness(
        &self,
        max_buffered: usize,
        now: tokio::time::Instant,
        isolation: IsolationLevel,
    ) -> Readiness {
        if self.position.is_none()
            || self.paused
            || self.reset.is_some()
            || self.error.is_some()
            || self.retry_at.is_some_and(|t| t > now)
        {
            Readiness::Idle
        } else if self.buffered_bytes >= max_buffered {
            Readiness::Full
        } else {
            let end = match isolation {
                IsolationLevel::ReadCommitted => self.last_stable_offset,
                IsolationLevel::ReadUncommitted => self.high_watermark,
            };
            Readiness::Fetch {
                caught_up: end.is_some_and(|end| self.fetch_offset >= end),
            }
        }
    }

    /// Gives back the buffer's spare room beyond what recent fetches
    /// needed once it has drained below a quarter of its capacity, so a
    /// backlog (an outage, a slow application) does not pin its peak queue
    /// for the consumer's life, while steady traffic keeps one allocation
    /// instead of growing it again with every response. Small queues keep
    /// their room ([`KEPT_RECORD_SLOTS`]).
    fn release_spare(&mut self) {
        let cap = self.buffer.capacity();
        if self.buffer.len() >= cap / 4 {
            return;
        }
        if let Some(to) = self.filled.shrink_target(cap, KEPT_RECORD_SLOTS) {
            self.buffer.shrink_to((self.buffer.len() * 2).max(to));
        }
    }

    /// Appends fetched records; the fetch offset moves to `next_offset`,
    /// whose preceding record has leader epoch `last_epoch` (if known).
    pub(crate) fn append(
        &mut self,
        records: impl IntoIterator<Item = ConsumerRecord>,
        next_offset: i64,
        last_epoch: Option<i32>,
    ) {
        for r in records {
            self.buffered_bytes += r.size();
            self.buffer.push_back(r);
        }
        // Every answer counts as a fill, an empty one too: an idle
        // partition's room decays with its empty fetches.
        self.filled.fill(self.buffer.len());
        self.release_spare();
        if next_offset > self.fetch_offset {
            self.fetch_offset = next_offset;
            self.fetch_epoch = last_epoch.or(self.fetch_epoch);
        }
    }

    /// The leader answered a fetch with a diverging epoch: its log's epoch
    /// `epoch` ends at `end_offset`. At or past the fetch offset, only the
    /// epoch was unknown to it (the records fetched so far are in its
    /// log), so fetching goes on under the leader's epoch, as the Java
    /// client's validation does. Below the fetch offset, the records from
    /// `end_offset` on were truncated (an unclean election). Buffered
    /// records past the divergence are dropped and fetching resumes at
    /// `end_offset`. When records past it were already returned, the
    /// position moves back to `end_offset` under a reset policy (as the
    /// Java client does); with `auto.offset.reset=none` the partition
    /// reports [`Error::LogTruncation`] until the application seeks.
    /// Returns whether returned records were truncated.
    pub(crate) fn diverged(
        &mut self,
        tp: &TopicPartition,
        epoch: i32,
        end_offset: i64,
        reset: AutoOffsetReset,
    ) -> bool {
        let Some(position) = self.position.as_mut() else {
            return false;
        };
        if end_offset >= self.fetch_offset {
            self.fetch_epoch = Some(epoch);
            return false;
        }
        let end_offset = end_offset.max(0);
        let returned_truncated = position.offset > end_offset;
        if returned_truncated && reset == AutoOffsetReset::None {
            self.error = Some(Error::LogTruncation {
                partition: tp.clone(),
                offset: position.offset,
                divergent_offset: end_offset,
            });
            self.buffer = VecDeque::new();
            self.buffered_bytes = 0;
            self.fetch_offset = position.offset;
            self.fetch_epoch = position.leader_epoch;
            self.seq += 1;
            return true;
        }
        while self.buffer.back().is_some_and(|r| r.offset >= end_offset) {
            if let Some(r) = self.buffer.pop_back() {
                self.buffered_bytes = self.buffered_bytes.saturating_sub(r.size());
            }
        }
        if returned_truncated {
            position.offset = end_offset;
            position.leader_epoch = Some(epoch);
        }
        self.fetch_offset = end_offset;
        self.fetch_epoch = Some(epoch);
        self.seq += 1;
        returned_truncated
    }

    /// Lag behind the high watermark (read_uncommitted) or the last stable
    /// offset (read_committed).
    pub(crate) fn lag(&self, isolation: IsolationLevel) -> Option<i64> {
        let end = match isolation {
            IsolationLevel::ReadCommitted => self.last_stable_offset,
            IsolationLevel::ReadUncommitted => self.high_watermark,
        }?;
        Some((end - self.position?.offset).max(0))
    }
}

/// Whether one partition is fetched now (see [`PartitionState::readiness`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Readiness {
    /// To fetch. `caught_up`: the last answer had nothing past the fetch
    /// offset (it is at the high watermark, or the last stable offset under
    /// read_committed), so a fetch of it alone would wait on the broker.
    Fetch { caught_up: bool },
    /// Held back only by a full buffer: `poll` drains it, and it is fetched
    /// again as soon as the buffer is below the bound.
    Full,
    /// Not fetched: no position, paused, a reset or an error pending, or
    /// backing off after an error.
    Idle,
}

/// Which of one broker's partitions go into its next fetch.
///
/// Every fetchable partition, except that caught-up ones are held back
/// while another partition waits only for `poll` to drain its buffer: a
/// fetch of caught-up partitions alone has nothing to return, so the
/// broker parks it for `fetch.max.wait.ms`, and the drained partition
/// cannot be fetched until that answer comes (one fetch in flight per
/// broker). Held back, they join the drained partition's fetch, which the
/// broker answers at once. (Reading 6 partitions to their ends, one
/// partition reaching its end first cost up to a `fetch.max.wait.ms` each
/// time this happened.)
pub(crate) fn select_for_fetch<K>(partitions: impl IntoIterator<Item = (K, Readiness)>) -> Vec<K> {
    let mut any_full = false;
    let mut fresh = Vec::new();
    let mut caught_up = Vec::new();
    for (key, readiness) in partitions {
        match readiness {
            Readiness::Fetch { caught_up: false } => fresh.push(key),
            Readiness::Fetch { caught_up: true } => caught_up.push(key),
            Readiness::Full => any_full = true,
            Readiness::Idle => {}
        }
    }
    if !any_full {
        fresh.extend(caught_up);
    }
    fresh
}

/// Everything behind the consumer's lock.
#[derive(Debug, Default)]
pub(crate) struct State {
    /// Assigned partitions.
    pub(crate) partitions: BTreeMap<TopicPartition, PartitionState>,
    /// Running fetch tasks by broker id, with the notifier that wakes each.
    pub(crate) fetchers: HashMap<i32, Arc<Notify>>,
    /// Where the next `poll` starts taking records (round robin).
    cursor: usize,
}

impl State {
    /// Sets the assignment: kept partitions keep their state, new ones wait
    /// for a reset (or a seek), removed ones are dropped.
    pub(crate) fn assign(&mut self, tps: Vec<TopicPartition>, reset: AutoOffsetReset) {
        let mut next = BTreeMap::new();
        for tp in tps {
            let state = self
                .partitions
                .remove(&tp)
                .unwrap_or_else(|| PartitionState::new(reset));
            next.insert(tp, state);
        }
        self.partitions = next;
    }

    /// The state of an assigned partition.
    pub(crate) fn get_mut(&mut self, tp: &TopicPartition) -> Result<&mut PartitionState, Error> {
        self.partitions
            .get_mut(tp)
            .ok_or_else(|| Error::NotAssigned {
                partition: tp.clone(),
            })
    }

    /// Wakes every fetch task (something became fetchable).
    pub(crate) fn wake_fetchers(&self) {
        for wake in self.fetchers.values() {
            wake.notify_one();
        }
    }

    /// [`drain_into`](Self::drain_into) a new vector.
    #[cfg(test)]
    pub(crate) fn drain(&mut self, max: usize) -> Result<Vec<ConsumerRecord>, Error> {
        let mut out = Vec::new();
        self.drain_into(max, &mut out)?;
        Ok(out)
    }

    /// Appends up to `max` buffered records of unpaused partitions to `out`
    /// (whose room is reused), round robin, advancing positions past the
    /// records returned (and past skipped control or aborted batches once a
    /// buffer is drained); returns how many were appended.
    ///
    /// A partition error is returned (and cleared) once the records fetched
    /// before it have been returned.
    pub(crate) fn drain_into(
        &mut self,
        max: usize,
        out: &mut Vec<ConsumerRecord>,
    ) -> Result<usize, Error> {
        // Sized once for what it can take, not grown by doubling.
        let buffered = self
            .partitions
            .values()
            .filter(|p| !p.paused)
            .map(|p| p.buffer.len())
            .sum::<usize>();
        out.reserve(buffered.min(max));
        let before = out.len();
        let max = before.saturating_add(max);
        let n = self.partitions.len();
        if n == 0 {
            return Ok(0);
        }
        let start = self.cursor % n;
        self.cursor = self.cursor.wrapping_add(1);
        let mut order: Vec<&mut PartitionState> = self.partitions.values_mut().collect();
        order.rotate_left(start);
        for p in order {
            if p.paused {
                continue;
            }
            if p.buffer.is_empty() {
                if let Some(e) = p.error.take() {
                    if out.len() == before {
                        return Err(e);
                    }
                    // Report it with the next poll, after these records.
                    p.error = Some(e);
                    continue;
                }
            }
            let Some(position) = p.position.as_mut() else {
                continue;
            };
            while out.len() < max {
                let Some(r) = p.buffer.pop_front() else { break };
                p.buffered_bytes = p.buffered_bytes.saturating_sub(r.size());
                position.offset = r.offset + 1;
                position.leader_epoch = r.leader_epoch.or(position.leader_epoch);
                out.push(r);
            }
            if p.buffer.is_empty() && p.reset.is_none() && p.fetch_offset > position.offset {
                // Past a skipped tail (markers, aborted batches): the epoch
                // committed with the position is the tail's, so a later
                // fetch from it does not look diverged.
                position.offset = p.fetch_offset;
                position.leader_epoch = p.fetch_epoch.or(position.leader_epoch);
            }
            p.release_spare();
        }
        Ok(out.len() - before)
    }

    /// Positions of partitions that have one (for commits).
    pub(crate) fn positions(&self) -> BTreeMap<TopicPartition, Position> {
        self.partitions
            .iter()
            .filter_map(|(tp, p)| Some((tp.clone(), p.position?)))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(tp: &TopicPartition, offset: i64) -> ConsumerRecord {
        ConsumerRecord {
            partition: tp.clone(),
            offset,
            timestamp: 0,
            timestamp_type: Default::default(),
            key: None,
            value: None,
            headers: Vec::new(),
            leader_epoch: Some(1),
        }
    }

    /// A state with `tp` assigned and positioned at `offset`.
    fn positioned(tp: &TopicPartition, offset: i64) -> State {
        let mut s = State::default();
        s.assign(vec![tp.clone()], AutoOffsetReset::Latest);
        s.get_mut(tp).unwrap().seek(Position {
            offset,
            leader_epoch: None,
        });
        s
    }

    #[test]
    fn drain_advances_positions_only_for_returned_records() {
        let a = TopicPartition::new("t", 0);
        let mut s = positioned(&a, 10);
        let p = s.get_mut(&a).unwrap();
        p.append((10..15).map(|o| rec(&a, o)).collect::<Vec<_>>(), 17, None);
        assert_eq!(s.drain(3).unwrap().len(), 3);
        assert_eq!(s.positions()[&a].offset, 13);
        assert_eq!(s.positions()[&a].leader_epoch, Some(1));
        assert_eq!(s.drain(10).unwrap().len(), 2);
        // Drained: the position moves past the skipped tail (a marker).
        assert_eq!(s.positions()[&a].offset, 17);
    }

    #[test]
    fn paused_partitions_keep_their_records_and_errors_follow_records() {
        let a = TopicPartition::new("t", 0);
        let b = TopicPartition::new("t", 1);
        let mut s = State::default();
        s.assign(vec![a.clone(), b.clone()], AutoOffsetReset::Latest);
        for tp in [&a, &b] {
            let p = s.get_mut(tp).unwrap();
            p.seek(Position {
                offset: 0,
                leader_epoch: None,
            });
            p.append(vec![rec(tp, 0)], 1, None);
        }
        s.get_mut(&a).unwrap().paused = true;
        s.get_mut(&b).unwrap().error = Some(Error::Closed);
        let got = s.drain(10).unwrap();
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].partition, b);
        assert!(matches!(s.drain(10), Err(Error::Closed)));
        assert!(s.drain(10).unwrap().is_empty());
        s.get_mut(&a).unwrap().paused = false;
        assert_eq!(s.drain(10).unwrap()[0].partition, a);
    }

    #[test]
    fn a_full_buffer_stops_fetching_until_drained() {
        let tp = TopicPartition::new("t", 0);
        let mut s = State::default();
        s.assign(vec![tp.clone()], AutoOffsetReset::Latest);
        let now = tokio::time::Instant::now();
        let ready = |p: &PartitionState| p.readiness(100, now, IsolationLevel::ReadUncommitted);
        let fresh = Readiness::Fetch { caught_up: false };
        let p = s.get_mut(&tp).unwrap();
        assert_eq!(ready(p), Readiness::Idle, "no position yet");
        p.seek(Position {
            offset: 0,
            leader_epoch: None,
        });
        assert_eq!(ready(p), fresh);
        p.append((0..4).map(|o| rec(&tp, o)).collect::<Vec<_>>(), 4, None);
        assert!(p.buffered_bytes >= 100);
        assert_eq!(ready(p), Readiness::Full, "bound reached");
        s.drain(4).unwrap();
        let p = s.get_mut(&tp).unwrap();
        assert_eq!(p.buffered_bytes, 0);
        assert_eq!(ready(p), fresh);
        p.paused = true;
        assert_eq!(ready(p), Readiness::Idle);
    }

    #[test]
    fn a_drained_backlog_gives_its_room_back_after_smaller_fetches() {
        let tp = TopicPartition::new("t", 0);
        let mut s = positioned(&tp, 0);
        let p = s.get_mut(&tp).unwrap();
        let backlog = 20 * KEPT_RECORD_SLOTS as i64;
        p.append(
            (0..backlog).map(|o| rec(&tp, o)).collect::<Vec<_>>(),
            backlog,
            None,
        );
        assert!(s.get_mut(&tp).unwrap().buffer.capacity() >= backlog as usize);
        let mut drained = 0;
        while drained < backlog as usize {
            drained += s.drain(500).unwrap().len();
        }
        let p = s.get_mut(&tp).unwrap();
        assert!(p.buffer.is_empty());
        assert!(
            p.buffer.capacity() >= backlog as usize,
            "a fill this large may come again: its room is kept for now"
        );
        // Empty answers (an idle partition): the room decays a sixteenth
        // per answer, so 20 x KEPT_RECORD_SLOTS is gone after 60.
        for _ in 0..60 {
            p.append(Vec::new(), backlog, None);
        }
        assert!(
            p.buffer.capacity() <= 2 * KEPT_RECORD_SLOTS,
            "room kept after the backlog drained: {}",
            p.buffer.capacity()
        );
        p.append(
            (0..10).map(|o| rec(&tp, backlog + o)).collect::<Vec<_>>(),
            backlog + 10,
            None,
        );
        assert_eq!(s.drain(500).unwrap().len(), 10, "still delivers after");
    }

    #[test]
    fn steady_fetches_reuse_the_buffer() {
        // Responses of 4,000 records drained 500 at a time: the buffer is
        // grown for the first and never shrunk and grown again.
        let tp = TopicPartition::new("t", 0);
        let mut s = positioned(&tp, 0);
        let fill = 4 * KEPT_RECORD_SLOTS as i64;
        let mut next = 0;
        let mut capacities = Vec::new();
        for _ in 0..5 {
            let p = s.get_mut(&tp).unwrap();
            p.append(
                (next..next + fill).map(|o| rec(&tp, o)).collect::<Vec<_>>(),
                next + fill,
                None,
            );
            next += fill;
            capacities.push(p.buffer.capacity());
            let mut drained = 0;
            while drained < fill as usize {
                drained += s.drain(500).unwrap().len();
                capacities.push(s.get_mut(&tp).unwrap().buffer.capacity());
            }
        }
        assert!(capacities[0] >= fill as usize);
        assert!(
            capacities.iter().all(|&c| c == capacities[0]),
            "shrunk or grown between fills: {capacities:?}"
        );
    }

    #[test]
    fn caught_up_follows_the_isolation_level_end() {
        let tp = TopicPartition::new("t", 0);
        let mut s = State::default();
        s.assign(vec![tp.clone()], AutoOffsetReset::Latest);
        let now = tokio::time::Instant::now();
        let p = s.get_mut(&tp).unwrap();
        p.seek(Position {
            offset: 10,
            leader_epoch: None,
        });
        let caught_up = |p: &PartitionState, isolation| match p.readiness(100, now, isolation) {
            Readiness::Fetch { caught_up } => caught_up,
            other => panic!("not fetchable: {other:?}"),
        };
        assert!(
            !caught_up(p, IsolationLevel::ReadUncommitted),
            "no end known yet"
        );
        p.high_watermark = Some(10);
        p.last_stable_offset = Some(8);
        assert!(caught_up(p, IsolationLevel::ReadUncommitted));
        assert!(caught_up(p, IsolationLevel::ReadCommitted));
        p.high_watermark = Some(12);
        p.last_stable_offset = Some(12);
        assert!(!caught_up(p, IsolationLevel::ReadUncommitted));
        assert!(!caught_up(p, IsolationLevel::ReadCommitted));
    }

    #[test]
    fn caught_up_partitions_wait_while_another_drains() {
        use Readiness::*;
        let fresh = Fetch { caught_up: false };
        let at_end = Fetch { caught_up: true };
        // Nothing full: everything fetchable goes, caught up or not.
        assert_eq!(
            select_for_fetch([(0, fresh), (1, at_end), (2, Idle)]),
            [0, 1]
        );
        assert_eq!(select_for_fetch([(0, at_end), (1, at_end)]), [0, 1]);
        // A full buffer: caught-up partitions would make the broker park
        // the fetch, so they wait for the drained partition's fetch.
        assert_eq!(
            select_for_fetch([(0, Full), (1, at_end)]),
            Vec::<i32>::new()
        );
        assert_eq!(select_for_fetch([(0, Full), (1, at_end), (2, fresh)]), [2]);
        // Idle (paused, erroring) partitions do not hold anything back.
        assert_eq!(select_for_fetch([(0, Idle), (1, at_end)]), [1]);
    }

    /// A partition positioned at `position` that fetched `0..fetched` in
    /// epoch 1 (the records from `position` on are still buffered).
    fn fetched_up_to(tp: &TopicPartition, position: i64, fetched: i64) -> State {
        let mut s = State::default();
        s.assign(vec![tp.clone()], AutoOffsetReset::Latest);
        let p = s.get_mut(tp).unwrap();
        p.seek(Position {
            offset: position,
            leader_epoch: None,
        });
        p.append(
            (position..fetched).map(|o| rec(tp, o)).collect::<Vec<_>>(),
            fetched,
            Some(1),
        );
        s
    }

    #[test]
    fn a_divergence_past_the_position_drops_only_unreturned_records() {
        let tp = TopicPartition::new("t", 0);
        let mut s = fetched_up_to(&tp, 10, 20);
        let p = s.get_mut(&tp).unwrap();
        assert_eq!(p.fetch_epoch, Some(1), "sent as the last fetched epoch");
        assert!(!p.diverged(&tp, 1, 15, AutoOffsetReset::None));
        assert_eq!((p.fetch_offset, p.fetch_epoch), (15, Some(1)));
        assert!(p.error.is_none(), "nothing returned was truncated");
        let got: Vec<i64> = s.drain(100).unwrap().iter().map(|r| r.offset).collect();
        assert_eq!(got, (10..15).collect::<Vec<_>>());
    }

    #[test]
    fn a_divergence_below_the_position_resets_or_reports_log_truncation() {
        let tp = TopicPartition::new("t", 0);
        // Everything fetched was returned: the position is 20.
        let mut s = fetched_up_to(&tp, 0, 20);
        assert_eq!(s.drain(100).unwrap().len(), 20);
        let p = s.get_mut(&tp).unwrap();
        assert!(p.diverged(&tp, 1, 12, AutoOffsetReset::Earliest));
        assert_eq!(p.position.unwrap().offset, 12, "back to the divergence");
        assert_eq!((p.fetch_offset, p.fetch_epoch), (12, Some(1)));

        let mut s = fetched_up_to(&tp, 0, 20);
        assert_eq!(s.drain(100).unwrap().len(), 20);
        let p = s.get_mut(&tp).unwrap();
        assert!(p.diverged(&tp, 1, 12, AutoOffsetReset::None));
        assert_eq!(p.position.unwrap().offset, 20, "kept until the app seeks");
        match s.drain(10) {
            Err(Error::LogTruncation {
                partition,
                offset: 20,
                divergent_offset: 12,
            }) => assert_eq!(partition, tp),
            other => panic!("expected LogTruncation, got {other:?}"),
        }
    }

    #[test]
    fn a_position_past_a_skipped_tail_takes_the_tails_epoch() {
        let tp = TopicPartition::new("t", 0);
        let mut s = State::default();
        s.assign(vec![tp.clone()], AutoOffsetReset::Latest);
        let p = s.get_mut(&tp).unwrap();
        p.seek(Position {
            offset: 0,
            leader_epoch: None,
        });
        // Records 0..10 in epoch 1, then a commit marker at 10 written in
        // epoch 2 (not returned).
        p.append(
            (0..10).map(|o| rec(&tp, o)).collect::<Vec<_>>(),
            11,
            Some(2),
        );
        assert_eq!(s.drain(100).unwrap().len(), 10);
        let at = s.positions()[&tp];
        assert_eq!((at.offset, at.leader_epoch), (11, Some(2)));
    }

    #[test]
    fn a_diverging_epoch_at_or_past_the_fetch_offset_only_adopts_the_epoch() {
        let tp = TopicPartition::new("t", 0);
        let mut s = fetched_up_to(&tp, 10, 20);
        let p = s.get_mut(&tp).unwrap();
        assert!(!p.diverged(&tp, 0, 20, AutoOffsetReset::None));
        assert_eq!((p.fetch_offset, p.fetch_epoch), (20, Some(0)));
        assert_eq!(s.drain(100).unwrap().len(), 10, "nothing dropped");
    }

    #[test]
    fn lag_uses_the_isolation_level_bound() {
        let mut p = PartitionState::new(AutoOffsetReset::Latest);
        assert_eq!(p.lag(IsolationLevel::ReadUncommitted), None);
        p.seek(Position {
            offset: 5,
            leader_epoch: None,
        });
        p.high_watermark = Some(20);
        p.last_stable_offset = Some(8);
        assert_eq!(p.lag(IsolationLevel::ReadUncommitted), Some(15));
        assert_eq!(p.lag(IsolationLevel::ReadCommitted), Some(3));
    }
}
