//! Record batch decode throughput on one thread.
//!
//! Builds ~1M records of 100-byte values (null keys, as Kafka's
//! `kafka-producer-perf-test` sends) in batches of 1000, then decodes the
//! whole set repeatedly with CRC checks on, and prints records/s and MB/s
//! (MB of encoded batch bytes). Uncompressed first (target: >= 5 M
//! records/s on one core), then each codec for information.
//!
//! Run: `cargo bench --bench record_decode`.

use std::hint::black_box;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use purekafka::protocol::compression::Compression;
use purekafka::protocol::records::{decode_batches, BatchIter, DecodeLimits, RecordBatchBuilder};

const RECORDS_PER_BATCH: usize = 1000;
const BATCHES: usize = 1000;
const VALUE_LEN: usize = 100;

fn build(codec: Compression) -> Bytes {
    let mut out = BytesMut::new();
    let mut value = [0u8; VALUE_LEN];
    for b in 0..BATCHES {
        let mut builder = RecordBatchBuilder::new()
            .compression(codec, None)
            .expect("default level")
            .base_offset((b * RECORDS_PER_BATCH) as i64);
        for r in 0..RECORDS_PER_BATCH {
            // Vary the value a little so compression is not trivial.
            value[..8].copy_from_slice(&((b * RECORDS_PER_BATCH + r) as u64).to_le_bytes());
            builder
                .append(1_700_000_000_000 + r as i64, None, Some(&value), &[])
                .expect("append");
        }
        builder.finish_into(&mut out).expect("finish");
    }
    out.freeze()
}

/// How the decoded records are held.
#[derive(Clone, Copy)]
enum Mode {
    /// `decode_batches` over the whole set: every record alive at once.
    AllAtOnce,
    /// `BatchIter` + `RawBatch::decode`, each batch dropped after use (a
    /// consumer handing batches on one by one).
    PerBatch,
}

fn run(codec: Compression, mode: Mode, budget: Duration) {
    let input = build(codec);
    let limits = DecodeLimits {
        check_crc: true,
        max_decompressed_size: 1 << 30,
    };
    let start = Instant::now();
    let mut passes = 0u64;
    let mut records = 0u64;
    while start.elapsed() < budget {
        match mode {
            Mode::AllAtOnce => {
                let decoded = decode_batches(black_box(input.clone()), &limits).expect("decode");
                records += decoded
                    .batches
                    .iter()
                    .map(|b| b.records.len() as u64)
                    .sum::<u64>();
                black_box(&decoded);
            }
            Mode::PerBatch => {
                for raw in BatchIter::new(black_box(input.clone())) {
                    let batch = raw.and_then(|raw| raw.decode(&limits)).expect("decode");
                    records += batch.records.len() as u64;
                    black_box(&batch);
                }
            }
        }
        passes += 1;
    }
    let secs = start.elapsed().as_secs_f64();
    println!(
        "{:<7} {:<12} {:>6.2} M records/s  {:>8.1} MB/s  ({} passes over {:.1} MB encoded)",
        codec.name(),
        match mode {
            Mode::AllAtOnce => "all-at-once",
            Mode::PerBatch => "per-batch",
        },
        records as f64 / secs / 1e6,
        (passes * input.len() as u64) as f64 / secs / 1e6,
        passes,
        input.len() as f64 / 1e6,
    );
}

fn main() {
    println!(
        "record batch v2 decode, 1 thread, CRC on, {VALUE_LEN}-byte values, null keys, \
         {RECORDS_PER_BATCH} records/batch"
    );
    // Optional filter: `cargo bench --bench record_decode -- none lz4`.
    let only: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let wanted = |c: Compression| only.is_empty() || only.iter().any(|o| o == c.name());
    if wanted(Compression::None) {
        run(
            Compression::None,
            Mode::AllAtOnce,
            Duration::from_millis(2500),
        );
        run(
            Compression::None,
            Mode::PerBatch,
            Duration::from_millis(2500),
        );
    }
    for codec in [
        Compression::Lz4,
        Compression::Zstd,
        Compression::Gzip,
        Compression::Snappy,
    ] {
        if wanted(codec) {
            run(codec, Mode::PerBatch, Duration::from_secs(1));
        }
    }
}
