//! [`StreamsConfig`]: ordering, in-flight limits, commit mode and failure
//! policy, with documented defaults, validated in [`build`](StreamsConfigBuilder::build).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use super::scheduler::OrderingMode;
use super::source_group::SourceGroup;
use super::state::Stores;
use crate::config::ClientConfig;
use crate::consumer::{ConsumerConfig, Offsets};
use crate::error::{Error, Result};
use crate::producer::ProducerConfig;

/// What an asynchronous commit's callback is given.
#[derive(Debug)]
pub struct CommitOutcome {
    /// The offsets the commit carried (each the next offset to read).
    pub offsets: Offsets,
    /// Its result.
    pub result: Result<()>,
}

/// Called with every asynchronous commit's outcome, in commit order.
pub type CommitCallback = Arc<dyn Fn(&CommitOutcome) + Send + Sync>;

/// How watermarks are committed.
#[derive(Clone, Default)]
#[non_exhaustive]
pub enum CommitMode {
    /// At-least-once; each commit completes before more records are
    /// dispatched (the default).
    #[default]
    Sync,
    /// At-least-once; commits go out without blocking processing and the
    /// callback sees every result; a later commit supersedes an earlier
    /// one; the final commit on revoke and shutdown is synchronous.
    Async(CommitCallback),
    /// Exactly-once (KIP-447): one transactional producer per instance; at
    /// each commit interval in-flight work is drained, the watermarks go
    /// into the transaction and it commits. Input is read read_committed.
    ExactlyOnce,
}

impl std::fmt::Debug for CommitMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            CommitMode::Sync => "Sync",
            CommitMode::Async(_) => "Async",
            CommitMode::ExactlyOnce => "ExactlyOnce",
        })
    }
}

/// Delays between attempts: `initial * multiplier^(attempt-1)`, capped at
/// `max`, each shortened by up to `jitter` (a share, 0..=1) at random.
/// `multiplier` 1 is a fixed backoff.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Backoff {
    /// Delay before the second attempt.
    pub initial: Duration,
    /// Growth per attempt (1.0 = fixed).
    pub multiplier: f64,
    /// Upper bound of one delay.
    pub max: Duration,
    /// Random share taken off each delay (0 = none).
    pub jitter: f64,
    /// Attempts in all, the first included.
    pub max_attempts: u32,
}

impl Backoff {
    /// A fixed delay between at most `max_attempts` attempts.
    pub fn fixed(delay: Duration, max_attempts: u32) -> Backoff {
        Backoff {
            initial: delay,
            multiplier: 1.0,
            max: delay,
            jitter: 0.0,
            max_attempts,
        }
    }

    /// Exponential backoff (×2 per attempt, 20% jitter).
    pub fn exponential(initial: Duration, max: Duration, max_attempts: u32) -> Backoff {
        Backoff {
            initial,
            multiplier: 2.0,
            max,
            jitter: 0.2,
            max_attempts,
        }
    }

    /// The delay after failed attempt number `attempt` (1-based).
    pub fn delay(&self, attempt: u32) -> Duration {
        let exp = self.multiplier.powi(attempt.saturating_sub(1) as i32);
        let base = self.initial.mul_f64(exp.max(0.0)).min(self.max);
        let cut = self.jitter.clamp(0.0, 1.0) * fastrand::f64();
        base.mul_f64(1.0 - cut)
    }
}

/// Stops the application when, over the last `window`, more than
/// `max_share` of the records the main lane finished were dead-lettered
/// (checked at each commit interval once `min_records` were finished in
/// the window). A flood of dead letters usually means a broken dependency
/// or a bad deployment, not bad records.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DeadLetterGuard {
    /// Highest tolerated share of dead letters (0..=1).
    pub max_share: f64,
    /// The sliding window. Dead letters come after the backoffs, so keep
    /// it well above the sum of the retry delays.
    pub window: Duration,
    /// Records finished in the window before the share is judged.
    pub min_records: u64,
}

/// The parallel retry lane's settings.
#[derive(Debug, Clone, PartialEq)]
pub struct RetryLane {
    /// Topic failed records are handed to (must exist).
    pub retry_topic: String,
    /// Topic records go to after `backoff.max_attempts` (must exist).
    pub dead_letter_topic: String,
    /// Delay before each retry and the number of attempts (the main lane's
    /// first attempt included).
    pub backoff: Backoff,
    /// Retry records held in memory waiting to be due; beyond it the lane
    /// stops fetching. Default 10,000.
    pub max_held: usize,
    /// The dead-letter rate guard; default none.
    pub dead_letter_guard: Option<DeadLetterGuard>,
}

impl RetryLane {
    /// A lane over `retry_topic` and `dead_letter_topic`.
    pub fn new(
        retry_topic: impl Into<String>,
        dead_letter_topic: impl Into<String>,
        backoff: Backoff,
    ) -> RetryLane {
        RetryLane {
            retry_topic: retry_topic.into(),
            dead_letter_topic: dead_letter_topic.into(),
            backoff,
            max_held: 10_000,
            dead_letter_guard: None,
        }
    }

    /// Sets the dead-letter rate guard.
    pub fn dead_letter_guard(mut self, guard: DeadLetterGuard) -> RetryLane {
        self.dead_letter_guard = Some(guard);
        self
    }
}

/// What happens when processing a record fails.
///
/// A record's outputs are sent without waiting for one another: the next
/// record of its key (or partition) starts once they are in the producer,
/// and its offset is committed only once they are all acknowledged. An
/// output the producer could not deliver within `delivery.timeout.ms`
/// (its retries included), or that the broker refused for good (say, above
/// the topic's `max.message.bytes`), is a failure of its record, handled
/// as each variant says; no offset is ever committed past it. (With
/// `enable.idempotence=false` and more than one request in flight, where
/// the producer may reorder a partition's retried batches, each record
/// instead waits for its outputs' acknowledgements, and a failed output
/// counts as a failed attempt of its record under every policy.)
#[derive(Debug, Clone, Default, PartialEq)]
#[non_exhaustive]
pub enum FailurePolicy {
    /// Stop the application with the error and the record's coordinates
    /// (the default); a failed output stops it too, naming the record's
    /// partition and offset and the output's topic-partition.
    #[default]
    Fail,
    /// Retry in place; the failing key (Key mode) or partition (Partition
    /// mode) stalls, ordering and exactly-once hold. After the last attempt
    /// the application stops as with `Fail`. A failed output is not run
    /// again (the producer already retried it, and later records of its
    /// key have been sent since, so a re-run would put its outputs behind
    /// theirs): it stops the application as with `Fail`.
    Retry(Backoff),
    /// Hand the record to a retry topic and move on; a secondary worker
    /// retries it when due and dead-letters it after the last attempt.
    /// Gives up ordering and exactly-once. A record with a failed output
    /// is handed to the retry topic the same way (its offset is held until
    /// the hand-off is acknowledged; its outputs that were delivered are
    /// sent again when the lane runs it: at-least-once); a failed hand-off
    /// stops the application.
    RetryLane(RetryLane),
}

/// `group.protocol`: how the instances of an application share its input
/// (Kafka Streams' key and values).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum GroupProtocol {
    /// `classic`: a consumer group with client-side cooperative-sticky
    /// assignment (the default).
    #[default]
    Classic,
    /// `streams`: a streams group (KIP-1071, Kafka 4.1+ brokers): each
    /// instance declares the topology and the coordinator assigns tasks.
    Streams,
}

impl std::str::FromStr for GroupProtocol {
    type Err = Error;

    /// `classic` or `streams`, in any case.
    fn from_str(s: &str) -> Result<GroupProtocol> {
        match s.trim().to_ascii_lowercase().as_str() {
            "classic" => Ok(GroupProtocol::Classic),
            "streams" => Ok(GroupProtocol::Streams),
            other => Err(Error::config(
                "group.protocol",
                format!("`{other}` is not classic or streams"),
            )),
        }
    }
}

/// A streams application's configuration; see [`StreamsConfig::builder`].
#[derive(Debug, Clone)]
pub struct StreamsConfig {
    /// `application.id`: the consumer group id and the prefix of internal
    /// names.
    pub application_id: String,
    /// `bootstrap.servers`.
    pub bootstrap_servers: String,
    /// Ordering mode. Default [`OrderingMode::Partition`].
    pub ordering: OrderingMode,
    /// Records in flight (being processed) per task (input partition).
    /// Default 128. A record whose outputs are in the producer hands its
    /// slot on; it stays not done (its offset uncommitted) until they are
    /// acknowledged, those records bounded by the producer's
    /// `buffer.memory`.
    pub max_in_flight_per_task: usize,
    /// Records in flight (being processed) in this instance. Default 1024.
    pub max_in_flight: usize,
    /// Buffered records per task at which its fetching pauses; it resumes
    /// at half. Default 2048.
    pub max_buffered_per_task: usize,
    /// Commit mode. Default [`CommitMode::Sync`].
    pub commit_mode: CommitMode,
    /// Time between commits. Default 1 s (100 ms under exactly-once).
    pub commit_interval: Duration,
    /// Failure policy. Default [`FailurePolicy::Fail`].
    pub failure_policy: FailurePolicy,
    /// How long revoke and shutdown wait for in-flight records before
    /// committing what is done. Default 20 s (keep it below the rebalance
    /// timeout).
    pub drain_timeout: Duration,
    /// Extra consumer properties (e.g. `session.timeout.ms`).
    pub consumer_properties: Vec<(String, String)>,
    /// Extra producer properties (e.g. `linger.ms`).
    pub producer_properties: Vec<(String, String)>,
    /// Typed connection and security settings for every client of the
    /// application (a `TokenProvider`, TLS set in code, ...). When set, it
    /// replaces `bootstrap_servers` and the client part of the consumer and
    /// producer configs. Default none.
    pub client: Option<ClientConfig>,
    /// A typed consumer config to start from instead of
    /// `consumer_properties`. The runtime still sets `group.id`
    /// (`application.id`), turns auto-commit off and, under exactly-once,
    /// reads `read_committed`. Default none.
    pub consumer: Option<ConsumerConfig>,
    /// A typed producer config to start from instead of
    /// `producer_properties`. Under exactly-once the runtime sets its
    /// `transactional.id`. Default none.
    pub producer: Option<ProducerConfig>,
    /// `state.dir`: where persistent state stores live, in
    /// `<state.dir>/<application.id>/0_<partition>/`. Default
    /// `<system temporary directory>/purekafka-streams` (Kafka Streams:
    /// `${java.io.tmpdir}/kafka-streams`). Each instance on a machine needs
    /// its own.
    pub state_dir: PathBuf,
    /// `statestore.cache.max.bytes` (KIP-63; Kafka Streams' name since
    /// KIP-770, formerly `cache.max.bytes.buffering`): the bytes the record
    /// caches of key-value aggregations (`count`, `reduce`, `aggregate`)
    /// may hold in this instance, shared by all their stores and
    /// partitions. Updates to a cached key are merged; the store, the
    /// changelog and the downstream stages get the latest value per key
    /// when the cache is full (least recently updated first) or when the
    /// runtime commits. `0` turns caching off: every update is written
    /// and forwarded. Windowed aggregations are not cached, and neither is
    /// anything under [`FailurePolicy::Retry`] (a flush forwards entries
    /// whose records are done, so a failure downstream of it could not be
    /// retried in place: it fails the application). Default 10 MiB
    /// (10,485,760), as in Kafka Streams.
    pub cache_max_bytes: usize,
    /// `group.protocol`: a consumer group (`classic`) or a streams group
    /// (`streams`, KIP-1071). Default [`GroupProtocol::Classic`].
    pub group_protocol: GroupProtocol,
    /// `num.standby.replicas`: how many other instances keep a standby
    /// copy of each task's state stores, following their changelogs, so
    /// a fail-over restores only the tail. Needs
    /// `group.protocol=streams`: there the broker places standby tasks by
    /// the group's config `streams.num.standby.replicas`, which
    /// [`Streams::start`](crate::streams::Streams::start) sets to this
    /// value (IncrementalAlterConfigs on the group; the broker refuses a
    /// value above its `group.streams.max.standby.replicas`, default 2).
    /// `None` (the default) leaves the group's config as it is (the
    /// broker's default `group.streams.num.standby.replicas` is 0). A
    /// value above 0 under `group.protocol=classic` is refused by
    /// `build()`.
    pub num_standby_replicas: Option<u32>,
    /// `source.group`: a consumer group (the default) or a share group
    /// (KIP-932; see [`SourceGroup::Share`]).
    pub source_group: SourceGroup,
    /// `repartition.purge.interval.ms`: how often the records of the
    /// `group_by` repartition topics below the group's committed offsets
    /// are deleted (DeleteRecords on the partitions this instance owns,
    /// never past the committed offset; a failure is logged and tried
    /// again at the next interval). Default 30 s, as in Kafka Streams.
    pub repartition_purge_interval: Duration,
    /// The stores the topology's stateful stages registered.
    pub(crate) stores: Stores,
    /// The parts of the topology before each `group_by`'s repartition
    /// topic.
    pub(crate) repartitions: super::repartition::Repartitions,
}

impl StreamsConfig {
    /// A builder with the defaults above.
    pub fn builder(
        application_id: impl Into<String>,
        bootstrap_servers: impl Into<String>,
    ) -> StreamsConfigBuilder {
        StreamsConfigBuilder {
            config: StreamsConfig {
                application_id: application_id.into(),
                bootstrap_servers: bootstrap_servers.into(),
                ordering: OrderingMode::Partition,
                max_in_flight_per_task: 128,
                max_in_flight: 1024,
                max_buffered_per_task: 2048,
                commit_mode: CommitMode::Sync,
                commit_interval: Duration::from_secs(1),
                failure_policy: FailurePolicy::Fail,
                drain_timeout: Duration::from_secs(20),
                consumer_properties: Vec::new(),
                producer_properties: Vec::new(),
                client: None,
                consumer: None,
                producer: None,
                state_dir: std::env::temp_dir().join("purekafka-streams"),
                cache_max_bytes: 10 * 1024 * 1024,
                group_protocol: GroupProtocol::Classic,
                num_standby_replicas: None,
                source_group: SourceGroup::Consumer,
                repartition_purge_interval: Duration::from_secs(30),
                stores: Stores::default(),
                repartitions: Default::default(),
            },
            commit_interval_set: false,
        }
    }

    pub(crate) fn is_exactly_once(&self) -> bool {
        matches!(self.commit_mode, CommitMode::ExactlyOnce)
    }
}

/// Builder for [`StreamsConfig`].
#[derive(Debug, Clone)]
pub struct StreamsConfigBuilder {
    config: StreamsConfig,
    commit_interval_set: bool,
}

impl StreamsConfigBuilder {
    /// Ordering mode.
    pub fn ordering(mut self, ordering: OrderingMode) -> Self {
        self.config.ordering = ordering;
        self
    }

    /// In-flight limits per task and per instance.
    pub fn max_in_flight(mut self, per_task: usize, per_instance: usize) -> Self {
        self.config.max_in_flight_per_task = per_task;
        self.config.max_in_flight = per_instance;
        self
    }

    /// Buffered records per task at which fetching pauses.
    pub fn max_buffered_per_task(mut self, n: usize) -> Self {
        self.config.max_buffered_per_task = n;
        self
    }

    /// Commit mode.
    pub fn commit_mode(mut self, mode: CommitMode) -> Self {
        self.config.commit_mode = mode;
        self
    }

    /// Time between commits.
    pub fn commit_interval(mut self, d: Duration) -> Self {
        self.config.commit_interval = d;
        self.commit_interval_set = true;
        self
    }

    /// Failure policy.
    pub fn failure_policy(mut self, policy: FailurePolicy) -> Self {
        self.config.failure_policy = policy;
        self
    }

    /// Drain deadline on revoke and shutdown.
    pub fn drain_timeout(mut self, d: Duration) -> Self {
        self.config.drain_timeout = d;
        self
    }

    /// Adds a consumer property.
    pub fn consumer_property(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.config
            .consumer_properties
            .push((key.into(), value.into()));
        self
    }

    /// Adds a producer property.
    pub fn producer_property(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.config
            .producer_properties
            .push((key.into(), value.into()));
        self
    }

    /// Typed connection and security settings for the consumer, the
    /// producer and the retry lane (see [`StreamsConfig::client`]).
    pub fn client(mut self, client: ClientConfig) -> Self {
        self.config.client = Some(client);
        self
    }

    /// A typed consumer config to start from (see
    /// [`StreamsConfig::consumer`]); not combined with `consumer_property`.
    pub fn consumer(mut self, consumer: ConsumerConfig) -> Self {
        self.config.consumer = Some(consumer);
        self
    }

    /// A typed producer config to start from (see
    /// [`StreamsConfig::producer`]); not combined with `producer_property`.
    pub fn producer(mut self, producer: ProducerConfig) -> Self {
        self.config.producer = Some(producer);
        self
    }

    /// `state.dir`: where persistent state stores live.
    pub fn state_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.config.state_dir = dir.into();
        self
    }

    /// `statestore.cache.max.bytes`: the record caches' size (`0`: off).
    pub fn cache_max_bytes(mut self, bytes: usize) -> Self {
        self.config.cache_max_bytes = bytes;
        self
    }

    /// `group.protocol`: `classic` (default) or `streams` (KIP-1071).
    pub fn group_protocol(mut self, protocol: GroupProtocol) -> Self {
        self.config.group_protocol = protocol;
        self
    }

    /// `num.standby.replicas`: standby copies of each task's stores on
    /// other instances (`group.protocol=streams` only; see
    /// [`StreamsConfig::num_standby_replicas`]).
    pub fn num_standby_replicas(mut self, replicas: u32) -> Self {
        self.config.num_standby_replicas = Some(replicas);
        self
    }

    /// `source.group`: `consumer` (default) or `share` (KIP-932).
    pub fn source_group(mut self, group: SourceGroup) -> Self {
        self.config.source_group = group;
        self
    }

    /// `repartition.purge.interval.ms`: how often consumed records of the
    /// repartition topics are deleted (see
    /// [`StreamsConfig::repartition_purge_interval`]; above zero).
    pub fn repartition_purge_interval(mut self, d: Duration) -> Self {
        self.config.repartition_purge_interval = d;
        self
    }

    /// Validates. The parallel retry lane with exactly-once is an error:
    /// the lane gives up ordering and exactly-once, and is never silently
    /// downgraded.
    pub fn build(mut self) -> Result<StreamsConfig> {
        let c = &mut self.config;
        if c.application_id.is_empty() {
            return Err(Error::config("application.id", "must not be empty"));
        }
        if c.max_in_flight_per_task == 0 || c.max_in_flight == 0 {
            return Err(Error::config("max.in.flight", "limits must be at least 1"));
        }
        if c.max_buffered_per_task < 2 {
            return Err(Error::config("max.buffered.per.task", "must be at least 2"));
        }
        if c.repartition_purge_interval.is_zero() {
            return Err(Error::config(
                "repartition.purge.interval.ms",
                "must be above zero (Kafka Streams' default is 30000)",
            ));
        }
        check_typed_parts(c)?;
        check_standbys(c)?;
        super::source_group::check(c)?;
        if c.is_exactly_once() && !self.commit_interval_set {
            c.commit_interval = Duration::from_millis(100);
        }
        if let FailurePolicy::RetryLane(lane) = &c.failure_policy {
            if c.is_exactly_once() {
                return Err(Error::config(
                    "failure.policy",
                    "the parallel retry lane gives up ordering and exactly-once, so it cannot \
                     be combined with commit mode ExactlyOnce; use FailurePolicy::Retry (in \
                     place, keeps exactly-once) or an at-least-once commit mode",
                ));
            }
            if let Some(g) = lane.dead_letter_guard {
                if !(0.0..=1.0).contains(&g.max_share) || g.window.is_zero() {
                    return Err(Error::config(
                        "dead.letter.guard",
                        "max_share must be within 0..=1 and window above zero",
                    ));
                }
            }
            if lane.backoff.max_attempts < 2 {
                return Err(Error::config(
                    "failure.policy",
                    "a retry lane needs max_attempts >= 2 (the first attempt is the main lane's)",
                ));
            }
        }
        if let FailurePolicy::Retry(b) = &c.failure_policy {
            if b.max_attempts == 0 {
                return Err(Error::config("failure.policy", "max_attempts must be >= 1"));
            }
        }
        Ok(self.config)
    }
}

/// Whether `key` belongs to the client config (connection, security).
pub(crate) fn is_client_key(key: &str, value: &str) -> bool {
    ClientConfig::builder().try_set(key, value).is_some()
}

/// Standby replicas are placed by a streams group's coordinator
/// (KIP-1071); the classic protocol's assignors know partitions, not
/// tasks, so `num.standby.replicas` above 0 needs `group.protocol=streams`.
fn check_standbys(c: &StreamsConfig) -> Result<()> {
    match (c.num_standby_replicas, c.group_protocol) {
        (Some(n), GroupProtocol::Classic) if n > 0 => Err(Error::config(
            "num.standby.replicas",
            format!(
                "{n} standby replicas need group.protocol=streams (KIP-1071: the streams \
                 group's coordinator places standby tasks); the classic protocol keeps none"
            ),
        )),
        _ => Ok(()),
    }
}

/// A typed part and properties for the same client would leave it unclear
/// which wins, so each pair is refused, naming the first property.
fn check_typed_parts(c: &StreamsConfig) -> Result<()> {
    let refuse = |key: &str, part: &str| {
        Err(Error::config(
            key,
            format!("set in the typed {part} config instead: a property beside it is ambiguous"),
        ))
    };
    if c.consumer.is_some() {
        if let Some((k, _)) = c.consumer_properties.first() {
            return refuse(k, "consumer");
        }
    }
    if c.producer.is_some() {
        if let Some((k, _)) = c.producer_properties.first() {
            return refuse(k, "producer");
        }
    }
    if c.client.is_some() {
        let props = c.consumer_properties.iter().chain(&c.producer_properties);
        if let Some((k, _)) = props.into_iter().find(|(k, v)| is_client_key(k, v)) {
            return refuse(k, "client");
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_lane_with_exactly_once_is_rejected() {
        let err = StreamsConfig::builder("app", "x:1")
            .commit_mode(CommitMode::ExactlyOnce)
            .failure_policy(FailurePolicy::RetryLane(RetryLane::new(
                "r",
                "d",
                Backoff::fixed(Duration::from_millis(10), 3),
            )))
            .build()
            .unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains("failure.policy") && text.contains("exactly-once"),
            "{text}"
        );
    }

    #[test]
    fn standby_replicas_need_the_streams_protocol() {
        let e = StreamsConfig::builder("app", "x:1")
            .num_standby_replicas(1)
            .build()
            .unwrap_err();
        let text = e.to_string();
        assert!(
            text.contains("num.standby.replicas") && text.contains("group.protocol=streams"),
            "{text}"
        );
        let zero = StreamsConfig::builder("app", "x:1")
            .num_standby_replicas(0)
            .build()
            .unwrap();
        assert_eq!(zero.num_standby_replicas, Some(0));
        let streams = StreamsConfig::builder("app", "x:1")
            .group_protocol(GroupProtocol::Streams)
            .num_standby_replicas(2)
            .build()
            .unwrap();
        assert_eq!(streams.num_standby_replicas, Some(2));
    }

    #[test]
    fn exactly_once_defaults_to_100ms_commits_and_backoff_grows() {
        let c = StreamsConfig::builder("app", "x:1")
            .commit_mode(CommitMode::ExactlyOnce)
            .build()
            .unwrap();
        assert_eq!(c.commit_interval, Duration::from_millis(100));
        let b = Backoff::exponential(Duration::from_millis(10), Duration::from_millis(50), 5);
        for attempt in 1..6 {
            let d = b.delay(attempt);
            assert!(d <= Duration::from_millis(50));
        }
        assert!(
            b.delay(3) >= Duration::from_millis(32),
            "40ms less 20% at most"
        );
    }
}
