//! The consumer fetch path: manual assignment, positions and seeks, offset
//! lookups, pause/resume, and `poll` over per-broker fetch tasks.
//!
//! - [`Consumer`]: the application's handle (assign, seek, poll, ...).
//! - `fetcher`: one task per leader broker with an incremental fetch
//!   session (KIP-227) and leader-epoch fencing (KIP-320).
//! - `fetched`: decoding a partition's records, CRC checks and the
//!   read_committed filter for aborted transactions (KIP-98).
//! - `offsets`: ListOffsets (earliest, latest, by timestamp).
//! - `state`: positions, buffers and the memory bound.
//!
//! - `membership`: [`Consumer::subscribe`] and applying rebalances
//!   (KIP-429 cooperative, KIP-848 consumer protocol, KIP-345 static
//!   members) with a [`RebalanceListener`].
//! - `commit`: commits, committed offsets, auto-commit, group metadata
//!   (KIP-447).
//!
//! The group protocols themselves live in [`group`], which `membership`
//! drives. Share groups (KIP-932, queues) have their own consumer,
//! [`share::ShareConsumer`].
//!
//! Protocol reference: <https://kafka.apache.org/protocol#The_Messages_Fetch>.

mod client_telemetry;
mod commit;
mod config;
mod fetched;
mod fetcher;
pub mod group;
mod listener;
mod membership;
mod metrics;
mod offsets;
mod record;
pub(crate) mod room;
mod session;
pub mod share;
mod state;
mod stream;
#[cfg(feature = "otel")]
mod telemetry;

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::{watch, Notify};
use tracing::debug;

pub use config::{AutoOffsetReset, ConsumerConfig, ConsumerConfigBuilder, IsolationLevel};
pub use group::metrics::GroupStats;
pub use group::{
    AssignmentStrategy, ConsumerGroupMetadata, GroupProtocol, OffsetAndMetadata, Offsets,
};
pub use listener::{BoxFuture, RebalanceListener};
pub use metrics::ConsumerMetrics;
pub use record::{ConsumerRecord, OffsetAndTimestamp, Position};
pub use share::{AcknowledgeType, ShareConsumer, ShareConsumerConfig, ShareRecord};
pub use stream::RecordStream;

use crate::cluster::Cluster;
use crate::error::{Error, Result};
use crate::TopicPartition;
use state::State;

/// A Kafka consumer with manual assignment.
///
/// A cheap-clone handle: clones share one assignment, one set of positions
/// and one set of fetch tasks (so two clones polling at once split the
/// records between them). Fetch tasks stop when the last handle is dropped
/// or [`close`](Self::close) is called.
///
/// ```no_run
/// # async fn demo() -> purekafka::Result<()> {
/// use std::time::Duration;
/// use purekafka::consumer::{AutoOffsetReset, Consumer, ConsumerConfig};
/// use purekafka::TopicPartition;
///
/// let config = ConsumerConfig::builder()
///     .bootstrap_servers("127.0.0.1:9092")
///     .auto_offset_reset(AutoOffsetReset::Earliest)
///     .build()?;
/// let consumer = Consumer::connect(config).await?;
/// consumer.assign(vec![TopicPartition::new("orders", 0)]);
/// for record in consumer.poll(Duration::from_secs(1)).await? {
///     println!("{}@{}: {:?}", record.partition, record.offset, record.value);
/// }
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct Consumer {
    shared: Arc<Shared>,
    _close_on_drop: Arc<CloseOnDrop>,
}

/// State shared by the handles and the fetch tasks.
pub(crate) struct Shared {
    cluster: Cluster,
    config: ConsumerConfig,
    state: Mutex<State>,
    /// Woken when records, errors or metadata arrive (poll waits on it).
    data_ready: Notify,
    /// Set to true on close; fetch tasks watch it.
    shutdown: watch::Sender<bool>,
    /// Subscription, membership events, auto-commit clock.
    group: Mutex<membership::GroupSlot>,
    /// Held while applying membership events (one handle at a time).
    rebalance: tokio::sync::Mutex<()>,
    /// Woken when a membership event is queued.
    group_events: Notify,
    /// Records and bytes handed out, and KIP-714 telemetry.
    consumed: client_telemetry::Consumed,
    telemetry: Option<crate::cluster::telemetry::ClientTelemetry>,
    /// Rebalance, heartbeat and commit counters, handed to each member.
    group_metrics: Arc<group::metrics::GroupMetrics>,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Consumer").finish_non_exhaustive()
    }
}

/// Closes the consumer when the last handle goes (tasks hold `Shared`).
#[derive(Debug)]
struct CloseOnDrop(Arc<Shared>);

impl Drop for CloseOnDrop {
    fn drop(&mut self) {
        self.0.close();
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Buffered bytes at which a partition stops being fetched.
    fn max_buffered(&self) -> usize {
        usize::try_from(self.config.max_partition_fetch_bytes).unwrap_or(usize::MAX)
    }

    fn close(&self) {
        self.shutdown.send_replace(true);
        self.data_ready.notify_waiters();
        // Dropping the member makes it leave (without commits: this is the
        // drop path, or `close` already left).
        let mut group = self.group();
        if let Some(t) = group.pattern_task.take() {
            t.abort();
        }
        group.member = None;
        group.pending.clear();
    }

    /// Starts a fetch task for every leader of an assigned partition and
    /// wakes the running ones; asks for a metadata refresh when a leader
    /// is unknown.
    fn ensure_fetchers(self: &Arc<Self>) {
        if *self.shutdown.borrow() {
            return;
        }
        let metadata = self.cluster.metadata();
        let mut state = self.lock();
        let mut leaders = Vec::new();
        let mut missing = Vec::new();
        for tp in state.partitions.keys() {
            match metadata.leader(&tp.topic, tp.partition) {
                Some(b) => leaders.push(b.id),
                None => missing.push(tp.topic.to_string()),
            }
        }
        leaders.sort_unstable();
        leaders.dedup();
        let state = &mut *state;
        for id in leaders {
            fetcher::ensure_task(self, &mut state.fetchers, id);
        }
        if !missing.is_empty() {
            self.cluster.track_topics(missing);
            self.cluster.request_refresh();
        }
    }
}

impl Consumer {
    /// Connects to the cluster and returns a consumer with nothing assigned.
    pub async fn connect(mut config: ConsumerConfig) -> Result<Consumer> {
        config.client.client_id = metrics::client_id(&config);
        let cluster = Cluster::connect(config.client.clone()).await?;
        Ok(Consumer::with_cluster(cluster, config))
    }

    /// A consumer sharing an existing cluster handle (its metadata cache
    /// and connections); `config.client` is not used to connect.
    pub fn with_cluster(cluster: Cluster, mut config: ConsumerConfig) -> Consumer {
        config.client.client_id = metrics::client_id(&config);
        let (shutdown, _) = watch::channel(false);
        let shared = Arc::new_cyclic(|weak| Shared {
            telemetry: client_telemetry::start(weak.clone(), &cluster, &config),
            consumed: client_telemetry::Consumed::default(),
            group_metrics: Arc::default(),
            cluster,
            config,
            state: Mutex::new(State::default()),
            data_ready: Notify::new(),
            shutdown,
            group: Mutex::new(membership::GroupSlot::default()),
            rebalance: tokio::sync::Mutex::new(()),
            group_events: Notify::new(),
        });
        Consumer {
            _close_on_drop: Arc::new(CloseOnDrop(shared.clone())),
            shared,
        }
    }

    /// The configuration.
    pub fn config(&self) -> &ConsumerConfig {
        &self.shared.config
    }

    /// A handle that does not keep the consumer alive, for the metrics
    /// publisher (feature `metrics`).
    #[cfg(feature = "metrics")]
    pub(crate) fn downgrade(&self) -> impl Fn() -> Option<Consumer> + Send + Sync + 'static {
        let (shared, close) = (
            Arc::downgrade(&self.shared),
            Arc::downgrade(&self._close_on_drop),
        );
        move || {
            Some(Consumer {
                shared: shared.upgrade()?,
                _close_on_drop: close.upgrade()?,
            })
        }
    }

    /// The cluster handle.
    pub fn cluster(&self) -> &Cluster {
        &self.shared.cluster
    }

    /// Replaces the assignment. Partitions kept keep their position and
    /// buffered records; new ones start from `auto.offset.reset` unless
    /// sought first; removed ones are dropped.
    pub fn assign(&self, partitions: Vec<TopicPartition>) {
        let topics: Vec<String> = partitions.iter().map(|tp| tp.topic.to_string()).collect();
        self.shared.cluster.track_topics(topics);
        self.shared
            .lock()
            .assign(partitions, self.shared.config.auto_offset_reset);
        self.shared.ensure_fetchers();
    }

    /// The assigned partitions.
    pub fn assignment(&self) -> Vec<TopicPartition> {
        self.shared.lock().partitions.keys().cloned().collect()
    }

    /// Sets the next offset `poll` returns for `tp`.
    pub fn seek(&self, tp: &TopicPartition, offset: i64) -> Result<()> {
        self.seek_position(
            tp,
            Position {
                offset,
                leader_epoch: None,
            },
        )
    }

    /// Like [`seek`](Self::seek) with the leader epoch of a committed
    /// offset (KIP-320), for the group layer.
    pub fn seek_position(&self, tp: &TopicPartition, position: Position) -> Result<()> {
        let mut state = self.shared.lock();
        state.get_mut(tp)?.seek(position);
        state.wake_fetchers();
        Ok(())
    }

    /// Moves `partitions` to their log start offset, evaluated lazily by
    /// the next `poll` or `position`, as in the Java client.
    pub fn seek_to_beginning(&self, partitions: &[TopicPartition]) -> Result<()> {
        self.request_reset(partitions, AutoOffsetReset::Earliest)
    }

    /// Moves `partitions` to their end offset (the last stable offset
    /// under read_committed), evaluated lazily.
    pub fn seek_to_end(&self, partitions: &[TopicPartition]) -> Result<()> {
        self.request_reset(partitions, AutoOffsetReset::Latest)
    }

    fn request_reset(&self, partitions: &[TopicPartition], reset: AutoOffsetReset) -> Result<()> {
        let mut state = self.shared.lock();
        for tp in partitions {
            state.get_mut(tp)?;
        }
        for tp in partitions {
            state.get_mut(tp)?.request_reset(reset);
        }
        Ok(())
    }

    /// The offset of the next record `poll` returns for `tp`, resolving a
    /// pending reset first.
    pub async fn position(&self, tp: &TopicPartition) -> Result<i64> {
        self.shared.lock().get_mut(tp)?;
        self.apply_resets().await?;
        let mut state = self.shared.lock();
        let p = state.get_mut(tp)?;
        if let Some(e) = p.error.take() {
            return Err(e);
        }
        p.position.map(|p| p.offset).ok_or_else(|| Error::NoOffset {
            partition: tp.clone(),
        })
    }

    /// Positions of every positioned partition (what the group layer
    /// commits).
    pub fn positions(&self) -> BTreeMap<TopicPartition, Position> {
        self.shared.lock().positions()
    }

    /// Stops fetching and returning records for `partitions`; buffered
    /// records are kept for after [`resume`](Self::resume).
    pub fn pause(&self, partitions: &[TopicPartition]) -> Result<()> {
        self.set_paused(partitions, true)
    }

    /// Resumes `partitions`.
    pub fn resume(&self, partitions: &[TopicPartition]) -> Result<()> {
        self.set_paused(partitions, false)
    }

    fn set_paused(&self, partitions: &[TopicPartition], paused: bool) -> Result<()> {
        let mut state = self.shared.lock();
        for tp in partitions {
            state.get_mut(tp)?;
        }
        for tp in partitions {
            state.get_mut(tp)?.paused = paused;
        }
        state.wake_fetchers();
        drop(state);
        if !paused {
            // Records fetched before the pause may be buffered already (no
            // fetch follows to announce them): wake a waiting `poll`.
            self.shared.data_ready.notify_waiters();
        }
        Ok(())
    }

    /// The paused partitions.
    pub fn paused(&self) -> Vec<TopicPartition> {
        let state = self.shared.lock();
        state
            .partitions
            .iter()
            .filter(|(_, p)| p.paused)
            .map(|(tp, _)| tp.clone())
            .collect()
    }

    /// Records between the position and the high watermark (or the last
    /// stable offset under read_committed), from the last fetch response;
    /// `None` before the first fetch of `tp`.
    pub fn lag(&self, tp: &TopicPartition) -> Option<i64> {
        let state = self.shared.lock();
        state
            .partitions
            .get(tp)?
            .lag(self.shared.config.isolation_level)
    }

    /// For each partition, the earliest offset whose timestamp is at least
    /// the given one (ms), or `None` when no such record exists.
    pub async fn offsets_for_times(
        &self,
        query: HashMap<TopicPartition, i64>,
    ) -> Result<HashMap<TopicPartition, Option<OffsetAndTimestamp>>> {
        if let Some((tp, ts)) = query.iter().find(|(_, ts)| **ts < 0) {
            return Err(Error::config(
                "offsets_for_times",
                format!("negative timestamp {ts} for {tp}"),
            ));
        }
        let found = offsets::list_offsets(
            &self.shared.cluster,
            self.shared.config.isolation_level,
            query.into_iter().collect(),
        )
        .await?;
        Ok(found.into_iter().collect())
    }

    /// The log start offset of each partition.
    pub async fn beginning_offsets(
        &self,
        partitions: &[TopicPartition],
    ) -> Result<HashMap<TopicPartition, i64>> {
        self.list(partitions, offsets::EARLIEST).await
    }

    /// The end offset of each partition: the high watermark, or the last
    /// stable offset under read_committed.
    pub async fn end_offsets(
        &self,
        partitions: &[TopicPartition],
    ) -> Result<HashMap<TopicPartition, i64>> {
        self.list(partitions, offsets::LATEST).await
    }

    async fn list(
        &self,
        partitions: &[TopicPartition],
        at: i64,
    ) -> Result<HashMap<TopicPartition, i64>> {
        let query = partitions.iter().map(|tp| (tp.clone(), at)).collect();
        let found = offsets::list_offsets(
            &self.shared.cluster,
            self.shared.config.isolation_level,
            query,
        )
        .await?;
        Ok(found
            .into_iter()
            .map(|(tp, o)| (tp, o.map_or(-1, |o| o.offset)))
            .collect())
    }

    /// Resolves pending resets: `none` becomes [`Error::NoOffset`] on the
    /// partition, the others a ListOffsets lookup.
    async fn apply_resets(&self) -> Result<()> {
        let mut query: BTreeMap<AutoOffsetReset, Vec<(TopicPartition, u64)>> = BTreeMap::new();
        {
            let mut state = self.shared.lock();
            for (tp, p) in state.partitions.iter_mut() {
                match p.reset {
                    Some(AutoOffsetReset::None) => {
                        p.reset = None;
                        if p.position.is_none() {
                            p.error = Some(Error::NoOffset {
                                partition: tp.clone(),
                            });
                        }
                    }
                    Some(r) => query.entry(r).or_default().push((tp.clone(), p.seq)),
                    None => {}
                }
            }
        }
        for (reset, tps) in query {
            let at = if reset == AutoOffsetReset::Earliest {
                offsets::EARLIEST
            } else {
                offsets::LATEST
            };
            let q = tps.iter().map(|(tp, _)| (tp.clone(), at)).collect();
            let found =
                offsets::list_offsets(&self.shared.cluster, self.shared.config.isolation_level, q)
                    .await?;
            let mut state = self.shared.lock();
            for (tp, seq) in tps {
                let Some(p) = state.partitions.get_mut(&tp) else {
                    continue;
                };
                // A seek or another reset since the lookup wins.
                if p.seq != seq || p.reset != Some(reset) {
                    continue;
                }
                let offset = found.get(&tp).copied().flatten().map_or(0, |o| o.offset);
                debug!(partition = %tp, ?reset, offset, "offset reset");
                p.seek(Position {
                    offset,
                    leader_epoch: None,
                });
            }
            state.wake_fetchers();
        }
        Ok(())
    }

    /// Returns buffered records, waiting up to `timeout` for some. At most
    /// `max.poll.records`; positions advance past exactly the records
    /// returned. An empty vector means the timeout passed.
    ///
    /// With a subscription, `poll` also applies rebalances (running the
    /// [`RebalanceListener`]), keeps the member's `max.poll.interval.ms`
    /// timer alive and auto-commits. Group errors (a fatal membership
    /// error, committed offsets that cannot be read) are returned too.
    ///
    /// Errors name the partition: [`Error::OffsetOutOfRange`] and
    /// [`Error::NoOffset`] with `auto.offset.reset=none`,
    /// [`Error::RecordDecode`], [`Error::UnknownPartition`] when an
    /// assigned topic no longer exists, and Kafka errors of a fetch.
    pub async fn poll(&self, timeout: Duration) -> Result<Vec<ConsumerRecord>> {
        let mut records = Vec::new();
        self.poll_up_to(timeout, self.shared.config.max_poll_records, &mut records)
            .await?;
        Ok(records)
    }

    /// [`poll`](Self::poll) appending the records to `records` instead of
    /// returning a new vector, so that a loop that empties it between polls
    /// allocates it once; returns how many were appended (0: the timeout
    /// passed). Records already in `records` are left as they are.
    pub async fn poll_into(
        &self,
        timeout: Duration,
        records: &mut Vec<ConsumerRecord>,
    ) -> Result<usize> {
        self.poll_up_to(timeout, self.shared.config.max_poll_records, records)
            .await
    }

    /// [`poll_into`](Self::poll_into) appending at most `max` records.
    async fn poll_up_to(
        &self,
        timeout: Duration,
        max: usize,
        out: &mut Vec<ConsumerRecord>,
    ) -> Result<usize> {
        let deadline = tokio::time::Instant::now() + timeout;
        // Counts against the task's scheduling budget first: a poll that
        // fails at once (a closed consumer, or a membership ended for good,
        // which fails every later poll as Java's rethrows) awaits nothing
        // that yields, so a caller's loop retrying it would otherwise hold
        // its worker thread, and the timers and tasks queued there, for
        // ever.
        tokio::task::consume_budget().await;
        self.notify_group_poll();
        loop {
            if *self.shared.shutdown.borrow() {
                return Err(Error::Closed);
            }
            let ready = self.shared.data_ready.notified();
            tokio::pin!(ready);
            ready.as_mut().enable();
            self.group_work().await?;
            self.check_topics_exist()?;
            // A failed offset lookup is retried on the next round.
            let reset = tokio::time::timeout_at(deadline, self.apply_resets()).await;
            if let Ok(Err(e)) = &reset {
                debug!(error = %e, "offset reset failed; will retry");
            }
            self.shared.ensure_fetchers();
            let start = out.len();
            let taken = {
                let mut state = self.shared.lock();
                let taken = state.drain_into(max, out)?;
                if taken > 0 {
                    state.wake_fetchers();
                }
                taken
            };
            if taken > 0 {
                let records = &out[start..];
                self.shared.consumed.handed_out(records);
                #[cfg(feature = "otel")]
                telemetry::handed_out(&self.shared.config, records);
                return Ok(taken);
            }
            let retry = self.shared.cluster.config().retry_backoff;
            let wait_until = if matches!(reset, Ok(Err(_))) {
                deadline.min(tokio::time::Instant::now() + retry)
            } else {
                deadline
            };
            tokio::select! {
                _ = ready => {
                    // A wake-up with nothing to hand out must not keep this
                    // loop from its deadline: woken again and again (seen
                    // under network faults), it never reached the timer
                    // branch and never yielded, so `poll` spun on a worker
                    // thread past its timeout.
                    if tokio::time::Instant::now() >= deadline {
                        return Ok(0);
                    }
                }
                _ = tokio::time::sleep_until(wait_until) => {
                    if wait_until >= deadline {
                        return Ok(0);
                    }
                }
            }
            // Yields once the task has used its scheduling budget, so a
            // loop woken without records lets other tasks and the timer run.
            tokio::task::consume_budget().await;
        }
    }

    /// Fails with [`Error::UnknownPartition`] when metadata says an
    /// assigned topic does not exist (deleted, or never created).
    fn check_topics_exist(&self) -> Result<()> {
        let metadata = self.shared.cluster.metadata();
        let state = self.shared.lock();
        for tp in state.partitions.keys() {
            if let Some(t) = metadata.topics.get(&*tp.topic) {
                let gone = t.error.is_some_and(|c| {
                    c == crate::KafkaCode::UNKNOWN_TOPIC_OR_PARTITION
                        || c == crate::KafkaCode::UNKNOWN_TOPIC_ID
                });
                if gone {
                    return Err(Error::UnknownPartition {
                        topic: tp.topic.to_string(),
                        partition: tp.partition,
                    });
                }
            }
        }
        Ok(())
    }

    /// The records as a [`Stream`](futures_core::Stream), one at a time:
    /// each item is taken as by a `poll` of one record, so the position
    /// advances exactly past the records the stream has yielded. The
    /// stream yields an error (and goes on) where `poll` would fail, and
    /// ends after [`Error::Closed`].
    pub fn stream(&self) -> stream::RecordStream {
        stream::RecordStream::new(self.clone())
    }

    /// Leaves the group if subscribed (revoked partitions go through the
    /// listener and, with `enable.auto.commit`, a final commit; static
    /// members send no LeaveGroup, KIP-345), commits positions under
    /// auto-commit when manually assigned with a `group.id`, then stops the
    /// fetch tasks; later calls to `poll` fail with [`Error::Closed`].
    /// Leaving is bounded by `default.api.timeout.ms`; the KIP-714
    /// terminating telemetry push, if due, by `request.timeout.ms`.
    ///
    /// Dropping the last handle stops fetching and leaves without
    /// committing.
    pub async fn close(&self) -> Result<()> {
        let r = if *self.shared.shutdown.borrow() {
            Ok(())
        } else {
            self.leave_group().await
        };
        if let Some(t) = &self.shared.telemetry {
            t.close(self.shared.config.client.request_timeout).await;
        }
        self.shared.close();
        r
    }

    /// The id the broker gave this client for KIP-714 telemetry (Java's
    /// `clientInstanceId`), waiting up to `timeout` for it; `None` with
    /// `enable.metrics.push=false` or when no broker answered.
    pub async fn client_instance_id(&self, timeout: Duration) -> Option<uuid::Uuid> {
        match &self.shared.telemetry {
            Some(t) => t.client_instance_id(timeout).await,
            None => None,
        }
    }
}
