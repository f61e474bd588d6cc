//! The streams runtime on the classic group protocol against each release:
//! key ordering with the parallel retry lane (at-least-once), and
//! exactly-once (transactions v1 on 3.9, v2 from 4.0).
//! (Not named `streams`: `scripts/test`'s fake-cluster pass selects
//! `streams::`, and these tests need the compat broker.)

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use purekafka::consumer::IsolationLevel;
use purekafka::producer::serializer::StringSerializer;
use purekafka::producer::{Producer, ProducerConfig, ProducerRecord};
use purekafka::streams::{
    Backoff, CommitMode, FailurePolicy, OrderingMode, ProcessingError, RetryLane, RunningStreams,
    Streams, StreamsConfig, StringDeserializer,
};
use purekafka::{Cluster, Consumer, ConsumerConfig, TopicPartition};
use tokio::time::Instant;

use super::{client, compat_broker, values};
use crate::support::{self, read};

/// Produces `n` records `k<i % keys>` / `i` to a new topic of
/// `partitions` partitions; returns the cluster and the topic.
async fn input(
    bootstrap: &str,
    prefix: &str,
    partitions: i32,
    n: usize,
    keys: usize,
) -> (Cluster, String) {
    let cluster = Cluster::connect(support::config(bootstrap))
        .await
        .expect("cluster");
    let topic = support::unique_topic(prefix);
    support::create_topic(&cluster, &topic, partitions).await;
    let producer = Producer::connect(
        ProducerConfig::builder()
            .client(client(bootstrap))
            .build()
            .unwrap(),
    )
    .await
    .expect("producer");
    let mut acks = Vec::new();
    for i in 0..n {
        let r = ProducerRecord::new(topic.as_str())
            .key(format!("k{}", i % keys))
            .value(i.to_string());
        acks.push(producer.send(r).await.expect("send"));
    }
    for a in acks {
        a.await.expect("acknowledged");
    }
    producer.close(Duration::from_secs(10)).await.unwrap();
    (cluster, topic)
}

fn config(bootstrap: &str, app: &str) -> purekafka::streams::StreamsConfigBuilder {
    StreamsConfig::builder(app, bootstrap)
        .commit_interval(Duration::from_millis(200))
        .consumer_property("session.timeout.ms", "10000")
        .consumer_property("heartbeat.interval.ms", "500")
}

/// Waits (60 s at most) until `done` holds, the application still running.
async fn wait_for(running: &RunningStreams, done: impl Fn(&RunningStreams) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !done(running) {
        assert!(!running.is_finished(), "the application stopped early");
        assert!(
            Instant::now() < deadline,
            "timed out: {:?}",
            running.metrics()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The group's committed offsets on `topic`, summed over `partitions`.
async fn committed_total(bootstrap: &str, app: &str, topic: &str, partitions: i32) -> i64 {
    let consumer = Consumer::connect(
        ConsumerConfig::builder()
            .client(|_| client(bootstrap))
            .group_id(app)
            .build()
            .unwrap(),
    )
    .await
    .expect("consumer");
    let tps: Vec<TopicPartition> = (0..partitions)
        .map(|p| TopicPartition::new(topic, p))
        .collect();
    let committed = consumer.committed(&tps).await.expect("committed");
    tps.iter()
        .map(|tp| committed.get(tp).map_or(0, |o| o.offset))
        .sum()
}

/// Key ordering (one record in flight per key, each key's records started
/// in offset order) with the retry lane: a record failing once is retried
/// on the lane and succeeds; one failing always is dead-lettered after its
/// third attempt; the group commits to the end of the input.
#[tokio::test]
async fn compat_streams_key_ordering_with_the_retry_lane() {
    let Some((bootstrap, release)) =
        compat_broker("compat_streams_key_ordering_with_the_retry_lane")
    else {
        return;
    };
    const N: usize = 200;
    const KEYS: usize = 10;
    let (cluster, topic) = input(&bootstrap, "compat-streams-key", 2, N, KEYS).await;
    let (retry, dlq) = (format!("{topic}-retry"), format!("{topic}-dlq"));
    support::create_topic(&cluster, &retry, 2).await;
    support::create_topic(&cluster, &dlq, 1).await;
    // Per key, the values whose first attempt started, in start order.
    let started: Arc<Mutex<BTreeMap<String, Vec<i64>>>> = Arc::default();
    let in_flight: Arc<Mutex<BTreeSet<String>>> = Arc::default();
    let overlaps: Arc<Mutex<Vec<String>>> = Arc::default();
    let attempts: Arc<Mutex<HashMap<i64, u32>>> = Arc::default();
    let (st, inf, ov, at) = (
        started.clone(),
        in_flight.clone(),
        overlaps.clone(),
        attempts.clone(),
    );
    let app = support::unique_topic("compat-streams-key-app");
    let running = Streams::topology(
        config(&bootstrap, &app)
            .ordering(OrderingMode::Key)
            .max_in_flight(32, 64)
            .failure_policy(FailurePolicy::RetryLane(RetryLane::new(
                retry.as_str(),
                dlq.as_str(),
                Backoff::fixed(Duration::from_millis(200), 3),
            )))
            .build()
            .unwrap(),
    )
    .source(topic.as_str(), StringDeserializer, StringDeserializer)
    .for_each_async(move |rec| {
        let (st, inf, ov, at) = (st.clone(), inf.clone(), ov.clone(), at.clone());
        async move {
            let key = rec.key.clone().unwrap();
            let v: i64 = rec.value.parse().unwrap();
            let n = {
                let mut a = at.lock().unwrap();
                let n = a.entry(v).or_default();
                *n += 1;
                *n
            };
            let first = n == 1;
            if first {
                if !inf.lock().unwrap().insert(key.clone()) {
                    ov.lock().unwrap().push(format!("{key} at {v}"));
                }
                st.lock().unwrap().entry(key.clone()).or_default().push(v);
            }
            tokio::time::sleep(Duration::from_millis(fastrand::u64(0..3))).await;
            if first {
                inf.lock().unwrap().remove(&key);
            }
            match v % 25 {
                0 => Err(ProcessingError::new(format!("{v} always fails"))),
                1 if first => Err(ProcessingError::new(format!("{v} fails once"))),
                _ => Ok(()),
            }
        }
    })
    .build()
    .start()
    .await
    .expect("start");
    let failing = (N / 25) as u64;
    wait_for(&running, |r| {
        let m = r.metrics();
        m.processed >= N as u64 && m.dead_lettered >= failing && m.retry_lane_succeeded >= failing
    })
    .await;
    let m = running.metrics();
    running.shutdown().await.expect("clean shutdown");
    eprintln!("Kafka {release:?}: key ordering + retry lane: {m:?}");
    assert_eq!(m.processed, N as u64, "{m:?}");
    assert_eq!(m.handed_to_retry_lane, 2 * failing, "{m:?}");
    assert_eq!(m.dead_lettered, failing, "{m:?}");
    assert_eq!(
        overlaps.lock().unwrap().clone(),
        Vec::<String>::new(),
        "two records of one key in flight at once"
    );
    for (key, vs) in started.lock().unwrap().iter() {
        let k: i64 = key[1..].parse().unwrap();
        let want: Vec<i64> = (0..N as i64).filter(|v| v % KEYS as i64 == k).collect();
        assert_eq!(vs, &want, "key {key}: every record, started in order, once");
    }
    for (v, n) in attempts.lock().unwrap().iter() {
        let want = match v % 25 {
            0 => 3,
            1 => 2,
            _ => 1,
        };
        assert_eq!(*n, want, "attempts of {v}");
    }
    let mut dead: Vec<i64> = read::read_partition(&cluster, &dlq, 0)
        .await
        .iter()
        .map(|r| {
            std::str::from_utf8(r.value.as_ref().unwrap())
                .unwrap()
                .parse()
                .unwrap()
        })
        .collect();
    dead.sort();
    let want: Vec<i64> = (0..N as i64).filter(|v| v % 25 == 0).collect();
    assert_eq!(
        dead, want,
        "dead letters: exactly the always-failing records"
    );
    assert_eq!(
        committed_total(&bootstrap, &app, &topic, 2).await,
        N as i64,
        "committed to the end of the input"
    );
}

/// Exactly-once pass-through: the output, read `read_committed`, holds
/// each input record once, and the offsets committed in the transactions
/// reach the end of the input.
#[tokio::test]
async fn compat_streams_exactly_once_pass_through() {
    let Some((bootstrap, release)) = compat_broker("compat_streams_exactly_once_pass_through")
    else {
        return;
    };
    const N: usize = 200;
    let (cluster, topic) = input(&bootstrap, "compat-streams-eos", 2, N, 16).await;
    let out = format!("{topic}-out");
    support::create_topic(&cluster, &out, 2).await;
    let app = support::unique_topic("compat-streams-eos-app");
    let running = Streams::topology(
        config(&bootstrap, &app)
            .commit_mode(CommitMode::ExactlyOnce)
            .build()
            .unwrap(),
    )
    .source(topic.as_str(), StringDeserializer, StringDeserializer)
    .map(Ok)
    .to(out.as_str(), StringSerializer, StringSerializer)
    .build()
    .start()
    .await
    .expect("start");
    wait_for(&running, |r| r.metrics().processed >= N as u64).await;
    running.shutdown().await.expect("clean shutdown");
    let got = values(&bootstrap, &out, 2, IsolationLevel::ReadCommitted).await;
    let mut want: Vec<String> = (0..N).map(|i| i.to_string()).collect();
    want.sort();
    assert_eq!(got, want, "Kafka {release:?}: each record once, committed");
    assert_eq!(
        committed_total(&bootstrap, &app, &topic, 2).await,
        N as i64,
        "committed to the end of the input"
    );
}
