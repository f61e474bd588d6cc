//! The record accumulator: one queue of record batches per partition
//! ([`partition`], the per-partition state machine that also keeps the
//! idempotent producer's sequence numbers, KIP-98 and KIP-360), the batches
//! themselves ([`batch`]) and the `buffer.memory` pool ([`memory`]).
//!
//! The accumulator is where the API (appending records) meets the sinks
//! (draining batches, reporting outcomes). Each partition's state sits
//! behind its own lock, so sinks of different brokers never wait on each
//! other, and every change to it goes through the partition's events. The
//! sink seals (compresses) a partition's open batch with that lock released,
//! so a sender appending to the partition does not wait for the compressor:
//! the two run on two cores.

mod batch;
mod flush;
mod memory;
mod partition;

use std::collections::HashMap;
use std::sync::atomic::{AtomicI32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::Notify;
use tokio::time::Instant;

pub(crate) use batch::{Batch, Completion, BATCH_OVERHEAD, PENDING_STATE, RECORD_OVERHEAD};
use batch::{BatchFactory, OpenBatch, Pending, Unencodable};
pub(crate) use memory::MemoryPool;
use partition::SealEnd;
pub(crate) use partition::{
    expiry_error, BatchOutcome, OutcomeContext, PartState, Readiness, SendContext, Verdict,
};

use super::idempotence::ProducerId;
use super::record::{DeliveryReceiver, ProducerRecord, RecordMetadata};
use crate::error::{Error, Result};
use crate::protocol::compression::Compression;
use crate::TopicPartition;

/// A partition: its state behind a lock, and its leader for routing.
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

/// Batch-building and retry settings.
#[derive(Debug, Clone)]
pub(crate) struct BatchSettings {
    /// `batch.size`: an open batch this large is ready to send.
    pub batch_size: usize,
    /// What an open batch may grow to while it waits to be sent
    /// (`batch.max.size`, KIP-782; see `ProducerConfig::batch_cap`).
    pub batch_cap: usize,
    pub linger: Duration,
    pub delivery_timeout: Duration,
    pub compression: Compression,
    pub level: Option<i32>,
    pub transactional: bool,
    pub max_in_flight: usize,
    /// `retries`: attempts after the first.
    pub retries: u32,
    pub retry_backoff: Duration,
    pub retry_backoff_max: Duration,
}

impl BatchSettings {
    /// Backoff before attempt `attempts + 1`: exponential from
    /// `retry.backoff.ms`, capped at `retry.backoff.max.ms`.
    pub fn backoff(&self, attempts: u32) -> Duration {
        let factor = 1u32 << attempts.saturating_sub(1).min(16);
        self.retry_backoff
            .saturating_mul(factor)
            .min(self.retry_backoff_max)
    }
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
    /// When the next batch becomes ready by linger, backoff or expiry.
    pub next_wake: Option<Instant>,
    /// Batches that passed `delivery.timeout.ms`, to fail.
    pub expired: Vec<(TopicPartition, Batch)>,
    /// An expired batch's outcome was unknown: the epoch must be bumped.
    pub bump: bool,
    /// Partitions whose closed batches need a sealer task started
    /// ([`Accumulator::seal_closed`]).
    pub sealers: Vec<Arc<PartitionQueue>>,
}

/// What an append asks of its caller.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Appended {
    /// The partition's sink should look now: a batch opened (the sink must
    /// learn its linger deadline), became ready by reaching `batch.size`,
    /// or was sealed or closed at the cap.
    pub wake: bool,
    /// Start a sealer task for the partition
    /// ([`Accumulator::seal_closed`]).
    pub seal: bool,
}

/// All partition queues and the memory pool.
pub(crate) struct Accumulator {
    pub settings: BatchSettings,
    factory: BatchFactory,
    partitions: RwLock<HashMap<TopicPartition, Arc<PartitionQueue>>>,
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
            // Spare batch buffers: up to an eighth of buffer.memory.
            factory: BatchFactory::new(
                settings.compression,
                settings.level,
                settings.transactional,
                buffer_memory / 8,
                settings.batch_size,
            ),
            settings,
            partitions: RwLock::new(HashMap::new()),
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
                    state: Mutex::new(PartState::new()),
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
            .map_or(0, |q| q.lock().queued_bytes())
    }

    /// Appends a record whose `mem` bytes were already taken from the pool,
    /// and says what the caller must do next ([`Appended`]).
    ///
    /// A ready batch is not sealed here: it keeps taking records until the
    /// sink drains it or it reaches `batch.max.size` (KIP-782), so a
    /// partition whose requests are all in flight builds larger batches
    /// instead of a queue of `batch.size` ones. At the cap an uncompressed
    /// batch is sealed here (a checksum); a compressed one is closed for a
    /// sealer task, so the sender's thread never runs the compressor.
    pub fn append(
        &self,
        queue: &PartitionQueue,
        record: &ProducerRecord,
        timestamp: i64,
        mem: usize,
        done: Completion,
    ) -> Result<Appended> {
        let s = &self.settings;
        let mut ps = queue.lock();
        let mut out = Appended::default();
        if let Some(open) = &ps.open {
            if open.builder.uncompressed_size() + record.size_estimate() > s.batch_cap
                && !open.builder.is_empty()
            {
                self.close_at_cap(&mut ps, &queue.tp, &mut out);
            }
        }
        let open = match &mut ps.open {
            Some(open) => open,
            empty => {
                out.wake = true;
                empty.insert(self.factory.open(Instant::now(), s.batch_size)?)
            }
        };
        let before = open.builder.uncompressed_size();
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
        let size = open.builder.uncompressed_size();
        out.wake |= before < s.batch_size && size >= s.batch_size;
        let at_cap = size >= s.batch_cap;
        ps.queued_bytes += mem;
        self.outstanding.fetch_add(1, Ordering::AcqRel);
        if at_cap {
            self.close_at_cap(&mut ps, &queue.tp, &mut out);
        }
        Ok(out)
    }

    /// The open batch reached `batch.max.size`: sealed now if uncompressed,
    /// else closed for a sealer task.
    fn close_at_cap(&self, ps: &mut PartState, tp: &TopicPartition, out: &mut Appended) {
        if self.settings.compression == Compression::None {
            out.wake |= self.seal(ps, tp);
        } else {
            out.seal |= ps.close_open();
            out.wake = true;
        }
    }

    /// The sealer task's turn: compresses the partition's oldest closed
    /// batch outside the lock and queues it. Returns `false`, and the task
    /// ends, when no closed batch waits or another seal is under way (its
    /// end starts a sealer again if one is needed).
    pub fn seal_closed(&self, q: &PartitionQueue) -> bool {
        let Some(batch) = q.lock().next_for_sealer() else {
            return false;
        };
        let sealed = self.factory.seal(batch, &q.tp);
        let mut ps = q.lock();
        self.end_seal(&mut ps, &q.tp, sealed);
        true
    }

    /// Closes the open batch (compressing it) and queues it. Records that
    /// cannot be encoded fail at once.
    fn seal(&self, ps: &mut PartState, tp: &TopicPartition) -> bool {
        let Some(open) = ps.open.take() else {
            return false;
        };
        self.seal_here(ps, tp, open)
    }

    /// Seals `open` under the lock and queues it, or fails its records if
    /// they cannot be encoded; returns whether it was queued.
    fn seal_here(&self, ps: &mut PartState, tp: &TopicPartition, open: OpenBatch) -> bool {
        match self.factory.seal(open, tp) {
            Ok(batch) => {
                ps.push(batch);
                true
            }
            Err(failed) => {
                ps.queued_bytes -= failed.mem;
                self.fail_unencodable(*failed, tp);
                false
            }
        }
    }

    /// Queues the batch the sink sealed outside the lock
    /// ([`PartState::end_seal`]), or fails its records.
    fn end_seal(
        &self,
        ps: &mut PartState,
        tp: &TopicPartition,
        sealed: std::result::Result<Batch, Box<Unencodable>>,
    ) {
        match ps.end_seal(sealed) {
            SealEnd::Queued => {}
            SealEnd::Fail(batch, error) => self.finish_batch(tp, *batch, Err(error)),
            SealEnd::Unencodable(failed) => self.fail_unencodable(*failed, tp),
        }
    }

    fn fail_unencodable(&self, failed: Unencodable, tp: &TopicPartition) {
        tracing::warn!(partition = %tp, error = %failed.error, "sealing a batch failed");
        let Unencodable {
            pending,
            mem,
            error,
            flush,
        } = failed;
        self.finish_records(pending, mem, tp, Err(error));
        // Its flushes learn of it once its records are completed.
        drop(flush);
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
        let ctx = SendContext {
            max_in_flight: self.settings.max_in_flight,
            linger: self.settings.linger,
            batch_size: self.settings.batch_size,
            urgent: urgent || self.flushing.load(Ordering::Acquire) > 0,
            producer,
        };
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
            let size = match ps.poll_send(now, &ctx) {
                Readiness::Ready(size) => size,
                Readiness::Blocked => continue,
                Readiness::WaitUntil(t) => {
                    out.next_wake = min_instant(out.next_wake, t);
                    continue;
                }
                Readiness::SealOpen => {
                    // Sealed (compressed) without the partition's lock:
                    // senders go on appending meanwhile.
                    let Some(open) = ps.begin_seal() else {
                        continue;
                    };
                    drop(ps);
                    let sealed = self.factory.seal(open, &q.tp);
                    ps = q.lock();
                    self.end_seal(&mut ps, &q.tp, sealed);
                    if ps.start_sealer() {
                        // Closed meanwhile: seal it off this task while the
                        // batch just sealed goes out.
                        out.sealers.push(q.clone());
                    }
                    // The partition's state may have moved while unlocked
                    // (an outcome, an epoch bump): ask again.
                    match ps.poll_send(Instant::now(), &ctx) {
                        Readiness::Ready(size) => size,
                        Readiness::WaitUntil(t) => {
                            out.next_wake = min_instant(out.next_wake, t);
                            continue;
                        }
                        // The next open batch is due already: look again
                        // at once rather than wait for a sender's wake-up.
                        Readiness::SealOpen => {
                            out.next_wake = Some(Instant::now());
                            continue;
                        }
                        Readiness::Blocked => continue,
                    }
                }
            };
            if gate.is_some_and(|may_send| !may_send(&q.tp)) {
                // Transactions v1: not yet added to the transaction.
                continue;
            }
            if bytes > 0 && bytes + size > max_bytes {
                break;
            }
            let Some((batch_id, data)) = ps.on_send(producer) else {
                continue;
            };
            bytes += size;
            out.batches.push(Drained {
                queue: q.clone(),
                batch_id,
                data,
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
        let expired = ps.on_timeout(now, timeout);
        out.bump |= expired.bump;
        out.expired
            .extend(expired.batches.into_iter().map(|b| (tp.clone(), b)));
        if let Some(next) = expired.next {
            out.next_wake = min_instant(out.next_wake, next);
        }
        let Some(created) = ps.open.as_ref().map(|o| o.created) else {
            return;
        };
        if created + timeout > now {
            out.next_wake = min_instant(out.next_wake, created + timeout);
            return;
        }
        if let Some(open) = ps.open.take() {
            match self.factory.seal(open, tp) {
                Ok(batch) => {
                    ps.queued_bytes -= batch.mem;
                    out.expired.push((tp.clone(), batch));
                }
                Err(failed) => {
                    ps.queued_bytes -= failed.mem;
                    self.fail_unencodable(*failed, tp);
                }
            }
        }
    }

    /// Completes a batch's records and returns its memory to the pool.
    pub fn finish_batch(&self, tp: &TopicPartition, batch: Batch, result: Result<(i64, i64)>) {
        let Batch {
            data,
            pending,
            mem,
            flush,
            ..
        } = batch;
        self.factory.recycle(data);
        self.finish_records(pending, mem, tp, result);
        // Its flushes learn of it once its records are completed.
        drop(flush);
    }

    fn finish_records(
        &self,
        mut pending: Vec<Pending>,
        mem: usize,
        tp: &TopicPartition,
        result: Result<(i64, i64)>,
    ) {
        let n = pending.len();
        // Tagged records are reported a run at a time: one call per run of
        // records with the same receiver (usually the whole batch), in a
        // list of tags kept from batch to batch.
        let mut run: Option<Arc<dyn DeliveryReceiver>> = None;
        let mut tags = Vec::new();
        // The index in the batch of the run's last record, for its offset.
        let mut last = 0;
        let outcome = |last: usize| {
            result
                .as_ref()
                .map(|(base, _)| if *base < 0 { -1 } else { base + last as i64 })
        };
        for (i, p) in pending.drain(..).enumerate() {
            let done = match p.done {
                Completion::Tagged(to, tag) => {
                    match &run {
                        Some(current) if Arc::ptr_eq(current, &to) => {}
                        _ => {
                            if let Some(to) = run.take() {
                                to.delivered_through(tp, &tags, outcome(last));
                                tags.clear();
                            } else {
                                tags = self.factory.tags();
                            }
                            tags.reserve(n - i);
                            run = Some(to);
                        }
                    }
                    tags.push(tag);
                    last = i;
                    continue;
                }
                other => other,
            };
            match &result {
                Ok((base_offset, log_append_time)) => {
                    let offset = if *base_offset < 0 {
                        -1
                    } else {
                        base_offset + i as i64
                    };
                    let timestamp = if *log_append_time >= 0 {
                        *log_append_time
                    } else {
                        p.timestamp
                    };
                    done.complete(
                        tp,
                        Ok(RecordMetadata {
                            partition: tp.clone(),
                            offset,
                            timestamp,
                        }),
                    );
                }
                Err(e) => done.complete(tp, Err(e.clone())),
            }
        }
        if let Some(to) = run {
            to.delivered_through(tp, &tags, outcome(last));
            self.factory.keep_tags(tags);
        }
        self.factory.keep_list(pending);
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

    /// Begins a flush: marks the batches holding records now, so that
    /// [`Flush::wait`] ends once every record appended before the call is
    /// completed (acknowledged or failed), and no later one (see
    /// [`flush`]). Open batches are ready at once while it lasts; the
    /// caller wakes the sinks.
    pub fn begin_flush(&self) -> Flush<'_> {
        self.flushing.fetch_add(1, Ordering::AcqRel);
        let (wait, own) = flush::FlushWait::start();
        for q in self.queues() {
            q.lock().mark_for_flush(&wait);
        }
        drop(own);
        Flush { acc: self, wait }
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
            for closed in ps.take_closed() {
                self.seal_here(&mut ps, &q.tp, closed);
            }
            self.seal(&mut ps, &q.tp);
            for batch in ps.take_unsent(err) {
                self.finish_batch(&q.tp, batch, Err(err.clone()));
            }
        }
    }

    /// The context a partition needs to judge an outcome.
    pub fn outcome_context(
        &self,
        now: Instant,
        current: Option<ProducerId>,
        idempotent: bool,
    ) -> OutcomeContext<'_> {
        OutcomeContext {
            now,
            current,
            idempotent,
            transactional: self.settings.transactional,
            settings: &self.settings,
            factory: &self.factory,
        }
    }
}

/// A flush under way: open batches are ready at once until it is dropped
/// (also when the caller stops waiting).
pub(crate) struct Flush<'a> {
    acc: &'a Accumulator,
    wait: Arc<flush::FlushWait>,
}

impl Flush<'_> {
    /// Waits until the batches marked when the flush began are completed.
    pub async fn wait(&self) {
        self.wait.wait().await;
    }
}

impl Drop for Flush<'_> {
    fn drop(&mut self) {
        self.acc.flushing.fetch_sub(1, Ordering::AcqRel);
    }
}

fn min_instant(a: Option<Instant>, b: Instant) -> Option<Instant> {
    Some(a.map_or(b, |a| a.min(b)))
}

#[cfg(test)]
mod tests;
