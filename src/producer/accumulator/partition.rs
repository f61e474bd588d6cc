//! One partition's send state, as a state machine: the queue of sealed
//! batches, which of them are in flight, and the idempotent producer's
//! sequence numbers for it (KIP-98; renumbering after an epoch bump,
//! KIP-360). No I/O and no clock: the sink's task feeds it events with the
//! time they happened and carries out what it answers.
//!
//! Events: a batch sealed ([`PartState::push`]), a compressed batch closed
//! at `batch.max.size` for a sealer task ([`PartState::close_open`]), a
//! batch sealed outside the lock by the sink or the sealer
//! ([`PartState::begin_seal`], then [`PartState::end_seal`]), the sink
//! looking for work
//! ([`PartState::poll_send`], then [`PartState::on_send`]), a Produce
//! outcome ([`PartState::on_outcome`], answering a [`Verdict`]), and time
//! passing ([`PartState::on_timeout`], for `delivery.timeout.ms`).
//!
//! The queue holds every batch that is sealed and not yet acknowledged, in
//! the order the records were sent. `sent` splits it: the batches before it
//! are in flight (or came back with a retriable error and wait to be sent
//! again); the ones after it wait for their first send. A retriable error
//! sets `rewind`: once nothing of the partition is in flight, sending starts
//! again from the queue's head, so retries keep order.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tokio::time::Instant;

use super::batch::{add_seq, Batch, BatchFactory, OpenBatch, Unencodable};
use super::flush::{FlushMark, FlushWait};
use super::BatchSettings;
use crate::error::{Error, KafkaCode, Result};
use crate::producer::idempotence::ProducerId;
use crate::producer::transaction::{CONCURRENT_TXN_BACKOFF, CONCURRENT_TXN_FAST_ATTEMPTS};
use crate::protocol::records::{decode_batches, DecodeLimits, Record};
use crate::protocol::ProtocolError;
use crate::TopicPartition;

/// What a broker said about one batch: base offset and log-append time, or
/// an error.
pub(crate) type BatchOutcome = Result<(i64, i64)>;

/// A partition's queue and sequence state.
pub(crate) struct PartState {
    pub(super) open: Option<OpenBatch>,
    /// Compressed batches a sender closed at `batch.max.size`, oldest
    /// first, ahead of `open`: a sealer task compresses them off the
    /// sender's thread ([`close_open`](Self::close_open)).
    closed: VecDeque<OpenBatch>,
    /// A sealer task runs for this partition.
    sealer: bool,
    /// The sink took the open batch to seal (compress) it without holding
    /// the partition's lock ([`begin_seal`](Self::begin_seal)): what
    /// happened meanwhile, applied by [`end_seal`](Self::end_seal).
    sealing: Option<Sealing>,
    queue: VecDeque<Batch>,
    sent: usize,
    in_flight: usize,
    rewind: bool,
    /// A sequenced batch was rejected for good: renumber the queue from
    /// `acked_seq` before sending again.
    resequence: bool,
    /// The producer id and epoch the queue's sequence numbers belong to.
    producer: Option<ProducerId>,
    next_seq: i32,
    /// The sequence after the last acknowledged batch.
    acked_seq: i32,
    /// The broker acknowledged a batch of `producer`'s id here. Until then it
    /// may hold no state for the producer on this partition and would
    /// accept any sequence, so a later batch that overtakes a rejected
    /// first one (NOT_LEADER_OR_FOLLOWER on a topic still being created)
    /// would be written and the first one then refused as out of order:
    /// one batch at a time until the first acknowledgement.
    confirmed: bool,
    backoff_until: Option<Instant>,
    pub(super) queued_bytes: usize,
}

/// What happened to a partition while its sink sealed a batch outside the
/// lock: senders kept appending (into a new open batch), and may have
/// sealed it at `batch.max.size`, a flush may have begun, or the producer
/// may have failed every unsent record (closing, aborting a transaction).
#[derive(Default)]
struct Sealing {
    /// Batches sealed meanwhile: they queue behind the one being sealed.
    after: Vec<Batch>,
    /// Flushes begun meanwhile: they wait for the batch being sealed too.
    flush: Vec<FlushMark>,
    /// Every unsent record was failed meanwhile: the batch being sealed
    /// fails with this error instead of being queued.
    failed: Option<Error>,
}

/// What [`PartState::end_seal`] leaves for the accumulator to do.
pub(super) enum SealEnd {
    /// Queued (with the batches sealed meanwhile behind it).
    Queued,
    /// Failed while it was being sealed: complete its records with the
    /// error.
    Fail(Box<Batch>, Error),
    /// Could not be encoded: fail its records.
    Unencodable(Box<Unencodable>),
}

/// Whether the partition has a batch for the sink now.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Readiness {
    /// The next batch may go; its size in bytes.
    Ready(usize),
    /// Nothing may go now, and no time-based wake-up is due.
    Blocked,
    /// Nothing before this instant (linger or retry backoff).
    WaitUntil(Instant),
    /// The open batch is due (full to `batch.size`, lingered, or urgent):
    /// seal it, then ask [`PartState::next_size`].
    SealOpen,
}

/// What the sink knows when it looks for work.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SendContext {
    /// `max.in.flight.requests.per.connection`.
    pub max_in_flight: usize,
    /// `linger.ms`.
    pub linger: Duration,
    /// `batch.size`: an open batch this large is ready without lingering.
    pub batch_size: usize,
    /// Send open batches now (flush, close, or a sender waits for memory).
    pub urgent: bool,
    /// `None`: not idempotent. `Some(None)`: an epoch bump is under way.
    pub producer: Option<Option<ProducerId>>,
}

/// What the sink knows when an outcome arrives.
pub(crate) struct OutcomeContext<'a> {
    pub now: Instant,
    /// The producer id and epoch the producer sends with now.
    pub current: Option<ProducerId>,
    pub idempotent: bool,
    pub transactional: bool,
    pub settings: &'a BatchSettings,
    pub(super) factory: &'a BatchFactory,
}

/// The partition's answer to a batch's outcome: what the sink must do.
pub(crate) enum Verdict {
    /// Not a batch in flight here (already settled): nothing.
    Stale,
    /// Acknowledged: complete its records.
    Acked { batch: Batch, result: (i64, i64) },
    /// Too large for the broker and split in two; both go again in order.
    Split,
    /// Sent again after a backoff, in order; `bump`: start a new epoch.
    Retry {
        error: Error,
        attempt: u32,
        bump: bool,
    },
    /// Failed for good: fail its records with `error` (the broker's
    /// `cause`, explained); `bump`: start a new epoch.
    Failed {
        batch: Batch,
        error: Error,
        cause: Error,
        bump: bool,
    },
}

/// Batches that passed `delivery.timeout.ms` while not in flight.
#[derive(Default)]
pub(crate) struct Expired {
    pub batches: Vec<Batch>,
    /// An expired batch's outcome was unknown: the epoch must be bumped.
    pub bump: bool,
    /// When the next batch would expire.
    pub next: Option<Instant>,
}

impl PartState {
    pub(super) fn new() -> PartState {
        PartState {
            open: None,
            closed: VecDeque::new(),
            sealer: false,
            sealing: None,
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
        }
    }

    /// Bytes queued here, open batch included.
    pub fn queued_bytes(&self) -> usize {
        self.queued_bytes
    }

    /// Whether records wait here: an open batch, closed ones, one being
    /// sealed, or sealed batches not yet acknowledged (in flight or not).
    pub fn holds_records(&self) -> bool {
        self.open.is_some()
            || !self.closed.is_empty()
            || self.sealing.is_some()
            || !self.queue.is_empty()
    }

    /// Batches sent and not yet answered.
    #[cfg(test)]
    pub fn in_flight(&self) -> usize {
        self.in_flight
    }

    /// A batch was sealed: it waits behind the others (and behind the one
    /// the sink is sealing, if any).
    pub(super) fn push(&mut self, batch: Batch) {
        match &mut self.sealing {
            Some(sealing) => sealing.after.push(batch),
            None => self.queue.push_back(batch),
        }
    }

    /// A sender filled the open (compressed) batch to `batch.max.size`: it
    /// closes and waits, in order, for a sealer task to compress it, so
    /// the sender does not. Returns whether the caller must start that
    /// task ([`start_sealer`](Self::start_sealer)).
    pub(super) fn close_open(&mut self) -> bool {
        if let Some(open) = self.open.take() {
            self.closed.push_back(open);
        }
        self.start_sealer()
    }

    /// Whether a sealer task must start: closed batches wait, none runs,
    /// and nothing is being sealed (whoever seals calls this again when
    /// done). Marks the task as running.
    pub(super) fn start_sealer(&mut self) -> bool {
        if self.closed.is_empty() || self.sealer || self.sealing.is_some() {
            return false;
        }
        self.sealer = true;
        true
    }

    /// The sealer task asks for its next batch: the oldest closed one, or
    /// `None` (and the task stops) when none waits or another seal is under
    /// way.
    pub(super) fn next_for_sealer(&mut self) -> Option<OpenBatch> {
        let next = self.begin_seal_closed();
        if next.is_none() {
            self.sealer = false;
        }
        next
    }

    /// Takes the next batch to seal outside the lock, so that senders are
    /// not held up while it is compressed: the oldest closed batch, else
    /// the open one. `None` when there is none or one is already being
    /// sealed. Until [`end_seal`](Self::end_seal), batches sealed here queue
    /// behind it and nothing after the sealed queue is sent.
    pub(super) fn begin_seal(&mut self) -> Option<OpenBatch> {
        if self.closed.is_empty() && self.sealing.is_none() {
            let open = self.open.take()?;
            self.sealing = Some(Sealing::default());
            return Some(open);
        }
        self.begin_seal_closed()
    }

    fn begin_seal_closed(&mut self) -> Option<OpenBatch> {
        if self.sealing.is_some() {
            return None;
        }
        let next = self.closed.pop_front()?;
        self.sealing = Some(Sealing::default());
        Some(next)
    }

    /// Takes every closed batch (closing, aborting: they are failed, not
    /// sent, so whoever fails them seals them at once).
    pub(super) fn take_closed(&mut self) -> VecDeque<OpenBatch> {
        std::mem::take(&mut self.closed)
    }

    /// The batch taken by [`begin_seal`](Self::begin_seal) is sealed (or
    /// could not be encoded): queues it, then the batches sealed
    /// meanwhile, or hands it back to be failed.
    pub(super) fn end_seal(
        &mut self,
        sealed: std::result::Result<Batch, Box<Unencodable>>,
    ) -> SealEnd {
        let Sealing {
            after,
            flush,
            failed,
        } = self.sealing.take().unwrap_or_default();
        let end = match sealed {
            Err(mut unencodable) => {
                unencodable.flush.extend(flush);
                self.queued_bytes -= unencodable.mem;
                SealEnd::Unencodable(unencodable)
            }
            Ok(mut batch) => {
                batch.flush.extend(flush);
                match failed {
                    Some(error) => {
                        self.queued_bytes -= batch.mem;
                        SealEnd::Fail(Box::new(batch), error)
                    }
                    None => {
                        self.queue.push_back(batch);
                        SealEnd::Queued
                    }
                }
            }
        };
        self.queue.extend(after);
        end
    }

    /// A flush began: marks every batch that holds records now, open,
    /// closed, being sealed, sealed behind the one being sealed, queued or
    /// in flight (see [`super::flush`]).
    pub(super) fn mark_for_flush(&mut self, wait: &Arc<FlushWait>) {
        for open in self.closed.iter_mut().chain(&mut self.open) {
            open.flush.push(FlushMark::new(wait));
        }
        if let Some(sealing) = &mut self.sealing {
            sealing.flush.push(FlushMark::new(wait));
            // Sealed at `batch.max.size` by a sender meanwhile: they hold
            // records sent before the flush too.
            for batch in &mut sealing.after {
                batch.flush.push(FlushMark::new(wait));
            }
        }
        for batch in &mut self.queue {
            batch.flush.push(FlushMark::new(wait));
        }
    }

    /// Size of the next batch to send, if one is sealed.
    pub fn next_size(&self) -> Option<usize> {
        self.queue.get(self.sent).map(|b| b.data.len())
    }

    /// The sink looks for work. Takes the partition's own steps on the way:
    /// a rewind once nothing is in flight, and renumbering under a new epoch
    /// or after a batch failed for good.
    pub fn poll_send(&mut self, now: Instant, ctx: &SendContext) -> Readiness {
        if self.in_flight == 0 {
            if self.rewind {
                self.sent = 0;
                self.rewind = false;
            }
            if let Some(current) = ctx.producer {
                // Idempotent: wait while an epoch bump is under way.
                let Some(current) = current else {
                    return Readiness::Blocked;
                };
                if self.producer != Some(current) {
                    // A new epoch of the same id keeps the broker's state
                    // (and its check that sequences restart at 0); a new id
                    // has none.
                    if self.producer.map(|p| p.id) != Some(current.id) {
                        self.confirmed = false;
                    }
                    self.producer = Some(current);
                    self.renumber(current, 0);
                    self.acked_seq = 0;
                    self.resequence = false;
                } else if self.resequence {
                    let from = self.acked_seq;
                    self.renumber(current, from);
                    self.resequence = false;
                }
            }
        } else if self.rewind || self.resequence || self.in_flight >= ctx.max_in_flight {
            return Readiness::Blocked;
        } else if let Some(current) = ctx.producer {
            if current.is_none() || self.producer != current || !self.confirmed {
                return Readiness::Blocked;
            }
        }
        if let Some(until) = self.backoff_until {
            if until > now {
                return Readiness::WaitUntil(until);
            }
            self.backoff_until = None;
        }
        if let Some(size) = self.next_size() {
            return Readiness::Ready(size);
        }
        if self.sealing.is_some() {
            // The sink sealing the batch ahead sends it once it is queued.
            return Readiness::Blocked;
        }
        if !self.closed.is_empty() {
            // Full already; the sink seals it if the sealer has not yet.
            return Readiness::SealOpen;
        }
        match &self.open {
            Some(open)
                if ctx.urgent
                    || open.created + ctx.linger <= now
                    || open.builder.uncompressed_size() >= ctx.batch_size =>
            {
                Readiness::SealOpen
            }
            Some(open) => Readiness::WaitUntil(open.created + ctx.linger),
            None => Readiness::Blocked,
        }
    }

    /// The next batch goes out (after [`poll_send`](Self::poll_send) said
    /// it may): numbers it on its first send. Returns its id and bytes.
    pub fn on_send(&mut self, producer: Option<Option<ProducerId>>) -> Option<(u64, Bytes)> {
        let sent = self.sent;
        let next_seq = self.next_seq;
        let batch = self.queue.get_mut(sent)?;
        if let Some(Some(current)) = producer {
            if batch.sequence.is_none() {
                batch.assign_sequence(current, next_seq);
                self.next_seq = add_seq(next_seq, batch.count());
            }
        }
        let sent_batch = (batch.id, batch.data.clone());
        self.sent += 1;
        self.in_flight += 1;
        Some(sent_batch)
    }

    /// A Produce outcome for batch `batch_id`: complete it, schedule a retry
    /// (in order), split it, or fail it, keeping sequence numbers
    /// consistent.
    pub fn on_outcome(
        &mut self,
        tp: &TopicPartition,
        batch_id: u64,
        outcome: BatchOutcome,
        ctx: &OutcomeContext<'_>,
    ) -> Verdict {
        self.in_flight = self.in_flight.saturating_sub(1);
        let Some(idx) = self
            .queue
            .iter()
            .take(self.sent)
            .position(|b| b.id == batch_id)
        else {
            return Verdict::Stale;
        };
        match outcome {
            Ok(result) => match self.remove(idx) {
                Some(batch) => {
                    if let Some(seq) = batch.sequence {
                        self.acked_seq = add_seq(seq, batch.count());
                        self.confirmed = true;
                    }
                    Verdict::Acked { batch, result }
                }
                None => Verdict::Stale,
            },
            Err(err) => self.on_refused(tp, idx, err, ctx),
        }
    }

    fn on_refused(
        &mut self,
        tp: &TopicPartition,
        idx: usize,
        err: Error,
        ctx: &OutcomeContext<'_>,
    ) -> Verdict {
        let code = err.kafka_code();
        // A broker error code means the broker refused the batch; anything
        // else (timeout, lost connection) leaves its outcome unknown.
        let definite = code.is_some();
        let stale_epoch = matches!(
            code,
            Some(KafkaCode::INVALID_PRODUCER_EPOCH) | Some(KafkaCode::PRODUCER_FENCED)
        ) && self.producer != ctx.current;
        let oos = code == Some(KafkaCode::OUT_OF_ORDER_SEQUENCE_NUMBER);
        let unknown_producer = code == Some(KafkaCode::UNKNOWN_PRODUCER_ID);
        // An out-of-order error behind a batch that already failed is just
        // the consequence of that failure: the batch is resent in order.
        let follows_failure = oos && (self.rewind || self.resequence || idx > 0);
        let retry = err.is_retriable()
            || (ctx.idempotent && (unknown_producer || stale_epoch || follows_failure));
        let timeout = ctx.settings.delivery_timeout;
        if code == Some(KafkaCode::MESSAGE_TOO_LARGE) && self.queue[idx].created + timeout > ctx.now
        {
            match self.split(idx, ctx.factory, tp) {
                Ok(true) => {
                    // Both halves sit where the batch was and are sent
                    // again from the queue's head, in order.
                    self.sent += 1;
                    self.rewind = true;
                    return Verdict::Split;
                }
                Ok(false) => {}
                Err(e) => tracing::warn!(partition = %tp, error = %e, "splitting a batch failed"),
            }
        }
        let batch = &mut self.queue[idx];
        let expired = batch.created + timeout <= ctx.now;
        if retry && !expired && batch.attempts < ctx.settings.retries {
            batch.attempts += 1;
            batch.unresolved = !definite;
            batch.last_error = Some(err.clone());
            let attempt = batch.attempts;
            let backoff = if code == Some(KafkaCode::CONCURRENT_TRANSACTIONS)
                && attempt <= CONCURRENT_TXN_FAST_ATTEMPTS
            {
                // Transactions v2: the partition joins the transaction with
                // this Produce while the previous one is still ending.
                CONCURRENT_TXN_BACKOFF
            } else {
                ctx.settings.backoff(attempt)
            };
            self.rewind = true;
            self.backoff_until = Some(ctx.now + backoff);
            return Verdict::Retry {
                error: err,
                attempt,
                bump: unknown_producer,
            };
        }
        // The batch fails for good.
        let Some(batch) = self.remove(idx) else {
            return Verdict::Stale;
        };
        // What the broker was told, for an out-of-order report.
        let sent_as = format!(
            "base sequence {} of producer {:?} (last acknowledged {}), attempt {}",
            batch.sequence.unwrap_or(-1),
            self.producer.map(|p| (p.id, p.epoch)),
            self.acked_seq,
            batch.attempts + 1
        );
        let mut bump = false;
        if ctx.transactional {
            self.rewind = true;
            self.resequence = batch.sequence.is_some();
        } else if ctx.idempotent && batch.sequence.is_some() {
            // Later batches were numbered after this one: renumber them from
            // the last acknowledged sequence, or start a new epoch when the
            // broker's view of our sequence is unknown or inconsistent.
            self.rewind = true;
            if !definite || oos || unknown_producer {
                bump = true;
            } else {
                self.resequence = true;
            }
        }
        let error = if oos {
            Error::Kafka {
                code: KafkaCode::OUT_OF_ORDER_SEQUENCE_NUMBER,
                context: format!(
                    "{err}: the broker lost this producer's sequence ({sent_as}); records of \
                     {tp} may be missing"
                ),
            }
        } else if expired && retry {
            expiry_error(tp, timeout, Some(&err))
        } else {
            err.clone()
        };
        Verdict::Failed {
            batch,
            error,
            cause: err,
            bump,
        }
    }

    /// Time passed: takes out the sealed batches past `delivery.timeout.ms`
    /// that are not in flight. The open batch is the accumulator's to seal.
    pub fn on_timeout(&mut self, now: Instant, timeout: Duration) -> Expired {
        let mut out = Expired::default();
        let i = if self.in_flight == 0 {
            0
        } else {
            self.sent.min(self.queue.len())
        };
        while i < self.queue.len() {
            if self.queue[i].created + timeout > now {
                // Batches queue in the order they were created (a split's
                // halves share their batch's time): none further expires.
                break;
            }
            let Some(batch) = self.remove(i) else {
                break;
            };
            if batch.sequence.is_some() {
                if batch.unresolved {
                    out.bump = true;
                } else {
                    self.resequence = true;
                }
            }
            out.batches.push(batch);
        }
        out.next = self.queue.get(self.sent).map(|b| b.created + timeout);
        out
    }

    /// Takes out every batch that is not in flight (closing, aborting),
    /// those sealed behind a batch being sealed included; that one fails
    /// with `err` once sealed ([`end_seal`](Self::end_seal)).
    pub(super) fn take_unsent(&mut self, err: &Error) -> Vec<Batch> {
        let keep = if self.in_flight == 0 { 0 } else { self.sent };
        let mut out = Vec::new();
        if let Some(sealing) = &mut self.sealing {
            sealing.failed = Some(err.clone());
            for batch in sealing.after.drain(..) {
                self.queued_bytes -= batch.mem;
                out.push(batch);
            }
        }
        while self.queue.len() > keep {
            if let Some(batch) = self.queue.pop_back() {
                self.queued_bytes -= batch.mem;
                out.push(batch);
            }
        }
        self.sent = self.sent.min(self.queue.len());
        out
    }

    /// Removes the batch at `idx`, keeping `sent` and the byte count.
    fn remove(&mut self, idx: usize) -> Option<Batch> {
        let batch = self.queue.remove(idx)?;
        if idx < self.sent {
            self.sent -= 1;
        }
        self.queued_bytes -= batch.mem;
        Some(batch)
    }

    /// Renumbers the sequenced batches at the queue's head from `from` under
    /// `producer` (after an epoch bump, or after a batch was rejected for
    /// good). Nothing of the partition is in flight when this runs.
    fn renumber(&mut self, producer: ProducerId, from: i32) {
        let mut seq = from;
        for batch in self.queue.iter_mut() {
            if batch.sequence.is_none() {
                break;
            }
            batch.assign_sequence(producer, seq);
            seq = add_seq(seq, batch.count());
        }
        self.next_seq = seq;
    }

    /// Splits the batch at `idx` in two halves, in place, after the broker
    /// refused it as too large (`MESSAGE_TOO_LARGE`: the topic's
    /// `max.message.bytes` is below `batch.size`), as the Java client does.
    /// The halves keep the batch's creation time, attempts and sequence
    /// range (the first half starts at its base sequence), so later batches
    /// keep their numbers. Returns false, changing nothing, for a batch of
    /// one record.
    fn split(&mut self, idx: usize, factory: &BatchFactory, tp: &TopicPartition) -> Result<bool> {
        let Some(batch) = self.queue.get(idx) else {
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
        let first = factory.encode(&records[..half]).map_err(encoding_error)?;
        let second = factory.encode(&records[half..]).map_err(encoding_error)?;
        let producer = self.producer;
        let Some(mut head) = self.queue.remove(idx) else {
            return Ok(false);
        };
        let first_mem = head.mem * half / head.pending.len();
        let mut tail = Batch {
            id: factory.next_id(),
            data: second,
            pending: head.pending.split_off(half),
            mem: head.mem - first_mem,
            created: head.created,
            attempts: head.attempts,
            sequence: None,
            unresolved: false,
            last_error: head.last_error.clone(),
            flush: head.flush.clone(),
        };
        head.data = first;
        head.mem = first_mem;
        head.unresolved = false;
        if let (Some(seq), Some(producer)) = (head.sequence, producer) {
            head.assign_sequence(producer, seq);
            tail.assign_sequence(producer, add_seq(seq, half as i32));
        }
        self.queue.insert(idx, tail);
        self.queue.insert(idx, head);
        Ok(true)
    }
}

/// The error of a batch that passed `delivery.timeout.ms`.
pub(crate) fn expiry_error(tp: &TopicPartition, after: Duration, last: Option<&Error>) -> Error {
    Error::retries_timed_out(
        crate::error::Origin::Producer,
        format_args!("delivery of records to {tp}"),
        after,
        "delivery.timeout.ms",
        last,
    )
}
