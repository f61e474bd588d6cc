//! `purekafka perf produce`: throughput and send-to-ack latency, measured
//! as Kafka's ProducerPerformance does (random A–Z payloads of
//! `--record-size` bytes, fresh for every record). `perf consume` lives in
//! `perf/consume.rs`; payloads (`--payload-file`, `perf payload`) in
//! `perf/payload.rs`.

mod consume;
mod payload;

use std::io::IsTerminal;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clap::{Args, Subcommand};
use purekafka::producer::{Producer, ProducerMetrics, ProducerRecord};
use purekafka::Error;

use crate::Connect;

/// `purekafka perf …`.
#[derive(Subcommand, Debug)]
pub enum PerfCommand {
    /// Produce records as fast as allowed and report throughput and latency.
    Produce(ProducePerfArgs),
    /// Read records from the beginning and report throughput, like
    /// Kafka's ConsumerPerformance.
    Consume(consume::ConsumePerfArgs),
    /// Write a text-like payload file (JSON log lines from a fixed seed) to
    /// stdout, for `--payload-file`.
    Payload(payload::PayloadArgs),
}

/// Options of `purekafka perf produce`.
#[derive(Args, Debug)]
pub struct ProducePerfArgs {
    #[command(flatten)]
    connect: Connect,
    #[cfg(feature = "metrics")]
    #[command(flatten)]
    metrics: crate::MetricsArgs,
    /// Topic to write to.
    #[arg(long, short = 't')]
    topic: String,
    /// Records to send.
    #[arg(long)]
    num_records: u64,
    /// Bytes per record value: fresh random A–Z bytes for every record.
    #[arg(long, required_unless_present = "payload_file")]
    record_size: Option<usize>,
    /// Values are random non-empty lines of this file (as
    /// ProducerPerformance's --payload-file); `perf payload` writes one.
    #[arg(long, conflicts_with = "record_size")]
    payload_file: Option<String>,
    /// acks: 0, 1 or all.
    #[arg(long)]
    acks: Option<String>,
    /// compression.type.
    #[arg(long)]
    compression: Option<String>,
    /// linger.ms.
    #[arg(long)]
    linger_ms: Option<u64>,
    /// batch.size.
    #[arg(long)]
    batch_size: Option<usize>,
    /// Records per second to aim at; -1 for no limit.
    #[arg(long, default_value_t = -1.0, allow_negative_numbers = true)]
    throughput: f64,
    /// Any producer setting, key=value (repeatable).
    #[arg(long, value_name = "K=V")]
    producer_property: Vec<String>,
    /// Print one JSON object instead of a line of text.
    #[arg(long)]
    json: bool,
}

/// Runs a perf subcommand.
pub async fn run(cmd: PerfCommand) -> purekafka::Result<()> {
    match cmd {
        PerfCommand::Produce(args) => produce(args).await,
        PerfCommand::Consume(args) => consume::run(args).await,
        PerfCommand::Payload(args) => payload::write(&args),
    }
}

/// Send-to-ack latencies: a 1 ms-bucket histogram (as precise as the Java
/// tool's integer-ms percentiles) plus the exact sum and maximum.
struct Latencies {
    buckets: Vec<AtomicU64>,
    sum_us: AtomicU64,
    max_us: AtomicU64,
    count: AtomicU64,
    failed: AtomicU64,
}

/// Latencies of a minute or more share the last bucket.
const MAX_BUCKET_MS: usize = 60_000;

impl Latencies {
    fn new() -> Latencies {
        Latencies {
            buckets: (0..=MAX_BUCKET_MS).map(|_| AtomicU64::new(0)).collect(),
            sum_us: AtomicU64::new(0),
            max_us: AtomicU64::new(0),
            count: AtomicU64::new(0),
            failed: AtomicU64::new(0),
        }
    }

    fn record(&self, latency: Duration) {
        let us = latency.as_micros() as u64;
        let ms = (us / 1000).min(MAX_BUCKET_MS as u64) as usize;
        self.buckets[ms].fetch_add(1, Relaxed);
        self.sum_us.fetch_add(us, Relaxed);
        self.max_us.fetch_max(us, Relaxed);
        self.count.fetch_add(1, Relaxed);
    }

    /// The smallest latency (ms) at or above which lies fraction `q`.
    fn percentile(&self, q: f64) -> u64 {
        let n = self.count.load(Relaxed);
        let target = ((n as f64) * q).ceil().max(1.0) as u64;
        let mut seen = 0;
        for (ms, b) in self.buckets.iter().enumerate() {
            seen += b.load(Relaxed);
            if seen >= target {
                return ms as u64;
            }
        }
        MAX_BUCKET_MS as u64
    }
}

async fn produce(args: ProducePerfArgs) -> purekafka::Result<()> {
    let mut props = args.producer_property.clone();
    for (key, value) in [
        ("acks", args.acks.clone()),
        ("compression.type", args.compression.clone()),
        ("linger.ms", args.linger_ms.map(|v| v.to_string())),
        ("batch.size", args.batch_size.map(|v| v.to_string())),
    ] {
        if let Some(v) = value {
            props.push(format!("{key}={v}"));
        }
    }
    let mut payloads = match (&args.payload_file, args.record_size) {
        (Some(path), _) => payload::Payloads::from_file(path)?,
        (None, size) => payload::Payloads::random(size.unwrap_or_default()),
    };
    let config = args.connect.producer(&props)?.build()?;
    let producer = Producer::connect(config).await?;
    #[cfg(feature = "metrics")]
    args.metrics.publish(|p| p.producer(&producer))?;
    let latencies = Arc::new(Latencies::new());
    let first_error: Arc<Mutex<Option<Error>>> = Arc::default();
    let bar = progress_bar(args.num_records, args.json);
    let mut bytes_sent = 0u64;
    // One shared name: records clone it instead of copying the string.
    let topic: Arc<str> = Arc::from(args.topic.as_str());
    let started = Instant::now();
    for i in 0..args.num_records {
        let value = payloads.next_value();
        bytes_sent += value.len() as u64;
        let record = ProducerRecord::new(&topic).value(value);
        let sent_at = Instant::now();
        let lat = latencies.clone();
        let first_error = first_error.clone();
        producer
            .send_with_callback(record, move |result| match result {
                Ok(_) => lat.record(sent_at.elapsed()),
                Err(e) => {
                    lat.failed.fetch_add(1, Relaxed);
                    first_error
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .get_or_insert(e);
                }
            })
            .await?;
        if args.throughput > 0.0 {
            // Sleep when ahead of the target rate (ThroughputThrottler).
            let due = Duration::from_secs_f64((i + 1) as f64 / args.throughput);
            let elapsed = started.elapsed();
            if due > elapsed + Duration::from_millis(2) {
                tokio::time::sleep(due - elapsed).await;
            }
        }
        if let Some(bar) = &bar {
            if i % 4096 == 0 {
                bar.set_position(i);
            }
        }
    }
    producer.flush().await;
    let elapsed = started.elapsed();
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
    let metrics = producer.metrics();
    producer.close(Duration::from_secs(30)).await?;
    report(&args, &latencies, elapsed, bytes_sent, &metrics);
    let failed = latencies.failed.load(Relaxed);
    if failed > 0 {
        eprintln!("purekafka: {failed} of {} records failed", args.num_records);
        let first = first_error.lock().unwrap_or_else(|p| p.into_inner()).take();
        return Err(first.unwrap_or(Error::Closed));
    }
    Ok(())
}

fn progress_bar(total: u64, json: bool) -> Option<indicatif::ProgressBar> {
    if json || !std::io::stderr().is_terminal() {
        return None;
    }
    let bar = indicatif::ProgressBar::new(total);
    if let Ok(style) = indicatif::ProgressStyle::with_template(
        "{bar:40} {pos}/{len} records  {per_sec}  eta {eta}",
    ) {
        bar.set_style(style);
    }
    Some(bar)
}

fn report(
    args: &ProducePerfArgs,
    lat: &Latencies,
    elapsed: Duration,
    bytes: u64,
    metrics: &ProducerMetrics,
) {
    let n = lat.count.load(Relaxed);
    let secs = elapsed.as_secs_f64().max(1e-9);
    let rate = n as f64 / secs;
    let mb = bytes as f64 / secs / (1024.0 * 1024.0);
    let avg = lat.sum_us.load(Relaxed) as f64 / 1000.0 / (n.max(1) as f64);
    let max = lat.max_us.load(Relaxed) as f64 / 1000.0;
    let (p50, p95, p99, p999) = (
        lat.percentile(0.50),
        lat.percentile(0.95),
        lat.percentile(0.99),
        lat.percentile(0.999),
    );
    if args.json {
        let v = serde_json::json!({
            "records": n,
            "elapsed_s": secs,
            "records_per_sec": rate,
            "mb_per_sec": mb,
            "latency_ms": {
                "avg": avg, "p50": p50, "p95": p95, "p99": p99, "p999": p999, "max": max,
            },
            "records_per_batch": metrics.records_per_batch(),
            "bytes_per_batch": metrics.batch_size_avg(),
            "batches_per_request": if metrics.requests == 0 {
                0.0
            } else {
                metrics.batches_sent as f64 / metrics.requests as f64
            },
        });
        println!("{v}");
    } else {
        println!(
            "{n} records sent, {rate:.1} records/sec ({mb:.2} MB/sec), {avg:.2} ms avg latency, \
             {max:.2} ms max latency, {p50} ms 50th, {p95} ms 95th, {p99} ms 99th, {p999} ms 99.9th."
        );
    }
}
