//! A Partition-ordered pass-through under each failure policy (issues #15
//! and #22): 4 partitions, `STREAMS_PT_RECORDS` records (default 20,000)
//! copied to a 4-partition topic, nothing failing. With a record done only
//! once its outputs were acknowledged, a partition advanced one produce
//! round trip (plus `linger.ms`) per record; pipelined, it advances as fast
//! as records are processed and sent. Prints records/s per policy, counted
//! from the application's start to the last record done (so the group join
//! is included, the same for every policy).
//!
//! ```sh
//! cargo run --release --example streams_partition_passthrough -- [bootstrap] [rounds]
//! ```

#[path = "common/topics.rs"]
mod topics;

use std::time::{Duration, Instant};

use purekafka::producer::serializer::BytesSerializer;
use purekafka::producer::{Producer, ProducerConfig, ProducerRecord};
use purekafka::streams::{
    Backoff, BytesDeserializer, FailurePolicy, OrderingMode, RetryLane, Streams, StreamsConfig,
};
use purekafka::{ClientConfig, Cluster};

const PARTITIONS: i32 = 4;

fn records() -> u64 {
    std::env::var("STREAMS_PT_RECORDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20_000)
}

fn unique(prefix: &str) -> String {
    format!("{prefix}-{:08x}", fastrand::u32(..))
}

async fn fill(bootstrap: &str, topic: &str, n: u64) -> purekafka::Result<()> {
    let producer = Producer::connect(
        ProducerConfig::builder()
            .bootstrap_servers(bootstrap)
            .build()?,
    )
    .await?;
    for id in 0..n {
        let rec = ProducerRecord::new(topic)
            .key(format!("customer-{}", id % 1000))
            .value(format!("order-{id:08}-payload-0123456789"));
        drop(producer.send(rec).await?);
    }
    producer.flush().await;
    producer.close(Duration::from_secs(10)).await
}

/// One run: records/s from start to the last record done.
async fn run(
    bootstrap: &str,
    cluster: &Cluster,
    input: &str,
    n: u64,
    policy: &str,
) -> purekafka::Result<f64> {
    let output = unique("ppt-out");
    let (retry, dlq) = (unique("ppt-retry"), unique("ppt-dlq"));
    topics::create_topics(cluster, &[&output], PARTITIONS).await?;
    let failure_policy = match policy {
        "retry" => FailurePolicy::Retry(Backoff::fixed(Duration::from_millis(10), 3)),
        "lane" => {
            topics::create_topics(cluster, &[&retry, &dlq], 1).await?;
            FailurePolicy::RetryLane(RetryLane::new(
                retry.as_str(),
                dlq.as_str(),
                Backoff::fixed(Duration::from_millis(10), 3),
            ))
        }
        _ => FailurePolicy::Fail,
    };
    let config = StreamsConfig::builder(unique("ppt-app"), bootstrap)
        .ordering(OrderingMode::Partition)
        .failure_policy(failure_policy)
        .build()?;
    let started = Instant::now();
    let running = Streams::topology(config)
        .source(input, BytesDeserializer, BytesDeserializer)
        .to(output.as_str(), BytesSerializer, BytesSerializer)
        .build()
        .start()
        .await
        .map_err(|e| purekafka::Error::config("streams", e.to_string()))?;
    let deadline = started + Duration::from_secs(600);
    while running.metrics().processed < n {
        if running.is_finished() || Instant::now() > deadline {
            return Err(purekafka::Error::config("streams", "stopped or timed out"));
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let secs = started.elapsed().as_secs_f64();
    running
        .shutdown()
        .await
        .map_err(|e| purekafka::Error::config("streams", e.to_string()))?;
    Ok(n as f64 / secs)
}

#[tokio::main]
async fn main() -> purekafka::Result<()> {
    let bootstrap = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:19092".into());
    let rounds: usize = std::env::args()
        .nth(2)
        .and_then(|r| r.parse().ok())
        .unwrap_or(1);
    let cluster = Cluster::connect(
        ClientConfig::builder()
            .bootstrap_servers(&bootstrap)
            .build()?,
    )
    .await?;
    let n = records();
    let input = unique("ppt-in");
    topics::create_topics(&cluster, &[&input], PARTITIONS).await?;
    fill(&bootstrap, &input, n).await?;
    println!("Partition-ordered pass-through, {n} records, {PARTITIONS} partitions");
    for round in 1..=rounds {
        for policy in ["fail", "retry", "lane"] {
            let rate = run(&bootstrap, &cluster, &input, n, policy).await?;
            println!("round {round} policy {policy:5} {rate:10.0} records/s");
        }
    }
    Ok(())
}
