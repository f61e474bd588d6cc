//! The rust-rdkafka peer of `purekafka perf produce|consume` for
//! benches/peers: the same flags, the same payloads (random A-Z bytes per
//! record, or random lines of a payload file, as Kafka's ProducerPerformance)
//! and the same one-line JSON report. It drives librdkafka the way its own
//! rdkafka_performance tool does: a BaseProducer polled after every send,
//! and a longer poll when the local queue is full.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::producer::{BaseProducer, BaseRecord, DeliveryResult, Producer, ProducerContext};
use rdkafka::{ClientContext, Offset, TopicPartitionList};

/// The last 1 ms latency bucket; slower acks share it.
const MAX_BUCKET_MS: usize = 60_000;

struct Latencies {
    buckets: Vec<AtomicU64>,
    sum_us: AtomicU64,
    max_us: AtomicU64,
    count: AtomicU64,
    failed: AtomicU64,
    first_error: Mutex<Option<String>>,
}

impl Latencies {
    fn record(&self, latency: Duration) {
        let us = latency.as_micros() as u64;
        let ms = (us / 1000).min(MAX_BUCKET_MS as u64) as usize;
        self.buckets[ms].fetch_add(1, Relaxed);
        self.sum_us.fetch_add(us, Relaxed);
        self.max_us.fetch_max(us, Relaxed);
        self.count.fetch_add(1, Relaxed);
    }

    /// The smallest latency (ms) at or below which fraction `q` lies.
    fn percentile(&self, q: f64) -> usize {
        let target = ((self.count.load(Relaxed) as f64) * q).ceil().max(1.0) as u64;
        let mut seen = 0;
        for (ms, b) in self.buckets.iter().enumerate() {
            seen += b.load(Relaxed);
            if seen >= target {
                return ms;
            }
        }
        MAX_BUCKET_MS
    }
}

struct Delivery(Arc<Latencies>);

impl ClientContext for Delivery {}

impl ProducerContext for Delivery {
    type DeliveryOpaque = Box<Instant>;

    fn delivery(&self, result: &DeliveryResult<'_>, sent_at: Box<Instant>) {
        match result {
            Ok(_) => self.0.record(sent_at.elapsed()),
            Err((e, _)) => {
                self.0.failed.fetch_add(1, Relaxed);
                let mut first = self.0.first_error.lock().unwrap_or_else(|p| p.into_inner());
                first.get_or_insert_with(|| e.to_string());
            }
        }
    }
}

fn fail(msg: impl std::fmt::Display) -> ! {
    eprintln!("rdkafka-perf: {msg}");
    std::process::exit(1)
}

fn main() {
    let mut argv = std::env::args().skip(1);
    let mode = argv.next().unwrap_or_default();
    if mode != "produce" && mode != "consume" {
        fail("usage: rdkafka-perf produce|consume --topic T --num-records N [flags]");
    }
    let mut flags = HashMap::new();
    while let Some(key) = argv.next() {
        let Some(name) = key.strip_prefix("--") else {
            fail(format!("unexpected argument {key}"))
        };
        let value = argv
            .next()
            .unwrap_or_else(|| fail(format!("{key} needs a value")));
        flags.insert(name.to_owned(), value);
    }
    let get = |k: &str| flags.get(k).cloned();
    let num = |k: &str, d: u64| -> u64 {
        get(k).map_or(d, |v| {
            v.parse().unwrap_or_else(|_| fail(format!("--{k} {v}")))
        })
    };
    let topic = get("topic").unwrap_or_else(|| fail("--topic is required"));
    let n = num("num-records", 0);
    if n == 0 {
        fail("--num-records is required");
    }
    let mut config = ClientConfig::new();
    config.set(
        "bootstrap.servers",
        get("bootstrap-server").unwrap_or_else(|| "127.0.0.1:19092".into()),
    );
    if mode == "consume" {
        consume(
            config,
            &topic,
            n,
            Duration::from_millis(num("timeout-ms", 10_000)),
        );
        return;
    }
    for (flag, key) in [
        ("acks", "acks"),
        ("compression", "compression.type"),
        ("linger-ms", "linger.ms"),
        ("batch-size", "batch.size"),
    ] {
        if let Some(v) = get(flag) {
            config.set(key, v);
        }
    }
    // Let a large batch.size take effect: librdkafka caps a batch by
    // message.max.bytes too (default 1000000).
    if let Some(b) = get("batch-size") {
        let b: u64 = b.parse().unwrap_or_else(|_| fail("--batch-size"));
        config.set("message.max.bytes", (b + 1024).max(1_000_000).to_string());
    }
    let lines = get("payload-file").map(|p| {
        let text = std::fs::read(&p).unwrap_or_else(|e| fail(format!("{p}: {e}")));
        let lines: Vec<Vec<u8>> = text
            .split(|b| *b == b'\n')
            .filter(|l| !l.is_empty())
            .map(<[u8]>::to_vec)
            .collect();
        if lines.is_empty() {
            fail(format!("{p} has no non-empty lines"));
        }
        lines
    });
    let throughput: f64 = get("throughput").map_or(-1.0, |v| {
        v.parse()
            .unwrap_or_else(|_| fail(format!("--throughput {v}")))
    });
    produce(
        config,
        &topic,
        n,
        num("record-size", 100) as usize,
        lines,
        throughput,
    );
}

fn produce(
    config: ClientConfig,
    topic: &str,
    n: u64,
    size: usize,
    lines: Option<Vec<Vec<u8>>>,
    throughput: f64,
) {
    let lat = Arc::new(Latencies {
        buckets: (0..=MAX_BUCKET_MS).map(|_| AtomicU64::new(0)).collect(),
        sum_us: AtomicU64::new(0),
        max_us: AtomicU64::new(0),
        count: AtomicU64::new(0),
        failed: AtomicU64::new(0),
        first_error: Mutex::new(None),
    });
    let producer: BaseProducer<Delivery> = config
        .create_with_context(Delivery(lat.clone()))
        .unwrap_or_else(|e| fail(format!("producer: {e}")));
    let mut rng = fastrand::Rng::with_seed(1);
    let mut payload = vec![0u8; size];
    let started = Instant::now();
    for i in 0..n {
        let value: &[u8] = match &lines {
            Some(lines) => &lines[rng.usize(..lines.len())],
            None => {
                // librdkafka copies the payload, so one buffer is refilled.
                for b in payload.iter_mut() {
                    *b = rng.u8(b'A'..=b'Z');
                }
                &payload
            }
        };
        let mut record =
            BaseRecord::<(), [u8], Box<Instant>>::with_opaque_to(topic, Box::new(Instant::now()))
                .payload(value);
        loop {
            match producer.send(record) {
                Ok(()) => break,
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), back)) => {
                    record = back;
                    producer.poll(Duration::from_millis(10));
                }
                Err((e, _)) => fail(format!("send: {e}")),
            }
        }
        producer.poll(Duration::ZERO);
        if throughput > 0.0 {
            // Sleep when ahead of the target rate, as ours and franz-go-perf do.
            // Delivery reports are served while waiting; poll returns early
            // when it served one.
            let due = Duration::from_secs_f64((i + 1) as f64 / throughput);
            loop {
                let elapsed = started.elapsed();
                if due <= elapsed + Duration::from_millis(2) {
                    break;
                }
                producer.poll(due - elapsed);
            }
        }
    }
    if let Err(e) = producer.flush(Duration::from_secs(120)) {
        fail(format!("flush: {e}"));
    }
    let secs = started.elapsed().as_secs_f64();
    let failed = lat.failed.load(Relaxed);
    if failed > 0 {
        let first = lat
            .first_error
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        fail(format!("{failed} of {n} records failed, first: {first:?}"));
    }
    let count = lat.count.load(Relaxed);
    let v = serde_json::json!({
        "records": count,
        "elapsed_s": secs,
        "records_per_sec": count as f64 / secs,
        "latency_ms": {
            "avg": lat.sum_us.load(Relaxed) as f64 / 1000.0 / count.max(1) as f64,
            "p50": lat.percentile(0.50),
            "p95": lat.percentile(0.95),
            "p99": lat.percentile(0.99),
            "p999": lat.percentile(0.999),
            "max": lat.max_us.load(Relaxed) as f64 / 1000.0,
        },
    });
    println!("{v}");
}

/// Reads `n` records from the beginning of every partition of `topic` by
/// manual assignment (nothing committed), as `purekafka perf consume` does
/// without --group.
fn consume(mut config: ClientConfig, topic: &str, n: u64, timeout: Duration) {
    config
        .set("group.id", format!("rdkafka-perf-{}", std::process::id()))
        .set("enable.auto.commit", "false")
        .set("auto.offset.reset", "earliest");
    let consumer: BaseConsumer = config
        .create()
        .unwrap_or_else(|e| fail(format!("consumer: {e}")));
    let started = Instant::now();
    let metadata = consumer
        .fetch_metadata(Some(topic), Duration::from_secs(30))
        .unwrap_or_else(|e| fail(format!("metadata: {e}")));
    let mut tpl = TopicPartitionList::new();
    for t in metadata.topics() {
        for p in t.partitions() {
            tpl.add_partition_offset(topic, p.id(), Offset::Beginning)
                .unwrap_or_else(|e| fail(format!("assign: {e}")));
        }
    }
    if tpl.count() == 0 {
        fail(format!("topic {topic} has no partitions"));
    }
    consumer
        .assign(&tpl)
        .unwrap_or_else(|e| fail(format!("assign: {e}")));
    let (mut records, mut bytes) = (0u64, 0u64);
    let mut last = Instant::now();
    while records < n {
        match consumer.poll(Duration::from_millis(100)) {
            Some(Ok(m)) => {
                records += 1;
                bytes += (m.key_len() + m.payload_len()) as u64;
                last = Instant::now();
            }
            Some(Err(e)) => fail(format!("fetch: {e}")),
            None if last.elapsed() > timeout => fail(format!(
                "read {records} of {n} records before a {timeout:?} gap"
            )),
            None => {}
        }
    }
    let secs = started.elapsed().as_secs_f64();
    let v = serde_json::json!({
        "records": records,
        "elapsed_s": secs,
        "fetch_records_per_sec": records as f64 / secs,
        "fetch_mb_per_sec": bytes as f64 / (1024.0 * 1024.0) / secs,
    });
    println!("{v}");
}
