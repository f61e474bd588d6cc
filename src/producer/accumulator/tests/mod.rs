//! The partition state machine driven by scripted events: drains (the sink
//! looking for work), broker outcomes and time, without a socket.

use std::time::Duration;

use tokio::sync::oneshot;
use tokio::time::Instant;

use super::*;
use crate::error::KafkaCode;
use crate::protocol::records::{decode_batches, DecodeLimits};

const P7E0: ProducerId = ProducerId { id: 7, epoch: 0 };
const P7E1: ProducerId = ProducerId { id: 7, epoch: 1 };

fn settings() -> BatchSettings {
    BatchSettings {
        batch_size: 64,
        batch_cap: 64,
        linger: Duration::ZERO,
        delivery_timeout: Duration::from_secs(30),
        compression: Compression::None,
        level: None,
        transactional: false,
        max_in_flight: 5,
        retries: u32::MAX,
        // Retries may go at once, so drains need no waiting.
        retry_backoff: Duration::ZERO,
        retry_backoff_max: Duration::ZERO,
    }
}

struct Fixture {
    acc: Accumulator,
    q: Arc<PartitionQueue>,
    tp: TopicPartition,
    /// Judge outcomes as an idempotent producer.
    idempotent: bool,
    /// The outcome of every record appended, in order.
    outcomes: Vec<oneshot::Receiver<Result<RecordMetadata>>>,
}

impl Fixture {
    /// An idempotent producer's partition.
    fn new(settings: BatchSettings) -> Fixture {
        Fixture {
            idempotent: true,
            ..Fixture::plain(settings)
        }
    }

    /// A partition of a producer without idempotence.
    fn plain(settings: BatchSettings) -> Fixture {
        let acc = Accumulator::new(settings, 1 << 20);
        let tp = TopicPartition::new("t", 0);
        let q = acc.queue(&tp, 1);
        Fixture {
            acc,
            q,
            tp,
            idempotent: false,
            outcomes: Vec::new(),
        }
    }

    /// Appends `n` records of 40 bytes: each fills its own 64-byte batch.
    fn append_batches(&mut self, n: usize) {
        for _ in 0..n {
            let record = ProducerRecord::new("t").value(vec![b'x'; 40]);
            let (tx, rx) = oneshot::channel();
            self.acc
                .append(&self.q, &record, 0, 40, Completion::Channel(tx))
                .unwrap();
            self.outcomes.push(rx);
        }
    }

    /// The sink looks for work with `producer` (`None`: not idempotent,
    /// `Some(None)`: a bump under way); returns what it would send.
    fn drain(&self, producer: Option<Option<ProducerId>>) -> Vec<Drained> {
        self.acc
            .drain(1, usize::MAX, producer, true, 0, None)
            .batches
    }

    /// Every batch the sink may send now, one drain after the other.
    fn drain_all(&self, producer: Option<Option<ProducerId>>) -> Vec<Drained> {
        let mut out = Vec::new();
        loop {
            let next = self.drain(producer);
            if next.is_empty() {
                return out;
            }
            out.extend(next);
        }
    }

    /// The broker's answer to `d`, judged while the producer sends as
    /// `current` (`None` during an epoch bump, or without idempotence).
    fn answer(&self, d: &Drained, outcome: BatchOutcome, current: Option<ProducerId>) -> Verdict {
        self.answer_at(d, outcome, current, Instant::now())
    }

    fn answer_at(
        &self,
        d: &Drained,
        outcome: BatchOutcome,
        current: Option<ProducerId>,
        now: Instant,
    ) -> Verdict {
        let ctx = self.acc.outcome_context(now, current, self.idempotent);
        let verdict = self
            .q
            .lock()
            .on_outcome(&self.tp, d.batch_id, outcome, &ctx);
        if let Verdict::Acked { batch, result } = verdict {
            self.acc.finish_batch(&self.tp, batch, Ok(result));
            return Verdict::Acked {
                batch: empty_batch(),
                result,
            };
        }
        verdict
    }
}

/// Stands in for a batch handed back to the accumulator.
fn empty_batch() -> Batch {
    Batch {
        id: u64::MAX,
        data: Bytes::new(),
        pending: Vec::new(),
        mem: 0,
        created: Instant::now(),
        attempts: 0,
        sequence: None,
        unresolved: false,
        last_error: None,
        flush: Vec::new(),
    }
}

fn refused(code: KafkaCode) -> BatchOutcome {
    Err(Error::Kafka {
        code,
        context: "Produce to t-0 on broker 1".into(),
    })
}

fn lost() -> BatchOutcome {
    Err(Error::Disconnected {
        broker: "broker 1".into(),
        api: Some("Produce".into()),
        reason: "broker closed the connection".into(),
    })
}

/// (producer id, epoch, base sequence) as written in the batch's header.
fn header(d: &Drained) -> (i64, i16, i32) {
    let limits = DecodeLimits {
        check_crc: true,
        max_decompressed_size: 1 << 20,
    };
    let batches = decode_batches(d.data.clone(), &limits).unwrap().batches;
    let h = &batches[0].header;
    (h.producer_id, h.producer_epoch, h.base_sequence)
}

fn sequences(drained: &[Drained]) -> Vec<(i16, i32)> {
    drained
        .iter()
        .map(|d| {
            let (_, epoch, seq) = header(d);
            (epoch, seq)
        })
        .collect()
}

fn is_retry(v: &Verdict, bumps: bool) -> bool {
    matches!(v, Verdict::Retry { bump, .. } if *bump == bumps)
}

#[test]
fn an_idempotent_partition_sends_one_batch_until_the_broker_acknowledges_one() {
    let mut f = Fixture::new(settings());
    f.append_batches(4);
    let pid = Some(Some(P7E0));
    let first = f.drain_all(pid);
    assert_eq!(first.len(), 1, "one batch before any acknowledgement");
    assert_eq!(header(&first[0]), (7, 0, 0));
    assert!(matches!(
        f.answer(&first[0], Ok((0, -1)), Some(P7E0)),
        Verdict::Acked {
            result: (0, -1),
            ..
        }
    ));
    let rest = f.drain_all(pid);
    assert_eq!(sequences(&rest), [(0, 1), (0, 2), (0, 3)], "pipelined");
    assert_eq!(f.q.lock().in_flight(), 3);

    // Without idempotence there is no sequence to protect.
    let mut plain = Fixture::plain(settings());
    plain.append_batches(3);
    assert_eq!(plain.drain_all(None).len(), 3, "pipelined from the start");
}

/// The rule of the last session: a first batch refused with
/// NOT_LEADER_OR_FOLLOWER (a topic still being created) must not be
/// overtaken by a later one, which the broker, holding no state for the
/// producer yet, would accept and so refuse the first as out of order.
#[test]
fn a_first_batch_refused_as_not_leader_is_resent_before_any_later_batch() {
    let mut f = Fixture::new(settings());
    f.append_batches(3);
    let pid = Some(Some(P7E0));
    let first = f.drain_all(pid);
    assert_eq!(first.len(), 1);
    assert!(f.drain_all(pid).is_empty(), "nothing overtakes it");
    let v = f.answer(
        &first[0],
        refused(KafkaCode::NOT_LEADER_OR_FOLLOWER),
        Some(P7E0),
    );
    assert!(is_retry(&v, false));
    let again = f.drain_all(pid);
    assert_eq!(again.len(), 1, "still one at a time: nothing confirmed");
    assert_eq!(
        again[0].batch_id, first[0].batch_id,
        "the refused batch first"
    );
    assert_eq!(header(&again[0]), (7, 0, 0), "with its sequence");
    assert!(matches!(
        f.answer(&again[0], Ok((10, -1)), Some(P7E0)),
        Verdict::Acked { .. }
    ));
    assert_eq!(sequences(&f.drain_all(pid)), [(0, 1), (0, 2)]);
    let meta = f.outcomes[0].try_recv().unwrap().unwrap();
    assert_eq!(meta.offset, 10);
}

/// KIP-360: UNKNOWN_PRODUCER_ID asks for an epoch bump; the refused batch
/// and those behind it go again under the new epoch from sequence 0, and
/// no batch goes while the bump is under way.
#[test]
fn unknown_producer_id_bumps_the_epoch_and_resends_from_sequence_zero() {
    let mut f = Fixture::new(settings());
    f.append_batches(3);
    let pid = Some(Some(P7E0));
    let first = f.drain_all(pid);
    f.answer(&first[0], Ok((0, -1)), Some(P7E0));
    let flying = f.drain_all(pid);
    assert_eq!(sequences(&flying), [(0, 1), (0, 2)]);
    let v = f.answer(
        &flying[0],
        refused(KafkaCode::UNKNOWN_PRODUCER_ID),
        Some(P7E0),
    );
    assert!(is_retry(&v, true), "the first refusal asks for a bump");
    // The batch behind it is refused as out of order: a consequence only.
    let v = f.answer(
        &flying[1],
        refused(KafkaCode::OUT_OF_ORDER_SEQUENCE_NUMBER),
        None,
    );
    assert!(is_retry(&v, false));
    assert!(f.drain_all(Some(None)).is_empty(), "waits for the bump");
    let bumped = Some(Some(P7E1));
    let resent = f.drain_all(bumped);
    assert_eq!(
        sequences(&resent),
        [(1, 0), (1, 1)],
        "same id, new epoch: still confirmed, so pipelined from 0"
    );
    assert_eq!(resent[0].batch_id, flying[0].batch_id, "in order");
    for d in &resent {
        assert!(matches!(
            f.answer(d, Ok((5, -1)), Some(P7E1)),
            Verdict::Acked { .. }
        ));
    }
    assert_eq!(f.acc.outstanding(), 0, "every record delivered");
}

/// A batch still in flight under the old epoch when the bump lands is
/// refused as of a stale epoch: that is retried, not a fencing.
#[test]
fn a_stale_epoch_refusal_after_a_bump_is_retried_under_the_new_epoch() {
    let mut f = Fixture::new(settings());
    f.append_batches(1);
    let first = f.drain_all(Some(Some(P7E0)));
    let v = f.answer(
        &first[0],
        refused(KafkaCode::INVALID_PRODUCER_EPOCH),
        Some(P7E1),
    );
    assert!(is_retry(&v, false));
    assert_eq!(sequences(&f.drain_all(Some(Some(P7E1)))), [(1, 0)]);
    // The same refusal under the current epoch is a fencing: it fails.
    let mut g = Fixture::new(settings());
    g.append_batches(1);
    let first = g.drain_all(Some(Some(P7E0)));
    let v = g.answer(
        &first[0],
        refused(KafkaCode::INVALID_PRODUCER_EPOCH),
        Some(P7E0),
    );
    assert!(matches!(v, Verdict::Failed { bump: false, .. }));
}

/// max.in.flight 5: at most five batches of a partition out at once; a
/// retriable error in the middle makes the ones behind it come back out of
/// order, and the partition resends from the refused batch, in order, with
/// the same sequence numbers, once all five are answered.
#[test]
fn ordering_holds_with_five_in_flight_and_a_failure_in_the_middle() {
    let mut f = Fixture::new(settings());
    f.append_batches(8);
    let pid = Some(Some(P7E0));
    let first = f.drain_all(pid);
    f.answer(&first[0], Ok((0, -1)), Some(P7E0));
    let flying = f.drain_all(pid);
    assert_eq!(
        sequences(&flying),
        [(0, 1), (0, 2), (0, 3), (0, 4), (0, 5)],
        "five in flight, no more"
    );
    assert!(matches!(
        f.answer(&flying[0], Ok((1, -1)), Some(P7E0)),
        Verdict::Acked { .. }
    ));
    let v = f.answer(&flying[1], lost(), Some(P7E0));
    assert!(is_retry(&v, false), "a lost answer is retried");
    assert!(f.drain_all(pid).is_empty(), "nothing while others are out");
    for d in &flying[2..4] {
        let v = f.answer(
            d,
            refused(KafkaCode::OUT_OF_ORDER_SEQUENCE_NUMBER),
            Some(P7E0),
        );
        assert!(is_retry(&v, false), "out of order behind a failure");
    }
    assert!(f.drain_all(pid).is_empty(), "one still out");
    f.answer(
        &flying[4],
        refused(KafkaCode::OUT_OF_ORDER_SEQUENCE_NUMBER),
        Some(P7E0),
    );
    let resent = f.drain_all(pid);
    assert_eq!(
        sequences(&resent),
        [(0, 2), (0, 3), (0, 4), (0, 5), (0, 6)],
        "from the refused batch, in order, numbers kept"
    );
    assert_eq!(resent[0].batch_id, flying[1].batch_id);
}

/// A batch refused for good fails; the batch behind it (refused as out of
/// order, a consequence) is renumbered from the last acknowledged sequence,
/// so the broker sees no gap, and no epoch bump is needed.
#[test]
fn a_batch_refused_for_good_fails_and_the_rest_are_renumbered() {
    let mut f = Fixture::new(settings());
    f.append_batches(3);
    let pid = Some(Some(P7E0));
    let first = f.drain_all(pid);
    f.answer(&first[0], Ok((0, -1)), Some(P7E0));
    let flying = f.drain_all(pid);
    assert_eq!(sequences(&flying), [(0, 1), (0, 2)]);
    let denied = refused(KafkaCode::TOPIC_AUTHORIZATION_FAILED);
    let Verdict::Failed { error, bump, .. } = f.answer(&flying[0], denied, Some(P7E0)) else {
        panic!("not retriable");
    };
    assert!(!bump);
    assert_eq!(
        error.kafka_code(),
        Some(KafkaCode::TOPIC_AUTHORIZATION_FAILED)
    );
    let v = f.answer(
        &flying[1],
        refused(KafkaCode::OUT_OF_ORDER_SEQUENCE_NUMBER),
        Some(P7E0),
    );
    assert!(is_retry(&v, false), "out of order behind a failure");
    let last = f.drain_all(pid);
    assert_eq!(sequences(&last), [(0, 1)], "renumbered from the last ack");
    assert_eq!(last[0].batch_id, flying[1].batch_id);
}

/// An out-of-order refusal of the partition's first batch in flight means
/// the broker lost our sequence: the batch fails, naming what was sent, and
/// the epoch is bumped.
#[test]
fn out_of_order_at_the_head_fails_the_batch_and_bumps_the_epoch() {
    let mut f = Fixture::new(settings());
    f.append_batches(1);
    let first = f.drain_all(Some(Some(P7E0)));
    let v = f.answer(
        &first[0],
        refused(KafkaCode::OUT_OF_ORDER_SEQUENCE_NUMBER),
        Some(P7E0),
    );
    let Verdict::Failed { error, bump, .. } = v else {
        panic!("an out-of-order head fails");
    };
    assert!(bump);
    assert!(error.to_string().contains("base sequence 0"), "{error}");
}

/// delivery.timeout.ms: a batch waiting to be resent past its deadline
/// expires, keeping why its last attempt failed (for the timeout error);
/// one whose last attempt has no answer asks for an epoch bump (the broker
/// may have written it), one refused by the broker does not.
#[test]
fn waiting_batches_expire_and_an_unresolved_one_bumps_the_epoch() {
    let timeout = settings().delivery_timeout;
    for (outcome, bumps) in [
        (lost(), true),
        (refused(KafkaCode::NOT_LEADER_OR_FOLLOWER), false),
    ] {
        let mut f = Fixture::new(settings());
        f.append_batches(2);
        let first = f.drain_all(Some(Some(P7E0)));
        let failure = outcome.clone().expect_err("a failed attempt").to_string();
        assert!(is_retry(&f.answer(&first[0], outcome, Some(P7E0)), false));
        let now = Instant::now();
        let early = f.q.lock().on_timeout(now, timeout);
        assert!(early.batches.is_empty(), "nothing due yet");
        assert!(early.next.is_some_and(|t| t <= now + timeout));
        let late = f.q.lock().on_timeout(now + timeout, timeout);
        assert_eq!(late.batches.len(), 2, "the waiting and the unsent batch");
        assert_eq!(late.bump, bumps);
        let last = |i: usize| late.batches[i].last_error.as_ref().map(Error::to_string);
        assert_eq!(last(0), Some(failure), "the retried batch keeps its error");
        assert_eq!(last(1), None, "the unsent batch never failed");
    }
}

/// A retry's answer that comes after the deadline fails the batch with a
/// timeout naming the last error, instead of retrying again.
#[test]
fn a_retriable_error_past_the_delivery_timeout_fails_with_the_last_error() {
    let mut f = Fixture::plain(settings());
    f.append_batches(1);
    let first = f.drain_all(None);
    let late = Instant::now() + settings().delivery_timeout;
    let v = f.answer_at(
        &first[0],
        refused(KafkaCode::NOT_LEADER_OR_FOLLOWER),
        None,
        late,
    );
    let Verdict::Failed { error, cause, .. } = v else {
        panic!("expired");
    };
    assert!(matches!(
        error,
        Error::Timeout {
            config_key: "delivery.timeout.ms",
            ..
        }
    ));
    assert!(error.to_string().contains("NotLeaderOrFollower"), "{error}");
    assert_eq!(cause.kafka_code(), Some(KafkaCode::NOT_LEADER_OR_FOLLOWER));
    drop(f.outcomes);
}

/// Transactions v2: a Produce refused with CONCURRENT_TRANSACTIONS (the
/// previous transaction still ending) is polled every 20 ms for ten
/// attempts, then backs off exponentially.
#[test]
fn concurrent_transactions_is_polled_every_20_ms_then_backs_off() {
    let mut s = settings();
    s.transactional = true;
    s.retry_backoff = Duration::from_millis(100);
    s.retry_backoff_max = Duration::from_secs(1);
    let mut f = Fixture::new(s.clone());
    f.append_batches(1);
    let ctx = SendContext {
        max_in_flight: 5,
        linger: Duration::ZERO,
        batch_size: s.batch_size,
        urgent: true,
        producer: Some(Some(P7E0)),
    };
    let mut waits = Vec::new();
    let mut now = Instant::now();
    for _ in 0..12 {
        let Readiness::Ready(_) = f.q.lock().poll_send(now, &ctx) else {
            panic!("the batch is due");
        };
        let (batch_id, data) = f.q.lock().on_send(ctx.producer).unwrap();
        let d = Drained {
            queue: f.q.clone(),
            batch_id,
            data,
        };
        let v = f.answer_at(
            &d,
            refused(KafkaCode::CONCURRENT_TRANSACTIONS),
            Some(P7E0),
            now,
        );
        assert!(is_retry(&v, false));
        let Readiness::WaitUntil(until) = f.q.lock().poll_send(now, &ctx) else {
            panic!("backing off");
        };
        waits.push(until - now);
        now = until;
    }
    let ms = |n| Duration::from_millis(n);
    assert_eq!(waits[..10], [ms(20); 10]);
    assert_eq!(waits[10..], [s.backoff(11), s.backoff(12)]);
    assert_eq!(s.backoff(11), ms(1000), "capped at retry.backoff.max.ms");
}

/// MESSAGE_TOO_LARGE splits the batch in two; the halves keep its place
/// and its sequence range.
#[test]
fn a_batch_too_large_for_the_broker_is_split_in_place() {
    let mut s = settings();
    s.batch_size = 1 << 10;
    s.batch_cap = 1 << 10;
    let mut f = Fixture::new(s);
    f.append_batches(4);
    let pid = Some(Some(P7E0));
    let all = f.drain_all(pid);
    assert_eq!(all.len(), 1, "four records in one open batch");
    let v = f.answer(&all[0], refused(KafkaCode::MESSAGE_TOO_LARGE), Some(P7E0));
    assert!(matches!(v, Verdict::Split));
    let halves = f.drain_all(pid);
    assert_eq!(sequences(&halves), [(0, 0)], "one at a time, first half");
    f.answer(&halves[0], Ok((0, -1)), Some(P7E0));
    assert_eq!(sequences(&f.drain_all(pid)), [(0, 2)]);
}

/// A leader move while a batch is out at the old leader: the new leader's
/// sink may send the next batch first; the old leader refuses the earlier
/// one, the new leader refuses the later one as out of order, and both go
/// again to the new leader in sequence order.
#[test]
fn batches_overtaking_across_a_leader_move_are_resent_in_order() {
    let mut f = Fixture::new(settings());
    f.append_batches(3);
    let pid = Some(Some(P7E0));
    let first = f.drain_all(pid);
    f.answer(&first[0], Ok((0, -1)), Some(P7E0));
    let at_old = f.acc.drain(1, usize::MAX, pid, true, 0, None).batches;
    assert_eq!(sequences(&at_old), [(0, 1)]);
    f.q.leader.store(2, Ordering::Release);
    assert!(f.drain(pid).is_empty(), "broker 1 leads nothing now");
    let at_new = f.acc.drain(2, usize::MAX, pid, true, 0, None).batches;
    assert_eq!(sequences(&at_new), [(0, 2)], "overtakes");
    let v = f.answer(
        &at_old[0],
        refused(KafkaCode::NOT_LEADER_OR_FOLLOWER),
        Some(P7E0),
    );
    assert!(is_retry(&v, false));
    let v = f.answer(
        &at_new[0],
        refused(KafkaCode::OUT_OF_ORDER_SEQUENCE_NUMBER),
        Some(P7E0),
    );
    assert!(is_retry(&v, false), "a consequence of the refusal ahead");
    let mut resent = Vec::new();
    loop {
        let next = f.acc.drain(2, usize::MAX, pid, true, 0, None).batches;
        if next.is_empty() {
            break;
        }
        resent.extend(next);
    }
    assert_eq!(sequences(&resent), [(0, 1), (0, 2)]);
    assert_eq!(resent[0].batch_id, at_old[0].batch_id);
}

/// Settings for the growth tests: 100-byte records, `batch.size` 1 KiB,
/// `batch.max.size` 8 KiB, one request in flight, and a linger that never
/// passes during a test.
fn growing() -> BatchSettings {
    BatchSettings {
        batch_size: 1 << 10,
        batch_cap: 8 << 10,
        linger: Duration::from_secs(3600),
        max_in_flight: 1,
        ..settings()
    }
}

/// Appends one 100-byte record; returns whether the sink was woken.
fn append_100(f: &mut Fixture) -> bool {
    let record = ProducerRecord::new("t").value(vec![b'x'; 100]);
    let (tx, rx) = oneshot::channel();
    f.outcomes.push(rx);
    f.acc
        .append(&f.q, &record, 0, 100, Completion::Channel(tx))
        .unwrap()
        .wake
}

/// A drain as the sink does it between flushes: not urgent.
fn drain_calm(f: &Fixture) -> Vec<Drained> {
    f.acc.drain(1, usize::MAX, None, false, 0, None).batches
}

fn records_in(d: &Drained) -> usize {
    let limits = DecodeLimits::default();
    decode_batches(d.data.clone(), &limits).unwrap().batches[0]
        .records
        .len()
}

/// A partition that can send closes its batch at `batch.size` (the sink is
/// woken when the batch opens and when it becomes full), not before.
#[test]
fn a_batch_that_can_go_is_ready_at_batch_size() {
    let mut f = Fixture::plain(growing());
    assert!(
        append_100(&mut f),
        "a new batch: the sink learns its linger"
    );
    let mut woke = false;
    let mut appended = 1;
    while !woke {
        assert!(drain_calm(&f).is_empty(), "not full, not lingered");
        woke = append_100(&mut f);
        appended += 1;
    }
    let sent = drain_calm(&f);
    assert_eq!(sent.len(), 1);
    assert_eq!(records_in(&sent[0]), appended);
    let size = sent[0].data.len();
    assert!((1 << 10..(1 << 10) + 120).contains(&size), "{size} bytes");
}

/// A partition with a batch in flight (max.in.flight 1 here) keeps adding
/// to its ready batch past `batch.size`, up to `batch.max.size`; only then
/// is the batch sealed and a new one opened.
#[test]
fn a_backlogged_batch_grows_past_batch_size_up_to_the_cap() {
    let mut f = Fixture::plain(growing());
    while !(append_100(&mut f) && f.outcomes.len() > 1) {}
    let first = drain_calm(&f);
    assert_eq!(first.len(), 1, "ready at batch.size and sent");
    // 150 records of about 110 bytes each: two capped batches and a rest.
    for _ in 0..150 {
        append_100(&mut f);
    }
    assert!(drain_calm(&f).is_empty(), "one in flight: nothing may go");
    f.answer(&first[0], Ok((0, -1)), None);
    let mut records = records_in(&first[0]);
    let mut sizes = Vec::new();
    loop {
        let Some(d) = f.drain(None).pop() else { break };
        records += records_in(&d);
        sizes.push(d.data.len());
        f.answer(&d, Ok((0, -1)), None);
    }
    assert_eq!(records, f.outcomes.len(), "every record sent once");
    assert_eq!(sizes.len(), 3, "{sizes:?}");
    for size in &sizes[..2] {
        assert!(*size > 4 << 10, "grew past batch.size: {sizes:?}");
        assert!(*size <= 8 << 10, "stopped at batch.max.size: {sizes:?}");
    }
}

/// A batch below `batch.size` still goes when `linger.ms` passes.
#[test]
fn a_partial_batch_still_goes_after_linger() {
    let mut f = Fixture::plain(BatchSettings {
        linger: Duration::from_millis(5),
        ..growing()
    });
    append_100(&mut f);
    assert!(drain_calm(&f).is_empty());
    std::thread::sleep(Duration::from_millis(6));
    let sent = drain_calm(&f);
    assert_eq!(sent.len(), 1);
    assert_eq!(records_in(&sent[0]), 1);
}

/// Growing batches change nothing in `buffer.memory`: records take their
/// bytes when sent and give them back when acknowledged, and a full pool
/// refuses more however the batches are cut.
#[test]
fn buffer_memory_stays_bounded_while_batches_grow() {
    let limit = 20 << 10;
    let mut f = Fixture::plain(growing());
    f.acc = Accumulator::new(growing(), limit);
    f.q = f.acc.queue(&f.tp, 1);
    let first = loop {
        assert!(f.acc.memory.try_acquire(100));
        append_100(&mut f);
        let sent = drain_calm(&f);
        if !sent.is_empty() {
            break sent;
        }
    };
    let mut accepted = f.outcomes.len();
    while f.acc.memory.try_acquire(100) {
        append_100(&mut f);
        accepted += 1;
    }
    assert_eq!(accepted, limit / 100, "the pool, not the batches, bounds");
    assert!(f.acc.memory.used() <= limit);
    f.answer(&first[0], Ok((0, -1)), None);
    while let Some(d) = drain_calm(&f).pop() {
        f.answer(&d, Ok((0, -1)), None);
    }
    f.acc.fail_unsent(&Error::Closed);
    assert_eq!(f.acc.memory.used(), 0, "every byte returned");
    assert_eq!(f.acc.outstanding(), 0);
}

/// Records its calls: the tags and the offset of the run's last record
/// (`None`: they failed).
#[derive(Default)]
struct Receiver(std::sync::Mutex<Vec<(Vec<u64>, Option<i64>)>>);

impl DeliveryReceiver for Receiver {
    fn delivered(&self, _: &TopicPartition, _: &[u64], _: Result<(), &Error>) {
        unreachable!("the producer reports runs with their offset");
    }

    fn delivered_through(&self, _: &TopicPartition, tags: &[u64], result: Result<i64, &Error>) {
        self.0.lock().unwrap().push((tags.to_vec(), result.ok()));
    }
}

/// Tagged records are reported a run at a time: one call for the records
/// of a batch that go to one receiver in a row, every tag once, beside a
/// record with a future in the same batch, with the offset of the run's
/// last record; a failure reports the tags with the error.
#[test]
fn tagged_outcomes_are_reported_a_run_of_a_batch_at_a_time() {
    let f = Fixture::plain(BatchSettings {
        batch_size: 1 << 16,
        batch_cap: 1 << 16,
        ..settings()
    });
    let (a, b) = (Arc::new(Receiver::default()), Arc::new(Receiver::default()));
    let (ra, rb): (Arc<dyn DeliveryReceiver>, Arc<dyn DeliveryReceiver>) = (a.clone(), b.clone());
    let (tx, mut rx) = oneshot::channel();
    let record = ProducerRecord::new("t").value("v");
    let dones = [
        Completion::Tagged(ra.clone(), 1),
        Completion::Tagged(ra.clone(), 2),
        Completion::Tagged(ra.clone(), 2),
        Completion::Channel(tx),
        Completion::Tagged(rb.clone(), 3),
        Completion::Tagged(ra.clone(), 4),
    ];
    for done in dones {
        f.acc.append(&f.q, &record, 0, 40, done).unwrap();
    }
    let drained = f.drain_all(None);
    assert_eq!(drained.len(), 1, "one batch");
    assert!(matches!(
        f.answer(&drained[0], Ok((100, -1)), None),
        Verdict::Acked { .. }
    ));
    assert_eq!(
        *a.0.lock().unwrap(),
        vec![(vec![1, 2, 2], Some(102)), (vec![4], Some(105))]
    );
    assert_eq!(*b.0.lock().unwrap(), vec![(vec![3], Some(104))]);
    assert_eq!(rx.try_recv().unwrap().unwrap().offset, 103);

    f.acc
        .append(&f.q, &record, 0, 40, Completion::Tagged(ra.clone(), 7))
        .unwrap();
    f.acc
        .append(&f.q, &record, 0, 40, Completion::Tagged(ra, 8))
        .unwrap();
    f.acc.fail_unsent(&Error::Closed);
    assert_eq!(a.0.lock().unwrap().last(), Some(&(vec![7, 8], None)));
    assert_eq!(f.acc.outstanding(), 0);
}

mod sealing;
