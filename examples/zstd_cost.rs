//! What zstd costs the producer per batch, CPU only (issue #21, the zstd
//! 1-partition cell): purekafka's own call path
//! (`protocol::compression::compress`, the per-thread reused encoder) on the
//! records section of batches built with [`RecordBatchBuilder`], holding the
//! peer benchmark's records (100 B values of random A-Z bytes, null keys,
//! no headers). No broker, no network.
//!
//! ```text
//! zstd_cost [REPS] [CPU_SECONDS_PER_RUN] [LEVEL]
//! ```
//!
//! Each run times purekafka's `compress` and, alternately, the same encoder
//! called straight from this program (one reused `FrameCompressor`, the
//! call `compress` makes): the encoder's generic code is compiled into
//! each caller, so the two tell whether the library's build of it costs
//! more than a small program's.
//!
//! For each batch size (16, 64, 80 and 128 KiB: 80 KiB is what the
//! 1-partition cell's batches held, 128 KiB zstd's default
//! `batch.max.size`), REPS runs of CPU_SECONDS of compression each; prints
//! the median (min-max) CPU microseconds per batch, MB/s of input and the
//! ratio. The CPU time is this thread's (/proc/thread-self/schedstat on
//! Linux), so other load on the machine disturbs it less than wall time.
//! `benches/peers/zstd-encoders` compares the same inputs across encoders.

use bytes::BytesMut;
use purekafka::protocol::compression::{compress, decompress, Compression};
use purekafka::protocol::records::RecordBatchBuilder;
use structured_zstd::encoding::{CompressionLevel, FrameCompressor};

/// Bytes of the record batch header before the records section.
const BATCH_HEADER_LEN: usize = 61;

/// This thread's CPU time in seconds (Linux).
fn thread_cpu() -> f64 {
    let stat = std::fs::read_to_string("/proc/thread-self/schedstat").expect("schedstat");
    let ns: u64 = stat
        .split_whitespace()
        .next()
        .and_then(|f| f.parse().ok())
        .expect("schedstat's first field");
    ns as f64 / 1e9
}

/// The records section of a batch of 100 B A-Z values, at most `size`
/// bytes (whole records, as a producer seals a batch at its cap).
fn records_section(rng: &mut fastrand::Rng, size: usize) -> Vec<u8> {
    let mut builder = RecordBatchBuilder::new();
    let mut timestamp = 1_764_748_800_000i64;
    let mut value = [0u8; 100];
    // A record of 100 B with a null key and no headers takes 108 bytes.
    while builder.uncompressed_size() + 108 <= BATCH_HEADER_LEN + size {
        value.iter_mut().for_each(|b| *b = rng.u8(b'A'..=b'Z'));
        builder
            .append(timestamp, None, Some(&value), &[])
            .expect("append");
        // About a million records a second: a millisecond every thousand.
        if rng.u32(..1000) == 0 {
            timestamp += 1;
        }
    }
    let batch = builder.finish().expect("batch");
    batch[BATCH_HEADER_LEN..].to_vec()
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

fn main() {
    let mut args = std::env::args().skip(1);
    let reps: usize = args.next().map_or(7, |s| s.parse().expect("REPS"));
    let seconds: f64 = args.next().map_or(0.3, |s| s.parse().expect("SECONDS"));
    let level: Option<i32> = args.next().map(|s| s.parse().expect("LEVEL"));
    let mut rng = fastrand::Rng::with_seed(21);
    println!(
        "purekafka zstd level {}, {reps} runs of {seconds} CPU s per size",
        level.map_or("default (3)".to_owned(), |l| l.to_string())
    );
    println!(
        "| batch | records section, bytes | us/batch, median (min-max) | MB/s | ratio | encoder called directly: us/batch |"
    );
    println!("|---|---|---|---|---|---|");
    let mut direct: FrameCompressor =
        FrameCompressor::new(CompressionLevel::from_level(level.unwrap_or(3)));
    let mut frame = Vec::new();
    for kib in [16usize, 64, 80, 128] {
        let batches: Vec<Vec<u8>> = (0..16)
            .map(|_| records_section(&mut rng, kib << 10))
            .collect();
        let mut out = BytesMut::new();
        let (mut raw, mut packed) = (0usize, 0usize);
        for b in &batches {
            out.clear();
            compress(Compression::Zstd, level, b, &mut out).expect("compress");
            let back = decompress(Compression::Zstd, &out, b.len()).expect("decompress");
            assert_eq!(&back[..], &b[..], "round trip");
            raw += b.len();
            packed += out.len();
        }
        let mut us = Vec::with_capacity(reps);
        let mut us_direct = Vec::with_capacity(reps);
        for _ in 0..reps {
            let start = thread_cpu();
            let mut n = 0usize;
            while thread_cpu() - start < seconds {
                for _ in 0..4 {
                    out.clear();
                    compress(
                        Compression::Zstd,
                        level,
                        &batches[n % batches.len()],
                        &mut out,
                    )
                    .expect("compress");
                    n += 1;
                }
            }
            us.push((thread_cpu() - start) * 1e6 / n as f64);
            let start = thread_cpu();
            let mut n = 0usize;
            while thread_cpu() - start < seconds {
                for _ in 0..4 {
                    direct.compress_independent_frame_into(&batches[n % batches.len()], &mut frame);
                    n += 1;
                }
            }
            us_direct.push((thread_cpu() - start) * 1e6 / n as f64);
        }
        let d = median(&mut us_direct);
        let (lo, hi) = (
            us.iter().copied().fold(f64::MAX, f64::min),
            us.iter().copied().fold(0.0, f64::max),
        );
        let m = median(&mut us);
        let avg = raw as f64 / batches.len() as f64;
        println!(
            "| {kib} KiB | {avg:.0} | {m:.1} ({lo:.1}-{hi:.1}) | {:.0} | {:.3} | {d:.1} |",
            avg / m,
            raw as f64 / packed as f64
        );
    }
}
