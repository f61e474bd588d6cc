//! Record batch v2: a hand-computed golden batch, golden fixtures in every
//! codec, round-trip properties, hostile input, and a helper to decode log
//! segments written by Kafka's Java client (`fixtures/java-*.log`).

use std::path::{Path, PathBuf};

use bytes::{Bytes, BytesMut};
use proptest::prelude::*;
use purekafka::protocol::compression::Compression;
use purekafka::protocol::records::{
    decode_batches, DecodeLimits, DecodedBatches, Record, RecordBatchBuilder, RecordHeader,
};

/// Path of a file under `protocol-tests/fixtures/`.
pub fn fixture_path(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("protocol-tests/fixtures")
        .join(name)
}

/// Decodes a file of concatenated batches (a fixture or a raw broker log
/// segment) with default limits (CRC checked), panicking with the path on
/// any error.
pub fn decode_file(path: &Path) -> DecodedBatches {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    decode_batches(Bytes::from(bytes), &DecodeLimits::default())
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Every record of every batch, flattened.
fn records(decoded: &DecodedBatches) -> Vec<Record> {
    decoded
        .batches
        .iter()
        .flat_map(|b| b.records.iter().cloned())
        .collect()
}

/// Two records, written out byte by byte below.
fn golden_builder() -> RecordBatchBuilder {
    let mut b = RecordBatchBuilder::new();
    b.append(1000, Some(b"a"), Some(b"b"), &[]).unwrap();
    b.append(
        1001,
        None,
        Some(b"cd"),
        &[RecordHeader::new(&b"h"[..], Some(Bytes::from_static(b"x")))],
    )
    .unwrap();
    b
}

/// The golden batch, from the spec (KIP-98 / protocol guide), CRC aside.
fn golden_bytes() -> Vec<u8> {
    #[rustfmt::skip]
    let mut bytes = vec![
        0, 0, 0, 0, 0, 0, 0, 0,       // baseOffset 0
        0, 0, 0, 71,                  // batchLength: 83 bytes - 12
        0xff, 0xff, 0xff, 0xff,       // partitionLeaderEpoch -1
        2,                            // magic 2
        0, 0, 0, 0,                   // crc, computed below
        0, 0,                         // attributes: no codec, create time
        0, 0, 0, 1,                   // lastOffsetDelta 1
        0, 0, 0, 0, 0, 0, 0x03, 0xe8, // baseTimestamp 1000
        0, 0, 0, 0, 0, 0, 0x03, 0xe9, // maxTimestamp 1001
        0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, // producerId -1
        0xff, 0xff,                   // producerEpoch -1
        0xff, 0xff, 0xff, 0xff,       // baseSequence -1
        0, 0, 0, 2,                   // records count 2
        // Record 0. Varints are zigzag: n -> 2n, -1 -> 1.
        0x10,                         // length 8
        0,                            // attributes
        0,                            // timestampDelta 0
        0,                            // offsetDelta 0
        0x02, b'a',                   // key length 1, "a"
        0x02, b'b',                   // value length 1, "b"
        0,                            // 0 headers
        // Record 1.
        0x18,                         // length 12
        0,                            // attributes
        0x02,                         // timestampDelta 1
        0x02,                         // offsetDelta 1
        0x01,                         // key length -1: null
        0x04, b'c', b'd',             // value length 2, "cd"
        0x02,                         // 1 header
        0x02, b'h',                   // header key length 1, "h"
        0x02, b'x',                   // header value length 1, "x"
    ];
    assert_eq!(bytes.len(), 83);
    // CRC-32C (Castagnoli) over attributes..end, stored big-endian.
    let crc = crc32c::crc32c(&bytes[21..]);
    bytes[17..21].copy_from_slice(&crc.to_be_bytes());
    bytes
}

#[test]
fn crc32c_is_castagnoli() {
    // The standard check value of CRC-32C.
    assert_eq!(crc32c::crc32c(b"123456789"), 0xe306_9283);
}

#[test]
fn golden_batch_encodes_byte_for_byte() {
    let encoded = golden_builder().finish().unwrap();
    assert_eq!(&encoded[..], &golden_bytes()[..]);
}

#[test]
fn golden_batch_decodes() {
    let decoded = decode_batches(Bytes::from(golden_bytes()), &DecodeLimits::default()).unwrap();
    assert!(!decoded.truncated_tail);
    let r = records(&decoded);
    assert_eq!(r.len(), 2);
    assert_eq!((r[0].offset, r[0].timestamp), (0, 1000));
    assert_eq!(
        (r[0].key.as_deref(), r[0].value.as_deref()),
        (Some(&b"a"[..]), Some(&b"b"[..]))
    );
    assert_eq!(
        (r[1].offset, r[1].timestamp, r[1].key.as_deref()),
        (1, 1001, None)
    );
    assert_eq!(r[1].value.as_deref(), Some(&b"cd"[..]));
    assert_eq!(
        r[1].headers,
        vec![RecordHeader::new(&b"h"[..], Some(Bytes::from_static(b"x")))]
    );
}

/// The records of the per-codec fixtures: null and empty keys and values,
/// headers, out-of-order timestamps, and a compressible run.
fn fixture_builder(codec: Compression) -> RecordBatchBuilder {
    let mut b = RecordBatchBuilder::new()
        .compression(codec, None)
        .unwrap()
        .base_offset(1_000)
        .producer(12, 3, 40);
    let long = b"kafka ".repeat(50);
    b.append(1_700_000_000_000, Some(b"key-0"), Some(b"value-0"), &[])
        .unwrap();
    b.append(1_699_999_999_000, None, Some(&long), &[]).unwrap();
    b.append(
        1_700_000_000_500,
        Some(b""),
        None,
        &[
            RecordHeader::new(&b"trace"[..], Some(Bytes::from_static(b"abc"))),
            RecordHeader::new(&b"null"[..], None),
        ],
    )
    .unwrap();
    b
}

fn check_fixture_records(decoded: &DecodedBatches, codec: Compression) {
    assert_eq!(decoded.batches.len(), 1, "{codec}");
    let batch = &decoded.batches[0];
    assert_eq!(batch.header.compression, codec);
    assert_eq!(
        (
            batch.header.producer_id,
            batch.header.producer_epoch,
            batch.header.base_sequence
        ),
        (12, 3, 40)
    );
    let r = &batch.records;
    assert_eq!(
        r.iter().map(|r| r.offset).collect::<Vec<_>>(),
        [1000, 1001, 1002]
    );
    assert_eq!(
        r.iter().map(|r| r.timestamp).collect::<Vec<_>>(),
        [1_700_000_000_000, 1_699_999_999_000, 1_700_000_000_500]
    );
    assert_eq!(r[0].value.as_deref(), Some(&b"value-0"[..]));
    assert_eq!(r[1].value.as_deref(), Some(&b"kafka ".repeat(50)[..]));
    assert_eq!(r[2].key.as_deref(), Some(&b""[..]));
    assert_eq!(r[2].value, None);
    assert_eq!(r[2].headers[0].key_str().unwrap(), "trace");
    assert_eq!(r[2].headers[1].value, None);
}

/// Golden fixtures `golden-<codec>.bin`, written by our encoder. Set
/// `PUREKAFKA_UPDATE_FIXTURES=1` to rewrite them after a deliberate change.
#[test]
fn golden_fixtures_in_every_codec() {
    let update = std::env::var_os("PUREKAFKA_UPDATE_FIXTURES").is_some();
    for codec in Compression::ALL {
        let path = fixture_path(&format!("golden-{codec}.bin"));
        let encoded = fixture_builder(codec).finish().unwrap();
        if update {
            std::fs::write(&path, &encoded).unwrap();
        }
        let decoded = decode_file(&path);
        check_fixture_records(&decoded, codec);
        let stored = std::fs::read(&path).unwrap();
        assert_eq!(
            &encoded[..],
            &stored[..],
            "{codec}: encoding is not byte-stable"
        );
    }
}

/// Log segments written by the Java client, if present: every batch must
/// decode with its CRC and nothing may be left over.
#[test]
fn java_fixtures_decode() {
    let dir = fixture_path("");
    let mut found = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if name.starts_with("java-") && name.ends_with(".log") {
            let decoded = decode_file(&path);
            assert!(!decoded.truncated_tail, "{name}: partial batch at the end");
            assert!(!decoded.batches.is_empty(), "{name}: no batches");
            found += 1;
        }
    }
    eprintln!("decoded {found} java-*.log fixtures");
}

type Header = (Vec<u8>, Option<Vec<u8>>);
type TestRecord = (i64, Option<Vec<u8>>, Option<Vec<u8>>, Vec<Header>);

fn test_record() -> impl Strategy<Value = TestRecord> {
    let bytes = |max| proptest::option::of(proptest::collection::vec(any::<u8>(), 0..max));
    let header = (proptest::collection::vec(any::<u8>(), 0..16), bytes(32));
    (
        any::<i64>(),
        bytes(64),
        bytes(300),
        proptest::collection::vec(header, 0..3),
    )
}

fn to_headers(headers: &[Header]) -> Vec<RecordHeader> {
    headers
        .iter()
        .map(|(k, v)| RecordHeader::new(k.clone(), v.clone().map(Bytes::from)))
        .collect()
}

fn mutate(mut bytes: Vec<u8>, flips: &[(proptest::sample::Index, u8)]) -> Vec<u8> {
    for (at, xor) in flips {
        let i = at.index(bytes.len());
        bytes[i] ^= xor;
    }
    bytes
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn batches_round_trip(
        batches in proptest::collection::vec(
            (proptest::sample::select(Compression::ALL.to_vec()), proptest::collection::vec(test_record(), 1..20)),
            1..4,
        ),
        base_offset in 0i64..(1 << 40),
        producer in (any::<i64>(), any::<i16>(), any::<i32>()),
        transactional in any::<bool>(),
    ) {
        let mut buf = BytesMut::new();
        let mut offset = base_offset;
        let mut expected = Vec::new();
        for (codec, recs) in &batches {
            let mut b = RecordBatchBuilder::new()
                .compression(*codec, None)
                .unwrap()
                .base_offset(offset)
                .producer(producer.0, producer.1, producer.2)
                .transactional(transactional);
            for (ts, key, value, headers) in recs {
                let headers = to_headers(headers);
                b.append(*ts, key.as_deref(), value.as_deref(), &headers).unwrap();
                expected.push(Record {
                    offset,
                    timestamp: *ts,
                    key: key.clone().map(Bytes::from),
                    value: value.clone().map(Bytes::from),
                    headers,
                });
                offset += 1;
            }
            b.finish_into(&mut buf).unwrap();
        }
        let decoded = decode_batches(buf.freeze(), &DecodeLimits::default()).unwrap();
        prop_assert!(!decoded.truncated_tail);
        prop_assert_eq!(decoded.batches.len(), batches.len());
        for (batch, (codec, _)) in decoded.batches.iter().zip(&batches) {
            prop_assert_eq!(batch.header.compression, *codec);
            prop_assert_eq!(batch.header.is_transactional, transactional);
            prop_assert_eq!(batch.header.producer_id, producer.0);
            prop_assert_eq!(
                batch.header.max_timestamp,
                batch.records.iter().map(|r| r.timestamp).max().unwrap()
            );
        }
        prop_assert_eq!(records(&decoded), expected);
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        let _ = decode_batches(Bytes::from(bytes), &DecodeLimits::default());
    }

    #[test]
    fn corrupted_batches_never_panic(
        codec in proptest::sample::select(Compression::ALL.to_vec()),
        recs in proptest::collection::vec(test_record(), 1..8),
        flips in proptest::collection::vec((any::<proptest::sample::Index>(), any::<u8>()), 1..6),
        cut in any::<proptest::sample::Index>(),
    ) {
        let mut b = RecordBatchBuilder::new().compression(codec, None).unwrap();
        for (ts, key, value, headers) in &recs {
            b.append(*ts, key.as_deref(), value.as_deref(), &to_headers(headers)).unwrap();
        }
        let bytes = mutate(b.finish().unwrap().to_vec(), &flips);
        // Without the CRC check, corruption reaches the record parser.
        let limits = DecodeLimits { check_crc: false, max_decompressed_size: 1 << 20 };
        let _ = decode_batches(Bytes::from(bytes.clone()), &limits);
        let cut = cut.index(bytes.len());
        let decoded = decode_batches(Bytes::from(bytes[..cut].to_vec()), &limits);
        if let Ok(decoded) = decoded {
            prop_assert!(decoded.batches.is_empty());
            prop_assert_eq!(decoded.truncated_tail, cut > 0);
        }
    }
}
