//! Soak run (issue #9): a producer, a group consumer and a streams app run
//! together for a long time against one broker; every interval the process
//! prints its resident memory and open file descriptors (from `/proc/self`,
//! Linux only), and at the end compares the first and last quarter of the
//! samples. Both should stay flat. Run through `scripts/soak`.
//!
//! ```sh
//! cargo run --release --example soak -- --bootstrap 127.0.0.1:19092 \
//!     [--minutes 30] [--rate 2000] [--interval-secs 30]
//! ```

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering as AtomicOrdering};
use std::sync::Arc;
use std::time::Duration;

use purekafka::admin::NewTopic;
use purekafka::consumer::{AutoOffsetReset, Consumer, ConsumerConfig};
use purekafka::producer::{Producer, ProducerConfig, ProducerRecord};
use purekafka::streams::{Streams, StreamsConfig, StringDeserializer};
use purekafka::{Admin, ClientConfig, Cluster};
use tokio::time::Instant;

/// Resident set size in KiB (`VmRSS` of /proc/self/status).
fn rss_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

/// Open file descriptors (entries of /proc/self/fd).
fn open_fds() -> Option<u64> {
    Some(std::fs::read_dir("/proc/self/fd").ok()?.count() as u64)
}

fn arg(args: &HashMap<String, String>, k: &str, d: u64) -> Result<u64, String> {
    args.get(k)
        .map(|v| v.parse().map_err(|e| format!("--{k}: {e}")))
        .unwrap_or(Ok(d))
}

#[tokio::main]
async fn main() {
    if let Err(e) = run().await {
        eprintln!("soak: {e}");
        std::process::exit(1);
    }
}

async fn run() -> Result<(), String> {
    let mut args = HashMap::new();
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let k = flag
            .strip_prefix("--")
            .ok_or_else(|| format!("unexpected argument {flag:?}"))?;
        let v = it.next().ok_or_else(|| format!("{flag} needs a value"))?;
        args.insert(k.to_owned(), v);
    }
    let bootstrap = args
        .get("bootstrap")
        .cloned()
        .unwrap_or_else(|| "127.0.0.1:19092".into());
    let minutes = arg(&args, "minutes", 30)?;
    let rate = arg(&args, "rate", 2000)?.max(1);
    let interval = Duration::from_secs(arg(&args, "interval-secs", 30)?.max(1));

    let cluster = Cluster::connect(
        ClientConfig::builder()
            .bootstrap_servers(&bootstrap)
            .build()
            .map_err(|e| e.to_string())?,
    )
    .await
    .map_err(|e| format!("connect: {e}"))?;
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or(0);
    let topic = format!("soak-{stamp}");
    Admin::new(cluster)
        .create_topics(&[NewTopic::new(&topic, 3)], false)
        .await
        .map_err(|e| format!("create {topic}: {e}"))?;
    tokio::time::sleep(Duration::from_secs(2)).await;

    let stop = Arc::new(AtomicBool::new(false));
    let produced = Arc::new(AtomicU64::new(0));
    let consumed = Arc::new(AtomicU64::new(0));
    let streamed = Arc::new(AtomicU64::new(0));

    let producer = Producer::new(
        ProducerConfig::builder()
            .bootstrap_servers(&bootstrap)
            .build()
            .map_err(|e| e.to_string())?,
    )
    .await
    .map_err(|e| format!("producer: {e}"))?;
    let send = {
        let (producer, topic, stop, produced) = (
            producer.clone(),
            topic.clone(),
            stop.clone(),
            produced.clone(),
        );
        tokio::spawn(async move {
            // Batches of rate/10 every 100 ms.
            let mut tick = tokio::time::interval(Duration::from_millis(100));
            let mut i = 0u64;
            while !stop.load(AtomicOrdering::Relaxed) {
                tick.tick().await;
                for _ in 0..(rate / 10).max(1) {
                    let p = produced.clone();
                    let r = ProducerRecord::new(&topic)
                        .key(format!("k{}", i % 64))
                        .value(i.to_string());
                    let sent = producer
                        .send_with_callback(r, move |res| {
                            if res.is_ok() {
                                p.fetch_add(1, AtomicOrdering::Relaxed);
                            }
                        })
                        .await;
                    if let Err(e) = sent {
                        eprintln!("soak: send: {e}");
                    }
                    i += 1;
                }
            }
        })
    };

    let consumer = Consumer::connect(
        ConsumerConfig::builder()
            .bootstrap_servers(&bootstrap)
            .group_id(format!("{topic}-consumer"))
            .auto_offset_reset(AutoOffsetReset::Earliest)
            .build()
            .map_err(|e| e.to_string())?,
    )
    .await
    .map_err(|e| format!("consumer: {e}"))?;
    consumer
        .subscribe([topic.as_str()])
        .map_err(|e| e.to_string())?;
    let poll = {
        let (stop, consumed) = (stop.clone(), consumed.clone());
        tokio::spawn(async move {
            while !stop.load(AtomicOrdering::Relaxed) {
                match consumer.poll(Duration::from_millis(500)).await {
                    Ok(records) => {
                        consumed.fetch_add(records.len() as u64, AtomicOrdering::Relaxed);
                    }
                    Err(e) => eprintln!("soak: poll: {e}"),
                }
            }
            let _ = consumer.close().await;
        })
    };

    let s = streamed.clone();
    let running = Streams::builder(
        StreamsConfig::builder(format!("{topic}-streams"), &bootstrap)
            .build()
            .map_err(|e| e.to_string())?,
    )
    .source(topic.as_str(), StringDeserializer, StringDeserializer)
    .for_each_async(move |_rec| {
        let s = s.clone();
        async move {
            s.fetch_add(1, AtomicOrdering::Relaxed);
            Ok(())
        }
    })
    .build()
    .start()
    .await
    .map_err(|e| format!("streams: {e}"))?;

    println!("soak: topic {topic}, {minutes} min, {rate} records/s, sample every {interval:?}");
    println!("elapsed_s,produced,consumed,streamed,rss_kib,fds");
    let start = Instant::now();
    let end = start + Duration::from_secs(minutes * 60);
    let mut samples: Vec<(u64, u64)> = Vec::new();
    loop {
        let (rss, fds) = (rss_kib().unwrap_or(0), open_fds().unwrap_or(0));
        samples.push((rss, fds));
        println!(
            "{},{},{},{},{rss},{fds}",
            start.elapsed().as_secs(),
            produced.load(AtomicOrdering::Relaxed),
            consumed.load(AtomicOrdering::Relaxed),
            streamed.load(AtomicOrdering::Relaxed),
        );
        if Instant::now() >= end || running.is_finished() {
            break;
        }
        tokio::time::sleep(interval.min(end - Instant::now())).await;
    }
    stop.store(true, AtomicOrdering::Relaxed);
    let _ = send.await;
    let _ = poll.await;
    producer.flush().await;
    let _ = producer.close(Duration::from_secs(30)).await;
    running
        .shutdown()
        .await
        .map_err(|e| format!("streams shutdown: {e}"))?;

    // Flat: the last quarter's mean within 20% (RSS) / 5 fds of the first
    // quarter's after the warm-up sample.
    let q = (samples.len() / 4).max(1);
    let mean = |xs: &[(u64, u64)], f: fn(&(u64, u64)) -> u64| {
        xs.iter().map(f).sum::<u64>() as f64 / xs.len().max(1) as f64
    };
    let body = &samples[1.min(samples.len() - 1)..];
    let (first, last) = (
        &body[..q.min(body.len())],
        &body[body.len().saturating_sub(q)..],
    );
    let (r0, r1) = (mean(first, |s| s.0), mean(last, |s| s.0));
    let (f0, f1) = (mean(first, |s| s.1), mean(last, |s| s.1));
    let flat = r1 <= r0 * 1.2 && f1 <= f0 + 5.0;
    println!(
        "soak: {} s, produced {}, consumed {}, streamed {}; rss first-quarter {:.0} KiB -> last-quarter {:.0} KiB, fds {:.1} -> {:.1}: {}",
        start.elapsed().as_secs(),
        produced.load(AtomicOrdering::Relaxed),
        consumed.load(AtomicOrdering::Relaxed),
        streamed.load(AtomicOrdering::Relaxed),
        r0,
        r1,
        f0,
        f1,
        if flat { "flat" } else { "GROWING" }
    );
    if !flat {
        std::process::exit(3);
    }
    Ok(())
}
