//! The streams benchmark (issue 8): one run prints every figure of
//! docs/benchmarks.md, section "Streams", against a real broker.
//!
//! - async speed-up: sequential (Partition, 1 in flight) vs key-ordered
//!   async (512 in flight), a simulated 10 ms call, 1 partition, 10,000
//!   keys, and the no-op pipeline (same settings, no call); the target is
//!   key-ordered ≥ 80% of min(512 / 10 ms, no-op) and ≥ 100× sequential;
//! - retry lane: 1% of records fail twice, 1 s backoff; main-lane p99
//!   (create time to done, records that never fail) with in-place retry
//!   and with the parallel retry lane vs the no-failure run (target ≤ 2×);
//! - exactly-once vs at-least-once throughput at a 100 ms commit interval
//!   (the 10 ms call, outputs to a topic; target ≥ 50%).
//!
//! Throughput is counted from the first record done to the last, so the
//! group join is excluded; inputs are produced before the application
//! starts, except in the latency runs, which produce at a fixed rate.
//!
//! ```sh
//! cargo run --release --features serde --example streams_bench -- [bootstrap]
//! ```

#[path = "common/topics.rs"]
mod topics;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use purekafka::producer::serializer::StringSerializer;
use purekafka::producer::{Producer, ProducerConfig, ProducerRecord};
use purekafka::streams::{
    Backoff, CommitMode, FailurePolicy, OrderingMode, ProcessingError, RetryLane, Streams,
    StreamsConfig, StringDeserializer,
};
use purekafka::{ClientConfig, Cluster};

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

#[derive(Clone)]
struct Run {
    records: u64,
    ordering: OrderingMode,
    in_flight: usize,
    call: Duration,
    /// Records `id % 100 == 7` fail twice under this policy.
    policy: Option<FailurePolicy>,
    commit: CommitMode,
    output: bool,
    /// Produce at this rate while running (records/s), else before.
    rate: Option<u64>,
}

impl Run {
    fn new(records: u64, ordering: OrderingMode, in_flight: usize, call_ms: u64) -> Run {
        Run {
            records,
            ordering,
            in_flight,
            call: Duration::from_millis(call_ms),
            policy: None,
            commit: CommitMode::Sync,
            output: false,
            rate: None,
        }
    }
}

struct Figures {
    throughput: f64,
    /// Mean duration of the simulated call as it ran (a tokio sleep lasts
    /// a little longer than asked), ms.
    call_ms: f64,
    /// Mean records in flight, sampled every 20 ms while running.
    in_flight: f64,
    p50: i64,
    p99: i64,
    dead: u64,
}

#[derive(Default)]
struct Done {
    first: Option<Instant>,
    last: Option<Instant>,
    ids: std::collections::HashSet<u64>,
    latencies: Vec<i64>,
    call_total: Duration,
    calls: u32,
}

async fn produce(bootstrap: &str, topic: &str, n: u64, rate: Option<u64>) -> purekafka::Result<()> {
    let producer = Producer::connect(
        ProducerConfig::builder()
            .bootstrap_servers(bootstrap)
            .build()?,
    )
    .await?;
    let start = Instant::now();
    for id in 0..n {
        if let Some(rate) = rate {
            let due = start + Duration::from_secs_f64(id as f64 / rate as f64);
            tokio::time::sleep_until(due.into()).await;
        }
        let rec = ProducerRecord::new(topic)
            .key(format!("customer-{}", id % 10_000))
            .value(id.to_string());
        drop(producer.send(rec).await?);
    }
    producer.flush().await;
    producer.close(Duration::from_secs(10)).await
}

async fn run(bootstrap: &str, cluster: &Cluster, r: Run) -> purekafka::Result<Figures> {
    let tag = format!("bench-{}", fastrand::u32(..));
    let (input, output, retry, dlq) = (
        format!("{tag}-in"),
        format!("{tag}-out"),
        format!("{tag}-retry"),
        format!("{tag}-dlq"),
    );
    topics::create_topics(cluster, &[&input, &output, &retry, &dlq], 1).await?;
    if r.rate.is_none() {
        produce(bootstrap, &input, r.records, None).await?;
    }
    let policy = match r.policy.clone() {
        Some(FailurePolicy::RetryLane(mut lane)) => {
            lane.retry_topic = retry.clone();
            lane.dead_letter_topic = dlq.clone();
            FailurePolicy::RetryLane(lane)
        }
        Some(p) => p,
        None => FailurePolicy::Fail,
    };
    let fail = r.policy.is_some();
    let config = StreamsConfig::builder(tag.clone(), bootstrap)
        .ordering(r.ordering)
        .max_in_flight(r.in_flight, r.in_flight)
        .commit_mode(r.commit.clone())
        .commit_interval(Duration::from_millis(100))
        .failure_policy(policy)
        .build()?;
    let done: Arc<Mutex<Done>> = Arc::default();
    let attempts: Arc<Mutex<std::collections::HashMap<u64, u32>>> = Arc::default();
    let (d, a, call) = (done.clone(), attempts.clone(), r.call);
    let stage = Streams::topology(config)
        .source(input.as_str(), StringDeserializer, StringDeserializer)
        .map_async(move |rec| {
            let (d, a) = (d.clone(), a.clone());
            async move {
                let id: u64 = rec
                    .value
                    .parse()
                    .map_err(|_| ProcessingError::new("bad id"))?;
                if !call.is_zero() {
                    let t = Instant::now();
                    tokio::time::sleep(call).await;
                    let mut d = d.lock().unwrap();
                    d.call_total += t.elapsed();
                    d.calls += 1;
                }
                if fail && id % 100 == 7 {
                    let mut a = a.lock().unwrap();
                    let n = a.entry(id).or_insert(0);
                    *n += 1;
                    if *n <= 2 {
                        return Err(ProcessingError::new(format!("call for {id} failed")));
                    }
                }
                let now = Instant::now();
                let mut d = d.lock().unwrap();
                d.first.get_or_insert(now);
                d.last = Some(now);
                d.ids.insert(id);
                if id % 100 != 7 {
                    d.latencies.push(now_ms() - rec.timestamp);
                }
                Ok(rec)
            }
        });
    let topology = if r.output {
        stage.to(output.as_str(), StringSerializer, StringSerializer)
    } else {
        stage.for_each(|_| Ok(()))
    };
    let running = topology
        .build()
        .start()
        .await
        .map_err(|e| purekafka::Error::config("streams", e.to_string()))?;
    if r.rate.is_some() {
        produce(bootstrap, &input, r.records, r.rate).await?;
    }
    let deadline = Instant::now() + Duration::from_secs(300);
    let mut in_flight = Vec::new();
    while done.lock().unwrap().ids.len() < r.records as usize && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
        if running.is_finished() {
            break;
        }
        if done.lock().unwrap().first.is_some() {
            in_flight.push(running.metrics().in_flight);
        }
    }
    let m = running.metrics();
    running
        .shutdown()
        .await
        .map_err(|e| purekafka::Error::config("streams", e.to_string()))?;
    let d = done.lock().unwrap();
    if d.ids.len() as u64 != r.records {
        eprintln!(
            "  warning: only {} of {} records done",
            d.ids.len(),
            r.records
        );
    }
    let span = d.last.unwrap().duration_since(d.first.unwrap());
    let mut lat = d.latencies.clone();
    lat.sort_unstable();
    let pct = |p: f64| {
        lat.get(((lat.len() as f64 - 1.0) * p) as usize)
            .copied()
            .unwrap_or(0)
    };
    Ok(Figures {
        throughput: (d.ids.len() as f64 - 1.0) / span.as_secs_f64(),
        call_ms: d.call_total.as_secs_f64() * 1e3 / f64::from(d.calls.max(1)),
        in_flight: in_flight.iter().sum::<u64>() as f64 / in_flight.len().max(1) as f64,
        p50: pct(0.5),
        p99: pct(0.99),
        dead: m.dead_lettered,
    })
}

fn verdict(ok: bool) -> &'static str {
    if ok {
        "met"
    } else {
        "MISSED"
    }
}

#[tokio::main]
async fn main() -> purekafka::Result<()> {
    let bootstrap = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:19092".into());
    let only = std::env::args().nth(2).unwrap_or_default();
    let cluster = Cluster::connect(
        ClientConfig::builder()
            .bootstrap_servers(&bootstrap)
            .build()?,
    )
    .await?;
    let b = bootstrap.as_str();
    if only.is_empty() || only == "speedup" {
        println!("## async speed-up: 1 partition, 10,000 keys, 10 ms call");
        let seq = run(b, &cluster, Run::new(300, OrderingMode::Partition, 1, 10)).await?;
        println!(
            "sequential (Partition, 1 in flight)   {:>9.0} rec/s",
            seq.throughput
        );
        let key = run(b, &cluster, Run::new(100_000, OrderingMode::Key, 512, 10)).await?;
        println!(
            "key-ordered async, 512 in flight      {:>9.0} rec/s  (mean in flight {:.0}, mean call {:.2} ms)",
            key.throughput, key.in_flight, key.call_ms
        );
        let noop = run(b, &cluster, Run::new(200_000, OrderingMode::Key, 512, 0)).await?;
        println!(
            "no-op pipeline (Key, 512, no call)    {:>9.0} rec/s",
            noop.throughput
        );
        let ideal = (512.0 / 0.010f64).min(noop.throughput);
        let share = key.throughput / ideal;
        let speedup = key.throughput / seq.throughput;
        println!(
            "key-ordered / ideal min(51,200, no-op) = {:.0}% (target ≥ 80%: {}); vs sequential {:.0}× (target ≥ 100×: {})",
            share * 100.0,
            verdict(share >= 0.8),
            speedup,
            verdict(speedup >= 100.0)
        );
        println!(
            "(with the call as it lasted, 512 / {:.2} ms = {:.0} rec/s: key-ordered is {:.0}% of that)",
            key.call_ms,
            512.0 / (key.call_ms / 1e3),
            key.throughput / (512.0 / (key.call_ms / 1e3)) * 100.0
        );
    }
    if only.is_empty() || only == "retry" {
        println!("\n## retry: 1% fail twice, 1 s backoff; Key, 512, 10 ms call, 20,000 records at 2,000/s");
        let backoff = Backoff::fixed(Duration::from_secs(1), 3);
        let mut base = Run::new(20_000, OrderingMode::Key, 512, 10);
        base.rate = Some(2_000);
        let clean = run(b, &cluster, base.clone()).await?;
        let mut blocking = base.clone();
        blocking.policy = Some(FailurePolicy::Retry(backoff));
        let blocking = run(b, &cluster, blocking).await?;
        let mut lane = base.clone();
        lane.policy = Some(FailurePolicy::RetryLane(RetryLane::new("", "", backoff)));
        let lane = run(b, &cluster, lane).await?;
        for (name, f) in [
            ("no failures", &clean),
            ("retry in place (blocking)", &blocking),
            ("parallel retry lane", &lane),
        ] {
            println!(
                "{name:<28} p50 {:>5} ms  p99 {:>5} ms  DLQ {}",
                f.p50, f.p99, f.dead
            );
        }
        let ratio = lane.p99 as f64 / clean.p99.max(1) as f64;
        println!(
            "lane p99 / no-failure p99 = {ratio:.2} (target ≤ 2: {})",
            verdict(ratio <= 2.0)
        );
    }
    if only.is_empty() || only == "eos" {
        println!(
            "\n## exactly-once vs at-least-once: Key, 512, 10 ms call, to a topic, 100 ms commits"
        );
        let mut alo = Run::new(50_000, OrderingMode::Key, 512, 10);
        alo.output = true;
        let mut eos = alo.clone();
        eos.commit = CommitMode::ExactlyOnce;
        let alo = run(b, &cluster, alo).await?;
        let eos = run(b, &cluster, eos).await?;
        let share = eos.throughput / alo.throughput;
        println!(
            "at-least-once (sync commits)          {:>9.0} rec/s",
            alo.throughput
        );
        println!(
            "exactly-once                          {:>9.0} rec/s",
            eos.throughput
        );
        println!(
            "exactly-once / at-least-once = {:.0}% (target ≥ 50%: {})",
            share * 100.0,
            verdict(share >= 0.5)
        );
    }
    Ok(())
}
