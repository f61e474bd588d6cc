//! Unit tests of the record batch codec.

use bytes::{Bytes, BytesMut};

use super::*;
use crate::protocol::ProtocolError;

fn sample_batch(compression: Compression) -> BytesMut {
    let mut b = RecordBatchBuilder::new()
        .compression(compression, None)
        .unwrap()
        .base_offset(100)
        .producer(7, 1, 42);
    b.append(1_000, Some(b"k0"), Some(b"v0"), &[]).unwrap();
    b.append(
        990,
        None,
        Some(b"v1"),
        &[
            RecordHeader::new(&b"h"[..], Some(Bytes::from_static(b"x"))),
            RecordHeader::new(&b"n"[..], None),
        ],
    )
    .unwrap();
    b.append(1_005, Some(b""), None, &[]).unwrap();
    b.finish().unwrap()
}

fn decode(buf: impl Into<Bytes>) -> Result<DecodedBatches, ProtocolError> {
    decode_batches(buf.into(), &DecodeLimits::default())
}

#[test]
fn round_trip_in_every_codec() {
    for codec in Compression::ALL {
        let decoded = decode(sample_batch(codec)).unwrap();
        assert!(!decoded.truncated_tail);
        let [batch] = &decoded.batches[..] else {
            panic!("one batch")
        };
        let h = &batch.header;
        assert_eq!(h.compression, codec);
        assert_eq!(
            (h.base_offset, h.last_offset_delta, h.record_count),
            (100, 2, 3)
        );
        assert_eq!((h.base_timestamp, h.max_timestamp), (1_000, 1_005));
        assert_eq!(
            (h.producer_id, h.producer_epoch, h.base_sequence),
            (7, 1, 42)
        );
        assert_eq!(h.partition_leader_epoch, -1);
        assert!(!h.is_transactional && !h.is_control);
        let r = &batch.records;
        assert_eq!(r.len(), 3);
        assert_eq!((r[0].offset, r[0].timestamp), (100, 1_000));
        assert_eq!(r[0].key.as_deref(), Some(&b"k0"[..]));
        assert_eq!(
            (r[1].offset, r[1].timestamp, r[1].key.as_ref()),
            (101, 990, None)
        );
        assert_eq!(r[1].headers.len(), 2);
        assert_eq!(r[1].headers[0].key_str().unwrap(), "h");
        assert_eq!(r[1].headers[0].value.as_deref(), Some(&b"x"[..]));
        assert_eq!(r[1].headers[1].value, None);
        assert_eq!(r[2].key.as_deref(), Some(&b""[..]));
        assert_eq!(r[2].value, None);
        assert_eq!(h.next_offset(), 103);
    }
}

#[test]
fn uncompressed_decode_is_zero_copy() {
    let input = sample_batch(Compression::None).freeze();
    let range = input.as_ptr_range();
    let decoded = decode(input.clone()).unwrap();
    let value = decoded.batches[0].records[0].value.as_ref().unwrap();
    assert!(range.contains(&value.as_ptr()));
}

#[test]
fn truncated_tail_is_reported_not_an_error() {
    let mut two = sample_batch(Compression::None);
    let first_len = two.len();
    two.extend_from_slice(&sample_batch(Compression::Gzip));
    for cut in [first_len + 1, first_len + 16, first_len + 17, two.len() - 1] {
        let decoded = decode(two[..cut].to_vec()).unwrap();
        assert_eq!(decoded.batches.len(), 1, "cut at {cut}");
        assert!(decoded.truncated_tail);
    }
    let decoded = decode(two.freeze()).unwrap();
    assert_eq!(decoded.batches.len(), 2);
    assert!(!decoded.truncated_tail);
    assert_eq!(decode(Bytes::new()).unwrap(), DecodedBatches::default());
}

#[test]
fn crc_is_checked_unless_disabled() {
    let mut batch = sample_batch(Compression::None);
    // Flip a bit of the base timestamp: still parseable, but corrupt.
    batch[30] ^= 1;
    assert!(matches!(
        decode(batch.clone()),
        Err(ProtocolError::CrcMismatch {
            base_offset: 100,
            ..
        })
    ));
    let limits = DecodeLimits {
        check_crc: false,
        ..DecodeLimits::default()
    };
    assert!(decode_batches(batch.freeze(), &limits).is_ok());
}

#[test]
fn legacy_magic_is_unsupported() {
    let mut batch = sample_batch(Compression::None);
    for magic in [0u8, 1] {
        batch[16] = magic;
        assert!(matches!(
            decode(batch.clone()),
            Err(ProtocolError::Unsupported { value, .. }) if value == i64::from(magic)
        ));
    }
}

/// Rewrites the CRC after a test edits a batch.
fn fix_crc(batch: &mut [u8]) {
    let crc = crc32c::crc32c(&batch[21..]);
    batch[17..21].copy_from_slice(&crc.to_be_bytes());
}

/// A one-record uncompressed batch with `record` as its records section.
fn batch_with_records(count: i32, records: &[u8]) -> BytesMut {
    let mut b = RecordBatchBuilder::new();
    b.append(0, None, None, &[]).unwrap();
    let mut batch = b.finish().unwrap();
    batch.truncate(BATCH_HEADER_LEN);
    batch.extend_from_slice(records);
    let len = (batch.len() - LOG_OVERHEAD) as i32;
    batch[8..12].copy_from_slice(&len.to_be_bytes());
    batch[57..61].copy_from_slice(&count.to_be_bytes());
    fix_crc(&mut batch);
    batch
}

#[test]
fn hostile_records_are_rejected() {
    // A valid minimal record: length 6 (zigzag 12), attrs, ts 0, offset 0, null key,
    // null value, no headers.
    let ok = [12u8, 0, 0, 0, 1, 1, 0];
    assert!(decode(batch_with_records(1, &ok)).is_ok());
    let cases: [(&str, i32, Vec<u8>); 9] = [
        ("count too high", 2, ok.to_vec()),
        ("count too low", 0, ok.to_vec()),
        ("negative count", -1, ok.to_vec()),
        ("huge count", i32::MAX, ok.to_vec()),
        ("key length -2", 1, vec![12, 0, 0, 0, 3, 1, 0]),
        ("negative record length", 1, vec![1, 0, 0, 0, 1, 1, 0]),
        (
            "record length mismatch",
            1,
            vec![16, 0, 0, 0, 1, 1, 0, 0, 0],
        ),
        ("trailing bytes", 1, vec![12, 0, 0, 0, 1, 1, 0, 0]),
        (
            "overlong varint",
            1,
            vec![
                14, 0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f,
            ],
        ),
    ];
    for (name, count, records) in cases {
        assert!(
            decode(batch_with_records(count, &records)).is_err(),
            "{name}"
        );
    }
    // Header count far above the bytes present.
    let headers = [20u8, 0, 0, 0, 1, 1, 0xfe, 0xff, 0xff, 0xff, 0x07];
    assert!(decode(batch_with_records(1, &headers)).is_err());
}

#[test]
fn short_or_negative_batch_length_is_invalid() {
    let mut batch = sample_batch(Compression::None);
    for len in [-1i32, 0, 48] {
        batch[8..12].copy_from_slice(&len.to_be_bytes());
        assert!(
            matches!(decode(batch.clone()), Err(ProtocolError::Invalid { .. })),
            "{len}"
        );
    }
}

#[test]
fn decompression_budget_spans_batches() {
    let mut b = RecordBatchBuilder::new()
        .compression(Compression::Zstd, None)
        .unwrap();
    b.append(0, None, Some(&[0u8; 10_000]), &[]).unwrap();
    let one = b.finish().unwrap();
    let mut two = one.clone();
    two.extend_from_slice(&one);
    let limits = DecodeLimits {
        max_decompressed_size: 15_000,
        ..DecodeLimits::default()
    };
    assert!(decode_batches(one.freeze(), &limits).is_ok());
    assert!(matches!(
        decode_batches(two.freeze(), &limits),
        Err(ProtocolError::TooLarge { .. })
    ));
}

#[test]
fn log_append_time_uses_max_timestamp() {
    let mut b = RecordBatchBuilder::new().timestamp_type(TimestampType::LogAppendTime);
    b.append(5, None, None, &[]).unwrap();
    b.append(9, None, None, &[]).unwrap();
    let decoded = decode(b.finish().unwrap()).unwrap();
    let batch = &decoded.batches[0];
    assert_eq!(batch.header.timestamp_type, TimestampType::LogAppendTime);
    assert!(batch.records.iter().all(|r| r.timestamp == 9));
}

#[test]
fn control_batches_round_trip() {
    for kind in [ControlRecordKind::Commit, ControlRecordKind::Abort] {
        let marker = ControlRecord {
            kind,
            coordinator_epoch: 3,
        };
        let mut b = RecordBatchBuilder::new()
            .producer(9, 2, -1)
            .transactional(true)
            .control(true);
        b.append_control(77, &marker).unwrap();
        let decoded = decode(b.finish().unwrap()).unwrap();
        let batch = &decoded.batches[0];
        assert!(batch.is_control() && batch.is_transactional());
        assert_eq!(ControlRecord::parse(&batch.records[0]).unwrap(), marker);
    }
    let unknown = Record {
        key: Some(Bytes::from_static(&[0, 0, 0, 5])),
        ..Record::default()
    };
    assert_eq!(
        ControlRecord::parse(&unknown).unwrap().kind,
        ControlRecordKind::Unknown(5)
    );
    let short = Record {
        key: Some(Bytes::from_static(&[0, 0, 0])),
        ..Record::default()
    };
    assert!(ControlRecord::parse(&short).is_err());
}

#[test]
fn builder_rejects_empty_batches_and_bad_levels() {
    assert!(RecordBatchBuilder::new().finish().is_err());
    assert!(RecordBatchBuilder::new()
        .compression(Compression::Gzip, Some(11))
        .is_err());
}

#[test]
fn lazy_iterator_exposes_headers() {
    let mut buf = sample_batch(Compression::Snappy);
    buf.extend_from_slice(&sample_batch(Compression::None)[..20]);
    let mut iter = BatchIter::new(buf.freeze());
    let raw = iter.next().unwrap().unwrap();
    assert_eq!(raw.header().record_count, 3);
    raw.verify_crc().unwrap();
    assert_eq!(
        raw.decode(&DecodeLimits::default()).unwrap().records.len(),
        3
    );
    assert!(iter.next().is_none());
    assert!(iter.truncated_tail());
}

#[test]
fn producer_fields_are_rewritten_with_a_valid_crc() {
    for codec in Compression::ALL {
        let mut batch = sample_batch(codec);
        set_producer_fields(&mut batch, 9_000, 3, 1_234).unwrap();
        let decoded = decode(batch).unwrap();
        let h = &decoded.batches[0].header;
        assert_eq!(
            (h.producer_id, h.producer_epoch, h.base_sequence),
            (9_000, 3, 1_234)
        );
        assert_eq!(decoded.batches[0].records.len(), 3);
    }
    assert!(set_producer_fields(&mut [0u8; 10], 1, 1, 1).is_err());
}

#[test]
fn decompression_bombs_stop_at_the_bound_in_every_codec() {
    let zeros = vec![0u8; 9 << 20];
    for codec in [
        Compression::Gzip,
        Compression::Lz4,
        Compression::Zstd,
        Compression::Snappy,
    ] {
        let mut b = RecordBatchBuilder::new().compression(codec, None).unwrap();
        b.append(0, None, Some(&zeros), &[]).unwrap();
        let batch = b.finish().unwrap();
        let limits = DecodeLimits {
            max_decompressed_size: 8 << 20,
            ..DecodeLimits::default()
        };
        let err = decode_batches(batch.freeze(), &limits)
            .err()
            .unwrap_or_else(|| panic!("{codec}: 9 MiB inflated past an 8 MiB bound"));
        assert!(
            matches!(err, ProtocolError::TooLarge { .. }),
            "{codec}: {err:?}"
        );
    }
}
