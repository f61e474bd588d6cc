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

//!
//! - `task`: tasks, buffering, starting records (the dispatcher), the
//!   shared state;
//! - `worker`: the workers, acknowledgements;
//! - `process`: one record through the topology, the retry policies;
//! - `slots`: the slabs of tasks and of records awaiting acknowledgements;
//! - `lane`: the parallel retry lane's worker;
//! - `clients`: the consumer and producer configs of an application.
//! - `commit`: commits, transactions, drains, revocations.
//! - `purge`: deleting consumed records of the repartition topics
//!   (`repartition.purge.interval.ms`).
//! - `share_group`: the runtime reading through a share group instead
//!   (`source.group=share`, KIP-932).

mod clients;
mod commit;
mod lane;
#[cfg(feature = "otel")]
mod otel;
mod process;
mod purge;
mod share_group;
mod slots;
mod state;
mod streams_group;
mod task;
mod worker;

use std::sync::atomic::{AtomicBool, Ordering as AtomicOrdering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use tokio::sync::{mpsc, oneshot, Notify};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tracing::warn;

pub(crate) use process::attempt_once;
pub(crate) use task::Shared;

use super::config::{FailurePolicy, StreamsConfig};
use super::error::StreamsError;
use super::metrics::{check_dead_letters, Counters, StreamsMetrics};
use super::repartition;
use super::topology::{Late, Process, Topology, TopologyBuilder};
use crate::cluster::Cluster;
use crate::consumer::{Consumer, RebalanceListener};
use crate::error::{Error, Origin};
use crate::producer::Producer;
use crate::TopicPartition;

impl Topology {
    /// The runtime for this topology (connects on [`Streams::start`]).
    pub fn build(self) -> Streams {
        Streams::new(self.config, self.source, self.processor, self.cluster)
    }
}

/// A topology ready to run; see [`Streams::topology`].
pub struct Streams {
    config: StreamsConfig,
    source: String,
    processor: Process,
    cluster: Late,
}

impl Streams {
    /// Starts a topology for `config`:
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), purekafka::streams::StreamsError> {
    /// use purekafka::producer::serializer::StringSerializer;
    /// use purekafka::streams::{OrderingMode, StreamsConfig, Streams, StringDeserializer};
    ///
    /// let config = StreamsConfig::builder("enricher", "127.0.0.1:9092")
    ///     .ordering(OrderingMode::Key)
    ///     .max_in_flight(512, 1024)
    ///     .build()?;
    /// let running = Streams::topology(config)
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
    pub fn topology(config: StreamsConfig) -> TopologyBuilder {
        TopologyBuilder::new(config)
    }

    /// The old name of [`Streams::topology`], easy to confuse with
    /// [`StreamsConfig::builder`]; kept one release (see CHANGELOG.md).
    #[deprecated(note = "renamed Streams::topology")]
    pub fn builder(config: StreamsConfig) -> TopologyBuilder {
        TopologyBuilder::new(config)
    }

    pub(crate) fn new(
        config: StreamsConfig,
        source: String,
        processor: Process,
        cluster: Late,
    ) -> Streams {
        Streams {
            config,
            source,
            processor,
            cluster,
        }
    }

    /// Connects, joins the group `application.id` and starts processing
    /// (and the retry lane's worker when configured).
    pub async fn start(self) -> std::result::Result<RunningStreams, StreamsError> {
        let c = &self.config;
        if c.source_group == super::SourceGroup::Share {
            return share_group::start(self).await;
        }
        state::check(c)?;
        repartition::check(c)?;
        let consumer_config = clients::consumer_config(c)?;
        let restore_config = consumer_config.clone();
        let producer_config = clients::producer_config(c)?;
        let pipelined = clients::keeps_order(&producer_config);
        // One cluster (metadata cache, connections) for the consumer, the
        // producer and the retry lane, unless the producer's own properties
        // change connection settings.
        let cluster = Cluster::connect(consumer_config.client.clone()).await?;
        streams_group::check_broker(&cluster, c).await?;
        streams_group::set_standby_replicas(&cluster, c).await?;
        let consumer = Consumer::with_cluster(cluster.clone(), consumer_config);
        let producer = if clients::producer_shares_cluster(c) {
            Producer::with_cluster(cluster.clone(), producer_config).await?
        } else {
            Producer::connect(producer_config).await?
        };
        let parts = c.repartitions.parts();
        let counts = repartition::prepare(&parts, &cluster).await?;
        let purged: std::collections::BTreeSet<String> =
            parts.iter().map(|p| p.repartition.clone()).collect();
        let admin =
            (!purged.is_empty()).then(|| crate::admin::Admin::with_cluster(cluster.clone()));
        state::prepare(c, &self.source, &cluster, &producer, restore_config).await?;
        let _ = self.cluster.set(cluster);
        if c.is_exactly_once() {
            producer.init_transactions().await?;
        }
        let (revokes_tx, revokes) = mpsc::unbounded_channel();
        let shared = Arc::new_cyclic(|weak| Shared {
            config: self.config.clone(),
            processor: repartition::compose(parts.clone(), &self.source, self.processor),
            consumer: consumer.clone(),
            producer,
            core: Mutex::new(task::Core::default()),
            wake: Notify::new(),
            progress: Notify::new(),
            stopping: AtomicBool::new(false),
            counters: Arc::new(Counters::default()),
            revokes: revokes_tx,
            acks: Arc::new(worker::Acks(weak.clone())),
            pipelined,
        });
        consumer.set_rebalance_listener(Listener(Arc::downgrade(&shared)));
        streams_group::subscribe(&consumer, &shared.config, &parts, &counts, &self.source)?;
        let lane = match &shared.config.failure_policy {
            FailurePolicy::RetryLane(lane) => {
                Some(tokio::spawn(lane::run_lane(shared.clone(), lane.clone())))
            }
            _ => None,
        };
        let purge = admin.map(|admin| {
            let interval = shared.config.repartition_purge_interval;
            tokio::spawn(purge::run(shared.clone(), admin, purged, interval))
        });
        let poller = tokio::spawn(poll_loop(shared.clone()));
        let driver = tokio::spawn(dispatch_loop(shared.clone(), revokes, poller, lane, purge));
        Ok(RunningStreams {
            shared: share_group::Engine::group(shared),
            driver,
        })
    }
}

/// The clients a running application owns (the retry lane's and state
/// restoration's consumers are not among them).
#[cfg(feature = "metrics")]
pub(crate) struct EmbeddedClients {
    /// The group consumer (`source.group=consumer` or `streams`).
    pub(crate) consumer: Option<Consumer>,
    /// The share consumer (`source.group=share`).
    pub(crate) share_consumer: Option<crate::consumer::ShareConsumer>,
    /// The producer.
    pub(crate) producer: Producer,
}

/// A running application.
pub struct RunningStreams {
    shared: share_group::Engine,
    driver: JoinHandle<std::result::Result<(), StreamsError>>,
}

impl RunningStreams {
    /// The counters now.
    pub fn metrics(&self) -> StreamsMetrics {
        self.shared.metrics()
    }

    /// The `application.id` and a reader of the counters that does not
    /// keep the application alive (`None` once it is gone), for the
    /// metrics publisher (feature `metrics`).
    #[cfg(feature = "metrics")]
    pub(crate) fn metrics_reader(
        &self,
    ) -> (
        String,
        impl Fn() -> Option<StreamsMetrics> + Send + Sync + 'static,
    ) {
        let application_id = self.shared.config.application_id.clone();
        (application_id, self.shared.reader())
    }

    /// The clients the application runs on, for the metrics publisher
    /// (feature `metrics`), which keeps only weak readers of them.
    #[cfg(feature = "metrics")]
    pub(crate) fn clients(&self) -> EmbeddedClients {
        self.shared.clients()
    }

    /// Whether the application stopped (after an error, or a shutdown).
    pub fn is_finished(&self) -> bool {
        self.driver.is_finished()
    }

    /// Stops dispatching, drains in-flight records (up to the drain
    /// timeout), commits the watermarks synchronously, leaves the group and
    /// closes the clients; returns the error that stopped it, if any.
    pub async fn shutdown(self) -> std::result::Result<(), StreamsError> {
        self.shared.stop();
        self.wait().await
    }

    /// Runs until `stop` completes (a shutdown signal, say) and then shuts
    /// down as [`shutdown`](Self::shutdown) does: stop dispatching, drain
    /// in-flight records up to the drain timeout, commit the watermarks
    /// synchronously, leave the group. Returns early with the error if the
    /// application stops by itself first.
    ///
    /// ```no_run
    /// # async fn demo(running: purekafka::streams::RunningStreams) {
    /// // SIGINT (and, with tokio's `signal` feature on Unix, SIGTERM too).
    /// let stopped = running
    ///     .shutdown_on(async {
    ///         let _ = tokio::signal::ctrl_c().await;
    ///     })
    ///     .await;
    /// # }
    /// ```
    pub async fn shutdown_on(
        mut self,
        stop: impl std::future::Future<Output = ()>,
    ) -> std::result::Result<(), StreamsError> {
        let ended = tokio::select! {
            _ = stop => None,
            r = &mut self.driver => Some(r),
        };
        match ended {
            None => self.shutdown().await,
            Some(r) => joined(r),
        }
    }

    /// Waits until the application stops by itself (a fatal error).
    pub async fn wait(self) -> std::result::Result<(), StreamsError> {
        joined(self.driver.await)
    }
}

fn joined(
    r: std::result::Result<std::result::Result<(), StreamsError>, tokio::task::JoinError>,
) -> std::result::Result<(), StreamsError> {
    match r {
        Ok(r) => r,
        Err(e) => Err(StreamsError::Client(Error::invalid_state(
            crate::error::Origin::Streams,
            format!("the runtime task failed: {e}"),
        ))),
    }
}

/// A revocation handed from the listener to the dispatcher.
struct Revoke {
    partitions: Vec<TopicPartition>,
    done: oneshot::Sender<()>,
}

async fn poll_loop(shared: Arc<Shared>) {
    // One vector for every poll: `accept` empties it, keeping its room.
    let mut records = Vec::new();
    while !shared.stopping.load(AtomicOrdering::Acquire) {
        match shared
            .consumer
            .poll_into(Duration::from_millis(100), &mut records)
            .await
        {
            Ok(0) => {}
            Ok(_) => shared.accept(&mut records),
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
    purge: Option<JoinHandle<()>>,
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
            if let Err(e) = shared.commit_on_interval().await {
                break Err(e);
            }
            next_commit = Instant::now() + interval;
            timer.as_mut().reset(next_commit);
            if let Some(g) = guard {
                if let Err(e) = check_dead_letters(&shared.counters, &g, &mut samples) {
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
        // `Notified` spends no budget: under a stream of wake-ups this
        // loop yields now and then, so that tasks woken from this thread
        // are not held behind it.
        tokio::task::consume_budget().await;
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
    if let Some(purge) = purge {
        // Cancel-safe: a purge cut short deletes nothing or part of what
        // was committed; the next start purges the rest.
        purge.abort();
        let _ = purge.await;
    }
    if !shared.drain(None).await {
        warn!("drain timed out on shutdown; committing what is done");
    }
    // Exactly-once after a fatal error: the open transaction may hold the
    // outputs of records above the failed one (other keys, or records
    // finished after it), whose offsets cannot be committed. Committing it
    // would write those outputs again after a restart; abort it instead.
    let abort = shared.config.is_exactly_once() && result.is_err();
    let last = if abort {
        Ok(())
    } else {
        shared.commit(None, true).await
    };
    // Checkpoint the stores only when their writes' offsets committed.
    shared.config.stores.close_all(!abort && last.is_ok()).await;
    if let Some(lane) = lane {
        let _ = lane.await;
    }
    let closed = shared.consumer.close().await;
    if abort {
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

#[async_trait::async_trait]
impl RebalanceListener for Listener {
    async fn on_revoked(&self, _: &Consumer, partitions: &[TopicPartition]) {
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
    }

    async fn on_lost(&self, _: &Consumer, partitions: &[TopicPartition]) {
        if let Some(shared) = self.0.upgrade() {
            let stop = {
                let mut core = shared.lock();
                for tp in partitions {
                    core.tasks.remove(tp);
                }
                // Exactly-once: the open transaction holds outputs of
                // records from the lost partitions, which another member
                // now processes again from the committed offsets.
                // Committing it would write them twice (with the tasks
                // gone no offsets, and so no group generation, go with
                // it), so the runtime stops and its shutdown aborts it.
                // Kafka Streams aborts too (then rejoins with a new
                // producer). With nothing dispatched since the last commit
                // there is nothing to abort: the member rejoins.
                let stop = shared.config.is_exactly_once()
                    && core.dispatched_since_commit > 0
                    && core.fatal.is_none();
                if stop {
                    let lost: Vec<String> = partitions.iter().map(|tp| tp.to_string()).collect();
                    core.fatal = Some(
                        Error::invalid_state(
                            Origin::Streams,
                            format!(
                                "group {}: partitions {} were lost (this member was fenced, its \
                                 session expired or it left the group) while the open \
                                 transaction held their outputs: the transaction is aborted and \
                                 the runtime stops; a restart resumes from the committed offsets",
                                shared.config.application_id,
                                lost.join(", ")
                            ),
                        )
                        .into(),
                    );
                }
                stop
            };
            if stop {
                shared.wake.notify_one();
            }
            shared.config.stores.close(partitions, false).await;
        }
    }
}
