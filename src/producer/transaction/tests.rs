//! The transaction manager's transitions, scripted as events; and the
//! driver's retry loop.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use super::state::{
    retry_after, Action, Event, Phase, TxnMachine, CONCURRENT_TXN_BACKOFF,
    CONCURRENT_TXN_FAST_ATTEMPTS,
};
use super::{retry, Transactions};
use crate::config::ClientConfig;
use crate::error::{Error, KafkaCode, Result, TxnErrorKind};
use crate::producer::idempotence::ProducerId;
use crate::TopicPartition;

const P: ProducerId = ProducerId { id: 7, epoch: 3 };
const P_NEXT: ProducerId = ProducerId { id: 7, epoch: 4 };

fn refused(code: KafkaCode) -> Error {
    Error::Kafka {
        code,
        context: "a request to broker 1".into(),
    }
}

fn lost(api: &str) -> Error {
    Error::Disconnected {
        broker: "broker 2 (127.0.0.1:19194)".into(),
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
    let mut m = TxnMachine::new("tx-1".into(), 2);
    assert_eq!(
        m.handle(Event::Init),
        vec![Action::InitProducerId { bump_from: None }]
    );
    let actions = m.handle(Event::InitProducerId(Ok((P, v2))));
    assert_eq!(actions[0], Action::UseProducer(P));
    assert!(ok(&actions));
    assert!(matches!(m.phase(), Phase::Ready));
    m
}

/// Open, with records noted on a partition.
fn in_transaction(v2: bool) -> TxnMachine {
    let mut m = ready(v2);
    assert!(ok(&m.handle(Event::Begin)));
    assert_eq!(m.note_partition(&tp(0)), !v2, "v1 adds partitions");
    m
}

#[test]
fn nothing_starts_before_init_transactions() {
    let mut m = TxnMachine::new("tx-1".into(), 2);
    assert_eq!(
        kind(&m.handle(Event::Begin)),
        Some(TxnErrorKind::InvalidState)
    );
    assert_eq!(
        kind(&m.handle(Event::Commit)),
        Some(TxnErrorKind::InvalidState)
    );
    assert_eq!(m.producer(), None);
    let offsets = m.handle(Event::SendOffsets { group: "g".into() });
    assert_eq!(kind(&offsets), Some(TxnErrorKind::InvalidState));
}

/// The client's cap (purekafka.transaction.version.max = 1) wins over the
/// broker's finalized transaction.version.
#[test]
fn transactions_v2_only_when_both_sides_allow_it() {
    let mut m = TxnMachine::new("tx-1".into(), 1);
    m.handle(Event::Init);
    m.handle(Event::InitProducerId(Ok((P, true))));
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
        let mut m = TxnMachine::new("tx-1".into(), 2);
        m.handle(Event::Init);
        let a = m.handle(Event::InitProducerId(Err(refused(code))));
        assert_eq!(kind(&a), Some(TxnErrorKind::Fatal), "{code:?}");
        assert_eq!(kind(&m.handle(Event::Init)), Some(TxnErrorKind::Fatal));
    }
    let mut m = TxnMachine::new("tx-1".into(), 2);
    m.handle(Event::Init);
    let a = m.handle(Event::InitProducerId(Err(lost("InitProducerId"))));
    assert_eq!(kind(&a), Some(TxnErrorKind::Indefinite));
    assert_eq!(
        kind(&m.handle(Event::Begin)),
        Some(TxnErrorKind::Indefinite)
    );
    assert_eq!(
        m.handle(Event::Init),
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
    let a = m.handle(Event::AddPartitionsDue);
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
    let a = m.handle(Event::AddPartitions {
        partitions: partitions.clone(),
        result: Ok(()),
    });
    assert!(ok(&a));
    assert!(m.can_send(&tp(0)) && m.can_send(&tp(1)));
    assert!(!m.note_partition(&tp(1)), "added");
    assert!(
        ok(&m.handle(Event::AddPartitionsDue)),
        "nothing left to add"
    );
}

#[test]
fn v2_adds_partitions_through_produce() {
    let mut m = in_transaction(true);
    assert!(m.can_send(&tp(5)));
    assert!(ok(&m.handle(Event::AddPartitionsDue)));
}

#[test]
fn a_refused_add_partitions_makes_the_transaction_abortable_and_fencing_fatal() {
    let mut m = in_transaction(false);
    let a = m.handle(Event::AddPartitions {
        partitions: vec![tp(0)],
        result: Err(refused(KafkaCode::TOPIC_AUTHORIZATION_FAILED)),
    });
    assert_eq!(kind(&a), Some(TxnErrorKind::Abortable));
    assert_eq!(err_kind(m.commit_blocker()), Some(TxnErrorKind::Abortable));
    assert!(m.abort_blocker().is_none());

    let mut m = in_transaction(false);
    m.handle(Event::AddPartitions {
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
    m.handle(Event::BatchFailed(refused(KafkaCode::PRODUCER_FENCED)));
    m.handle(Event::BatchFailed(refused(
        KafkaCode::NOT_LEADER_OR_FOLLOWER,
    )));
    assert_eq!(err_kind(m.commit_blocker()), Some(TxnErrorKind::Fatal));
    assert_eq!(err_kind(m.abort_blocker()), Some(TxnErrorKind::Fatal));
    assert_eq!(err_kind(m.send_blocker()), Some(TxnErrorKind::Fatal));
    assert_eq!(kind(&m.handle(Event::Begin)), Some(TxnErrorKind::Fatal));
    assert_eq!(kind(&m.handle(Event::Commit)), Some(TxnErrorKind::Fatal));
}

/// Any other failed batch: commit is refused as abortable; the abort ends
/// the transaction and a new one begins.
#[test]
fn commit_after_an_abortable_error_is_refused_and_the_abort_recovers() {
    let mut m = in_transaction(true);
    m.handle(Event::BatchFailed(refused(
        KafkaCode::TOPIC_AUTHORIZATION_FAILED,
    )));
    assert_eq!(
        kind(&m.handle(Event::Commit)),
        Some(TxnErrorKind::Abortable)
    );
    assert_eq!(err_kind(m.send_blocker()), Some(TxnErrorKind::Abortable));
    assert_eq!(
        m.handle(Event::Abort),
        vec![Action::EndTxn {
            producer: P,
            commit: false
        }]
    );
    let a = m.handle(Event::EndTxn(Ok(Some(P_NEXT))));
    assert_eq!(a[0], Action::UseProducer(P_NEXT), "v2: EndTxn's epoch");
    assert!(ok(&a));
    assert!(
        ok(&m.handle(Event::Begin)),
        "a new transaction after the abort"
    );
}

/// KIP-890: every v2 EndTxn answers with the epoch of the next
/// transaction; no InitProducerId follows.
#[test]
fn v2_end_txn_returns_the_next_epoch() {
    let mut m = in_transaction(true);
    assert_eq!(
        m.handle(Event::Commit),
        vec![Action::EndTxn {
            producer: P,
            commit: true
        }]
    );
    assert!(matches!(m.phase(), Phase::Committing));
    let a = m.handle(Event::EndTxn(Ok(Some(P_NEXT))));
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
    m.handle(Event::Commit);
    assert_eq!(
        m.handle(Event::EndTxn(Ok(None))),
        vec![Action::Done(Ok(()))]
    );
    assert_eq!(m.producer(), Some(P));

    m.handle(Event::Begin);
    m.note_partition(&tp(0));
    m.handle(Event::Abort);
    assert_eq!(
        m.handle(Event::EndTxn(Ok(None))),
        vec![Action::InitProducerId { bump_from: Some(P) }]
    );
    assert!(matches!(m.phase(), Phase::Bumping));
    assert_eq!(
        kind(&m.handle(Event::Begin)),
        Some(TxnErrorKind::InvalidState)
    );
    let a = m.handle(Event::InitProducerId(Ok((P_NEXT, false))));
    assert_eq!(a, vec![Action::UseProducer(P_NEXT), Action::Done(Ok(()))]);
    assert!(ok(&m.handle(Event::Begin)));
}

/// Issue #18's bug: a sink's KIP-360 bump on a transactional producer ran
/// at once as an InitProducerId without the transactional id. Now it is
/// owed: the open transaction can only abort, and the abort settles it
/// (v1: InitProducerId naming the id and epoch; v2: EndTxn's new epoch).
#[test]
fn a_bump_owed_in_a_transaction_is_settled_by_the_abort() {
    for v2 in [false, true] {
        let mut m = in_transaction(v2);
        assert!(m.handle(Event::BumpNeeded { from: P }).is_empty());
        assert_eq!(err_kind(m.send_blocker()), Some(TxnErrorKind::Abortable));
        assert_eq!(
            kind(&m.handle(Event::Commit)),
            Some(TxnErrorKind::Abortable)
        );
        assert_eq!(
            m.handle(Event::Abort),
            vec![Action::EndTxn {
                producer: P,
                commit: false
            }]
        );
        if v2 {
            let a = m.handle(Event::EndTxn(Ok(Some(P_NEXT))));
            assert_eq!(a, vec![Action::UseProducer(P_NEXT), Action::Done(Ok(()))]);
        } else {
            let a = m.handle(Event::EndTxn(Ok(None)));
            assert_eq!(a, vec![Action::InitProducerId { bump_from: Some(P) }]);
            let a = m.handle(Event::InitProducerId(Ok((P_NEXT, false))));
            assert_eq!(a, vec![Action::UseProducer(P_NEXT), Action::Done(Ok(()))]);
        }
        assert!(ok(&m.handle(Event::Begin)), "v2 {v2}");
        assert!(m.send_blocker().is_none(), "the bump is settled (v2 {v2})");
    }
}

/// A bump owed with nothing sent: the abort ends locally and still bumps;
/// a v2 EndTxn's epoch cannot settle it, since no EndTxn goes out.
#[test]
fn an_owed_bump_with_nothing_sent_is_run_by_the_abort() {
    let mut m = ready(true);
    m.handle(Event::Begin);
    m.handle(Event::BumpNeeded { from: P });
    assert_eq!(
        m.handle(Event::Abort),
        vec![Action::InitProducerId { bump_from: Some(P) }]
    );
}

/// A report about an epoch that already moved on asks for nothing.
#[test]
fn a_bump_request_under_an_old_epoch_is_already_settled() {
    let mut m = in_transaction(true);
    m.handle(Event::Commit);
    m.handle(Event::EndTxn(Ok(Some(P_NEXT))));
    m.handle(Event::BumpNeeded { from: P });
    assert!(ok(&m.handle(Event::Begin)));
    assert!(m.send_blocker().is_none());
}

#[test]
fn begin_send_or_init_while_the_transaction_ends_is_refused() {
    let mut m = in_transaction(true);
    m.handle(Event::Commit);
    assert_eq!(
        kind(&m.handle(Event::Begin)),
        Some(TxnErrorKind::InvalidState)
    );
    assert_eq!(
        kind(&m.handle(Event::Init)),
        Some(TxnErrorKind::InvalidState)
    );
    assert_eq!(
        kind(&m.handle(Event::Commit)),
        Some(TxnErrorKind::InvalidState)
    );
    assert_eq!(err_kind(m.send_blocker()), Some(TxnErrorKind::InvalidState));
    assert!(ok(&m.handle(Event::EndTxn(Ok(Some(P_NEXT))))));
    assert!(ok(&m.handle(Event::Begin)));
}

/// EndTxn that got no answer (the driver does not resend it): the outcome
/// is unknown; a refusal is abortable; fencing is fatal.
#[test]
fn end_txn_errors_are_classed() {
    let cases = [
        (lost("EndTxn"), TxnErrorKind::Indefinite),
        (
            refused(KafkaCode::INVALID_TXN_STATE),
            TxnErrorKind::Abortable,
        ),
        (refused(KafkaCode::PRODUCER_FENCED), TxnErrorKind::Fatal),
        (
            refused(KafkaCode::INVALID_PRODUCER_EPOCH),
            TxnErrorKind::Fatal,
        ),
    ];
    for (e, expected) in cases {
        let mut m = in_transaction(true);
        m.handle(Event::Commit);
        let a = m.handle(Event::EndTxn(Err(e)));
        assert_eq!(kind(&a), Some(expected));
        assert_eq!(err_kind(m.commit_blocker()), Some(expected));
    }
}

/// v1 offsets: AddOffsetsToTxn, then TxnOffsetCommit; v2 skips the first.
#[test]
fn offsets_join_through_add_offsets_in_v1_only() {
    let mut m = in_transaction(false);
    assert_eq!(
        m.handle(Event::SendOffsets { group: "g".into() }),
        vec![Action::AddOffsets {
            producer: P,
            group: "g".into()
        }]
    );
    assert_eq!(
        m.handle(Event::AddOffsets(Ok(()))),
        vec![Action::TxnOffsetCommit { producer: P }]
    );
    assert!(ok(&m.handle(Event::TxnOffsetCommit(Ok(())))));

    let mut m = ready(true);
    m.handle(Event::Begin);
    assert_eq!(
        m.handle(Event::SendOffsets { group: "g".into() }),
        vec![Action::TxnOffsetCommit { producer: P }]
    );
    let a = m.handle(Event::TxnOffsetCommit(Err(refused(
        KafkaCode::GROUP_AUTHORIZATION_FAILED,
    ))));
    assert_eq!(kind(&a), Some(TxnErrorKind::Abortable));
    // Offsets alone make the transaction one to end with EndTxn.
    m.handle(Event::Abort);
    assert!(matches!(m.phase(), Phase::Aborting));
}

/// An empty transaction ends locally, as in Java: no EndTxn.
#[test]
fn an_empty_transaction_ends_without_end_txn() {
    let mut m = ready(true);
    m.handle(Event::Begin);
    assert_eq!(m.handle(Event::Commit), vec![Action::Done(Ok(()))]);
    m.handle(Event::Begin);
    assert_eq!(m.handle(Event::Abort), vec![Action::Done(Ok(()))]);
}

/// A commit whose caller went away before EndTxn answered: its outcome is
/// unknown, so the producer asks for init_transactions instead of staying
/// "committing" for ever.
#[test]
fn a_dropped_commit_leaves_the_outcome_unknown() {
    let mut m = in_transaction(true);
    m.handle(Event::Commit);
    m.handle(Event::Cancelled);
    assert_eq!(
        kind(&m.handle(Event::Begin)),
        Some(TxnErrorKind::Indefinite)
    );
    assert_eq!(
        m.handle(Event::Init),
        vec![Action::InitProducerId { bump_from: None }]
    );
    m.handle(Event::InitProducerId(Ok((P_NEXT, true))));
    assert!(ok(&m.handle(Event::Begin)));
    // A dropped send_offsets call leaves the open transaction as it was:
    // staging the offsets again is harmless.
    m.handle(Event::Cancelled);
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
        m.handle(Event::Init);
        for a in m.handle(Event::InitProducerId(Ok((P, true)))) {
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

/// A killed coordinator: a request whose resending is harmless is retried
/// past lost connections (found by the transactions-bounce fault test,
/// where InitProducerId and TxnOffsetCommit gave up at the first refused
/// connection); one whose outcome would be unknown is not.
#[tokio::test]
async fn lost_connections_are_retried_only_when_resending_is_harmless() {
    let mut cfg = ClientConfig::builder()
        .bootstrap_servers("127.0.0.1:1")
        .build()
        .unwrap();
    cfg.retry_backoff_max = Duration::from_millis(5);
    let calls = AtomicU32::new(0);
    let flaky = || async {
        if calls.fetch_add(1, Ordering::Relaxed) < 3 {
            Err(lost("InitProducerId"))
        } else {
            Ok(7)
        }
    };
    let r: Result<i32> = retry(&cfg, "InitProducerId", |_| true, flaky).await;
    assert_eq!(r.unwrap(), 7);
    assert_eq!(calls.load(Ordering::Relaxed), 4);

    calls.store(0, Ordering::Relaxed);
    let err = retry(&cfg, "EndTxn", |_| false, flaky).await.unwrap_err();
    assert!(matches!(err, Error::Disconnected { .. }), "{err}");
    assert_eq!(calls.load(Ordering::Relaxed), 1, "EndTxn is not resent");
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
