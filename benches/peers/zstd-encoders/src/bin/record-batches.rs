//! zstd on the peer producer benchmark's record batches (issue #21, the
//! zstd 1-partition cell): CPU per batch, MB/s and ratio of each encoder
//! setting, medians over repeated interleaved runs.
//!
//! Usage: [ONLY=substring] [SIZES=16,64,128] [PARSE_ONLY=1] record-batches [REPS] [CPU_SECONDS_PER_RUN]
//! (ONLY keeps the encoders whose name contains it, or one of its
//! `|`-separated parts; SIZES are in KiB; PARSE_ONLY also times the
//! benchmark's own dfast parse (`src/dfast.rs`) alone, which two encoders
//! hand to structured-zstd's `SequenceProducer` hook, one parsing and one
//! replaying a parse made beforehand;
//! PAYLOAD=FILE makes the values random lines of FILE instead, e.g. the
//! text-like `purekafka perf payload` lines)
//!
//! Input: the records section of a Kafka record batch v2 (what a producer
//! compresses) holding 100 B values of fresh random A-Z bytes, as
//! `purekafka perf produce` and the other peers send them, with null keys,
//! no headers and small timestamp deltas; cut at 16 KiB, 64 KiB, 80 KiB
//! (what the 1-partition cell's batches held) and 128 KiB (zstd's default
//! `batch.max.size`). Several distinct batches per
//! size, so no run compresses the same bytes twice in a row.
//!
//! Each (size, encoder) cell runs REPS times; the encoders alternate within
//! each repetition so that machine noise spreads over all of them. The CPU
//! time is the compressing thread's (/proc/thread-self/schedstat). Every
//! output is decoded with ruzstd 0.8 (purekafka's decoder) and compared with
//! its input before timing.

use std::io::Read;

#[path = "../dfast.rs"]
mod dfast;

use structured_zstd::encoding::{
    CompressionLevel, CompressionParameters, CompressionParametersBuilder, FrameCompressor,
    LevelParameters, Strategy,
};

fn thread_cpu() -> f64 {
    let stat = std::fs::read_to_string("/proc/thread-self/schedstat").expect("schedstat");
    let ns: u64 = stat
        .split_whitespace()
        .next()
        .and_then(|f| f.parse().ok())
        .expect("ns");
    ns as f64 / 1e9
}

/// Appends `v` as a zigzag varint (Kafka's varint/varlong encoding).
fn put_varint(out: &mut Vec<u8>, v: i64) {
    let mut z = ((v << 1) ^ (v >> 63)) as u64;
    while z >= 0x80 {
        out.push((z as u8) | 0x80);
        z >>= 7;
    }
    out.push(z as u8);
}

/// The records section of one batch of 100 B A-Z values (or of random
/// `lines` when there are any), `size` bytes or a
/// little less (whole records only, as a producer cuts at its cap).
fn records_section(rng: &mut fastrand::Rng, size: usize, lines: &[&[u8]]) -> Vec<u8> {
    let mut out = Vec::with_capacity(size);
    let mut body = Vec::with_capacity(128);
    let mut ts_delta = 0i64;
    for offset_delta in 0i64.. {
        body.clear();
        body.push(0); // attributes
        put_varint(&mut body, ts_delta);
        put_varint(&mut body, offset_delta);
        put_varint(&mut body, -1); // null key
        if lines.is_empty() {
            put_varint(&mut body, 100);
            body.extend((0..100).map(|_| rng.u8(b'A'..=b'Z')));
        } else {
            let line = lines[rng.usize(..lines.len())];
            put_varint(&mut body, line.len() as i64);
            body.extend_from_slice(line);
        }
        put_varint(&mut body, 0); // no headers
        let mut record = Vec::with_capacity(body.len() + 2);
        put_varint(&mut record, body.len() as i64);
        record.extend_from_slice(&body);
        if out.len() + record.len() > size {
            break;
        }
        out.extend_from_slice(&record);
        // About a million records a second: a millisecond every ~1,000.
        if rng.u32(..1000) == 0 {
            ts_delta += 1;
        }
    }
    out
}

trait Encoder {
    fn name(&self) -> String;
    fn compress(&mut self, input: &'static [u8], out: &mut Vec<u8>);
}

/// purekafka's call path: one `FrameCompressor` per thread and level,
/// reused, each batch one independent frame.
struct Reused(String, FrameCompressor);
impl Encoder for Reused {
    fn name(&self) -> String {
        self.0.clone()
    }
    fn compress(&mut self, input: &'static [u8], out: &mut Vec<u8>) {
        self.1.compress_independent_frame_into(input, out);
    }
}

/// A reused compressor driven through its streaming entry (`set_source`,
/// a size hint, `compress`): the owned path, which copies the input into
/// its history but retires earlier frames by moving a floor instead of
/// emptying the tables.
struct Owned(FrameCompressor<&'static [u8], Vec<u8>>);
impl Encoder for Owned {
    fn name(&self) -> String {
        "structured-zstd 3 reused, streaming entry (owned path)".into()
    }
    fn compress(&mut self, input: &'static [u8], out: &mut Vec<u8>) {
        out.clear();
        self.0.set_source(input);
        self.0.set_drain(std::mem::take(out));
        self.0.set_source_size_hint(input.len() as u64);
        self.0.compress();
        *out = self.0.take_drain().expect("drain");
    }
}

/// A new compressor per batch (purekafka before the per-thread reuse).
struct Fresh(i32);
impl Encoder for Fresh {
    fn name(&self) -> String {
        format!("structured-zstd {} fresh compressor per batch", self.0)
    }
    fn compress(&mut self, input: &'static [u8], out: &mut Vec<u8>) {
        let mut c: FrameCompressor = FrameCompressor::new(CompressionLevel::from_level(self.0));
        c.compress_independent_frame_into(input, out);
    }
}

/// A reused compressor given the level's parameters with overrides.
fn tuned(
    name: String,
    level: i32,
    f: impl FnOnce(CompressionParametersBuilder) -> CompressionParametersBuilder,
) -> Reused {
    let params = f(CompressionParameters::builder(
        CompressionLevel::from_level(level),
    ))
    .build()
    .expect("parameters");
    let mut c = FrameCompressor::new(CompressionLevel::from_level(level));
    c.set_parameters(&params);
    Reused(name, c)
}

struct CZstd(i32, zstd::bulk::Compressor<'static>);
impl Encoder for CZstd {
    fn name(&self) -> String {
        format!(
            "C zstd {} level {} reused context",
            zstd::zstd_safe::version_string(),
            self.0
        )
    }
    fn compress(&mut self, input: &'static [u8], out: &mut Vec<u8>) {
        out.clear();
        out.reserve(zstd::zstd_safe::compress_bound(input.len()));
        self.1.compress_to_buffer(input, out).expect("C zstd");
    }
}

struct Ruzstd09(ruzstd09::encoding::CompressionLevel, &'static str);
impl Encoder for Ruzstd09 {
    fn name(&self) -> String {
        format!("ruzstd 0.9 {}", self.1)
    }
    fn compress(&mut self, input: &'static [u8], out: &mut Vec<u8>) {
        out.clear();
        ruzstd09::encoding::compress(input, &mut *out, self.0);
    }
}

fn encoders() -> Vec<Box<dyn Encoder>> {
    let reused = |level: i32| {
        Reused(
            format!("structured-zstd {level} reused (purekafka's path)"),
            FrameCompressor::new(CompressionLevel::from_level(level)),
        )
    };
    let mut v: Vec<Box<dyn Encoder>> = vec![
        Box::new(reused(3)),
        Box::new({
            let mut c = FrameCompressor::new(CompressionLevel::from_level(3));
            c.set_sequence_producer(Some(Box::new(dfast::Dfast::new(16, 15))), false);
            Reused(
                "ours: dfast through SequenceProducer, level 3 entropy".into(),
                c,
            )
        }),
        Box::new(Fresh(3)),
        Box::new(Owned(FrameCompressor::new(CompressionLevel::from_level(3)))),
        Box::new(tuned(
            "structured-zstd 3, hash/chain log 14".into(),
            3,
            |b| b.hash_log(14).chain_log(14),
        )),
        Box::new(tuned(
            "structured-zstd 3, hash/chain log 12".into(),
            3,
            |b| b.hash_log(12).chain_log(12),
        )),
        Box::new(tuned("structured-zstd 3, strategy fast".into(), 3, |b| {
            b.strategy(Strategy::Fast)
        })),
        Box::new(reused(2)),
        Box::new(reused(1)),
        Box::new(reused(-1)),
        Box::new(CZstd(3, zstd::bulk::Compressor::new(3).unwrap())),
        Box::new(CZstd(1, zstd::bulk::Compressor::new(1).unwrap())),
    ];
    // 0.9.1 has no encoder beyond Fastest (its Default panics: not
    // implemented).
    if std::env::var_os("WITH_RUZSTD09").is_some() {
        v.push(Box::new(Ruzstd09(
            ruzstd09::encoding::CompressionLevel::Fastest,
            "fastest",
        )));
    }
    v
}

fn decode(frame: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    ruzstd::decoding::StreamingDecoder::new(frame)
        .expect("frame header")
        .read_to_end(&mut out)
        .expect("decode");
    out
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

fn main() {
    let mut args = std::env::args().skip(1);
    let reps: usize = args.next().map_or(7, |s| s.parse().expect("reps"));
    let seconds: f64 = args.next().map_or(0.2, |s| s.parse().expect("seconds"));
    let mut rng = fastrand::Rng::with_seed(21);
    let payload =
        std::env::var("PAYLOAD").map_or(Vec::new(), |p| std::fs::read(p).expect("PAYLOAD"));
    let lines: Vec<&[u8]> = payload
        .split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .collect();
    let values = if lines.is_empty() {
        "100 B A-Z values"
    } else {
        "PAYLOAD lines"
    };
    println!("zstd on record batches of {values}; {reps} runs of {seconds} CPU s per cell, medians (min-max)");
    let sizes: Vec<usize> = std::env::var("SIZES").map_or(vec![16, 64, 80, 128], |s| {
        s.split(',').map(|k| k.parse().expect("KiB")).collect()
    });
    for size in sizes.into_iter().map(|k| k << 10) {
        let p = LevelParameters::for_level(3, Some(size as u64), 0);
        println!(
            "\nbatch {} KiB; level 3 resolves to window {} hash {} chain {} search {} min match {} {:?}",
            size >> 10,
            p.window_log,
            p.hash_log,
            p.chain_log,
            p.search_log,
            p.min_match,
            p.strategy
        );
        let batches: &'static [Vec<u8>] = Vec::leak(
            (0..16)
                .map(|_| records_section(&mut rng, size, &lines))
                .collect::<Vec<_>>(),
        );
        if std::env::var_os("PARSE_ONLY").is_some() {
            use structured_zstd::encoding::sequences::SequenceProducer;
            let mut d = dfast::Dfast::new(16, 15);
            let mut seqs = Vec::new();
            let cpu = thread_cpu();
            let mut n = 0usize;
            while thread_cpu() - cpu < seconds {
                seqs.clear();
                d.produce(&batches[n % batches.len()], 1 << 17, &mut seqs)
                    .unwrap();
                n += 1;
            }
            println!(
                "dfast parse alone: {:.1} us/batch, {} sequences in the last",
                (thread_cpu() - cpu) * 1e6 / n as f64,
                seqs.len()
            );
        }
        let mut encs = encoders();
        {
            let mut c = FrameCompressor::new(CompressionLevel::from_level(3));
            c.set_sequence_producer(Some(Box::new(dfast::Replay::of(batches))), false);
            encs.push(Box::new(Reused(
                "replayed dfast parse (the producer path without the parse)".into(),
                c,
            )));
        }
        if let Ok(only) = std::env::var("ONLY") {
            encs.retain(|e| only.split('|').any(|o| e.name().contains(o)));
        }
        let mut us: Vec<Vec<f64>> = vec![Vec::new(); encs.len()];
        let mut ratio = vec![0.0; encs.len()];
        let mut out = Vec::new();
        for (i, enc) in encs.iter_mut().enumerate() {
            let (mut raw, mut packed) = (0usize, 0usize);
            for b in batches {
                enc.compress(b, &mut out);
                assert_eq!(&decode(&out), b, "{} round trip", enc.name());
                raw += b.len();
                packed += out.len();
            }
            ratio[i] = raw as f64 / packed as f64;
        }
        for rep in 0..reps {
            // Alternate the order: forwards on even runs, backwards on odd.
            let order: Vec<usize> = if rep % 2 == 0 {
                (0..encs.len()).collect()
            } else {
                (0..encs.len()).rev().collect()
            };
            for i in order {
                let enc = &mut encs[i];
                let cpu = thread_cpu();
                let mut n = 0usize;
                while thread_cpu() - cpu < seconds {
                    for _ in 0..4 {
                        enc.compress(&batches[n % batches.len()], &mut out);
                        n += 1;
                    }
                }
                us[i].push((thread_cpu() - cpu) * 1e6 / n as f64);
            }
        }
        let bytes = batches.iter().map(Vec::len).sum::<usize>() as f64 / batches.len() as f64;
        println!("| encoder | us/batch, median (min-max) | MB/s | ratio |");
        println!("|---|---|---|---|");
        for (i, enc) in encs.iter().enumerate() {
            let (lo, hi) = (
                us[i].iter().cloned().fold(f64::MAX, f64::min),
                us[i].iter().cloned().fold(0.0, f64::max),
            );
            let m = median(&mut us[i]);
            println!(
                "| {} | {:.1} ({:.1}-{:.1}) | {:.0} | {:.3} |",
                enc.name(),
                m,
                lo,
                hi,
                bytes / m,
                ratio[i]
            );
        }
    }
}
