//! A streams app on the fake cluster with injected faults: refused fetches,
//! a refused commit and a slow broker; every record is still processed and
//! the final commit covers them all. No JVM, no container.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kafka_protocol::messages::ApiKey;
use purekafka::producer::{Producer, ProducerConfig, ProducerRecord};
use purekafka::streams::{Streams, StreamsConfig, StringDeserializer};
use purekafka::ClientConfig;
use purekafka_testkit::fake::{Action, FakeCluster, Rule};

const N: usize = 300;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streams_app_processes_everything_through_injected_faults() {
    let fake = FakeCluster::start(3).await.expect("fake");
    fake.create_topic("in", 3).expect("topic");
    let config = ProducerConfig::builder()
        .client(ClientConfig::builder().bootstrap_servers(fake.bootstrap()))
        .build()
        .expect("producer config");
    let producer = Producer::connect(config).await.expect("producer");
    let mut pending = Vec::new();
    for i in 0..N {
        let record = ProducerRecord::new("in")
            .key(format!("k{}", i % 11))
            .value(i.to_string());
        pending.push(producer.send(record).await.expect("send"));
    }
    for p in pending {
        p.await.expect("delivered");
    }

    // Faults: two fetches refused as if leadership moved, one commit refused
    // while the coordinator "loads", and every fetch from broker 1 slowed.
    fake.intercept(
        Rule::new(Action::Error(6))
            .on_api(ApiKey::Fetch)
            .on_topic("in")
            .times(2),
    );
    fake.intercept(
        Rule::new(Action::Error(14))
            .on_api(ApiKey::OffsetCommit)
            .once(),
    );
    fake.intercept(
        Rule::new(Action::Delay(Duration::from_millis(30)))
            .on_api(ApiKey::Fetch)
            .on_broker(1),
    );

    let seen: Arc<Mutex<BTreeSet<String>>> = Arc::default();
    let s = seen.clone();
    let running = Streams::topology(
        StreamsConfig::builder("app", fake.bootstrap())
            .commit_interval(Duration::from_millis(100))
            .consumer_property("session.timeout.ms", "6000")
            .consumer_property("heartbeat.interval.ms", "200")
            .build()
            .expect("streams config"),
    )
    .source("in", StringDeserializer, StringDeserializer)
    .for_each_async(move |rec| {
        let s = s.clone();
        async move {
            s.lock().expect("lock").insert(rec.value.clone());
            Ok(())
        }
    })
    .build()
    .start()
    .await
    .expect("start");
    let deadline = Instant::now() + Duration::from_secs(30);
    while seen.lock().expect("lock").len() < N {
        assert!(!running.is_finished(), "the app stopped early");
        assert!(Instant::now() < deadline, "{:?}", running.metrics());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    running.shutdown().await.expect("shutdown");

    let want: BTreeSet<String> = (0..N).map(|i| i.to_string()).collect();
    assert_eq!(*seen.lock().expect("lock"), want);
    let committed: i64 = (0..3)
        .map(|p| fake.committed_offset("app", "in", p).unwrap_or(0))
        .sum();
    assert_eq!(committed, N as i64, "the final commit covers every record");
    let hits = fake.rule_hits();
    assert_eq!(&hits[..2], &[2, 1], "the refusals were served: {hits:?}");
}
