//! The soak run (issue 9, part 5; not part of CI): a producer, a streams
//! application and a group consumer run together in one process against a
//! real broker for a fixed time, and the process samples its own resident
//! memory and open file descriptors. Both must stay flat once warmed up.
//!
//! ```sh
//! scripts/soak                       # 30 minutes on the local broker
//! cargo run --release --example soak -- --minutes 2 --bootstrap 127.0.0.1:19092
//! ```
//!
//! Pipeline: the producer writes keyed records at `--rate` records/s to a
//! 3-partition input topic; the streams app (Key ordering, 256 in flight, a
//! 1 ms async call per record) copies them to an output topic; a group
//! consumer reads the output and commits every second. Each sample prints
//! records produced, streamed and consumed, RSS, live heap bytes (counted
//! by a wrapper around the system allocator) and fds. At the end the
//! producer stops, the pipeline drains, and the run fails (exit 1) when a
//! record is missing or RSS or fds grew past the tolerance.

#[path = "common/topics.rs"]
mod topics;

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering as AtomicOrdering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use purekafka::consumer::{AutoOffsetReset, Consumer, ConsumerConfig};
use purekafka::producer::serializer::StringSerializer;
use purekafka::producer::{Producer, ProducerConfig, ProducerRecord};
use purekafka::streams::{OrderingMode, Streams, StreamsConfig, StringDeserializer};
use purekafka::Cluster;

/// The last third's RSS peak may exceed the middle third's by this share,
/// plus `RSS_SLACK_KIB` (the checker's own bitmap grows by up to 0.4 MiB per
/// 10 minutes at 5,000 records/s).
const RSS_TOLERANCE: f64 = 0.10;
const RSS_SLACK_KIB: u64 = 2 << 10;
/// Open fds may differ by this many between samples (reconnects).
const FD_SLACK: usize = 4;

struct Options {
    bootstrap: String,
    minutes: f64,
    sample: Duration,
    rate: u64,
}

fn options() -> Options {
    let mut o = Options {
        bootstrap: "127.0.0.1:19092".into(),
        minutes: 30.0,
        sample: Duration::from_secs(30),
        rate: 5_000,
    };
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut i = 0;
    while i + 1 < args.len() {
        let v = &args[i + 1];
        let bad = |what: &str| -> ! {
            eprintln!("soak: {what} wants a number, got {v:?}");
            std::process::exit(2)
        };
        match args[i].as_str() {
            "--bootstrap" => o.bootstrap = v.clone(),
            "--minutes" => o.minutes = v.parse().unwrap_or_else(|_| bad("--minutes")),
            "--sample-secs" => {
                o.sample = Duration::from_secs(v.parse().unwrap_or_else(|_| bad("--sample-secs")))
            }
            "--rate" => o.rate = v.parse().unwrap_or_else(|_| bad("--rate")),
            other => {
                eprintln!("soak: unknown option {other}");
                std::process::exit(2)
            }
        }
        i += 2;
    }
    o
}

/// The ids the consumer saw: one bit each (9 M ids, 30 min at 5,000/s, take
/// 1.1 MiB), so the checker itself barely moves the RSS it judges.
#[derive(Default)]
struct Seen {
    bits: Vec<u64>,
    count: usize,
}

impl Seen {
    fn insert(&mut self, id: u64) {
        let (word, bit) = ((id / 64) as usize, id % 64);
        if word >= self.bits.len() {
            self.bits.resize(word + 1 + (word >> 3), 0);
        }
        if self.bits[word] & (1 << bit) == 0 {
            self.bits[word] |= 1 << bit;
            self.count += 1;
        }
    }

    fn contains(&self, id: u64) -> bool {
        self.bits
            .get((id / 64) as usize)
            .is_some_and(|w| w & (1 << (id % 64)) != 0)
    }
}

/// The system allocator, counting live heap bytes, so a sample tells a leak
/// (live bytes climb) from memory the allocator keeps after it was freed
/// (RSS climbs, live bytes do not).
struct Counting;

static LIVE_HEAP: AtomicU64 = AtomicU64::new(0);

// SAFETY: every call goes to `System` unchanged; only a counter is added.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            LIVE_HEAP.fetch_add(layout.size() as u64, AtomicOrdering::Relaxed);
        }
        p
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) };
        LIVE_HEAP.fetch_sub(layout.size() as u64, AtomicOrdering::Relaxed);
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            LIVE_HEAP.fetch_add(new_size as u64, AtomicOrdering::Relaxed);
            LIVE_HEAP.fetch_sub(layout.size() as u64, AtomicOrdering::Relaxed);
        }
        p
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Resident set size in KiB and open file descriptors of this process.
fn footprint() -> (u64, usize) {
    let rss = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|n| n.parse().ok())
        })
        .unwrap_or(0);
    let fds = std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count());
    (rss, fds)
}

#[tokio::main]
async fn main() -> purekafka::Result<()> {
    let o = options();
    let tag = format!("soak-{}", std::process::id());
    let (input, output) = (format!("{tag}-in"), format!("{tag}-out"));
    let client = purekafka::ClientConfig::builder()
        .bootstrap_servers(&o.bootstrap)
        .client_id(&tag);
    let cluster = Cluster::connect(client.clone().build()?).await?;
    topics::create_topics(&cluster, &[&input, &output], 3).await?;

    let produced = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let producer =
        Producer::connect(ProducerConfig::builder().client(client.clone()).build()?).await?;
    let producing = {
        let (producer, produced, stop, topic, rate) = (
            producer.clone(),
            produced.clone(),
            stop.clone(),
            input.clone(),
            o.rate,
        );
        tokio::spawn(async move {
            let start = tokio::time::Instant::now();
            let mut id = 0u64;
            while !stop.load(AtomicOrdering::Relaxed) {
                let due = start + Duration::from_secs_f64(id as f64 / rate as f64);
                tokio::time::sleep_until(due).await;
                let record = ProducerRecord::new(&topic)
                    .key(format!("key-{}", id % 1_000))
                    .value(id.to_string());
                let produced = produced.clone();
                producer
                    .send_with_callback(record, move |r| {
                        if r.is_ok() {
                            produced.fetch_add(1, AtomicOrdering::Relaxed);
                        }
                    })
                    .await?;
                id += 1;
            }
            producer.flush().await;
            Ok::<u64, purekafka::Error>(id)
        })
    };

    let config = StreamsConfig::builder(format!("{tag}-app"), &o.bootstrap)
        .ordering(OrderingMode::Key)
        .max_in_flight(256, 256)
        .build()?;
    let streams = Streams::topology(config)
        .source(input.as_str(), StringDeserializer, StringDeserializer)
        .map_async(|rec| async move {
            tokio::time::sleep(Duration::from_millis(1)).await;
            Ok(rec)
        })
        .to(output.as_str(), StringSerializer, StringSerializer)
        .build()
        .start()
        .await
        .map_err(|e| purekafka::Error::config("soak streams", e.to_string()))?;

    let consumer = Consumer::connect(
        ConsumerConfig::builder()
            .client(|_| client.clone())
            .group_id(format!("{tag}-reader"))
            .auto_offset_reset(AutoOffsetReset::Earliest)
            .enable_auto_commit(false)
            .build()?,
    )
    .await?;
    consumer.subscribe([output.as_str()])?;

    println!(
        "soak: {} min at {} rec/s on {}, sampling every {} s",
        o.minutes,
        o.rate,
        o.bootstrap,
        o.sample.as_secs()
    );
    println!("  elapsed  produced  streamed  consumed   rss_mib  heap_mib  fds");
    let started = Instant::now();
    let run_for = Duration::from_secs_f64(o.minutes * 60.0);
    // Sized for the whole run up front: a bitmap that doubles as it fills
    // shows up as steps in the heap column (1 MiB at 7.5 M ids).
    let mut seen = Seen::default();
    let expected_ids = (o.minutes * 60.0 * o.rate as f64 * 1.2) as usize;
    seen.bits.reserve_exact(expected_ids / 64 + 1);
    let mut samples: Vec<(u64, usize)> = Vec::new();
    let mut next_sample = started + o.sample;
    let mut last_commit = Instant::now();
    let mut drain_deadline: Option<Instant> = None;
    loop {
        for r in consumer.poll(Duration::from_millis(200)).await? {
            if let Some(id) = r.value.as_deref().and_then(|v| std::str::from_utf8(v).ok()) {
                if let Ok(id) = id.parse() {
                    seen.insert(id);
                }
            }
        }
        if last_commit.elapsed() >= Duration::from_secs(1) {
            consumer.commit_sync().await?;
            last_commit = Instant::now();
        }
        let now = Instant::now();
        if now >= next_sample {
            let (rss, fds) = footprint();
            samples.push((rss, fds));
            println!(
                "  {:>6.0}s  {:>8}  {:>8}  {:>8}  {:>8.1}  {:>8.1}  {:>3}",
                started.elapsed().as_secs_f64(),
                produced.load(AtomicOrdering::Relaxed),
                streams.metrics().processed,
                seen.count,
                rss as f64 / 1024.0,
                LIVE_HEAP.load(AtomicOrdering::Relaxed) as f64 / (1 << 20) as f64,
                fds
            );
            next_sample += o.sample;
        }
        if streams.is_finished() {
            eprintln!("soak: the streams app stopped early");
            break;
        }
        if drain_deadline.is_none() && started.elapsed() >= run_for {
            stop.store(true, AtomicOrdering::Relaxed);
            drain_deadline = Some(now + Duration::from_secs(120));
        }
        if let Some(deadline) = drain_deadline {
            if producing.is_finished()
                && seen.count as u64 >= produced.load(AtomicOrdering::Relaxed)
                || now >= deadline
            {
                break;
            }
        }
    }
    let sent = match producing.await {
        Ok(Ok(n)) => n,
        Ok(Err(e)) => return Err(e),
        Err(e) => return Err(purekafka::Error::config("soak producer", e.to_string())),
    };
    let acked = produced.load(AtomicOrdering::Relaxed);
    let missing = (0..sent).filter(|id| !seen.contains(*id)).count();
    consumer.close().await?;
    streams
        .shutdown()
        .await
        .map_err(|e| purekafka::Error::config("soak streams", e.to_string()))?;
    producer.close(Duration::from_secs(10)).await?;

    // Flat means no trend: the peak of the last third of the samples is
    // within the tolerance of the middle third's peak. Comparing with the
    // first samples would count a one-time high-water mark (a backlog once
    // buffered, then drained) as growth; a leak keeps climbing instead.
    let third = samples.len() / 3;
    let peak = |s: &[(u64, usize)]| s.iter().map(|s| s.0).max().unwrap_or(0);
    let (middle, last_third) = (
        peak(samples.get(third..2 * third).unwrap_or(&[])),
        peak(samples.get(2 * third..).unwrap_or(&[])),
    );
    let rss_limit = (middle as f64 * (1.0 + RSS_TOLERANCE)) as u64 + RSS_SLACK_KIB;
    let rss_flat = third > 0 && last_third <= rss_limit;
    let steady = samples.get(third..).unwrap_or(&[]);
    let fd_min = steady.iter().map(|s| s.1).min().unwrap_or(0);
    let fd_max = steady.iter().map(|s| s.1).max().unwrap_or(0);
    let fds_flat = fd_max - fd_min <= FD_SLACK;
    let first = samples.first().map_or(0, |s| s.0);
    println!(
        "soak: {sent} sent, {acked} acked, {} consumed, {missing} missing; rss first {:.1} MiB, \
         middle-third peak {:.1}, last-third peak {:.1} (limit {:.1}); fds {fd_min}..{fd_max}; {}",
        seen.count,
        first as f64 / 1024.0,
        middle as f64 / 1024.0,
        last_third as f64 / 1024.0,
        rss_limit as f64 / 1024.0,
        if missing == 0 && rss_flat && fds_flat && sent == acked {
            "flat, nothing lost"
        } else {
            "FAILED"
        }
    );
    if missing > 0 || !rss_flat || !fds_flat || sent != acked {
        std::process::exit(1);
    }
    Ok(())
}
