//! The sink seals (compresses) a partition's open batch without holding the
//! partition's lock, so senders go on appending meanwhile: what they, a
//! flush and a failure of every unsent record do before it is queued. A
//! compressed batch a sender fills to `batch.max.size` is closed, not
//! sealed, and a sealer task compresses it: the same questions for it.

use super::*;
use crate::producer::accumulator::batch::OpenBatch;

/// Batches keep taking records up to 64 KiB: only the sink seals them.
fn roomy() -> BatchSettings {
    BatchSettings {
        batch_size: 64,
        batch_cap: 1 << 16,
        ..settings()
    }
}

/// Whether `flush` still waits 20 ms on.
async fn still_waits(flush: &Flush<'_>) -> bool {
    tokio::time::timeout(Duration::from_millis(20), flush.wait())
        .await
        .is_err()
}

/// Whether `flush` ends within 5 s.
async fn ends(flush: &Flush<'_>) -> bool {
    tokio::time::timeout(Duration::from_secs(5), flush.wait())
        .await
        .is_ok()
}

/// Appends a record whose 40-byte value is `v` repeated.
fn append_value(f: &mut Fixture, v: u8) {
    let record = ProducerRecord::new("t").value(vec![v; 40]);
    let (tx, rx) = oneshot::channel();
    f.acc
        .append(&f.q, &record, 0, 40, Completion::Channel(tx))
        .unwrap();
    f.outcomes.push(rx);
}

/// The first byte of each record's value in a drained batch.
fn values(d: &Drained) -> Vec<u8> {
    let limits = DecodeLimits::default();
    decode_batches(d.data.clone(), &limits).unwrap().batches[0]
        .records
        .iter()
        .map(|r| r.value.as_ref().map_or(0, |v| v[0]))
        .collect()
}

/// What the sink does between taking the open batch and queueing it.
fn seal_taken(f: &Fixture, open: OpenBatch) {
    let sealed = f.acc.factory.seal(open, &f.tp);
    let mut ps = f.q.lock();
    f.acc.end_seal(&mut ps, &f.tp, sealed);
}

/// Records appended while the sink seals the open batch, even a batch
/// sealed at its cap meanwhile, queue behind it: nothing overtakes the
/// batch being sealed, and nothing is sent until it is queued.
#[test]
fn batches_sealed_while_the_sink_seals_queue_behind_it() {
    let mut f = Fixture::plain(roomy());
    append_value(&mut f, b'a');
    let open = f.q.lock().begin_seal().expect("an open batch");
    assert!(f.q.lock().begin_seal().is_none(), "one seal at a time");
    append_value(&mut f, b'b');
    {
        // As a sender does at `batch.max.size`.
        let mut ps = f.q.lock();
        f.acc.seal(&mut ps, &f.tp);
    }
    append_value(&mut f, b'c');
    assert!(f.drain(None).is_empty(), "nothing goes ahead of the seal");
    seal_taken(&f, open);
    let sent: Vec<Vec<u8>> = f.drain_all(None).iter().map(values).collect();
    assert_eq!(sent, vec![b"a".to_vec(), b"b".to_vec(), b"c".to_vec()]);
}

/// A flush begun while the sink seals a batch waits for that batch's
/// records too.
#[tokio::test]
async fn a_flush_begun_during_a_seal_waits_for_the_batch_being_sealed() {
    let mut f = Fixture::plain(roomy());
    append_value(&mut f, b'a');
    let open = f.q.lock().begin_seal().expect("an open batch");
    let flush = f.acc.begin_flush();
    seal_taken(&f, open);
    let sent = f.drain_all(None);
    assert_eq!(sent.len(), 1);
    assert!(
        still_waits(&flush).await,
        "the flush ended before its record did"
    );
    f.answer(&sent[0], Ok((0, -1)), None);
    assert!(
        ends(&flush).await,
        "the flush ends once the record is acknowledged"
    );
}

/// A flush begun while the sink seals a batch also waits for a batch a
/// sender sealed at its cap meanwhile, which queues behind it. (Once, only
/// the batch being sealed was marked: a flush returned before the records
/// of the other batch had their outcome.)
#[tokio::test]
async fn a_flush_begun_during_a_seal_waits_for_the_batches_sealed_behind_it() {
    let mut f = Fixture::plain(roomy());
    append_value(&mut f, b'a');
    let open = f.q.lock().begin_seal().expect("an open batch");
    append_value(&mut f, b'b');
    {
        // As a sender does at `batch.max.size`.
        let mut ps = f.q.lock();
        f.acc.seal(&mut ps, &f.tp);
    }
    let flush = f.acc.begin_flush();
    seal_taken(&f, open);
    let sent = f.drain_all(None);
    assert_eq!(sent.len(), 2, "the batch being sealed, then the one behind");
    f.answer(&sent[0], Ok((0, -1)), None);
    assert!(
        still_waits(&flush).await,
        "the flush ended before the batch sealed behind the seal"
    );
    f.answer(&sent[1], Ok((1, -1)), None);
    assert!(
        ends(&flush).await,
        "the flush ends once both batches are acknowledged"
    );
}

/// Failing every unsent record (close, transaction abort) while the sink
/// seals a batch fails that batch once sealed, and the batches sealed
/// behind it at once: none of them is sent afterwards.
#[test]
fn failing_unsent_records_during_a_seal_fails_the_batch_being_sealed() {
    let mut f = Fixture::plain(roomy());
    append_value(&mut f, b'a');
    let open = f.q.lock().begin_seal().expect("an open batch");
    append_value(&mut f, b'b');
    f.acc.fail_unsent(&Error::Closed);
    assert!(
        matches!(f.outcomes[1].try_recv(), Ok(Err(Error::Closed))),
        "the record appended meanwhile fails at once"
    );
    seal_taken(&f, open);
    assert!(
        matches!(f.outcomes[0].try_recv(), Ok(Err(Error::Closed))),
        "the record being sealed fails once sealed"
    );
    assert!(f.drain_all(None).is_empty(), "nothing is sent");
    assert_eq!(f.acc.outstanding(), 0);
    assert_eq!(f.acc.memory.used(), 0, "every byte returned");
}

/// lz4 batches capped at 200 bytes: two 40-byte records each, one request
/// in flight, a linger that never passes in a test.
fn capped_lz4() -> BatchSettings {
    BatchSettings {
        batch_size: 64,
        batch_cap: 200,
        linger: Duration::from_secs(3600),
        compression: Compression::Lz4,
        max_in_flight: 1,
        ..settings()
    }
}

/// Appends a record whose 40-byte value is `v` repeated; returns what the
/// append asked of its caller.
fn append_lz4(f: &mut Fixture, v: u8) -> Appended {
    let record = ProducerRecord::new("t").value(vec![v; 40]);
    let (tx, rx) = oneshot::channel();
    f.outcomes.push(rx);
    f.acc
        .append(&f.q, &record, 0, 40, Completion::Channel(tx))
        .unwrap()
}

/// Drains, acknowledging each batch, until nothing is left; the values
/// sent, batch by batch.
fn drain_acking(f: &Fixture) -> Vec<Vec<u8>> {
    let mut sent = Vec::new();
    loop {
        let Some(d) = f.drain(None).pop() else {
            return sent;
        };
        sent.push(values(&d));
        f.answer(&d, Ok((0, -1)), None);
    }
}

/// A sender that fills a compressed batch to `batch.max.size` only closes
/// it and asks for one sealer task; the task compresses the closed batches
/// in order, and every record goes once, in order.
#[test]
fn compressed_batches_closed_at_the_cap_are_sealed_by_the_sealer_in_order() {
    let mut f = Fixture::plain(capped_lz4());
    let mut asked = 0;
    for v in b'a'..=b'l' {
        asked += usize::from(append_lz4(&mut f, v).seal);
    }
    assert_eq!(asked, 1, "one sealer task for the partition");
    let mut turns = 0;
    while f.acc.seal_closed(&f.q) {
        turns += 1;
    }
    assert_eq!(turns, 5, "a batch a turn, then the sealer ends");
    assert!(!f.q.lock().start_sealer(), "nothing left for a sealer");
    // The sealed batches and then (the drain is urgent) the open one.
    let sent = drain_acking(&f);
    let expected: Vec<Vec<u8>> = [b"ab", b"cd", b"ef", b"gh", b"ij", b"kl"]
        .iter()
        .map(|v| v.to_vec())
        .collect();
    assert_eq!(sent, expected);
}

/// The sink may seal a closed batch itself (when its sealer has not yet
/// run); the two never seal at once, and a batch closed while the sink
/// seals starts a sealer again once the sink is done.
#[test]
fn the_sink_and_the_sealer_take_turns_and_keep_order() {
    let mut f = Fixture::plain(capped_lz4());
    for v in b'a'..=b'c' {
        append_lz4(&mut f, v);
    }
    // "ab" is closed. The sink seals it before the sealer runs.
    let sink_took = f.q.lock().begin_seal().expect("the closed batch");
    assert!(f.q.lock().next_for_sealer().is_none(), "one seal at a time");
    let mut asked = 0;
    for v in b'd'..=b'f' {
        asked += usize::from(append_lz4(&mut f, v).seal);
    }
    assert_eq!(asked, 0, "a seal is under way: its end starts the sealer");
    seal_taken(&f, sink_took);
    assert!(f.q.lock().start_sealer(), "\"cd\" closed meanwhile");
    assert!(f.acc.seal_closed(&f.q), "the sealer seals \"cd\"");
    assert!(!f.acc.seal_closed(&f.q), "and ends");
    // "ef" closed with no sealer running: the (urgent) drain seals it.
    assert!(append_lz4(&mut f, b'g').seal);
    let sent = drain_acking(&f);
    let expected: Vec<Vec<u8>> = [&b"ab"[..], b"cd", b"ef", b"g"]
        .iter()
        .map(|v| v.to_vec())
        .collect();
    assert_eq!(sent, expected);
}

/// A flush waits for the records of a batch closed for the sealer, not
/// only for the open batch behind it.
#[tokio::test]
async fn a_flush_waits_for_batches_closed_for_the_sealer() {
    let mut f = Fixture::plain(BatchSettings {
        max_in_flight: 5,
        ..capped_lz4()
    });
    for v in b'a'..=b'c' {
        append_lz4(&mut f, v);
    }
    let flush = f.acc.begin_flush();
    while f.acc.seal_closed(&f.q) {}
    let sent = f.drain_all(None);
    assert_eq!(
        sent.iter().map(values).collect::<Vec<_>>(),
        [&b"ab"[..], b"c"]
    );
    f.answer(&sent[1], Ok((2, -1)), None);
    assert!(
        still_waits(&flush).await,
        "the flush ended before the closed batch's records"
    );
    f.answer(&sent[0], Ok((0, -1)), None);
    assert!(
        ends(&flush).await,
        "the flush ends once both batches are acknowledged"
    );
}

/// Failing every unsent record (close, transaction abort) fails the
/// records of batches closed for the sealer at once; none is sent.
#[test]
fn closed_batches_fail_with_the_unsent() {
    let mut f = Fixture::plain(capped_lz4());
    for v in b'a'..=b'f' {
        append_lz4(&mut f, v);
    }
    f.acc.fail_unsent(&Error::Closed);
    for (i, outcome) in f.outcomes.iter_mut().enumerate() {
        assert!(
            matches!(outcome.try_recv(), Ok(Err(Error::Closed))),
            "record {i} fails at once"
        );
    }
    assert!(!f.acc.seal_closed(&f.q), "nothing left to seal");
    assert!(f.drain_all(None).is_empty(), "nothing is sent");
    assert_eq!(f.acc.outstanding(), 0);
    assert_eq!(f.acc.memory.used(), 0, "every byte returned");
    assert!(!f.q.lock().holds_records());
}
