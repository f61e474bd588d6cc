//! The runtime: one consumer group member per instance, one task per
//! assigned partition, records processed on tokio tasks within the
//! in-flight limits, outputs acknowledged before a record counts as done,
//! and the watermarks committed (sync, async or in a transaction).
//!
//! Three actors share [`Shared`]: the *poll loop* (calls `Consumer::poll`,
//! buffers records, runs the rebalance listener), the *dispatcher* (starts
//! records, commits, handles revocations and shutdown) and the record
//! *workers*. The listener never commits itself: it hands revoked
//! partitions to the dispatcher, which drains and commits them (through the
//! transaction under exactly-once) and answers; only then does the
//! consumer release them.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering as AtomicOrdering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use tokio::sync::{mpsc, oneshot, Notify};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tracing::{debug, warn};

use super::config::{CommitMode, CommitOutcome, FailurePolicy, StreamsConfig};
use super::metrics::{bump, check_dead_letters, Counters, PartitionMetrics, StreamsMetrics};
use super::retry;
use super::scheduler::{Flow, Ordering, TaskQueue};
use super::topology::{ProcessingError, Processor, StreamsBuilder};
use super::watermark::CommitWatermark;
use crate::consumer::{BoxFuture, Consumer, ConsumerConfig, ConsumerRecord, Offsets};
use crate::consumer::{OffsetAndMetadata, RebalanceListener};
use crate::error::{Error, Result};
use crate::producer::{Producer, ProducerConfig};
use crate::TopicPartition;

/// Why a streams application stopped.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum StreamsError {
    /// A record failed under [`FailurePolicy::Fail`] (or exhausted in-place
    /// retries); its offset and everything after it stay uncommitted.
    #[error(
        "processing {partition} at offset {offset} failed after {attempts} attempt(s): {error}"
    )]
    Processing {
        /// The record's partition.
        partition: TopicPartition,
        /// The record's offset.
        offset: i64,
        /// Attempts made.
        attempts: u32,
        /// The last failure.
        error: ProcessingError,
    },
    /// The dead-letter rate guard tripped: of the records the main lane
    /// finished in the window, too many were dead-lettered.
    #[error("{dead_lettered} of {processed} records were dead-lettered within {window:?}, above the guard's share")]
    DeadLetterRate {
        /// Dead letters in the window.
        dead_lettered: u64,
        /// Records the main lane finished in the window.
        processed: u64,
        /// The window.
        window: Duration,
    },
    /// The client failed (connect, produce, commit, transaction).
    #[error(transparent)]
    Client(#[from] Error),
}

/// A topology ready to run; see [`Streams::builder`].
pub struct Streams {
    config: StreamsConfig,
    source: String,
    processor: Processor,
}

impl Streams {
    /// Starts a topology for `config`:
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), purekafka::streams::StreamsError> {
    /// use purekafka::producer::serializer::StringSerializer;
    /// use purekafka::streams::{Ordering, StreamsConfig, Streams, StringDeserializer};
    ///
    /// let config = StreamsConfig::builder("enricher", "127.0.0.1:9092")
    ///     .ordering(Ordering::Key)
    ///     .max_in_flight(512, 1024)
    ///     .build()?;
    /// let running = Streams::builder(config)
    ///     .source("orders", StringDeserializer, StringDeserializer)
    ///     .map_async(|r| async move {
    ///         let v = format!("{} (enriched)", r.value);
    ///         Ok(r.with_value(v))
    ///     })
    ///     .to("enriched", StringSerializer, StringSerializer)
    ///     .build()
    ///     .start()
    ///     .await?;
    /// running.shutdown().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn builder(config: StreamsConfig) -> StreamsBuilder {
        StreamsBuilder::new(config)
    }

    pub(crate) fn new(config: StreamsConfig, source: String, processor: Processor) -> Streams {
        Streams {
            config,
            source,
            processor,
        }
    }

    /// Connects, joins the group `application.id` and starts processing
    /// (and the retry lane's worker when configured).
    pub async fn start(self) -> std::result::Result<RunningStreams, StreamsError> {
        let c = &self.config;
        let consumer = Consumer::connect(consumer_config(c, &c.application_id)?).await?;
        let mut producer = ProducerConfig::builder()
            .bootstrap_servers(&c.bootstrap_servers)
            .linger(Duration::from_millis(2));
        if c.is_exactly_once() {
            let id = format!("{}-{:016x}", c.application_id, fastrand::u64(..));
            // As Kafka Streams: a killed instance's open transaction
            // (its successor has another transactional id, so cannot fence
            // it) holds read_committed readers back until the broker aborts
            // it, so keep the timeout short. Overridable below.
            producer = producer
                .transactional_id(id)
                .set("transaction.timeout.ms", "10000")?;
        }
        for (k, v) in &c.producer_properties {
            producer = producer.set(k, v)?;
        }
        let producer = Producer::new(producer.build()?).await?;
        if c.is_exactly_once() {
            producer.init_transactions().await?;
        }
        let (revokes_tx, revokes) = mpsc::unbounded_channel();
        let shared = Arc::new(Shared {
            config: self.config.clone(),
            processor: self.processor,
            consumer: consumer.clone(),
            producer,
            core: Mutex::new(Core::default()),
            wake: Notify::new(),
            progress: Notify::new(),
            stopping: AtomicBool::new(false),
            counters: Arc::new(Counters::default()),
            revokes: revokes_tx,
        });
        consumer.set_rebalance_listener(Listener(Arc::downgrade(&shared)));
        consumer.subscribe([self.source.clone()])?;
        let lane = match &shared.config.failure_policy {
            FailurePolicy::RetryLane(lane) => {
                Some(tokio::spawn(retry::run_lane(shared.clone(), lane.clone())))
            }
            _ => None,
        };
        let poller = tokio::spawn(poll_loop(shared.clone()));
        let driver = tokio::spawn(dispatch_loop(shared.clone(), revokes, poller, lane));
        Ok(RunningStreams { shared, driver })
    }
}

fn consumer_config(c: &StreamsConfig, group: &str) -> Result<ConsumerConfig> {
    let mut props: Vec<(String, String)> = vec![
        ("bootstrap.servers".into(), c.bootstrap_servers.clone()),
        ("group.id".into(), group.into()),
        ("enable.auto.commit".into(), "false".into()),
        ("auto.offset.reset".into(), "earliest".into()),
        ("fetch.max.wait.ms".into(), "100".into()),
    ];
    if c.is_exactly_once() {
        props.push(("isolation.level".into(), "read_committed".into()));
    }
    props.extend(c.consumer_properties.iter().cloned());
    ConsumerConfig::from_properties(props)
}

/// A running application.
pub struct RunningStreams {
    shared: Arc<Shared>,
    driver: JoinHandle<std::result::Result<(), StreamsError>>,
}

impl RunningStreams {
    /// The counters now.
    pub fn metrics(&self) -> StreamsMetrics {
        self.shared.metrics()
    }

    /// Whether the application stopped (after an error, or a shutdown).
    pub fn is_finished(&self) -> bool {
        self.driver.is_finished()
    }

    /// Stops dispatching, drains in-flight records (up to the drain
    /// timeout), commits the watermarks synchronously, leaves the group and
    /// closes the clients; returns the error that stopped it, if any.
    pub async fn shutdown(self) -> std::result::Result<(), StreamsError> {
        self.shared.stopping.store(true, AtomicOrdering::Release);
        self.shared.wake.notify_one();
        self.wait().await
    }

    /// Waits until the application stops by itself (a fatal error).
    pub async fn wait(self) -> std::result::Result<(), StreamsError> {
        match self.driver.await {
            Ok(r) => r,
            Err(e) => Err(StreamsError::Client(Error::config(
                "streams",
                format!("the runtime task failed: {e}"),
            ))),
        }
    }
}

/// One assigned partition.
struct Task {
    generation: u64,
    queue: TaskQueue<ConsumerRecord>,
    watermark: CommitWatermark,
    revoked: bool,
    committed: Option<i64>,
}

#[derive(Default)]
struct Core {
    tasks: HashMap<TopicPartition, Task>,
    in_flight: usize,
    fatal: Option<StreamsError>,
    next_generation: u64,
    /// Records dispatched since the last commit (exactly-once: is there a
    /// transaction to commit).
    dispatched_since_commit: u64,
    /// Exactly-once, while a transaction closes: per task, the arrival
    /// number below which records must finish (and above which none
    /// starts) before the offsets go into the transaction.
    fences: Option<HashMap<TopicPartition, u64>>,
}

impl Core {
    fn task(&mut self, tp: &TopicPartition, ordering: Ordering) -> &mut Task {
        if !self.tasks.contains_key(tp) {
            self.next_generation += 1;
            let task = Task {
                generation: self.next_generation,
                queue: TaskQueue::new(ordering),
                watermark: CommitWatermark::new(),
                revoked: false,
                committed: None,
            };
            self.tasks.insert(tp.clone(), task);
        }
        self.tasks.get_mut(tp).expect("inserted above")
    }
}

struct Revoke {
    partitions: Vec<TopicPartition>,
    done: oneshot::Sender<()>,
}

pub(crate) struct Shared {
    pub(crate) config: StreamsConfig,
    pub(crate) processor: Processor,
    consumer: Consumer,
    pub(crate) producer: Producer,
    core: Mutex<Core>,
    /// Wakes the dispatcher (records arrived, a record finished, stop).
    wake: Notify,
    /// Woken (all waiters) whenever a record finishes, for drains.
    progress: Notify,
    pub(crate) stopping: AtomicBool,
    pub(crate) counters: Arc<Counters>,
    revokes: mpsc::UnboundedSender<Revoke>,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Core> {
        self.core.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn metrics(&self) -> StreamsMetrics {
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
                    in_flight: t.queue.in_flight() as u64,
                })
                .collect();
            (core.in_flight as u64, partitions)
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

    fn record_commit_latency(&self, started: Instant) {
        let us = started.elapsed().as_micros() as u64;
        let c = &self.counters;
        c.commit_latency_last_us.store(us, AtomicOrdering::Relaxed);
        c.commit_latency_max_us
            .fetch_max(us, AtomicOrdering::Relaxed);
    }

    /// Buffers polled records in their tasks and registers them in the
    /// watermarks (in offset order, so buffered records hold it back too).
    fn accept(&self, records: Vec<ConsumerRecord>) {
        let mut core = self.lock();
        for r in records {
            let task = core.task(&r.partition, self.config.ordering);
            if !task.revoked && task.watermark.register(r.offset) {
                task.queue.push(r.key.clone(), r);
            }
        }
        drop(core);
        self.wake.notify_one();
    }

    /// Starts what the ordering mode and the limits allow; pauses and
    /// resumes fetching by buffer marks.
    fn dispatch(self: &Arc<Self>) {
        let c = &self.config;
        let high = c.max_buffered_per_task;
        let (mut pause, mut resume, mut jobs) = (Vec::new(), Vec::new(), Vec::new());
        {
            let mut core = self.lock();
            let mut budget = c.max_in_flight.saturating_sub(core.in_flight);
            let core = &mut *core;
            for (tp, task) in core.tasks.iter_mut().filter(|(_, t)| !t.revoked) {
                let fence = core
                    .fences
                    .as_ref()
                    .map_or(u64::MAX, |f| f.get(tp).copied().unwrap_or(0));
                for (key, record) in
                    task.queue
                        .take_startable_below(c.max_in_flight_per_task, &mut budget, fence)
                {
                    jobs.push((task.generation, key, record));
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
        for (generation, key, record) in jobs {
            let shared = self.clone();
            tokio::spawn(async move {
                let tp = record.partition.clone();
                let offset = record.offset;
                let started = Instant::now();
                let outcome = shared.process(record).await;
                let us = started.elapsed().as_micros() as u64;
                let c = &shared.counters;
                c.processing_total_us.fetch_add(us, AtomicOrdering::Relaxed);
                c.processing_max_us.fetch_max(us, AtomicOrdering::Relaxed);
                let mut core = shared.lock();
                core.in_flight -= 1;
                if let Some(t) = core
                    .tasks
                    .get_mut(&tp)
                    .filter(|t| t.generation == generation)
                {
                    t.queue.finish(&key);
                    if outcome.is_ok() {
                        t.watermark.complete(offset);
                    }
                }
                match outcome {
                    Ok(()) => bump(&shared.counters.processed),
                    Err(e) => {
                        core.fatal.get_or_insert(e);
                    }
                }
                drop(core);
                shared.wake.notify_one();
                shared.progress.notify_waiters();
            });
        }
    }

    /// Runs a record through the topology under the failure policy.
    async fn process(&self, record: ConsumerRecord) -> std::result::Result<(), StreamsError> {
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
                    let due = retry::now_ms() + lane.backoff.delay(1).as_millis() as i64;
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

    /// The offsets to commit: each task's watermark (revoked tasks only when
    /// named in `only`), skipping unchanged ones unless `all`.
    fn committable(&self, only: Option<&[TopicPartition]>, all: bool) -> Offsets {
        let core = self.lock();
        core.tasks
            .iter()
            .filter(|(tp, t)| only.map_or(!t.revoked, |o| o.contains(tp)))
            .filter_map(|(tp, t)| {
                let at = t.watermark.committable()?;
                (all || t.committed != Some(at)).then(|| (tp.clone(), OffsetAndMetadata::new(at)))
            })
            .collect()
    }

    fn mark_committed(&self, offsets: &Offsets) {
        let mut core = self.lock();
        for (tp, o) in offsets {
            if let Some(t) = core.tasks.get_mut(tp) {
                t.committed = Some(o.offset);
            }
        }
    }

    /// Commits the watermarks by the commit mode; `last` makes it
    /// synchronous (revoke, shutdown).
    async fn commit(
        self: &Arc<Self>,
        only: Option<&[TopicPartition]>,
        last: bool,
    ) -> std::result::Result<(), StreamsError> {
        match &self.config.commit_mode {
            CommitMode::ExactlyOnce => return self.commit_transaction(only).await,
            CommitMode::Async(callback) if !last => {
                let offsets = self.committable(only, false);
                if offsets.is_empty() {
                    return Ok(());
                }
                self.mark_committed(&offsets);
                let (callback, counters) = (callback.clone(), self.counters.clone());
                let sent = offsets.clone();
                self.consumer
                    .commit_async_offsets(offsets, move |result| {
                        if let Some(e) = counters.commit_result(&result) {
                            counters.set_fatal(e);
                        }
                        callback(&CommitOutcome {
                            offsets: sent,
                            result,
                        });
                    })
                    .await;
                return Ok(());
            }
            _ => {}
        }
        let offsets = self.committable(only, last);
        if offsets.is_empty() {
            return Ok(());
        }
        let started = Instant::now();
        let result = self.consumer.commit_sync_offsets(offsets.clone()).await;
        self.record_commit_latency(started);
        if result.is_ok() {
            self.mark_committed(&offsets);
        }
        let fatal = self.counters.commit_result(&result);
        if let CommitMode::Async(callback) = &self.config.commit_mode {
            callback(&CommitOutcome { offsets, result });
        }
        match fatal {
            Some(e) => Err(e.into()),
            None => Ok(()),
        }
    }

    /// Exactly-once: drain everything in flight, put the watermarks into the
    /// open transaction with the group metadata (KIP-447), commit, begin
    /// the next.
    async fn commit_transaction(
        self: &Arc<Self>,
        only: Option<&[TopicPartition]>,
    ) -> std::result::Result<(), StreamsError> {
        if !self.close_epoch().await {
            return Err(Error::config(
                "drain.timeout",
                "in-flight records did not finish before the transaction's commit",
            )
            .into());
        }
        if std::mem::take(&mut self.lock().dispatched_since_commit) == 0 {
            return Ok(());
        }
        let mut offsets = self.committable(None, true);
        if let Some(only) = only {
            // Revoked partitions are committed too (they are drained).
            offsets.extend(self.committable(Some(only), true));
        }
        let started = Instant::now();
        if !offsets.is_empty() {
            let group = self.consumer.group_metadata()?;
            self.producer
                .send_offsets_to_transaction(&offsets, &group)
                .await?;
        }
        self.producer.commit_transaction().await?;
        self.producer.begin_transaction()?;
        self.record_commit_latency(started);
        self.mark_committed(&offsets);
        bump(&self.counters.commits);
        debug!(elapsed = ?started.elapsed(), partitions = offsets.len(), "transaction committed");
        Ok(())
    }

    /// Exactly-once, before a transaction commits: finishes every record
    /// older than the newest one started in each task (starting those a
    /// busy key held back; none newer), so that the committed offset
    /// (the lowest record not done) covers every output in the
    /// transaction: with Key or Unordered ordering, records finish out of
    /// order, and a record done above the watermark would be processed
    /// again after a restart, its first output committed. Up to the drain
    /// timeout; true when closed.
    async fn close_epoch(self: &Arc<Self>) -> bool {
        let deadline = Instant::now() + self.config.drain_timeout;
        {
            let mut core = self.lock();
            let fences = core
                .tasks
                .iter()
                .map(|(tp, t)| (tp.clone(), t.queue.started_end()))
                .collect();
            core.fences = Some(fences);
        }
        let closed = loop {
            let progress = self.progress.notified();
            tokio::pin!(progress);
            progress.as_mut().enable();
            self.dispatch();
            let done = {
                let core = self.lock();
                let fences = core.fences.as_ref().expect("set above");
                core.tasks
                    .iter()
                    .all(|(tp, t)| t.queue.done_below(fences.get(tp).copied().unwrap_or(0)))
            };
            if done {
                break true;
            }
            tokio::select! {
                _ = progress => {}
                _ = tokio::time::sleep_until(deadline) => break false,
            }
        };
        self.lock().fences = None;
        closed
    }

    /// Waits until nothing is in flight for `only` (every task when `None`),
    /// up to the drain timeout; true when drained.
    async fn drain(&self, only: Option<&[TopicPartition]>) -> bool {
        let deadline = Instant::now() + self.config.drain_timeout;
        loop {
            let progress = self.progress.notified();
            tokio::pin!(progress);
            progress.as_mut().enable();
            let busy = {
                let core = self.lock();
                match only {
                    None => core.in_flight,
                    Some(o) => o
                        .iter()
                        .filter_map(|tp| core.tasks.get(tp))
                        .map(|t| t.queue.in_flight())
                        .sum(),
                }
            };
            if busy == 0 {
                return true;
            }
            tokio::select! {
                _ = progress => {}
                _ = tokio::time::sleep_until(deadline) => return false,
            }
        }
    }

    /// Revocation, run by the dispatcher: stop dispatching the partitions,
    /// drain them, commit, forget them.
    async fn revoke(
        self: &Arc<Self>,
        partitions: &[TopicPartition],
    ) -> std::result::Result<(), StreamsError> {
        if self.config.is_exactly_once() {
            // Close the transaction while the partitions still dispatch, so
            // that their records below the fence finish (see close_epoch).
            self.commit_transaction(None).await?;
        }
        {
            let mut core = self.lock();
            for tp in partitions {
                if let Some(t) = core.tasks.get_mut(tp) {
                    t.revoked = true;
                    t.queue.clear_buffer();
                }
            }
        }
        if !self.drain(Some(partitions)).await {
            warn!(
                ?partitions,
                "drain timed out on revoke; committing what is done"
            );
        }
        let r = self.commit(Some(partitions), true).await;
        let mut core = self.lock();
        for tp in partitions {
            core.tasks.remove(tp);
        }
        r
    }
}

/// Runs a record through the processor (a panic becomes an error) and
/// waits until every output is acknowledged.
pub(crate) async fn attempt_once(
    processor: &Processor,
    producer: &Producer,
    record: ConsumerRecord,
) -> std::result::Result<(), ProcessingError> {
    let outputs = match (CatchUnwind {
        inner: processor(record),
    })
    .await
    {
        Ok(r) => r?,
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_default();
            return Err(ProcessingError::new(format!("processor panicked: {what}")));
        }
    };
    let mut deliveries = Vec::with_capacity(outputs.len());
    for out in outputs {
        deliveries.push(producer.send(out).await?);
    }
    for d in deliveries {
        d.await?;
    }
    Ok(())
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

async fn poll_loop(shared: Arc<Shared>) {
    while !shared.stopping.load(AtomicOrdering::Acquire) {
        match shared.consumer.poll(Duration::from_millis(100)).await {
            Ok(records) if !records.is_empty() => shared.accept(records),
            Ok(_) => {}
            Err(Error::Closed) => break,
            Err(e) if e.is_retriable() => {
                warn!(error = %e, "poll failed; retrying");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => {
                // Authentication, authorization, fencing, an offset out of
                // range with auto.offset.reset=none, undecodable records:
                // polling again cannot help.
                shared.counters.set_fatal(e);
                shared.wake.notify_one();
                break;
            }
        }
    }
}

async fn dispatch_loop(
    shared: Arc<Shared>,
    mut revokes: mpsc::UnboundedReceiver<Revoke>,
    poller: JoinHandle<()>,
    lane: Option<JoinHandle<()>>,
) -> std::result::Result<(), StreamsError> {
    if shared.config.is_exactly_once() {
        shared.producer.begin_transaction()?;
    }
    let interval = shared.config.commit_interval;
    let mut next_commit = Instant::now() + interval;
    let timer = tokio::time::sleep_until(next_commit);
    tokio::pin!(timer);
    let guard = match &shared.config.failure_policy {
        FailurePolicy::RetryLane(lane) => lane.dead_letter_guard,
        _ => None,
    };
    // Seeded at zero: the main lane may finish every record before the
    // first interval, the dead letters coming only after the backoffs.
    let mut samples: std::collections::VecDeque<(Instant, u64, u64)> =
        [(Instant::now(), 0, 0)].into();
    let result = loop {
        if let Some(e) = shared.lock().fatal.take() {
            break Err(e);
        }
        if let Some(e) = shared.counters.take_fatal() {
            break Err(e.into());
        }
        if shared.stopping.load(AtomicOrdering::Acquire) {
            break Ok(());
        }
        shared.dispatch();
        if Instant::now() >= next_commit {
            if let Err(e) = shared.commit(None, false).await {
                break Err(e);
            }
            next_commit = Instant::now() + interval;
            timer.as_mut().reset(next_commit);
            if let Some(g) = guard {
                if let Err(e) = check_dead_letters(&shared, &g, &mut samples) {
                    break Err(e);
                }
            }
        }
        if timer.is_elapsed() {
            // Fired (maybe a hair early); arm it again for the deadline.
            timer.as_mut().reset(next_commit);
        }
        tokio::select! {
            _ = shared.wake.notified() => {}
            _ = timer.as_mut() => {}
            Some(r) = revokes.recv() => {
                let outcome = shared.revoke(&r.partitions).await;
                let _ = r.done.send(());
                if let Err(e) = outcome {
                    break Err(e);
                }
            }
        }
    };
    // Shutdown: stop polling, drain, commit what is done, leave.
    // A listener blocked on a revocation is released first (the final
    // commit below covers those partitions), so the poll loop can end.
    shared.stopping.store(true, AtomicOrdering::Release);
    revokes.close();
    while let Some(r) = revokes.recv().await {
        let _ = r.done.send(());
    }
    let _ = poller.await;
    if !shared.drain(None).await {
        warn!("drain timed out on shutdown; committing what is done");
    }
    let last = shared.commit(None, true).await;
    if let Some(lane) = lane {
        let _ = lane.await;
    }
    let closed = shared.consumer.close().await;
    if shared.config.is_exactly_once() && result.is_err() {
        let _ = shared.producer.abort_transaction().await;
    }
    let _ = shared.producer.close(Duration::from_secs(10)).await;
    result?;
    last?;
    closed?;
    Ok(())
}

/// Hands revocations to the dispatcher and waits for its commit.
struct Listener(Weak<Shared>);

impl RebalanceListener for Listener {
    fn on_revoked<'a>(
        &'a self,
        _: &'a Consumer,
        partitions: &'a [TopicPartition],
    ) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            let Some(shared) = self.0.upgrade() else {
                return;
            };
            let (done, wait) = oneshot::channel();
            let revoke = Revoke {
                partitions: partitions.to_vec(),
                done,
            };
            if shared.revokes.send(revoke).is_ok() {
                drop(shared);
                let _ = wait.await;
            }
        })
    }

    fn on_lost<'a>(
        &'a self,
        _: &'a Consumer,
        partitions: &'a [TopicPartition],
    ) -> BoxFuture<'a, ()> {
        if let Some(shared) = self.0.upgrade() {
            let mut core = shared.lock();
            for tp in partitions {
                core.tasks.remove(tp);
            }
        }
        Box::pin(std::future::ready(()))
    }
}
