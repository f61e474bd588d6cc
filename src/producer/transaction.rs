//! The transactional producer's state and its requests to the transaction
//! coordinator (KIP-98), with transactions v2 (KIP-890) when the broker
//! finalizes `transaction.version` ≥ 2.
//!
//! - v1: a partition is added with AddPartitionsToTxn before its first
//!   batch of a transaction is sent (added partitions are batched into one
//!   request); offsets are added with AddOffsetsToTxn; Produce stays at v11.
//! - v2: Produce v12 adds partitions implicitly, AddOffsetsToTxn is skipped,
//!   and EndTxn returns the epoch for the next transaction.
//!
//! Errors are classed as the application must react (see
//! [`TxnErrorKind`]): fenced or unauthorised producers are fatal; a failed
//! send makes the transaction abortable; a timeout or lost connection while
//! ending a transaction or adding partitions leaves its outcome unknown
//! (indefinite), and the producer must be initialised again.
//!
//! The transaction manager alone owns a transactional producer's id and
//! epoch: `init_transactions` sets them, a v2 EndTxn moves them on, and the
//! sinks read them.
//!
//! Protocol: <https://kafka.apache.org/protocol#The_Messages_EndTxn>.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering as AtomicOrdering};
use std::sync::Mutex;
use std::time::Duration;

use kafka_protocol::messages::add_partitions_to_txn_request::AddPartitionsToTxnTopic;
use kafka_protocol::messages::txn_offset_commit_request::{
    TxnOffsetCommitRequestPartition, TxnOffsetCommitRequestTopic,
};
use kafka_protocol::messages::{
    AddOffsetsToTxnRequest, AddPartitionsToTxnRequest, EndTxnRequest, GroupId,
    InitProducerIdResponse, ProducerId as WireProducerId, TopicName, TransactionalId,
    TxnOffsetCommitRequest,
};
use kafka_protocol::protocol::{Request, StrBytes};
use tokio::time::Instant;

use super::idempotence::{init_request, Idempotence, ProducerId};
use crate::cluster::{Cluster, CoordinatorKind};
use crate::config::ClientConfig;
use crate::error::{Error, KafkaCode, Result, TxnErrorKind};
use crate::group_metadata::{ConsumerGroupMetadata, OffsetAndMetadata};
use crate::net::Workload;
use crate::protocol::versions::Versions;
use crate::TopicPartition;

/// Where the transactional producer stands.
#[derive(Debug, Clone)]
enum Phase {
    /// `init_transactions` not (successfully) called yet.
    Uninitialized,
    /// Between transactions.
    Ready,
    /// Inside `begin_transaction` .. commit/abort.
    InTransaction,
    /// A send failed: only `abort_transaction` is allowed.
    Abortable(Error),
    /// The outcome of ending or extending a transaction is unknown.
    Indefinite(Error),
    /// Fenced or unauthorised: only closing is left.
    Fatal(Error),
}

#[derive(Debug)]
struct State {
    phase: Phase,
    /// v1: partitions the coordinator confirmed for this transaction.
    added: HashSet<TopicPartition>,
    /// v1: partitions with records waiting for AddPartitionsToTxn.
    pending: HashSet<TopicPartition>,
    /// Anything reached the broker in this transaction (records or offsets),
    /// so it must be ended with EndTxn.
    started: bool,
}

/// The transaction manager of one producer.
#[derive(Debug)]
pub(crate) struct Transactions {
    pub id: String,
    timeout: Duration,
    /// Transactions v2 (KIP-890) in use; decided by `init_transactions`.
    v2: Mutex<bool>,
    /// purekafka.transaction.version.max: 1 forces v1 (tests), 2 allows v2.
    max_version: i16,
    state: Mutex<State>,
    /// The producer id and epoch; none before `init_transactions`.
    producer: Idempotence,
}

impl Transactions {
    pub fn new(id: String, timeout: Duration, max_version: i16) -> Transactions {
        Transactions {
            id,
            timeout,
            v2: Mutex::new(false),
            max_version,
            state: Mutex::new(State {
                phase: Phase::Uninitialized,
                added: HashSet::new(),
                pending: HashSet::new(),
                started: false,
            }),
            producer: Idempotence::transactional(),
        }
    }

    /// The producer id and epoch state the sinks send with.
    pub fn producer(&self) -> &Idempotence {
        &self.producer
    }

    /// The producer id and epoch, or an error when there is none yet.
    fn current(&self) -> Result<ProducerId> {
        self.producer.current().ok_or_else(|| {
            Error::invalid_state(
                crate::error::Origin::Producer,
                "no producer id yet: call init_transactions first",
            )
        })
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn is_v2(&self) -> bool {
        *self.v2.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// An error of `kind` for this transactional id.
    pub fn error(&self, kind: TxnErrorKind, cause: Error) -> Error {
        Error::Transaction {
            transactional_id: self.id.clone(),
            kind,
            cause: Box::new(cause),
        }
    }

    fn invalid(&self, what: &str) -> Error {
        self.error(
            TxnErrorKind::InvalidState,
            Error::invalid_state(crate::error::Origin::Producer, what),
        )
    }

    /// The error standing in the way of new work, if any.
    fn blocked(&self, phase: &Phase) -> Option<Error> {
        match phase {
            Phase::Abortable(e) => Some(self.error(TxnErrorKind::Abortable, e.clone())),
            Phase::Indefinite(e) => Some(self.error(TxnErrorKind::Indefinite, e.clone())),
            Phase::Fatal(e) => Some(self.error(TxnErrorKind::Fatal, e.clone())),
            _ => None,
        }
    }

    /// A bump the sinks asked for (KIP-360: the broker lost this producer's
    /// sequence state, or a batch's outcome is unknown) leaves the open
    /// transaction only abortable, as in Java; the abort runs the bump.
    fn note_bump(&self, s: &mut State) {
        if matches!(s.phase, Phase::InTransaction) && self.producer.bump_required() {
            s.phase = Phase::Abortable(Error::invalid_state(
                crate::error::Origin::Producer,
                "a batch's outcome is unknown or the broker lost this producer's sequence \
                 state: abort the transaction, which bumps the producer epoch (KIP-360)",
            ));
        }
    }

    /// Checks that records may be sent now.
    pub fn check_send(&self) -> Result<()> {
        let mut s = self.state();
        self.note_bump(&mut s);
        if let Some(e) = self.blocked(&s.phase) {
            return Err(e);
        }
        match s.phase {
            Phase::InTransaction => Ok(()),
            _ => Err(self.invalid("send outside a transaction: call begin_transaction first")),
        }
    }

    /// Notes that `tp` has records in this transaction. Returns true when a
    /// v1 AddPartitionsToTxn is needed for it.
    pub fn note_partition(&self, tp: &TopicPartition) -> bool {
        let mut s = self.state();
        s.started = true;
        if self.is_v2() || s.added.contains(tp) || s.pending.contains(tp) {
            return false;
        }
        s.pending.insert(tp.clone());
        true
    }

    /// Whether batches of `tp` may go out (v1: after the coordinator added
    /// the partition).
    pub fn can_send(&self, tp: &TopicPartition) -> bool {
        self.is_v2() || self.state().added.contains(tp)
    }

    /// Records a failed batch: the transaction can no longer commit.
    pub fn batch_failed(&self, err: &Error) {
        let mut s = self.state();
        let fatal = matches!(
            err.kafka_code(),
            Some(KafkaCode::PRODUCER_FENCED)
                | Some(KafkaCode::INVALID_PRODUCER_EPOCH)
                | Some(KafkaCode::TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
        );
        match s.phase {
            Phase::Fatal(_) => {}
            _ if fatal => s.phase = Phase::Fatal(err.clone()),
            Phase::InTransaction => s.phase = Phase::Abortable(err.clone()),
            _ => {}
        }
    }

    /// InitProducerId for the transactional id: fences older producers with
    /// the same id and completes or aborts their open transaction; the new
    /// id and epoch are the producer's from then on.
    pub async fn init(&self, cluster: &Cluster) -> Result<()> {
        {
            let s = self.state();
            if let Phase::Fatal(e) = &s.phase {
                return Err(self.error(TxnErrorKind::Fatal, e.clone()));
            }
            if matches!(s.phase, Phase::InTransaction) {
                return Err(self.invalid("init_transactions inside a transaction"));
            }
        }
        let req = init_request(Some((&self.id, self.timeout)), None);
        let (resp, v2) = self
            .coordinator_call(
                cluster,
                "InitProducerId",
                Versions::new(0, 5),
                &req,
                true,
                |r| r.error_code,
            )
            .await
            .map_err(|e| self.classify_setup_error(e))?;
        *self.v2.lock().unwrap_or_else(|p| p.into_inner()) = v2;
        let mut s = self.state();
        s.phase = Phase::Ready;
        s.added.clear();
        s.pending.clear();
        s.started = false;
        drop(s);
        tracing::info!(transactional_id = %self.id, producer_id = resp.producer_id.0, epoch = resp.producer_epoch, v2, "transactions initialised");
        self.producer.set(ProducerId {
            id: resp.producer_id.0,
            epoch: resp.producer_epoch,
        });
        Ok(())
    }

    pub fn begin(&self) -> Result<()> {
        let mut s = self.state();
        if let Some(e) = self.blocked(&s.phase) {
            return Err(e);
        }
        match s.phase {
            Phase::Ready => {
                s.phase = Phase::InTransaction;
                s.added.clear();
                s.pending.clear();
                s.started = false;
                Ok(())
            }
            Phase::Uninitialized => Err(self.invalid("call init_transactions first")),
            _ => Err(self.invalid("a transaction is already open")),
        }
    }

    /// Sends AddPartitionsToTxn for every pending partition (v1). Partitions
    /// are batched into one request. Nothing is sent before
    /// `init_transactions` gave the producer an id.
    pub async fn add_pending(&self, cluster: &Cluster) -> Result<()> {
        let Ok(producer) = self.current() else {
            return Ok(());
        };
        let pending: Vec<TopicPartition> = {
            let s = self.state();
            s.pending.iter().cloned().collect()
        };
        if pending.is_empty() {
            return Ok(());
        }
        let mut by_topic: HashMap<&str, Vec<i32>> = HashMap::new();
        for tp in &pending {
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
        let result = self
            .coordinator_call(
                cluster,
                "AddPartitionsToTxn",
                Versions::new(0, 3),
                &req,
                true,
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
            .await;
        let mut s = self.state();
        match result {
            Ok(_) => {
                for tp in pending {
                    s.pending.remove(&tp);
                    s.added.insert(tp);
                }
                Ok(())
            }
            Err(e) => {
                let kind = self.kind_of(&e, false);
                let phase_err = e.clone();
                s.phase = match kind {
                    TxnErrorKind::Fatal => Phase::Fatal(phase_err),
                    TxnErrorKind::Indefinite => Phase::Indefinite(phase_err),
                    _ => Phase::Abortable(phase_err),
                };
                Err(self.error(kind, e))
            }
        }
    }

    /// v1: AddOffsetsToTxn; then TxnOffsetCommit to the group coordinator.
    pub async fn send_offsets(
        &self,
        cluster: &Cluster,
        offsets: &HashMap<TopicPartition, OffsetAndMetadata>,
        group: &ConsumerGroupMetadata,
    ) -> Result<()> {
        let producer = self.current()?;
        self.check_send()?;
        self.state().started = true;
        if !self.is_v2() {
            let req = AddOffsetsToTxnRequest::default()
                .with_transactional_id(TransactionalId(StrBytes::from_string(self.id.clone())))
                .with_producer_id(WireProducerId(producer.id))
                .with_producer_epoch(producer.epoch)
                .with_group_id(GroupId(StrBytes::from_string(group.group_id.clone())));
            if let Err(e) = self
                .coordinator_call(
                    cluster,
                    "AddOffsetsToTxn",
                    Versions::new(0, 4),
                    &req,
                    true,
                    |r| r.error_code,
                )
                .await
            {
                return Err(self.fail(e));
            }
        }
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
            .with_transactional_id(TransactionalId(StrBytes::from_string(self.id.clone())))
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
        // Resending TxnOffsetCommit only stages the same offsets again in
        // the open transaction: harmless, so a killed group coordinator is
        // looked up again instead of failing the transaction.
        let call = retry(
            cluster.config(),
            "TxnOffsetCommit",
            |_| true,
            || async {
                let coordinator = cluster
                    .coordinator(CoordinatorKind::Group, &group.group_id)
                    .await?;
                let resp = cluster
                    .send(&coordinator, Workload::Group, &req, Versions::new(0, 5))
                    .await;
                let resp = match resp {
                    Ok(r) => r,
                    Err(e) => {
                        cluster.invalidate_coordinator(CoordinatorKind::Group, &group.group_id);
                        return Err(e);
                    }
                };
                let code = resp
                    .topics
                    .iter()
                    .flat_map(|t| t.partitions.iter())
                    .map(|p| p.error_code)
                    .find(|c| *c != 0)
                    .unwrap_or(0);
                if KafkaCode::from_code(code).is_some_and(|c| c.invalidates_coordinator()) {
                    cluster.invalidate_coordinator(CoordinatorKind::Group, &group.group_id);
                }
                Error::check(code, || {
                    format!(
                        "TxnOffsetCommit for group {} on {coordinator}",
                        group.group_id
                    )
                })
            },
        )
        .await;
        call.map_err(|e| self.fail(e))
    }

    /// Ends the transaction. Returns whether the producer moved to a new
    /// epoch for the next one, which is then the producer's: a v2 EndTxn
    /// bumps it; an abort bumps it with InitProducerId when EndTxn did not
    /// (always with v1, whose failed records may have left sequence gaps,
    /// and with v2 when a bump is still owed).
    pub async fn end(&self, cluster: &Cluster, commit: bool) -> Result<bool> {
        let producer = self.current()?;
        let started = self.state().started;
        let mut bumped = false;
        if started {
            bumped = self.end_txn(cluster, commit, producer).await?;
        } else {
            // Nothing reached the broker: end locally, as the Java client does.
            self.finish();
        }
        let owed = self.producer.bump_required() || (started && !self.is_v2());
        if commit || bumped || !owed {
            return Ok(bumped);
        }
        self.bump(cluster, producer).await?;
        Ok(true)
    }

    /// EndTxn; returns whether the coordinator moved the producer to a new
    /// epoch (v2).
    async fn end_txn(&self, cluster: &Cluster, commit: bool, producer: ProducerId) -> Result<bool> {
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
        match self
            .coordinator_call(cluster, what, Versions::new(0, 5), &req, false, |r| {
                r.error_code
            })
            .await
        {
            Ok((resp, _)) => {
                self.finish();
                let next =
                    (resp.producer_id.0 >= 0 && resp.producer_epoch >= 0).then_some(ProducerId {
                        id: resp.producer_id.0,
                        epoch: resp.producer_epoch,
                    });
                match next.filter(|n| *n != producer) {
                    Some(next) => {
                        self.producer.set(next);
                        Ok(true)
                    }
                    None => Ok(false),
                }
            }
            Err(e) => {
                let kind = self.kind_of(&e, true);
                let mut s = self.state();
                s.phase = match kind {
                    TxnErrorKind::Fatal => Phase::Fatal(e.clone()),
                    TxnErrorKind::Indefinite => Phase::Indefinite(e.clone()),
                    _ => Phase::Abortable(e.clone()),
                };
                Err(self.error(kind, e))
            }
        }
    }

    /// The epoch bump of KIP-360 after an abort: InitProducerId to the
    /// transaction coordinator with the transactional id, the producer id and
    /// its epoch (a broker before v3 gets a plain InitProducerId for the
    /// transactional id, which also bumps). A failure leaves the producer to
    /// be initialised again (or fatal when fenced).
    async fn bump(&self, cluster: &Cluster, from: ProducerId) -> Result<()> {
        let transactional = Some((self.id.as_str(), self.timeout));
        let req = init_request(transactional, Some(from));
        let code = |r: &InitProducerIdResponse| r.error_code;
        let what = "InitProducerId(epoch bump)";
        let mut result = self
            .coordinator_call(cluster, what, Versions::new(3, 5), &req, true, code)
            .await;
        if let Err(Error::UnsupportedVersion { .. }) = result {
            let req = init_request(transactional, None);
            result = self
                .coordinator_call(cluster, what, Versions::new(0, 5), &req, true, code)
                .await;
        }
        match result {
            Ok((resp, _)) => {
                tracing::info!(transactional_id = %self.id, producer_id = resp.producer_id.0, epoch = resp.producer_epoch, "producer epoch bumped after abort");
                self.producer.set(ProducerId {
                    id: resp.producer_id.0,
                    epoch: resp.producer_epoch,
                });
                Ok(())
            }
            Err(e) => {
                let e = self.classify_setup_error(e);
                let mut s = self.state();
                if !matches!(s.phase, Phase::Fatal(_)) {
                    s.phase = Phase::Indefinite(e.clone());
                }
                Err(e)
            }
        }
    }

    /// The current phase's error for `commit_transaction` to return, if the
    /// transaction cannot commit.
    pub fn commit_blocker(&self) -> Option<Error> {
        let mut s = self.state();
        self.note_bump(&mut s);
        if let Some(e) = self.blocked(&s.phase) {
            return Some(e);
        }
        (!matches!(s.phase, Phase::InTransaction)).then(|| self.invalid("no open transaction"))
    }

    /// Whether `abort_transaction` may run now.
    pub fn check_abort(&self) -> Result<()> {
        let s = self.state();
        match &s.phase {
            Phase::InTransaction | Phase::Abortable(_) => Ok(()),
            Phase::Fatal(e) => Err(self.error(TxnErrorKind::Fatal, e.clone())),
            Phase::Indefinite(e) => Err(self.error(TxnErrorKind::Indefinite, e.clone())),
            _ => Err(self.invalid("no open transaction to abort")),
        }
    }

    fn finish(&self) {
        let mut s = self.state();
        s.phase = Phase::Ready;
        s.added.clear();
        s.pending.clear();
        s.started = false;
    }

    /// Marks the transaction failed by `e` and returns the classed error.
    fn fail(&self, e: Error) -> Error {
        let kind = self.kind_of(&e, false);
        let mut s = self.state();
        if !matches!(s.phase, Phase::Fatal(_)) {
            s.phase = match kind {
                TxnErrorKind::Fatal => Phase::Fatal(e.clone()),
                TxnErrorKind::Indefinite => Phase::Indefinite(e.clone()),
                _ => Phase::Abortable(e.clone()),
            };
        }
        self.error(kind, e)
    }

    /// Fatal for fencing and authorisation; indefinite for timeouts and lost
    /// connections when `ending` (or adding); abortable otherwise.
    fn kind_of(&self, e: &Error, ending: bool) -> TxnErrorKind {
        match e.kafka_code() {
            Some(KafkaCode::PRODUCER_FENCED)
            | Some(KafkaCode::INVALID_PRODUCER_EPOCH)
            | Some(KafkaCode::TRANSACTIONAL_ID_AUTHORIZATION_FAILED) => TxnErrorKind::Fatal,
            Some(_) => TxnErrorKind::Abortable,
            None if ending || e.is_retriable() => TxnErrorKind::Indefinite,
            None => TxnErrorKind::Abortable,
        }
    }

    /// Errors of InitProducerId: fencing is fatal, the rest keep the producer
    /// uninitialised (the caller may call `init_transactions` again).
    fn classify_setup_error(&self, e: Error) -> Error {
        let kind = match e.kafka_code() {
            Some(KafkaCode::TRANSACTIONAL_ID_AUTHORIZATION_FAILED) => TxnErrorKind::Fatal,
            _ => TxnErrorKind::Indefinite,
        };
        if kind == TxnErrorKind::Fatal {
            self.state().phase = Phase::Fatal(e.clone());
        }
        self.error(kind, e)
    }

    /// Sends `req` to the transaction coordinator, retrying coordinator moves
    /// and CONCURRENT_TRANSACTIONS within `default.api.timeout.ms`. Returns
    /// the response and whether the coordinator finalizes transactions v2.
    ///
    /// `resend_safe`: resending the request after a lost answer is harmless
    /// (InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn), so timeouts and
    /// lost connections are retried. EndTxn is not: its outcome after a lost
    /// answer is unknown. A request that never left (no coordinator found,
    /// or no connection to it) is retried in either case.
    async fn coordinator_call<R, F>(
        &self,
        cluster: &Cluster,
        what: &str,
        versions: Versions,
        req: &R,
        resend_safe: bool,
        code_of: F,
    ) -> Result<(R::Response, bool)>
    where
        R: Request,
        F: Fn(&R::Response) -> i16,
    {
        let unsent = AtomicBool::new(false);
        let resend = |_: &Error| resend_safe || unsent.load(AtomicOrdering::Relaxed);
        retry(cluster.config(), what, resend, || async {
            unsent.store(true, AtomicOrdering::Relaxed);
            let addr = cluster
                .coordinator(CoordinatorKind::Transaction, &self.id)
                .await?;
            let conn = match cluster.connection(&addr, Workload::Admin).await {
                Ok(c) => c,
                Err(e) => {
                    cluster.invalidate_coordinator(CoordinatorKind::Transaction, &self.id);
                    return Err(e);
                }
            };
            unsent.store(false, AtomicOrdering::Relaxed);
            let v2 = self.max_version >= 2
                && conn
                    .api_versions()
                    .feature_level("transaction.version")
                    .is_some_and(|l| l >= 2);
            let resp = conn.send(req, versions).await?;
            let code = code_of(&resp);
            if KafkaCode::from_code(code).is_some_and(|c| c.invalidates_coordinator()) {
                cluster.invalidate_coordinator(CoordinatorKind::Transaction, &self.id);
            }
            Error::check(code, || {
                format!("{what} for transactional id {} on {addr}", self.id)
            })?;
            Ok((resp, v2))
        })
        .await
    }
}

/// Retry interval while the previous transaction completes.
pub(crate) const CONCURRENT_TXN_BACKOFF: Duration = Duration::from_millis(20);
/// Attempts polled at [`CONCURRENT_TXN_BACKOFF`]; markers that take longer
/// (a partition offline) get the exponential backoff, not 50 requests/s.
pub(crate) const CONCURRENT_TXN_FAST_ATTEMPTS: u32 = 10;

/// Runs `call` until it succeeds, fails for good, or `default.api.timeout.ms`
/// passes. Coordinator moves and CONCURRENT_TRANSACTIONS are retried with
/// backoff. Other retriable errors (a timeout, a lost connection, a
/// coordinator that cannot be reached) are retried too when `resend` says
/// whether resending the request is harmless (`resend(&err)`); otherwise
/// they are returned at once (the outcome is unknown, so the caller decides).
async fn retry<T, F, Fut>(
    cfg: &ClientConfig,
    what: &str,
    resend: impl Fn(&Error) -> bool,
    mut call: F,
) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T>>,
{
    let deadline = Instant::now() + cfg.default_api_timeout;
    let mut attempt = 0u32;
    loop {
        let err = match call().await {
            Ok(v) => return Ok(v),
            Err(e) => e,
        };
        let code = err.kafka_code();
        let again = matches!(
            code,
            Some(KafkaCode::CONCURRENT_TRANSACTIONS)
                | Some(KafkaCode::COORDINATOR_LOAD_IN_PROGRESS)
                | Some(KafkaCode::COORDINATOR_NOT_AVAILABLE)
                | Some(KafkaCode::NOT_COORDINATOR)
        ) || matches!(err, Error::NoBrokerAvailable { .. })
            || (err.is_retriable() && resend(&err));
        attempt += 1;
        let backoff = if code == Some(KafkaCode::CONCURRENT_TRANSACTIONS)
            && attempt <= CONCURRENT_TXN_FAST_ATTEMPTS
        {
            // The previous transaction's markers are still being written,
            // which takes tens of milliseconds: poll for it at a short,
            // fixed interval (Java does the same for the first
            // AddPartitionsToTxn of a transaction, KAFKA-5477).
            CONCURRENT_TXN_BACKOFF
        } else {
            CONCURRENT_TXN_BACKOFF
                .saturating_mul(1 << (attempt - 1).min(6))
                .min(cfg.retry_backoff_max)
        };
        if !again || Instant::now() + backoff >= deadline {
            return Err(err);
        }
        tracing::debug!(what, error = %err, attempt, "transactional request retried");
        tokio::time::sleep(backoff).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lost() -> Error {
        Error::Disconnected {
            broker: "broker 2 (127.0.0.1:19194)".into(),
            api: Some("InitProducerId".into()),
            reason: "broker closed the connection".into(),
        }
    }

    fn in_transaction() -> Transactions {
        let t = Transactions::new("tx-1".into(), Duration::from_secs(10), 2);
        t.state().phase = Phase::InTransaction;
        t
    }

    fn refused(code: KafkaCode) -> Error {
        Error::Kafka {
            code,
            context: "Produce to t-0 on broker 1".into(),
        }
    }

    fn kind(r: Result<()>) -> Option<TxnErrorKind> {
        match r {
            Err(Error::Transaction { kind, .. }) => Some(kind),
            _ => None,
        }
    }

    /// A batch refused as fenced: the commit is refused as fatal, and so is
    /// everything after it but closing; a later, lesser error does not
    /// soften it.
    #[test]
    fn a_fenced_batch_makes_the_transaction_fatal() {
        let t = in_transaction();
        t.batch_failed(&refused(KafkaCode::PRODUCER_FENCED));
        t.batch_failed(&refused(KafkaCode::NOT_LEADER_OR_FOLLOWER));
        let blocker = t.commit_blocker().map_or(Ok(()), Err);
        assert_eq!(kind(blocker), Some(TxnErrorKind::Fatal));
        assert_eq!(kind(t.check_abort()), Some(TxnErrorKind::Fatal));
        assert_eq!(kind(t.check_send()), Some(TxnErrorKind::Fatal));
        assert_eq!(kind(t.begin()), Some(TxnErrorKind::Fatal));
    }

    /// Any other failed batch: the transaction may only be aborted.
    /// Issue #18's bug: a sink's epoch bump on a transactional producer
    /// ran at once as an InitProducerId without the transactional id (a
    /// fresh, non-transactional producer id). Now it is owed: nothing bare
    /// goes out, the open transaction can only abort, and the abort bumps.
    #[test]
    fn a_bump_in_a_transaction_is_owed_to_the_abort() {
        let t = in_transaction();
        let p = ProducerId { id: 7, epoch: 3 };
        t.producer().set(p);
        assert_eq!(t.producer().begin_bump(), None, "no bare InitProducerId");
        assert_eq!(t.producer().current(), Some(p));
        assert_eq!(kind(t.check_send()), Some(TxnErrorKind::Abortable));
        assert!(t.commit_blocker().is_some(), "commit is refused");
        assert!(t.check_abort().is_ok(), "abort is the way out");
    }

    #[test]
    fn a_failed_batch_makes_the_transaction_abortable() {
        let t = in_transaction();
        t.batch_failed(&refused(KafkaCode::TOPIC_AUTHORIZATION_FAILED));
        let blocker = t.commit_blocker().map_or(Ok(()), Err);
        assert_eq!(kind(blocker), Some(TxnErrorKind::Abortable));
        assert_eq!(kind(t.check_send()), Some(TxnErrorKind::Abortable));
        assert!(t.check_abort().is_ok());
        t.finish();
        assert!(t.begin().is_ok(), "a new transaction after the abort");
    }

    /// Before init_transactions: no transaction, no id to send with.
    #[test]
    fn nothing_starts_before_init_transactions() {
        let t = Transactions::new("tx-1".into(), Duration::from_secs(10), 2);
        assert_eq!(kind(t.begin()), Some(TxnErrorKind::InvalidState));
        assert!(t.producer().current().is_none());
        assert!(t.current().is_err());
        t.producer().set(ProducerId { id: 3, epoch: 0 });
        assert_eq!(t.current().ok(), Some(ProducerId { id: 3, epoch: 0 }));
    }

    /// A killed coordinator: a request whose resending is harmless is
    /// retried past lost connections (found by the transactions-bounce
    /// fault test, where InitProducerId and TxnOffsetCommit gave up at the
    /// first refused connection); one whose outcome would be unknown is not.
    #[tokio::test]
    async fn lost_connections_are_retried_only_when_resending_is_harmless() {
        let mut cfg = ClientConfig::builder()
            .bootstrap_servers("127.0.0.1:1")
            .build()
            .unwrap();
        cfg.retry_backoff_max = Duration::from_millis(5);
        let calls = std::sync::atomic::AtomicU32::new(0);
        let flaky = || async {
            if calls.fetch_add(1, AtomicOrdering::Relaxed) < 3 {
                Err(lost())
            } else {
                Ok(7)
            }
        };
        assert_eq!(
            retry(&cfg, "InitProducerId", |_| true, flaky)
                .await
                .unwrap(),
            7
        );
        assert_eq!(calls.load(AtomicOrdering::Relaxed), 4);

        calls.store(0, AtomicOrdering::Relaxed);
        let err = retry(&cfg, "EndTxn", |_| false, flaky).await.unwrap_err();
        assert!(matches!(err, Error::Disconnected { .. }), "{err}");
        assert_eq!(
            calls.load(AtomicOrdering::Relaxed),
            1,
            "EndTxn is not resent"
        );
    }
}
