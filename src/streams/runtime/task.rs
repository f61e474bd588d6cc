//! Tasks (one per assigned partition) and the record path: buffering
//! polled records, starting what the ordering mode and the in-flight limits
//! allow, and the workers that run records through the topology.
//!
//! A worker that finishes a record starts the next startable record of its
//! task itself, under the same lock that marks the first one done: no
//! dispatcher round trip, task spawn or wake-up per record. While a
//! task's records do not wait, it has one *runner* (a worker free to take
//! its next record) that runs them in a row; a worker whose record waits
//! (an async call) stands aside, and while records wait the dispatcher
//! starts a worker for every startable record, so the calls of a task
//! overlap up to its in-flight limit. The dispatcher starts workers after
//! new arrivals, a commit, or a record that stood aside.
//!
//! Under `FailurePolicy::Fail` a record's outputs are sent with
//! `Producer::send_tagged` and its worker moves on at once: once the
//! outputs are in the producer, the record gives its in-flight slot (and
//! its key, in Key mode) to the next record, as Kafka Streams does after
//! `send`, and stays *acking* until the producer reports the last of its
//! outputs acknowledged; those reports complete records (advance their
//! watermarks) a producer batch at a time, under one lock
//! (`Shared::settle`). Outputs of one key or partition reach the producer
//! in processing order, which the idempotent producer keeps. Acking
//! records are bounded by the producer's `buffer.memory` (a send waits for
//! room, holding its slot); drains and exactly-once's transaction close
//! wait for them too. The retry policies need each record's outcome in its
//! worker, and await it there.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering as AtomicOrdering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use tokio::sync::{mpsc, Notify};
use tokio::time::Instant;

use super::slots::{Acked, Awaiting, Tasks, UNKNOWN_OUTPUTS};
use super::Revoke;

/// Records a worker runs in a row before it hands its slot back to the
/// dispatcher, which shares slots among tasks.
const MAX_STREAK: usize = 64;
use crate::consumer::{Consumer, ConsumerRecord};
use crate::error::Error;
use crate::producer::{DeliveryReceiver, Producer, ProducerRecord};
use crate::streams::config::{FailurePolicy, StreamsConfig};
use crate::streams::error::ProcessingError;
use crate::streams::error::StreamsError;
use crate::streams::metrics::{bump, Counters, PartitionMetrics, StreamsMetrics};
use crate::streams::retry;
use crate::streams::scheduler::{Flow, OrderingMode, QueuedKey, TaskQueue};
use crate::streams::topology::{Process, Records};
use crate::streams::watermark::CommitWatermark;
use crate::TopicPartition;

/// One assigned partition.
pub(super) struct Task {
    generation: u64,
    pub(super) queue: TaskQueue<ConsumerRecord>,
    pub(super) watermark: CommitWatermark,
    pub(super) revoked: bool,
    pub(super) committed: Option<i64>,
    /// Workers of this task free to take its next record (see the module
    /// docs).
    runners: usize,
    /// Whether its last record waited (an async call): the dispatcher then
    /// starts every startable record at once, not one runner.
    waits: bool,
    /// Records whose outputs are in the producer, not all acknowledged.
    pub(super) acking: usize,
    /// Exactly-once, while a transaction closes: the arrival number below
    /// which records must finish (and above which none starts) before the
    /// offsets go into the transaction; `u64::MAX` otherwise.
    pub(super) fence: u64,
}

/// The runtime's [`DeliveryReceiver`]: acknowledgements of tagged outputs
/// go to [`Shared::settle`].
pub(crate) struct Acks(pub(super) Weak<Shared>);

impl DeliveryReceiver for Acks {
    fn delivered(&self, _: &TopicPartition, tags: &[u64], result: Result<(), &Error>) {
        if let Some(shared) = self.0.upgrade() {
            shared.settle(tags.iter().map(|t| (*t, 1)), result);
        }
    }
}

/// The state the poll loop, the dispatcher and the workers share.
#[derive(Default)]
pub(super) struct Core {
    pub(super) tasks: Tasks<Task>,
    pub(super) in_flight: usize,
    pub(super) fatal: Option<StreamsError>,
    next_generation: u64,
    /// Set while a sync commit or a transaction commit is under way: no
    /// record starts until it completes (workers do not pick up the next).
    pub(super) hold: bool,
    /// Records dispatched since the last commit (exactly-once: is there a
    /// transaction to commit).
    pub(super) dispatched_since_commit: u64,
    /// Exactly-once, while a transaction closes (see `Task::fence`): a
    /// task made meanwhile starts nothing.
    pub(super) closing: bool,
    /// Drains and transaction closes waiting on `Shared::progress`: workers
    /// wake it only while one waits (an idle `Notify` still costs a lock
    /// per record).
    pub(super) watchers: usize,
    /// Records waiting for their outputs' acknowledgements.
    pub(super) awaiting: Awaiting,
}

/// A record started by the dispatcher or a worker.
struct Job {
    /// Its task's index in `Core::tasks`, and generation.
    task: usize,
    generation: u64,
    key: QueuedKey,
    record: ConsumerRecord,
    /// Under `FailurePolicy::Fail`, the tag reserved for its outputs (see
    /// `Awaiting::reserve`).
    tag: Option<u64>,
}

impl Core {
    pub(super) fn task(&mut self, tp: &TopicPartition, ordering: OrderingMode) -> &mut Task {
        let (next_generation, closing) = (&mut self.next_generation, self.closing);
        let (_, task) = self.tasks.get_or_insert_with(tp, || {
            *next_generation += 1;
            Task {
                generation: *next_generation,
                queue: TaskQueue::new(ordering),
                watermark: CommitWatermark::new(),
                revoked: false,
                committed: None,
                runners: 0,
                waits: false,
                acking: 0,
                fence: if closing { 0 } else { u64::MAX },
            }
        });
        task
    }

    /// The task at index `i`, if it is still the one of `generation`.
    fn task_at(&mut self, i: usize, generation: u64) -> Option<&mut Task> {
        self.tasks.at_mut(i).filter(|t| t.generation == generation)
    }

    /// Counts `n` settled outputs of record `tag` (with the first failure
    /// among them): once none is left, the record is done (its watermark
    /// advances; its latency in µs is returned) or fails the application.
    fn settle_one(
        &mut self,
        tag: u64,
        n: usize,
        result: Result<(), &Error>,
        now: Instant,
    ) -> Option<u64> {
        let acked = self.awaiting.get_mut(tag)?;
        if let Err(e) = result {
            acked.error.get_or_insert_with(|| e.clone());
        }
        acked.remaining = acked.remaining.saturating_sub(n);
        if acked.remaining > 0 {
            return None;
        }
        self.complete(tag, now)
    }

    /// Takes record `tag`, all of whose outputs are settled, out of the
    /// waiting ones: see [`settle_one`](Self::settle_one).
    fn complete(&mut self, tag: u64, now: Instant) -> Option<u64> {
        let acked = self.awaiting.remove(tag)?;
        if let Some(t) = self.task_at(acked.task, acked.generation) {
            t.acking = t.acking.saturating_sub(1);
            if acked.error.is_none() {
                t.watermark.complete(acked.offset);
            }
        }
        match acked.error {
            None => {
                let took = now.saturating_duration_since(acked.started);
                Some(u64::try_from(took.as_micros()).unwrap_or(u64::MAX))
            }
            Some(e) => {
                self.fatal.get_or_insert(StreamsError::Processing {
                    partition: acked.partition,
                    offset: acked.offset,
                    attempts: 1,
                    error: ProcessingError::from(e),
                });
                None
            }
        }
    }
}

pub(crate) struct Shared {
    pub(crate) config: StreamsConfig,
    pub(crate) processor: Process,
    pub(super) consumer: Consumer,
    pub(crate) producer: Producer,
    pub(super) core: Mutex<Core>,
    /// Wakes the dispatcher (records arrived, a worker ended, stop).
    pub(super) wake: Notify,
    /// Woken (all waiters) whenever a record finishes, for drains.
    pub(super) progress: Notify,
    pub(crate) stopping: AtomicBool,
    pub(crate) counters: Arc<Counters>,
    pub(super) revokes: mpsc::UnboundedSender<Revoke>,
    /// Where the producer reports tagged outputs (an [`Acks`]).
    pub(super) acks: Arc<dyn DeliveryReceiver>,
}

impl Shared {
    pub(super) fn lock(&self) -> MutexGuard<'_, Core> {
        self.core.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(super) fn metrics(&self) -> StreamsMetrics {
        let c = &self.counters;
        let get = |a: &AtomicU64| a.load(AtomicOrdering::Relaxed);
        let (in_flight, mut partitions) = {
            let core = self.lock();
            let partitions: Vec<PartitionMetrics> = core
                .tasks
                .iter()
                .filter(|(_, t)| !t.revoked)
                .map(|(tp, t)| PartitionMetrics {
                    partition: tp.clone(),
                    watermark: t.watermark.committable(),
                    committed: t.committed,
                    lag: None,
                    buffered: t.queue.buffered() as u64,
                    in_flight: (t.queue.in_flight() + t.acking) as u64,
                })
                .collect();
            ((core.in_flight + core.awaiting.len()) as u64, partitions)
        };
        for p in &mut partitions {
            let pending = self
                .lock()
                .tasks
                .get(&p.partition)
                .map_or(0, |t| t.watermark.pending() as i64);
            p.lag = self.consumer.lag(&p.partition).map(|l| l + pending);
        }
        partitions.sort_by(|a, b| a.partition.cmp(&b.partition));
        let processed = get(&c.processed);
        StreamsMetrics {
            processed,
            in_flight,
            commit_latency_last_us: get(&c.commit_latency_last_us),
            commit_latency_max_us: get(&c.commit_latency_max_us),
            processing_latency_mean_us: get(&c.processing_total_us) / processed.max(1),
            processing_latency_max_us: get(&c.processing_max_us),
            processing_latency_p50_us: c.processing.quantile_us(0.5),
            processing_latency_p99_us: c.processing.quantile_us(0.99),
            commit_latency_p50_us: c.commit_latency.quantile_us(0.5),
            commit_latency_p99_us: c.commit_latency.quantile_us(0.99),
            partitions,
            retried_in_place: get(&c.retried_in_place),
            handed_to_retry_lane: get(&c.handed_to_retry_lane),
            retry_lane_succeeded: get(&c.retry_lane_succeeded),
            retry_lane_requeued: get(&c.retry_lane_requeued),
            dead_lettered: get(&c.dead_lettered),
            retry_lane_held: get(&c.retry_lane_held),
            commits: get(&c.commits),
            commit_failures: get(&c.commit_failures),
        }
    }

    pub(super) fn record_commit_latency(&self, started: Instant) {
        let took = started.elapsed();
        let us = took.as_micros() as u64;
        let c = &self.counters;
        c.commit_latency.record(took);
        c.commit_latency_last_us.store(us, AtomicOrdering::Relaxed);
        c.commit_latency_max_us
            .fetch_max(us, AtomicOrdering::Relaxed);
    }

    /// Buffers polled records in their tasks and registers them in the
    /// watermarks (in offset order, so buffered records hold it back too).
    /// A task buffering `max_buffered_per_task` or more has its partition
    /// paused here, before the next `poll`, so its buffer stays within that
    /// bound plus one poll's records (the rest waits in the consumer,
    /// bounded by its fetch configs); the pause is applied under the lock,
    /// so no later resume decision can precede it.
    pub(super) fn accept(&self, records: Vec<ConsumerRecord>) {
        let high = self.config.max_buffered_per_task;
        let mut core = self.lock();
        let mut records = records.into_iter().peekable();
        // `poll` returns each partition's records together: one task
        // lookup per run of them.
        while let Some(first) = records.next() {
            let tp = first.partition.clone();
            let task = core.task(&tp, self.config.ordering);
            let mut next = Some(first);
            while let Some(r) = next {
                if !task.revoked && task.watermark.register(r.offset) {
                    task.queue.push(r.key.clone(), r);
                }
                next = records.next_if(|r| r.partition == tp);
            }
            if !task.revoked && task.queue.must_pause(high) {
                // NotAssigned: the partition was just revoked.
                let _ = self.consumer.pause(std::slice::from_ref(&tp));
            }
        }
        drop(core);
        self.wake.notify_one();
    }

    /// Starts what the ordering mode and the limits allow; pauses and
    /// resumes fetching by buffer marks.
    pub(super) fn dispatch(self: &Arc<Self>) {
        let c = &self.config;
        let high = c.max_buffered_per_task;
        let tagged = matches!(c.failure_policy, FailurePolicy::Fail);
        let (mut pause, mut resume, mut jobs) = (Vec::new(), Vec::new(), Vec::new());
        {
            let mut core = self.lock();
            let mut budget = c.max_in_flight.saturating_sub(core.in_flight);
            let core = &mut *core;
            let now = Instant::now();
            for (i, tp, task) in core.tasks.iter_mut().filter(|(_, _, t)| !t.revoked) {
                // A task whose records do not wait needs one runner, which
                // takes them in a row; records that wait (async calls) each
                // get a worker, so that their calls overlap at once.
                let mut starts = match (task.waits, task.runners) {
                    (true, _) => usize::MAX,
                    (false, 0) => 1,
                    (false, _) => 0,
                };
                while starts > 0 && budget > 0 {
                    let Some((key, record)) = task
                        .queue
                        .take_one_keyed(c.max_in_flight_per_task, task.fence)
                    else {
                        break;
                    };
                    starts -= 1;
                    budget -= 1;
                    task.runners += 1;
                    // The tag is reserved under the lock that starts the
                    // record (see `Awaiting::reserve`).
                    let tag = reserve(&mut core.awaiting, tagged, i, task.generation, &record, now);
                    jobs.push(Job {
                        task: i,
                        generation: task.generation,
                        key,
                        record,
                        tag,
                    });
                }
                match task.queue.flow(high, high / 2) {
                    Some(Flow::Pause) => pause.push(tp.clone()),
                    Some(Flow::Resume) => resume.push(tp.clone()),
                    None => {}
                }
            }
            core.in_flight += jobs.len();
            core.dispatched_since_commit += jobs.len() as u64;
        }
        // NotAssigned: the partition was just revoked; nothing to do.
        // (Each call wakes the fetchers: only when something changed.)
        if !pause.is_empty() {
            let _ = self.consumer.pause(&pause);
        }
        if !resume.is_empty() {
            let _ = self.consumer.resume(&resume);
        }
        for job in jobs {
            tokio::spawn(self.clone().work(job));
        }
    }

    /// A worker: runs its record, marks it done (or, with outputs under
    /// `FailurePolicy::Fail`, sends them tagged and leaves it waiting for
    /// their acknowledgements) and, while its task has a startable record
    /// and nothing holds starts back, runs that one too. Processing
    /// latencies go to the shared histogram without waiting for its lock
    /// (see `LatencyBatch`).
    async fn work(self: Arc<Self>, mut job: Job) {
        let mut streak = 0usize;
        let mut latencies = LatencyBatch::default();
        let tagged = matches!(self.config.failure_policy, FailurePolicy::Fail);
        // Where this worker's outputs are sent from: boxed once, at its
        // first send, and reused for every output after. The producer's
        // send future is several KB (a metadata fetch, a wait for buffer
        // memory); inline, it made every worker's future as big, copied at
        // each spawn and again when the task ends (#22).
        let mut sends = None;
        let mut started = Instant::now();
        loop {
            let Job {
                task,
                generation,
                key,
                record,
                tag,
            } = job;
            let tp = record.partition.clone();
            let offset = record.offset;
            let (outcome, waited) = if tagged {
                let (r, waited) = self
                    .unless_pending(task, generation, run_processor(&self.processor, record))
                    .await;
                let r = r.map_err(|error| StreamsError::Processing {
                    partition: tp,
                    offset,
                    attempts: 1,
                    error,
                });
                (r, waited)
            } else {
                // The retry policies' path (retries, sleeps, the lane's
                // hand-off) is boxed: inline, its state made every
                // worker's future several KB, copied at each spawn.
                let (r, waited) = self
                    .unless_pending(task, generation, Box::pin(self.process(record)))
                    .await;
                (r.map(|()| Records::none()), waited)
            };
            // `Some((tag, outputs))` when the record is acking.
            let outcome = match (outcome, tag) {
                // The outputs go to the producer before the record hands
                // its slot and key on, so that the next record of its key
                // (or partition) sends after it.
                (Ok(outputs), Some(tag)) if !outputs.is_empty() => {
                    let n = outputs.len();
                    for (i, out) in outputs.into_iter().enumerate() {
                        let slot = sends.get_or_insert_with(|| Box::pin(None));
                        slot.set(Some(self.producer.send_tagged(out, &self.acks, tag)));
                        let sent = slot.as_mut().as_pin_mut().expect("set above").await;
                        slot.set(None);
                        // Outputs that cannot be sent fail the record at
                        // once.
                        if let Err(e) = sent {
                            self.settle(std::iter::once((tag, n - i)), Err(&e));
                            break;
                        }
                    }
                    Ok(Some((tag, n)))
                }
                (Ok(_), _) => Ok(None),
                (Err(e), _) => Err(e),
            };
            if matches!(outcome, Ok(None)) {
                latencies.push(started.elapsed(), &self.counters);
            }
            let now = Instant::now();
            let (next, wake_dispatcher, watched, acked) = {
                let mut guard = self.lock();
                let core = &mut *guard;
                // Done here unless acking (see `settle`).
                let mut acked = None;
                let done = match outcome {
                    Ok(None) => {
                        if let Some(tag) = tag {
                            core.awaiting.cancel(tag);
                        }
                        true
                    }
                    Ok(Some((tag, n))) => {
                        // Acking from now on; acknowledgements that came
                        // first counted down already (see `reserve`).
                        if let Some(t) = core.task_at(task, generation) {
                            t.acking += 1;
                        }
                        if let Some(a) = core.awaiting.confirm(tag, n) {
                            a.started = started;
                            if a.remaining == 0 {
                                acked = Some(core.complete(tag, now));
                            }
                        }
                        false
                    }
                    Err(e) => {
                        if let Some(tag) = tag {
                            core.awaiting.cancel(tag);
                        }
                        core.fatal.get_or_insert(e);
                        false
                    }
                };
                if done {
                    bump(&self.counters.processed);
                }
                let go_on = !core.hold
                    && core.fatal.is_none()
                    && !self.stopping.load(AtomicOrdering::Acquire);
                let low = self.config.max_buffered_per_task / 2;
                let mut next = None;
                let mut wake_dispatcher = false;
                if let Some(t) = core
                    .tasks
                    .at_mut(task)
                    .filter(|t| t.generation == generation)
                {
                    if waited {
                        t.runners += 1;
                    }
                    t.waits = waited;
                    t.queue.finish_keyed(&key);
                    if done {
                        t.watermark.complete(offset);
                    }
                    // A finished record hands its slot to the next one.
                    // Bounded, so a worker that never waits cannot keep
                    // the slot (and its thread) from other tasks for ever.
                    if go_on && !t.revoked && streak < MAX_STREAK {
                        let fence = t.fence;
                        next = t
                            .queue
                            .take_one_keyed(self.config.max_in_flight_per_task, fence)
                            .map(|(key, record)| {
                                let tag = reserve(
                                    &mut core.awaiting,
                                    tagged,
                                    task,
                                    generation,
                                    &record,
                                    now,
                                );
                                Job {
                                    task,
                                    generation,
                                    key,
                                    record,
                                    tag,
                                }
                            });
                    }
                    if next.is_none() {
                        t.runners = t.runners.saturating_sub(1);
                    }
                    // Pausing and resuming stay with the dispatcher alone:
                    // `Consumer::pause`/`resume` overwrite a flag, so calls
                    // from several threads could land out of order and leave
                    // a drained partition paused. Wake it when it is due.
                    wake_dispatcher = t.queue.wants_resume(low);
                }
                if next.is_some() {
                    core.dispatched_since_commit += 1;
                } else {
                    core.in_flight -= 1;
                }
                (next, wake_dispatcher, core.watchers > 0, acked)
            };
            // A record whose outputs were all acknowledged while it sent.
            match acked {
                Some(Some(us)) => {
                    bump(&self.counters.processed);
                    add_latencies(&self.counters, &[us], true);
                }
                Some(None) => self.wake.notify_one(),
                None => {}
            }
            if watched {
                self.progress.notify_waiters();
            }
            match next {
                Some(n) => {
                    if wake_dispatcher {
                        self.wake.notify_one();
                    }
                    job = n;
                    started = now;
                    streak += 1;
                    // A record that never waited (a filter, a no-op) must
                    // not let this loop run without yielding.
                    tokio::task::consume_budget().await;
                }
                None => {
                    latencies.flush(&self.counters);
                    self.wake.notify_one();
                    return;
                }
            }
        }
    }

    /// Runs `fut`; if it waits, this worker stands aside first (it stops
    /// being its task's runner, so that the dispatcher starts another for
    /// the task's next records). Returns the output and whether it waited.
    async fn unless_pending<F: std::future::Future>(
        &self,
        task: usize,
        generation: u64,
        fut: F,
    ) -> (F::Output, bool) {
        let mut fut = std::pin::pin!(fut);
        let mut waited = false;
        let out = std::future::poll_fn(|cx| {
            let polled = fut.as_mut().poll(cx);
            if polled.is_pending() && !waited {
                waited = true;
                self.stand_aside(task, generation);
            }
            polled
        })
        .await;
        (out, waited)
    }

    fn stand_aside(&self, task: usize, generation: u64) {
        let startable = {
            let mut guard = self.lock();
            let core = &mut *guard;
            let room = core.in_flight < self.config.max_in_flight;
            match core.task_at(task, generation) {
                Some(t) => {
                    t.runners = t.runners.saturating_sub(1);
                    t.waits = true;
                    // The waiting record keeps its slot: the dispatcher
                    // can start another only where a slot is free (with
                    // every slot taken, a wake-up per record found nothing
                    // to start).
                    room && t.queue.buffered() > 0
                        && t.queue.in_flight() < self.config.max_in_flight_per_task
                }
                None => false,
            }
        };
        if startable {
            self.wake.notify_one();
        }
    }

    /// Outputs acknowledged (or failed): `(tag, outputs)` pairs. A record
    /// whose last output is settled is done (its watermark advances) or,
    /// when one failed, fails the application, as a failed record does
    /// under `FailurePolicy::Fail`. One lock for the whole run.
    pub(super) fn settle(
        &self,
        tags: impl Iterator<Item = (u64, usize)>,
        result: Result<(), &Error>,
    ) {
        let now = Instant::now();
        let mut latencies = Vec::new();
        let (watched, failed) = {
            let mut core = self.lock();
            latencies.extend(tags.filter_map(|(tag, n)| core.settle_one(tag, n, result, now)));
            (core.watchers > 0, core.fatal.is_some())
        };
        if !latencies.is_empty() {
            let c = &self.counters;
            c.processed
                .fetch_add(latencies.len() as u64, AtomicOrdering::Relaxed);
            add_latencies(c, &latencies, true);
        }
        // Acking records hold no slot; the dispatcher need only see a
        // failure.
        if failed {
            self.wake.notify_one();
        }
        if watched {
            self.progress.notify_waiters();
        }
    }

    /// Before offsets are committed (or a transaction commits): runs a
    /// flush tick of every task through the topology, so that each caching
    /// stage writes its record cache out to its store, changelog and
    /// downstream (issue #16, KIP-63), and waits until those outputs and
    /// changelog writes are acknowledged; at-least-once, also until every
    /// output sent so far is (a cache eviction's outputs belong to a later
    /// record than the updates they carry).
    pub(super) async fn flush_caches(&self) -> std::result::Result<(), StreamsError> {
        if !self.config.stores.caching() {
            return Ok(());
        }
        let tasks: Vec<TopicPartition> = self.lock().tasks.keys().cloned().collect();
        for tp in tasks {
            let tick = crate::streams::state::flush_tick(&tp);
            attempt_once(&self.processor, &self.producer, tick)
                .await
                .map_err(|e| {
                    StreamsError::Client(Error::invalid_state(
                        crate::error::Origin::Streams,
                        format!("flushing the record caches of {tp} before a commit: {e}"),
                    ))
                })?;
        }
        if !self.config.is_exactly_once() {
            self.producer.flush().await;
        }
        Ok(())
    }

    /// Runs a record through the topology under the failure policy.
    pub(super) async fn process(
        &self,
        record: ConsumerRecord,
    ) -> std::result::Result<(), StreamsError> {
        // Under `Fail` the record is never needed again: no copy of it.
        if matches!(self.config.failure_policy, FailurePolicy::Fail) {
            let (partition, offset) = (record.partition.clone(), record.offset);
            return attempt_once(&self.processor, &self.producer, record)
                .await
                .map_err(|error| StreamsError::Processing {
                    partition,
                    offset,
                    attempts: 1,
                    error,
                });
        }
        let mut attempt = 1u32;
        loop {
            let error = match attempt_once(&self.processor, &self.producer, record.clone()).await {
                Ok(()) => return Ok(()),
                Err(e) => e,
            };
            match &self.config.failure_policy {
                FailurePolicy::Retry(b) if attempt < b.max_attempts => {
                    bump(&self.counters.retried_in_place);
                    tokio::time::sleep(b.delay(attempt)).await;
                    attempt += 1;
                }
                FailurePolicy::RetryLane(lane) => {
                    let due = crate::clock::now_ms() + lane.backoff.delay(1).as_millis() as i64;
                    let handoff = retry::to_retry_topic(lane, &record, 1, due, &error);
                    self.producer.send(handoff).await?.await?;
                    bump(&self.counters.handed_to_retry_lane);
                    return Ok(());
                }
                _ => {
                    return Err(StreamsError::Processing {
                        partition: record.partition,
                        offset: record.offset,
                        attempts: attempt,
                        error,
                    })
                }
            }
        }
    }
}

/// A worker's processing latencies not yet in the shared histogram: each
/// is added at once when the histogram's lock is free, and kept here while
/// another thread holds it (added with the next record, or at the latest
/// when the batch is full or the worker ends), so no worker ever waits for
/// the lock on the record path.
#[derive(Default)]
struct LatencyBatch {
    us: [u64; LATENCY_BATCH],
    len: usize,
}

/// Latencies a worker keeps while the histogram is busy.
const LATENCY_BATCH: usize = 16;

impl LatencyBatch {
    fn push(&mut self, took: std::time::Duration, counters: &Counters) {
        self.us[self.len] = u64::try_from(took.as_micros()).unwrap_or(u64::MAX);
        self.len += 1;
        self.add(counters, self.len == LATENCY_BATCH);
    }

    fn flush(&mut self, counters: &Counters) {
        self.add(counters, true);
    }

    /// Adds the kept latencies if the lock is free, or always when `wait`.
    fn add(&mut self, counters: &Counters, wait: bool) {
        if add_latencies(counters, &self.us[..self.len], wait) {
            self.len = 0;
        }
    }
}

/// Adds processing latencies (µs) to the histogram, the total and the
/// maximum, if the histogram's lock is free or `wait`; false when not
/// added.
fn add_latencies(counters: &Counters, batch: &[u64], wait: bool) -> bool {
    if batch.is_empty() || !counters.processing.record_all_us(batch, wait) {
        return batch.is_empty();
    }
    let total = batch.iter().fold(0u64, |a, b| a.saturating_add(*b));
    let max = batch.iter().copied().max().unwrap_or(0);
    counters
        .processing_total_us
        .fetch_add(total, AtomicOrdering::Relaxed);
    counters
        .processing_max_us
        .fetch_max(max, AtomicOrdering::Relaxed);
    true
}

/// Reserves a tag for the outputs of `record` (of task `i`), about to
/// start; `None` unless `tagged`.
fn reserve(
    awaiting: &mut Awaiting,
    tagged: bool,
    i: usize,
    generation: u64,
    record: &ConsumerRecord,
    now: Instant,
) -> Option<u64> {
    tagged.then(|| {
        awaiting.reserve(Acked {
            partition: record.partition.clone(),
            task: i,
            generation,
            offset: record.offset,
            remaining: UNKNOWN_OUTPUTS,
            started: now,
            error: None,
        })
    })
}

/// Runs a record through the processor (a panic becomes an error) and
/// waits until every output is acknowledged.
pub(crate) async fn attempt_once(
    processor: &Process,
    producer: &Producer,
    record: ConsumerRecord,
) -> std::result::Result<(), ProcessingError> {
    let outputs = run_processor(processor, record).await?;
    // Every output is sent before any is awaited, so they share batches;
    // a single output (the common case) needs no list of deliveries.
    if outputs.len() == 1 {
        let out = outputs.into_iter().next().expect("one output");
        producer.send(out).await?.await?;
        return Ok(());
    }
    let mut deliveries = Vec::with_capacity(outputs.len());
    for out in outputs {
        deliveries.push(producer.send(out).await?);
    }
    for d in deliveries {
        d.await?;
    }
    Ok(())
}

/// Runs a record through the processor: its outputs, or the error (a
/// panic becomes one).
async fn run_processor(
    processor: &Process,
    record: ConsumerRecord,
) -> std::result::Result<Records<ProducerRecord>, ProcessingError> {
    #[cfg(feature = "otel")]
    let span = super::otel::ProcessSpan::start(&record);
    // Stages do their synchronous part (decoding, say) when called: a
    // panic there is caught as one while polling is.
    #[cfg(feature = "otel")]
    let processor = |record| span.current(|| span.instrument(processor(record)));
    let called = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| processor(record)));
    let outcome = match called {
        Ok(inner) => CatchUnwind { inner }.await,
        Err(panic) => Err(panic),
    };
    match outcome {
        #[cfg(feature = "otel")]
        Ok(r) => span.finish(r),
        #[cfg(not(feature = "otel"))]
        Ok(r) => r,
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_default();
            Err(ProcessingError::new(format!("processor panicked: {what}")))
        }
    }
}

/// Turns a panic while polling `inner` into an error, without spawning a
/// task per record for it.
struct CatchUnwind<F> {
    inner: F,
}

impl<F: std::future::Future + Unpin> std::future::Future for CatchUnwind<F> {
    type Output = std::result::Result<F::Output, Box<dyn std::any::Any + Send>>;

    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        let inner = &mut self.inner;
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            std::pin::Pin::new(inner).poll(cx)
        })) {
            Ok(std::task::Poll::Ready(v)) => std::task::Poll::Ready(Ok(v)),
            Ok(std::task::Poll::Pending) => std::task::Poll::Pending,
            Err(panic) => std::task::Poll::Ready(Err(panic)),
        }
    }
}
