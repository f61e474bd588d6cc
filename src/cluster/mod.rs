//! The cluster view every client shares: bootstrap, the metadata cache with
//! periodic and on-demand refresh, leader routing per partition, and
//! coordinator lookup (FindCoordinator, KIP-699 batched form).
//!
//! Refreshes are single-flight: concurrent callers that need fresh metadata
//! wait for one Metadata request instead of sending one each.
//!
//! The periodic refresh asks for the tracked topics: pinned ones, and a
//! producer's while it uses them (`metadata.max.idle.ms`, KIP-526; see
//! `tracked`).
//!
//! Metadata recovery (KIP-1102,
//! <https://cwiki.apache.org/confluence/display/KAFKA/KIP-1102%3A+Enable+clients+to+rebootstrap+based+on+timeout+or+error+code>):
//! with `metadata.recovery.strategy=rebootstrap` (the default) a refresh
//! falls back to `bootstrap.servers`, resolved again, once every known
//! broker failed, and goes there first when no metadata was obtained for
//! `metadata.recovery.rebootstrap.trigger.ms`; metadata obtained that way
//! replaces the learned brokers and coordinators, and, when it comes from
//! another cluster (another cluster id), the learned topics too. A broker
//! answering Metadata (v13+) with REBOOTSTRAP_REQUIRED sends the refresh
//! straight to the bootstrap servers. With `none`, only the brokers
//! metadata listed are asked once there are any, and REBOOTSTRAP_REQUIRED
//! fails the refresh.

mod metadata;
mod periodic;
pub mod telemetry;
mod tracked;

use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::{FindCoordinatorRequest, MetadataRequest, TopicName};
use kafka_protocol::protocol::{Request, StrBytes};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};
use tokio::sync::Notify;
use tracing::debug;

pub use metadata::{BrokerInfo, ClusterMetadata, PartitionInfo, TopicInfo};
pub(crate) use tracked::TopicUse;
use tracked::TrackedTopics;

use crate::config::{parse_host_port, ClientConfig, MetadataRecoveryStrategy};
use crate::error::{BrokerRef, Error, Origin, Result};
use crate::net::ConnectionPool;
/// The connection types [`Cluster::connection`] and [`Cluster::send`] take
/// and give, at a stable path (the `net` module is internal).
pub use crate::net::{
    BrokerAddr, Connection, ConnectionConfig, ConnectionStats, PendingResponse, Workload,
};
use crate::protocol::versions::Versions;

/// Metadata versions this client implements (v1: controller id; v13: the
/// top-level error code, through which a broker can answer
/// REBOOTSTRAP_REQUIRED, KIP-1102).
const METADATA_VERSIONS: Versions = Versions::new(1, 13);
/// REBOOTSTRAP_REQUIRED: the broker tells the client its view of the
/// cluster is stale and it must go back to `bootstrap.servers` (KIP-1102).
const REBOOTSTRAP_REQUIRED: i16 = 129;
/// FindCoordinator versions this client implements (v4+: batched keys).
const FIND_COORDINATOR_VERSIONS: Versions = Versions::new(0, 6);

/// Which coordinator to look up.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CoordinatorKind {
    /// A consumer group's coordinator (`key` = group id).
    Group,
    /// A transactional producer's coordinator (`key` = transactional id).
    Transaction,
}

impl CoordinatorKind {
    fn key_type(self) -> i8 {
        match self {
            CoordinatorKind::Group => 0,
            CoordinatorKind::Transaction => 1,
        }
    }
}

/// A shared, cheaply cloned handle to the cluster.
#[derive(Clone, Debug)]
pub struct Cluster {
    inner: Arc<Inner>,
}

struct Inner {
    config: ClientConfig,
    pool: ConnectionPool,
    bootstrap: Vec<BrokerAddr>,
    metadata: RwLock<Arc<ClusterMetadata>>,
    /// Topics kept fresh by periodic refresh (besides full refreshes):
    /// pinned, or while used (`metadata.max.idle.ms`).
    tracked: Mutex<TrackedTopics>,
    /// Serialises refreshes; holds the generation the last full (all
    /// topics) refresh applied, so a full request is answered by another
    /// caller's refresh only if that one was full too.
    refresh_lock: tokio::sync::Mutex<u64>,
    /// Where the next cluster-wide request starts in the broker list.
    rotation: std::sync::atomic::AtomicUsize,
    refresh_wanted: Arc<Notify>,
    /// Wakes the periodic refresh to recheck its wait: a refresh left a
    /// tracked topic unsettled, so it asks again after `retry.backoff.ms`
    /// instead of `metadata.max.age.ms`; or a topic began to be tracked
    /// while used, so an idle sweep may be due sooner.
    recheck: Arc<Notify>,
    coordinators: Mutex<HashMap<(CoordinatorKind, String), BrokerAddr>>,
    /// Since when metadata refreshes have been failing (`None` after a
    /// success): the clock of `metadata.recovery.rebootstrap.trigger.ms`,
    /// as Java's, which counts from the first unanswered attempt.
    failing_since: Mutex<Option<tokio::time::Instant>>,
}

impl std::fmt::Debug for Inner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cluster")
            .field("bootstrap", &self.bootstrap)
            .finish_non_exhaustive()
    }
}

impl Cluster {
    /// Connects to the cluster: fetches metadata from the first reachable
    /// bootstrap server, bounded by `default.api.timeout.ms`, and starts the
    /// periodic refresh (`metadata.max.age.ms`).
    pub async fn connect(config: ClientConfig) -> Result<Cluster> {
        let bootstrap = config
            .bootstrap_servers
            .iter()
            .map(|s| {
                parse_host_port(s)
                    .map(|(h, p)| BrokerAddr::bootstrap(h, p))
                    .map_err(|r| Error::config("bootstrap.servers", r))
            })
            .collect::<Result<Vec<_>>>()?;
        let conn_cfg = ConnectionConfig::from_client(&config);
        let pool = ConnectionPool::new(
            conn_cfg,
            config.reconnect_backoff,
            config.reconnect_backoff_max,
        );
        let inner = Arc::new(Inner {
            config,
            pool,
            bootstrap,
            metadata: RwLock::new(Arc::new(ClusterMetadata::default())),
            tracked: Mutex::new(TrackedTopics::default()),
            refresh_lock: tokio::sync::Mutex::new(0),
            rotation: std::sync::atomic::AtomicUsize::new(0),
            refresh_wanted: Arc::new(Notify::new()),
            recheck: Arc::new(Notify::new()),
            coordinators: Mutex::new(HashMap::new()),
            failing_since: Mutex::new(None),
        });
        let cluster = Cluster { inner };
        cluster.refresh_metadata(None).await?;
        tokio::spawn(periodic::refresh(
            Arc::downgrade(&cluster.inner),
            cluster.inner.refresh_wanted.clone(),
            cluster.inner.recheck.clone(),
        ));
        Ok(cluster)
    }

    /// The client configuration.
    pub fn config(&self) -> &ClientConfig {
        &self.inner.config
    }

    /// The current metadata snapshot.
    pub fn metadata(&self) -> Arc<ClusterMetadata> {
        self.inner
            .metadata
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Keeps `topics` in every periodic refresh, for as long as this
    /// cluster handle lives.
    pub fn track_topics<I: IntoIterator<Item = S>, S: Into<String>>(&self, topics: I) {
        let mut t = self.tracked();
        for topic in topics {
            t.pin(topic.into());
        }
    }

    /// Keeps `topic` in the periodic refreshes while it is used, and counts
    /// a use now; the returned mark records later uses
    /// ([`TopicUse::touch`]). Once no use was marked for `max_idle` (the
    /// producer's `metadata.max.idle.ms`, KIP-526), the periodic refresh
    /// stops asking for the topic and forgets its metadata, unless it is
    /// also tracked by [`track_topics`](Self::track_topics); a later use
    /// must call this again, and then waits for its metadata as a first
    /// use does.
    pub(crate) fn track_while_used(&self, topic: &str, max_idle: std::time::Duration) -> TopicUse {
        let (mark, new) = self
            .tracked()
            .lease(topic, max_idle, tokio::time::Instant::now());
        if new {
            // The periodic refresh may have no sweep planned this early.
            self.inner.recheck.notify_one();
        }
        mark
    }

    fn tracked(&self) -> std::sync::MutexGuard<'_, TrackedTopics> {
        self.inner.tracked.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Drops the topics tracked while used that were not used for their
    /// idle bound, and forgets their metadata: a new snapshot without them
    /// (its generation one higher), so routes cached by the old one are
    /// looked up again.
    async fn drop_idle_topics(&self) {
        // Under the refresh lock: no refresh applies an answer between
        // reading the snapshot and replacing it.
        let _guard = self.inner.refresh_lock.lock().await;
        let dropped = self.tracked().sweep(tokio::time::Instant::now());
        let current = self.metadata();
        if dropped.iter().any(|t| current.topics.contains_key(t)) {
            let mut next = ClusterMetadata::clone(&current);
            next.generation += 1;
            for topic in &dropped {
                next.topics.remove(topic);
            }
            *self
                .inner
                .metadata
                .write()
                .unwrap_or_else(|p| p.into_inner()) = Arc::new(next);
        }
        if !dropped.is_empty() {
            debug!(topics = ?dropped, "topics unused for metadata.max.idle.ms no longer tracked");
        }
    }

    /// Asks the background task for a refresh soon (e.g. after NOT_LEADER).
    pub fn request_refresh(&self) {
        self.inner.refresh_wanted.notify_one();
    }

    /// Refreshes metadata now: all topics with `None`, else just `topics`.
    /// Tries every known broker, then the bootstrap list, in turn; bounded by
    /// `default.api.timeout.ms`.
    pub async fn refresh_metadata(
        &self,
        topics: Option<&[String]>,
    ) -> Result<Arc<ClusterMetadata>> {
        let timeout = self.inner.config.default_api_timeout;
        // Brokers asked so far, so a timeout can name the silent ones.
        let asked = std::sync::Mutex::new(Vec::new());
        // The bound covers waiting for another caller's refresh too.
        let result =
            tokio::time::timeout(timeout, self.refresh_single_flight(topics, &asked)).await;
        result.map_err(|_| {
            let asked = asked.into_inner().unwrap_or_else(|p| p.into_inner());
            let (broker, api) = if asked.is_empty() {
                (
                    Origin::Cluster,
                    "Metadata (waiting for another caller's refresh)".to_owned(),
                )
            } else {
                (Origin::Brokers(asked), "Metadata (no answer)".to_owned())
            };
            Error::Timeout {
                broker,
                api,
                after: timeout,
                config_key: "default.api.timeout.ms",
            }
        })?
    }

    async fn refresh_single_flight(
        &self,
        topics: Option<&[String]>,
        asked: &std::sync::Mutex<Vec<BrokerRef>>,
    ) -> Result<Arc<ClusterMetadata>> {
        let before = self.metadata().generation;
        let mut last_full = self.inner.refresh_lock.lock().await;
        // Someone else refreshed while we waited: a full refresh answers a
        // full request (a partial one would hide topics created since, as a
        // pattern subscription needs them); a partial request is answered
        // if it saw our topics.
        let m = self.metadata();
        if m.generation != before {
            let covered = match topics {
                None => *last_full > before,
                Some(ts) => ts.iter().all(|t| m.topics.contains_key(t)),
            };
            if covered {
                return Ok(m);
            }
        }
        let m = self.refresh_inner(topics, asked).await?;
        if topics.is_none() {
            *last_full = m.generation;
        }
        Ok(m)
    }

    /// Brokers to try for cluster-wide requests: the known brokers, starting
    /// one further along on every call, then (strategy `rebootstrap`)
    /// bootstrap; bootstrap only before the first metadata, and bootstrap
    /// first once no metadata came for the rebootstrap trigger (KIP-1102).
    /// Rotating matters: a broker that just restarted may answer Metadata
    /// from a stale view, and always asking it first would keep the client
    /// on that view (the KIP-320 epoch guard keeps newer answers once any
    /// broker gives one).
    fn candidates(&self) -> Vec<BrokerAddr> {
        let mut known: Vec<BrokerAddr> = self
            .metadata()
            .brokers
            .values()
            .map(BrokerInfo::addr)
            .collect();
        let bootstrap = self.inner.bootstrap.iter().cloned();
        if known.is_empty() {
            return bootstrap.collect();
        }
        let start = self
            .inner
            .rotation
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let n = known.len();
        known.rotate_left(start % n);
        match self.inner.config.metadata_recovery_strategy {
            MetadataRecoveryStrategy::None => known,
            _ if self.metadata_stale() => bootstrap.chain(known).collect(),
            _ => known.into_iter().chain(bootstrap).collect(),
        }
    }

    /// Whether metadata refreshes have been failing for
    /// `metadata.recovery.rebootstrap.trigger.ms`.
    fn metadata_stale(&self) -> bool {
        self.inner
            .failing_since
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_some_and(|t| t.elapsed() >= self.inner.config.metadata_recovery_rebootstrap_trigger)
    }

    /// Tries the candidates in turn (twice), recording in `asked` each
    /// broker as it is asked.
    async fn refresh_inner(
        &self,
        topics: Option<&[String]>,
        asked: &std::sync::Mutex<Vec<BrokerRef>>,
    ) -> Result<Arc<ClusterMetadata>> {
        self.inner
            .failing_since
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get_or_insert_with(tokio::time::Instant::now);
        let mut candidates = self.candidates();
        let mut last = None;
        let mut backoff = self.inner.config.retry_backoff;
        let mut rebootstrapping = false;
        // Two passes over all candidates: the second catches brokers that
        // were restarting during the first.
        let mut pass = 0;
        'passes: while pass < 2 {
            if pass > 0 {
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(self.inner.config.retry_backoff_max);
            }
            pass += 1;
            for addr in &candidates {
                {
                    let name = BrokerRef::from(addr);
                    let mut asked = asked.lock().unwrap_or_else(|p| p.into_inner());
                    if !asked.contains(&name) {
                        asked.push(name);
                    }
                }
                match self.fetch_metadata(addr, topics).await {
                    Ok(m) => return Ok(m),
                    // Wrong credentials, trust or security settings: every
                    // broker will say the same, and retrying would only
                    // hammer them.
                    Err(e) if e.is_auth_failure() || matches!(e, Error::Config { .. }) => {
                        return Err(e)
                    }
                    Err(e) if e.kafka_code().map(|c| c.code()) == Some(REBOOTSTRAP_REQUIRED) => {
                        if self.inner.config.metadata_recovery_strategy
                            == MetadataRecoveryStrategy::None
                        {
                            return Err(Error::config(
                                "metadata.recovery.strategy",
                                format!(
                                    "{addr} answered Metadata with REBOOTSTRAP_REQUIRED \
                                     (KIP-1102), and the strategy `none` forbids going \
                                     back to bootstrap.servers"
                                ),
                            ));
                        }
                        last = Some(e);
                        // Once per refresh: a bootstrap server that says
                        // the same ends it like any other failure.
                        if !rebootstrapping {
                            rebootstrapping = true;
                            tracing::info!(
                                broker = %addr,
                                "broker answered REBOOTSTRAP_REQUIRED: asking bootstrap.servers (KIP-1102)"
                            );
                            candidates = self.inner.bootstrap.clone();
                            pass = 0;
                            continue 'passes;
                        }
                    }
                    Err(e) => {
                        debug!(broker = %addr, error = %e, "metadata request failed");
                        last = Some(e);
                    }
                }
            }
        }
        let tried = candidates
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(", ");
        Err(Error::NoBrokerAvailable {
            tried,
            last: Box::new(last.unwrap_or(Error::Closed)),
        })
    }

    async fn fetch_metadata(
        &self,
        addr: &BrokerAddr,
        topics: Option<&[String]>,
    ) -> Result<Arc<ClusterMetadata>> {
        let conn = self.inner.pool.get(addr, Workload::Admin).await?;
        let version = conn.version_for::<MetadataRequest>(METADATA_VERSIONS)?;
        let req_topics = topics.map(|ts| {
            ts.iter()
                .map(|t| {
                    MetadataRequestTopic::default()
                        .with_name(Some(TopicName(StrBytes::from_string(t.clone()))))
                })
                .collect()
        });
        let req = MetadataRequest::default()
            .with_topics(req_topics)
            .with_allow_auto_topic_creation(false);
        let resp = conn.send_at(&req, version).await?;
        let current = self.metadata();
        // An answer through a bootstrap address while brokers are known is
        // a rebootstrap (KIP-1102). Its broker list replaces the learned one
        // (as every full answer's does); coordinators are looked up again.
        // From another cluster (its id differs), nothing learned is kept;
        // from the same cluster, topics and their leader epochs (the
        // KIP-320 guard against lagging brokers) are (the generation rises
        // either way).
        let rebootstrap = addr.id.is_none() && !current.brokers.is_empty();
        let other_cluster =
            resp.cluster_id.as_ref().map(|c| c.as_str()) != current.cluster_id.as_deref();
        let base = if rebootstrap && other_cluster {
            Arc::new(ClusterMetadata {
                generation: current.generation,
                ..ClusterMetadata::default()
            })
        } else {
            current
        };
        let next = Arc::new(base.apply(&resp, topics.is_none())?);
        *self
            .inner
            .metadata
            .write()
            .unwrap_or_else(|p| p.into_inner()) = next.clone();
        *self
            .inner
            .failing_since
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = None;
        if rebootstrap {
            self.inner
                .coordinators
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .clear();
            tracing::info!(
                bootstrap = %addr,
                brokers = next.brokers.len(),
                other_cluster,
                "rebootstrapped: metadata from bootstrap.servers replaces every learned broker"
            );
            // A partial answer from another cluster: the periodic refresh
            // brings back the tracked topics.
            if other_cluster && topics.is_some() {
                self.request_refresh();
            }
        }
        debug!(
            generation = next.generation,
            brokers = next.brokers.len(),
            topics = next.topics.len(),
            "metadata refreshed"
        );
        if self.tracked_unsettled(&next).is_some() {
            self.inner.recheck.notify_one();
        }
        Ok(next)
    }

    /// The first tracked topic `m` has no usable metadata for
    /// ([`ClusterMetadata::first_unsettled`]).
    fn tracked_unsettled(&self, m: &ClusterMetadata) -> Option<String> {
        m.first_unsettled(self.tracked().names()).cloned()
    }

    /// The address of `broker_id`, from metadata.
    pub fn broker(&self, broker_id: i32) -> Result<BrokerAddr> {
        self.metadata()
            .brokers
            .get(&broker_id)
            .map(BrokerInfo::addr)
            .ok_or_else(|| Error::Disconnected {
                broker: BrokerRef::node(broker_id).into(),
                api: None,
                reason: "not in the current metadata".into(),
            })
    }

    /// The leader of a partition, refreshing that topic's metadata once when
    /// the cache does not know it.
    pub async fn leader(&self, topic: &str, partition: i32) -> Result<BrokerAddr> {
        if let Some(b) = self.metadata().leader(topic, partition) {
            return Ok(b.addr());
        }
        self.track_topics([topic]);
        let m = self.refresh_metadata(Some(&[topic.to_owned()])).await?;
        if let Some(t) = m.topics.get(topic) {
            if let Some(code) = t.error {
                return Err(Error::Kafka {
                    code,
                    context: format!("Metadata for topic {topic}"),
                });
            }
        }
        m.leader(topic, partition)
            .map(BrokerInfo::addr)
            .ok_or_else(|| Error::UnknownPartition {
                topic: topic.to_owned(),
                partition,
            })
    }

    /// The counters of this handle's connections (the Java client's
    /// connection metrics) since it connected: every connection its pool
    /// dialled, and the group coordinator connections of the consumers
    /// built on it. Clients sharing this handle share these counters.
    pub fn connection_stats(&self) -> ConnectionStats {
        self.inner.pool.metrics().snapshot()
    }

    /// The live connection counters, for connections dialled outside the
    /// pool on this client's behalf.
    pub(crate) fn connection_metrics(
        &self,
    ) -> std::sync::Arc<crate::net::metrics::ConnectionMetrics> {
        self.inner.pool.metrics().clone()
    }

    /// A connection to `addr` for `workload`.
    pub async fn connection(&self, addr: &BrokerAddr, workload: Workload) -> Result<Connection> {
        self.inner.pool.get(addr, workload).await
    }

    /// A connection to any live broker (metadata order, then bootstrap).
    pub async fn any_connection(&self, workload: Workload) -> Result<Connection> {
        let candidates = self.candidates();
        let mut last = None;
        for addr in &candidates {
            match self.inner.pool.get(addr, workload).await {
                Ok(c) => return Ok(c),
                Err(e) if e.is_auth_failure() || matches!(e, Error::Config { .. }) => {
                    return Err(e)
                }
                Err(e) => last = Some(e),
            }
        }
        Err(Error::NoBrokerAvailable {
            tried: candidates
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(", "),
            last: Box::new(last.unwrap_or(Error::Closed)),
        })
    }

    /// Sends `req` to `addr` at the highest common version within `client`.
    pub async fn send<R: Request>(
        &self,
        addr: &BrokerAddr,
        workload: Workload,
        req: &R,
        client: Versions,
    ) -> Result<R::Response> {
        let conn = self.connection(addr, workload).await?;
        conn.send(req, client).await
    }

    /// The coordinator for a group or transactional id, cached until
    /// [`invalidate_coordinator`](Self::invalidate_coordinator). Retries
    /// COORDINATOR_NOT_AVAILABLE and friends with backoff, bounded by
    /// `default.api.timeout.ms`.
    pub async fn coordinator(&self, kind: CoordinatorKind, key: &str) -> Result<BrokerAddr> {
        let cache_key = (kind, key.to_owned());
        if let Some(addr) = self
            .inner
            .coordinators
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&cache_key)
        {
            return Ok(addr.clone());
        }
        let timeout = self.inner.config.default_api_timeout;
        // The retry loop records each failure here, so the timeout can say
        // why the lookups kept failing (e.g. COORDINATOR_NOT_AVAILABLE).
        let mut last = None;
        let found =
            tokio::time::timeout(timeout, self.find_coordinator(kind, key, &mut last)).await;
        let addr = found.map_err(|_| {
            Error::retries_timed_out(
                Origin::Cluster,
                format_args!("FindCoordinator({kind:?} {key})"),
                timeout,
                "default.api.timeout.ms",
                last.as_ref(),
            )
        })??;
        self.inner
            .coordinators
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(cache_key, addr.clone());
        Ok(addr)
    }

    /// Forgets a cached coordinator (after NOT_COORDINATOR or a disconnect).
    pub fn invalidate_coordinator(&self, kind: CoordinatorKind, key: &str) {
        self.inner
            .coordinators
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&(kind, key.to_owned()));
    }

    /// Looks the coordinator up until it is found or a failure is not
    /// retriable; each retriable failure is left in `last`.
    async fn find_coordinator(
        &self,
        kind: CoordinatorKind,
        key: &str,
        last: &mut Option<Error>,
    ) -> Result<BrokerAddr> {
        let mut backoff = self.inner.config.retry_backoff;
        loop {
            match self.find_coordinator_once(kind, key).await {
                Ok(addr) => return Ok(addr),
                Err(e) if e.is_retriable() => {
                    debug!(?kind, key, error = %e, "coordinator lookup failed; retrying");
                    *last = Some(e);
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(self.inner.config.retry_backoff_max);
                }
                Err(e) => return Err(e),
            }
        }
    }

    async fn find_coordinator_once(&self, kind: CoordinatorKind, key: &str) -> Result<BrokerAddr> {
        let conn = self.any_connection(Workload::Admin).await?;
        let version = conn.version_for::<FindCoordinatorRequest>(FIND_COORDINATOR_VERSIONS)?;
        let key_bytes = StrBytes::from_string(key.to_owned());
        let mut req = FindCoordinatorRequest::default().with_key_type(kind.key_type());
        if version >= 4 {
            req.coordinator_keys = vec![key_bytes];
        } else {
            req.key = key_bytes;
        }
        let resp = conn.send_at(&req, version).await?;
        let context = || format!("{}: FindCoordinator({kind:?} {key})", conn.broker());
        let (code, node, host, port) = if version >= 4 {
            let c = resp.coordinators.first().ok_or_else(|| Error::Protocol {
                broker: conn.origin().clone(),
                api: format!("FindCoordinator v{version}"),
                source: crate::protocol::ProtocolError::Invalid {
                    what: "FindCoordinator response",
                    reason: "no coordinator entry".into(),
                },
            })?;
            (
                c.error_code,
                c.node_id.0,
                c.host.as_str().to_owned(),
                c.port,
            )
        } else {
            (
                resp.error_code,
                resp.node_id.0,
                resp.host.as_str().to_owned(),
                resp.port,
            )
        };
        Error::check(code, context)?;
        let port = u16::try_from(port).map_err(|_| Error::Protocol {
            broker: conn.origin().clone(),
            api: format!("FindCoordinator v{version}"),
            source: crate::protocol::ProtocolError::Invalid {
                what: "coordinator port",
                reason: format!("{port} is not a TCP port"),
            },
        })?;
        Ok(BrokerAddr {
            id: Some(node),
            host,
            port,
        })
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.pool.clear();
        // Wake the refresh task so it notices the cluster is gone.
        self.refresh_wanted.notify_one();
    }
}
