//! Record batches written by the Java client (Apache Kafka 4.4.0's console
//! producer, through a real broker) decode to exactly the records that
//! `scripts/capture-java-fixtures` produced, in all five codecs.
//!
//! `fixtures/java-fixtures.txt` is the manifest: one `batch` line per batch
//! and one `record` line per record, as described in its header.

use bytes::Bytes;
use purekafka::protocol::compression::Compression;
use purekafka::protocol::records::{decode_batches, DecodeLimits, Record};

use crate::records::fixture_path;

struct ExpectedBatch {
    base_offset: i64,
    last_offset: i64,
    count: usize,
    producer_id: i64,
    base_sequence: i32,
}

struct ExpectedRecord {
    offset: i64,
    key: Option<Vec<u8>>,
    value: Option<Vec<u8>>,
    headers: Vec<(Vec<u8>, Option<Vec<u8>>)>,
}

fn nullable(field: &str) -> Option<Vec<u8>> {
    (field != "<null>").then(|| field.as_bytes().to_vec())
}

fn manifest(codec: &str) -> (Vec<ExpectedBatch>, Vec<ExpectedRecord>) {
    let text = std::fs::read_to_string(fixture_path("java-fixtures.txt")).expect("manifest");
    let mut batches = Vec::new();
    let mut records = Vec::new();
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let f: Vec<&str> = line.split('\t').collect();
        match f.as_slice() {
            ["batch", c, base, last, count, pid, seq, ..] if *c == codec => {
                batches.push(ExpectedBatch {
                    base_offset: base.parse().unwrap(),
                    last_offset: last.parse().unwrap(),
                    count: count.parse().unwrap(),
                    producer_id: pid.parse().unwrap(),
                    base_sequence: seq.parse().unwrap(),
                })
            }
            ["record", c, offset, key, value, headers] if *c == codec => {
                records.push(ExpectedRecord {
                    offset: offset.parse().unwrap(),
                    key: nullable(key),
                    value: nullable(value),
                    headers: if *headers == "-" {
                        Vec::new()
                    } else {
                        headers
                            .split(',')
                            .map(|kv| {
                                let (k, v) = kv.split_once(':').expect("key:value header");
                                (k.as_bytes().to_vec(), nullable(v))
                            })
                            .collect()
                    },
                })
            }
            _ => {}
        }
    }
    (batches, records)
}

fn check(codec: &str) {
    let (expected_batches, expected_records) = manifest(codec);
    assert!(
        !expected_records.is_empty(),
        "manifest lists records for {codec}"
    );
    let bytes = std::fs::read(fixture_path(&format!("java-{codec}.log"))).expect("fixture");
    let decoded = decode_batches(Bytes::from(bytes), &DecodeLimits::default())
        .unwrap_or_else(|e| panic!("java-{codec}.log: {e}"));
    assert!(!decoded.truncated_tail);
    assert_eq!(
        decoded.batches.len(),
        expected_batches.len(),
        "{codec}: batch count"
    );
    let want_codec: Compression = codec.parse().unwrap();
    for (b, e) in decoded.batches.iter().zip(&expected_batches) {
        assert_eq!(
            b.header.compression, want_codec,
            "{codec}: the Java producer compressed"
        );
        assert_eq!(b.header.base_offset, e.base_offset);
        assert_eq!(b.header.last_offset(), e.last_offset);
        assert_eq!(b.records.len(), e.count);
        assert_eq!(
            b.header.producer_id, e.producer_id,
            "idempotent producer id"
        );
        assert_eq!(b.header.base_sequence, e.base_sequence);
        assert!(!b.is_control() && !b.is_transactional());
    }
    let got: Vec<&Record> = decoded.batches.iter().flat_map(|b| &b.records).collect();
    assert_eq!(got.len(), expected_records.len(), "{codec}: record count");
    for (r, e) in got.iter().zip(&expected_records) {
        assert_eq!(r.offset, e.offset, "{codec}: offset");
        assert_eq!(
            r.key.as_deref(),
            e.key.as_deref(),
            "{codec} offset {}: key",
            e.offset
        );
        assert_eq!(
            r.value.as_deref(),
            e.value.as_deref(),
            "{codec} offset {}: value",
            e.offset
        );
        let headers: Vec<(Vec<u8>, Option<Vec<u8>>)> = r
            .headers
            .iter()
            .map(|h| (h.key.to_vec(), h.value.as_ref().map(|v| v.to_vec())))
            .collect();
        assert_eq!(headers, e.headers, "{codec} offset {}: headers", e.offset);
        assert!(r.timestamp > 0, "CreateTime set by the Java producer");
    }
}

#[test]
fn java_uncompressed_batches_decode_exactly() {
    check("none");
}

#[test]
fn java_gzip_batches_decode_exactly() {
    check("gzip");
}

#[test]
fn java_snappy_batches_decode_exactly() {
    check("snappy");
}

#[test]
fn java_lz4_batches_decode_exactly() {
    check("lz4");
}

#[test]
fn java_zstd_batches_decode_exactly() {
    check("zstd");
}
