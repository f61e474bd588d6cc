//! purekafka's side of the count-by-key benchmark (issue #16 item 6; run
//! by `benches/streams-stateful/run`, which runs Kafka Streams' side,
//! `StatefulCount.java count`, against the same input):
//!
//! ```text
//! streams-stateful-bench produce BOOTSTRAP TOPIC RECORDS KEYS
//! streams-stateful-bench count BOOTSTRAP INPUT OUTPUT RECORDS [persistent|memory] [CACHE_BYTES]
//! streams-stateful-bench changelog BOOTSTRAP CHANGELOG INPUT ENTRIES PARTITIONS
//! streams-stateful-bench restore BOOTSTRAP APP INPUT ENTRIES
//! streams-stateful-bench io BOOTSTRAP INPUT OUTPUT RECORDS IN_FLIGHT LOOKUP_MS [tokio|precise]
//! ```
//!
//! `changelog` writes ENTRIES records with distinct keys `key-i` and 8-byte
//! count values to the changelog topic CHANGELOG, and one record to each
//! of the PARTITIONS partitions of INPUT. `restore` then runs the count of
//! application APP (whose store `counts` has that changelog) from a fresh
//! state dir, so the whole changelog is restored (here, on each task's
//! first record), and prints one RESULT line: the time from `start()` to
//! ENTRIES records restored (`restored_records()`), the time from the
//! first task's store restored to then (`restored_records()` grows by a
//! whole partition when its restore ends, so this is not the restore's
//! own span, as Kafka Streams' figure is), and the process CPU over the
//! first span.
//!
//! `io` is the I/O-bound stateful pipeline: a LOOKUP_MS async lookup
//! (`map_async` with a timer) then `group_by_key().count()` (persistent
//! store, the default record cache), Key ordering, at most IN_FLIGHT
//! records in flight per task and per instance, until RECORDS records are
//! processed. Its RESULT line has the throughput and its share of the
//! bound IN_FLIGHT / LOOKUP_MS (`of_bound`). The lookup waits on tokio's
//! timer (`tokio`, the default: a millisecond wheel, about 1 ms late on
//! average) or on a timer thread (`precise`: it ends within the OS timer's
//! slack, as a network call ends when its response arrives; the same
//! timer as `examples/streams_bench.rs`, see its module docs).
//!
//! `produce` writes RECORDS records with keys `key-(i % KEYS)` and 100-byte
//! values. `count` runs `group_by_key().count()` into a persistent (redb)
//! store (or, with `memory`, an in-memory one: the store's share of the
//! cost) with its changelog, the updates to OUTPUT (`String`/`Long`), Key
//! ordering, the record cache at CACHE_BYTES (`statestore.cache.max.bytes`;
//! default the runtime's 10 MiB, `0` off) and otherwise the runtime's
//! defaults, at-least-once with a
//! 100 ms commit interval (as the Java side), a fresh application id, until
//! RECORDS records are processed, then shuts down cleanly. It prints one
//! RESULT line in the Java side's format: throughput from the first record
//! processed to the last, the process CPU over that span and over its
//! whole life. With `PK_COUNT_ALLOCS=1` in the environment it also counts
//! the heap allocations over that span (`allocs_per_record`); leave it
//! unset for timed runs.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

use purekafka::producer::serializer::StringSerializer;
use purekafka::producer::{Producer, ProducerConfig, ProducerRecord};
use purekafka::streams::state::StoreSpec;
use purekafka::streams::{LongSerde, OrderingMode, Streams, StreamsConfig, StringDeserializer};

#[path = "../../../examples/common/precise_sleep.rs"]
mod precise_sleep;

/// Counts allocations while `COUNTING` is on (`PK_COUNT_ALLOCS=1`, over
/// the measured span only).
struct CountingAlloc;

static COUNTING: AtomicBool = AtomicBool::new(false);
static ALLOCS: AtomicU64 = AtomicU64::new(0);
static ALLOC_BYTES: AtomicU64 = AtomicU64::new(0);

fn count_alloc(size: usize) {
    if COUNTING.load(Relaxed) {
        ALLOCS.fetch_add(1, Relaxed);
        ALLOC_BYTES.fetch_add(size as u64, Relaxed);
    }
}

// SAFETY: every call is forwarded unchanged to the system allocator.
unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count_alloc(layout.size());
        System.alloc(layout)
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        count_alloc(layout.size());
        System.alloc_zeroed(layout)
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count_alloc(new_size);
        System.realloc(ptr, layout, new_size)
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        System.dealloc(ptr, layout)
    }
}

#[global_allocator]
static GLOBAL: CountingAlloc = CountingAlloc;

/// User + system CPU seconds of this process so far (/proc/self/stat).
fn cpu_s() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let after = stat.rsplit_once(')').map_or("", |(_, a)| a);
    let f: Vec<u64> = after
        .split_whitespace()
        .map(|x| x.parse().unwrap_or(0))
        .collect();
    (f.get(11).copied().unwrap_or(0) + f.get(12).copied().unwrap_or(0)) as f64 / 100.0
}

fn usage() -> ! {
    eprintln!("usage: streams-stateful-bench produce BOOTSTRAP TOPIC RECORDS KEYS");
    eprintln!(
        "       streams-stateful-bench count BOOTSTRAP INPUT OUTPUT RECORDS [persistent|memory] [CACHE_BYTES]"
    );
    eprintln!(
        "       streams-stateful-bench changelog BOOTSTRAP CHANGELOG INPUT ENTRIES PARTITIONS"
    );
    eprintln!("       streams-stateful-bench restore BOOTSTRAP APP INPUT ENTRIES");
    eprintln!(
        "       streams-stateful-bench io BOOTSTRAP INPUT OUTPUT RECORDS IN_FLIGHT LOOKUP_MS [tokio|precise]"
    );
    std::process::exit(2)
}

fn number(s: Option<&String>) -> u64 {
    s.and_then(|s| s.parse().ok()).unwrap_or_else(|| usage())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let arg = |i: usize| args.get(i).cloned().unwrap_or_else(|| usage());
    match args.get(1).map(String::as_str) {
        Some("produce") if args.len() == 6 => {
            produce(&arg(2), &arg(3), number(args.get(4)), number(args.get(5))).await
        }
        Some("changelog") if args.len() == 7 => {
            changelog(
                &arg(2),
                &arg(3),
                &arg(4),
                number(args.get(5)),
                number(args.get(6)) as i32,
            )
            .await
        }
        Some("restore") if args.len() == 6 => {
            restore(&arg(2), &arg(3), &arg(4), number(args.get(5))).await
        }
        Some("io") if (8..=9).contains(&args.len()) => {
            let precise = match args.get(8).map(String::as_str) {
                None | Some("tokio") => false,
                Some("precise") => true,
                Some(other) => {
                    eprintln!("unknown timer {other}: tokio or precise");
                    std::process::exit(2);
                }
            };
            io(
                &arg(2),
                &arg(3),
                &arg(4),
                number(args.get(5)),
                number(args.get(6)) as usize,
                number(args.get(7)),
                precise,
            )
            .await
        }
        Some("count") if (6..=8).contains(&args.len()) => {
            let store = match args.get(6).map(String::as_str) {
                None | Some("persistent") => StoreSpec::persistent("counts"),
                Some("memory") => StoreSpec::in_memory("counts"),
                Some(_) => usage(),
            };
            let cache = args.get(7).map(|_| number(args.get(7)) as usize);
            count(&arg(2), &arg(3), &arg(4), number(args.get(5)), store, cache).await
        }
        _ => usage(),
    }
}

async fn produce(
    bootstrap: &str,
    topic: &str,
    records: u64,
    keys: u64,
) -> Result<(), Box<dyn std::error::Error>> {
    let producer = Producer::connect(
        ProducerConfig::builder()
            .bootstrap_servers(bootstrap)
            .build()?,
    )
    .await?;
    let value = vec![b'v'; 100];
    let mut acks = Vec::with_capacity(10_000);
    for i in 0..records {
        let r = ProducerRecord::new(topic)
            .key(format!("key-{}", i % keys))
            .value(value.clone());
        acks.push(producer.send(r).await?);
        if acks.len() == 10_000 {
            for a in acks.drain(..) {
                a.await?;
            }
        }
    }
    for a in acks {
        a.await?;
    }
    producer.close(Duration::from_secs(30)).await?;
    Ok(())
}

async fn count(
    bootstrap: &str,
    input: &str,
    output: &str,
    records: u64,
    store: StoreSpec,
    cache: Option<usize>,
) -> Result<(), Box<dyn std::error::Error>> {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_nanos();
    let app = format!("pk-count-{nanos:x}");
    let dir = std::env::temp_dir().join(&app);
    let mut config = StreamsConfig::builder(app.as_str(), bootstrap)
        .ordering(OrderingMode::Key)
        .commit_interval(Duration::from_millis(100))
        .state_dir(&dir);
    if let Some(bytes) = cache {
        config = config.cache_max_bytes(bytes);
    }
    let config = config.build()?;
    let running = Streams::topology(config)
        .source(input, StringDeserializer, StringDeserializer)
        .group_by_key()
        .count(store, StringSerializer)
        .to_stream()
        .to(output, StringSerializer, LongSerde)
        .build()
        .start()
        .await?;
    let counting = std::env::var_os("PK_COUNT_ALLOCS").is_some_and(|v| v == "1");
    let deadline = Instant::now() + Duration::from_secs(600);
    let mut first = None;
    let last = loop {
        let processed = running.metrics().processed;
        if first.is_none() && processed > 0 {
            first = Some((Instant::now(), cpu_s()));
            COUNTING.store(counting, Relaxed);
        }
        if processed >= records {
            COUNTING.store(false, Relaxed);
            break (Instant::now(), cpu_s());
        }
        if running.is_finished() || Instant::now() > deadline {
            eprintln!("stopped at {processed} of {records} records");
            std::process::exit(1);
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    running.shutdown().await?;
    let _ = std::fs::remove_dir_all(&dir);
    let first = first.unwrap_or(last);
    let span = last.0.duration_since(first.0).as_secs_f64();
    let allocs = if counting {
        let per = |n: u64| n as f64 / records as f64;
        format!(
            " allocs_per_record={:.2} alloc_bytes_per_record={:.0}",
            per(ALLOCS.load(Relaxed)),
            per(ALLOC_BYTES.load(Relaxed))
        )
    } else {
        String::new()
    };
    println!(
        "RESULT peer=purekafka mode=count records={records} rec_s={:.0} span_s={span:.3} \
         cpu_span_s={:.3} cpu_total_s={:.3}{allocs}",
        (records - 1) as f64 / span,
        last.1 - first.1,
        cpu_s()
    );
    Ok(())
}

async fn changelog(
    bootstrap: &str,
    changelog: &str,
    input: &str,
    entries: u64,
    partitions: i32,
) -> Result<(), Box<dyn std::error::Error>> {
    let producer = Producer::connect(
        ProducerConfig::builder()
            .bootstrap_servers(bootstrap)
            .build()?,
    )
    .await?;
    let mut acks = Vec::with_capacity(10_000);
    for i in 0..entries {
        let r = ProducerRecord::new(changelog)
            .key(format!("key-{i}"))
            .value(((i % 1000) as i64 + 1).to_be_bytes().to_vec());
        acks.push(producer.send(r).await?);
        if acks.len() == 10_000 {
            for a in acks.drain(..) {
                a.await?;
            }
        }
    }
    for p in 0..partitions {
        let r = ProducerRecord::new(input)
            .partition(p)
            .key(format!("key-{p}"))
            .value("v");
        acks.push(producer.send(r).await?);
    }
    for a in acks {
        a.await?;
    }
    producer.close(Duration::from_secs(30)).await?;
    Ok(())
}

/// A fresh application id and state dir under `prefix`.
fn fresh(prefix: &str) -> Result<(String, std::path::PathBuf), Box<dyn std::error::Error>> {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_nanos();
    let app = format!("{prefix}-{nanos:x}");
    let dir = std::env::temp_dir().join(&app);
    Ok((app, dir))
}

async fn restore(
    bootstrap: &str,
    app: &str,
    input: &str,
    entries: u64,
) -> Result<(), Box<dyn std::error::Error>> {
    let (_, dir) = fresh(app)?;
    let config = StreamsConfig::builder(app, bootstrap)
        .ordering(OrderingMode::Key)
        .commit_interval(Duration::from_millis(100))
        .state_dir(&dir)
        .build()?;
    let start = (Instant::now(), cpu_s());
    let running = Streams::topology(config)
        .source(input, StringDeserializer, StringDeserializer)
        .group_by_key()
        .count(StoreSpec::persistent("counts"), StringSerializer)
        .to_stream()
        .for_each(|_| Ok(()))
        .build()
        .start()
        .await?;
    let deadline = Instant::now() + Duration::from_secs(600);
    let mut first = None;
    let done = loop {
        let restored = running.restored_records();
        if first.is_none() && restored > 0 {
            first = Some(Instant::now());
        }
        if restored >= entries {
            break (Instant::now(), cpu_s());
        }
        if running.is_finished() || Instant::now() > deadline {
            eprintln!("restored {restored} of {entries} records");
            std::process::exit(1);
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    running.shutdown().await?;
    let _ = std::fs::remove_dir_all(&dir);
    let first = first.unwrap_or(done.0);
    println!(
        "RESULT peer=purekafka mode=restore entries={entries} restored_s={:.3} \
         restore_span_s={:.3} cpu_s={:.3}",
        done.0.duration_since(start.0).as_secs_f64(),
        done.0.duration_since(first).as_secs_f64(),
        done.1 - start.1
    );
    Ok(())
}

async fn io(
    bootstrap: &str,
    input: &str,
    output: &str,
    records: u64,
    in_flight: usize,
    lookup_ms: u64,
    precise: bool,
) -> Result<(), Box<dyn std::error::Error>> {
    let (app, dir) = fresh("pk-io")?;
    // Diagnosis knobs (unset for the issue's figures): the commit
    // interval, the in-memory store, and a sample of the records in
    // flight every 10 ms on stderr.
    let commit_ms: u64 = std::env::var("PK_IO_COMMIT_MS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100);
    let memory = std::env::var("PK_IO_STORE").is_ok_and(|s| s == "memory");
    let trace = std::env::var_os("PK_IO_TRACE").is_some();
    let config = StreamsConfig::builder(app.as_str(), bootstrap)
        .ordering(OrderingMode::Key)
        .max_in_flight(in_flight, in_flight)
        .commit_interval(Duration::from_millis(commit_ms))
        .state_dir(&dir)
        .build()?;
    let lookup = Duration::from_millis(lookup_ms);
    let running = Streams::topology(config)
        .source(input, StringDeserializer, StringDeserializer)
        .map_async(move |r| async move {
            if precise {
                precise_sleep::sleep(lookup).await;
            } else {
                tokio::time::sleep(lookup).await;
            }
            Ok(r)
        })
        .group_by_key()
        .count(
            if memory {
                StoreSpec::in_memory("counts")
            } else {
                StoreSpec::persistent("counts")
            },
            StringSerializer,
        )
        .to_stream()
        .to(output, StringSerializer, LongSerde)
        .build()
        .start()
        .await?;
    let deadline = Instant::now() + Duration::from_secs(600);
    let mut first = None;
    let mut peak = 0;
    let last = loop {
        let m = running.metrics();
        peak = peak.max(m.in_flight);
        if trace && m.processed > 0 {
            let at = first.map_or(0, |f: (Instant, f64)| f.0.elapsed().as_millis());
            eprintln!(
                "SAMPLE t_ms={at} in_flight={} processed={}",
                m.in_flight, m.processed
            );
        }
        if first.is_none() && m.processed > 0 {
            first = Some((Instant::now(), cpu_s()));
        }
        if m.processed >= records {
            break (Instant::now(), cpu_s());
        }
        if running.is_finished() || Instant::now() > deadline {
            eprintln!("stopped at {} of {records} records", m.processed);
            std::process::exit(1);
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    let m = running.metrics();
    running.shutdown().await?;
    let _ = std::fs::remove_dir_all(&dir);
    let first = first.unwrap_or(last);
    let span = last.0.duration_since(first.0).as_secs_f64();
    let rate = (records - 1) as f64 / span;
    let bound = in_flight as f64 * 1000.0 / lookup_ms as f64;
    println!(
        "RESULT peer=purekafka mode=io timer={} records={records} in_flight={in_flight} lookup_ms={lookup_ms} \
         rec_s={rate:.0} bound_rec_s={bound:.0} of_bound={:.3} span_s={span:.3} \
         cpu_span_s={:.3} peak_in_flight={peak} p50_ms={:.1} p99_ms={:.1} commits={} \
         commit_p50_ms={:.1} commit_p99_ms={:.1}",
        if precise { "precise" } else { "tokio" },
        rate / bound,
        last.1 - first.1,
        m.processing_latency_p50_us as f64 / 1000.0,
        m.processing_latency_p99_us as f64 / 1000.0,
        m.commits,
        m.commit_latency_p50_us as f64 / 1000.0,
        m.commit_latency_p99_us as f64 / 1000.0,
    );
    Ok(())
}
