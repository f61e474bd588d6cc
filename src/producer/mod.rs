//! The producer: batching per partition, Java-compatible partitioning, the
//! idempotent producer on by default, and every codec.
//!
//! Paths, bottom up:
//!
//! - [`Producer::send`] picks the partition ([`partitioner`]), takes the
//!   record's bytes from the `buffer.memory` pool (waiting up to
//!   `max.block.ms` when it is full) and appends the record to its
//!   partition's open batch. The sink seals (compresses) a batch when it
//!   sends it: once it reaches `batch.size` or `linger.ms` passes, growing
//!   toward `batch.max.size` while the partition's requests are in flight
//!   (KIP-782); senders keep appending to a new batch while it compresses.
//! - One sink per broker ([`sink`](self)) drains ready batches into Produce
//!   requests, at most `max.in.flight.requests.per.connection` at once.
//! - Idempotence (KIP-98, on by default): InitProducerId at start;
//!   sequence numbers per partition assigned when a batch is first sent;
//!   retries resend from the first unacknowledged batch, so order holds;
//!   lost or unknown sequence state bumps the epoch (KIP-360), as the Java
//!   client does.
//! - `delivery.timeout.ms` bounds every record from `send` to its outcome.
//!
//! State is kept by state machines that take events and answer with what
//! to do, with no I/O: each partition's send and sequence state
//! (`accumulator::PartState`), each broker's sink (`sink::state`), the
//! idempotent producer id (`idempotence`) and the transaction manager,
//! which alone owns a transactional producer's id and epoch
//! (`transaction`). The sink tasks, the watcher and the API calls drive
//! them.
//!
//! Protocol: <https://kafka.apache.org/protocol#The_Messages_Produce>.

mod accumulator;
mod client_telemetry;
pub mod config;
mod idempotence;
mod metrics;
#[cfg(feature = "otel")]
mod otel;
pub mod partitioner;
mod record;
mod route;
pub mod serializer;
mod sink;
mod tagged;
mod transaction;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{oneshot, Notify};
use tokio::time::Instant;

use accumulator::{Accumulator, BatchSettings, Completion, BATCH_OVERHEAD, PENDING_STATE};
pub use config::{Acks, ProducerConfig, ProducerConfigBuilder};
use idempotence::{Idempotence, ProducerId};
pub use metrics::ProducerMetrics;
pub use partitioner::{Partitioner, Partitioning};
pub use record::{DeliveryFuture, DeliveryReceiver, IntoTopic, ProducerRecord, RecordMetadata};
use route::{Route, Router};
pub use serializer::Serializer;
pub(crate) use tagged::{Enqueued, Waiting};

use crate::clock::now_ms;
use crate::cluster::Cluster;
use crate::error::{Error, Result, TxnErrorKind};
use crate::group_metadata::{ConsumerGroupMetadata, OffsetAndMetadata};
use crate::TopicPartition;

/// A Kafka producer. Cheap to clone; clones share batches and connections.
///
/// Dropping the last clone without [`close`](Producer::close) still delivers
/// what was accepted (each record bounded by `delivery.timeout.ms`), in the
/// background.
///
/// ```no_run
/// # async fn demo() -> purekafka::Result<()> {
/// use purekafka::producer::{Producer, ProducerConfig, ProducerRecord};
///
/// let config = ProducerConfig::builder()
///     .bootstrap_servers("127.0.0.1:9092")
///     .build()?;
/// let producer = Producer::connect(config).await?;
/// let delivery = producer
///     .send(ProducerRecord::new("orders").key("id-1").value("{\"qty\":2}"))
///     .await?;
/// let meta = delivery.await?;
/// println!("written to {} at offset {}", meta.partition, meta.offset);
/// producer.close(std::time::Duration::from_secs(10)).await?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct Producer {
    handle: Arc<Handle>,
}

/// Ends the background tasks once the last `Producer` clone is gone.
struct Handle {
    shared: Arc<Shared>,
    /// KIP-714 telemetry (`enable.metrics.push`).
    telemetry: Option<crate::cluster::telemetry::ClientTelemetry>,
}

impl Drop for Handle {
    fn drop(&mut self) {
        self.shared.closing.store(true, Ordering::Release);
        self.shared.watcher.notify_one();
        sink::wake_all(&self.shared);
    }
}

/// State shared by the API, the sinks and the watcher.
pub(crate) struct Shared {
    cluster: Cluster,
    config: ProducerConfig,
    /// The route cache and the partitioner.
    router: Router,
    acc: Accumulator,
    /// The producer id of an idempotent producer that is not transactional
    /// (a transactional one's is the transaction manager's).
    idempotence: Option<Idempotence>,
    /// The transaction manager, with `transactional.id`.
    txn: Option<transaction::Transactions>,
    /// Wakes the task that adds partitions to the transaction (v1).
    txn_adder: Arc<Notify>,
    metrics: metrics::Counters,
    sinks: Mutex<HashMap<i32, Arc<Notify>>>,
    watcher: Notify,
    /// No new records; tasks end when nothing is outstanding.
    closing: AtomicBool,
}

/// What [`Producer::append_now`] did.
enum Appended {
    /// Appended; whether a sink should run now.
    Done(bool),
    /// The topic's route is not cached or buffer memory is short: the
    /// caller waits, with the record and its completion given back.
    MustWait(ProducerRecord, Completion),
}

impl Producer {
    /// Connects to the cluster, and with idempotence on obtains a producer
    /// id (InitProducerId).
    pub async fn connect(config: ProducerConfig) -> Result<Producer> {
        Self::with_partitioning(config, Partitioning::Default).await
    }

    /// A producer sharing an existing cluster handle (its metadata cache and
    /// connections) with a consumer or an admin client; `config.client` is
    /// not used to connect. With idempotence on, obtains a producer id.
    pub async fn with_cluster(cluster: Cluster, config: ProducerConfig) -> Result<Producer> {
        Self::start(cluster, config, Partitioning::Default).await
    }

    /// The former name of [`connect`](Self::connect), kept for one release.
    #[deprecated(note = "use Producer::connect; Producer::with_cluster shares a Cluster")]
    pub async fn new(config: ProducerConfig) -> Result<Producer> {
        Self::connect(config).await
    }

    /// Like [`connect`](Self::connect) with another partitioner.
    pub async fn with_partitioning(
        mut config: ProducerConfig,
        partitioning: Partitioning,
    ) -> Result<Producer> {
        config.client.client_id = client_id(&config);
        let cluster = Cluster::connect(config.client.clone()).await?;
        Self::start(cluster, config, partitioning).await
    }

    async fn start(
        cluster: Cluster,
        mut config: ProducerConfig,
        partitioning: Partitioning,
    ) -> Result<Producer> {
        config.client.client_id = client_id(&config);
        let txn = config.transactional_id.clone().map(|id| {
            transaction::Transactions::new(
                id,
                config.transaction_timeout,
                config.transaction_version_max,
            )
        });
        let idempotence = if txn.is_some() {
            // The transaction manager owns the id, from init_transactions.
            None
        } else if config.enable_idempotence {
            let id = idempotence::init_producer_id(&cluster, None).await?;
            tracing::debug!(
                producer_id = id.id,
                epoch = id.epoch,
                "idempotent producer ready"
            );
            Some(Idempotence::new(id))
        } else {
            None
        };
        let settings = BatchSettings {
            batch_size: config.batch_size,
            batch_cap: config.batch_cap(),
            linger: config.linger,
            delivery_timeout: config.delivery_timeout,
            compression: config.compression,
            level: config.compression_level,
            transactional: txn.is_some(),
            max_in_flight: config.max_in_flight,
            retries: config.retries,
            retry_backoff: config.client.retry_backoff,
            retry_backoff_max: config.client.retry_backoff_max,
        };
        let shared = Arc::new(Shared {
            acc: Accumulator::new(settings, config.buffer_memory),
            router: Router::new(partitioning, &config),
            cluster,
            config,
            idempotence,
            txn,
            txn_adder: Arc::new(Notify::new()),
            metrics: metrics::Counters::default(),
            sinks: Mutex::new(HashMap::new()),
            watcher: Notify::new(),
            closing: AtomicBool::new(false),
        });
        tokio::spawn(sink::run_watcher(shared.clone()));
        if shared.txn.is_some() {
            tokio::spawn(run_txn_adder(Arc::downgrade(&shared)));
        }
        let telemetry = client_telemetry::start(&shared);
        Ok(Producer {
            handle: Arc::new(Handle { shared, telemetry }),
        })
    }

    /// Queues `record` and returns a future of its acknowledgement.
    ///
    /// Awaiting `send` applies backpressure: it waits (up to `max.block.ms`)
    /// for buffer memory and for the topic's metadata. Awaiting the returned
    /// [`DeliveryFuture`] waits for the broker. Records sent one after the
    /// other from one task to one partition are written in that order.
    pub async fn send(&self, record: ProducerRecord) -> Result<DeliveryFuture> {
        let (tx, rx) = oneshot::channel();
        self.enqueue(record, Completion::Channel(tx)).await?;
        Ok(DeliveryFuture { rx })
    }

    /// Like [`send`](Self::send), but `callback` gets the outcome instead of
    /// a future (the Java client's `send(record, callback)`). It runs on the
    /// task that handled the broker's response, so it should be short.
    /// Awaiting this waits for buffer memory, as `send` does; when it
    /// returns an error the callback is not called.
    pub async fn send_with_callback(
        &self,
        record: ProducerRecord,
        callback: impl FnOnce(Result<RecordMetadata>) + Send + 'static,
    ) -> Result<()> {
        self.enqueue(record, Completion::Callback(Box::new(callback)))
            .await
    }

    async fn enqueue(&self, record: ProducerRecord, done: Completion) -> Result<()> {
        let wake = match self.try_enqueue(record, done)? {
            Enqueued::Appended { wake } => wake,
            // Waiting for metadata or buffer memory has its state boxed: a
            // send that waits for neither (nearly all) keeps a small future,
            // which callers with many sends in flight move and store.
            Enqueued::MustWait(Waiting(record, done)) => {
                Box::pin(self.append_waiting(record, done)).await?
            }
        };
        if wake {
            // A batch became ready: let the sink run now, even on a
            // single-threaded runtime where a tight send loop never yields.
            tokio::task::yield_now().await;
        }
        Ok(())
    }

    /// What [`enqueue`](Self::enqueue) does before it would wait.
    fn try_enqueue(&self, record: ProducerRecord, done: Completion) -> Result<Enqueued> {
        let shared = &self.handle.shared;
        #[cfg(feature = "otel")]
        let (record, done) = {
            let (record, span) = otel::start(record, &shared.config.client.client_id);
            (record, otel::until_delivered(span, done))
        };
        if let Some(txn) = &shared.txn {
            txn.check_send()?;
        }
        Ok(match self.append_now(record, done)? {
            Appended::Done(wake) => Enqueued::Appended { wake },
            Appended::MustWait(record, done) => Enqueued::MustWait(Waiting(record, done)),
        })
    }

    /// Appends `record` if its route is known and its memory free now.
    fn append_now(&self, record: ProducerRecord, done: Completion) -> Result<Appended> {
        let shared = &self.handle.shared;
        let Some(route) = shared.router.cached(&shared.cluster, &record.topic) else {
            return Ok(Appended::MustWait(record, done));
        };
        let mem = shared.check_size(&record)?;
        if !shared.acc.memory.try_acquire(mem) {
            return Ok(Appended::MustWait(record, done));
        }
        shared.append(route, record, mem, done).map(Appended::Done)
    }

    /// Appends `record`, waiting (up to `max.block.ms`) for its topic's
    /// metadata and for buffer memory. Returns whether a sink should run.
    async fn append_waiting(&self, record: ProducerRecord, done: Completion) -> Result<bool> {
        let shared = &self.handle.shared;
        // `max.block.ms` runs from the first wait: nothing before it awaits,
        // and most sends never wait, so they never read the clock.
        let mut deadline = None;
        let route = match shared.router.cached(&shared.cluster, &record.topic) {
            Some(route) => route,
            None => {
                let until =
                    *deadline.get_or_insert_with(|| Instant::now() + shared.config.max_block);
                let backoff = |attempt| shared.acc.settings.backoff(attempt);
                let max_block = shared.config.max_block;
                shared
                    .router
                    .fetch(&shared.cluster, &record.topic, until, max_block, backoff)
                    .await?
            }
        };
        let mem = shared.check_size(&record)?;
        if !shared.acc.memory.try_acquire(mem) {
            let until = *deadline.get_or_insert_with(|| Instant::now() + shared.config.max_block);
            if !shared
                .acc
                .memory
                .acquire(mem, until, || shared.wake_all_sinks())
                .await
            {
                return Err(Error::Timeout {
                    broker: crate::error::Origin::Producer,
                    api: format!("send to {} (waiting for buffer.memory)", record.topic),
                    after: shared.config.max_block,
                    config_key: "max.block.ms",
                });
            }
        }
        shared.append(route, record, mem, done)
    }

    /// Like [`send`](Self::send) but never waits: fails at once with a
    /// retriable error when the buffer is full or the topic's metadata is not
    /// known yet (a refresh is then started).
    pub fn try_send(&self, record: ProducerRecord) -> Result<DeliveryFuture> {
        let shared = &self.handle.shared;
        // The span's headers count in the record's size: added first.
        #[cfg(feature = "otel")]
        let (record, span) = otel::start(record, &shared.config.client.client_id);
        if let Some(txn) = &shared.txn {
            txn.check_send()?;
        }
        let Some(route) = shared.router.cached(&shared.cluster, &record.topic) else {
            shared.router.track(&shared.cluster, &record.topic);
            shared.cluster.request_refresh();
            return Err(Error::UnknownPartition {
                topic: record.topic.to_string(),
                partition: record.partition.unwrap_or(-1),
            });
        };
        let mem = shared.check_size(&record)?;
        if !shared.acc.memory.try_acquire(mem) {
            shared.wake_all_sinks();
            return Err(Error::Timeout {
                broker: crate::error::Origin::Producer,
                api: format!("try_send to {}: buffer.memory is full", record.topic),
                after: Duration::ZERO,
                config_key: "buffer.memory",
            });
        }
        let (tx, rx) = oneshot::channel();
        let done = Completion::Channel(tx);
        #[cfg(feature = "otel")]
        let done = otel::until_delivered(span, done);
        shared.append(route, record, mem, done)?;
        Ok(DeliveryFuture { rx })
    }

    /// Sends every buffered record now (ignoring `linger.ms`) and waits until
    /// every record sent before the call is acknowledged or failed (its
    /// delivery future or callback completed).
    ///
    /// Records sent during the flush (by another task) do not extend it, as
    /// with the Java client's `flush()`, which blocks on the batches
    /// incomplete when it is called: a flush returns even while other tasks
    /// keep sending. They are sent without lingering while it lasts, and a
    /// record appended to a batch the flush waits for is awaited with it.
    /// A record "sent" here is one whose `send` (or `try_send`, `send_tagged`)
    /// has returned; one still waiting for metadata or `buffer.memory` is
    /// not yet. [`commit_transaction`](Self::commit_transaction) flushes
    /// this way, so it covers every record sent in the transaction before
    /// it is called.
    pub async fn flush(&self) {
        let shared = &self.handle.shared;
        let flush = shared.acc.begin_flush();
        shared.wake_all_sinks();
        flush.wait().await;
    }

    /// Stops accepting records, then waits up to `timeout` for the buffered
    /// ones. Records still unsent at the deadline fail with
    /// [`Error::Closed`]; the call then returns a timeout error. The
    /// KIP-714 terminating telemetry push, if due, is sent within the same
    /// `timeout`.
    pub async fn close(&self, timeout: Duration) -> Result<()> {
        let shared = &self.handle.shared;
        shared.closing.store(true, Ordering::Release);
        shared.wake_all_sinks();
        let deadline = Instant::now() + timeout;
        let idle = tokio::time::timeout(timeout, shared.acc.wait_idle()).await;
        if let Some(t) = &self.handle.telemetry {
            t.close(deadline.saturating_duration_since(Instant::now()))
                .await;
        }
        if idle.is_ok() {
            return Ok(());
        }
        shared.acc.fail_unsent(&Error::Closed);
        Err(Error::Timeout {
            broker: crate::error::Origin::Producer,
            api: format!("close ({} records undelivered)", shared.acc.outstanding()),
            after: timeout,
            config_key: "close timeout",
        })
    }

    /// Registers `transactional.id` with its coordinator (InitProducerId):
    /// fences older producers with the same id and ends their open
    /// transaction. Call once before the first transaction, and again after
    /// an [`Indefinite`](TxnErrorKind::Indefinite) error.
    pub async fn init_transactions(&self) -> Result<()> {
        let shared = &self.handle.shared;
        let txn = shared.transactions()?;
        // Nothing of an earlier attempt may still be on its way.
        shared
            .acc
            .fail_unsent(&txn.error(TxnErrorKind::Abortable, Error::Closed));
        shared.acc.wait_idle().await;
        txn.init(&shared.cluster).await?;
        shared.wake_all_sinks();
        Ok(())
    }

    /// Opens a transaction; records sent until commit or abort belong to it.
    pub fn begin_transaction(&self) -> Result<()> {
        self.handle.shared.transactions()?.begin()
    }

    /// Adds consumed offsets to the open transaction (KIP-98, KIP-447):
    /// they are committed for `group` if and only if the transaction commits.
    pub async fn send_offsets_to_transaction(
        &self,
        offsets: &HashMap<TopicPartition, OffsetAndMetadata>,
        group: &ConsumerGroupMetadata,
    ) -> Result<()> {
        let shared = &self.handle.shared;
        let txn = shared.transactions()?;
        txn.send_offsets(&shared.cluster, offsets, group).await
    }

    /// [`send_offsets_to_transaction`](Self::send_offsets_to_transaction)
    /// for the member a consumer publishes: a commit refused because a
    /// heartbeat moved the member's epoch meanwhile (STALE_MEMBER_EPOCH) is
    /// sent again with the new epoch while the member still owns the
    /// partitions.
    pub(crate) async fn send_offsets_to_transaction_watched(
        &self,
        offsets: &HashMap<TopicPartition, OffsetAndMetadata>,
        membership: &tokio::sync::watch::Receiver<crate::group_metadata::PublishedMembership>,
    ) -> Result<()> {
        let shared = &self.handle.shared;
        let txn = shared.transactions()?;
        txn.send_offsets_watched(&shared.cluster, offsets, membership)
            .await
    }

    /// Sends every record of the transaction, then commits it (EndTxn). An
    /// error says whether to abort ([`TxnErrorKind::Abortable`]),
    /// re-initialise ([`TxnErrorKind::Indefinite`]) or close
    /// ([`TxnErrorKind::Fatal`]).
    pub async fn commit_transaction(&self) -> Result<()> {
        let shared = &self.handle.shared;
        let txn = shared.transactions()?;
        if let Some(e) = txn.commit_blocker() {
            return Err(e);
        }
        self.flush().await;
        if let Some(e) = txn.commit_blocker() {
            return Err(e);
        }
        if txn.end(&shared.cluster, true).await? {
            shared.wake_all_sinks();
        }
        Ok(())
    }

    /// Aborts the open transaction: unsent records fail, in-flight ones are
    /// awaited, then the coordinator writes abort markers (EndTxn).
    pub async fn abort_transaction(&self) -> Result<()> {
        let shared = &self.handle.shared;
        let txn = shared.transactions()?;
        txn.check_abort()?;
        let aborted = txn.error(
            TxnErrorKind::Abortable,
            Error::invalid_state(
                crate::error::Origin::Producer,
                "the transaction was aborted",
            ),
        );
        shared.acc.fail_unsent(&aborted);
        shared.acc.wait_idle().await;
        let bumped = txn.end(&shared.cluster, false).await?;
        if !bumped && !txn.is_v2() {
            // v1 keeps the epoch across transactions; records that failed
            // in this one may have left sequence gaps, so start a fresh
            // epoch (InitProducerId bumps it for the same transactional id).
            txn.init(&shared.cluster).await?;
        }
        if bumped || !txn.is_v2() {
            shared.wake_all_sinks();
        }
        Ok(())
    }

    /// Counters since creation, with those of the producer's connections.
    pub fn metrics(&self) -> ProducerMetrics {
        self.handle.shared.metrics_now()
    }

    /// The id the broker gave this client for KIP-714 telemetry (Java's
    /// `clientInstanceId`), waiting up to `timeout` for it; `None` with
    /// `enable.metrics.push=false` or when no broker answered.
    pub async fn client_instance_id(&self, timeout: Duration) -> Option<uuid::Uuid> {
        match &self.handle.telemetry {
            Some(t) => t.client_instance_id(timeout).await,
            None => None,
        }
    }

    /// The `client.id` and a reader of the counters that does not keep the
    /// producer alive (`None` once it is gone), for the metrics publisher
    /// (feature `metrics`).
    #[cfg(feature = "metrics")]
    pub(crate) fn metrics_reader(
        &self,
    ) -> (
        String,
        impl Fn() -> Option<ProducerMetrics> + Send + Sync + 'static,
    ) {
        let shared = Arc::downgrade(&self.handle.shared);
        let client_id = self.handle.shared.config.client.client_id.clone();
        (client_id, move || shared.upgrade().map(|s| s.metrics_now()))
    }

    /// The cluster view this producer routes by.
    pub fn cluster(&self) -> &Cluster {
        &self.handle.shared.cluster
    }

    /// The idempotent producer id and epoch, when idempotence is on.
    pub fn producer_id(&self) -> Option<(i64, i16)> {
        let ids = self.handle.shared.producer_ids()?;
        ids.current().map(|p| (p.id, p.epoch))
    }
}

/// `config`'s `client.id`, or the one Java generates for a producer.
fn client_id(config: &ProducerConfig) -> String {
    config
        .client
        .client_id_for(crate::config::ClientKind::Producer {
            transactional_id: config.transactional_id.as_deref(),
        })
}

impl Shared {
    /// The producer's counters and its connections'.
    fn metrics_now(&self) -> ProducerMetrics {
        let mut m = self.metrics.snapshot();
        m.connections = self.cluster.connection_stats();
        m
    }

    /// The transaction manager, or an error naming `transactional.id`.
    fn transactions(&self) -> Result<&transaction::Transactions> {
        self.txn.as_ref().ok_or_else(|| {
            Error::invalid_state(
                crate::error::Origin::Producer,
                "not transactional: set transactional.id to use transactions",
            )
        })
    }

    /// The owner of the producer id and epoch, when idempotence is on: the
    /// transaction manager, or the idempotent producer's own.
    fn producer_ids(&self) -> Option<&Idempotence> {
        match &self.txn {
            Some(txn) => Some(txn.producer()),
            None => self.idempotence.as_ref(),
        }
    }

    fn is_closing(&self) -> bool {
        self.closing.load(Ordering::Acquire)
    }

    fn wake_all_sinks(self: &Arc<Self>) {
        sink::wake_all(self);
    }

    /// Refuses records no request could carry; returns the bytes to take
    /// from `buffer.memory` for the record and its pending state.
    fn check_size(&self, record: &ProducerRecord) -> Result<usize> {
        let size = record.size_estimate();
        let too_large = |limit: usize, config_key| Error::RecordTooLarge {
            topic: record.topic.to_string(),
            size,
            limit,
            config_key,
        };
        if size + BATCH_OVERHEAD > self.config.max_request_size {
            return Err(too_large(self.config.max_request_size, "max.request.size"));
        }
        if size + PENDING_STATE > self.acc.memory.limit() {
            return Err(too_large(self.acc.memory.limit(), "buffer.memory"));
        }
        Ok(size + PENDING_STATE)
    }

    fn append(
        self: &Arc<Self>,
        route: Arc<Route>,
        record: ProducerRecord,
        mem: usize,
        done: Completion,
    ) -> Result<bool> {
        if self.is_closing() {
            self.acc.memory_release(mem);
            return Err(Error::Closed);
        }
        let partitions = route.leaders.len() as i32;
        let queued = |tp: &TopicPartition| self.acc.queued_bytes(tp);
        let size = record.size_estimate();
        let partition = match self.router.partition_for(&route, &record, size, queued) {
            Ok(p) => p,
            Err(e) => {
                self.acc.memory_release(mem);
                return Err(e);
            }
        };
        debug_assert!(partition < partitions);
        let Some(slot) = route.queues.get(partition as usize) else {
            self.acc.memory_release(mem);
            return Err(Error::UnknownPartition {
                topic: record.topic.to_string(),
                partition,
            });
        };
        let queue = slot.get_or_init(|| {
            let tp = TopicPartition {
                topic: route.name.clone(),
                partition,
            };
            let leader = route.leaders.get(partition as usize).copied().unwrap_or(-1);
            self.acc.queue(&tp, leader)
        });
        let timestamp = record.timestamp.unwrap_or_else(now_ms);
        match self.acc.append(queue, &record, timestamp, mem, done) {
            Ok(appended) => {
                if let Some(txn) = &self.txn {
                    if txn.note_partition(&queue.tp) {
                        self.txn_adder.notify_one();
                    }
                }
                if appended.seal {
                    sink::spawn_sealer(self, queue.clone());
                }
                let leader = queue.leader.load(Ordering::Acquire);
                let wake = appended.wake || self.acc.memory.waiters.load(Ordering::Acquire) > 0;
                if wake {
                    sink::wake(self, leader);
                }
                if leader < 0 {
                    self.watcher.notify_one();
                }
                Ok(wake)
            }
            Err(e) => {
                self.acc.memory_release(mem);
                Err(e)
            }
        }
    }

    /// Fails expired batches and, when one's outcome was unknown, bumps the
    /// epoch.
    fn fail_expired(
        self: &Arc<Self>,
        expired: Vec<(TopicPartition, accumulator::Batch)>,
        bump: bool,
    ) {
        for (tp, batch) in expired {
            let err = accumulator::expiry_error(
                &tp,
                self.config.delivery_timeout,
                batch.last_error.as_ref(),
            );
            tracing::warn!(partition = %tp, records = batch.count(), "batch expired");
            self.metrics
                .record_errors
                .fetch_add(batch.count() as u64, Ordering::Relaxed);
            self.acc.finish_batch(&tp, batch, Err(err));
        }
        if bump {
            self.bump_epoch();
        }
    }

    /// Starts an idempotent epoch bump (KIP-360) unless one is running.
    fn bump_epoch(self: &Arc<Self>) {
        let Some(idem) = self.producer_ids() else {
            return;
        };
        let Some(from) = idem.begin_bump() else {
            return;
        };
        self.metrics.epoch_bumps.fetch_add(1, Ordering::Relaxed);
        let shared = self.clone();
        tokio::spawn(async move {
            let next: Option<ProducerId> =
                match idempotence::init_producer_id(&shared.cluster, Some(from)).await {
                    Ok(id) => {
                        tracing::info!(
                            producer_id = id.id,
                            epoch = id.epoch,
                            "producer epoch bumped"
                        );
                        Some(id)
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "producer epoch bump failed");
                        None
                    }
                };
            if let Some(idem) = shared.producer_ids() {
                idem.end_bump(next);
            }
            shared.wake_all_sinks();
        });
    }
}

/// Transactions v1: adds partitions that received records to the open
/// transaction (AddPartitionsToTxn), batching whatever accumulated while the
/// previous request was out, then wakes the sinks. A failure fails the
/// transaction's unsent records.
async fn run_txn_adder(shared: std::sync::Weak<Shared>) {
    loop {
        let Some(strong) = shared.upgrade() else {
            return;
        };
        let notify = strong.txn_adder.clone();
        drop(strong);
        // Ends with the producer: wake up now and then to notice.
        if tokio::time::timeout(Duration::from_secs(1), notify.notified())
            .await
            .is_err()
        {
            continue;
        }
        let Some(shared) = shared.upgrade() else {
            return;
        };
        let Some(txn) = &shared.txn else {
            continue;
        };
        if txn.producer().current().is_none() {
            continue;
        }
        match txn.add_pending(&shared.cluster).await {
            Ok(()) => shared.wake_all_sinks(),
            Err(e) => {
                tracing::warn!(error = %e, "adding partitions to the transaction failed");
                shared.acc.fail_unsent(&e);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Size of the future `send` returns, for a `'static` producer.
    fn future_size<F>(_: impl FnOnce(&'static Producer, ProducerRecord) -> F) -> usize {
        std::mem::size_of::<F>()
    }

    /// The futures of `send`, `send_with_callback` and `send_tagged` stay
    /// small (648 bytes in a debug build when the rare waits were boxed;
    /// 2,768 before): callers keep one per record in flight, and the
    /// streams runtime stores and moves them.
    #[test]
    fn send_futures_stay_small() {
        let receiver: &'static Arc<dyn DeliveryReceiver> =
            Box::leak(Box::new(Arc::new(NoReceiver) as Arc<dyn DeliveryReceiver>));
        let sizes = [
            ("send", future_size(|p, r| p.send(r))),
            (
                "send_with_callback",
                future_size(|p, r| p.send_with_callback(r, |_| {})),
            ),
            (
                "send_tagged",
                future_size(|p, r| p.send_tagged(r, receiver, 0)),
            ),
        ];
        for (name, size) in sizes {
            eprintln!("{name} future: {size} bytes");
            assert!(size <= 1024, "the {name} future is {size} bytes");
        }
    }

    struct NoReceiver;

    impl DeliveryReceiver for NoReceiver {
        fn delivered(&self, _: &TopicPartition, _: &[u64], _: Result<(), &Error>) {}
    }
}
