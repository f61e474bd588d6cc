//! The streams demo: orders enriched by a slow async lookup (10 ms), 1% of
//! which fail twice. Shows side by side sequential processing (Partition
//! order, 1 in flight: Kafka Streams' model, KIP-311 / KAFKA-6989) vs
//! key-ordered async processing (512 in flight), and blocking in-place
//! retry vs the parallel retry lane, with throughput, p50/p99 end-to-end
//! latency (record create time to done), dead letters, and a final check
//! that every order was processed.
//!
//! ```sh
//! cargo run --release --example streams_demo -- [bootstrap, default 127.0.0.1:19092]
//! # with each run's metrics for Prometheus on :9464 while it runs:
//! cargo run --release --features metrics --example streams_demo -- --metrics-addr 127.0.0.1:9464
//! ```

#[path = "common/topics.rs"]
mod topics;

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use purekafka::producer::{Producer, ProducerConfig, ProducerRecord};
use purekafka::streams::{
    Backoff, FailurePolicy, LatencyHistogram, OrderingMode, ProcessingError, RetryLane, Streams,
    StreamsConfig, StringDeserializer,
};
use purekafka::{ClientConfig, Cluster};

/// Orders done, and end-to-end latencies (the runtime's histogram type).
type Done = Arc<Mutex<(HashSet<u64>, LatencyHistogram)>>;

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

struct Run {
    name: &'static str,
    orders: u64,
    ordering: OrderingMode,
    in_flight: usize,
    policy: FailurePolicy,
}

/// Completes on SIGINT (Ctrl-C) or, on Unix, SIGTERM.
async fn stop_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        let mut term = signal(SignalKind::terminate()).ok();
        let term = async {
            match term.as_mut() {
                Some(t) => drop(t.recv().await),
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term => {}
        }
    }
    #[cfg(not(unix))]
    let _ = tokio::signal::ctrl_c().await;
}

/// Runs one mode; false when a signal interrupted it (after a graceful
/// shutdown: in-flight orders drained, the watermark committed).
async fn run(
    bootstrap: &str,
    cluster: &Cluster,
    r: Run,
    stop: &tokio::sync::watch::Receiver<bool>,
) -> purekafka::Result<bool> {
    let tag = format!("demo-{}", fastrand::u32(..));
    let (input, retry, dlq) = (
        format!("orders-{tag}"),
        format!("orders-{tag}-retry"),
        format!("orders-{tag}-dlq"),
    );
    topics::create_topics(cluster, &[&input, &retry, &dlq], 1).await?;
    let policy = match r.policy {
        FailurePolicy::RetryLane(mut lane) => {
            lane.retry_topic = retry.clone();
            lane.dead_letter_topic = dlq.clone();
            FailurePolicy::RetryLane(lane)
        }
        p => p,
    };
    let lane = matches!(policy, FailurePolicy::RetryLane(_));
    let config = StreamsConfig::builder(format!("demo-{tag}"), bootstrap)
        .ordering(r.ordering)
        .max_in_flight(r.in_flight, r.in_flight)
        .failure_policy(policy)
        .build()?;
    let done: Done = Arc::default();
    let attempts: Arc<Mutex<std::collections::HashMap<u64, u32>>> = Arc::default();
    let (d, a) = (done.clone(), attempts.clone());
    let started = Instant::now();
    let running = Streams::topology(config)
        .source(input.as_str(), StringDeserializer, StringDeserializer)
        .for_each_async(move |rec| {
            let (d, a) = (d.clone(), a.clone());
            async move {
                let id: u64 = rec
                    .value
                    .parse()
                    .map_err(|_| ProcessingError::new("bad order"))?;
                // The slow enrichment lookup.
                tokio::time::sleep(Duration::from_millis(10)).await;
                let n = {
                    let mut a = a.lock().unwrap();
                    let n = a.entry(id).or_insert(0);
                    *n += 1;
                    *n
                };
                if id % 100 == 7 && n <= 2 {
                    return Err(ProcessingError::new(format!(
                        "lookup for order {id} failed"
                    )));
                }
                let mut d = d.lock().unwrap();
                d.0.insert(id);
                if id % 100 != 7 {
                    let ms = (now_ms() - rec.timestamp).max(0) as u64;
                    d.1.record(Duration::from_millis(ms));
                }
                Ok(())
            }
        })
        .build()
        .start()
        .await
        .map_err(|e| purekafka::Error::config("streams", e.to_string()))?;
    let producer = Producer::connect(
        ProducerConfig::builder()
            .bootstrap_servers(bootstrap)
            .build()?,
    )
    .await?;
    // `--metrics-addr`: the endpoint is up; publish this run's clients.
    #[cfg(feature = "metrics")]
    if METRICS.load(std::sync::atomic::Ordering::Relaxed) {
        drop(
            purekafka::telemetry::MetricsPublisher::new()
                .interval(Duration::from_secs(1))
                .streams(&running)
                .producer(&producer)
                .spawn(),
        );
    }
    for id in 0..r.orders {
        let rec = ProducerRecord::new(&input)
            .key(format!("customer-{}", id % 10_000))
            .value(id.to_string());
        drop(producer.send(rec).await?);
    }
    producer.flush().await;
    let deadline = Instant::now() + Duration::from_secs(60);
    while done.lock().unwrap().0.len() < r.orders as usize && Instant::now() < deadline {
        if *stop.borrow() {
            let m = running.metrics();
            running
                .shutdown()
                .await
                .map_err(|e| purekafka::Error::config("streams", e.to_string()))?;
            println!(
                "{}: interrupted; drained {} in flight and committed; {} of {} orders done",
                r.name,
                m.in_flight,
                done.lock().unwrap().0.len(),
                r.orders
            );
            return Ok(false);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let elapsed = started.elapsed();
    let m = running.metrics();
    running
        .shutdown()
        .await
        .map_err(|e| purekafka::Error::config("streams", e.to_string()))?;
    let d = done.lock().unwrap();
    let seen = d.0.len() as u64;
    let pct = |p: f64| d.1.quantile_us(p) / 1000;
    println!(
        "{:<34} {:>7} {:>10.0} {:>8} {:>8} {:>6} {:>5}",
        r.name,
        r.orders,
        r.orders as f64 / elapsed.as_secs_f64(),
        pct(0.5),
        pct(0.99),
        m.dead_lettered,
        if seen == r.orders { "yes" } else { "NO" },
    );
    let _ = lane;
    Ok(true)
}

/// Whether `--metrics-addr` serves the runs' metrics.
#[cfg(feature = "metrics")]
static METRICS: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

#[tokio::main]
async fn main() -> purekafka::Result<()> {
    let mut args = std::env::args().skip(1);
    let mut bootstrap = "127.0.0.1:19092".to_owned();
    while let Some(arg) = args.next() {
        if arg != "--metrics-addr" {
            bootstrap = arg;
            continue;
        }
        let addr = args.next().unwrap_or_default();
        #[cfg(feature = "metrics")]
        {
            let addr = addr
                .parse()
                .map_err(|e| purekafka::Error::config("--metrics-addr", format!("{addr}: {e}")))?;
            purekafka::telemetry::serve_prometheus(addr)?;
            METRICS.store(true, std::sync::atomic::Ordering::Relaxed);
        }
        #[cfg(not(feature = "metrics"))]
        return Err(purekafka::Error::config(
            "--metrics-addr",
            format!("{addr}: build with --features metrics"),
        ));
    }
    let cluster = Cluster::connect(
        ClientConfig::builder()
            .bootstrap_servers(&bootstrap)
            .build()?,
    )
    .await?;
    let retry = Backoff::fixed(Duration::from_millis(500), 3);
    println!(
        "orders enriched by a 10 ms async lookup; 1% fail twice (500 ms backoff); 1 partition\n"
    );
    println!(
        "{:<34} {:>7} {:>10} {:>8} {:>8} {:>6} {:>5}",
        "mode", "orders", "orders/s", "p50 ms", "p99 ms", "DLQ", "all?"
    );
    let runs = [
        Run {
            name: "sequential (Partition, 1 in flight)",
            orders: 300,
            ordering: OrderingMode::Partition,
            in_flight: 1,
            policy: FailurePolicy::Retry(retry),
        },
        Run {
            name: "key-ordered async, 512, retry in place",
            orders: 20_000,
            ordering: OrderingMode::Key,
            in_flight: 512,
            policy: FailurePolicy::Retry(retry),
        },
        Run {
            name: "key-ordered async, 512, retry lane",
            orders: 20_000,
            ordering: OrderingMode::Key,
            in_flight: 512,
            policy: FailurePolicy::RetryLane(RetryLane::new("", "", retry)),
        },
    ];
    let (stop, stopped) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        stop_signal().await;
        let _ = stop.send(true);
    });
    for r in runs {
        if !run(&bootstrap, &cluster, r, &stopped).await? {
            return Ok(());
        }
    }
    println!(
        "\nlatency is create time to done for orders that never fail, input produced in one burst."
    );
    Ok(())
}
