//! The transaction manager as a state machine: the application's calls,
//! the transaction coordinator's answers and the sinks' reports go in as
//! [`Event`]s; [`Action`]s come out (send InitProducerId, AddPartitionsToTxn,
//! AddOffsetsToTxn, EndTxn to the transaction coordinator or TxnOffsetCommit
//! to the group coordinator; hand the sinks a new producer id or epoch;
//! complete the application's call). No sockets and no clock: the driver in
//! `transaction` executes the actions and feeds back what happened.
//!
//! Semantics follow KIP-98 and Java's `TransactionManager`:
//!
//! - transactions v1: a partition joins with AddPartitionsToTxn before its
//!   first batch; offsets with AddOffsetsToTxn; the epoch stays across
//!   transactions, and an abort after records went out bumps it with
//!   InitProducerId (KIP-360, KIP-588);
//! - transactions v2 (KIP-890): partitions join through Produce v12,
//!   AddOffsetsToTxn is skipped, and every EndTxn returns the next epoch;
//! - a sink's epoch bump (UNKNOWN_PRODUCER_ID, a batch of unknown outcome)
//!   is owed to the abort: the open transaction becomes abortable and the
//!   abort settles it (an InitProducerId naming the transactional id, the
//!   producer id and epoch) unless its EndTxn already moved the epoch;
//! - errors: fencing (PRODUCER_FENCED, INVALID_PRODUCER_EPOCH) and
//!   TRANSACTIONAL_ID_AUTHORIZATION_FAILED are fatal; a lost answer while
//!   ending or extending a transaction leaves the outcome unknown
//!   (indefinite: initialise again); EndTxn's INVALID_TXN_STATE,
//!   INVALID_PRODUCER_ID_MAPPING and codes Java does not handle are fatal
//!   too, UNKNOWN_PRODUCER_ID and TRANSACTION_ABORTABLE abortable (Java's
//!   `EndTxnHandler`); any other refusal of the other requests makes the
//!   transaction abortable;
//! - retries are the machine's too: a coordinator request that failed with
//!   CONCURRENT_TRANSACTIONS, COORDINATOR_LOAD_IN_PROGRESS,
//!   COORDINATOR_NOT_AVAILABLE or NOT_COORDINATOR, or could not be sent,
//!   is answered with [`Action::Rediscover`] (when the coordinator moved) and
//!   [`Action::Backoff`], and sent again on [`Event::TimerFired`], within
//!   `default.api.timeout.ms`, as [`retry_after`] decides. The driver only
//!   executes.
//!
//! Protocol: <https://kafka.apache.org/protocol#The_Messages_EndTxn>.

use std::collections::HashSet;
use std::time::Duration;

use tokio::time::Instant;

use super::super::idempotence::ProducerId;
use crate::cluster::CoordinatorKind;
use crate::error::{Error, KafkaCode, Origin, Result, TxnErrorKind};
use crate::TopicPartition;

/// Where the transactional producer stands.
#[derive(Debug, Clone)]
pub(crate) enum Phase {
    /// `init_transactions` not called yet.
    Uninitialized,
    /// InitProducerId is out.
    Initializing,
    /// Between transactions.
    Ready,
    /// Inside `begin_transaction` .. commit/abort.
    InTransaction,
    /// EndTxn(commit) is out.
    Committing,
    /// EndTxn(abort) is out.
    Aborting,
    /// After an abort: InitProducerId bumps the epoch (KIP-360, KIP-588).
    Bumping,
    /// A send failed or a bump is owed: only `abort_transaction` is allowed.
    Abortable(Error),
    /// The outcome of ending or extending a transaction is unknown:
    /// `init_transactions` again.
    Indefinite(Error),
    /// Fenced or unauthorised: only closing is left.
    Fatal(Error),
}

/// What happened, as the driver tells it.
#[derive(Debug)]
pub(crate) enum Event {
    /// The application calls `init_transactions`.
    Init,
    /// The application calls `begin_transaction`.
    Begin,
    /// The application adds consumed offsets for `group`.
    SendOffsets { group: String },
    /// The application commits (after flushing its records).
    Commit,
    /// The application aborts (after its records failed or landed).
    Abort,
    /// The v1 adder runs: partitions noted since the last one go out.
    AddPartitionsDue,
    /// A sink's batch failed for good.
    BatchFailed(Error),
    /// A sink asked for a KIP-360 epoch bump while sending with `from`.
    BumpNeeded { from: ProducerId },
    /// InitProducerId's answer: the id and epoch, and whether the
    /// coordinator finalizes transactions v2.
    InitProducerId(Result<(ProducerId, bool)>),
    /// AddPartitionsToTxn's answer for these partitions.
    AddPartitions {
        partitions: Vec<TopicPartition>,
        result: Result<()>,
    },
    /// AddOffsetsToTxn's answer.
    AddOffsets(Result<()>),
    /// TxnOffsetCommit's answer.
    TxnOffsetCommit(Result<()>),
    /// EndTxn's answer: the producer id and epoch it returned (v2), if any.
    EndTxn(Result<Option<ProducerId>>),
    /// The request never left: no coordinator was found, or no connection
    /// to it.
    Unreachable { request: Request, error: Error },
    /// The [`Action::Backoff`] for this request has passed.
    TimerFired(Request),
    /// The application's call was dropped before its answer came, while
    /// this request was out (if one was).
    Cancelled(Option<Request>),
}

/// What the driver must do, in order.
#[derive(Debug, Clone)]
pub(crate) enum Action {
    /// InitProducerId to the transaction coordinator for the transactional
    /// id, bumping `bump_from`'s epoch when given; then
    /// [`Event::InitProducerId`].
    InitProducerId { bump_from: Option<ProducerId> },
    /// AddPartitionsToTxn; then [`Event::AddPartitions`].
    AddPartitions {
        producer: ProducerId,
        partitions: Vec<TopicPartition>,
    },
    /// AddOffsetsToTxn for `group`; then [`Event::AddOffsets`].
    AddOffsets { producer: ProducerId, group: String },
    /// TxnOffsetCommit to the group coordinator; then
    /// [`Event::TxnOffsetCommit`].
    TxnOffsetCommit { producer: ProducerId },
    /// EndTxn; then [`Event::EndTxn`].
    EndTxn { producer: ProducerId, commit: bool },
    /// The sinks send with this id and epoch from now on.
    UseProducer(ProducerId),
    /// Forget the cached coordinator of this kind: it moved or cannot be
    /// reached, so the next request looks it up again.
    Rediscover(CoordinatorKind),
    /// Wait `delay`, then [`Event::TimerFired`]; the request goes out
    /// again.
    Backoff { request: Request, delay: Duration },
    /// Complete the application's call (or the adder's round).
    Done(Result<()>),
}

/// The coordinator requests, one of each kind out at a time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Request {
    InitProducerId,
    AddPartitions,
    AddOffsets,
    TxnOffsetCommit,
    EndTxn,
}

impl Request {
    /// The kind of `action`, when it is a request.
    pub fn of(action: &Action) -> Option<Request> {
        Some(match action {
            Action::InitProducerId { .. } => Request::InitProducerId,
            Action::AddPartitions { .. } => Request::AddPartitions,
            Action::AddOffsets { .. } => Request::AddOffsets,
            Action::TxnOffsetCommit { .. } => Request::TxnOffsetCommit,
            Action::EndTxn { .. } => Request::EndTxn,
            _ => return None,
        })
    }

    /// The request that `event` answers, if it is an answer.
    fn answered_by(event: &Event) -> Option<Request> {
        Some(match event {
            Event::InitProducerId(_) => Request::InitProducerId,
            Event::AddPartitions { .. } => Request::AddPartitions,
            Event::AddOffsets(_) => Request::AddOffsets,
            Event::TxnOffsetCommit(_) => Request::TxnOffsetCommit,
            Event::EndTxn(_) => Request::EndTxn,
            Event::Unreachable { request, .. } => *request,
            _ => return None,
        })
    }
}

/// How long a coordinator request is retried (from the client's config).
#[derive(Debug, Clone, Copy)]
pub(crate) struct RetryLimits {
    /// `default.api.timeout.ms`: no retry starts after this, from the first
    /// attempt.
    pub api_timeout: Duration,
    /// `retry.backoff.max.ms`: the longest backoff.
    pub max_backoff: Duration,
}

/// A request the machine waits for, with its retries so far.
#[derive(Debug)]
struct Outstanding {
    kind: Request,
    /// The request action, sent again after a backoff.
    request: Action,
    /// Failed attempts.
    failures: u32,
    /// No retry starts after this.
    deadline: Instant,
}

/// The transaction manager of one producer, without I/O.
#[derive(Debug)]
pub(crate) struct TxnMachine {
    id: String,
    limits: RetryLimits,
    /// The coordinator requests out (at most one of each kind).
    out: Vec<Outstanding>,
    /// purekafka.transaction.version.max: 1 forces v1, 2 allows v2.
    max_version: i16,
    phase: Phase,
    /// Transactions v2 (KIP-890) in use; decided by InitProducerId.
    v2: bool,
    producer: Option<ProducerId>,
    /// A sink asked for an epoch bump that has not happened yet.
    bump_owed: bool,
    /// v1: partitions the coordinator confirmed for this transaction.
    added: HashSet<TopicPartition>,
    /// v1: partitions with records waiting for AddPartitionsToTxn.
    pending: HashSet<TopicPartition>,
    /// Anything reached the broker in this transaction (records or
    /// offsets), so it must be ended with EndTxn.
    started: bool,
}

impl TxnMachine {
    pub fn new(id: String, max_version: i16, limits: RetryLimits) -> TxnMachine {
        TxnMachine {
            id,
            limits,
            out: Vec::new(),
            max_version,
            phase: Phase::Uninitialized,
            v2: false,
            producer: None,
            bump_owed: false,
            added: HashSet::new(),
            pending: HashSet::new(),
            started: false,
        }
    }

    #[cfg(test)]
    pub fn phase(&self) -> &Phase {
        &self.phase
    }

    pub fn is_v2(&self) -> bool {
        self.v2
    }

    /// The producer id and epoch, none before `init_transactions`.
    #[cfg(test)]
    pub fn producer(&self) -> Option<ProducerId> {
        self.producer
    }

    /// Whether transactions v2 may be used (the client's cap).
    pub fn allows_v2(&self) -> bool {
        self.max_version >= 2
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
            Error::invalid_state(Origin::Producer, what),
        )
    }

    /// The error standing in the way of new work, if any.
    fn blocked(&self) -> Option<Error> {
        match &self.phase {
            Phase::Abortable(e) => Some(self.error(TxnErrorKind::Abortable, e.clone())),
            Phase::Indefinite(e) => Some(self.error(TxnErrorKind::Indefinite, e.clone())),
            Phase::Fatal(e) => Some(self.error(TxnErrorKind::Fatal, e.clone())),
            _ => None,
        }
    }

    /// Why records may not join now, if they may not.
    pub fn send_blocker(&self) -> Option<Error> {
        if let Some(e) = self.blocked() {
            return Some(e);
        }
        match self.phase {
            Phase::InTransaction => None,
            Phase::Committing | Phase::Aborting | Phase::Bumping => {
                Some(self.invalid("the transaction is ending: wait for commit or abort"))
            }
            _ => Some(self.invalid("send outside a transaction: call begin_transaction first")),
        }
    }

    /// Why `commit_transaction` cannot commit now, if it cannot.
    pub fn commit_blocker(&self) -> Option<Error> {
        if let Some(e) = self.blocked() {
            return Some(e);
        }
        (!matches!(self.phase, Phase::InTransaction)).then(|| self.invalid("no open transaction"))
    }

    /// Why `abort_transaction` cannot run now, if it cannot.
    pub fn abort_blocker(&self) -> Option<Error> {
        match &self.phase {
            Phase::InTransaction | Phase::Abortable(_) => None,
            Phase::Fatal(e) => Some(self.error(TxnErrorKind::Fatal, e.clone())),
            Phase::Indefinite(e) => Some(self.error(TxnErrorKind::Indefinite, e.clone())),
            _ => Some(self.invalid("no open transaction to abort")),
        }
    }

    /// Notes that `tp` has records in this transaction. Returns true when a
    /// v1 AddPartitionsToTxn is needed for it.
    pub fn note_partition(&mut self, tp: &TopicPartition) -> bool {
        self.started = true;
        if self.v2 || self.added.contains(tp) || self.pending.contains(tp) {
            return false;
        }
        self.pending.insert(tp.clone());
        true
    }

    /// Whether batches of `tp` may go out (v1: once the coordinator added
    /// the partition).
    pub fn can_send(&self, tp: &TopicPartition) -> bool {
        self.v2 || self.added.contains(tp)
    }

    /// The client's retry settings, which the driver reads from the
    /// cluster's config.
    pub fn set_limits(&mut self, limits: RetryLimits) {
        self.limits = limits;
    }

    /// Takes `event`, which happened at `now`, and answers with what to do,
    /// in order.
    pub fn handle(&mut self, event: Event, now: Instant) -> Vec<Action> {
        let mut actions = Vec::new();
        if let Some(event) = self.retry(event, now, &mut actions) {
            if let Some(answered) = Request::answered_by(&event) {
                self.out.retain(|o| o.kind != answered);
            }
            actions.extend(self.step(event));
            for request in &actions {
                if let Some(kind) = Request::of(request) {
                    self.out.retain(|o| o.kind != kind);
                    self.out.push(Outstanding {
                        kind,
                        request: request.clone(),
                        failures: 0,
                        deadline: now + self.limits.api_timeout,
                    });
                }
            }
        }
        // A bump owed inside a transaction leaves it only abortable, as in
        // Java: the abort runs the bump.
        if self.bump_owed && matches!(self.phase, Phase::InTransaction) {
            self.phase = Phase::Abortable(Error::invalid_state(
                Origin::Producer,
                "a batch's outcome is unknown or the broker lost this producer's sequence \
                 state: abort the transaction, which bumps the producer epoch (KIP-360)",
            ));
        }
        actions
    }

    /// Retries the outstanding request when `event` is its failure and
    /// trying again may help (pushing the actions for it and returning
    /// none); otherwise returns the event for [`Self::step`], a failure to
    /// send turned into the request's failed answer.
    fn retry(&mut self, event: Event, now: Instant, actions: &mut Vec<Action>) -> Option<Event> {
        if let Event::TimerFired(kind) = event {
            // A timer that outlived its request (the call was dropped)
            // asks for nothing.
            let request = self.out.iter().find(|o| o.kind == kind);
            actions.extend(request.map(|o| o.request.clone()));
            return None;
        }
        let (err, sent) = match &event {
            Event::Unreachable { error, .. } => (error, false),
            Event::InitProducerId(Err(e))
            | Event::AddPartitions { result: Err(e), .. }
            | Event::AddOffsets(Err(e))
            | Event::TxnOffsetCommit(Err(e))
            | Event::EndTxn(Err(e)) => (e, true),
            _ => return Some(event),
        };
        let Some(answered) = Request::answered_by(&event) else {
            return Some(event);
        };
        let Some(at) = self.out.iter().position(|o| o.kind == answered) else {
            // Not waiting for an answer: the step refuses it.
            return Some(event);
        };
        let out = &mut self.out[at];
        let coordinator = match out.request {
            Action::TxnOffsetCommit { .. } => CoordinatorKind::Group,
            _ => CoordinatorKind::Transaction,
        };
        let code = err.kafka_code();
        // The coordinator moved, or cannot be reached; the group
        // coordinator also after a lost answer, as its connection is shared
        // with nothing the transaction needs.
        if code.is_some_and(KafkaCode::invalidates_coordinator)
            || !sent
            || (coordinator == CoordinatorKind::Group && code.is_none())
        {
            actions.push(Action::Rediscover(coordinator));
        }
        out.failures += 1;
        // An error code is the broker's answer, so resending cannot repeat
        // an EndTxn it carried out; only a lost answer leaves that unknown.
        let resend = !sent || code.is_some() || !matches!(out.request, Action::EndTxn { .. });
        match retry_after(err, out.failures, resend, self.limits.max_backoff) {
            Some(delay) if now + delay < out.deadline => {
                actions.push(Action::Backoff {
                    request: answered,
                    delay,
                });
                None
            }
            _ => {
                let out = self.out.swap_remove(at);
                Some(match event {
                    Event::Unreachable { error, .. } => failed(out.request, error),
                    answered => answered,
                })
            }
        }
    }

    fn step(&mut self, event: Event) -> Vec<Action> {
        match event {
            Event::Init => self.init(),
            Event::Begin => vec![Action::Done(self.begin())],
            Event::SendOffsets { group } => self.send_offsets(group),
            Event::Commit => self.end(true),
            Event::Abort => self.end(false),
            Event::AddPartitionsDue => self.add_partitions(),
            Event::BatchFailed(e) => {
                let fatal = matches!(
                    e.kafka_code(),
                    Some(KafkaCode::PRODUCER_FENCED)
                        | Some(KafkaCode::INVALID_PRODUCER_EPOCH)
                        | Some(KafkaCode::TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
                );
                match self.phase {
                    Phase::Fatal(_) => {}
                    _ if fatal => self.phase = Phase::Fatal(e),
                    Phase::InTransaction => self.phase = Phase::Abortable(e),
                    _ => {}
                }
                Vec::new()
            }
            Event::BumpNeeded { from } => {
                // A report about an epoch already left behind is settled.
                self.bump_owed |= self.producer == Some(from);
                Vec::new()
            }
            Event::InitProducerId(result) => self.on_init_producer_id(result),
            Event::AddPartitions { partitions, result } => match result {
                Ok(()) => {
                    for tp in partitions {
                        self.pending.remove(&tp);
                        self.added.insert(tp);
                    }
                    vec![Action::Done(Ok(()))]
                }
                Err(e) => vec![Action::Done(Err(self.fail(e)))],
            },
            Event::AddOffsets(result) => match (result, self.producer) {
                (Ok(()), Some(producer)) => vec![Action::TxnOffsetCommit { producer }],
                (Ok(()), None) => vec![Action::Done(Err(self.no_producer()))],
                (Err(e), _) => vec![Action::Done(Err(self.fail(e)))],
            },
            Event::TxnOffsetCommit(result) => {
                vec![Action::Done(result.map_err(|e| self.fail(e)))]
            }
            Event::EndTxn(result) => self.on_end_txn(result),
            // Handled by `retry`: a failure to send with nothing out, or a
            // timer with nothing to resend.
            Event::Unreachable { .. } | Event::TimerFired(_) => Vec::new(),
            Event::Cancelled(request) => {
                self.out.retain(|o| Some(o.kind) != request);
                if matches!(
                    self.phase,
                    Phase::Initializing | Phase::Committing | Phase::Aborting | Phase::Bumping
                ) {
                    self.phase = Phase::Indefinite(Error::invalid_state(
                        Origin::Producer,
                        "init_transactions, commit or abort was dropped before its answer: \
                         the outcome is unknown",
                    ));
                }
                Vec::new()
            }
        }
    }

    /// The answer to a response that arrived in a phase not waiting for it
    /// (a fatal error overtook it).
    fn unexpected(&self, what: &str) -> Vec<Action> {
        let e = self
            .blocked()
            .unwrap_or_else(|| self.invalid(&format!("{what} answered out of turn")));
        vec![Action::Done(Err(e))]
    }

    fn no_producer(&self) -> Error {
        self.invalid("no producer id yet: call init_transactions first")
    }

    fn init(&mut self) -> Vec<Action> {
        let refused = match &self.phase {
            Phase::Fatal(e) => Some(self.error(TxnErrorKind::Fatal, e.clone())),
            Phase::InTransaction => Some(self.invalid("init_transactions inside a transaction")),
            Phase::Initializing => Some(self.invalid("init_transactions is already running")),
            Phase::Committing | Phase::Aborting | Phase::Bumping => {
                Some(self.invalid("init_transactions while a transaction is ending"))
            }
            _ => None,
        };
        if let Some(e) = refused {
            return vec![Action::Done(Err(e))];
        }
        self.phase = Phase::Initializing;
        vec![Action::InitProducerId { bump_from: None }]
    }

    fn begin(&mut self) -> Result<()> {
        if let Some(e) = self.blocked() {
            return Err(e);
        }
        match self.phase {
            Phase::Ready => {
                self.phase = Phase::InTransaction;
                self.clear();
                Ok(())
            }
            Phase::Uninitialized => Err(self.invalid("call init_transactions first")),
            Phase::Initializing => Err(self.invalid("init_transactions has not finished")),
            Phase::Committing | Phase::Aborting | Phase::Bumping => Err(self
                .invalid("the previous transaction is still ending: wait for its commit or abort")),
            _ => Err(self.invalid("a transaction is already open")),
        }
    }

    fn send_offsets(&mut self, group: String) -> Vec<Action> {
        let Some(producer) = self.producer else {
            return vec![Action::Done(Err(self.no_producer()))];
        };
        if let Some(e) = self.send_blocker() {
            return vec![Action::Done(Err(e))];
        }
        let running =
            |o: &Outstanding| matches!(o.kind, Request::AddOffsets | Request::TxnOffsetCommit);
        if self.out.iter().any(running) {
            return vec![Action::Done(Err(
                self.invalid("send_offsets_to_transaction is already running")
            ))];
        }
        self.started = true;
        if self.v2 {
            vec![Action::TxnOffsetCommit { producer }]
        } else {
            vec![Action::AddOffsets { producer, group }]
        }
    }

    fn add_partitions(&mut self) -> Vec<Action> {
        let partitions: Vec<TopicPartition> = self.pending.iter().cloned().collect();
        match self.producer {
            Some(producer) if !partitions.is_empty() => vec![Action::AddPartitions {
                producer,
                partitions,
            }],
            _ => vec![Action::Done(Ok(()))],
        }
    }

    fn end(&mut self, commit: bool) -> Vec<Action> {
        let blocker = if commit {
            self.commit_blocker()
        } else {
            self.abort_blocker()
        };
        if let Some(e) = blocker {
            return vec![Action::Done(Err(e))];
        }
        let Some(producer) = self.producer else {
            return vec![Action::Done(Err(self.no_producer()))];
        };
        if self.started {
            self.phase = if commit {
                Phase::Committing
            } else {
                Phase::Aborting
            };
            return vec![Action::EndTxn { producer, commit }];
        }
        // Nothing reached the broker: end locally, as the Java client does;
        // an abort still settles an owed bump.
        self.clear();
        self.after_end(commit, producer, false)
    }

    /// The transaction ended (EndTxn or locally): an abort bumps the epoch
    /// unless EndTxn moved it (`bumped`) or nothing calls for it (v2 with
    /// no bump owed; v1 with nothing sent).
    fn after_end(&mut self, commit: bool, producer: ProducerId, bumped: bool) -> Vec<Action> {
        let owed = self.bump_owed || (self.started && !self.v2);
        self.started = false;
        if commit || bumped || !owed {
            self.phase = Phase::Ready;
            return vec![Action::Done(Ok(()))];
        }
        self.phase = Phase::Bumping;
        vec![Action::InitProducerId {
            bump_from: Some(producer),
        }]
    }

    fn on_end_txn(&mut self, result: Result<Option<ProducerId>>) -> Vec<Action> {
        let commit = match self.phase {
            Phase::Committing => true,
            Phase::Aborting => false,
            _ => return self.unexpected("EndTxn"),
        };
        let Some(producer) = self.producer else {
            return vec![Action::Done(Err(self.no_producer()))];
        };
        match result {
            Ok(next) => {
                let started = self.started;
                self.clear();
                self.started = started;
                let mut actions = Vec::new();
                let next = next.filter(|n| *n != producer);
                if let Some(next) = next {
                    self.use_producer(next);
                    actions.push(Action::UseProducer(next));
                }
                actions.extend(self.after_end(commit, producer, next.is_some()));
                actions
            }
            Err(e) => {
                let kind = end_error_kind(&e);
                // Java's abortableErrorIfPossible: the abort bumps the epoch.
                self.bump_owed |= e.kafka_code() == Some(KafkaCode::UNKNOWN_PRODUCER_ID);
                self.phase = phase_for(kind, e.clone());
                vec![Action::Done(Err(self.error(kind, e)))]
            }
        }
    }

    fn on_init_producer_id(&mut self, result: Result<(ProducerId, bool)>) -> Vec<Action> {
        let initializing = match self.phase {
            Phase::Initializing => true,
            Phase::Bumping => false,
            _ => return self.unexpected("InitProducerId"),
        };
        match result {
            Ok((producer, v2)) => {
                if initializing {
                    self.v2 = v2 && self.allows_v2();
                    self.clear();
                }
                self.use_producer(producer);
                self.phase = Phase::Ready;
                vec![Action::UseProducer(producer), Action::Done(Ok(()))]
            }
            Err(e) => {
                let kind = init_error_kind(&e);
                // Not fatal: the producer must be initialised again (the
                // epoch did not move, so sequence gaps may be left).
                self.phase = phase_for(kind, e.clone());
                vec![Action::Done(Err(self.error(kind, e)))]
            }
        }
    }

    fn use_producer(&mut self, producer: ProducerId) {
        self.producer = Some(producer);
        self.bump_owed = false;
    }

    fn clear(&mut self) {
        self.added.clear();
        self.pending.clear();
        self.started = false;
    }

    /// Marks the transaction failed by `e` (a fatal error wins over any
    /// other) and returns the classed error.
    fn fail(&mut self, e: Error) -> Error {
        let kind = extend_error_kind(&e);
        match self.phase {
            Phase::Fatal(_) => {}
            Phase::InTransaction | Phase::Abortable(_) | Phase::Indefinite(_) => {
                self.phase = phase_for(kind, e.clone());
            }
            _ if kind == TxnErrorKind::Fatal => self.phase = Phase::Fatal(e.clone()),
            _ => {}
        }
        self.error(kind, e)
    }
}

/// The answer event for `request` failing with `e`.
fn failed(request: Action, e: Error) -> Event {
    match request {
        Action::InitProducerId { .. } => Event::InitProducerId(Err(e)),
        Action::AddPartitions { partitions, .. } => Event::AddPartitions {
            partitions,
            result: Err(e),
        },
        Action::AddOffsets { .. } => Event::AddOffsets(Err(e)),
        Action::TxnOffsetCommit { .. } => Event::TxnOffsetCommit(Err(e)),
        _ => Event::EndTxn(Err(e)),
    }
}

fn phase_for(kind: TxnErrorKind, e: Error) -> Phase {
    match kind {
        TxnErrorKind::Fatal => Phase::Fatal(e),
        TxnErrorKind::Indefinite => Phase::Indefinite(e),
        _ => Phase::Abortable(e),
    }
}

fn fatal_code(e: &Error) -> bool {
    matches!(
        e.kafka_code(),
        Some(KafkaCode::PRODUCER_FENCED)
            | Some(KafkaCode::INVALID_PRODUCER_EPOCH)
            | Some(KafkaCode::TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    )
}

/// AddPartitionsToTxn, AddOffsetsToTxn, TxnOffsetCommit: fatal for fencing
/// and authorisation; indefinite for a retriable failure the driver gave up
/// on (timeouts, lost connections); abortable otherwise.
pub(crate) fn extend_error_kind(e: &Error) -> TxnErrorKind {
    match e.kafka_code() {
        _ if fatal_code(e) => TxnErrorKind::Fatal,
        Some(_) => TxnErrorKind::Abortable,
        None if e.is_retriable() => TxnErrorKind::Indefinite,
        None => TxnErrorKind::Abortable,
    }
}

/// EndTxn, as Java's `EndTxnHandler` classes its answer: fencing,
/// authorisation, INVALID_TXN_STATE, INVALID_PRODUCER_ID_MAPPING and any
/// code it does not handle are fatal; UNKNOWN_PRODUCER_ID and
/// TRANSACTION_ABORTABLE (KIP-890) abortable; a retriable code the retries
/// did not get past, or a failure without an answer, leaves the outcome
/// unknown (indefinite: initialise again).
pub(crate) fn end_error_kind(e: &Error) -> TxnErrorKind {
    match e.kafka_code() {
        Some(KafkaCode::UNKNOWN_PRODUCER_ID) | Some(KafkaCode::TRANSACTION_ABORTABLE) => {
            TxnErrorKind::Abortable
        }
        Some(code) if code.is_retriable() => TxnErrorKind::Indefinite,
        Some(_) => TxnErrorKind::Fatal,
        None => TxnErrorKind::Indefinite,
    }
}

/// InitProducerId: fencing and authorisation are fatal (Java); anything
/// else leaves the producer to be initialised again.
pub(crate) fn init_error_kind(e: &Error) -> TxnErrorKind {
    if fatal_code(e) {
        TxnErrorKind::Fatal
    } else {
        TxnErrorKind::Indefinite
    }
}

/// Retry interval while the previous transaction completes.
pub(crate) const CONCURRENT_TXN_BACKOFF: Duration = Duration::from_millis(20);
/// Attempts polled at [`CONCURRENT_TXN_BACKOFF`]; markers that take longer
/// (a partition offline) get the exponential backoff, not 50 requests/s.
pub(crate) const CONCURRENT_TXN_FAST_ATTEMPTS: u32 = 10;

/// Whether a coordinator request that failed with `err` on its `attempt`th
/// try (from 1) is tried again, and after how long. Coordinator moves
/// (NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE, for which the machine also
/// asks for a new lookup), COORDINATOR_LOAD_IN_PROGRESS,
/// CONCURRENT_TRANSACTIONS and a coordinator that cannot be reached are;
/// other retriable failures (another retriable code, a timeout, a lost
/// connection) only when `resend` says resending the request is harmless,
/// since EndTxn's outcome after a lost answer is unknown. None: give up
/// now.
pub(crate) fn retry_after(
    err: &Error,
    attempt: u32,
    resend: bool,
    max_backoff: Duration,
) -> Option<Duration> {
    let code = err.kafka_code();
    let again = matches!(
        code,
        Some(KafkaCode::CONCURRENT_TRANSACTIONS)
            | Some(KafkaCode::COORDINATOR_LOAD_IN_PROGRESS)
            | Some(KafkaCode::COORDINATOR_NOT_AVAILABLE)
            | Some(KafkaCode::NOT_COORDINATOR)
    ) || matches!(err, Error::NoBrokerAvailable { .. })
        || (err.is_retriable() && resend);
    if !again {
        return None;
    }
    let attempt = attempt.max(1);
    if code == Some(KafkaCode::CONCURRENT_TRANSACTIONS) && attempt <= CONCURRENT_TXN_FAST_ATTEMPTS {
        // The previous transaction's markers are still being written,
        // which takes tens of milliseconds: poll for it at a short, fixed
        // interval (Java does the same for the first AddPartitionsToTxn of
        // a transaction, KAFKA-5477).
        return Some(CONCURRENT_TXN_BACKOFF);
    }
    Some(
        CONCURRENT_TXN_BACKOFF
            .saturating_mul(1 << (attempt - 1).min(6))
            .min(max_backoff),
    )
}
