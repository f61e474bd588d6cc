//! The record accumulator: one queue of record batches per partition, the
//! `buffer.memory` pool, and the per-partition sequence state of the
//! idempotent producer (KIP-98; epoch bumps per KIP-360).
//!
//! A partition's queue holds every batch that is sealed and not yet
//! acknowledged, in the order the records were sent. `sent` splits it: the
//! batches before it are in flight (or came back with a retriable error and
//! wait to be sent again); the ones after it wait for their first send. A
//! retriable error sets `rewind`: once nothing of the partition is in flight,
//! sending starts again from the queue's head, so retries keep order.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicI32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::{oneshot, Notify};
use tokio::time::Instant;

use super::{ProducerRecord, RecordMetadata};
use crate::error::{Error, Result};
use crate::protocol::compression::Compression;
use crate::protocol::records::{
    decode_batches, set_producer_fields, DecodeLimits, Record, RecordBatchBuilder,
};
use crate::protocol::ProtocolError;
use crate::TopicPartition;

/// Bytes a record may take beyond its key, value and headers in a batch:
/// length, attributes, timestamp and offset deltas, and the three counts,
/// all varints at their widest.
pub(crate) const RECORD_OVERHEAD: usize = 5 + 1 + 10 + 5 + 5 + 5 + 5;
/// The batch header.
pub(crate) const BATCH_OVERHEAD: usize = 61;
/// What the producer holds per pending record besides its bytes (the
/// completion channel or callback, the timestamp), counted against
/// `buffer.memory` so the bound covers the producer's whole backlog.
pub(crate) const PENDING_STATE: usize = 96;

/// The idempotent producer's identity.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ProducerId {
    pub id: i64,
    pub epoch: i16,
}

/// Who learns a record's outcome.
pub(crate) enum Completion {
    /// A [`DeliveryFuture`](super::DeliveryFuture).
    Channel(oneshot::Sender<Result<RecordMetadata>>),
    /// A callback run by the sink that got the response.
    Callback(Box<dyn FnOnce(Result<RecordMetadata>) + Send>),
}

impl Completion {
    fn complete(self, result: Result<RecordMetadata>) {
        match self {
            Completion::Channel(tx) => {
                let _ = tx.send(result);
            }
            Completion::Callback(f) => f(result),
        }
    }
}

/// One record waiting for its acknowledgement.
pub(crate) struct Pending {
    pub done: Completion,
    pub timestamp: i64,
}

/// A sealed record batch.
pub(crate) struct Batch {
    pub id: u64,
    pub data: Bytes,
    pub pending: Vec<Pending>,
    pub mem: usize,
    pub created: Instant,
    pub attempts: u32,
    /// Base sequence under `PartState::producer`, once assigned.
    pub sequence: Option<i32>,
    /// The last attempt's outcome is unknown (no response): the broker may
    /// have written it.
    pub unresolved: bool,
}

impl Batch {
    pub fn count(&self) -> i32 {
        self.pending.len() as i32
    }
}

struct OpenBatch {
    builder: RecordBatchBuilder,
    pending: Vec<Pending>,
    mem: usize,
    created: Instant,
}

/// A partition's queue and sequence state.
pub(crate) struct PartState {
    open: Option<OpenBatch>,
    pub queue: VecDeque<Batch>,
    pub sent: usize,
    pub in_flight: usize,
    pub rewind: bool,
    /// A sequenced batch was rejected for good: renumber the queue from
    /// `acked_seq` before sending again.
    pub resequence: bool,
    /// The producer id and epoch the queue's sequence numbers belong to.
    pub producer: Option<ProducerId>,
    pub next_seq: i32,
    /// The sequence after the last acknowledged batch.
    pub acked_seq: i32,
    /// The broker acknowledged a batch of `producer`'s id here. Until then it
    /// may hold no state for the producer on this partition and would
    /// accept any sequence, so a later batch that overtakes a rejected
    /// first one (NOT_LEADER_OR_FOLLOWER on a topic still being created)
    /// would be written and the first one then refused as out of order:
    /// one batch at a time until the first acknowledgement.
    pub confirmed: bool,
    pub backoff_until: Option<Instant>,
    pub queued_bytes: usize,
}

/// A partition: its queue behind a lock, and its leader for routing.
pub(crate) struct PartitionQueue {
    pub tp: TopicPartition,
    /// Leader broker id from the newest metadata, -1 when none.
    pub leader: AtomicI32,
    state: Mutex<PartState>,
}

impl PartitionQueue {
    pub fn lock(&self) -> MutexGuard<'_, PartState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Batch-building settings.
#[derive(Debug, Clone)]
pub(crate) struct BatchSettings {
    pub batch_size: usize,
    pub linger: Duration,
    pub delivery_timeout: Duration,
    pub compression: Compression,
    pub level: Option<i32>,
    pub transactional: bool,
    pub max_in_flight: usize,
    pub retry_backoff: Duration,
    pub retry_backoff_max: Duration,
}

/// A batch picked for a Produce request.
pub(crate) struct Drained {
    pub queue: Arc<PartitionQueue>,
    pub batch_id: u64,
    pub data: Bytes,
}

/// What a drain pass found.
#[derive(Default)]
pub(crate) struct DrainResult {
    pub batches: Vec<Drained>,
    /// When the next batch becomes ready by linger or backoff.
    pub next_wake: Option<Instant>,
    /// Batches that passed `delivery.timeout.ms`, to fail.
    pub expired: Vec<(TopicPartition, Batch)>,
    /// An expired batch's outcome was unknown: the epoch must be bumped.
    pub bump: bool,
}

/// All partition queues and the memory pool.
pub(crate) struct Accumulator {
    pub settings: BatchSettings,
    partitions: RwLock<HashMap<TopicPartition, Arc<PartitionQueue>>>,
    next_batch_id: AtomicU64,
    /// Records accepted and not yet completed.
    outstanding: AtomicUsize,
    idle: Notify,
    /// While non-zero, every open batch is ready at once.
    pub flushing: AtomicUsize,
    pub memory: MemoryPool,
}

impl Accumulator {
    pub fn new(settings: BatchSettings, buffer_memory: usize) -> Accumulator {
        Accumulator {
            settings,
            partitions: RwLock::new(HashMap::new()),
            next_batch_id: AtomicU64::new(0),
            outstanding: AtomicUsize::new(0),
            idle: Notify::new(),
            flushing: AtomicUsize::new(0),
            memory: MemoryPool::new(buffer_memory),
        }
    }

    /// The queue of `tp`, created on first use with `leader`.
    pub fn queue(&self, tp: &TopicPartition, leader: i32) -> Arc<PartitionQueue> {
        if let Some(q) = self
            .partitions
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(tp)
        {
            return q.clone();
        }
        let mut map = self.partitions.write().unwrap_or_else(|p| p.into_inner());
        map.entry(tp.clone())
            .or_insert_with(|| {
                Arc::new(PartitionQueue {
                    tp: tp.clone(),
                    leader: AtomicI32::new(leader),
                    state: Mutex::new(PartState {
                        open: None,
                        queue: VecDeque::new(),
                        sent: 0,
                        in_flight: 0,
                        rewind: false,
                        resequence: false,
                        producer: None,
                        next_seq: 0,
                        acked_seq: 0,
                        confirmed: false,
                        backoff_until: None,
                        queued_bytes: 0,
                    }),
                })
            })
            .clone()
    }

    /// Every partition queue.
    pub fn queues(&self) -> Vec<Arc<PartitionQueue>> {
        self.partitions
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .cloned()
            .collect()
    }

    /// Bytes queued for `tp` (for the adaptive sticky partitioner).
    pub fn queued_bytes(&self, tp: &TopicPartition) -> usize {
        self.partitions
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(tp)
            .map_or(0, |q| q.lock().queued_bytes)
    }

    /// Appends a record whose `mem` bytes were already taken from the pool.
    /// Returns whether the partition's sink should look now: a batch was
    /// sealed, or a new one opened whose linger deadline it must learn.
    pub fn append(
        &self,
        queue: &PartitionQueue,
        record: &ProducerRecord,
        timestamp: i64,
        mem: usize,
        done: Completion,
    ) -> Result<bool> {
        let s = &self.settings;
        let mut ps = queue.lock();
        let mut sealed = false;
        if let Some(open) = &ps.open {
            if open.builder.uncompressed_size() + record.size_estimate() > s.batch_size
                && !open.builder.is_empty()
            {
                sealed |= self.seal(&mut ps, &queue.tp)?;
            }
        }
        if ps.open.is_none() {
            sealed = true;
            let builder = RecordBatchBuilder::new()
                .compression(s.compression, s.level)
                .map_err(|e| Error::config("compression.type", e.to_string()))?
                .transactional(s.transactional);
            ps.open = Some(OpenBatch {
                builder,
                pending: Vec::new(),
                mem: 0,
                created: Instant::now(),
            });
        }
        let Some(open) = ps.open.as_mut() else {
            unreachable!("an open batch was just ensured")
        };
        open.builder
            .append(
                timestamp,
                record.key.as_deref(),
                record.value.as_deref(),
                &record.headers,
            )
            .map_err(|e| Error::Serialization {
                topic: queue.tp.topic.to_string(),
                part: "record",
                reason: e.to_string(),
            })?;
        open.pending.push(Pending { done, timestamp });
        open.mem += mem;
        let full = open.builder.uncompressed_size() >= s.batch_size;
        ps.queued_bytes += mem;
        self.outstanding.fetch_add(1, Ordering::AcqRel);
        if full {
            sealed |= self.seal(&mut ps, &queue.tp)?;
        }
        Ok(sealed)
    }

    /// Closes the open batch (compressing it) and queues it.
    fn seal(&self, ps: &mut PartState, tp: &TopicPartition) -> Result<bool> {
        let Some(open) = ps.open.take() else {
            return Ok(false);
        };
        let data = match open.builder.finish() {
            Ok(data) => data.freeze(),
            Err(e) => {
                // Only an impossible size overflow gets here; fail the
                // records rather than lose them silently.
                let err = Error::Serialization {
                    topic: tp.topic.to_string(),
                    part: "record batch",
                    reason: e.to_string(),
                };
                ps.queued_bytes -= open.mem;
                self.finish_records(open.pending, open.mem, tp, Err(err));
                return Ok(false);
            }
        };
        ps.queue.push_back(Batch {
            id: self.next_batch_id.fetch_add(1, Ordering::Relaxed),
            data,
            pending: open.pending,
            mem: open.mem,
            created: open.created,
            attempts: 0,
            sequence: None,
            unresolved: false,
        });
        Ok(true)
    }

    /// Picks at most one batch per partition led by `broker`, up to
    /// `max_bytes` in all (the first batch always fits), and returns the
    /// expired batches found on the way.
    pub fn drain(
        &self,
        broker: i32,
        max_bytes: usize,
        producer: Option<Option<ProducerId>>,
        urgent: bool,
        start: usize,
        gate: Option<&dyn Fn(&TopicPartition) -> bool>,
    ) -> DrainResult {
        let now = Instant::now();
        let s = &self.settings;
        let urgent = urgent || self.flushing.load(Ordering::Acquire) > 0;
        let mut out = DrainResult::default();
        let mut bytes = 0usize;
        let queues: Vec<Arc<PartitionQueue>> = self
            .queues()
            .into_iter()
            .filter(|q| q.leader.load(Ordering::Acquire) == broker)
            .collect();
        let n = queues.len();
        for i in 0..n {
            let q = &queues[(start + i) % n];
            let mut ps = q.lock();
            self.expire(&mut ps, &q.tp, now, &mut out);
            if ps.in_flight == 0 {
                if ps.rewind {
                    ps.sent = 0;
                    ps.rewind = false;
                }
                if let Some(current) = producer {
                    // Idempotent: wait while an epoch bump is under way.
                    let Some(current) = current else { continue };
                    if ps.producer != Some(current) {
                        // A new epoch of the same id keeps the broker's
                        // state (and its check that sequences restart at
                        // 0); a new id has none.
                        if ps.producer.map(|p| p.id) != Some(current.id) {
                            ps.confirmed = false;
                        }
                        ps.producer = Some(current);
                        renumber(&mut ps, current, 0);
                        ps.acked_seq = 0;
                        ps.resequence = false;
                    } else if ps.resequence {
                        let from = ps.acked_seq;
                        renumber(&mut ps, current, from);
                        ps.resequence = false;
                    }
                }
            } else if ps.rewind || ps.resequence || ps.in_flight >= s.max_in_flight {
                continue;
            } else if let Some(current) = producer {
                if current.is_none() || ps.producer != current || !ps.confirmed {
                    continue;
                }
            }
            if let Some(until) = ps.backoff_until {
                if until > now {
                    out.next_wake = min_instant(out.next_wake, until);
                    continue;
                }
                ps.backoff_until = None;
            }
            if ps.sent >= ps.queue.len() {
                match &ps.open {
                    Some(open) if urgent || open.created + s.linger <= now => {
                        if let Err(e) = self.seal(&mut ps, &q.tp) {
                            tracing::warn!(partition = %q.tp, error = %e, "sealing a batch failed");
                        }
                    }
                    Some(open) => {
                        out.next_wake = min_instant(out.next_wake, open.created + s.linger);
                    }
                    None => {}
                }
            }
            let sent = ps.sent;
            let Some(size) = ps.queue.get(sent).map(|b| b.data.len()) else {
                continue;
            };
            if gate.is_some_and(|may_send| !may_send(&q.tp)) {
                // Transactions v1: not yet added to the transaction.
                continue;
            }
            if bytes > 0 && bytes + size > max_bytes {
                break;
            }
            if let Some(Some(current)) = producer {
                if ps.queue[sent].sequence.is_none() {
                    let seq = ps.next_seq;
                    let batch = &mut ps.queue[sent];
                    assign_sequence(batch, current, seq);
                    ps.next_seq = add_seq(seq, ps.queue[sent].count());
                }
            }
            bytes += size;
            ps.sent += 1;
            ps.in_flight += 1;
            let batch = &ps.queue[sent];
            out.batches.push(Drained {
                queue: q.clone(),
                batch_id: batch.id,
                data: batch.data.clone(),
            });
        }
        out
    }

    /// Expires what waits too long in a partition that no sink serves
    /// (no leader known).
    pub fn expire_only(&self, q: &PartitionQueue) -> DrainResult {
        let mut out = DrainResult::default();
        let mut ps = q.lock();
        self.expire(&mut ps, &q.tp, Instant::now(), &mut out);
        out
    }

    /// Moves batches past `delivery.timeout.ms` that are not in flight into
    /// `out.expired`. The open batch counts too.
    fn expire(&self, ps: &mut PartState, tp: &TopicPartition, now: Instant, out: &mut DrainResult) {
        let timeout = self.settings.delivery_timeout;
        let mut i = ps.sent.min(ps.queue.len());
        if ps.in_flight == 0 {
            i = 0;
        }
        while i < ps.queue.len() {
            if ps.queue[i].created + timeout > now {
                i += 1;
                continue;
            }
            let Some(batch) = ps.queue.remove(i) else {
                break;
            };
            if i < ps.sent {
                ps.sent -= 1;
            }
            if batch.sequence.is_some() {
                if batch.unresolved {
                    out.bump = true;
                } else {
                    ps.resequence = true;
                }
            }
            ps.queued_bytes -= batch.mem;
            out.expired.push((tp.clone(), batch));
        }
        if let Some(open) = &ps.open {
            if open.created + timeout <= now {
                if let Ok(true) = self.seal(ps, tp) {
                    if let Some(batch) = ps.queue.pop_back() {
                        ps.queued_bytes -= batch.mem;
                        out.expired.push((tp.clone(), batch));
                    }
                }
            } else {
                out.next_wake = min_instant(out.next_wake, open.created + timeout);
            }
        }
        if let Some(first) = ps.queue.get(ps.sent) {
            out.next_wake = min_instant(out.next_wake, first.created + timeout);
        }
    }

    /// Splits the batch at `idx` of a partition's queue in two halves, in
    /// place, after the broker refused it as too large (`MESSAGE_TOO_LARGE`:
    /// the topic's `max.message.bytes` is below `batch.size`), as the Java
    /// client does. The halves keep the batch's creation time, attempts and
    /// sequence range (the first half starts at its base sequence), so later
    /// batches keep their numbers. Returns false, changing nothing, for a
    /// batch of one record.
    pub fn split(&self, ps: &mut PartState, idx: usize, tp: &TopicPartition) -> Result<bool> {
        let Some(batch) = ps.queue.get(idx) else {
            return Ok(false);
        };
        if batch.pending.len() < 2 {
            return Ok(false);
        }
        // The batch is our own encoding: decode it whole, without CRC checks.
        let limits = DecodeLimits {
            check_crc: false,
            max_decompressed_size: usize::MAX,
        };
        let encoding_error = |e: ProtocolError| Error::Serialization {
            topic: tp.topic.to_string(),
            part: "record batch split",
            reason: e.to_string(),
        };
        let records: Vec<Record> = decode_batches(batch.data.clone(), &limits)
            .map_err(encoding_error)?
            .batches
            .into_iter()
            .flat_map(|b| b.records)
            .collect();
        if records.len() != batch.pending.len() {
            return Ok(false);
        }
        let half = records.len() / 2;
        let s = &self.settings;
        let encode = |records: &[Record]| -> Result<Bytes> {
            let mut builder = RecordBatchBuilder::new()
                .compression(s.compression, s.level)
                .map_err(encoding_error)?
                .transactional(s.transactional);
            for r in records {
                builder
                    .append(
                        r.timestamp,
                        r.key.as_deref(),
                        r.value.as_deref(),
                        &r.headers,
                    )
                    .map_err(encoding_error)?;
            }
            Ok(builder.finish().map_err(encoding_error)?.freeze())
        };
        let (first, second) = (encode(&records[..half])?, encode(&records[half..])?);
        let producer = ps.producer;
        let Some(mut head) = ps.queue.remove(idx) else {
            return Ok(false);
        };
        let first_mem = head.mem * half / head.pending.len();
        let mut tail = Batch {
            id: self.next_batch_id.fetch_add(1, Ordering::Relaxed),
            data: second,
            pending: head.pending.split_off(half),
            mem: head.mem - first_mem,
            created: head.created,
            attempts: head.attempts,
            sequence: None,
            unresolved: false,
        };
        head.data = first;
        head.mem = first_mem;
        head.unresolved = false;
        if let (Some(seq), Some(producer)) = (head.sequence, producer) {
            assign_sequence(&mut head, producer, seq);
            assign_sequence(&mut tail, producer, add_seq(seq, half as i32));
        }
        ps.queue.insert(idx, tail);
        ps.queue.insert(idx, head);
        Ok(true)
    }

    /// Completes a batch's records and returns its memory to the pool.
    pub fn finish_batch(&self, tp: &TopicPartition, batch: Batch, result: Result<(i64, i64)>) {
        self.finish_records(batch.pending, batch.mem, tp, result);
    }

    fn finish_records(
        &self,
        pending: Vec<Pending>,
        mem: usize,
        tp: &TopicPartition,
        result: Result<(i64, i64)>,
    ) {
        let n = pending.len();
        match result {
            Ok((base_offset, log_append_time)) => {
                for (i, p) in pending.into_iter().enumerate() {
                    let offset = if base_offset < 0 {
                        -1
                    } else {
                        base_offset + i as i64
                    };
                    let timestamp = if log_append_time >= 0 {
                        log_append_time
                    } else {
                        p.timestamp
                    };
                    p.done.complete(Ok(RecordMetadata {
                        partition: tp.clone(),
                        offset,
                        timestamp,
                    }));
                }
            }
            Err(e) => {
                for p in pending {
                    p.done.complete(Err(e.clone()));
                }
            }
        }
        self.memory.release(mem);
        if self.outstanding.fetch_sub(n, Ordering::AcqRel) == n {
            self.idle.notify_waiters();
        }
    }

    /// Returns memory taken for a record that was then refused.
    pub fn memory_release(&self, mem: usize) {
        self.memory.release(mem);
    }

    /// Records accepted and not yet completed.
    pub fn outstanding(&self) -> usize {
        self.outstanding.load(Ordering::Acquire)
    }

    /// Waits until no record is outstanding.
    pub async fn wait_idle(&self) {
        loop {
            let idle = self.idle.notified();
            tokio::pin!(idle);
            idle.as_mut().enable();
            if self.outstanding() == 0 {
                return;
            }
            idle.await;
        }
    }

    /// Fails every record that is not in flight with `err` (used when a
    /// close deadline passes). In-flight batches finish on their response.
    pub fn fail_unsent(&self, err: &Error) {
        for q in self.queues() {
            let mut ps = q.lock();
            let _ = self.seal(&mut ps, &q.tp);
            let keep = if ps.in_flight == 0 { 0 } else { ps.sent };
            while ps.queue.len() > keep {
                if let Some(batch) = ps.queue.pop_back() {
                    ps.queued_bytes -= batch.mem;
                    self.finish_batch(&q.tp, batch, Err(err.clone()));
                }
            }
            ps.sent = ps.sent.min(ps.queue.len());
        }
    }

    /// Backoff before attempt `attempts + 1`: exponential from
    /// `retry.backoff.ms`, capped at `retry.backoff.max.ms`.
    pub fn backoff(&self, attempts: u32) -> Duration {
        let s = &self.settings;
        let factor = 1u32 << attempts.saturating_sub(1).min(16);
        s.retry_backoff
            .saturating_mul(factor)
            .min(s.retry_backoff_max)
    }
}

/// Renumbers the sequenced batches at the queue's head from `from` under
/// `producer` (after an epoch bump, or after a batch was rejected for good).
/// Nothing of the partition is in flight when this runs.
fn renumber(ps: &mut PartState, producer: ProducerId, from: i32) {
    let mut seq = from;
    for batch in ps.queue.iter_mut() {
        if batch.sequence.is_none() {
            break;
        }
        assign_sequence(batch, producer, seq);
        seq = add_seq(seq, batch.count());
    }
    ps.next_seq = seq;
}

fn assign_sequence(batch: &mut Batch, producer: ProducerId, seq: i32) {
    let mut data = match std::mem::take(&mut batch.data).try_into_mut() {
        Ok(unique) => unique,
        Err(shared) => bytes::BytesMut::from(&shared[..]),
    };
    // The batch was built by us, so its header is well formed.
    if set_producer_fields(&mut data, producer.id, producer.epoch, seq).is_ok() {
        batch.sequence = Some(seq);
    }
    batch.data = data.freeze();
}

/// Sequence numbers wrap from `i32::MAX` to 0, as in the Java client.
pub(crate) fn add_seq(seq: i32, n: i32) -> i32 {
    ((seq as i64 + n as i64) % (1i64 << 31)) as i32
}

fn min_instant(a: Option<Instant>, b: Instant) -> Option<Instant> {
    Some(a.map_or(b, |a| a.min(b)))
}

/// The `buffer.memory` budget. A record larger than the whole budget is
/// refused before it gets here.
pub(crate) struct MemoryPool {
    limit: usize,
    used: Mutex<usize>,
    freed: Notify,
    /// Senders waiting for memory: sinks then treat every batch as ready.
    pub waiters: AtomicUsize,
}

impl MemoryPool {
    fn new(limit: usize) -> MemoryPool {
        MemoryPool {
            limit,
            used: Mutex::new(0),
            freed: Notify::new(),
            waiters: AtomicUsize::new(0),
        }
    }

    pub fn limit(&self) -> usize {
        self.limit
    }

    /// Takes `n` bytes if they are free now.
    pub fn try_acquire(&self, n: usize) -> bool {
        let mut used = self.used.lock().unwrap_or_else(|p| p.into_inner());
        if *used + n <= self.limit {
            *used += n;
            true
        } else {
            false
        }
    }

    /// Takes `n` bytes, waiting until `deadline` for them to be freed.
    pub async fn acquire(&self, n: usize, deadline: Instant, on_wait: impl Fn()) -> bool {
        loop {
            let freed = self.freed.notified();
            tokio::pin!(freed);
            freed.as_mut().enable();
            if self.try_acquire(n) {
                return true;
            }
            self.waiters.fetch_add(1, Ordering::AcqRel);
            on_wait();
            let woke = tokio::time::timeout_at(deadline, freed).await;
            self.waiters.fetch_sub(1, Ordering::AcqRel);
            if woke.is_err() {
                return self.try_acquire(n);
            }
        }
    }

    fn release(&self, n: usize) {
        let mut used = self.used.lock().unwrap_or_else(|p| p.into_inner());
        *used = used.saturating_sub(n);
        drop(used);
        self.freed.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings() -> BatchSettings {
        BatchSettings {
            batch_size: 64,
            linger: Duration::ZERO,
            delivery_timeout: Duration::from_secs(30),
            compression: Compression::None,
            level: None,
            transactional: false,
            max_in_flight: 5,
            retry_backoff: Duration::from_millis(100),
            retry_backoff_max: Duration::from_secs(1),
        }
    }

    /// Appends `n` records of 40 bytes: each fills its own 64-byte batch.
    fn append_batches(acc: &Accumulator, q: &PartitionQueue, n: usize) {
        for _ in 0..n {
            let record = ProducerRecord::new("t").value(vec![b'x'; 40]);
            let (tx, _rx) = oneshot::channel();
            acc.append(q, &record, 0, 40, Completion::Channel(tx))
                .unwrap();
        }
    }

    #[test]
    fn an_idempotent_partition_sends_one_batch_until_the_broker_acknowledges_one() {
        let acc = Accumulator::new(settings(), 1 << 20);
        let tp = TopicPartition::new("t", 0);
        let q = acc.queue(&tp, 1);
        append_batches(&acc, &q, 4);
        let pid = Some(Some(ProducerId { id: 7, epoch: 0 }));
        let first = acc.drain(1, usize::MAX, pid, true, 0, None);
        assert_eq!(
            first.batches.len(),
            1,
            "one batch before any acknowledgement"
        );
        assert!(acc
            .drain(1, usize::MAX, pid, true, 0, None)
            .batches
            .is_empty());
        // The first batch is acknowledged: the rest may be pipelined.
        {
            let mut ps = q.lock();
            ps.in_flight -= 1;
            ps.confirmed = true;
        }
        for _ in 0..2 {
            let next = acc.drain(1, usize::MAX, pid, true, 0, None);
            assert_eq!(next.batches.len(), 1, "pipelined after the acknowledgement");
        }
        assert_eq!(q.lock().in_flight, 2);
        // Without idempotence there is no sequence to protect.
        let q2 = acc.queue(&TopicPartition::new("t", 1), 1);
        append_batches(&acc, &q2, 3);
        let _ = acc.drain(1, usize::MAX, None, true, 1, None);
        let _ = acc.drain(1, usize::MAX, None, true, 1, None);
        assert_eq!(q2.lock().in_flight, 2, "pipelined from the start");
    }

    #[test]
    fn sequences_wrap_like_java() {
        assert_eq!(add_seq(5, 3), 8);
        assert_eq!(add_seq(i32::MAX, 1), 0);
        assert_eq!(add_seq(i32::MAX - 1, 5), 3);
    }
}
