//! The sink seals (compresses) a partition's open batch without holding the
//! partition's lock, so senders go on appending meanwhile: what they, a
//! flush and a failure of every unsent record do before it is queued.

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
    let waiting = tokio::time::timeout(Duration::from_millis(20), flush.wait()).await;
    assert!(waiting.is_err(), "the flush ended before its record did");
    f.answer(&sent[0], Ok((0, -1)), None);
    tokio::time::timeout(Duration::from_secs(5), flush.wait())
        .await
        .expect("the flush ends once the record is acknowledged");
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
    let waiting = tokio::time::timeout(Duration::from_millis(20), flush.wait()).await;
    assert!(
        waiting.is_err(),
        "the flush ended before the batch sealed behind the seal"
    );
    f.answer(&sent[1], Ok((1, -1)), None);
    tokio::time::timeout(Duration::from_secs(5), flush.wait())
        .await
        .expect("the flush ends once both batches are acknowledged");
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
