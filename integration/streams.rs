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

async fn setup(test: &str, partitions: i32) -> Option<(String, Cluster, String)> {
    let bootstrap = support::bootstrap(test)?;
    support::trace();
    let cluster = Cluster::connect(support::config(&bootstrap))
        .await
        .expect("connect");
    let topic = support::unique_topic(test);
    support::create_topic(&cluster, &topic, partitions).await;
    Some((bootstrap, cluster, topic))
}

/// Produces `n` records `key-(i % keys)` / `i`.
async fn produce(bootstrap: &str, topic: &str, n: usize, keys: usize) {
    let p = Producer::connect(
        ProducerConfig::builder()
            .bootstrap_servers(bootstrap)
            .build()
            .unwrap(),
    )
    .await
    .unwrap();
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

fn config(bootstrap: &str, app: &str) -> purekafka::streams::StreamsConfigBuilder {
    StreamsConfig::builder(app, bootstrap)
        .commit_interval(Duration::from_millis(200))
        .consumer_property("session.timeout.ms", "10000")
        .consumer_property("heartbeat.interval.ms", "500")
}

/// The offsets group `app` has committed for `tps`.
async fn group_committed(
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

async fn wait_for(running: &RunningStreams, what: impl Fn(&RunningStreams) -> bool) {
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
async fn retry_lane_retries_when_due_and_dead_letters_the_exhausted() {
    let Some((bootstrap, cluster, topic)) = setup("streams-retry-lane", 2).await else {
        return;
    };
    let retry_topic = format!("{topic}-retry");
    let dlq = format!("{topic}-dlq");
    support::create_topic(&cluster, &retry_topic, 2).await;
    support::create_topic(&cluster, &dlq, 1).await;
    const N: usize = 200;
    produce(&bootstrap, &topic, N, 40).await;
    // v % 20 == 0: always fails (dead-lettered); v % 20 == 1: fails twice.
    let attempts: Arc<Mutex<HashMap<i64, Vec<Instant>>>> = Arc::default();
    let good_done: Arc<Mutex<Vec<Instant>>> = Arc::default();
    let (a, g) = (attempts.clone(), good_done.clone());
    let app = support::unique_topic("streams-retry-lane-app");
    let lane = RetryLane::new(
        retry_topic.as_str(),
        dlq.as_str(),
        Backoff::fixed(Duration::from_millis(1000), 3),
    );
    let running = Streams::topology(
        config(&bootstrap, &app)
            .ordering(OrderingMode::Key)
            .max_in_flight(64, 128)
            .failure_policy(FailurePolicy::RetryLane(lane))
            .build()
            .unwrap(),
    )
    .source(topic.as_str(), StringDeserializer, StringDeserializer)
    .for_each_async(move |rec| {
        let (a, g) = (a.clone(), g.clone());
        async move {
            let v: i64 = rec.value.parse().unwrap();
            let n = {
                let mut a = a.lock().unwrap();
                let e = a.entry(v).or_default();
                e.push(Instant::now());
                e.len()
            };
            tokio::time::sleep(Duration::from_millis(2)).await;
            match v % 20 {
                0 => Err(ProcessingError::new(format!("{v} always fails"))),
                1 if n <= 2 => Err(ProcessingError::new(format!("{v} fails twice"))),
                1 => Ok(()),
                _ => {
                    g.lock().unwrap().push(Instant::now());
                    Ok(())
                }
            }
        }
    })
    .build()
    .start()
    .await
    .unwrap();
    let failing_always = N as u64 / 20;
    wait_for(&running, |r| {
        let m = r.metrics();
        m.dead_lettered >= failing_always && m.retry_lane_succeeded >= failing_always
    })
    .await;
    let m = running.metrics();
    running.shutdown().await.unwrap();
    assert_eq!(m.processed, N as u64, "{m:?}");
    assert_eq!(m.handed_to_retry_lane, 2 * failing_always, "{m:?}");
    assert_eq!(m.dead_lettered, failing_always, "{m:?}");
    let attempts = attempts.lock().unwrap().clone();
    let first_retry = attempts
        .values()
        .filter(|t| t.len() > 1)
        .map(|t| t[1])
        .min()
        .unwrap();
    let last_good = *good_done.lock().unwrap().iter().max().unwrap();
    assert!(last_good < first_retry, "the main lane waited for a retry");
    for (v, times) in attempts.iter() {
        let expected = match v % 20 {
            0 | 1 => 3,
            _ => 1,
        };
        assert_eq!(times.len(), expected, "attempts of {v}");
        for w in times.windows(2) {
            assert!(
                w[1] - w[0] >= Duration::from_millis(950),
                "{v} retried before due"
            );
        }
    }
    let dead = read::read_partition(&cluster, &dlq, 0).await;
    let mut values: Vec<i64> = dead
        .iter()
        .map(|r| {
            std::str::from_utf8(r.value.as_ref().unwrap())
                .unwrap()
                .parse()
                .unwrap()
        })
        .collect();
    values.sort();
    let expected: Vec<i64> = (0..N as i64).filter(|v| v % 20 == 0).collect();
    assert_eq!(values, expected);
    for r in &dead {
        let h = |k: &str| {
            r.headers
                .iter()
                .find(|h| &h.key[..] == k.as_bytes())
                .and_then(|h| h.value.clone())
                .map(|v| String::from_utf8(v.to_vec()).unwrap())
                .unwrap_or_else(|| panic!("header {k} missing"))
        };
        assert_eq!(h("purekafka.retry.attempt"), "3");
        assert_eq!(h("purekafka.origin.topic"), topic);
        assert_eq!(h("__streams.errors.topic"), topic);
        assert!(h("purekafka.error").contains("always fails"));
        h("purekafka.origin.offset").parse::<i64>().unwrap();
    }
}

#[tokio::test]
async fn retry_lane_with_exactly_once_is_rejected() {
    let Some(bootstrap) = support::bootstrap("streams-lane-eos") else {
        return;
    };
    let err = StreamsConfig::builder("app", bootstrap)
        .commit_mode(CommitMode::ExactlyOnce)
        .failure_policy(FailurePolicy::RetryLane(RetryLane::new(
            "r",
            "d",
            Backoff::fixed(Duration::from_millis(10), 3),
        )))
        .build()
        .unwrap_err();
    assert!(err.to_string().contains("exactly-once"), "{err}");
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
    let start = |id: usize| {
        let seen = seen.clone();
        let config = config(&bootstrap, &app)
            .ordering(OrderingMode::Key)
            .max_in_flight(2, 4)
            .build()
            .unwrap();
        Streams::topology(config)
            .source(topic.as_str(), StringDeserializer, StringDeserializer)
            .for_each_async(move |rec| {
                let seen = seen.clone();
                async move {
                    tokio::time::sleep(Duration::from_millis(25)).await;
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

/// Starts a topology on its own runtime so that the test can kill it:
/// `Runtime::shutdown_background` drops every task of the instance (poll
/// loop, dispatcher, workers, producer and consumer I/O) at once, with no
/// drain, no commit, no LeaveGroup and no transaction abort.
async fn start_killable(
    topology: purekafka::streams::Topology,
) -> (tokio::runtime::Runtime, RunningStreams) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let running = rt
        .spawn(async move { topology.build().start().await })
        .await
        .unwrap()
        .unwrap();
    (rt, running)
}

/// Kills an instance started by [`start_killable`].
fn kill(rt: tokio::runtime::Runtime, running: RunningStreams) {
    rt.shutdown_background();
    // No Drop-based cleanup either: a killed process runs none.
    std::mem::forget(running);
}

/// The kill-and-restart scenario: instance A copies `topic` to `out`
/// (value `v` becomes `out-v`), is killed after `kill_after` records, and
/// instance B (same application id) finishes. Returns the values each
/// processor invocation saw.
async fn kill_and_restart(
    bootstrap: &str,
    topic: &str,
    out: &str,
    app: &str,
    mode: CommitMode,
    kill_after: u64,
    finished: impl Fn(&[i64]) -> bool,
) -> Vec<i64> {
    let seen: Arc<Mutex<Vec<i64>>> = Arc::default();
    let topology = |seen: Arc<Mutex<Vec<i64>>>| {
        let config = config(bootstrap, app)
            .ordering(OrderingMode::Key)
            .max_in_flight(32, 64)
            .commit_mode(mode.clone())
            .commit_interval(Duration::from_millis(100))
            .producer_property("transaction.timeout.ms", "5000")
            .build()
            .unwrap();
        Streams::topology(config)
            .source(topic, StringDeserializer, StringDeserializer)
            .map_async(move |rec| {
                let seen = seen.clone();
                async move {
                    tokio::time::sleep(Duration::from_millis(fastrand::u64(0..3))).await;
                    seen.lock().unwrap().push(rec.value.parse().unwrap());
                    let v = format!("out-{}", rec.value);
                    Ok(rec.with_value(v))
                }
            })
            .to(out, StringSerializer, StringSerializer)
    };
    let (rt, a) = start_killable(topology(seen.clone())).await;
    let deadline = Instant::now() + Duration::from_secs(60);
    while (seen.lock().unwrap().len() as u64) < kill_after {
        assert!(Instant::now() < deadline, "instance A made no progress");
        assert!(!a.is_finished(), "instance A stopped early");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    kill(rt, a);
    let b = topology(seen.clone()).build().start().await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(120);
    while !finished(&seen.lock().unwrap()) {
        assert!(!b.is_finished(), "instance B stopped early");
        assert!(Instant::now() < deadline, "instance B did not finish");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    b.shutdown().await.unwrap();
    let seen = seen.lock().unwrap().clone();
    seen
}

fn out_values(partitions: Vec<Vec<String>>) -> Vec<i64> {
    let mut vs: Vec<i64> = partitions
        .into_iter()
        .flatten()
        .map(|v| v.strip_prefix("out-").unwrap().parse().unwrap())
        .collect();
    vs.sort_unstable();
    vs
}

/// One killed-instance run: `n` records (97 keys) on a 3-partition input,
/// copied to a 3-partition output by [`kill_and_restart`] in `mode`, the
/// first instance killed a third of the way through and the second run
/// until every input value was seen. `None` when the test is skipped.
async fn killed_midway(test: &str, mode: CommitMode, n: usize) -> Option<KilledRun> {
    let (bootstrap, cluster, topic) = setup(test, 3).await?;
    let out = format!("{topic}-out");
    support::create_topic(&cluster, &out, 3).await;
    produce(&bootstrap, &topic, n, 97).await;
    let app = support::unique_topic(&format!("{test}-app"));
    let seen = kill_and_restart(&bootstrap, &topic, &out, &app, mode, n as u64 / 3, |seen| {
        seen.iter().collect::<BTreeSet<_>>().len() == n
    })
    .await;
    Some(KilledRun {
        bootstrap,
        out,
        seen,
    })
}

/// What [`killed_midway`] left behind.
struct KilledRun {
    bootstrap: String,
    out: String,
    /// The values each processor invocation saw, across both instances.
    seen: Vec<i64>,
}

impl KilledRun {
    /// The output's values (`out-v` read back as `v`), sorted, as a
    /// consumer with `isolation` reads them.
    async fn written(&self, isolation: purekafka::consumer::IsolationLevel) -> Vec<i64> {
        out_values(read::consume_values(&self.bootstrap, &self.out, 3, isolation).await)
    }
}

#[tokio::test]
async fn killed_at_least_once_instance_loses_nothing_on_restart() {
    const N: usize = 3000;
    let Some(run) = killed_midway("streams-kill-alo", CommitMode::Sync, N).await else {
        return;
    };
    let distinct: BTreeSet<i64> = run.seen.iter().copied().collect();
    assert_eq!(distinct.len(), N, "every input processed at least once");
    let written = run
        .written(purekafka::consumer::IsolationLevel::ReadUncommitted)
        .await;
    let written: BTreeSet<i64> = written.into_iter().collect();
    assert_eq!(written.len(), N, "every output written at least once");
}

#[tokio::test]
async fn killed_exactly_once_instance_neither_loses_nor_duplicates() {
    const N: usize = 3000;
    let Some(run) = killed_midway("streams-kill-eos", CommitMode::ExactlyOnce, N).await else {
        return;
    };
    let reprocessed = run.seen.len() - N;
    // The killed instance's open transaction holds the last stable offset
    // back until the broker aborts it (transaction.timeout.ms, 5 s here,
    // plus the broker's cleanup interval); read_committed sees nothing
    // beyond it until then.
    let deadline = Instant::now() + Duration::from_secs(90);
    let written = loop {
        let written = run
            .written(purekafka::consumer::IsolationLevel::ReadCommitted)
            .await;
        if written.len() >= N || Instant::now() > deadline {
            break written;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    let expected: Vec<i64> = (0..N as i64).collect();
    assert_eq!(
        written.len(),
        N,
        "read_committed output count (reprocessed {reprocessed})"
    );
    assert_eq!(written, expected, "zero duplicates and zero losses");
}

#[tokio::test]
async fn dead_letter_rate_guard_stops_the_app() {
    let Some((bootstrap, cluster, topic)) = setup("streams-dlq-guard", 1).await else {
        return;
    };
    let (retry_topic, dlq) = (format!("{topic}-retry"), format!("{topic}-dlq"));
    support::create_topic(&cluster, &retry_topic, 1).await;
    support::create_topic(&cluster, &dlq, 1).await;
    produce(&bootstrap, &topic, 200, 20).await;
    let lane = RetryLane::new(
        retry_topic.as_str(),
        dlq.as_str(),
        Backoff::fixed(Duration::from_millis(50), 2),
    )
    .dead_letter_guard(DeadLetterGuard {
        max_share: 0.5,
        window: Duration::from_secs(30),
        min_records: 20,
    });
    let app = support::unique_topic("streams-dlq-guard-app");
    let running = Streams::topology(
        config(&bootstrap, &app)
            .ordering(OrderingMode::Unordered)
            .failure_policy(FailurePolicy::RetryLane(lane))
            .build()
            .unwrap(),
    )
    .source(topic.as_str(), StringDeserializer, StringDeserializer)
    .for_each(|_| Err(ProcessingError::new("the dependency is down")))
    .build()
    .start()
    .await
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while !running.is_finished() {
        assert!(
            Instant::now() < deadline,
            "the guard did not stop the app: {:?}",
            running.metrics()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let stopped = running.wait().await;
    match stopped {
        Err(StreamsError::DeadLetterRate {
            dead_lettered,
            processed,
            ..
        }) => assert!(dead_lettered * 2 > processed, "{dead_lettered}/{processed}"),
        other => panic!("expected the dead-letter guard, got {other:?}"),
    }
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
