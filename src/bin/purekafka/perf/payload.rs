//! Record values for `purekafka perf produce`: random A–Z bytes per record
//! (Kafka's ProducerPerformance without a payload file), random lines of a
//! `--payload-file` (its `--payload-file` with the default `\n`
//! delimiter), and `purekafka perf payload`, which writes a text-like
//! payload file: JSON log lines of a fixed size from a fixed seed, so every
//! client of a compression benchmark sends the same bytes.

use std::io::Write;

use bytes::{Bytes, BytesMut};
use clap::Args;

/// Where the values come from.
pub enum Payloads {
    /// Fresh random A–Z bytes of this size for every record, from a seeded
    /// generator of its own (as rdkafka-perf draws them: the same per-byte
    /// work for every client of the peer benchmark).
    Random { size: usize, rng: fastrand::Rng },
    /// A random line of the payload file for every record; each value is a
    /// slice of one shared buffer.
    Lines {
        lines: Vec<Bytes>,
        rng: fastrand::Rng,
    },
}

impl Payloads {
    /// Random A–Z values of `size` bytes.
    pub fn random(size: usize) -> Payloads {
        Payloads::Random {
            size,
            rng: fastrand::Rng::with_seed(1),
        }
    }

    /// Non-empty `\n`-separated lines of `path`.
    pub fn from_file(path: &str) -> purekafka::Result<Payloads> {
        let text = Bytes::from(std::fs::read(path).map_err(|e| config("--payload-file", e))?);
        let mut lines = Vec::new();
        let mut start = 0;
        for (i, b) in text.iter().enumerate() {
            if *b == b'\n' {
                if i > start {
                    lines.push(text.slice(start..i));
                }
                start = i + 1;
            }
        }
        if text.len() > start {
            lines.push(text.slice(start..));
        }
        if lines.is_empty() {
            return Err(config(
                "--payload-file",
                format!("{path} has no non-empty line"),
            ));
        }
        Ok(Payloads::Lines {
            lines,
            rng: fastrand::Rng::with_seed(1),
        })
    }

    /// The next record's value.
    pub fn next_value(&mut self) -> Bytes {
        match self {
            Payloads::Random { size, rng } => {
                // Drawn straight into the value's own buffer (franz-go-perf
                // makes a fresh slice per record too): no second copy.
                let mut value = BytesMut::zeroed(*size);
                for b in value.iter_mut() {
                    *b = rng.u8(b'A'..=b'Z');
                }
                value.freeze()
            }
            Payloads::Lines { lines, rng } => lines[rng.usize(..lines.len())].clone(),
        }
    }
}

fn config(key: &str, reason: impl std::fmt::Display) -> purekafka::Error {
    purekafka::Error::Config {
        key: key.to_owned(),
        reason: reason.to_string(),
    }
}

/// Options of `purekafka perf payload`.
#[derive(Args, Debug)]
pub struct PayloadArgs {
    /// Lines to write.
    #[arg(long, default_value_t = 10_000)]
    lines: usize,
    /// Bytes per line, without the newline (at least 64).
    #[arg(long, default_value_t = 1024)]
    line_size: usize,
    /// Seed of the generator: the same seed writes the same file.
    #[arg(long, default_value_t = 1)]
    seed: u64,
}

const LEVELS: [&str; 4] = ["INFO", "INFO", "WARN", "DEBUG"];
const SERVICES: [&str; 6] = [
    "checkout",
    "payments",
    "search",
    "inventory",
    "auth",
    "shipping",
];
const PATHS: [&str; 5] = [
    "/api/v1/orders",
    "/api/v1/cart/items",
    "/api/v2/search",
    "/internal/health",
    "/api/v1/users/session",
];
const WORDS: [&str; 24] = [
    "request",
    "completed",
    "user",
    "cart",
    "order",
    "cache",
    "miss",
    "hit",
    "retry",
    "upstream",
    "timeout",
    "after",
    "with",
    "status",
    "payment",
    "authorized",
    "item",
    "added",
    "to",
    "session",
    "refreshed",
    "token",
    "for",
    "region",
];

/// Writes `--lines` JSON log lines of exactly `--line-size` bytes to stdout.
pub fn write(args: &PayloadArgs) -> purekafka::Result<()> {
    if args.line_size < 64 {
        return Err(config("--line-size", "must be at least 64"));
    }
    let mut rng = fastrand::Rng::with_seed(args.seed);
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    let io = |e: std::io::Error| config("stdout", e);
    for i in 0..args.lines {
        let line = log_line(&mut rng, i, args.line_size);
        out.write_all(line.as_bytes()).map_err(io)?;
        out.write_all(b"\n").map_err(io)?;
    }
    out.flush().map_err(io)
}

/// One line: JSON fields with repeating names and skewed values, a message
/// of common words, cut or padded to `size` bytes and closed with `"}`.
fn log_line(rng: &mut fastrand::Rng, i: usize, size: usize) -> String {
    let mut s = format!(
        "{{\"ts\":\"2026-11-30T{:02}:{:02}:{:02}.{:03}Z\",\"level\":\"{}\",\"service\":\"{}\",\
         \"host\":\"web-{:02}\",\"trace_id\":\"{:016x}\",\"user_id\":{},\"path\":\"{}/{}\",\
         \"status\":{},\"latency_ms\":{},\"msg\":\"",
        (i / 3600) % 24,
        (i / 60) % 60,
        i % 60,
        rng.u32(..1000),
        LEVELS[rng.usize(..LEVELS.len())],
        SERVICES[rng.usize(..SERVICES.len())],
        rng.u32(..16),
        rng.u64(..),
        rng.u32(..100_000),
        PATHS[rng.usize(..PATHS.len())],
        rng.u32(..10_000),
        [200, 200, 200, 201, 404, 500][rng.usize(..6)],
        rng.u32(..2000),
    );
    while s.len() < size {
        s.push_str(WORDS[rng.usize(..WORDS.len())]);
        s.push(' ');
    }
    s.truncate(size.saturating_sub(2).max(1));
    // The prefix is ASCII, so the cut is on a character boundary.
    s.push_str("\"}");
    s.truncate(size);
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_lines_have_the_asked_size_and_depend_on_the_seed_only() {
        let mut a = fastrand::Rng::with_seed(7);
        let mut b = fastrand::Rng::with_seed(7);
        for (i, size) in [64, 100, 1024, 4096].into_iter().enumerate() {
            let line = log_line(&mut a, i, size);
            assert_eq!(line.len(), size);
            assert!(line.starts_with("{\"ts\":") && line.ends_with("\"}"));
            assert!(!line.contains('\n'));
            assert_eq!(line, log_line(&mut b, i, size));
        }
    }

    #[test]
    fn payload_file_lines_skip_empty_ones() {
        let dir = std::env::temp_dir().join(format!("perf-payload-{}", std::process::id()));
        std::fs::write(&dir, b"one\n\ntwo\nthree").unwrap();
        let Payloads::Lines { mut lines, .. } = Payloads::from_file(dir.to_str().unwrap()).unwrap()
        else {
            panic!("a file gives lines")
        };
        std::fs::remove_file(&dir).unwrap();
        lines.sort();
        assert_eq!(lines, ["one", "three", "two"]);
    }
}
