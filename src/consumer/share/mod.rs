//! The share consumer: Kafka's queues (KIP-932,
//! <https://cwiki.apache.org/confluence/display/KAFKA/KIP-932%3A+Queues+for+Kafka>).
//!
//! Members of a share group may read the same partitions; the broker hands
//! each record to one member at a time under an acquisition lock
//! (`group.share.record.lock.duration.ms`, 30 s by default) and counts its
//! deliveries. A member acknowledges each record: accept (done), release
//! (deliver again, to anyone) or reject (never again). A record whose lock
//! lapses is released; after `group.share.delivery.count.limit` deliveries
//! it is archived.
//!
//! Built in the pure style: state machines with no I/O and thin tasks
//! around them.
//! - `member`: [`ShareGroupHeartbeat`](https://kafka.apache.org/protocol#The_Messages_ShareGroupHeartbeat)
//!   membership as a state machine; `heartbeat` is its task.
//! - `session`: the share session epochs per broker.
//! - `acquired`: acquired offsets, delivery counts and acknowledgements.
//! - `fetch`: one round of ShareFetch / ShareAcknowledge requests.
//! - `config`: the Java client's settings.

mod acquired;
mod config;
mod fetch;
mod heartbeat;
mod member;
mod metrics;
mod session;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tracing::warn;

pub use config::{AcknowledgementMode, ShareConsumerConfig, ShareConsumerConfigBuilder};
pub use metrics::{AcknowledgementCounts, ShareConsumerMetrics};

use crate::cluster::Cluster;
use crate::consumer::ConsumerRecord;
use crate::error::{Error, Origin, Result};
use crate::TopicPartition;
use acquired::Acquired;
use fetch::{round, AckResults, FetchState, RoundKind, RoundOutcome};
use session::SessionPartition;

/// How the application settles one delivered record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum AcknowledgeType {
    /// Processed: never delivered again.
    Accept,
    /// Not processed: deliver it again (to any member), with a higher
    /// delivery count.
    Release,
    /// Unprocessable: never delivered again.
    Reject,
}

impl AcknowledgeType {
    /// The wire value (1, 2, 3).
    pub fn wire(self) -> i8 {
        match self {
            AcknowledgeType::Accept => 1,
            AcknowledgeType::Release => 2,
            AcknowledgeType::Reject => 3,
        }
    }
}

/// One record a share consumer delivered, with how many times the broker
/// has delivered it (1 the first time).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShareRecord {
    /// The record.
    pub record: ConsumerRecord,
    /// Deliveries so far, this one included.
    pub delivery_count: i16,
}

impl std::ops::Deref for ShareRecord {
    type Target = ConsumerRecord;

    fn deref(&self) -> &ConsumerRecord {
        &self.record
    }
}

/// Acknowledgement results per partition: `Ok` when the broker applied
/// every acknowledgement sent for it.
pub type AcknowledgementResults = BTreeMap<TopicPartition, Result<()>>;

type Callback = Arc<dyn Fn(&AcknowledgementResults) + Send + Sync>;

/// What the handle, the heartbeat task and the fetch rounds share.
pub(crate) struct ShareShared {
    cluster: Cluster,
    config: ShareConsumerConfig,
    member_id: String,
    subscription: watch::Sender<Vec<String>>,
    /// The broker's assignment (published by the heartbeat task).
    assignment_tx: watch::Sender<BTreeSet<SessionPartition>>,
    /// A membership failure retrying cannot fix; `poll` reports it.
    fatal: Mutex<Option<Error>>,
    close: watch::Sender<bool>,
    heartbeat: Mutex<Option<JoinHandle<()>>>,
    /// Sessions and buffered records; held for a whole round so epochs
    /// are assigned in queueing order.
    fetch: tokio::sync::Mutex<FetchState>,
    /// Never held across an await.
    acquired: Mutex<Acquired>,
    callback: Mutex<Option<Callback>>,
    counters: metrics::ShareCounters,
}

impl ShareShared {
    fn acquired(&self) -> MutexGuard<'_, Acquired> {
        self.acquired.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn fatal(&self) -> Option<Error> {
        self.fatal.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn closed(&self) -> bool {
        *self.close.borrow()
    }

    fn invalid(&self, reason: impl Into<String>) -> Error {
        Error::invalid_state(
            Origin::Consumer,
            format!("share group {}: {}", self.config.group_id, reason.into()),
        )
    }

    /// Hands acknowledgement results to the callback, or logs failures.
    fn report(&self, acks: AckResults) {
        if acks.is_empty() {
            return;
        }
        let results = collect(acks);
        let callback = self
            .callback
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        match callback {
            Some(f) => f(&results),
            None => {
                for (tp, r) in &results {
                    if let Err(e) = r {
                        warn!(partition = %tp, error = %e, "acknowledgement failed");
                    }
                }
            }
        }
    }

    /// Settles delivered records the mode settles by itself.
    fn settle_implicit(&self, on_close: bool) {
        match (self.config.acknowledgement_mode, on_close) {
            (AcknowledgementMode::Implicit, _) => {
                self.acquired().acknowledge_rest(AcknowledgeType::Accept)
            }
            (AcknowledgementMode::Explicit, true) => {
                self.acquired().acknowledge_rest(AcknowledgeType::Release)
            }
            (AcknowledgementMode::Explicit, false) => {}
        }
    }
}

/// One result per partition; a failure wins over a success.
fn collect(acks: AckResults) -> AcknowledgementResults {
    let mut out = AcknowledgementResults::new();
    for (tp, r) in acks {
        match out.get(&tp) {
            Some(Err(_)) => {}
            _ => {
                out.insert(tp, r);
            }
        }
    }
    out
}

/// Closes (without acknowledging) when the last handle goes.
struct CloseOnDrop(Arc<ShareShared>);

impl Drop for CloseOnDrop {
    fn drop(&mut self) {
        self.0.close.send_replace(true);
    }
}

/// A share-group consumer, as Java's `KafkaShareConsumer`.
///
/// A cheap-clone handle; the group membership runs in a background task
/// from [`subscribe`](Self::subscribe) until [`close`](Self::close) or the
/// last handle is dropped (dropping leaves the group without
/// acknowledging: the records it held come back when their locks lapse).
///
/// ```no_run
/// # async fn demo() -> purekafka::Result<()> {
/// use std::time::Duration;
/// use purekafka::consumer::share::{AcknowledgeType, AcknowledgementMode, ShareConsumer, ShareConsumerConfig};
///
/// let config = ShareConsumerConfig::builder()
///     .bootstrap_servers("127.0.0.1:9092")
///     .group_id("workers")
///     .acknowledgement_mode(AcknowledgementMode::Explicit)
///     .build()?;
/// let consumer = ShareConsumer::connect(config).await?;
/// consumer.subscribe(["jobs"])?;
/// for record in consumer.poll(Duration::from_secs(1)).await? {
///     let ok = record.value.is_some();
///     let ack = if ok { AcknowledgeType::Accept } else { AcknowledgeType::Reject };
///     consumer.acknowledge(&record, ack)?;
/// }
/// consumer.commit_sync().await?;
/// consumer.close().await?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct ShareConsumer {
    shared: Arc<ShareShared>,
    _close_on_drop: Arc<CloseOnDrop>,
}

impl std::fmt::Debug for ShareConsumer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShareConsumer")
            .field("group_id", &self.shared.config.group_id)
            .field("member_id", &self.shared.member_id)
            .finish_non_exhaustive()
    }
}

impl ShareConsumer {
    /// Connects to the cluster; nothing is subscribed yet.
    pub async fn connect(mut config: ShareConsumerConfig) -> Result<ShareConsumer> {
        config.client.client_id = metrics::client_id(&config);
        let cluster = Cluster::connect(config.client.clone()).await?;
        Ok(ShareConsumer::with_cluster(cluster, config))
    }

    /// A share consumer on an existing cluster handle (`config.client` is
    /// not used to connect).
    pub fn with_cluster(cluster: Cluster, mut config: ShareConsumerConfig) -> ShareConsumer {
        config.client.client_id = metrics::client_id(&config);
        let shared = Arc::new(ShareShared {
            cluster,
            config,
            member_id: heartbeat::new_member_id(),
            subscription: watch::channel(Vec::new()).0,
            assignment_tx: watch::channel(BTreeSet::new()).0,
            fatal: Mutex::new(None),
            close: watch::channel(false).0,
            heartbeat: Mutex::new(None),
            fetch: tokio::sync::Mutex::new(FetchState::default()),
            acquired: Mutex::new(Acquired::default()),
            callback: Mutex::new(None),
            counters: Default::default(),
        });
        ShareConsumer {
            _close_on_drop: Arc::new(CloseOnDrop(shared.clone())),
            shared,
        }
    }

    /// The counters kept since this consumer was created.
    pub fn metrics(&self) -> ShareConsumerMetrics {
        let s = &self.shared;
        s.counters.snapshot(s.cluster.connection_stats())
    }

    /// The `client.id` and a reader of the counters that does not keep
    /// the consumer alive (`None` once it is gone), for the metrics
    /// publisher (feature `metrics`).
    #[cfg(feature = "metrics")]
    pub(crate) fn metrics_reader(
        &self,
    ) -> (
        String,
        impl Fn() -> Option<ShareConsumerMetrics> + Send + Sync + 'static,
    ) {
        let (shared, close) = (
            Arc::downgrade(&self.shared),
            Arc::downgrade(&self._close_on_drop),
        );
        let client_id = self.shared.config.client.client_id.clone();
        (client_id, move || {
            close.upgrade()?;
            shared
                .upgrade()
                .map(|s| s.counters.snapshot(s.cluster.connection_stats()))
        })
    }

    /// The configuration.
    pub fn config(&self) -> &ShareConsumerConfig {
        &self.shared.config
    }

    /// This member's id (client-generated, as KIP-932 asks).
    pub fn member_id(&self) -> &str {
        &self.shared.member_id
    }

    /// The subscribed topics.
    pub fn subscription(&self) -> Vec<String> {
        self.shared.subscription.borrow().clone()
    }

    /// Subscribes to `topics`, replacing any earlier subscription, and
    /// joins the share group (at once on the first call, with the next
    /// heartbeat later).
    pub fn subscribe<I, S>(&self, topics: I) -> Result<()>
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let s = &self.shared;
        if s.closed() {
            return Err(s.invalid("subscribe after close"));
        }
        let mut topics: Vec<String> = topics.into_iter().map(Into::into).collect();
        topics.sort();
        topics.dedup();
        if topics.iter().any(String::is_empty) {
            return Err(s.invalid("subscribe: empty topic name"));
        }
        s.cluster.track_topics(topics.clone());
        s.cluster.request_refresh();
        s.subscription.send_replace(topics);
        let mut task = s.heartbeat.lock().unwrap_or_else(|p| p.into_inner());
        if task.is_none() {
            let span = tracing::debug_span!("share_member", group = %s.config.group_id);
            *task = Some(tokio::spawn(tracing::Instrument::instrument(
                heartbeat::run(s.clone(), s.subscription.subscribe(), s.close.subscribe()),
                span,
            )));
        }
        Ok(())
    }

    /// Sets the function that receives acknowledgement results of
    /// [`commit_async`](Self::commit_async) and of acknowledgements sent
    /// with `poll` and `close` (as Java's
    /// `AcknowledgementCommitCallback`). Without one, failures are logged.
    pub fn set_acknowledgement_commit_callback(
        &self,
        f: impl Fn(&AcknowledgementResults) + Send + Sync + 'static,
    ) {
        *self
            .shared
            .callback
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = Some(Arc::new(f));
    }

    /// Returns the next records (at most `max.poll.records`), waiting up to
    /// `timeout` for some.
    ///
    /// In implicit mode the records of the previous `poll` are accepted
    /// first; in explicit mode every one of them must have been
    /// acknowledged, else this fails with [`Error::InvalidState`].
    /// Acknowledgements ride on the ShareFetch requests. Fails with the
    /// membership's error if the group refused this member.
    pub async fn poll(&self, timeout: Duration) -> Result<Vec<ShareRecord>> {
        self.poll_inner(timeout, self.shared.config.max_poll_records, true)
            .await
    }

    /// As [`poll`](Self::poll), returning at most `max` records, and in
    /// explicit mode without waiting for the earlier records'
    /// acknowledgements: for the streams runtime, which acknowledges each
    /// record as it finishes while later ones are processed.
    pub(crate) async fn poll_pipelined(
        &self,
        timeout: Duration,
        max: usize,
    ) -> Result<Vec<ShareRecord>> {
        let max = max.clamp(1, self.shared.config.max_poll_records);
        self.poll_inner(timeout, max, false).await
    }

    async fn poll_inner(
        &self,
        timeout: Duration,
        max: usize,
        all_acknowledged: bool,
    ) -> Result<Vec<ShareRecord>> {
        let s = &self.shared;
        if s.closed() {
            return Err(s.invalid("poll after close"));
        }
        if let Some(e) = s.fatal() {
            return Err(e);
        }
        if s.subscription.borrow().is_empty() {
            return Err(s.invalid("poll before subscribe"));
        }
        let deadline = Instant::now() + timeout;
        let mut st = s.fetch.lock().await;
        s.settle_implicit(false);
        let unacked = s.acquired().unacknowledged();
        if all_acknowledged && unacked > 0 {
            return Err(s.invalid(format!(
                "poll with {unacked} delivered records not acknowledged (share.acknowledgement.mode=explicit: acknowledge every record first)"
            )));
        }
        let mut assignment = s.assignment_tx.subscribe();
        let mut close = s.close.subscribe();
        loop {
            if !st.buffered.is_empty() {
                let n = st.buffered.len().min(max);
                let out: Vec<ShareRecord> = st.buffered.drain(..n).collect();
                s.acquired().delivered(&out);
                s.counters.handed_out(&out);
                return Ok(out);
            }
            if let Some(e) = s.fatal() {
                return Err(e);
            }
            let remaining = deadline.saturating_duration_since(Instant::now());
            if assignment.borrow_and_update().is_empty() {
                if s.acquired().has_pending() {
                    let o = round(s, &mut st, RoundKind::Commit).await;
                    s.report(o.acks);
                }
                if remaining.is_zero() || s.closed() {
                    return Ok(Vec::new());
                }
                tokio::select! {
                    _ = assignment.changed() => {}
                    _ = close.changed() => {}
                    _ = tokio::time::sleep_until(deadline) => {}
                }
                continue;
            }
            let started = Instant::now();
            let RoundOutcome { acks, fatal, .. } =
                round(s, &mut st, RoundKind::Fetch(remaining)).await;
            s.report(acks);
            if let Some(e) = fatal.into_iter().next() {
                // Records fetched with the failure stay buffered.
                return Err(e);
            }
            if st.buffered.is_empty() {
                let now = Instant::now();
                if now >= deadline {
                    return Ok(Vec::new());
                }
                // A round that failed at once (no leader, no connection)
                // must not spin.
                if now - started < Duration::from_millis(10) {
                    let pause = s.cluster.config().retry_backoff.min(deadline - now);
                    tokio::time::sleep(pause).await;
                }
            }
        }
    }

    /// Acknowledges one delivered record (explicit mode). A later call for
    /// the same record, before the acknowledgement is sent, replaces this
    /// one. Sent with the next `poll`, `commit_sync`, `commit_async` or
    /// `close`.
    pub fn acknowledge(&self, record: &ShareRecord, ty: AcknowledgeType) -> Result<()> {
        self.acknowledge_offset(&record.partition, record.offset, ty)
    }

    /// [`acknowledge`](Self::acknowledge) by coordinates, for callers that
    /// gave the record away (the streams runtime hands it to the topology).
    pub(crate) fn acknowledge_offset(
        &self,
        partition: &TopicPartition,
        offset: i64,
        ty: AcknowledgeType,
    ) -> Result<()> {
        let s = &self.shared;
        if s.config.acknowledgement_mode == AcknowledgementMode::Implicit {
            return Err(s.invalid(
                "acknowledge needs share.acknowledgement.mode=explicit (implicit mode accepts every delivered record)",
            ));
        }
        if s.acquired().acknowledge(partition, offset, ty) {
            Ok(())
        } else {
            Err(s.invalid(format!(
                "{partition}@{offset} was not delivered by this consumer's last poll, or its acknowledgement was already sent"
            )))
        }
    }

    /// Sends the pending acknowledgements (in implicit mode, accepting
    /// every delivered record first) and waits for the brokers' answers,
    /// bounded by `default.api.timeout.ms`. Returns one result per
    /// partition.
    pub async fn commit_sync(&self) -> Result<AcknowledgementResults> {
        let s = &self.shared;
        if s.closed() {
            return Err(s.invalid("commit_sync after close"));
        }
        s.settle_implicit(false);
        let timeout = s.cluster.config().default_api_timeout;
        let run = async {
            let mut st = s.fetch.lock().await;
            round(s, &mut st, RoundKind::Commit).await
        };
        let o = tokio::time::timeout(timeout, run)
            .await
            .map_err(|_| Error::Timeout {
                broker: Origin::Cluster,
                api: format!("ShareAcknowledge for share group {}", s.config.group_id),
                after: timeout,
                config_key: "default.api.timeout.ms",
            })?;
        let results = collect(o.acks);
        match o.fatal.into_iter().next() {
            Some(e) if results.is_empty() => Err(e),
            _ => Ok(results),
        }
    }

    /// Like [`commit_sync`](Self::commit_sync) without waiting: the
    /// acknowledgements are settled now and sent by a task; their results
    /// go to the acknowledgement commit callback.
    pub fn commit_async(&self) {
        let s = self.shared.clone();
        if s.closed() {
            return;
        }
        s.settle_implicit(false);
        tokio::spawn(async move {
            let mut st = s.fetch.lock().await;
            let o = round(&s, &mut st, RoundKind::Commit).await;
            drop(st);
            s.report(o.acks);
            for e in o.fatal {
                warn!(group = %s.config.group_id, error = %e, "commit_async failed");
            }
        });
    }

    /// Closes the consumer: accepts (implicit mode) or releases (explicit
    /// mode) delivered records not yet acknowledged, sends every pending
    /// acknowledgement with the closing share session epoch (the brokers
    /// then release what else this member held), and leaves the group.
    /// Bounded by `default.api.timeout.ms`.
    pub async fn close(&self) -> Result<()> {
        let s = &self.shared;
        if s.closed() {
            return Ok(());
        }
        let timeout = s.cluster.config().default_api_timeout;
        let deadline = Instant::now() + timeout;
        s.settle_implicit(true);
        let run = async {
            let mut st = s.fetch.lock().await;
            st.buffered.clear();
            round(s, &mut st, RoundKind::Close).await
        };
        let outcome = tokio::time::timeout_at(deadline, run).await;
        s.close.send_replace(true);
        let task = s.heartbeat.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(task) = task {
            if tokio::time::timeout_at(deadline, task).await.is_err() {
                warn!(group = %s.config.group_id, "leaving the share group timed out");
            }
        }
        match outcome {
            Ok(o) => {
                s.report(o.acks);
                match o.fatal.into_iter().next() {
                    Some(e) => Err(e),
                    None => Ok(()),
                }
            }
            Err(_) => Err(Error::Timeout {
                broker: Origin::Cluster,
                api: format!(
                    "closing share sessions of share group {}",
                    s.config.group_id
                ),
                after: timeout,
                config_key: "default.api.timeout.ms",
            }),
        }
    }
}
