//! The transactional producer's driver (KIP-98, with transactions v2,
//! KIP-890, when the broker finalizes `transaction.version` ≥ 2): the state
//! lives in the pure machine of [`state`]; this module only feeds it the
//! application's calls, the sinks' reports and the coordinators' answers,
//! and runs what it asks for: each request once, a coordinator lookup
//! forgotten, a backoff slept. Which failures are retried, and when, is the
//! machine's decision.
//!
//! The transaction manager alone owns a transactional producer's id and
//! epoch: the machine decides them (InitProducerId, a v2 EndTxn, the bump
//! after an abort) and the driver mirrors them into the [`Idempotence`]
//! cell the sinks read.
//!
//! Protocol: <https://kafka.apache.org/protocol#The_Messages_EndTxn>.

mod state;
#[cfg(test)]
mod tests;

use std::collections::{HashMap, VecDeque};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use kafka_protocol::messages::add_partitions_to_txn_request::AddPartitionsToTxnTopic;
use kafka_protocol::messages::txn_offset_commit_request::{
    TxnOffsetCommitRequestPartition, TxnOffsetCommitRequestTopic,
};
use kafka_protocol::messages::{
    AddOffsetsToTxnRequest, AddPartitionsToTxnRequest, EndTxnRequest, GroupId,
    InitProducerIdRequest, InitProducerIdResponse, ProducerId as WireProducerId, TopicName,
    TransactionalId, TxnOffsetCommitRequest,
};
use kafka_protocol::protocol::{Request, StrBytes};
use tokio::sync::watch;
use tokio::time::Instant;

use self::state::{Action, Event, Request as TxnRequest, RetryLimits, TxnMachine};
pub(crate) use self::state::{CONCURRENT_TXN_BACKOFF, CONCURRENT_TXN_FAST_ATTEMPTS};
use super::idempotence::{Idempotence, ProducerId};
use crate::cluster::{Cluster, CoordinatorKind};
use crate::config::ClientConfig;
use crate::error::KafkaCode;
use crate::error::{Error, Origin, Result, TxnErrorKind};
use crate::group_metadata::{ConsumerGroupMetadata, OffsetAndMetadata, PublishedMembership};
use crate::net::Workload;
use crate::protocol::versions::Versions;
use crate::TopicPartition;

/// The transaction manager of one producer.
#[derive(Debug)]
pub(crate) struct Transactions {
    pub id: String,
    timeout: Duration,
    machine: Mutex<TxnMachine>,
    /// The producer id and epoch the sinks send with, as the machine set
    /// them; also where a sink's bump request waits for the machine.
    producer: Idempotence,
}

/// The offsets of a `send_offsets_to_transaction` call, for TxnOffsetCommit:
/// the group as the caller read it, and the member's published membership
/// when the caller handed it over (see [`Transactions::send_offsets_watched`]).
type Offsets<'a> = (
    &'a HashMap<TopicPartition, OffsetAndMetadata>,
    &'a ConsumerGroupMetadata,
    Option<&'a watch::Receiver<PublishedMembership>>,
);

/// Tells the machine when a call's future is dropped before its answer.
struct Running<'a> {
    txn: &'a Transactions,
    /// The request out (or backing off), if any.
    out: Option<TxnRequest>,
    done: bool,
}

impl Drop for Running<'_> {
    fn drop(&mut self) {
        if !self.done {
            self.txn.handle(Event::Cancelled(self.out));
        }
    }
}

/// What one attempt at a coordinator request came to.
enum Attempt<T> {
    /// The request went out: its answer, or why none came.
    Sent(Result<T>),
    /// It never left: no coordinator found, or no connection to it.
    Unsent(Error),
}

impl<T> Attempt<T> {
    fn map<U>(self, f: impl FnOnce(T) -> U) -> Attempt<U> {
        match self {
            Attempt::Sent(r) => Attempt::Sent(r.map(f)),
            Attempt::Unsent(e) => Attempt::Unsent(e),
        }
    }

    /// The event for the machine: `answer` of the result, or the request
    /// unsent.
    fn event(self, request: TxnRequest, answer: impl FnOnce(Result<T>) -> Event) -> Event {
        match self {
            Attempt::Sent(result) => answer(result),
            Attempt::Unsent(error) => Event::Unreachable { request, error },
        }
    }
}

/// The machine's retry limits from the client's settings.
fn limits(cfg: &ClientConfig) -> RetryLimits {
    RetryLimits {
        api_timeout: cfg.default_api_timeout,
        max_backoff: cfg.retry_backoff_max,
    }
}

impl Transactions {
    pub fn new(id: String, timeout: Duration, max_version: i16) -> Transactions {
        Transactions {
            machine: Mutex::new(TxnMachine::new(
                id.clone(),
                max_version,
                limits(&ClientConfig::default()),
            )),
            id,
            timeout,
            producer: Idempotence::transactional(),
        }
    }

    /// The machine, told first of any epoch bump a sink asked for.
    fn machine(&self) -> MutexGuard<'_, TxnMachine> {
        let mut m = self.machine.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(from) = self.producer.take_bump_request() {
            m.handle(Event::BumpNeeded { from }, Instant::now());
        }
        m
    }

    /// Feeds `event` to the machine now.
    fn handle(&self, event: Event) -> Vec<Action> {
        self.machine().handle(event, Instant::now())
    }

    /// The producer id and epoch state the sinks send with.
    pub fn producer(&self) -> &Idempotence {
        &self.producer
    }

    pub fn is_v2(&self) -> bool {
        self.machine().is_v2()
    }

    /// An error of `kind` for this transactional id.
    pub fn error(&self, kind: TxnErrorKind, cause: Error) -> Error {
        self.machine().error(kind, cause)
    }

    /// Checks that records may be sent now.
    pub fn check_send(&self) -> Result<()> {
        self.machine().send_blocker().map_or(Ok(()), Err)
    }

    /// Notes that `tp` has records in this transaction. Returns true when a
    /// v1 AddPartitionsToTxn is needed for it.
    pub fn note_partition(&self, tp: &TopicPartition) -> bool {
        self.machine().note_partition(tp)
    }

    /// Whether batches of `tp` may go out (v1: after the coordinator added
    /// the partition).
    pub fn can_send(&self, tp: &TopicPartition) -> bool {
        self.machine().can_send(tp)
    }

    /// Records a failed batch: the transaction can no longer commit.
    pub fn batch_failed(&self, err: &Error) {
        self.handle(Event::BatchFailed(err.clone()));
    }

    /// InitProducerId for the transactional id: fences older producers with
    /// the same id and completes or aborts their open transaction; the new
    /// id and epoch are the producer's from then on.
    pub async fn init(&self, cluster: &Cluster) -> Result<()> {
        self.drive(cluster, Event::Init, None).await.0
    }

    pub fn begin(&self) -> Result<()> {
        done(self.handle(Event::Begin))
    }

    /// Sends AddPartitionsToTxn for every pending partition (v1). Partitions
    /// are batched into one request. Nothing is sent before
    /// `init_transactions` gave the producer an id.
    pub async fn add_pending(&self, cluster: &Cluster) -> Result<()> {
        self.drive(cluster, Event::AddPartitionsDue, None).await.0
    }

    /// v1: AddOffsetsToTxn; then TxnOffsetCommit to the group coordinator.
    pub async fn send_offsets(
        &self,
        cluster: &Cluster,
        offsets: &HashMap<TopicPartition, OffsetAndMetadata>,
        group: &ConsumerGroupMetadata,
    ) -> Result<()> {
        let event = Event::SendOffsets {
            group: group.group_id.clone(),
        };
        self.drive(cluster, event, Some((offsets, group, None)))
            .await
            .0
    }

    /// [`send_offsets`](Self::send_offsets) for the member `membership`
    /// publishes: its identity now, and a TxnOffsetCommit refused with
    /// STALE_MEMBER_EPOCH sent again with the member's next epoch (see
    /// [`commit_offsets`](Self::commit_offsets)).
    pub async fn send_offsets_watched(
        &self,
        cluster: &Cluster,
        offsets: &HashMap<TopicPartition, OffsetAndMetadata>,
        membership: &watch::Receiver<PublishedMembership>,
    ) -> Result<()> {
        let group = membership.borrow().metadata.clone();
        let event = Event::SendOffsets {
            group: group.group_id.clone(),
        };
        self.drive(cluster, event, Some((offsets, &group, Some(membership))))
            .await
            .0
    }

    /// The error for `commit_transaction` to return, if the transaction
    /// cannot commit.
    pub fn commit_blocker(&self) -> Option<Error> {
        self.machine().commit_blocker()
    }

    /// Whether `abort_transaction` may run now.
    pub fn check_abort(&self) -> Result<()> {
        self.machine().abort_blocker().map_or(Ok(()), Err)
    }

    /// Ends the transaction. Returns whether the producer moved to a new
    /// epoch for the next one, which is then the producer's: a v2 EndTxn
    /// bumps it; an abort bumps it with InitProducerId when EndTxn did not
    /// (always with v1 after records went out, and whenever a bump is owed).
    pub async fn end(&self, cluster: &Cluster, commit: bool) -> Result<bool> {
        let event = if commit { Event::Commit } else { Event::Abort };
        let (result, moved) = self.drive(cluster, event, None).await;
        result.map(|()| moved)
    }

    /// Feeds `event` to the machine and runs the actions it answers with,
    /// feeding back each request's answer and each timer, until it
    /// completes the call. Returns the call's result and whether the
    /// producer id or epoch moved.
    async fn drive(
        &self,
        cluster: &Cluster,
        event: Event,
        offsets: Option<Offsets<'_>>,
    ) -> (Result<()>, bool) {
        let mut running = Running {
            txn: self,
            out: None,
            done: false,
        };
        let mut moved = false;
        let mut queue: VecDeque<Action> = {
            let mut m = self.machine();
            m.set_limits(limits(cluster.config()));
            m.handle(event, Instant::now()).into()
        };
        while let Some(action) = queue.pop_front() {
            running.out = TxnRequest::of(&action).or(running.out);
            let answer = match action {
                Action::Done(result) => {
                    running.done = true;
                    return (result, moved);
                }
                Action::UseProducer(p) => {
                    tracing::info!(transactional_id = %self.id, producer_id = p.id, epoch = p.epoch, "transactional producer id and epoch");
                    self.producer.set(p);
                    moved = true;
                    continue;
                }
                Action::Rediscover(kind) => {
                    let key = match (kind, offsets) {
                        (CoordinatorKind::Group, Some((_, group, _))) => &group.group_id,
                        _ => &self.id,
                    };
                    cluster.invalidate_coordinator(kind, key);
                    continue;
                }
                Action::Backoff { request, delay } => {
                    tracing::debug!(transactional_id = %self.id, ?request, ?delay, "transactional request retried");
                    tokio::time::sleep(delay).await;
                    Event::TimerFired(request)
                }
                Action::InitProducerId { bump_from } => self
                    .init_producer_id(cluster, bump_from)
                    .await
                    .event(TxnRequest::InitProducerId, Event::InitProducerId),
                Action::AddPartitions {
                    producer,
                    partitions,
                } => self
                    .add_partitions(cluster, producer, &partitions)
                    .await
                    .event(TxnRequest::AddPartitions, |result| Event::AddPartitions {
                        partitions,
                        result,
                    }),
                Action::AddOffsets { producer, group } => self
                    .add_offsets(cluster, producer, &group)
                    .await
                    .event(TxnRequest::AddOffsets, Event::AddOffsets),
                Action::TxnOffsetCommit { producer } => Event::TxnOffsetCommit(match offsets {
                    Some((offsets, group, watched)) => {
                        self.commit_offsets(cluster, producer, offsets, group, watched)
                            .await
                    }
                    None => Err(Error::invalid_state(
                        Origin::Producer,
                        "TxnOffsetCommit without offsets",
                    )),
                }),
                Action::EndTxn { producer, commit } => self
                    .end_txn(cluster, producer, commit)
                    .await
                    .event(TxnRequest::EndTxn, Event::EndTxn),
            };
            if let Event::InitProducerId(Err(e))
            | Event::AddPartitions { result: Err(e), .. }
            | Event::AddOffsets(Err(e))
            | Event::TxnOffsetCommit(Err(e))
            | Event::EndTxn(Err(e))
            | Event::Unreachable { error: e, .. } = &answer
            {
                tracing::debug!(transactional_id = %self.id, error = %e, "transactional request failed");
            }
            queue.extend(self.handle(answer));
        }
        running.done = true;
        let e = Error::invalid_state(
            Origin::Producer,
            "the transaction manager ended a call without an answer",
        );
        (Err(e), moved)
    }

    /// TxnOffsetCommit for `group`. With the member's membership watched, a
    /// refusal with STALE_MEMBER_EPOCH is sent again once the member has
    /// published a newer epoch at which it still owns every partition
    /// committed, within `default.api.timeout.ms`: a heartbeat answered
    /// between reading the epoch and the coordinator taking the commit moved
    /// it, and KIP-848 and KIP-1071 coordinators check a `TxnOffsetCommit`'s
    /// epoch exactly (Java's consumer likewise retries its commits after a
    /// new member epoch). The refused request staged nothing, so sending it
    /// again is safe; a member that lost a partition, its place in the group
    /// or its member id meanwhile keeps the refusal.
    async fn commit_offsets(
        &self,
        cluster: &Cluster,
        producer: ProducerId,
        offsets: &HashMap<TopicPartition, OffsetAndMetadata>,
        group: &ConsumerGroupMetadata,
        watched: Option<&watch::Receiver<PublishedMembership>>,
    ) -> Result<()> {
        let v2 = self.is_v2();
        let Some(watched) = watched else {
            return txn_offset_commit(cluster, &self.id, producer, offsets, group, v2).await;
        };
        let mut watched = watched.clone();
        let deadline = Instant::now() + cluster.config().default_api_timeout;
        let mut group = group.clone();
        loop {
            let result = txn_offset_commit(cluster, &self.id, producer, offsets, &group, v2).await;
            let stale =
                matches!(&result, Err(e) if e.kafka_code() == Some(KafkaCode::STALE_MEMBER_EPOCH));
            if !stale {
                return result;
            }
            let sent = group.generation_id;
            let newer = tokio::time::timeout_at(
                deadline,
                watched.wait_for(|m| {
                    m.metadata.member_id == group.member_id && m.metadata.generation_id > sent
                }),
            )
            .await;
            let next = match newer {
                Ok(Ok(m)) => m.clone(),
                _ => return result,
            };
            if !offsets.keys().all(|tp| next.owned.contains(tp)) {
                return result;
            }
            tracing::debug!(transactional_id = %self.id, group = %group.group_id, from = sent, to = next.metadata.generation_id, "TxnOffsetCommit sent again with the member's newer epoch");
            group = next.metadata;
        }
    }

    /// InitProducerId to the transaction coordinator; with `bump_from`, the
    /// epoch bump of KIP-360 (a broker before v3 gets a plain InitProducerId
    /// for the transactional id, which also bumps). Answers the id and
    /// whether the coordinator finalizes transactions v2.
    async fn init_producer_id(
        &self,
        cluster: &Cluster,
        bump_from: Option<ProducerId>,
    ) -> Attempt<(ProducerId, bool)> {
        let code = |r: &InitProducerIdResponse| r.error_code;
        let attempt = match bump_from {
            None => {
                let req = self.init_request(None);
                self.coordinator_call(cluster, "InitProducerId", Versions::new(0, 5), &req, code)
                    .await
            }
            Some(from) => {
                let what = "InitProducerId(epoch bump)";
                let req = self.init_request(Some(from));
                let attempt = self
                    .coordinator_call(cluster, what, Versions::new(3, 5), &req, code)
                    .await;
                if let Attempt::Sent(Err(Error::UnsupportedVersion { .. })) = attempt {
                    let req = self.init_request(None);
                    self.coordinator_call(cluster, what, Versions::new(0, 5), &req, code)
                        .await
                } else {
                    attempt
                }
            }
        };
        attempt.map(|(resp, v2)| {
            let id = ProducerId {
                id: resp.producer_id.0,
                epoch: resp.producer_epoch,
            };
            (id, v2)
        })
    }

    /// InitProducerId for the transactional id and `transaction.timeout.ms`;
    /// with `bump_from`, asking to bump that id's epoch (the fields exist
    /// from v3, KIP-360).
    fn init_request(&self, bump_from: Option<ProducerId>) -> InitProducerIdRequest {
        let from = bump_from.unwrap_or(ProducerId { id: -1, epoch: -1 });
        let timeout_ms = self.timeout.as_millis().min(i32::MAX as u128) as i32;
        InitProducerIdRequest::default()
            .with_transactional_id(Some(TransactionalId(StrBytes::from_string(
                self.id.clone(),
            ))))
            .with_transaction_timeout_ms(timeout_ms)
            .with_producer_id(WireProducerId(from.id))
            .with_producer_epoch(from.epoch)
    }

    async fn add_partitions(
        &self,
        cluster: &Cluster,
        producer: ProducerId,
        partitions: &[TopicPartition],
    ) -> Attempt<()> {
        let mut by_topic: HashMap<&str, Vec<i32>> = HashMap::new();
        for tp in partitions {
            by_topic.entry(&tp.topic).or_default().push(tp.partition);
        }
        let req = AddPartitionsToTxnRequest::default()
            .with_v3_and_below_transactional_id(TransactionalId(StrBytes::from_string(
                self.id.clone(),
            )))
            .with_v3_and_below_producer_id(WireProducerId(producer.id))
            .with_v3_and_below_producer_epoch(producer.epoch)
            .with_v3_and_below_topics(
                by_topic
                    .into_iter()
                    .map(|(t, ps)| {
                        AddPartitionsToTxnTopic::default()
                            .with_name(TopicName(StrBytes::from_string(t.to_owned())))
                            .with_partitions(ps)
                    })
                    .collect(),
            );
        self.coordinator_call(
            cluster,
            "AddPartitionsToTxn",
            Versions::new(0, 3),
            &req,
            |r| {
                // The first partition error stands for the request: the
                // coordinator adds all or none.
                r.results_by_topic_v3_and_below
                    .iter()
                    .flat_map(|t| t.results_by_partition.iter())
                    .map(|p| p.partition_error_code)
                    .find(|c| *c != 0)
                    .unwrap_or(0)
            },
        )
        .await
        .map(|_| ())
    }

    async fn add_offsets(
        &self,
        cluster: &Cluster,
        producer: ProducerId,
        group: &str,
    ) -> Attempt<()> {
        let req = AddOffsetsToTxnRequest::default()
            .with_transactional_id(TransactionalId(StrBytes::from_string(self.id.clone())))
            .with_producer_id(WireProducerId(producer.id))
            .with_producer_epoch(producer.epoch)
            .with_group_id(GroupId(StrBytes::from_string(group.to_owned())));
        self.coordinator_call(cluster, "AddOffsetsToTxn", Versions::new(0, 4), &req, |r| {
            r.error_code
        })
        .await
        .map(|_| ())
    }

    /// EndTxn; returns the producer id and epoch it answered with (v2), if
    /// any.
    async fn end_txn(
        &self,
        cluster: &Cluster,
        producer: ProducerId,
        commit: bool,
    ) -> Attempt<Option<ProducerId>> {
        let versions = if self.is_v2() {
            END_TXN_VERSIONS_V2
        } else {
            END_TXN_VERSIONS_V1
        };
        let req = EndTxnRequest::default()
            .with_transactional_id(TransactionalId(StrBytes::from_string(self.id.clone())))
            .with_producer_id(WireProducerId(producer.id))
            .with_producer_epoch(producer.epoch)
            .with_committed(commit);
        let what = if commit {
            "EndTxn(commit)"
        } else {
            "EndTxn(abort)"
        };
        self.coordinator_call(cluster, what, versions, &req, |r| r.error_code)
            .await
            .map(|(resp, _)| {
                (resp.producer_id.0 >= 0 && resp.producer_epoch >= 0).then_some(ProducerId {
                    id: resp.producer_id.0,
                    epoch: resp.producer_epoch,
                })
            })
    }

    /// Sends `req` to the transaction coordinator once. Answers the
    /// response and whether the coordinator finalizes transactions v2.
    async fn coordinator_call<R, F>(
        &self,
        cluster: &Cluster,
        what: &str,
        versions: Versions,
        req: &R,
        code_of: F,
    ) -> Attempt<(R::Response, bool)>
    where
        R: Request,
        F: Fn(&R::Response) -> i16,
    {
        let reached = async {
            let addr = cluster
                .coordinator(CoordinatorKind::Transaction, &self.id)
                .await?;
            let conn = cluster.connection(&addr, Workload::Admin).await?;
            Ok((addr, conn))
        };
        let (addr, conn) = match reached.await {
            Ok(reached) => reached,
            Err(e) => return Attempt::Unsent(e),
        };
        let v2 = conn
            .api_versions()
            .feature_level("transaction.version")
            .is_some_and(|l| l >= 2);
        Attempt::Sent(conn.send(req, versions).await.and_then(|resp| {
            Error::check(code_of(&resp), || {
                format!("{what} for transactional id {} on {addr}", self.id)
            })?;
            Ok((resp, v2))
        }))
    }
}

/// EndTxn and TxnOffsetCommit v5 are transactions v2 (KIP-890): a broker
/// that finalizes it bumps the epoch at EndTxn even when the partitions
/// were added the v1 way, and lets the group join implicitly; a v1
/// transaction stays below v5, as in Java.
const END_TXN_VERSIONS_V1: Versions = Versions::new(0, 4);
const END_TXN_VERSIONS_V2: Versions = Versions::new(0, 5);
const TXN_OFFSET_COMMIT_VERSIONS_V1: Versions = Versions::new(0, 4);
const TXN_OFFSET_COMMIT_VERSIONS_V2: Versions = Versions::new(0, 5);

/// The result a synchronous call completes with.
fn done(actions: Vec<Action>) -> Result<()> {
    actions
        .into_iter()
        .find_map(|a| match a {
            Action::Done(result) => Some(result),
            _ => None,
        })
        .unwrap_or(Ok(()))
}

/// TxnOffsetCommit to `group`'s coordinator, once. Resending it only
/// stages the same offsets again in the open transaction: harmless, so the
/// machine retries it past a lost connection after looking the coordinator
/// up again.
async fn txn_offset_commit(
    cluster: &Cluster,
    transactional_id: &str,
    producer: ProducerId,
    offsets: &HashMap<TopicPartition, OffsetAndMetadata>,
    group: &ConsumerGroupMetadata,
    v2: bool,
) -> Result<()> {
    let versions = if v2 {
        TXN_OFFSET_COMMIT_VERSIONS_V2
    } else {
        TXN_OFFSET_COMMIT_VERSIONS_V1
    };
    let mut topics: HashMap<&str, Vec<TxnOffsetCommitRequestPartition>> = HashMap::new();
    for (tp, om) in offsets {
        topics.entry(&tp.topic).or_default().push(
            TxnOffsetCommitRequestPartition::default()
                .with_partition_index(tp.partition)
                .with_committed_offset(om.offset)
                .with_committed_leader_epoch(om.leader_epoch.unwrap_or(-1))
                .with_committed_metadata(Some(StrBytes::from_string(om.metadata.clone()))),
        );
    }
    let req = TxnOffsetCommitRequest::default()
        .with_transactional_id(TransactionalId(StrBytes::from_string(
            transactional_id.to_owned(),
        )))
        .with_group_id(GroupId(StrBytes::from_string(group.group_id.clone())))
        .with_producer_id(WireProducerId(producer.id))
        .with_producer_epoch(producer.epoch)
        .with_generation_id(group.generation_id)
        .with_member_id(StrBytes::from_string(group.member_id.clone()))
        .with_group_instance_id(group.group_instance_id.clone().map(StrBytes::from_string))
        .with_topics(
            topics
                .into_iter()
                .map(|(t, ps)| {
                    TxnOffsetCommitRequestTopic::default()
                        .with_name(TopicName(StrBytes::from_string(t.to_owned())))
                        .with_partitions(ps)
                })
                .collect(),
        );
    let coordinator = cluster
        .coordinator(CoordinatorKind::Group, &group.group_id)
        .await?;
    let resp = cluster
        .send(&coordinator, Workload::Group, &req, versions)
        .await?;
    let code = resp
        .topics
        .iter()
        .flat_map(|t| t.partitions.iter())
        .map(|p| p.error_code)
        .find(|c| *c != 0)
        .unwrap_or(0);
    Error::check(code, || {
        format!(
            "TxnOffsetCommit for group {} on {coordinator}",
            group.group_id
        )
    })
}
