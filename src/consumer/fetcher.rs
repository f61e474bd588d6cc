//! One fetch task per leader broker
//! (<https://kafka.apache.org/protocol#The_Messages_Fetch>), on that
//! broker's `Workload::Fetch` connection.
//!
//! Each task repeatedly picks the assigned partitions that metadata says
//! this broker leads and that are fetchable (positioned, not paused, buffer
//! below `max.partition.fetch.bytes`, no pending reset or error; caught-up
//! partitions wait while another one waits for its buffer to drain, see
//! [`select_for_fetch`]), sends one
//! Fetch through its incremental fetch session (KIP-227, see
//! [`super::session`]), decodes the answer outside the lock, and appends
//! records to the partitions' buffers. It keeps fetching while the
//! application processes (prefetch) until the buffers are full.
//!
//! Leadership (KIP-320): every partition is fetched with the leader epoch
//! from metadata. NOT_LEADER_OR_FOLLOWER, FENCED_LEADER_EPOCH,
//! UNKNOWN_LEADER_EPOCH and unknown-topic errors refresh metadata, after
//! which the partition is fetched by its new leader's task. OFFSET_OUT_OF_RANGE
//! applies `auto.offset.reset` (or records [`Error::OffsetOutOfRange`]).
//! From Fetch v12 each partition also carries the leader epoch of the last
//! record fetched; a leader whose log no longer holds that epoch up to the
//! fetch offset (an unclean election truncated it) answers with a diverging
//! epoch, and the partition goes back to the divergence point, or reports
//! [`Error::LogTruncation`] under `auto.offset.reset=none`
//! (see `PartitionState::diverged`).
//! Topic ids are used from Fetch v13 (KIP-516).
//!
//! The task ends when the consumer closes or when no assigned partition is
//! led by its broker. Every wait is bounded: the fetch by
//! `request.timeout.ms` + `fetch.max.wait.ms`, idle waits by
//! `fetch.max.wait.ms`.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic, ForgottenTopic};
use kafka_protocol::messages::fetch_response::PartitionData;
use kafka_protocol::messages::{FetchRequest, FetchResponse, TopicName};
use kafka_protocol::protocol::StrBytes;
use tokio::sync::{watch, Notify};
use tokio::time::Instant;
use tracing::{debug, trace, warn, Instrument};
use uuid::Uuid;

use super::config::AutoOffsetReset;
use super::fetched::{decode_fetched_into, AbortedTransactions, FetchEnd};
use super::record::ConsumerRecord;
use super::room::RecentPeak;
use super::session::{FetchSession, PartitionFetch, SessionRequest};
use super::state::{select_for_fetch, PartitionState};
use super::Shared;
use crate::error::{Error, KafkaCode, Result};
use crate::net::{Connection, Workload};
use crate::protocol::records::DecodeLimits;
use crate::protocol::versions::Versions;
use crate::TopicPartition;

/// Fetch versions this client implements (v7: sessions; v11: rack; v12:
/// flexible; v13: topic ids; v15: replica state; v17: current).
const FETCH_VERSIONS: Versions = Versions::new(7, 17);
/// Highest Fetch version that addresses topics by name.
const LAST_VERSION_BY_NAME: i16 = 12;
/// Longest throttle honoured before the next fetch.
const MAX_THROTTLE: Duration = Duration::from_secs(5);

/// Starts a fetch task for `broker_id` unless one runs. Call with the
/// state lock held (`fetchers` is part of the state).
pub(super) fn ensure_task(
    shared: &Arc<Shared>,
    fetchers: &mut HashMap<i32, Arc<Notify>>,
    broker_id: i32,
) {
    if let Some(wake) = fetchers.get(&broker_id) {
        wake.notify_one();
        return;
    }
    let wake = Arc::new(Notify::new());
    fetchers.insert(broker_id, wake.clone());
    let task = FetchTask {
        shared: shared.clone(),
        broker_id,
        wake,
        shutdown: shared.shutdown.subscribe(),
        session: FetchSession::default(),
        decoded: Vec::new(),
        decoded_peak: RecentPeak::default(),
    };
    let span = tracing::debug_span!("fetcher", broker = broker_id);
    tokio::spawn(task.run().instrument(span));
}

struct FetchTask {
    shared: Arc<Shared>,
    broker_id: i32,
    wake: Arc<Notify>,
    shutdown: watch::Receiver<bool>,
    session: FetchSession,
    /// Every partition's records of one response, decoded outside the
    /// lock, then moved into the partitions' buffers; kept for the next
    /// response (see [`FetchTask::keep_decoded`]).
    decoded: Vec<ConsumerRecord>,
    /// How many records recent responses decoded: the room `decoded` keeps.
    decoded_peak: RecentPeak,
}

/// What one partition was fetched with, to tell stale answers apart.
struct InFlight {
    seq: u64,
    fetch_offset: i64,
    topic_id: [u8; 16],
}

/// The outcome of one partition in one response.
enum Outcome {
    /// The next `usize` decoded records are this partition's; then its
    /// high watermark and last stable offset.
    Records(FetchEnd, usize, Option<i64>, Option<i64>),
    /// Leadership or topic metadata is stale: refresh, retry after backoff.
    Stale(KafkaCode),
    OutOfRange,
    /// The leader answered with a diverging epoch: `(epoch, end offset)`.
    Diverged(i32, i64),
    Failed(Error),
}

impl FetchTask {
    async fn run(mut self) {
        loop {
            if *self.shutdown.borrow() {
                return;
            }
            let Some(wanted) = self.select_partitions() else {
                debug!("no assigned partition led by this broker; fetcher ends");
                return;
            };
            if wanted.is_empty() {
                let idle = self.shared.config.fetch_max_wait;
                tokio::select! {
                    _ = self.wake.notified() => {}
                    _ = tokio::time::sleep(idle) => {}
                    _ = self.shutdown.changed() => return,
                }
                continue;
            }
            if let Err(e) = self.fetch_once(wanted).await {
                debug!(error = %e, "fetch failed");
                self.session.on_failure();
                if e.is_retriable() || e.invalidates_metadata() {
                    self.shared.cluster.request_refresh();
                } else {
                    self.fail_led_partitions(&e);
                }
                let backoff = self.shared.cluster.config().retry_backoff;
                tokio::select! {
                    _ = tokio::time::sleep(backoff) => {}
                    _ = self.shutdown.changed() => return,
                }
            }
        }
    }

    /// The partitions this broker leads that go into the next fetch (see
    /// [`select_for_fetch`]), or `None` (after deregistering) when it leads
    /// no assigned partition at all.
    fn select_partitions(&self) -> Option<BTreeMap<TopicPartition, (PartitionFetch, u64)>> {
        let metadata = self.shared.cluster.metadata();
        let max_buffered = self.shared.max_buffered();
        let isolation = self.shared.config.isolation_level;
        let now = Instant::now();
        let mut state = self.shared.lock();
        let mut leads_any = false;
        let mut led = Vec::new();
        for (tp, p) in &state.partitions {
            let Some(info) = metadata.partition(&tp.topic, tp.partition) else {
                continue;
            };
            if info.leader != self.broker_id {
                continue;
            }
            leads_any = true;
            led.push((
                (tp, p, info.leader_epoch),
                p.readiness(max_buffered, now, isolation),
            ));
        }
        let wanted = select_for_fetch(led)
            .into_iter()
            .map(|(tp, p, leader_epoch)| {
                let fetch = PartitionFetch {
                    topic_id: metadata.topics.get(&*tp.topic).map_or([0; 16], |t| t.id),
                    fetch_offset: p.fetch_offset,
                    leader_epoch,
                    last_fetched_epoch: p.fetch_epoch.unwrap_or(-1),
                    max_bytes: self.shared.config.max_partition_fetch_bytes,
                };
                (tp.clone(), (fetch, p.seq))
            })
            .collect();
        if !leads_any {
            state.fetchers.remove(&self.broker_id);
            return None;
        }
        Some(wanted)
    }

    async fn fetch_once(
        &mut self,
        wanted: BTreeMap<TopicPartition, (PartitionFetch, u64)>,
    ) -> Result<()> {
        let cluster = &self.shared.cluster;
        let addr = cluster.broker(self.broker_id)?;
        let conn = cluster.connection(&addr, Workload::Fetch).await?;
        let by_id = wanted.values().all(|(p, _)| p.topic_id != [0; 16]);
        let versions = if by_id {
            FETCH_VERSIONS
        } else {
            Versions::new(FETCH_VERSIONS.min, LAST_VERSION_BY_NAME)
        };
        let version = conn.version_for::<FetchRequest>(versions)?;
        let in_flight: HashMap<TopicPartition, InFlight> = wanted
            .iter()
            .map(|(tp, (p, seq))| {
                let f = InFlight {
                    seq: *seq,
                    fetch_offset: p.fetch_offset,
                    topic_id: p.topic_id,
                };
                (tp.clone(), f)
            })
            .collect();
        let plan = self
            .session
            .build(wanted.into_iter().map(|(tp, (p, _))| (tp, p)).collect());
        trace!(
            session = plan.session_id,
            epoch = plan.epoch,
            partitions = plan.partitions.len(),
            forgotten = plan.forgotten.len(),
            "fetch"
        );
        let req = self.request(&plan, version);
        let timeout = cluster.config().request_timeout + self.shared.config.fetch_max_wait;
        let mut shutdown = self.shutdown.clone();
        let resp = tokio::select! {
            r = conn.send_at_with_timeout(&req, version, timeout) => r?,
            _ = shutdown.changed() => return Ok(()),
        };
        self.handle(&conn, resp, &in_flight).await;
        Ok(())
    }

    fn request(&self, plan: &SessionRequest, version: i16) -> FetchRequest {
        let config = &self.shared.config;
        let mut topics: BTreeMap<&str, FetchTopic> = BTreeMap::new();
        for (tp, p) in &plan.partitions {
            topics
                .entry(&tp.topic)
                .or_insert_with(|| topic_entry(&tp.topic, p.topic_id))
                .partitions
                .push(
                    FetchPartition::default()
                        .with_partition(tp.partition)
                        .with_current_leader_epoch(p.leader_epoch)
                        .with_fetch_offset(p.fetch_offset)
                        .with_last_fetched_epoch(if version >= 12 {
                            p.last_fetched_epoch
                        } else {
                            -1
                        })
                        .with_log_start_offset(-1)
                        .with_partition_max_bytes(p.max_bytes),
                );
        }
        let mut forgotten: BTreeMap<&str, ForgottenTopic> = BTreeMap::new();
        for (tp, id) in &plan.forgotten {
            forgotten
                .entry(&tp.topic)
                .or_insert_with(|| {
                    ForgottenTopic::default()
                        .with_topic(TopicName(StrBytes::from_string(tp.topic.to_string())))
                        .with_topic_id(Uuid::from_bytes(*id))
                })
                .partitions
                .push(tp.partition);
        }
        let max_wait = i32::try_from(config.fetch_max_wait.as_millis()).unwrap_or(i32::MAX);
        let mut req = FetchRequest::default()
            .with_max_wait_ms(max_wait)
            .with_min_bytes(config.fetch_min_bytes)
            .with_max_bytes(config.fetch_max_bytes)
            .with_isolation_level(config.isolation_level.code())
            .with_session_id(plan.session_id)
            .with_session_epoch(plan.epoch)
            .with_topics(topics.into_values().collect())
            .with_forgotten_topics_data(forgotten.into_values().collect());
        if version >= 11 {
            if let Some(rack) = &config.client_rack {
                req.rack_id = StrBytes::from_string(rack.clone());
            }
        }
        req
    }

    async fn handle(
        &mut self,
        conn: &Connection,
        resp: FetchResponse,
        in_flight: &HashMap<TopicPartition, InFlight>,
    ) {
        if resp.throttle_time_ms > 0 {
            let throttle = Duration::from_millis(resp.throttle_time_ms.unsigned_abs().into());
            tokio::time::sleep(throttle.min(MAX_THROTTLE)).await;
        }
        if !self.session.on_response(resp.error_code, resp.session_id) {
            debug!(
                code = resp.error_code,
                "fetch session error; next fetch is full"
            );
            return;
        }
        let names: HashMap<[u8; 16], &TopicPartition> =
            in_flight.iter().map(|(tp, f)| (f.topic_id, tp)).collect();
        let limits = DecodeLimits {
            check_crc: self.shared.config.check_crcs,
            max_decompressed_size: self.shared.config.max_decompressed_size,
        };
        let mut outcomes = Vec::new();
        let mut decoded = std::mem::take(&mut self.decoded);
        for topic in resp.responses {
            let name: Arc<str> = if topic.topic_id.is_nil() {
                topic.topic.0.as_str().into()
            } else {
                match names.get(topic.topic_id.as_bytes()) {
                    Some(tp) => tp.topic.clone(),
                    None => continue,
                }
            };
            for p in topic.partitions {
                let tp = TopicPartition::new(name.clone(), p.partition_index);
                let Some(sent) = in_flight.get(&tp) else {
                    continue;
                };
                let outcome = self.outcome(conn, &tp, sent, p, &limits, &mut decoded);
                outcomes.push((tp, outcome));
            }
        }
        self.apply(outcomes, in_flight, decoded).await;
    }

    /// Keeps the emptied vector of decoded records for the next response.
    /// Room beyond twice what recent responses needed (`used` records this
    /// time; see [`RecentPeak`]) is given back, so a burst does not pin its
    /// peak for the consumer's life, while responses of varying sizes do
    /// not shrink and regrow it each time.
    fn keep_decoded(&mut self, mut decoded: Vec<ConsumerRecord>, used: usize) {
        decoded.clear();
        self.decoded_peak.fill(used);
        if let Some(to) = self.decoded_peak.shrink_target(decoded.capacity(), 0) {
            decoded.shrink_to(to);
        }
        self.decoded = decoded;
    }

    fn outcome(
        &self,
        conn: &Connection,
        tp: &TopicPartition,
        sent: &InFlight,
        p: PartitionData,
        limits: &DecodeLimits,
        decoded: &mut Vec<ConsumerRecord>,
    ) -> Outcome {
        let diverging = &p.diverging_epoch;
        match KafkaCode::from_code(p.error_code) {
            None if diverging.epoch >= 0 => {
                Outcome::Diverged(diverging.epoch, diverging.end_offset)
            }
            None => {
                let aborted = AbortedTransactions::new(
                    p.aborted_transactions
                        .unwrap_or_default()
                        .iter()
                        .map(|a| (a.producer_id.0, a.first_offset)),
                );
                let before = decoded.len();
                let end = decode_fetched_into(
                    tp,
                    p.records.unwrap_or_default(),
                    sent.fetch_offset,
                    self.shared.config.isolation_level,
                    aborted,
                    limits,
                    decoded,
                );
                let hw = (p.high_watermark >= 0).then_some(p.high_watermark);
                let lso = (p.last_stable_offset >= 0).then_some(p.last_stable_offset);
                Outcome::Records(end, decoded.len() - before, hw, lso)
            }
            Some(KafkaCode::OFFSET_OUT_OF_RANGE) => Outcome::OutOfRange,
            Some(code) if code.invalidates_metadata() || code.is_retriable() => {
                Outcome::Stale(code)
            }
            Some(code) => Outcome::Failed(Error::Kafka {
                code,
                context: format!("Fetch {tp} from {}", conn.broker()),
            }),
        }
    }

    async fn apply(
        &mut self,
        outcomes: Vec<(TopicPartition, Outcome)>,
        in_flight: &HashMap<TopicPartition, InFlight>,
        mut decoded: Vec<ConsumerRecord>,
    ) {
        let reset = self.shared.config.auto_offset_reset;
        let backoff = self.shared.cluster.config().retry_backoff;
        let mut refresh = BTreeSet::new();
        let used = decoded.len();
        {
            let mut state = self.shared.lock();
            // Each partition's records, in the order they were decoded.
            let mut records = decoded.drain(..);
            for (tp, outcome) in outcomes {
                let count = match &outcome {
                    Outcome::Records(_, count, _, _) => *count,
                    _ => 0,
                };
                let mine = records.by_ref().take(count);
                let fresh = |sent: &InFlight, p: &PartitionState| {
                    p.seq == sent.seq && p.fetch_offset == sent.fetch_offset
                };
                let (sent, p) = match (in_flight.get(&tp), state.partitions.get_mut(&tp)) {
                    (Some(sent), Some(p)) if fresh(sent, p) => (sent, p),
                    (Some(_), Some(_)) => {
                        trace!(partition = %tp, "discarding a stale fetch answer");
                        mine.for_each(drop);
                        continue;
                    }
                    _ => {
                        mine.for_each(drop);
                        continue;
                    }
                };
                match outcome {
                    Outcome::Records(fetched, _, hw, lso) => {
                        p.high_watermark = hw.or(p.high_watermark);
                        p.last_stable_offset = lso.or(p.last_stable_offset);
                        p.append(mine, fetched.next_offset, fetched.last_epoch);
                        if let Some(e) = fetched.error {
                            warn!(partition = %tp, error = %e, "undecodable fetch data");
                            p.error = Some(e);
                        }
                    }
                    Outcome::Stale(code) => {
                        debug!(partition = %tp, %code, "stale leadership; refreshing metadata");
                        refresh.insert(tp.topic.to_string());
                        p.retry_at = Some(Instant::now() + backoff);
                    }
                    Outcome::OutOfRange => {
                        // Also the answer of a leader that cannot place the
                        // last fetched epoch sent with the fetch.
                        warn!(
                            partition = %tp,
                            offset = sent.fetch_offset,
                            last_fetched_epoch = ?p.fetch_epoch,
                            policy = ?reset,
                            "fetch offset out of range on the leader; applying auto.offset.reset"
                        );
                        match reset {
                            AutoOffsetReset::None => {
                                p.error = Some(Error::OffsetOutOfRange {
                                    partition: tp.clone(),
                                    offset: sent.fetch_offset,
                                });
                            }
                            strategy => p.request_reset(strategy),
                        }
                    }
                    Outcome::Diverged(epoch, end_offset) => {
                        let position = p.position.map_or(-1, |p| p.offset);
                        if p.diverged(&tp, epoch, end_offset, reset) {
                            warn!(
                                partition = %tp, position, end_offset, epoch,
                                "log truncation: records already returned were replaced \
                                 on the leader (unclean election)"
                            );
                        } else {
                            debug!(partition = %tp, end_offset, epoch, "diverging epoch; nothing returned was affected");
                        }
                    }
                    Outcome::Failed(e) => {
                        p.error = Some(e);
                        p.retry_at = Some(Instant::now() + backoff);
                    }
                }
            }
        }
        self.keep_decoded(decoded, used);
        self.shared.data_ready.notify_waiters();
        if !refresh.is_empty() {
            let topics: Vec<String> = refresh.into_iter().collect();
            let mut shutdown = self.shutdown.clone();
            tokio::select! {
                r = self.shared.cluster.refresh_metadata(Some(&topics)) => {
                    if let Err(e) = r {
                        debug!(error = %e, "metadata refresh after fetch error failed");
                    }
                }
                _ = shutdown.changed() => return,
            }
            // Partitions that moved need their new leader's task.
            self.shared.ensure_fetchers();
            self.shared.data_ready.notify_waiters();
        }
    }

    /// A non-retriable fetch failure (no common version, undecodable
    /// response): reported by `poll` for every partition this task fetches.
    fn fail_led_partitions(&self, e: &Error) {
        let metadata = self.shared.cluster.metadata();
        let mut state = self.shared.lock();
        for (tp, p) in state.partitions.iter_mut() {
            if metadata
                .partition(&tp.topic, tp.partition)
                .is_some_and(|i| i.leader == self.broker_id)
            {
                p.error = Some(e.clone());
            }
        }
        drop(state);
        self.shared.data_ready.notify_waiters();
    }
}

fn topic_entry(name: &str, id: [u8; 16]) -> FetchTopic {
    FetchTopic::default()
        .with_topic(TopicName(StrBytes::from_string(name.to_owned())))
        .with_topic_id(Uuid::from_bytes(id))
}
