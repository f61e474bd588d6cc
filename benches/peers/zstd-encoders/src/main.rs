//! Compress speed and ratio of zstd encoders on record-batch-sized inputs.
//!
//! Usage: zstd-encoders PAYLOAD_FILE [CPU_SECONDS_PER_CELL]
//!
//! Inputs, each cut into batches of 16 KiB, 64 KiB, 256 KiB and 1 MiB:
//! - `text`: random lines of PAYLOAD_FILE (`purekafka perf payload`: JSON
//!   log lines), concatenated as a producer concatenates record values;
//! - `a-z`: random A-Z bytes, the peers benchmark's 100 B payload;
//! - `random`: uniformly random bytes (incompressible).
//!
//! For each encoder and batch size: MB/s of input per CPU second of the
//! compressing thread (from /proc/thread-self/schedstat, so other load on
//! the machine slows the run but not the figure much), CPU microseconds per
//! batch, and the ratio input / output. Every output is decoded with ruzstd 0.8 (the
//! decoder purekafka ships) and compared with the input.

use std::io::Read;
use std::time::{Duration, Instant};

/// CPU time of this thread so far, in seconds (Linux: the first field of
/// /proc/thread-self/schedstat, in nanoseconds).
fn thread_cpu() -> f64 {
    let stat = std::fs::read_to_string("/proc/thread-self/schedstat").expect("schedstat");
    let ns: u64 = stat
        .split_whitespace()
        .next()
        .and_then(|f| f.parse().ok())
        .expect("ns");
    ns as f64 / 1e9
}

const SIZES: [usize; 4] = [16 << 10, 64 << 10, 256 << 10, 1 << 20];

trait Encoder {
    fn name(&self) -> String;
    fn compress(&mut self, input: &[u8], out: &mut Vec<u8>);
}

struct RuzstdOneShot;
impl Encoder for RuzstdOneShot {
    fn name(&self) -> String {
        "ruzstd 0.8 fastest (one-shot)".into()
    }
    fn compress(&mut self, input: &[u8], out: &mut Vec<u8>) {
        out.clear();
        ruzstd::encoding::compress(
            input,
            &mut *out,
            ruzstd::encoding::CompressionLevel::Fastest,
        );
    }
}

struct StructuredOneShot(i32);
impl Encoder for StructuredOneShot {
    fn name(&self) -> String {
        format!("structured-zstd 0.2.6 level {} (one-shot)", self.0)
    }
    fn compress(&mut self, input: &[u8], out: &mut Vec<u8>) {
        *out = structured_zstd::encoding::compress_slice_to_vec(
            input,
            structured_zstd::encoding::CompressionLevel::from_level(self.0),
        );
    }
}

struct StructuredReused(i32, structured_zstd::encoding::FrameCompressor);
impl Encoder for StructuredReused {
    fn name(&self) -> String {
        format!("structured-zstd 0.2.6 level {} (reused compressor)", self.0)
    }
    fn compress(&mut self, input: &[u8], out: &mut Vec<u8>) {
        self.1.compress_independent_frame_into(input, out);
    }
}

struct CZstd(i32, zstd::bulk::Compressor<'static>);
impl Encoder for CZstd {
    fn name(&self) -> String {
        format!("C zstd 1.5.7 level {} (reused context)", self.0)
    }
    fn compress(&mut self, input: &[u8], out: &mut Vec<u8>) {
        out.clear();
        out.reserve(zstd::zstd_safe::compress_bound(input.len()));
        self.1.compress_to_buffer(input, out).expect("C zstd");
    }
}

fn encoders() -> Vec<Box<dyn Encoder>> {
    use structured_zstd::encoding::{CompressionLevel, FrameCompressor};
    let mut v: Vec<Box<dyn Encoder>> = vec![Box::new(RuzstdOneShot)];
    for level in [1, 3] {
        v.push(Box::new(StructuredOneShot(level)));
        v.push(Box::new(StructuredReused(
            level,
            FrameCompressor::new(CompressionLevel::from_level(level)),
        )));
        v.push(Box::new(CZstd(
            level,
            zstd::bulk::Compressor::new(level).unwrap(),
        )));
    }
    v
}

fn text_batches(lines: &[&[u8]], size: usize, count: usize) -> Vec<Vec<u8>> {
    (0..count)
        .map(|_| {
            let mut b = Vec::with_capacity(size + 2048);
            while b.len() < size {
                b.extend_from_slice(lines[fastrand::usize(..lines.len())]);
            }
            b.truncate(size);
            b
        })
        .collect()
}

fn byte_batches(size: usize, count: usize, byte: impl Fn() -> u8) -> Vec<Vec<u8>> {
    (0..count)
        .map(|_| (0..size).map(|_| byte()).collect())
        .collect()
}

fn decode(frame: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    ruzstd::decoding::StreamingDecoder::new(frame)
        .expect("frame header")
        .read_to_end(&mut out)
        .expect("decode");
    out
}

fn main() {
    let mut args = std::env::args().skip(1);
    let payload = std::fs::read(
        args.next()
            .expect("usage: zstd-encoders PAYLOAD_FILE [SECONDS]"),
    )
    .expect("payload file");
    let seconds: f64 = args.next().map_or(1.0, |s| s.parse().expect("seconds"));
    let lines: Vec<&[u8]> = payload.split_inclusive(|&b| b == b'\n').collect();
    fastrand::seed(1);
    println!("| input | batch | encoder | MB/s | us/batch | ratio |");
    println!("|---|---|---|---|---|---|");
    for input in ["text", "a-z", "random"] {
        for size in SIZES {
            let count = (8 << 20) / size;
            let batches = match input {
                "text" => text_batches(&lines, size, count),
                "a-z" => byte_batches(size, count, || fastrand::u8(b'A'..=b'Z')),
                _ => byte_batches(size, count, || fastrand::u8(..)),
            };
            for mut enc in encoders() {
                let mut out = Vec::new();
                let (mut raw, mut packed) = (0usize, 0usize);
                for b in &batches {
                    enc.compress(b, &mut out);
                    assert_eq!(&decode(&out), b, "{} round trip", enc.name());
                    raw += b.len();
                    packed += out.len();
                }
                let (start, cpu) = (Instant::now(), thread_cpu());
                let mut n = 0usize;
                while thread_cpu() - cpu < seconds || start.elapsed() < Duration::from_millis(1) {
                    enc.compress(&batches[n % batches.len()], &mut out);
                    n += 1;
                }
                let secs = thread_cpu() - cpu;
                println!(
                    "| {input} | {} KiB | {} | {:.0} | {:.0} | {:.2} |",
                    size >> 10,
                    enc.name(),
                    (n * size) as f64 / secs / 1e6,
                    secs * 1e6 / n as f64,
                    raw as f64 / packed as f64
                );
            }
        }
    }
}
