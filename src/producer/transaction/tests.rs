//! The transaction manager's transitions and retries, scripted as events;
//! and the driver's hand-over of a sink's bump request.

use std::time::Duration;

use tokio::time::Instant;

use super::state::{
    retry_after, Action, Event, Phase, Request, RetryLimits, TxnMachine, CONCURRENT_TXN_BACKOFF,
    CONCURRENT_TXN_FAST_ATTEMPTS,
};
use super::Transactions;
use crate::cluster::CoordinatorKind;
use crate::error::{BrokerRef, Error, KafkaCode, TxnErrorKind};
use crate::producer::idempotence::ProducerId;
use crate::TopicPartition;

const P: ProducerId = ProducerId { id: 7, epoch: 3 };
/// default.api.timeout.ms and retry.backoff.max.ms in the scripts.
const LIMITS: RetryLimits = RetryLimits {
    api_timeout: Duration::from_secs(60),
    max_backoff: Duration::from_secs(1),
};

fn machine(max_version: i16) -> TxnMachine {
    TxnMachine::new("tx-1".into(), max_version, LIMITS)
}

/// Feeds events at one instant: only the retry scripts move the clock,
/// through [`TxnMachine::handle`].
trait Script {
    fn on(&mut self, event: Event) -> Vec<Action>;
}

impl Script for TxnMachine {
    fn on(&mut self, event: Event) -> Vec<Action> {
        self.handle(event, Instant::now())
    }
}
const P_NEXT: ProducerId = ProducerId { id: 7, epoch: 4 };

fn refused(code: KafkaCode) -> Error {
    Error::Kafka {
        code,
        context: "a request to broker 1".into(),
    }
}

fn lost(api: &str) -> Error {
    Error::Disconnected {
        broker: BrokerRef::new(Some(2), Some("127.0.0.1:19194".into())).into(),
        api: Some(api.into()),
        reason: "broker closed the connection".into(),
    }
}

/// Actions compare by what the driver would do; completions by outcome
/// and message.
impl PartialEq for Action {
    fn eq(&self, other: &Action) -> bool {
        format!("{self:?}") == format!("{other:?}")
    }
}

fn tp(p: i32) -> TopicPartition {
    TopicPartition::new("t", p)
}

fn kind(actions: &[Action]) -> Option<TxnErrorKind> {
    match actions {
        [.., Action::Done(Err(e))] => e.txn_kind(),
        _ => None,
    }
}

fn ok(actions: &[Action]) -> bool {
    matches!(actions, [.., Action::Done(Ok(()))])
}

fn err_kind(e: Option<Error>) -> Option<TxnErrorKind> {
    e.and_then(|e| e.txn_kind())
}

/// A machine initialised as `producer`, v2 or not.
fn ready(v2: bool) -> TxnMachine {
    let mut m = machine(2);
    assert_eq!(
        m.on(Event::Init),
        vec![Action::InitProducerId { bump_from: None }]
    );
    let actions = m.on(Event::InitProducerId(Ok((P, v2))));
    assert_eq!(actions[0], Action::UseProducer(P));
    assert!(ok(&actions));
    assert!(matches!(m.phase(), Phase::Ready));
    m
}

/// Open, with records noted on a partition.
fn in_transaction(v2: bool) -> TxnMachine {
    let mut m = ready(v2);
    assert!(ok(&m.on(Event::Begin)));
    assert_eq!(m.note_partition(&tp(0)), !v2, "v1 adds partitions");
    m
}

#[test]
fn nothing_starts_before_init_transactions() {
    let mut m = machine(2);
    assert_eq!(kind(&m.on(Event::Begin)), Some(TxnErrorKind::InvalidState));
    assert_eq!(kind(&m.on(Event::Commit)), Some(TxnErrorKind::InvalidState));
    assert_eq!(m.producer(), None);
    let offsets = m.on(Event::SendOffsets { group: "g".into() });
    assert_eq!(kind(&offsets), Some(TxnErrorKind::InvalidState));
}

/// The client's cap (purekafka.transaction.version.max = 1) wins over the
/// broker's finalized transaction.version.
#[test]
fn transactions_v2_only_when_both_sides_allow_it() {
    let mut m = machine(1);
    m.on(Event::Init);
    m.on(Event::InitProducerId(Ok((P, true))));
    assert!(!m.is_v2());
    assert!(ready(true).is_v2());
}

#[test]
fn fenced_or_unauthorised_on_init_is_fatal_and_a_timeout_asks_for_init_again() {
    for code in [
        KafkaCode::PRODUCER_FENCED,
        KafkaCode::INVALID_PRODUCER_EPOCH,
        KafkaCode::TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
    ] {
        let mut m = machine(2);
        m.on(Event::Init);
        let a = m.on(Event::InitProducerId(Err(refused(code))));
        assert_eq!(kind(&a), Some(TxnErrorKind::Fatal), "{code:?}");
        assert_eq!(kind(&m.on(Event::Init)), Some(TxnErrorKind::Fatal));
    }
    // A lost answer is retried until default.api.timeout.ms; then the
    // producer must be initialised again.
    let mut m = machine(2);
    let t0 = Instant::now();
    m.handle(Event::Init, t0);
    let lost_init = Event::InitProducerId(Err(lost("InitProducerId")));
    let a = m.handle(lost_init, t0 + LIMITS.api_timeout);
    assert_eq!(kind(&a), Some(TxnErrorKind::Indefinite));
    assert_eq!(kind(&m.on(Event::Begin)), Some(TxnErrorKind::Indefinite));
    assert_eq!(
        m.on(Event::Init),
        vec![Action::InitProducerId { bump_from: None }],
        "init may run again"
    );
}

#[test]
fn v1_adds_each_partition_once_and_holds_its_batches_until_added() {
    let mut m = in_transaction(false);
    assert!(!m.note_partition(&tp(0)), "already pending");
    assert!(m.note_partition(&tp(1)));
    assert!(!m.can_send(&tp(0)));
    let a = m.on(Event::AddPartitionsDue);
    let [Action::AddPartitions {
        producer,
        partitions,
    }] = &a[..]
    else {
        panic!("{a:?}")
    };
    assert_eq!(*producer, P);
    let mut sorted = partitions.clone();
    sorted.sort_by_key(|t| t.partition);
    assert_eq!(sorted, vec![tp(0), tp(1)]);
    let a = m.on(Event::AddPartitions {
        partitions: partitions.clone(),
        result: Ok(()),
    });
    assert!(ok(&a));
    assert!(m.can_send(&tp(0)) && m.can_send(&tp(1)));
    assert!(!m.note_partition(&tp(1)), "added");
    assert!(ok(&m.on(Event::AddPartitionsDue)), "nothing left to add");
}

#[test]
fn v2_adds_partitions_through_produce() {
    let mut m = in_transaction(true);
    assert!(m.can_send(&tp(5)));
    assert!(ok(&m.on(Event::AddPartitionsDue)));
}

#[test]
fn a_refused_add_partitions_makes_the_transaction_abortable_and_fencing_fatal() {
    let mut m = in_transaction(false);
    let a = m.on(Event::AddPartitions {
        partitions: vec![tp(0)],
        result: Err(refused(KafkaCode::TOPIC_AUTHORIZATION_FAILED)),
    });
    assert_eq!(kind(&a), Some(TxnErrorKind::Abortable));
    assert_eq!(err_kind(m.commit_blocker()), Some(TxnErrorKind::Abortable));
    assert!(m.abort_blocker().is_none());

    let mut m = in_transaction(false);
    m.on(Event::AddPartitions {
        partitions: vec![tp(0)],
        result: Err(refused(KafkaCode::PRODUCER_FENCED)),
    });
    assert_eq!(err_kind(m.abort_blocker()), Some(TxnErrorKind::Fatal));
}

/// A batch refused as fenced: the commit is refused as fatal, and so is
/// everything after it but closing; a later, lesser error does not soften
/// it.
#[test]
fn a_fenced_batch_makes_the_transaction_fatal() {
    let mut m = in_transaction(true);
    m.on(Event::BatchFailed(refused(KafkaCode::PRODUCER_FENCED)));
    m.on(Event::BatchFailed(refused(
        KafkaCode::NOT_LEADER_OR_FOLLOWER,
    )));
    assert_eq!(err_kind(m.commit_blocker()), Some(TxnErrorKind::Fatal));
    assert_eq!(err_kind(m.abort_blocker()), Some(TxnErrorKind::Fatal));
    assert_eq!(err_kind(m.send_blocker()), Some(TxnErrorKind::Fatal));
    assert_eq!(kind(&m.on(Event::Begin)), Some(TxnErrorKind::Fatal));
    assert_eq!(kind(&m.on(Event::Commit)), Some(TxnErrorKind::Fatal));
}

/// Any other failed batch: commit is refused as abortable; the abort ends
/// the transaction and a new one begins.
#[test]
fn commit_after_an_abortable_error_is_refused_and_the_abort_recovers() {
    let mut m = in_transaction(true);
    m.on(Event::BatchFailed(refused(
        KafkaCode::TOPIC_AUTHORIZATION_FAILED,
    )));
    assert_eq!(kind(&m.on(Event::Commit)), Some(TxnErrorKind::Abortable));
    assert_eq!(err_kind(m.send_blocker()), Some(TxnErrorKind::Abortable));
    assert_eq!(
        m.on(Event::Abort),
        vec![Action::EndTxn {
            producer: P,
            commit: false
        }]
    );
    let a = m.on(Event::EndTxn(Ok(Some(P_NEXT))));
    assert_eq!(a[0], Action::UseProducer(P_NEXT), "v2: EndTxn's epoch");
    assert!(ok(&a));
    assert!(ok(&m.on(Event::Begin)), "a new transaction after the abort");
}

/// KIP-890: every v2 EndTxn answers with the epoch of the next
/// transaction; no InitProducerId follows.
#[test]
fn v2_end_txn_returns_the_next_epoch() {
    let mut m = in_transaction(true);
    assert_eq!(
        m.on(Event::Commit),
        vec![Action::EndTxn {
            producer: P,
            commit: true
        }]
    );
    assert!(matches!(m.phase(), Phase::Committing));
    let a = m.on(Event::EndTxn(Ok(Some(P_NEXT))));
    assert_eq!(a, vec![Action::UseProducer(P_NEXT), Action::Done(Ok(()))]);
    assert_eq!(m.producer(), Some(P_NEXT));
    assert!(matches!(m.phase(), Phase::Ready));
}

/// v1 keeps the epoch across a commit; an abort after records went out
/// bumps it with InitProducerId (failed records may have left sequence
/// gaps), naming the producer id and epoch.
#[test]
fn v1_commit_keeps_the_epoch_and_abort_bumps_it() {
    let mut m = in_transaction(false);
    m.on(Event::Commit);
    assert_eq!(m.on(Event::EndTxn(Ok(None))), vec![Action::Done(Ok(()))]);
    assert_eq!(m.producer(), Some(P));

    m.on(Event::Begin);
    m.note_partition(&tp(0));
    m.on(Event::Abort);
    assert_eq!(
        m.on(Event::EndTxn(Ok(None))),
        vec![Action::InitProducerId { bump_from: Some(P) }]
    );
    assert!(matches!(m.phase(), Phase::Bumping));
    assert_eq!(kind(&m.on(Event::Begin)), Some(TxnErrorKind::InvalidState));
    let a = m.on(Event::InitProducerId(Ok((P_NEXT, false))));
    assert_eq!(a, vec![Action::UseProducer(P_NEXT), Action::Done(Ok(()))]);
    assert!(ok(&m.on(Event::Begin)));
}

/// Issue #18's bug: a sink's KIP-360 bump on a transactional producer ran
/// at once as an InitProducerId without the transactional id. Now it is
/// owed: the open transaction can only abort, and the abort settles it
/// (v1: InitProducerId naming the id and epoch; v2: EndTxn's new epoch).
#[test]
fn a_bump_owed_in_a_transaction_is_settled_by_the_abort() {
    for v2 in [false, true] {
        let mut m = in_transaction(v2);
        assert!(m.on(Event::BumpNeeded { from: P }).is_empty());
        assert_eq!(err_kind(m.send_blocker()), Some(TxnErrorKind::Abortable));
        assert_eq!(kind(&m.on(Event::Commit)), Some(TxnErrorKind::Abortable));
        assert_eq!(
            m.on(Event::Abort),
            vec![Action::EndTxn {
                producer: P,
                commit: false
            }]
        );
        if v2 {
            let a = m.on(Event::EndTxn(Ok(Some(P_NEXT))));
            assert_eq!(a, vec![Action::UseProducer(P_NEXT), Action::Done(Ok(()))]);
        } else {
            let a = m.on(Event::EndTxn(Ok(None)));
            assert_eq!(a, vec![Action::InitProducerId { bump_from: Some(P) }]);
            let a = m.on(Event::InitProducerId(Ok((P_NEXT, false))));
            assert_eq!(a, vec![Action::UseProducer(P_NEXT), Action::Done(Ok(()))]);
        }
        assert!(ok(&m.on(Event::Begin)), "v2 {v2}");
        assert!(m.send_blocker().is_none(), "the bump is settled (v2 {v2})");
    }
}

/// A bump owed with nothing sent: the abort ends locally and still bumps;
/// a v2 EndTxn's epoch cannot settle it, since no EndTxn goes out.
#[test]
fn an_owed_bump_with_nothing_sent_is_run_by_the_abort() {
    let mut m = ready(true);
    m.on(Event::Begin);
    m.on(Event::BumpNeeded { from: P });
    assert_eq!(
        m.on(Event::Abort),
        vec![Action::InitProducerId { bump_from: Some(P) }]
    );
}

/// A report about an epoch that already moved on asks for nothing.
#[test]
fn a_bump_request_under_an_old_epoch_is_already_settled() {
    let mut m = in_transaction(true);
    m.on(Event::Commit);
    m.on(Event::EndTxn(Ok(Some(P_NEXT))));
    m.on(Event::BumpNeeded { from: P });
    assert!(ok(&m.on(Event::Begin)));
    assert!(m.send_blocker().is_none());
}

#[test]
fn begin_send_or_init_while_the_transaction_ends_is_refused() {
    let mut m = in_transaction(true);
    m.on(Event::Commit);
    assert_eq!(kind(&m.on(Event::Begin)), Some(TxnErrorKind::InvalidState));
    assert_eq!(kind(&m.on(Event::Init)), Some(TxnErrorKind::InvalidState));
    assert_eq!(kind(&m.on(Event::Commit)), Some(TxnErrorKind::InvalidState));
    assert_eq!(err_kind(m.send_blocker()), Some(TxnErrorKind::InvalidState));
    assert!(ok(&m.on(Event::EndTxn(Ok(Some(P_NEXT))))));
    assert!(ok(&m.on(Event::Begin)));
}

/// EndTxn's answers, classed as Java's `EndTxnHandler` does: no answer
/// (not resent) leaves the outcome unknown; fencing, INVALID_TXN_STATE,
/// INVALID_PRODUCER_ID_MAPPING and codes it does not handle are fatal;
/// UNKNOWN_PRODUCER_ID and TRANSACTION_ABORTABLE abortable.
#[test]
fn end_txn_errors_are_classed_as_java_does() {
    let cases = [
        (lost("EndTxn"), TxnErrorKind::Indefinite),
        (refused(KafkaCode::INVALID_TXN_STATE), TxnErrorKind::Fatal),
        (
            refused(KafkaCode::INVALID_PRODUCER_ID_MAPPING),
            TxnErrorKind::Fatal,
        ),
        (refused(KafkaCode::PRODUCER_FENCED), TxnErrorKind::Fatal),
        (
            refused(KafkaCode::INVALID_PRODUCER_EPOCH),
            TxnErrorKind::Fatal,
        ),
        (
            refused(KafkaCode::TRANSACTIONAL_ID_AUTHORIZATION_FAILED),
            TxnErrorKind::Fatal,
        ),
        (
            refused(KafkaCode::TOPIC_AUTHORIZATION_FAILED),
            TxnErrorKind::Fatal,
        ),
        (
            refused(KafkaCode::UNKNOWN_PRODUCER_ID),
            TxnErrorKind::Abortable,
        ),
        (
            refused(KafkaCode::TRANSACTION_ABORTABLE),
            TxnErrorKind::Abortable,
        ),
    ];
    for (e, expected) in cases {
        let mut m = in_transaction(true);
        m.on(Event::Commit);
        let what = e.to_string();
        let a = m.on(Event::EndTxn(Err(e)));
        assert_eq!(kind(&a), Some(expected), "{what}");
        assert_eq!(err_kind(m.commit_blocker()), Some(expected), "{what}");
        let abort = err_kind(m.abort_blocker());
        let abortable = expected == TxnErrorKind::Abortable;
        assert_eq!(abort.is_none(), abortable, "{what}: abort allowed");
    }
}

/// UNKNOWN_PRODUCER_ID on EndTxn: the abort that follows bumps the epoch
/// (Java's abortableErrorIfPossible asks for the bump).
#[test]
fn an_unknown_producer_id_on_end_txn_is_settled_by_a_bumping_abort() {
    let mut m = in_transaction(true);
    m.on(Event::Commit);
    m.on(Event::EndTxn(Err(refused(KafkaCode::UNKNOWN_PRODUCER_ID))));
    m.on(Event::Abort);
    assert_eq!(
        m.on(Event::EndTxn(Ok(None))),
        vec![Action::InitProducerId { bump_from: Some(P) }]
    );
}

/// A retriable code is the broker's answer, so EndTxn is sent again (Java
/// re-enqueues it); past default.api.timeout.ms the outcome is unknown.
#[test]
fn end_txn_refused_with_a_retriable_code_is_resent_until_the_api_timeout() {
    let mut m = in_transaction(true);
    let t0 = Instant::now();
    let end = m.handle(Event::Commit, t0);
    let timed_out = || Event::EndTxn(Err(refused(KafkaCode::REQUEST_TIMED_OUT)));
    let a = m.handle(timed_out(), t0);
    assert_eq!(a, vec![backoff(Request::EndTxn, CONCURRENT_TXN_BACKOFF)]);
    assert_eq!(m.handle(Event::TimerFired(Request::EndTxn), t0), end);
    let a = m.handle(timed_out(), t0 + LIMITS.api_timeout);
    assert_eq!(kind(&a), Some(TxnErrorKind::Indefinite));
}

/// v1 offsets: AddOffsetsToTxn, then TxnOffsetCommit; v2 skips the first.
#[test]
fn offsets_join_through_add_offsets_in_v1_only() {
    let mut m = in_transaction(false);
    assert_eq!(
        m.on(Event::SendOffsets { group: "g".into() }),
        vec![Action::AddOffsets {
            producer: P,
            group: "g".into()
        }]
    );
    assert_eq!(
        m.on(Event::AddOffsets(Ok(()))),
        vec![Action::TxnOffsetCommit { producer: P }]
    );
    assert!(ok(&m.on(Event::TxnOffsetCommit(Ok(())))));

    let mut m = ready(true);
    m.on(Event::Begin);
    assert_eq!(
        m.on(Event::SendOffsets { group: "g".into() }),
        vec![Action::TxnOffsetCommit { producer: P }]
    );
    let a = m.on(Event::TxnOffsetCommit(Err(refused(
        KafkaCode::GROUP_AUTHORIZATION_FAILED,
    ))));
    assert_eq!(kind(&a), Some(TxnErrorKind::Abortable));
    // Offsets alone make the transaction one to end with EndTxn.
    m.on(Event::Abort);
    assert!(matches!(m.phase(), Phase::Aborting));
}

/// An empty transaction ends locally, as in Java: no EndTxn.
#[test]
fn an_empty_transaction_ends_without_end_txn() {
    let mut m = ready(true);
    m.on(Event::Begin);
    assert_eq!(m.on(Event::Commit), vec![Action::Done(Ok(()))]);
    m.on(Event::Begin);
    assert_eq!(m.on(Event::Abort), vec![Action::Done(Ok(()))]);
}

/// A commit whose caller went away before EndTxn answered: its outcome is
/// unknown, so the producer asks for init_transactions instead of staying
/// "committing" for ever.
#[test]
fn a_dropped_commit_leaves_the_outcome_unknown() {
    let mut m = in_transaction(true);
    m.on(Event::Commit);
    m.on(Event::Cancelled(None));
    assert_eq!(kind(&m.on(Event::Begin)), Some(TxnErrorKind::Indefinite));
    assert_eq!(
        m.on(Event::Init),
        vec![Action::InitProducerId { bump_from: None }]
    );
    m.on(Event::InitProducerId(Ok((P_NEXT, true))));
    assert!(ok(&m.on(Event::Begin)));
    // A dropped send_offsets call leaves the open transaction as it was:
    // staging the offsets again is harmless.
    m.on(Event::Cancelled(None));
    assert!(m.send_blocker().is_none());
}

/// The coordinator moved while EndTxn was out: NOT_COORDINATOR and the
/// other coordinator errors are retried (the driver looks the coordinator
/// up again) even for EndTxn, which is never resent after a lost answer.
#[test]
fn coordinator_errors_are_retried_and_a_lost_end_txn_answer_is_not() {
    let max = Duration::from_secs(1);
    for code in [
        KafkaCode::NOT_COORDINATOR,
        KafkaCode::COORDINATOR_NOT_AVAILABLE,
        KafkaCode::COORDINATOR_LOAD_IN_PROGRESS,
        KafkaCode::CONCURRENT_TRANSACTIONS,
    ] {
        assert!(
            retry_after(&refused(code), 1, false, max).is_some(),
            "{code:?}"
        );
    }
    assert_eq!(retry_after(&lost("EndTxn"), 1, false, max), None);
    assert!(retry_after(&lost("AddPartitionsToTxn"), 1, true, max).is_some());
    assert_eq!(
        retry_after(&refused(KafkaCode::PRODUCER_FENCED), 1, true, max),
        None
    );
}

/// CONCURRENT_TRANSACTIONS: polled every 20 ms for the first attempts, then
/// exponential backoff up to retry.backoff.max.ms.
#[test]
fn concurrent_transactions_are_polled_fast_then_backed_off() {
    let busy = refused(KafkaCode::CONCURRENT_TRANSACTIONS);
    let max = Duration::from_millis(500);
    let fast = retry_after(&busy, CONCURRENT_TXN_FAST_ATTEMPTS, false, max);
    assert_eq!(fast, Some(CONCURRENT_TXN_BACKOFF));
    let slow = retry_after(&busy, CONCURRENT_TXN_FAST_ATTEMPTS + 1, false, max);
    assert!(slow > Some(CONCURRENT_TXN_BACKOFF));
    assert_eq!(retry_after(&busy, 100, false, max), Some(max));
}

/// The driver: a sink's bump request reaches the machine before the next
/// call, so the commit is refused as abortable.
#[test]
fn the_driver_hands_a_sinks_bump_request_to_the_machine() {
    let t = Transactions::new("tx-1".into(), Duration::from_secs(10), 2);
    assert_eq!(
        t.begin().unwrap_err().txn_kind(),
        Some(TxnErrorKind::InvalidState)
    );
    {
        let mut m = t.machine();
        m.on(Event::Init);
        for a in m.on(Event::InitProducerId(Ok((P, true)))) {
            if let Action::UseProducer(p) = a {
                t.producer().set(p);
            }
        }
    }
    t.begin().expect("begin");
    assert_eq!(t.producer().begin_bump(), None, "no bare InitProducerId");
    assert_eq!(t.producer().current(), Some(P));
    assert_eq!(
        t.check_send().unwrap_err().txn_kind(),
        Some(TxnErrorKind::Abortable)
    );
    assert!(t.commit_blocker().is_some(), "commit is refused");
    assert!(t.check_abort().is_ok(), "abort is the way out");
}

/// KIP-360 after an abort: the bump names the transactional id, the
/// producer id and its epoch (a bare one would get a fresh,
/// non-transactional id).
#[test]
fn bump_requests_carry_the_transactional_id_producer_id_and_epoch() {
    let t = Transactions::new("tx-1".into(), Duration::from_secs(60), 2);
    let bump = t.init_request(Some(P));
    assert_eq!(bump.transactional_id.as_deref().map(|s| &**s), Some("tx-1"));
    assert_eq!(bump.transaction_timeout_ms, 60_000);
    assert_eq!((bump.producer_id.0, bump.producer_epoch), (7, 3));
    let first = t.init_request(None);
    assert_eq!((first.producer_id.0, first.producer_epoch), (-1, -1));
}

fn backoff(request: Request, delay: Duration) -> Action {
    Action::Backoff { request, delay }
}

/// The coordinator moved while EndTxn was out: the machine asks for a new
/// lookup and a backoff, and sends EndTxn again when the timer fires.
#[test]
fn a_moved_coordinator_is_looked_up_again_and_the_request_resent() {
    let mut m = in_transaction(true);
    let end = m.on(Event::Commit);
    let a = m.on(Event::EndTxn(Err(refused(KafkaCode::NOT_COORDINATOR))));
    assert_eq!(
        a,
        vec![
            Action::Rediscover(CoordinatorKind::Transaction),
            backoff(Request::EndTxn, CONCURRENT_TXN_BACKOFF)
        ]
    );
    assert!(matches!(m.phase(), Phase::Committing));
    assert_eq!(m.on(Event::TimerFired(Request::EndTxn)), end);
    assert!(ok(&m.on(Event::EndTxn(Ok(Some(P_NEXT))))));
}

/// A request that never left (no coordinator found, no connection) goes out
/// again, EndTxn too; a lost EndTxn answer does not: its outcome is
/// unknown.
#[test]
fn an_unsent_end_txn_is_retried_and_a_lost_answer_is_not() {
    let mut m = in_transaction(true);
    let end = m.on(Event::Commit);
    let a = m.on(Event::Unreachable {
        request: Request::EndTxn,
        error: lost("EndTxn"),
    });
    assert_eq!(
        a,
        vec![
            Action::Rediscover(CoordinatorKind::Transaction),
            backoff(Request::EndTxn, CONCURRENT_TXN_BACKOFF)
        ]
    );
    assert_eq!(m.on(Event::TimerFired(Request::EndTxn)), end);
    let a = m.on(Event::EndTxn(Err(lost("EndTxn"))));
    assert_eq!(a.len(), 1, "no retry: {a:?}");
    assert_eq!(kind(&a), Some(TxnErrorKind::Indefinite));
}

/// A lost answer to a request whose resending is harmless is retried
/// (found by the transactions-bounce fault test, where InitProducerId and
/// TxnOffsetCommit gave up at the first refused connection); the group
/// coordinator is looked up again, as its broker may be the one that died.
#[test]
fn a_lost_answer_is_retried_when_resending_is_harmless() {
    let mut m = machine(2);
    let init = m.on(Event::Init);
    let a = m.on(Event::InitProducerId(Err(lost("InitProducerId"))));
    assert_eq!(
        a,
        vec![backoff(Request::InitProducerId, CONCURRENT_TXN_BACKOFF)]
    );
    assert_eq!(m.on(Event::TimerFired(Request::InitProducerId)), init);
    assert!(ok(&m.on(Event::InitProducerId(Ok((P, true))))));

    m.on(Event::Begin);
    let commit = m.on(Event::SendOffsets { group: "g".into() });
    let a = m.on(Event::TxnOffsetCommit(Err(lost("TxnOffsetCommit"))));
    assert_eq!(
        a,
        vec![
            Action::Rediscover(CoordinatorKind::Group),
            backoff(Request::TxnOffsetCommit, CONCURRENT_TXN_BACKOFF)
        ]
    );
    assert_eq!(m.on(Event::TimerFired(Request::TxnOffsetCommit)), commit);
    assert!(ok(&m.on(Event::TxnOffsetCommit(Ok(())))));
}

/// No retry starts past default.api.timeout.ms from the first attempt: the
/// failure then reaches the call.
#[test]
fn retries_stop_at_the_api_timeout() {
    let mut m = in_transaction(true);
    let t0 = Instant::now();
    m.handle(Event::Commit, t0);
    let loading = || Event::EndTxn(Err(refused(KafkaCode::COORDINATOR_LOAD_IN_PROGRESS)));
    let a = m.handle(loading(), t0 + Duration::from_secs(30));
    assert!(matches!(a[..], [Action::Backoff { .. }]), "{a:?}");
    m.handle(
        Event::TimerFired(Request::EndTxn),
        t0 + Duration::from_secs(30),
    );
    let a = m.handle(
        loading(),
        t0 + LIMITS.api_timeout - Duration::from_millis(1),
    );
    assert!(matches!(a[..], [Action::Done(Err(_))]), "{a:?}");
    assert!(kind(&a).is_some());
}

/// CONCURRENT_TRANSACTIONS through the machine: polled at 20 ms for the
/// first attempts, then backed off exponentially.
#[test]
fn the_machine_polls_concurrent_transactions_fast_then_backs_off() {
    let mut m = in_transaction(true);
    m.on(Event::Commit);
    let busy = || Event::EndTxn(Err(refused(KafkaCode::CONCURRENT_TRANSACTIONS)));
    for _ in 0..CONCURRENT_TXN_FAST_ATTEMPTS {
        assert_eq!(
            m.on(busy()),
            vec![backoff(Request::EndTxn, CONCURRENT_TXN_BACKOFF)]
        );
        m.on(Event::TimerFired(Request::EndTxn));
    }
    let a = m.on(busy());
    let [Action::Backoff { delay, .. }] = a[..] else {
        panic!("{a:?}")
    };
    assert!(delay > CONCURRENT_TXN_BACKOFF && delay <= LIMITS.max_backoff);
}

/// A call dropped while its request backs off: the timer then asks for
/// nothing, and the outcome is unknown.
#[test]
fn a_call_dropped_during_a_backoff_sends_nothing_more() {
    let mut m = in_transaction(true);
    m.on(Event::Commit);
    m.on(Event::EndTxn(Err(refused(KafkaCode::NOT_COORDINATOR))));
    m.on(Event::Cancelled(Some(Request::EndTxn)));
    assert!(m.on(Event::TimerFired(Request::EndTxn)).is_empty());
    assert_eq!(err_kind(m.commit_blocker()), Some(TxnErrorKind::Indefinite));
}

/// The adder's AddPartitionsToTxn and the application's offsets are out
/// together: each retries on its own.
#[test]
fn requests_of_different_kinds_retry_independently() {
    let mut m = in_transaction(false);
    let add = m.on(Event::AddPartitionsDue);
    assert!(matches!(add[..], [Action::AddPartitions { .. }]));
    m.on(Event::SendOffsets { group: "g".into() });
    let a = m.on(Event::Unreachable {
        request: Request::AddPartitions,
        error: lost("AddPartitionsToTxn"),
    });
    assert!(matches!(a[..], [_, Action::Backoff { .. }]), "{a:?}");
    assert_eq!(
        m.on(Event::AddOffsets(Ok(()))),
        vec![Action::TxnOffsetCommit { producer: P }]
    );
    assert_eq!(m.on(Event::TimerFired(Request::AddPartitions)), add);
    let a = m.on(Event::AddPartitions {
        partitions: vec![tp(0)],
        result: Ok(()),
    });
    assert!(ok(&a));
    assert!(ok(&m.on(Event::TxnOffsetCommit(Ok(())))));
}

/// One send_offsets_to_transaction at a time: a second while the first is
/// out is refused, not mixed into its retries.
#[test]
fn a_second_send_offsets_while_one_runs_is_refused() {
    let mut m = in_transaction(true);
    let first = m.on(Event::SendOffsets { group: "g".into() });
    assert_eq!(first, vec![Action::TxnOffsetCommit { producer: P }]);
    let second = m.on(Event::SendOffsets { group: "g".into() });
    assert_eq!(kind(&second), Some(TxnErrorKind::InvalidState));
    assert!(ok(&m.on(Event::TxnOffsetCommit(Ok(())))));
    assert_eq!(m.on(Event::SendOffsets { group: "g".into() }), first);
}
