//! The streams runtime against the real broker: ordering modes keep their
//! promise under randomized async delays, commits never pass an unfinished
//! record, async-commit callbacks see every commit, the retry lane retries
//! when due and dead-letters exactly the exhausted records without blocking
//! the main lane, retry lane + exactly-once is refused, and two instances
//! share the work across a rebalance without losing a record.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use purekafka::producer::serializer::StringSerializer;
use purekafka::producer::{Producer, ProducerConfig, ProducerRecord};
use purekafka::streams::{
    Backoff, CommitMode, CommitOutcome, DeadLetterGuard, FailurePolicy, OrderingMode,
    ProcessingError, RetryLane, RunningStreams, Sink, Streams, StreamsConfig, StreamsError,
    StringDeserializer,
};
use purekafka::{Cluster, TopicPartition};
use tokio::time::Instant;

use crate::support::{self, read};

mod commit_dispatch;
mod delivery;
mod group_by;
mod group_by_streams;
mod kill;
mod purge;
mod retry_lane;
mod sessions;
mod share_group;
mod standby;
mod stateful;
mod stateful_java;
mod streams_protocol;
mod tables;
mod windows;

pub(super) async fn setup(test: &str, partitions: i32) -> Option<(String, Cluster, String)> {
    let bootstrap = support::bootstrap(test)?;
    support::trace();
    let cluster = Cluster::connect(support::config(&bootstrap))
        .await
        .expect("connect");
    let topic = support::unique_topic(test);
    support::create_topic(&cluster, &topic, partitions).await;
    Some((bootstrap, cluster, topic))
}

/// A producer with default settings on `bootstrap`.
pub(super) async fn producer(bootstrap: &str) -> Producer {
    Producer::connect(
        ProducerConfig::builder()
            .bootstrap_servers(bootstrap)
            .build()
            .unwrap(),
    )
    .await
    .unwrap()
}

/// Produces `n` records `key-(i % keys)` / `i`.
pub(super) async fn produce(bootstrap: &str, topic: &str, n: usize, keys: usize) {
    let p = producer(bootstrap).await;
    let mut acks = Vec::new();
    for i in 0..n {
        let r = ProducerRecord::new(topic)
            .key(format!("key-{}", i % keys))
            .value(i.to_string());
        acks.push(p.send(r).await.unwrap());
    }
    for a in acks {
        a.await.unwrap();
    }
    p.close(Duration::from_secs(10)).await.unwrap();
}

pub(super) fn config(bootstrap: &str, app: &str) -> purekafka::streams::StreamsConfigBuilder {
    StreamsConfig::builder(app, bootstrap)
        .commit_interval(Duration::from_millis(200))
        .consumer_property("session.timeout.ms", session_timeout_ms())
        .consumer_property("heartbeat.interval.ms", "100")
}

/// `session.timeout.ms` of every streams test: a killed instance's
/// successor gets its partitions only once that session expires; the tests
/// assert that nothing is lost or doubled, not how long the hand-over
/// takes. Kafka refuses less than its `group.min.session.timeout.ms` (6 s),
/// and on a loaded machine 10 s is kept there; the fake accepts 3 s.
/// (Before group membership had its own thread, 3 s cost stateful tests
/// spurious rebalances under load: their runtime stalled past it.)
pub(super) fn session_timeout_ms() -> &'static str {
    if support::broker_provider() == support::BrokerProvider::Fake {
        "3000"
    } else {
        "10000"
    }
}

/// The offsets group `app` has committed for `tps`.
pub(super) async fn group_committed(
    bootstrap: &str,
    app: &str,
    tps: &[TopicPartition],
) -> std::collections::HashMap<TopicPartition, purekafka::consumer::OffsetAndMetadata> {
    let consumer = purekafka::Consumer::connect(
        purekafka::ConsumerConfig::from_properties([
            ("bootstrap.servers", bootstrap),
            ("group.id", app),
        ])
        .unwrap(),
    )
    .await
    .unwrap();
    consumer.committed(tps).await.unwrap()
}

pub(super) async fn wait_for(running: &RunningStreams, what: impl Fn(&RunningStreams) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !what(running) {
        assert!(!running.is_finished(), "the app stopped early");
        assert!(
            Instant::now() < deadline,
            "timed out: {:?}",
            running.metrics()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Seen values per key (Key mode) or per partition (Partition mode), in
/// the order processing started.
type Seen = Arc<Mutex<HashMap<String, Vec<i64>>>>;

/// A commit's offsets and whether it succeeded.
type Commit = (HashMap<TopicPartition, i64>, bool);

async fn order_test(test: &str, ordering: OrderingMode) {
    let Some((bootstrap, _cluster, topic)) = setup(test, 3).await else {
        return;
    };
    const N: usize = 600;
    produce(&bootstrap, &topic, N, 17).await;
    let seen: Seen = Arc::default();
    let running_now: Arc<Mutex<BTreeSet<String>>> = Arc::default();
    let (s, r) = (seen.clone(), running_now.clone());
    let app = support::unique_topic(test);
    let running = Streams::topology(
        config(&bootstrap, &app)
            .ordering(ordering)
            .max_in_flight(64, 128)
            .build()
            .unwrap(),
    )
    .source(topic.as_str(), StringDeserializer, StringDeserializer)
    .for_each_async(move |rec| {
        let (s, r) = (s.clone(), r.clone());
        async move {
            let group = match ordering {
                OrderingMode::Key => rec.key.clone().unwrap(),
                _ => rec.partition.to_string(),
            };
            let v: i64 = if ordering == OrderingMode::Key {
                rec.value.parse().unwrap()
            } else {
                rec.offset
            };
            assert!(
                r.lock().unwrap().insert(group.clone()),
                "two records of {group} in flight at once"
            );
            s.lock().unwrap().entry(group.clone()).or_default().push(v);
            tokio::time::sleep(Duration::from_millis(fastrand::u64(0..5))).await;
            r.lock().unwrap().remove(&group);
            Ok(())
        }
    })
    .build()
    .start()
    .await
    .unwrap();
    wait_for(&running, |r| r.metrics().processed >= N as u64).await;
    wait_for(&running, |r| r.metrics().commits > 0).await;
    let m = running.metrics();
    running.shutdown().await.unwrap();
    // Sync commits every 200 ms were timed.
    assert!(m.commit_latency_p50_us > 0, "{m:?}");
    assert!(m.commit_latency_p50_us <= m.commit_latency_p99_us, "{m:?}");
    assert!(m.processing_latency_p50_us <= m.processing_latency_p99_us);
    let seen = seen.lock().unwrap();
    let total: usize = seen.values().map(Vec::len).sum();
    assert_eq!(total, N);
    for (group, vs) in seen.iter() {
        assert!(
            vs.windows(2).all(|w| w[0] < w[1]),
            "{group} out of order: {vs:?}"
        );
    }
}

#[tokio::test]
async fn key_mode_keeps_per_key_order() {
    order_test("streams-key-order", OrderingMode::Key).await;
}

#[tokio::test]
async fn partition_mode_keeps_per_partition_order() {
    order_test("streams-partition-order", OrderingMode::Partition).await;
}

#[tokio::test]
async fn async_commits_never_pass_unfinished_and_callback_sees_every_commit() {
    let Some((bootstrap, cluster, topic)) = setup("streams-async-commit", 2).await else {
        return;
    };
    const N: usize = 400;
    produce(&bootstrap, &topic, N, 50).await;
    let finished: Arc<Mutex<BTreeSet<(i32, i64)>>> = Arc::default();
    let outcomes: Arc<Mutex<Vec<Commit>>> = Arc::default();
    let (f, o) = (finished.clone(), outcomes.clone());
    let callback = Arc::new(move |c: &CommitOutcome| {
        let done = f.lock().unwrap();
        for (tp, om) in &c.offsets {
            // Every record below the committed offset has finished.
            let first = done
                .range((tp.partition, 0)..(tp.partition, om.offset))
                .count();
            let below = (0..om.offset).count();
            assert_eq!(
                first, below,
                "commit {} passes an unfinished record",
                om.offset
            );
        }
        let offsets = c
            .offsets
            .iter()
            .map(|(tp, om)| (tp.clone(), om.offset))
            .collect();
        o.lock().unwrap().push((offsets, c.result.is_ok()));
    });
    let f = finished.clone();
    let app = support::unique_topic("streams-async-commit-app");
    let running = Streams::topology(
        config(&bootstrap, &app)
            .ordering(OrderingMode::Unordered)
            .max_in_flight(32, 64)
            .commit_mode(CommitMode::Async(callback))
            .commit_interval(Duration::from_millis(20))
            .build()
            .unwrap(),
    )
    .source(topic.as_str(), StringDeserializer, StringDeserializer)
    .for_each_async(move |rec| {
        let f = f.clone();
        async move {
            tokio::time::sleep(Duration::from_millis(fastrand::u64(0..20))).await;
            f.lock()
                .unwrap()
                .insert((rec.partition.partition, rec.offset));
            Ok(())
        }
    })
    .build()
    .start()
    .await
    .unwrap();
    wait_for(&running, |r| r.metrics().processed >= N as u64).await;
    let before = running.metrics();
    running.shutdown().await.unwrap();
    let outcomes = outcomes.lock().unwrap().clone();
    assert!(outcomes.len() >= 3, "few commits: {}", outcomes.len());
    assert!(before.commits + before.commit_failures <= outcomes.len() as u64);
    // The last (synchronous, on shutdown) commit covers every record.
    let tps: Vec<TopicPartition> = (0..2)
        .map(|p| TopicPartition::new(topic.as_str(), p))
        .collect();
    let committed = group_committed(&bootstrap, &app, &tps).await;
    let mut total = 0;
    for tp in &tps {
        total += read::read_partition(&cluster, &topic, tp.partition)
            .await
            .len() as i64;
    }
    let sum: i64 = committed.values().map(|o| o.offset).sum();
    assert_eq!(sum, total, "committed {committed:?}");
}

#[tokio::test]
async fn two_instances_share_the_work_and_a_rebalance_loses_nothing() {
    let Some((bootstrap, _cluster, topic)) = setup("streams-two-instances", 4).await else {
        return;
    };
    const N: usize = 800;
    produce(&bootstrap, &topic, N, 64).await;
    let app = support::unique_topic("streams-two-app");
    let seen: Arc<Mutex<Vec<(usize, i64)>>> = Arc::default();
    // Records are slow (25 ms each) until the second instance has
    // processed one, so that work is left for it whatever its join takes;
    // once it has, the rest runs without the wait.
    let shared = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let start = |id: usize| {
        let (seen, shared) = (seen.clone(), shared.clone());
        let config = config(&bootstrap, &app)
            .ordering(OrderingMode::Key)
            .max_in_flight(2, 4)
            .build()
            .unwrap();
        Streams::topology(config)
            .source(topic.as_str(), StringDeserializer, StringDeserializer)
            .for_each_async(move |rec| {
                let (seen, shared) = (seen.clone(), shared.clone());
                async move {
                    use std::sync::atomic::Ordering::Relaxed;
                    if id == 1 {
                        shared.store(true, Relaxed);
                    } else if !shared.load(Relaxed) {
                        tokio::time::sleep(Duration::from_millis(25)).await;
                    }
                    seen.lock().unwrap().push((id, rec.value.parse().unwrap()));
                    Ok(())
                }
            })
            .build()
            .start()
    };
    let a = start(0).await.unwrap();
    wait_for(&a, |r| r.metrics().processed >= 50).await;
    let b = start(1).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let distinct: BTreeSet<i64> = seen.lock().unwrap().iter().map(|(_, v)| *v).collect();
        if distinct.len() == N {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "only {} of {N} processed",
            distinct.len()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let mb = b.metrics();
    b.shutdown().await.unwrap();
    a.shutdown().await.unwrap();
    assert!(mb.processed > 0, "the second instance got no work");
}

#[tokio::test]
async fn shutdown_on_stop_drains_in_flight_and_commits_the_drained_watermark() {
    let Some((bootstrap, _cluster, topic)) = setup("streams-shutdown-on", 1).await else {
        return;
    };
    const N: usize = 400;
    produce(&bootstrap, &topic, N, 50).await;
    let done: Arc<Mutex<BTreeSet<i64>>> = Arc::default();
    let d = done.clone();
    let app = support::unique_topic("streams-shutdown-on-app");
    let running = Streams::topology(
        config(&bootstrap, &app)
            .ordering(OrderingMode::Unordered)
            .max_in_flight(40, 40)
            .commit_interval(Duration::from_secs(60))
            .build()
            .unwrap(),
    )
    .source(topic.as_str(), StringDeserializer, StringDeserializer)
    .for_each_async(move |rec| {
        let d = d.clone();
        async move {
            tokio::time::sleep(Duration::from_millis(200 + fastrand::u64(0..100))).await;
            d.lock().unwrap().insert(rec.offset);
            Ok(())
        }
    })
    .build()
    .start()
    .await
    .unwrap();
    wait_for(&running, |r| {
        let m = r.metrics();
        m.processed >= 40 && m.in_flight > 0
    })
    .await;
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let at_stop = running.metrics();
    stop.send(()).unwrap();
    running
        .shutdown_on(async {
            let _ = stopped.await;
        })
        .await
        .unwrap();
    // Each record slept 200-300 ms: the processing histogram says so.
    let (p50, p99) = (
        at_stop.processing_latency_p50_us,
        at_stop.processing_latency_p99_us,
    );
    assert!((200_000..1_000_000).contains(&p50), "{at_stop:?}");
    assert!(p50 <= p99 && p99 < 2_000_000, "{at_stop:?}");
    let done = done.lock().unwrap().clone();
    let k = done.len() as i64;
    // Everything in flight at the stop finished (drained), nothing new
    // started after it, and what finished is the prefix [0, k).
    assert!(
        k as u64 >= at_stop.processed + at_stop.in_flight,
        "{k} done; at the stop {at_stop:?}"
    );
    assert!(k < N as i64, "the stop came after every record: {k}");
    assert_eq!(
        done.iter().copied().collect::<Vec<_>>(),
        (0..k).collect::<Vec<_>>()
    );
    let tp = TopicPartition::new(topic.as_str(), 0);
    let committed = group_committed(&bootstrap, &app, std::slice::from_ref(&tp)).await;
    assert_eq!(
        committed.get(&tp).map(|o| o.offset),
        Some(k),
        "{committed:?}"
    );
}

#[tokio::test]
async fn branches_route_records_and_the_sink_partitioner_places_them() {
    let Some((bootstrap, cluster, topic)) = setup("streams-branch", 1).await else {
        return;
    };
    let by_value = support::unique_topic("streams-branch-partitioned");
    support::create_topic(&cluster, &by_value, 3).await;
    const N: usize = 120;
    produce(&bootstrap, &topic, N, 7).await;
    // i % 3 == 0 -> by_value, partition (i / 3) % 3 by the partitioner;
    // i % 3 == 1 -> the second branch's action; the rest -> default.
    let second: Arc<Mutex<BTreeSet<i64>>> = Arc::default();
    let rest: Arc<Mutex<BTreeSet<i64>>> = Arc::default();
    let (s, d) = (second.clone(), rest.clone());
    type Rec = purekafka::streams::Record<String, String>;
    let value = |r: &Rec| r.value.parse::<i64>().unwrap();
    let app = support::unique_topic("streams-branch-app");
    let running = Streams::topology(
        config(&bootstrap, &app)
            .ordering(OrderingMode::Unordered)
            .build()
            .unwrap(),
    )
    .source(topic.as_str(), StringDeserializer, StringDeserializer)
    .branch()
    .branch(
        move |r| value(r) % 3 == 0,
        Sink::to_with_partitioner(
            by_value.as_str(),
            StringSerializer,
            StringSerializer,
            move |r, partitions| {
                assert_eq!(partitions, 3);
                ((value(r) / 3) % 3) as i32
            },
        ),
    )
    .branch(
        move |r| value(r) % 3 == 1,
        Sink::for_each(move |r: Rec| {
            s.lock().unwrap().insert(r.value.parse().unwrap());
            Ok(())
        }),
    )
    .default_branch(Sink::for_each(move |r: Rec| {
        d.lock().unwrap().insert(r.value.parse().unwrap());
        Ok(())
    }))
    .build()
    .start()
    .await
    .unwrap();
    wait_for(&running, |r| r.metrics().processed >= N as u64).await;
    running.shutdown().await.unwrap();
    let ids = |m: i64| {
        (0..N as i64)
            .filter(|i| i % 3 == m)
            .collect::<BTreeSet<_>>()
    };
    assert_eq!(*second.lock().unwrap(), ids(1));
    assert_eq!(*rest.lock().unwrap(), ids(2));
    let mut produced = BTreeSet::new();
    for p in 0..3 {
        for r in read::read_partition(&cluster, &by_value, p).await {
            let v: i64 = std::str::from_utf8(r.value.as_ref().unwrap())
                .unwrap()
                .parse()
                .unwrap();
            assert_eq!((v / 3) % 3, i64::from(p), "{v} on partition {p}");
            assert!(produced.insert(v), "{v} produced twice");
        }
    }
    assert_eq!(produced, ids(0));
}

#[tokio::test]
async fn a_fatal_poll_error_stops_the_runtime_with_the_partition_named() {
    let Some((bootstrap, _cluster, topic)) = setup("streams-fatal-poll", 1).await else {
        return;
    };
    produce(&bootstrap, &topic, 10, 3).await;
    // A new group with auto.offset.reset=none has no position to start
    // from: polling again cannot help, so the runtime must stop (not hang)
    // with the typed error naming the partition.
    let app = support::unique_topic("streams-fatal-poll-app");
    let running = Streams::topology(
        config(&bootstrap, &app)
            .consumer_property("auto.offset.reset", "none")
            .build()
            .unwrap(),
    )
    .source(topic.as_str(), StringDeserializer, StringDeserializer)
    .for_each(|_| Ok(()))
    .build()
    .start()
    .await
    .unwrap();
    let stopped = tokio::time::timeout(Duration::from_secs(60), running.wait())
        .await
        .expect("the runtime hung after a fatal poll error");
    match stopped {
        Err(StreamsError::Client(purekafka::Error::NoOffset { partition })) => {
            assert_eq!(partition, TopicPartition::new(topic.as_str(), 0));
        }
        other => panic!("expected NoOffset for {topic}-0, got {other:?}"),
    }
}
