//! Broker faults on the 3-node cluster (`scripts/kafka up --nodes 3`):
//! nodes are SIGKILLed and restarted while clients run. Tests here take a
//! shared lock, because each one stops nodes the others depend on.

use std::collections::HashMap;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use purekafka::producer::{Producer, ProducerConfig, ProducerRecord};
use purekafka::Cluster;
use tokio::sync::Mutex as AsyncMutex;

use crate::support::{self, read::read_partition};

/// One fault test at a time.
static FAULTS: AsyncMutex<()> = AsyncMutex::const_new(());

/// Runs `scripts/kafka <action> <node> --nodes 3`.
fn node(action: &str, n: i32) {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/kafka");
    let out = Command::new("bash")
        .args([script, action, &n.to_string(), "--nodes", "3"])
        .output()
        .unwrap_or_else(|e| panic!("scripts/kafka {action} {n}: {e}"));
    assert!(
        out.status.success(),
        "scripts/kafka {action} {n} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Restarts every node that is down, so one failed test does not break the
/// next.
struct Heal(Vec<i32>);

impl Drop for Heal {
    fn drop(&mut self) {
        for n in self.0.drain(..) {
            let _ = std::panic::catch_unwind(|| node("start", n));
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idempotent_producer_keeps_every_acked_record_once_and_in_order_across_a_leader_kill() {
    let Some(bootstrap) = support::bootstrap3("idempotent_producer_leader_kill") else {
        return;
    };
    let _serial = FAULTS.lock().await;
    support::trace();
    let client = purekafka::ClientConfig::builder()
        .bootstrap_servers(&bootstrap)
        .client_id("purekafka-faults")
        .request_timeout(Duration::from_secs(5))
        .default_api_timeout(Duration::from_secs(30));
    let cluster = Cluster::connect(client.clone().build().unwrap())
        .await
        .unwrap();
    let topic = support::unique_topic("f-idem");
    support::create_topic(&cluster, &topic, 3).await;
    let producer = Producer::new(
        ProducerConfig::builder()
            .client(client)
            .batch_size(4096)
            .delivery_timeout(Duration::from_secs(90))
            .build()
            .unwrap(),
    )
    .await
    .unwrap();

    // Partition p gets values p, p+3, p+6, ...: each partition's values must
    // come back strictly increasing (order) and each at most once.
    const N: u64 = 60_000;
    let acked: Arc<Mutex<HashMap<u64, (i32, i64)>>> = Arc::default();
    let failed: Arc<Mutex<Vec<String>>> = Arc::default();
    let sender = {
        let producer = producer.clone();
        let topic = topic.clone();
        let acked = acked.clone();
        let failed = failed.clone();
        tokio::spawn(async move {
            for i in 0..N {
                let record = ProducerRecord::new(&topic)
                    .partition((i % 3) as i32)
                    .value(i.to_string());
                let acked = acked.clone();
                let failed = failed.clone();
                producer
                    .send_with_callback(record, move |r| match r {
                        Ok(m) => {
                            acked
                                .lock()
                                .unwrap()
                                .insert(i, (m.partition.partition, m.offset));
                        }
                        Err(e) => failed.lock().unwrap().push(format!("{i}: {e}")),
                    })
                    .await
                    .expect("send");
                if i % 200 == 0 {
                    // About 20k records/s, so the kill lands mid-stream.
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            }
        })
    };

    tokio::time::sleep(Duration::from_millis(800)).await;
    let victim = cluster
        .refresh_metadata(Some(std::slice::from_ref(&topic)))
        .await
        .unwrap()
        .topics[&topic]
        .partitions[0]
        .leader;
    let mut heal = Heal(vec![victim]);
    node("kill", victim);
    let acked_at_kill = acked.lock().unwrap().len();
    tokio::time::sleep(Duration::from_secs(3)).await;
    node("start", victim);
    heal.0.clear();

    sender.await.unwrap();
    producer.flush().await;
    let metrics = producer.metrics();
    producer.close(Duration::from_secs(30)).await.unwrap();
    let failed = failed.lock().unwrap().clone();
    assert!(
        failed.is_empty(),
        "records failed: {:?}",
        &failed[..failed.len().min(5)]
    );
    let acked = acked.lock().unwrap().clone();
    assert_eq!(acked.len() as u64, N, "every record acknowledged");
    assert!(
        acked_at_kill < N as usize,
        "the kill landed after the last ack; the test proved nothing"
    );

    let mut total = 0;
    let mut found = std::collections::HashSet::new();
    for p in 0..3 {
        let values: Vec<u64> = read_partition(&cluster, &topic, p)
            .await
            .iter()
            .map(|r| {
                std::str::from_utf8(r.value.as_deref().unwrap())
                    .unwrap()
                    .parse()
                    .unwrap()
            })
            .collect();
        for w in values.windows(2) {
            assert!(
                w[0] < w[1],
                "partition {p}: {} then {} (duplicate or reorder)",
                w[0],
                w[1]
            );
        }
        found.extend(values.iter().copied());
        for v in &values {
            let (ap, _) = acked[v];
            assert_eq!(ap, p, "value {v} acked for partition {ap}, found in {p}");
        }
        total += values.len();
    }
    let mut missing: Vec<(u64, (i32, i64))> = acked
        .iter()
        .filter(|(v, _)| !found.contains(v))
        .map(|(v, at)| (*v, *at))
        .collect();
    missing.sort();
    assert!(
        missing.is_empty(),
        "{} acknowledged records missing, e.g. (value, (partition, offset)): {:?}",
        missing.len(),
        &missing[..missing.len().min(8)]
    );
    assert_eq!(
        total as u64, N,
        "each acknowledged record present exactly once"
    );
    eprintln!(
        "leader kill: node {victim} killed after {acked_at_kill} acks; {} retries, {} epoch bumps, {} requests",
        metrics.retries, metrics.epoch_bumps, metrics.requests
    );
    assert!(metrics.retries > 0, "the kill should have forced retries");
}
