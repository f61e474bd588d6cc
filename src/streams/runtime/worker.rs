//! The record workers: a worker runs a record through the topology, sends
//! its outputs and takes its task's next record; acknowledgements
//! complete records (`Shared::settle`).
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
//! Where the producer keeps each partition's order across retries
//! (`Shared::pipelined`: idempotence, the default, or one request in
//! flight), a record's outputs are sent with `Producer::send_tagged`
//! under every failure policy, and its worker moves on at once: once the
//! outputs are in the producer, the record gives its in-flight slot (and
//! its key, in Key mode) to the next record, as Kafka Streams does after
//! `send`, and stays *acking* until the producer reports the last of its
//! outputs acknowledged; those reports complete records (advance their
//! watermarks) a producer batch at a time, under one lock
//! (`Shared::settle`). Outputs of one key or partition reach the producer
//! in processing order, which the idempotent producer keeps. Acking
//! records are bounded by the producer's `buffer.memory` (a send waits for
//! room, holding its slot); drains and exactly-once's transaction close
//! wait for them too. A processing failure goes through the failure
//! policy in the worker (in-place retries, or the lane's hand-off sent as
//! the record's one output); a failed output fails the application, or,
//! under the retry lane, hands the record to the retry topic
//! (`Shared::hand_off`). Not pipelined, a worker runs `Shared::process`,
//! which awaits the record's acknowledgements.

use std::sync::atomic::Ordering as AtomicOrdering;
use std::sync::{Arc, Weak};

use tokio::time::Instant;

use super::process::run_processor;
use super::slots::{Acked, Awaiting, UNKNOWN_OUTPUTS};
use super::task::{Settled, Shared};
use crate::consumer::ConsumerRecord;
use crate::error::Error;
use crate::producer::{DeliveryReceiver, Enqueued, ProducerRecord, Waiting};
use crate::streams::config::FailurePolicy;
use crate::streams::error::{ProcessingError, StreamsError};
use crate::streams::metrics::{bump, Counters};
use crate::streams::retry;
use crate::streams::scheduler::QueuedKey;
use crate::streams::topology::Records;
use crate::TopicPartition;

/// Records a worker runs in a row before it hands its slot back to the
/// dispatcher, which shares slots among tasks.
const MAX_STREAK: usize = 64;
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

/// A record started by the dispatcher or a worker.
pub(super) struct Job {
    /// Its task's index in `Core::tasks`, and generation.
    pub(super) task: usize,
    pub(super) generation: u64,
    pub(super) key: QueuedKey,
    pub(super) record: ConsumerRecord,
    /// Under `FailurePolicy::Fail`, the tag reserved for its outputs (see
    /// `Awaiting::reserve`).
    pub(super) tag: Option<u64>,
    /// Whether its worker counts among its task's runners (see
    /// `Task::runners`): a record started where records wait (the one
    /// before it waited, or the dispatcher started it for a task that
    /// waits) is not, so that when it waits too its worker need not take
    /// the lock again to stand aside.
    pub(super) runner: bool,
}

impl Shared {
    /// A worker: runs its record, marks it done (or, with outputs under
    /// `FailurePolicy::Fail`, sends them tagged and leaves it waiting for
    /// their acknowledgements) and, while its task has a startable record
    /// and nothing holds starts back, runs that one too. Processing
    /// latencies go to the shared histogram without waiting for its lock
    /// (see `LatencyBatch`).
    // Not an `async fn`: see the block's first comment.
    #[allow(clippy::manual_async_fn)]
    pub(super) fn work(
        self: Arc<Self>,
        mut job: Job,
    ) -> impl std::future::Future<Output = ()> + Send + 'static {
        // An async block that uses its arguments in place, not an `async
        // fn`, which keeps a second copy of them: the worker's state is
        // held per record in flight, so it is kept small (#22). For the
        // same reason the record's fields are read from `job`, not copied
        // out of it.
        async move {
            let mut streak = 0usize;
            let mut latencies = LatencyBatch::default();
            let tagged = self.pipelined;
            let fail = matches!(self.config.failure_policy, FailurePolicy::Fail);
            // Outputs are appended without a future where the producer need
            // not wait (nearly always, see `send_now`); a send that waits for
            // metadata or buffer memory runs from here: boxed once, at the
            // worker's first such send, and reused after. Inline, its state
            // would make every worker's future as big (#22).
            let mut sends = None;
            // Whether an append readied a batch (see `Enqueued`).
            let mut sink_due = false;
            let mut started = Instant::now();
            loop {
                let (task, generation, runner) = (job.task, job.generation, job.runner);
                let offset = job.record.offset;
                let (outcome, waited) = if tagged && fail {
                    // Under `Fail` the record is never needed again: no copy.
                    let tp = job.record.partition.clone();
                    let (r, waited) = self
                        .unless_pending(
                            (task, generation, runner),
                            run_processor(&self.processor, job.record),
                        )
                        .await;
                    let r = r.map(|outputs| (outputs, None)).map_err(|error| {
                        StreamsError::Processing {
                            partition: tp,
                            offset,
                            attempts: 1,
                            error,
                        }
                    });
                    (r, waited)
                } else if tagged {
                    // The retry policies' path is boxed (see below).
                    self.unless_pending(
                        (task, generation, runner),
                        Box::pin(self.outputs_under_policy(job.record)),
                    )
                    .await
                } else {
                    // Not pipelined: `process` awaits the outputs. The retry
                    // policies' paths (retries, sleeps, the lane's hand-off)
                    // are boxed: inline, their state made every worker's
                    // future several KB, copied at each spawn.
                    let (r, waited) = self
                        .unless_pending(
                            (task, generation, runner),
                            Box::pin(self.process(job.record)),
                        )
                        .await;
                    (r.map(|()| (Records::none(), None)), waited)
                };
                // `Some((tag, outputs, lane copy))` when the record is acking.
                let tag = job.tag;
                let outcome = match (outcome, tag) {
                    // The outputs go to the producer before the record hands
                    // its slot and key on, so that the next record of its key
                    // (or partition) sends after it.
                    (Ok((outputs, lane)), Some(tag)) if !outputs.is_empty() => {
                        let n = outputs.len();
                        match self.send_now(outputs, tag) {
                            Sent::All { wake } => sink_due = wake,
                            Sent::Waits(rest) => sends
                                .get_or_insert_with(|| Box::pin(None))
                                .set(Some(self.send_rest(rest, tag))),
                        }
                        Ok(Some((tag, n, lane)))
                    }
                    (Ok(_), _) => Ok(None),
                    (Err(e), _) => Err(e),
                };
                // Awaited out of the match, whose operands would otherwise
                // be held (and sized into the worker) while it sends.
                if let Some(slot) = sends.as_mut() {
                    if let Some(sending) = slot.as_mut().as_pin_mut() {
                        sending.await;
                        slot.set(None);
                    }
                }
                if std::mem::take(&mut sink_due) {
                    // A batch became ready: let the sink run now, as
                    // `Producer::send` does.
                    tokio::task::yield_now().await;
                }
                if matches!(outcome, Ok(None)) {
                    latencies.push(started.elapsed(), &self.counters);
                }
                let now = Instant::now();
                // Whether this worker still counts among its task's runners:
                // not if it was started as none, nor once it stood aside.
                let counted = runner && !waited;
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
                        Ok(Some((tag, n, lane))) => {
                            // Acking from now on; acknowledgements that came
                            // first counted down already (see `reserve`).
                            if let Some(t) = core.task_at(task, generation) {
                                t.acking += 1;
                            }
                            if let Some(a) = core.awaiting.confirm(tag, n) {
                                a.started = started;
                                a.lane = lane;
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
                        if !counted {
                            t.runners += 1;
                        }
                        t.waits = waited;
                        t.queue.finish_keyed(&job.key);
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
                                        // Its record is likely to wait as this
                                        // one did (see `Job::runner`).
                                        runner: !waited,
                                    }
                                });
                        }
                        // Pausing and resuming stay with the dispatcher alone:
                        // `Consumer::pause`/`resume` overwrite a flag, so calls
                        // from several threads could land out of order and leave
                        // a drained partition paused. Wake it when it is due.
                        wake_dispatcher = t.queue.wants_resume(low);
                        if next.is_none() {
                            t.runners = t.runners.saturating_sub(1);
                        } else if waited {
                            // The next record starts standing aside already,
                            // as `stand_aside` would once it waits, with the
                            // same wake-up: another record of the task may
                            // start in a free slot.
                            t.runners = t.runners.saturating_sub(1);
                            wake_dispatcher |= core.in_flight < self.config.max_in_flight
                                && t.queue.buffered() > 0
                                && t.queue.in_flight() < self.config.max_in_flight_per_task;
                        }
                    }
                    if next.is_some() {
                        core.dispatched_since_commit += 1;
                    } else {
                        core.in_flight -= 1;
                    }
                    (next, wake_dispatcher, core.watchers > 0, acked)
                };
                // A record whose outputs were all settled while it sent.
                match acked.flatten() {
                    Some(Settled::Done(us)) => {
                        bump(&self.counters.processed);
                        add_latencies(&self.counters, &[us], true);
                    }
                    Some(Settled::Failed) => self.wake.notify_one(),
                    Some(Settled::HandOff { tag, record, error }) => {
                        tokio::spawn(self.clone().hand_off(tag, record, error));
                    }
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
    }

    /// Sends a record's outputs, tagged (see [`Acks`]), as far as the
    /// producer appends them without waiting (nearly always: no future is
    /// kept for them); the rest goes to [`send_rest`](Self::send_rest). An
    /// output that cannot be sent fails the record at once.
    fn send_now(self: &Arc<Self>, outputs: Records<ProducerRecord>, tag: u64) -> Sent {
        let mut left = outputs.len();
        let mut wake = false;
        let mut outputs = outputs.into_iter();
        while let Some(out) = outputs.next() {
            match self.producer.try_send_tagged(out, &self.acks, tag) {
                Ok(Enqueued::Appended { wake: w }) => wake |= w,
                Ok(Enqueued::MustWait(waiting)) => {
                    return Sent::Waits(Box::new(Rest {
                        waiting,
                        outputs,
                        left,
                    }))
                }
                Err(e) => {
                    self.settle(std::iter::once((tag, left)), Err(&e));
                    break;
                }
            }
            left -= 1;
        }
        Sent::All { wake }
    }

    /// The outputs [`send_now`](Self::send_now) could not append at once.
    async fn send_rest(self: &Arc<Self>, rest: Box<Rest>, tag: u64) {
        let Rest {
            waiting,
            mut outputs,
            mut left,
        } = *rest;
        let mut sent = self.producer.send_waiting(waiting).await;
        loop {
            if let Err(e) = sent {
                self.settle(std::iter::once((tag, left)), Err(&e));
                return;
            }
            left -= 1;
            let Some(out) = outputs.next() else { return };
            sent = self.producer.send_tagged(out, &self.acks, tag).await;
        }
    }

    /// Runs `fut`; if it waits, this worker stands aside first if it is a
    /// runner (it stops being one, so that the dispatcher starts another
    /// for the task's next records). Its output and whether it waited.
    fn unless_pending<F: std::future::Future + Unpin>(
        &self,
        (task, generation, runner): (usize, u64, bool),
        fut: F,
    ) -> UnlessPending<'_, F> {
        UnlessPending {
            shared: self,
            task,
            generation,
            runner,
            waited: false,
            fut,
        }
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
        self: &Arc<Self>,
        tags: impl Iterator<Item = (u64, usize)>,
        result: Result<(), &Error>,
    ) {
        let now = Instant::now();
        // Sized once for the batch (usually all of it is done), instead of
        // grown by doubling a record at a time.
        let mut latencies = Vec::with_capacity(tags.size_hint().0);
        let mut hand_offs = Vec::new();
        let (watched, failed) = {
            let mut core = self.lock();
            for settled in tags.filter_map(|(tag, n)| core.settle_one(tag, n, result, now)) {
                match settled {
                    Settled::Done(us) => latencies.push(us),
                    Settled::Failed => {}
                    Settled::HandOff { tag, record, error } => hand_offs.push((tag, record, error)),
                }
            }
            (core.watchers > 0, core.fatal.is_some())
        };
        for (tag, record, error) in hand_offs {
            tokio::spawn(self.clone().hand_off(tag, record, error));
        }
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

    /// Under the retry lane, a record one of whose outputs failed after
    /// the producer's retries: hands it to the retry topic, as a record
    /// that failed processing is. Its watermark stays held until the
    /// hand-off is acknowledged (then the record is done; its outputs
    /// that were delivered will be sent again when the lane re-runs it,
    /// at-least-once); a failed hand-off fails the application.
    async fn hand_off(self: Arc<Self>, tag: u64, record: Box<ConsumerRecord>, error: Error) {
        let sent = match &self.config.failure_policy {
            FailurePolicy::RetryLane(lane) => {
                let why = ProcessingError::new(format!("an output was not delivered: {error}"));
                let due = crate::clock::now_ms() + lane.backoff.delay(1).as_millis() as i64;
                match self
                    .producer
                    .send(retry::to_retry_topic(lane, &record, 1, due, &why))
                    .await
                {
                    Ok(delivery) => delivery.await.map(|_| ()),
                    Err(e) => Err(e),
                }
            }
            // Only the lane keeps a copy of the record to hand off.
            _ => Err(error),
        };
        if sent.is_ok() {
            bump(&self.counters.handed_to_retry_lane);
        }
        self.settle(std::iter::once((tag, 1)), sent.as_ref().map(|_| ()));
    }
}

/// What [`Shared::send_now`] did with a record's outputs.
enum Sent {
    /// All appended (or the record failed); whether a batch became ready.
    All { wake: bool },
    /// One must wait for metadata or buffer memory.
    Waits(Box<Rest>),
}

/// A record's outputs from the first that must wait: that one, the ones
/// after it, and how many are left (it included).
struct Rest {
    waiting: Waiting,
    outputs: <Records<ProducerRecord> as IntoIterator>::IntoIter,
    left: usize,
}

/// [`Shared::unless_pending`]'s future: a struct, not an `async fn`,
/// which would hold `fut` twice (its argument and the pinned copy it
/// polls); a worker waits on it through a record's whole call (#22).
pub(super) struct UnlessPending<'a, F> {
    shared: &'a Shared,
    task: usize,
    generation: u64,
    runner: bool,
    waited: bool,
    fut: F,
}

impl<F: std::future::Future + Unpin> std::future::Future for UnlessPending<'_, F> {
    type Output = (F::Output, bool);

    fn poll(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        let this = self.get_mut();
        match std::pin::Pin::new(&mut this.fut).poll(cx) {
            std::task::Poll::Ready(out) => std::task::Poll::Ready((out, this.waited)),
            std::task::Poll::Pending => {
                if !this.waited {
                    this.waited = true;
                    if this.runner {
                        this.shared.stand_aside(this.task, this.generation);
                    }
                }
                std::task::Poll::Pending
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
const LATENCY_BATCH: usize = 4;

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
pub(super) fn reserve(
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
            lane: None,
        })
    })
}
