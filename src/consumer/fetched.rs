//! Turning one partition's records field of a Fetch response into consumer
//! records, with no I/O: CRC checks, skipping records before the fetch
//! offset, dropping control batches, and the read_committed filter.
//!
//! # read_committed (KIP-98)
//!
//! A read_committed fetch returns data only up to the last stable offset,
//! plus, per partition, the list of aborted transactions overlapping the
//! returned range: `(producer id, first offset)`. As the Java client does,
//! the list is a min-heap by first offset; before each batch of a producer,
//! every entry whose first offset is at or below the batch's last offset
//! moves its producer id into the set of currently aborted producers. A
//! transactional data batch from an aborted producer is dropped; that
//! producer's ABORT marker (a control batch) ends its aborted range and
//! removes it from the set. Control batches are never returned.
//! See <https://cwiki.apache.org/confluence/display/KAFKA/KIP-98+-+Exactly+Once+Delivery+and+Transactional+Messaging>.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashSet};

use bytes::Bytes;

use super::config::IsolationLevel;
use super::record::ConsumerRecord;
use crate::error::Error;
use crate::protocol::records::{
    BatchHeader, BatchIter, ControlRecord, ControlRecordKind, DecodeLimits, RawBatch,
};
use crate::protocol::ProtocolError;
use crate::TopicPartition;

/// Aborted transactions of one fetched partition and the producers whose
/// transaction is currently aborted.
#[derive(Debug, Default)]
pub(crate) struct AbortedTransactions {
    /// `(first offset, producer id)`, smallest first offset on top.
    pending: BinaryHeap<Reverse<(i64, i64)>>,
    aborted: HashSet<i64>,
}

impl AbortedTransactions {
    /// From the response's `(producer id, first offset)` pairs.
    pub(crate) fn new(list: impl IntoIterator<Item = (i64, i64)>) -> Self {
        AbortedTransactions {
            pending: list
                .into_iter()
                .map(|(producer_id, first)| Reverse((first, producer_id)))
                .collect(),
            aborted: HashSet::new(),
        }
    }

    /// Whether `batch` (with its ABORT marker status) is to be dropped.
    /// Updates the aborted set: call once per batch, in offset order.
    fn drops(&mut self, batch: &BatchHeader, abort_marker: bool) -> bool {
        if batch.producer_id < 0 {
            return false;
        }
        let last = batch.last_offset();
        while let Some(Reverse((first, producer_id))) = self.pending.peek().copied() {
            if first > last {
                break;
            }
            self.pending.pop();
            self.aborted.insert(producer_id);
        }
        if abort_marker {
            self.aborted.remove(&batch.producer_id);
            return false;
        }
        batch.is_transactional && !batch.is_control && self.aborted.contains(&batch.producer_id)
    }
}

/// The records of one partition's fetch response, ready to buffer.
#[derive(Debug, Default)]
pub(crate) struct FetchedRecords {
    /// Records at or after the fetch offset, in offset order.
    pub(crate) records: Vec<ConsumerRecord>,
    /// Where the next fetch starts: after the last complete batch seen.
    pub(crate) next_offset: i64,
    /// A decode failure after `records`; the partition stops there.
    pub(crate) error: Option<Error>,
}

/// Where one partition's decoded records end: the fetch position after
/// them and what stopped the decoding.
#[derive(Debug, Default)]
pub(crate) struct FetchEnd {
    /// Where the next fetch starts: after the last complete batch seen.
    pub(crate) next_offset: i64,
    /// A decode failure after the records; the partition stops there.
    pub(crate) error: Option<Error>,
    /// Leader epoch of the batch that ends at `next_offset` (the last
    /// fetched epoch of KIP-320/KIP-595), when a batch moved it.
    pub(crate) last_epoch: Option<i32>,
}

/// Decodes `data` (a records field) fetched from `fetch_offset`.
///
/// `aborted` is the response's aborted transaction list, used only with
/// [`IsolationLevel::ReadCommitted`]. Decode errors (CRC mismatch, malformed
/// batch) end the decoding: records before the bad batch are kept and the
/// error names the partition and the offset.
pub(crate) fn decode_fetched(
    tp: &TopicPartition,
    data: Bytes,
    fetch_offset: i64,
    isolation: IsolationLevel,
    aborted: AbortedTransactions,
    limits: &DecodeLimits,
) -> FetchedRecords {
    let mut records = Vec::new();
    let end = decode_fetched_into(
        tp,
        data,
        fetch_offset,
        isolation,
        aborted,
        limits,
        &mut records,
    );
    FetchedRecords {
        records,
        next_offset: end.next_offset,
        error: end.error,
    }
}

/// [`decode_fetched`] appending the records to `records`, a vector the
/// caller reuses across responses, so a fetch allocates no vector of its
/// own per partition (issue #21).
pub(crate) fn decode_fetched_into(
    tp: &TopicPartition,
    data: Bytes,
    fetch_offset: i64,
    isolation: IsolationLevel,
    aborted: AbortedTransactions,
    limits: &DecodeLimits,
    records: &mut Vec<ConsumerRecord>,
) -> FetchEnd {
    let mut out = FetchEnd {
        next_offset: fetch_offset,
        ..FetchEnd::default()
    };
    let mut aborted = (isolation == IsolationLevel::ReadCommitted).then_some(aborted);
    let decode_limits = DecodeLimits {
        check_crc: false,
        ..limits.clone()
    };
    let fail = |out: &mut FetchEnd, source: ProtocolError| {
        out.error = Some(Error::RecordDecode {
            partition: tp.clone(),
            offset: out.next_offset,
            source,
        });
    };
    for raw in BatchIter::new(data) {
        let raw = match raw {
            Ok(raw) => raw,
            Err(e) => {
                fail(&mut out, e);
                break;
            }
        };
        let before = out.next_offset;
        let kept = records.len();
        if let Err(e) = take_batch(
            tp,
            &raw,
            limits.check_crc,
            &decode_limits,
            &mut aborted,
            &mut out,
            records,
        ) {
            // The whole batch is refused, records already taken included.
            records.truncate(kept);
            fail(&mut out, e);
            break;
        }
        let header = raw.header();
        if header.next_offset() >= before && header.partition_leader_epoch >= 0 {
            out.last_epoch = Some(header.partition_leader_epoch);
        }
    }
    out
}

fn take_batch(
    tp: &TopicPartition,
    raw: &RawBatch,
    check_crc: bool,
    limits: &DecodeLimits,
    aborted: &mut Option<AbortedTransactions>,
    out: &mut FetchEnd,
    records: &mut Vec<ConsumerRecord>,
) -> Result<(), ProtocolError> {
    if check_crc {
        raw.verify_crc()?;
    }
    let header = raw.header();
    let batch_end = header.next_offset();
    if header.is_control {
        if let Some(aborted) = aborted.as_mut() {
            let batch = raw.decode(limits)?;
            let abort = match batch.records.first() {
                Some(r) => ControlRecord::parse(r)?.kind == ControlRecordKind::Abort,
                None => false,
            };
            aborted.drops(header, abort);
        }
        out.next_offset = out.next_offset.max(batch_end);
        return Ok(());
    }
    if aborted.as_mut().is_some_and(|a| a.drops(header, false)) {
        out.next_offset = out.next_offset.max(batch_end);
        return Ok(());
    }
    if batch_end <= out.next_offset {
        // Entirely before the fetch offset (a compressed batch the fetch
        // started inside of, already consumed).
        return Ok(());
    }
    // A batch's records sit at strictly increasing offsets inside the range
    // its header covers (compaction removes records, it never moves them).
    // A broker that says otherwise is refused for the whole batch (the
    // caller drops what was taken), rather than a repeated or backward
    // offset being handed out.
    let (first, last) = (header.base_offset, header.last_offset());
    let leader_epoch =
        (header.partition_leader_epoch >= 0).then_some(header.partition_leader_epoch);
    let from = out.next_offset;
    let mut prev: Option<i64> = None;
    raw.decode_each(limits, |r| {
        if r.offset < first || r.offset > last || prev.is_some_and(|p| r.offset <= p) {
            return Err(ProtocolError::Invalid {
                what: "record offset",
                reason: format!(
                    "{} in a batch covering {first}..={last}{}",
                    r.offset,
                    prev.map(|p| format!(", after {p}")).unwrap_or_default()
                ),
            });
        }
        prev = Some(r.offset);
        if r.offset >= from {
            records.push(ConsumerRecord {
                partition: tp.clone(),
                offset: r.offset,
                timestamp: r.timestamp,
                timestamp_type: header.timestamp_type,
                key: r.key,
                value: r.value,
                headers: r.headers,
                leader_epoch,
            });
        }
        Ok(())
    })?;
    out.next_offset = out.next_offset.max(batch_end);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::records::RecordBatchBuilder;
    use bytes::BytesMut;

    fn tp() -> TopicPartition {
        TopicPartition::new("t", 0)
    }

    /// A data batch at `base` with `values`, from `producer` (-1: none).
    fn data(out: &mut BytesMut, base: i64, producer: i64, txn: bool, values: &[&str]) {
        let mut b = RecordBatchBuilder::new()
            .base_offset(base)
            .partition_leader_epoch(3);
        if producer >= 0 {
            b = b.producer(producer, 0, 0).transactional(txn);
        }
        for v in values {
            b.append(1000, None, Some(v.as_bytes()), &[]).unwrap();
        }
        b.finish_into(out).unwrap();
    }

    fn marker(out: &mut BytesMut, offset: i64, producer: i64, kind: ControlRecordKind) {
        let mut b = RecordBatchBuilder::new()
            .base_offset(offset)
            .producer(producer, 0, -1)
            .transactional(true)
            .control(true);
        b.append_control(
            1000,
            &ControlRecord {
                kind,
                coordinator_epoch: 0,
            },
        )
        .unwrap();
        b.finish_into(out).unwrap();
    }

    fn values(f: &FetchedRecords) -> Vec<String> {
        f.records
            .iter()
            .map(|r| String::from_utf8(r.value.clone().unwrap().to_vec()).unwrap())
            .collect()
    }

    /// Two interleaved transactions (producer 1 aborted, producer 2
    /// committed), plain records before and after.
    fn interleaved() -> (Bytes, Vec<(i64, i64)>) {
        let mut buf = BytesMut::new();
        data(&mut buf, 0, -1, false, &["plain0"]);
        data(&mut buf, 1, 1, true, &["a1", "a2"]); // 1..=2 aborted
        data(&mut buf, 3, 2, true, &["c3"]); // committed
        data(&mut buf, 4, 1, true, &["a4"]); // aborted
        marker(&mut buf, 5, 1, ControlRecordKind::Abort);
        data(&mut buf, 6, 2, true, &["c6"]);
        marker(&mut buf, 7, 2, ControlRecordKind::Commit);
        data(&mut buf, 8, 1, true, &["c8"]); // producer 1's next transaction, committed
        marker(&mut buf, 9, 1, ControlRecordKind::Commit);
        data(&mut buf, 10, -1, false, &["plain10"]);
        (buf.freeze(), vec![(1, 1)])
    }

    /// A batch whose records' offsets disagree with its header (a repeated
    /// offset delta) is refused whole; the batch before it is kept.
    #[test]
    fn a_batch_with_misnumbered_records_is_refused() {
        let mut buf = BytesMut::new();
        data(&mut buf, 0, -1, false, &["ok0", "ok1"]);
        let start = buf.len();
        data(&mut buf, 2, -1, false, &["x", "y", "z"]);
        // Records follow the 61-byte header: length, attributes, timestamp
        // delta, offset delta (one varint byte each here). The second
        // record's delta 1 becomes 0, and the CRC is recomputed.
        let mut at = start + 61;
        at += 1 + usize::from(buf[at] >> 1);
        assert_eq!(buf[at + 3], 1 << 1, "zigzag offset delta 1");
        buf[at + 3] = 0;
        let crc = crc32c::crc32c(&buf[start + 21..]);
        buf[start + 17..start + 21].copy_from_slice(&crc.to_be_bytes());
        let f = decode_fetched(
            &tp(),
            buf.freeze(),
            0,
            IsolationLevel::ReadUncommitted,
            AbortedTransactions::new(vec![]),
            &DecodeLimits::default(),
        );
        assert_eq!(values(&f), ["ok0", "ok1"]);
        assert!(
            matches!(
                &f.error,
                Some(Error::RecordDecode {
                    offset: 2,
                    source: ProtocolError::Invalid {
                        what: "record offset",
                        ..
                    },
                    ..
                })
            ),
            "{:?}",
            f.error
        );
    }

    #[test]
    fn read_committed_drops_aborted_transactions_and_markers() {
        let (bytes, list) = interleaved();
        let f = decode_fetched(
            &tp(),
            bytes,
            0,
            IsolationLevel::ReadCommitted,
            AbortedTransactions::new(list),
            &DecodeLimits::default(),
        );
        assert!(f.error.is_none(), "{:?}", f.error);
        assert_eq!(values(&f), ["plain0", "c3", "c6", "c8", "plain10"]);
        assert_eq!(f.next_offset, 11);
        assert_eq!(f.records[1].offset, 3);
        assert_eq!(f.records[1].leader_epoch, Some(3));
        let (bytes, list) = interleaved();
        let mut kept = vec![];
        let end = decode_fetched_into(
            &tp(),
            bytes,
            0,
            IsolationLevel::ReadCommitted,
            AbortedTransactions::new(list),
            &DecodeLimits::default(),
            &mut kept,
        );
        assert_eq!(
            end.last_epoch,
            Some(3),
            "the epoch sent with the next fetch"
        );
        assert_eq!(kept.len(), 5);
    }

    #[test]
    fn read_uncommitted_keeps_aborted_data_but_not_markers() {
        let (bytes, list) = interleaved();
        let f = decode_fetched(
            &tp(),
            bytes,
            0,
            IsolationLevel::ReadUncommitted,
            AbortedTransactions::new(list),
            &DecodeLimits::default(),
        );
        assert_eq!(
            values(&f),
            ["plain0", "a1", "a2", "c3", "a4", "c6", "c8", "plain10"]
        );
        assert_eq!(f.next_offset, 11);
    }

    #[test]
    fn aborted_range_starting_mid_response_spares_earlier_batches() {
        // Producer 1 commits 0..=1, then aborts a transaction starting at 2.
        let mut buf = BytesMut::new();
        data(&mut buf, 0, 1, true, &["c0"]);
        marker(&mut buf, 1, 1, ControlRecordKind::Commit);
        data(&mut buf, 2, 1, true, &["a2"]);
        marker(&mut buf, 3, 1, ControlRecordKind::Abort);
        let f = decode_fetched(
            &tp(),
            buf.freeze(),
            0,
            IsolationLevel::ReadCommitted,
            AbortedTransactions::new([(1, 2)]),
            &DecodeLimits::default(),
        );
        assert_eq!(values(&f), ["c0"]);
        assert_eq!(f.next_offset, 4, "the position moves past the marker");
    }

    #[test]
    fn records_before_the_fetch_offset_are_skipped() {
        let mut buf = BytesMut::new();
        data(&mut buf, 0, -1, false, &["r0", "r1", "r2"]);
        data(&mut buf, 3, -1, false, &["r3"]);
        let f = decode_fetched(
            &tp(),
            buf.freeze(),
            2,
            IsolationLevel::ReadUncommitted,
            AbortedTransactions::default(),
            &DecodeLimits::default(),
        );
        assert_eq!(values(&f), ["r2", "r3"]);
        assert_eq!(f.next_offset, 4);
    }

    #[test]
    fn crc_mismatch_keeps_earlier_records_and_names_the_partition() {
        let mut buf = BytesMut::new();
        data(&mut buf, 0, -1, false, &["good"]);
        let second = buf.len();
        data(&mut buf, 1, -1, false, &["bad"]);
        let last = buf.len() - 1;
        buf[last] ^= 0xff;
        assert!(second < last);
        let f = decode_fetched(
            &tp(),
            buf.freeze(),
            0,
            IsolationLevel::ReadUncommitted,
            AbortedTransactions::default(),
            &DecodeLimits::default(),
        );
        assert_eq!(values(&f), ["good"]);
        let e = f.error.expect("crc error");
        assert!(matches!(e, Error::RecordDecode { offset: 1, .. }), "{e}");
        assert!(e.to_string().starts_with("t-0 at offset 1"), "{e}");
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        let f = decode_fetched(
            &tp(),
            Bytes::from_static(&[0; 40]),
            5,
            IsolationLevel::ReadCommitted,
            AbortedTransactions::default(),
            &DecodeLimits::default(),
        );
        assert!(f.records.is_empty());
        assert!(f.error.is_some());
        assert_eq!(f.next_offset, 5);
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(256))]

        /// The consumer's decode of a partition's records (fuzzing's
        /// `record_batches` covers the pieces; this covers their use):
        /// hostile bytes and abort lists end in records or an error, and
        /// the next fetch never moves backwards.
        #[test]
        fn hostile_fetched_bytes_never_panic_or_rewind(
            prefix in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..64),
            corrupt_at in proptest::prelude::any::<proptest::sample::Index>(),
            byte in proptest::prelude::any::<u8>(),
            aborted in proptest::collection::vec((0i64..3, -2i64..12), 0..4),
            fetch_offset in -1i64..12,
            committed in proptest::prelude::any::<bool>(),
        ) {
            let (good, _) = interleaved();
            let mut bytes = BytesMut::from(&good[..]);
            let i = corrupt_at.index(bytes.len());
            bytes[i] = byte;
            let mut input = BytesMut::from(&prefix[..]);
            input.extend_from_slice(&bytes);
            let isolation = if committed {
                IsolationLevel::ReadCommitted
            } else {
                IsolationLevel::ReadUncommitted
            };
            for data in [input.freeze(), bytes.freeze()] {
                let f = decode_fetched(
                    &tp(),
                    data,
                    fetch_offset,
                    isolation,
                    AbortedTransactions::new(aborted.clone()),
                    &DecodeLimits::default(),
                );
                proptest::prop_assert!(f.next_offset >= fetch_offset);
                proptest::prop_assert!(f.records.iter().all(|r| r.offset >= fetch_offset));
            }
        }
    }
}
