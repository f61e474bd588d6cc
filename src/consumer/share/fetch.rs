//! The I/O half of share fetching: one round of ShareFetch (API 78) or
//! ShareAcknowledge (API 79) requests, one per broker, built from the
//! [`ShareSession`]s and the [`Acquired`] bookkeeping, and their answers
//! fed back to them.
//!
//! A round queues every broker's request before awaiting any answer, so
//! brokers work in parallel and the wait is that of the slowest (bounded by
//! `fetch.max.wait.ms`, the `poll` timeout and `request.timeout.ms`).
//! Requests to one broker go over its `Workload::Fetch` connection, which
//! answers in order: the session epochs assigned while queueing are the
//! order the broker sees.
//! Protocol: <https://kafka.apache.org/protocol#The_Messages_ShareFetch>.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use kafka_protocol::messages::share_acknowledge_request::{
    AcknowledgePartition, AcknowledgeTopic, AcknowledgementBatch as AckReqBatch,
};
use kafka_protocol::messages::share_fetch_request::{
    AcknowledgementBatch, FetchPartition, FetchTopic, ForgottenTopic,
};
use kafka_protocol::messages::{
    GroupId, ShareAcknowledgeRequest, ShareAcknowledgeResponse, ShareFetchRequest,
    ShareFetchResponse,
};
use kafka_protocol::protocol::StrBytes;
use tokio::time::Instant;
use tracing::{debug, warn};
use uuid::Uuid;

use super::acquired::{AckBatch, AcquiredRange};
use super::metrics::AcknowledgementCounts;
use super::session::{SessionPartition, ShareSession};
use super::{ShareRecord, ShareShared};
use crate::cluster::ClusterMetadata;
use crate::consumer::fetched::{decode_fetched, AbortedTransactions};
use crate::consumer::IsolationLevel;
use crate::error::{Error, KafkaCode, Result};
use crate::net::{BrokerAddr, Connection, PendingResponse, Workload};
use crate::protocol::records::DecodeLimits;
use crate::protocol::versions::Versions;
use crate::TopicPartition;

/// ShareFetch versions this client implements.
const SHARE_FETCH_VERSIONS: Versions = Versions::new(1, 1);
/// ShareAcknowledge versions this client implements.
const SHARE_ACKNOWLEDGE_VERSIONS: Versions = Versions::new(1, 1);

/// What fetching holds between polls; guarded by one async lock so that
/// session epochs are assigned in the order requests are queued.
#[derive(Debug, Default)]
pub(crate) struct FetchState {
    /// Share session per broker id.
    pub sessions: BTreeMap<i32, ShareSession>,
    /// Fetched records not yet returned by `poll`.
    pub buffered: VecDeque<ShareRecord>,
}

/// What a round does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RoundKind {
    /// ShareFetch the assigned partitions, acknowledgements riding along.
    Fetch(Duration),
    /// ShareAcknowledge what is pending.
    Commit,
    /// ShareAcknowledge what is pending with the final epoch, closing
    /// every session.
    Close,
}

/// Acknowledgement results of one round, per partition.
pub(crate) type AckResults = Vec<(TopicPartition, Result<()>)>;

/// What a round produced (records go to `FetchState::buffered`).
#[derive(Debug, Default)]
pub(crate) struct RoundOutcome {
    /// One result per partition whose acknowledgements were sent.
    pub acks: AckResults,
    /// Failures retrying will not fix.
    pub fatal: Vec<Error>,
    /// The acknowledgements sent, per partition, until their result is
    /// known (for the metrics).
    sent: HashMap<TopicPartition, AcknowledgementCounts>,
}

enum Pending {
    Fetch(PendingResponse<ShareFetchRequest>),
    Ack(PendingResponse<ShareAcknowledgeRequest>),
}

struct Sent {
    broker_id: i32,
    broker: String,
    pending: Pending,
    acked: Vec<TopicPartition>,
    queued_at: Instant,
}

/// The request part for one partition's acknowledgements.
fn wire_batches(batches: Vec<AckBatch>) -> Vec<AcknowledgementBatch> {
    batches
        .into_iter()
        .map(|b| {
            AcknowledgementBatch::default()
                .with_first_offset(b.first)
                .with_last_offset(b.last)
                .with_acknowledge_types(b.types)
        })
        .collect()
}

fn group_id(s: &ShareShared) -> GroupId {
    GroupId(StrBytes::from_string(s.config.group_id.clone()))
}

/// Runs one round. Transport and session failures reset the broker's
/// session and are reported through the acknowledgement results.
pub(crate) async fn round(
    s: &Arc<ShareShared>,
    st: &mut FetchState,
    kind: RoundKind,
) -> RoundOutcome {
    let meta = s.cluster.metadata();
    let names: HashMap<[u8; 16], Arc<str>> = meta
        .topics
        .values()
        .map(|t| (t.id, Arc::from(t.name.as_str())))
        .collect();
    let ids: HashMap<&str, [u8; 16]> = meta
        .topics
        .values()
        .map(|t| (t.name.as_str(), t.id))
        .collect();
    let mut out = RoundOutcome::default();
    let plans = plan_brokers(s, st, kind, &meta, &names);
    let mut sent = Vec::new();
    for (broker_id, plan) in plans {
        let conn = match s.cluster.connection(&plan.addr, Workload::Fetch).await {
            Ok(c) => c,
            Err(e) => {
                debug!(broker = broker_id, error = %e, "share fetch connection failed");
                st.sessions.entry(broker_id).or_default().reset();
                continue;
            }
        };
        let session = st.sessions.entry(broker_id).or_default();
        let fetching = matches!(kind, RoundKind::Fetch(_)) && !plan.fetch.is_empty();
        let queued_at = Instant::now();
        let queued = if fetching {
            queue_fetch(s, &conn, session, &plan, &ids, kind, &mut out.sent).await
        } else {
            match queue_acknowledge(s, &conn, session, &plan.acknowledge, &ids, kind, &mut out)
                .await
            {
                Some(queued) => queued,
                None => continue,
            }
        };
        match queued {
            Ok((pending, acked)) => sent.push(Sent {
                broker_id,
                broker: conn.broker().to_owned(),
                pending,
                acked,
                queued_at,
            }),
            Err(e) => {
                session.reset();
                if !e.is_retriable() {
                    out.fatal.push(e);
                }
            }
        }
    }
    collect_answers(s, st, sent, &names, &mut out).await;
    for (tp, r) in &out.acks {
        if r.is_err() {
            if let Some(counts) = out.sent.remove(tp) {
                s.counters.acknowledgements_failed(&counts);
            }
        }
    }
    out
}

/// What a round asks of one broker.
struct BrokerPlan {
    addr: BrokerAddr,
    /// Assigned partitions it leads, to fetch.
    fetch: BTreeSet<SessionPartition>,
    /// Partitions it leads with acknowledgements pending.
    acknowledge: Vec<TopicPartition>,
}

/// Groups the round's work by leader: assigned partitions to fetch (fetch
/// rounds), pending acknowledgements, and on close every broker with an
/// open session. A partition without a known leader asks for a metadata
/// refresh and waits for a later round.
fn plan_brokers(
    s: &ShareShared,
    st: &FetchState,
    kind: RoundKind,
    meta: &ClusterMetadata,
    names: &HashMap<[u8; 16], Arc<str>>,
) -> BTreeMap<i32, BrokerPlan> {
    let mut plans: BTreeMap<i32, BrokerPlan> = BTreeMap::new();
    fn plan_of(
        plans: &mut BTreeMap<i32, BrokerPlan>,
        id: i32,
        addr: BrokerAddr,
    ) -> &mut BrokerPlan {
        plans.entry(id).or_insert_with(|| BrokerPlan {
            addr,
            fetch: BTreeSet::new(),
            acknowledge: Vec::new(),
        })
    }
    let mut refresh = false;
    if let RoundKind::Fetch(_) = kind {
        for &(id, p) in s.assignment_tx.borrow().iter() {
            match names.get(&id).and_then(|n| meta.leader(n, p)) {
                Some(b) => {
                    plan_of(&mut plans, b.id, b.addr()).fetch.insert((id, p));
                }
                None => refresh = true,
            }
        }
    }
    for tp in s.acquired().pending_partitions() {
        match meta.leader(&tp.topic, tp.partition) {
            Some(b) => plan_of(&mut plans, b.id, b.addr()).acknowledge.push(tp),
            None => refresh = true,
        }
    }
    if kind == RoundKind::Close {
        for (id, session) in &st.sessions {
            if session.is_open() {
                if let Some(b) = meta.brokers.get(id) {
                    plan_of(&mut plans, *id, b.addr());
                }
            }
        }
    }
    if refresh {
        s.cluster.request_refresh();
    }
    plans
}

/// A queued request and the partitions whose acknowledgements it carries.
type Queued = Result<(Pending, Vec<TopicPartition>)>;

/// Queues a ShareFetch of `plan.fetch` on the broker's session, carrying
/// the pending acknowledgements when the session epoch allows them.
async fn queue_fetch(
    s: &ShareShared,
    conn: &Connection,
    session: &mut ShareSession,
    plan: &BrokerPlan,
    ids: &HashMap<&str, [u8; 16]>,
    kind: RoundKind,
    sent: &mut HashMap<TopicPartition, AcknowledgementCounts>,
) -> Queued {
    let fetch_plan = session.plan_fetch(&plan.fetch);
    let mut parts: BTreeMap<SessionPartition, Vec<AcknowledgementBatch>> =
        fetch_plan.add.iter().map(|p| (*p, Vec::new())).collect();
    let mut acked = Vec::new();
    if fetch_plan.may_acknowledge {
        for tp in &plan.acknowledge {
            let Some(id) = ids.get(tp.topic.as_ref()) else {
                continue;
            };
            let batches = s.acquired().take(tp);
            if !batches.is_empty() {
                count_sent(s, sent, tp, &batches);
                parts.insert((*id, tp.partition), wire_batches(batches));
                acked.push(tp.clone());
            }
        }
    }
    let req = fetch_request(s, &fetch_plan.epoch, parts, &fetch_plan.forget, kind);
    let queued = match conn.version_for::<ShareFetchRequest>(SHARE_FETCH_VERSIONS) {
        Ok(v) => conn.enqueue(&req, v).await.map(Pending::Fetch),
        Err(e) => Err(e),
    };
    queued.map(|p| (p, acked))
}

/// Queues a ShareAcknowledge of the pending acknowledgements of `tps`
/// (with the final epoch on close); `None` when there is nothing to send.
/// Acknowledgements with no open session fail into `out` at once.
async fn queue_acknowledge(
    s: &ShareShared,
    conn: &Connection,
    session: &mut ShareSession,
    tps: &[TopicPartition],
    ids: &HashMap<&str, [u8; 16]>,
    kind: RoundKind,
    out: &mut RoundOutcome,
) -> Option<Queued> {
    let epoch = if kind == RoundKind::Close {
        session.close()
    } else {
        session.next_acknowledge()
    };
    let mut topics: BTreeMap<[u8; 16], Vec<AcknowledgePartition>> = BTreeMap::new();
    let mut acked = Vec::new();
    for tp in tps {
        let batches = s.acquired().take(tp);
        if batches.is_empty() {
            continue;
        }
        let Some(id) = ids.get(tp.topic.as_ref()).filter(|_| epoch.is_some()) else {
            // No session: the broker released these records when
            // the session ended; they will be delivered again.
            s.counters
                .acknowledgements_failed(&AcknowledgementCounts::of_batches(&batches));
            out.acks.push((
                tp.clone(),
                Err(Error::invalid_state(
                    conn.origin().clone(),
                    format!(
                        "ShareAcknowledge for {tp} in share group {}: no share session is open, the records were released and will be redelivered",
                        s.config.group_id
                    ),
                )),
            ));
            continue;
        };
        count_sent(s, &mut out.sent, tp, &batches);
        topics.entry(*id).or_default().push(
            AcknowledgePartition::default()
                .with_partition_index(tp.partition)
                .with_acknowledgement_batches(
                    batches
                        .into_iter()
                        .map(|b| {
                            AckReqBatch::default()
                                .with_first_offset(b.first)
                                .with_last_offset(b.last)
                                .with_acknowledge_types(b.types)
                        })
                        .collect(),
                ),
        );
        acked.push(tp.clone());
    }
    let epoch = epoch?;
    if topics.is_empty() && kind != RoundKind::Close {
        return None;
    }
    let req = ShareAcknowledgeRequest::default()
        .with_group_id(Some(group_id(s)))
        .with_member_id(Some(StrBytes::from_string(s.member_id.clone())))
        .with_share_session_epoch(epoch)
        .with_topics(
            topics
                .into_iter()
                .map(|(id, parts)| {
                    AcknowledgeTopic::default()
                        .with_topic_id(Uuid::from_bytes(id))
                        .with_partitions(parts)
                })
                .collect(),
        );
    let queued = match conn.version_for::<ShareAcknowledgeRequest>(SHARE_ACKNOWLEDGE_VERSIONS) {
        Ok(v) => conn.enqueue(&req, v).await.map(Pending::Ack),
        Err(e) => Err(e),
    };
    Some(queued.map(|p| (p, acked)))
}

/// Counts `batches` of `tp` as sent, and keeps them until their result.
fn count_sent(
    s: &ShareShared,
    sent: &mut HashMap<TopicPartition, AcknowledgementCounts>,
    tp: &TopicPartition,
    batches: &[AckBatch],
) {
    let counts = AcknowledgementCounts::of_batches(batches);
    s.counters.acknowledgements_sent(&counts);
    sent.entry(tp.clone()).or_default().merge(&counts);
}

/// Awaits every queued request in order and feeds its answer back; a
/// failed request or answer resets that broker's session.
async fn collect_answers(
    s: &ShareShared,
    st: &mut FetchState,
    sent: Vec<Sent>,
    names: &HashMap<[u8; 16], Arc<str>>,
    out: &mut RoundOutcome,
) {
    let limits = DecodeLimits {
        check_crc: s.config.check_crcs,
        max_decompressed_size: s.config.max_decompressed_size,
    };
    for sent in sent {
        let answer = match sent.pending {
            Pending::Fetch(p) => {
                let answer = p.wait().await;
                if answer.is_ok() {
                    s.counters.fetch_answered(sent.queued_at.elapsed());
                }
                answer.map(Answer::Fetch)
            }
            Pending::Ack(p) => p.wait().await.map(Answer::Ack),
        };
        let ctx = Context {
            s,
            names,
            broker: &sent.broker,
            limits: &limits,
        };
        match answer {
            Ok(answer) => {
                if let Err(e) = ctx.apply(st, answer, &sent.acked, out) {
                    st.sessions.entry(sent.broker_id).or_default().reset();
                    if !e.is_retriable() {
                        out.fatal.push(e);
                    }
                }
            }
            Err(e) => {
                warn!(broker = %sent.broker, group = %s.config.group_id, error = %e, "share request failed; the share session starts over");
                st.sessions.entry(sent.broker_id).or_default().reset();
                out.acks
                    .extend(sent.acked.iter().map(|tp| (tp.clone(), Err(e.clone()))));
                if !e.is_retriable() {
                    out.fatal.push(e);
                }
            }
        }
    }
}

fn fetch_request(
    s: &ShareShared,
    epoch: &i32,
    parts: BTreeMap<SessionPartition, Vec<AcknowledgementBatch>>,
    forget: &BTreeSet<SessionPartition>,
    kind: RoundKind,
) -> ShareFetchRequest {
    let max_wait = match kind {
        RoundKind::Fetch(d) => d.min(s.config.fetch_max_wait),
        _ => Duration::ZERO,
    };
    let mut topics: BTreeMap<[u8; 16], Vec<FetchPartition>> = BTreeMap::new();
    for ((id, p), acks) in parts {
        topics.entry(id).or_default().push(
            FetchPartition::default()
                .with_partition_index(p)
                .with_acknowledgement_batches(acks),
        );
    }
    let mut forgotten: BTreeMap<[u8; 16], Vec<i32>> = BTreeMap::new();
    for (id, p) in forget {
        forgotten.entry(*id).or_default().push(*p);
    }
    let max_records = i32::try_from(s.config.max_poll_records).unwrap_or(i32::MAX);
    ShareFetchRequest::default()
        .with_group_id(Some(group_id(s)))
        .with_member_id(Some(StrBytes::from_string(s.member_id.clone())))
        .with_share_session_epoch(*epoch)
        .with_max_wait_ms(i32::try_from(max_wait.as_millis()).unwrap_or(i32::MAX))
        .with_min_bytes(s.config.fetch_min_bytes)
        .with_max_bytes(s.config.fetch_max_bytes)
        .with_max_records(max_records)
        .with_batch_size(max_records)
        .with_topics(
            topics
                .into_iter()
                .map(|(id, ps)| {
                    FetchTopic::default()
                        .with_topic_id(Uuid::from_bytes(id))
                        .with_partitions(ps)
                })
                .collect(),
        )
        .with_forgotten_topics_data(
            forgotten
                .into_iter()
                .map(|(id, ps)| {
                    ForgottenTopic::default()
                        .with_topic_id(Uuid::from_bytes(id))
                        .with_partitions(ps)
                })
                .collect(),
        )
}

enum Answer {
    Fetch(ShareFetchResponse),
    Ack(ShareAcknowledgeResponse),
}

struct Context<'a> {
    s: &'a ShareShared,
    names: &'a HashMap<[u8; 16], Arc<str>>,
    broker: &'a str,
    limits: &'a DecodeLimits,
}

impl Context<'_> {
    fn error(&self, code: KafkaCode, api: &str, what: &str, message: Option<&StrBytes>) -> Error {
        let detail = message
            .map(|m| format!(": {}", m.as_str()))
            .unwrap_or_default();
        Error::Kafka {
            code,
            context: format!(
                "{api}{what} for share group {} at {}{detail}",
                self.s.config.group_id, self.broker
            ),
        }
    }

    /// Feeds one answer back; a top-level error is returned (after failing
    /// the partitions whose acknowledgements it carried).
    fn apply(
        &self,
        st: &mut FetchState,
        answer: Answer,
        acked: &[TopicPartition],
        out: &mut RoundOutcome,
    ) -> Result<()> {
        let (api, code, message) = match &answer {
            Answer::Fetch(r) => ("ShareFetch", r.error_code, r.error_message.as_ref()),
            Answer::Ack(r) => ("ShareAcknowledge", r.error_code, r.error_message.as_ref()),
        };
        if let Some(code) = KafkaCode::from_code(code) {
            let e = self.error(code, api, "", message);
            out.acks
                .extend(acked.iter().map(|tp| (tp.clone(), Err(e.clone()))));
            return Err(e);
        }
        let mut answered: BTreeSet<TopicPartition> = BTreeSet::new();
        match answer {
            Answer::Fetch(r) => {
                for topic in r.responses {
                    let Some(name) = self.names.get(topic.topic_id.as_bytes()) else {
                        self.s.cluster.request_refresh();
                        continue;
                    };
                    for p in topic.partitions {
                        let tp = TopicPartition::new(name.clone(), p.partition_index);
                        if acked.contains(&tp) {
                            let r = match KafkaCode::from_code(p.acknowledge_error_code) {
                                None => Ok(()),
                                Some(c) => Err(self.error(
                                    c,
                                    api,
                                    &format!(" acknowledgement of {tp}"),
                                    p.acknowledge_error_message.as_ref(),
                                )),
                            };
                            out.acks.push((tp.clone(), r));
                            answered.insert(tp.clone());
                        }
                        if let Some(code) = KafkaCode::from_code(p.error_code) {
                            self.partition_error(code, api, &tp, p.error_message.as_ref(), out);
                            continue;
                        }
                        self.take_records(st, &tp, p.records, &p.acquired_records, out);
                    }
                }
            }
            Answer::Ack(r) => {
                for topic in r.responses {
                    let Some(name) = self.names.get(topic.topic_id.as_bytes()) else {
                        continue;
                    };
                    for p in topic.partitions {
                        let tp = TopicPartition::new(name.clone(), p.partition_index);
                        let r = match KafkaCode::from_code(p.error_code) {
                            None => Ok(()),
                            Some(c) => {
                                if c.invalidates_metadata() {
                                    self.s.cluster.request_refresh();
                                }
                                Err(self.error(
                                    c,
                                    api,
                                    &format!(" of {tp}"),
                                    p.error_message.as_ref(),
                                ))
                            }
                        };
                        out.acks.push((tp.clone(), r));
                        answered.insert(tp);
                    }
                }
            }
        }
        // A partition the answer does not name had no error to report.
        for tp in acked {
            if !answered.contains(tp) {
                out.acks.push((tp.clone(), Ok(())));
            }
        }
        Ok(())
    }

    fn partition_error(
        &self,
        code: KafkaCode,
        api: &str,
        tp: &TopicPartition,
        message: Option<&StrBytes>,
        out: &mut RoundOutcome,
    ) {
        let e = self.error(code, api, &format!(" of {tp}"), message);
        if code.invalidates_metadata() {
            self.s.cluster.request_refresh();
        }
        if code.is_retriable() {
            debug!(error = %e, "share fetch partition error; retrying");
        } else {
            out.fatal.push(e);
        }
    }

    fn take_records(
        &self,
        st: &mut FetchState,
        tp: &TopicPartition,
        records: Option<bytes::Bytes>,
        acquired: &[kafka_protocol::messages::share_fetch_response::AcquiredRecords],
        out: &mut RoundOutcome,
    ) {
        let mut ranges: Vec<AcquiredRange> = acquired
            .iter()
            .map(|a| AcquiredRange {
                first: a.first_offset,
                last: a.last_offset,
                delivery_count: a.delivery_count,
            })
            .collect();
        let Some(first) = ranges.iter().map(|r| r.first).min() else {
            return;
        };
        let fetched = decode_fetched(
            tp,
            records.unwrap_or_default(),
            first,
            IsolationLevel::ReadUncommitted,
            AbortedTransactions::default(),
            self.limits,
        );
        if let Some(e) = fetched.error {
            // Offsets past the undecodable batch are not gaps: leave them
            // to their acquisition lock.
            let end = fetched.next_offset;
            ranges.retain(|r| r.first < end);
            for r in &mut ranges {
                r.last = r.last.min(end - 1);
            }
            out.fatal.push(e);
        }
        let records = self.s.acquired().on_fetched(tp, &ranges, fetched.records);
        self.s.counters.fetched(records.len());
        st.buffered.extend(records);
    }
}
