//! What OpenTelemetry tracing (feature `otel`, issue #20) costs per
//! produced record: one process produces RECORDS records of 100 bytes with
//! the default producer settings and prints its wall time and CPU time per
//! record. `benches/otel-cost/run` builds it without and with the feature
//! and runs the modes interleaved:
//!
//! - `plain` built without `otel`: no tracing code at all;
//! - `plain` built with `otel` and no tracer provider installed: every
//!   record gets a no-op send span (nothing is written into its headers);
//! - `sdk` (with `otel` only): the OpenTelemetry SDK's tracer provider with
//!   a simple (synchronous) span processor and an exporter that drops every
//!   span, so each record gets a sampled, recorded send span and a
//!   `traceparent` header: the cost of recording spans, without any
//!   exporter's own cost.
//!
//! ```text
//! otel_cost BOOTSTRAP TOPIC RECORDS plain|sdk
//! ```

use std::collections::VecDeque;
use std::time::Instant;

use purekafka::{Cluster, Producer, ProducerConfig, ProducerRecord};

#[path = "common/topics.rs"]
mod topics;

/// Acknowledgements awaited at most this far behind the sends.
const WINDOW: usize = 50_000;

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let [_, bootstrap, topic, records, mode] = args.as_slice() else {
        eprintln!("usage: otel_cost BOOTSTRAP TOPIC RECORDS plain|sdk");
        std::process::exit(2);
    };
    let records: usize = records.parse().expect("RECORDS is a number");
    let label = match (mode.as_str(), cfg!(feature = "otel")) {
        ("plain", false) => "no-otel-feature",
        ("plain", true) => "otel-no-provider",
        ("sdk", true) => {
            install_sdk();
            "otel-sdk"
        }
        _ => {
            eprintln!("mode {mode}: `plain`, or `sdk` with the otel feature");
            std::process::exit(2);
        }
    };
    let config = ProducerConfig::builder()
        .bootstrap_servers(bootstrap)
        .build()
        .expect("config");
    let cluster = Cluster::connect(config.client.clone())
        .await
        .expect("connect");
    // The first run creates the topic (one partition).
    let known = cluster
        .refresh_metadata(Some(std::slice::from_ref(topic)))
        .await
        .expect("metadata");
    let exists = known
        .topics
        .get(topic.as_str())
        .is_some_and(|t| !t.partitions.is_empty());
    if !exists {
        topics::create_topics(&cluster, &[topic.as_str()], 1)
            .await
            .expect("create the topic");
    }
    let producer = Producer::with_cluster(cluster, config)
        .await
        .expect("producer");
    let value = vec![b'x'; 100];
    let (cpu0, t0) = (cpu_s(), Instant::now());
    let mut acks = VecDeque::with_capacity(WINDOW);
    for i in 0..records {
        let record = ProducerRecord::new(topic.as_str())
            .key(format!("k{}", i % 1000))
            .value(value.clone());
        acks.push_back(producer.send(record).await.expect("send"));
        if acks.len() >= WINDOW {
            acks.pop_front().expect("an ack").await.expect("delivered");
        }
    }
    for a in acks {
        a.await.expect("delivered");
    }
    let (secs, cpu) = (t0.elapsed().as_secs_f64(), cpu_s() - cpu0);
    println!(
        "mode={label} records={records} secs={secs:.3} rec_per_s={:.0} cpu_us_per_record={:.3}",
        records as f64 / secs,
        cpu * 1e6 / records as f64
    );
    producer
        .close(std::time::Duration::from_secs(30))
        .await
        .expect("close");
}

/// The SDK's tracer provider as the global one, dropping every span it
/// records.
#[cfg(feature = "otel")]
fn install_sdk() {
    let provider = opentelemetry_sdk::trace::SdkTracerProvider::builder()
        .with_simple_exporter(Discard)
        .build();
    opentelemetry::global::set_tracer_provider(provider);
}

#[cfg(not(feature = "otel"))]
fn install_sdk() {
    unreachable!("sdk mode needs the otel feature")
}

/// A span exporter that drops what it is given.
#[cfg(feature = "otel")]
#[derive(Debug)]
struct Discard;

#[cfg(feature = "otel")]
impl opentelemetry_sdk::trace::SpanExporter for Discard {
    async fn export(
        &self,
        batch: Vec<opentelemetry_sdk::trace::SpanData>,
    ) -> opentelemetry_sdk::error::OTelSdkResult {
        drop(batch);
        Ok(())
    }
}

/// This process's CPU time (user + system), from /proc/self/stat (ticks of
/// 1/100 s).
fn cpu_s() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields after the command name (which may hold spaces) in parentheses.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    // utime and stime are fields 14 and 15 of the file: 11 and 12 here.
    (ticks(11) + ticks(12)) / 100.0
}
