//! The streams demo: orders enriched by a slow async lookup (10 ms), 1% of
//! which fail twice. Shows side by side sequential processing (Partition
//! order, 1 in flight: Kafka Streams' model, KIP-311 / KAFKA-6989) vs
//! key-ordered async processing (512 in flight), and blocking in-place
//! retry vs the parallel retry lane, with throughput, p50/p99 end-to-end
//! latency (record create time to done), dead letters, and a final check
//! that every order was processed. Then a stateful step: orders per
//! customer per minute (a tumbling one-minute window count over the
//! orders' event times, in a persistent store with its changelog), printed
//! next to a reference computed from the input, with whether they match.
//!
//! ```sh
//! cargo run --release --example streams_demo -- [bootstrap, default 127.0.0.1:19092]
//! # with each run's metrics for Prometheus on :9464 while it runs:
//! cargo run --release --features metrics --example streams_demo -- --metrics-addr 127.0.0.1:9464
//! ```

#[path = "common/topics.rs"]
mod topics;

use std::collections::{BTreeMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use purekafka::producer::serializer::StringSerializer;
use purekafka::producer::{Producer, ProducerConfig, ProducerRecord};
use purekafka::streams::state::StoreSpec;
use purekafka::streams::{
    Backoff, FailurePolicy, LatencyHistogram, OrderingMode, ProcessingError, RetryLane, Streams,
    StreamsConfig, StringDeserializer, TimeWindows,
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

/// Customers, minutes of event time and orders of the stateful step.
const CUSTOMERS: u64 = 8;
const MINUTES: i64 = 5;
const WINDOW_ORDERS: u64 = 2_000;

/// Counts per (customer, window start in ms).
type PerMinute = BTreeMap<(String, i64), i64>;

/// `HH:MM` (UTC) of `ms` since the epoch.
fn hh_mm(ms: i64) -> String {
    let minute = ms.div_euclid(60_000).rem_euclid(24 * 60);
    format!("{:02}:{:02}", minute / 60, minute % 60)
}

/// The stateful step: orders per customer per minute. The orders carry
/// event times spread over the last few whole minutes; a tumbling
/// one-minute window count (persistent store, changelog) computes the
/// counts, which are printed next to the counts computed here from the
/// input. False when a signal interrupted it.
async fn per_minute(
    bootstrap: &str,
    cluster: &Cluster,
    stop: &tokio::sync::watch::Receiver<bool>,
) -> purekafka::Result<bool> {
    let tag = format!("demo-{}", fastrand::u32(..));
    let input = format!("orders-{tag}");
    topics::create_topics(cluster, &[&input], 3).await?;
    let state_dir = std::env::temp_dir().join(format!("purekafka-{tag}"));
    // Partition ordering: a window's stream time advances in offset order,
    // and the orders are written in event-time order, so none is late.
    let config = StreamsConfig::builder(format!("demo-{tag}"), bootstrap)
        .ordering(OrderingMode::Partition)
        .state_dir(&state_dir)
        .build()?;
    let computed: Arc<Mutex<PerMinute>> = Arc::default();
    let c = computed.clone();
    let running = Streams::topology(config)
        .source(input.as_str(), StringDeserializer, StringDeserializer)
        .group_by_key()
        .windowed_by(TimeWindows::of_size_and_grace(
            Duration::from_secs(60),
            Duration::from_secs(10),
        ))
        .count(StoreSpec::persistent("orders-per-minute"), StringSerializer)
        .to_stream()
        .for_each(move |r| {
            let w = r
                .key
                .ok_or_else(|| ProcessingError::new("a windowed count without a key"))?;
            let mut c = c.lock().unwrap();
            let n = c.entry((w.key, w.start)).or_insert(0);
            *n = (*n).max(r.value);
            Ok(())
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
    // Event times: the last MINUTES whole minutes, in order; customers at
    // random. The reference counts them per customer and minute.
    let first = (now_ms() / 60_000 - MINUTES) * 60_000;
    let step = MINUTES * 60_000 / WINDOW_ORDERS as i64;
    let mut reference = PerMinute::new();
    for id in 0..WINDOW_ORDERS {
        let customer = format!("customer-{}", fastrand::u64(..CUSTOMERS));
        let ts = first + id as i64 * step;
        *reference
            .entry((customer.clone(), ts - ts.rem_euclid(60_000)))
            .or_insert(0) += 1;
        let rec = ProducerRecord::new(&input)
            .key(customer)
            .value(id.to_string())
            .timestamp(ts);
        drop(producer.send(rec).await?);
    }
    producer.flush().await;
    let deadline = Instant::now() + Duration::from_secs(60);
    let total = |m: &PerMinute| m.values().sum::<i64>();
    while total(&computed.lock().unwrap()) < WINDOW_ORDERS as i64 && Instant::now() < deadline {
        if *stop.borrow() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let late = running.dropped_late_records();
    running
        .shutdown()
        .await
        .map_err(|e| purekafka::Error::config("streams", e.to_string()))?;
    let _ = std::fs::remove_dir_all(&state_dir);
    if *stop.borrow() {
        println!("orders per minute: interrupted; shut down cleanly");
        return Ok(false);
    }
    let computed = computed.lock().unwrap();
    println!(
        "\norders per customer per minute: {WINDOW_ORDERS} orders over {MINUTES} minutes of event time,"
    );
    println!("tumbling 1-minute windows (10 s grace), persistent store; computed / reference (from the input)\n");
    let starts: Vec<i64> = (0..MINUTES).map(|m| first + m * 60_000).collect();
    print!("{:<12}", "customer");
    for s in &starts {
        print!(" {:>9}", hh_mm(*s));
    }
    println!();
    for c in 0..CUSTOMERS {
        let customer = format!("customer-{c}");
        print!("{customer:<12}");
        for s in &starts {
            let key = (customer.clone(), *s);
            let cell = |m: &PerMinute| m.get(&key).copied().unwrap_or(0);
            print!(
                " {:>9}",
                format!("{}/{}", cell(&computed), cell(&reference))
            );
        }
        println!();
    }
    let differ = reference
        .keys()
        .chain(computed.keys())
        .filter(|k| computed.get(*k) != reference.get(*k))
        .collect::<std::collections::BTreeSet<_>>()
        .len();
    if differ == 0 {
        println!(
            "match: all {} customer-minute counts equal the reference ({late} late records)",
            reference.len()
        );
    } else {
        println!(
            "MISMATCH: {differ} customer-minute counts differ from the reference's {} ({late} late records)",
            reference.len()
        );
    }
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
    per_minute(&bootstrap, &cluster, &stopped).await?;
    Ok(())
}
