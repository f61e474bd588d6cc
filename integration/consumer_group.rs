//! The consumer's group side against the real broker, through the
//! `Consumer` API: subscribe, rebalances applied by `poll`, rebalance
//! listeners, commits and auto-commit, static membership, and bounded
//! failures (coordinator unavailable, topic deleted).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use purekafka::consumer::RebalanceListener;
use purekafka::{Cluster, Consumer, ConsumerConfig, Error, TopicPartition};
use tokio::time::Instant;

use crate::support::{self, records};

const PARTITIONS: i32 = 6;

fn config(bootstrap: &str, group: &str, props: &[(&str, &str)]) -> ConsumerConfig {
    let classic = !props.contains(&("group.protocol", "consumer"));
    let mut all: Vec<(&str, &str)> = vec![
        ("bootstrap.servers", bootstrap),
        ("client.id", "purekafka-it-group-consumer"),
        ("request.timeout.ms", "10000"),
        ("default.api.timeout.ms", "30000"),
        ("fetch.max.wait.ms", "200"),
        ("group.id", group),
        ("auto.offset.reset", "earliest"),
        ("max.poll.interval.ms", "30000"),
        ("auto.commit.interval.ms", "500"),
        ("max.poll.records", "50"),
    ];
    if classic {
        all.extend([
            ("session.timeout.ms", "10000"),
            ("heartbeat.interval.ms", "100"),
        ]);
    }
    all.extend_from_slice(props);
    ConsumerConfig::from_properties(all).expect("valid consumer config")
}

async fn setup(test: &str, partitions: i32) -> Option<(String, Cluster, String, String)> {
    let bootstrap = support::bootstrap(test)?;
    support::trace();
    let cluster = Cluster::connect(support::config(&bootstrap))
        .await
        .expect("connect");
    let topic = support::unique_topic(test);
    support::create_topic(&cluster, &topic, partitions).await;
    let group = support::unique_topic(&format!("{test}-group"));
    Some((bootstrap, cluster, topic, group))
}

/// What a listener saw, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Seen {
    Assigned(Vec<TopicPartition>),
    Revoked(Vec<TopicPartition>),
    Lost(Vec<TopicPartition>),
}

#[derive(Clone, Default)]
struct Recorder(Arc<Mutex<Vec<Seen>>>);

impl Recorder {
    fn seen(&self) -> Vec<Seen> {
        self.0.lock().unwrap().clone()
    }
}

#[purekafka::async_trait]
impl RebalanceListener for Recorder {
    async fn on_assigned(&self, _: &Consumer, p: &[TopicPartition]) {
        self.0.lock().unwrap().push(Seen::Assigned(p.to_vec()));
    }
    async fn on_revoked(&self, _: &Consumer, p: &[TopicPartition]) {
        self.0.lock().unwrap().push(Seen::Revoked(p.to_vec()));
    }
    async fn on_lost(&self, _: &Consumer, p: &[TopicPartition]) {
        self.0.lock().unwrap().push(Seen::Lost(p.to_vec()));
    }
}

/// One processed record: (consumer, partition, offset, value).
type Processed = Arc<Mutex<Vec<(usize, i32, i64, String)>>>;

/// A subscribed consumer polling in a task until stopped, recording every
/// record it is given (its "processing").
struct Worker {
    consumer: Consumer,
    recorder: Recorder,
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<()>,
}

impl Worker {
    async fn start(id: usize, config: ConsumerConfig, topic: &str, out: Processed) -> Worker {
        let consumer = Consumer::connect(config).await.expect("consumer");
        let recorder = Recorder::default();
        consumer.set_rebalance_listener(recorder.clone());
        consumer.subscribe([topic]).expect("subscribe");
        let stop = Arc::new(AtomicBool::new(false));
        let (c, s) = (consumer.clone(), stop.clone());
        let task = tokio::spawn(async move {
            while !s.load(Ordering::SeqCst) {
                let records = c.poll(Duration::from_millis(200)).await.expect("poll");
                let mut out = out.lock().unwrap();
                for r in records {
                    let v = String::from_utf8(r.value.unwrap_or_default().to_vec()).unwrap();
                    out.push((id, r.partition.partition, r.offset, v));
                }
            }
        });
        Worker {
            consumer,
            recorder,
            stop,
            task,
        }
    }

    /// Stops polling, then closes (leaving the group, committing).
    async fn close(self) {
        self.stop.store(true, Ordering::SeqCst);
        self.task.await.expect("poll task");
        let bound = Duration::from_secs(30);
        tokio::time::timeout(bound, self.consumer.close())
            .await
            .expect("close within 30 s")
            .expect("close");
    }
}

/// Waits until the workers' assignments are disjoint, cover every
/// partition, and give each worker at least one.
async fn settled(workers: &[&Worker]) {
    let deadline = Instant::now() + Duration::from_secs(40);
    loop {
        let sets: Vec<Vec<TopicPartition>> =
            workers.iter().map(|w| w.consumer.assignment()).collect();
        if covers_all(&sets) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "not settled within 40 s: {sets:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Waits until each of `ids` has processed a record.
async fn processed_by(out: &Processed, ids: &[usize]) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let seen: BTreeSet<usize> = out.lock().unwrap().iter().map(|r| r.0).collect();
        if ids.iter().all(|i| seen.contains(i)) {
            return;
        }
        assert!(Instant::now() < deadline, "{ids:?} idle for 20 s: {seen:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Three consumers join while records are being produced, one leaves
/// mid-stream, a fourth joins: every record is processed exactly once (each
/// hand-over commits the revoked partitions' positions first) and in order
/// within each partition.
async fn churn(test: &str, props: &[(&str, &str)]) {
    let Some((bootstrap, cluster, topic, group)) = setup(test, PARTITIONS).await else {
        return;
    };
    // Produce in the background, 20 records per partition every 150 ms,
    // until told to stop.
    let expected: Arc<Mutex<BTreeSet<(i32, i64)>>> = Arc::default();
    let producing = Arc::new(AtomicBool::new(true));
    let producer = {
        let (cluster, topic, expected) = (cluster.clone(), topic.clone(), expected.clone());
        let producing = producing.clone();
        tokio::spawn(async move {
            let mut round = 0;
            while producing.load(Ordering::SeqCst) {
                for p in 0..PARTITIONS {
                    let values: Vec<(i64, String)> = (0..20)
                        .map(|i| (records::now_ms(), format!("p{p}-r{round}-{i}")))
                        .collect();
                    let base = records::produce(&cluster, &topic, p, &values).await;
                    let mut e = expected.lock().unwrap();
                    e.extend((0..20).map(|i| (p, base + i)));
                }
                round += 1;
                tokio::time::sleep(Duration::from_millis(150)).await;
            }
        })
    };
    let out: Processed = Arc::default();
    let cfg = || config(&bootstrap, &group, props);
    let w1 = Worker::start(1, cfg(), &topic, out.clone()).await;
    let w2 = Worker::start(2, cfg(), &topic, out.clone()).await;
    let w3 = Worker::start(3, cfg(), &topic, out.clone()).await;
    settled(&[&w1, &w2, &w3]).await;
    processed_by(&out, &[1, 2, 3]).await;
    w2.close().await;
    settled(&[&w1, &w3]).await;
    let w4 = Worker::start(4, cfg(), &topic, out.clone()).await;
    settled(&[&w1, &w3, &w4]).await;
    processed_by(&out, &[4]).await;
    producing.store(false, Ordering::SeqCst);
    producer.await.expect("producer");
    let expected = expected.lock().unwrap().clone();
    let deadline = Instant::now() + Duration::from_secs(45);
    loop {
        let got: BTreeSet<(i32, i64)> = out.lock().unwrap().iter().map(|r| (r.1, r.2)).collect();
        if got == expected {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{} of {} records processed within 45 s",
            got.len(),
            expected.len()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let events: Vec<(usize, Vec<Seen>)> = [(1, &w1), (3, &w3), (4, &w4)]
        .iter()
        .map(|(i, w)| (*i, w.recorder.seen()))
        .collect();
    for w in [w1, w3, w4] {
        w.close().await;
    }
    let out = out.lock().unwrap().clone();
    let mut per: BTreeMap<usize, usize> = BTreeMap::new();
    for r in &out {
        *per.entry(r.0).or_default() += 1;
    }
    assert_eq!(per.len(), 4, "every consumer processed records: {per:?}");
    // Per consumer and partition, offsets strictly increase (order holds
    // and no consumer re-reads its own records).
    let mut last: HashMap<(usize, i32), i64> = HashMap::new();
    for (c, p, o, v) in &out {
        if let Some(prev) = last.insert((*c, *p), *o) {
            assert!(*o > prev, "consumer {c} partition {p}: {o} after {prev}");
        }
        assert!(v.starts_with(&format!("p{p}-")), "{v} in partition {p}");
    }
    // Each hand-over was clean (revoke → commit → next owner reads the
    // commit), so nothing was processed twice.
    let mut count: BTreeMap<(i32, i64), usize> = BTreeMap::new();
    for (_, p, o, _) in &out {
        *count.entry((*p, *o)).or_default() += 1;
    }
    let dups: Vec<_> = count.iter().filter(|(_, n)| **n > 1).collect();
    assert!(
        dups.is_empty(),
        "{} records processed twice, e.g. {:?}; events: {events:?}",
        dups.len(),
        &dups[..dups.len().min(5)]
    );
    for (i, seen) in &events {
        assert!(
            !seen.iter().any(|s| matches!(s, Seen::Lost(_))),
            "consumer {i} lost partitions: {seen:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn churn_classic_range() {
    churn(
        "cg-churn-range",
        &[("partition.assignment.strategy", "range")],
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn churn_classic_roundrobin() {
    churn(
        "cg-churn-rr",
        &[("partition.assignment.strategy", "roundrobin")],
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn churn_classic_cooperative_sticky() {
    churn(
        "cg-churn-coop",
        &[("partition.assignment.strategy", "cooperative-sticky")],
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn churn_consumer_protocol_uniform() {
    churn(
        "cg-churn-848",
        &[
            ("group.protocol", "consumer"),
            ("group.remote.assignor", "uniform"),
        ],
    )
    .await;
}

/// Polls `consumer` (as an application would) until `done` holds.
async fn poll_until(consumers: &[&Consumer], what: &str, done: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(45);
    while !done() {
        assert!(Instant::now() < deadline, "{what} within 45 s");
        for c in consumers {
            c.poll(Duration::from_millis(100)).await.expect("poll");
        }
    }
}

fn covers_all(sets: &[Vec<TopicPartition>]) -> bool {
    let total: usize = sets.iter().map(Vec::len).sum();
    let union: BTreeSet<&TopicPartition> = sets.iter().flatten().collect();
    total == PARTITIONS as usize && union.len() == total && sets.iter().all(|s| !s.is_empty())
}

/// Polls both members until they share a generation, together own every
/// partition, and nothing changes for half a second (five heartbeat
/// intervals: a rebalance the coordinator starts reaches a member at its
/// next heartbeat).
async fn settled_generation(a: &Consumer, b: &Consumer) {
    let generation = |c: &Consumer| c.group_metadata().map(|m| m.generation_id).ok();
    let deadline = Instant::now() + Duration::from_secs(45);
    let mut stable_since: Option<(Instant, Option<i32>)> = None;
    loop {
        assert!(Instant::now() < deadline, "the group settled within 45 s");
        for c in [a, b] {
            c.poll(Duration::from_millis(100)).await.expect("poll");
        }
        let now = (generation(a), generation(b));
        let settled =
            now.0.is_some() && now.0 == now.1 && covers_all(&[a.assignment(), b.assignment()]);
        stable_since = match stable_since {
            Some((since, g)) if settled && g == now.0 => {
                if since.elapsed() >= Duration::from_millis(500) {
                    return;
                }
                Some((since, g))
            }
            _ if settled => Some((Instant::now(), now.0)),
            _ => None,
        };
    }
}

/// A static member (KIP-345) that closes and comes back within the session
/// timeout gets its partitions back without a rebalance: the other member
/// sees no listener call and keeps its generation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn static_member_restart_causes_no_rebalance() {
    let Some((bootstrap, _cluster, topic, group)) = setup("cg-static", PARTITIONS).await else {
        return;
    };
    let cfg = |id: &str| config(&bootstrap, &group, &[("group.instance.id", id)]);
    let a = Consumer::connect(cfg("a")).await.expect("a");
    let b = Consumer::connect(cfg("b")).await.expect("b");
    let b_seen = Recorder::default();
    b.set_rebalance_listener(b_seen.clone());
    a.subscribe([topic.as_str()]).expect("subscribe");
    b.subscribe([topic.as_str()]).expect("subscribe");
    // Settled: no further rebalance pending (a rebalance reaches every
    // member at its next heartbeat, 100 ms here).
    settled_generation(&a, &b).await;
    let a_before = a.assignment();
    let b_before = b.assignment();
    let b_generation = b.group_metadata().expect("metadata").generation_id;
    let b_events = b_seen.seen();
    a.close().await.expect("close a");
    let a2 = Consumer::connect(cfg("a")).await.expect("a2");
    a2.subscribe([topic.as_str()]).expect("subscribe");
    poll_until(&[&a2, &b], "a2 got its partitions back", || {
        a2.assignment() == a_before
    })
    .await;
    assert_eq!(b.assignment(), b_before);
    assert_eq!(
        b.group_metadata().expect("metadata").generation_id,
        b_generation
    );
    assert_eq!(b_seen.seen(), b_events, "b saw a rebalance");
    for c in [a2, b] {
        c.close().await.expect("close");
    }
}

/// Polls until `n` records arrived; returns them.
async fn poll_n(consumer: &Consumer, n: usize) -> Vec<purekafka::ConsumerRecord> {
    let deadline = Instant::now() + Duration::from_secs(45);
    let mut out = Vec::new();
    while out.len() < n {
        assert!(Instant::now() < deadline, "{} of {n} records", out.len());
        out.extend(
            consumer
                .poll(Duration::from_millis(200))
                .await
                .expect("poll"),
        );
    }
    out
}

/// `commit_async` callbacks run in commit order, with metadata strings kept;
/// `committed` reads back the last one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn async_commit_callbacks_in_order() {
    let Some((bootstrap, cluster, topic, group)) = setup("cg-async", 1).await else {
        return;
    };
    records::produce(&cluster, &topic, 0, &records::values("v", 50)).await;
    let consumer = Consumer::connect(config(
        &bootstrap,
        &group,
        &[("enable.auto.commit", "false"), ("max.poll.records", "10")],
    ))
    .await
    .expect("consumer");
    consumer.subscribe([topic.as_str()]).expect("subscribe");
    let tp = TopicPartition::new(topic.as_str(), 0);
    let order = Arc::new(Mutex::new(Vec::new()));
    for i in 0..5 {
        poll_n(&consumer, 1).await;
        let order = order.clone();
        consumer
            .commit_async(move |r| order.lock().unwrap().push((i, r.is_ok())))
            .await;
    }
    let mut meta = purekafka::consumer::Offsets::new();
    let mut last = purekafka::consumer::OffsetAndMetadata::new(42);
    last.metadata = "checkpoint-7".into();
    meta.insert(tp.clone(), last);
    consumer.commit_sync_offsets(meta).await.expect("commit");
    assert_eq!(
        *order.lock().unwrap(),
        (0..5).map(|i| (i, true)).collect::<Vec<_>>()
    );
    let committed = consumer
        .committed(std::slice::from_ref(&tp))
        .await
        .expect("committed");
    assert_eq!(committed[&tp].offset, 42);
    assert_eq!(committed[&tp].metadata, "checkpoint-7");
    consumer.commit_sync().await.expect("commit positions");
    let position = consumer.position(&tp).await.expect("position");
    let committed = consumer
        .committed(std::slice::from_ref(&tp))
        .await
        .expect("committed");
    assert_eq!(committed[&tp].offset, position);
    assert!(committed[&tp].leader_epoch.is_some(), "{committed:?}");
    consumer.close().await.expect("close");
}

/// Auto-commit commits only what `poll` handed out: the committed offset
/// never passes the position, and catches up with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_commit_never_passes_handed_out_records() {
    let Some((bootstrap, cluster, topic, group)) = setup("cg-auto", 1).await else {
        return;
    };
    records::produce(&cluster, &topic, 0, &records::values("v", 200)).await;
    let consumer = Consumer::connect(config(
        &bootstrap,
        &group,
        &[("auto.commit.interval.ms", "50"), ("max.poll.records", "7")],
    ))
    .await
    .expect("consumer");
    consumer.subscribe([topic.as_str()]).expect("subscribe");
    let tp = TopicPartition::new(topic.as_str(), 0);
    let mut handed = 0i64;
    let mut max_committed = 0i64;
    for _ in 0..12 {
        let got = poll_n(&consumer, 1).await;
        handed = got.last().expect("a record").offset + 1;
        tokio::time::sleep(Duration::from_millis(75)).await;
        let committed = consumer
            .committed(std::slice::from_ref(&tp))
            .await
            .expect("committed");
        if let Some(c) = committed.get(&tp) {
            assert!(
                c.offset <= handed,
                "committed {} > handed {handed}",
                c.offset
            );
            max_committed = max_committed.max(c.offset);
        }
    }
    assert!(handed < 200, "more than the polls returned was read");
    assert!(max_committed > 0, "auto-commit never committed");
    // The next poll commits everything handed out so far.
    let _ = consumer
        .poll(Duration::from_millis(10))
        .await
        .expect("poll");
    consumer.close().await.expect("close");
    let check = Consumer::connect(config(&bootstrap, &group, &[]))
        .await
        .expect("consumer");
    let committed = check
        .committed(std::slice::from_ref(&tp))
        .await
        .expect("committed");
    assert!(committed[&tp].offset >= handed, "{committed:?} < {handed}");
    check.close().await.expect("close");
}

/// A topic deleted while a group consumes it gives a typed error naming it
/// (or its partition is revoked), never a hang.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn topic_deleted_mid_consume_is_bounded() {
    let Some((bootstrap, cluster, topic, group)) = setup("cg-deleted", 1).await else {
        return;
    };
    records::produce(&cluster, &topic, 0, &records::values("v", 5)).await;
    let consumer = Consumer::connect(config(
        &bootstrap,
        &group,
        &[("default.api.timeout.ms", "1000")],
    ))
    .await
    .expect("consumer");
    consumer.subscribe([topic.as_str()]).expect("subscribe");
    assert_eq!(poll_n(&consumer, 5).await.len(), 5);
    records::delete_topic(&cluster, &topic).await;
    // Both bounds follow `default.api.timeout.ms` (1 s here): the revoked
    // partition's commit is retried until then.
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        assert!(Instant::now() < deadline, "nothing within 15 s");
        match consumer.poll(Duration::from_millis(300)).await {
            Ok(r) => {
                assert!(r.is_empty(), "{r:?}");
                if consumer.assignment().is_empty() {
                    break;
                }
            }
            Err(Error::UnknownPartition { topic: t, .. }) => {
                assert_eq!(t, topic);
                break;
            }
            Err(e) => panic!("expected UnknownPartition, got {e}"),
        }
    }
    tokio::time::timeout(Duration::from_secs(10), consumer.close())
        .await
        .expect("close is bounded")
        .expect("close");
}

/// Subscribing needs a group id; subscribing after a manual assignment is
/// refused; both errors name what to fix.
#[tokio::test]
async fn subscribe_errors_name_the_fix() {
    let Some(bootstrap) = support::bootstrap("cg-errors") else {
        return;
    };
    let no_group = ConsumerConfig::from_properties([("bootstrap.servers", bootstrap.as_str())])
        .expect("config");
    let c = Consumer::connect(no_group).await.expect("consumer");
    let e = c.subscribe(["t"]).unwrap_err();
    assert!(e.to_string().contains("group.id"), "{e}");
    let e = c.commit_sync().await.unwrap_err();
    assert!(e.to_string().contains("group.id"), "{e}");
    let c = Consumer::connect(config(&bootstrap, "g", &[]))
        .await
        .expect("consumer");
    c.assign(vec![TopicPartition::new("t", 0)]);
    let e = c.subscribe(["t"]).unwrap_err();
    assert!(e.to_string().contains("assign"), "{e}");
}

/// No coordinator can be found (the fake broker answers every
/// FindCoordinator with COORDINATOR_NOT_AVAILABLE): polls return empty
/// within their timeout, commits and offset reads fail with a typed error
/// naming the group after `default.api.timeout.ms`, and close is bounded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unavailable_coordinator_is_a_typed_error_not_a_hang() {
    // The fake needs no broker; still follow the suite's skip rule.
    if support::bootstrap("cg-no-coordinator").is_none() {
        return;
    }
    support::trace();
    let port = support::no_coordinator::start().await;
    let bootstrap = format!("127.0.0.1:{port}");
    let config = ConsumerConfig::from_properties([
        ("bootstrap.servers", bootstrap.as_str()),
        ("group.id", "orphan-group"),
        // The typed error is the promise, not how long it takes: 0.5 s of
        // FindCoordinator retries (at 50-200 ms) is enough to see it.
        ("default.api.timeout.ms", "500"),
        ("retry.backoff.ms", "50"),
        ("retry.backoff.max.ms", "200"),
    ])
    .expect("config");
    let consumer = Consumer::connect(config).await.expect("consumer");
    consumer.subscribe(["t"]).expect("subscribe");
    for _ in 0..3 {
        let started = Instant::now();
        let records = consumer
            .poll(Duration::from_millis(100))
            .await
            .expect("poll");
        assert!(records.is_empty());
        assert!(started.elapsed() < Duration::from_secs(2), "poll overran");
    }
    let tp = TopicPartition::new("t", 0);
    let mut offsets = purekafka::consumer::Offsets::new();
    offsets.insert(tp.clone(), purekafka::consumer::OffsetAndMetadata::new(1));
    let started = Instant::now();
    let e = consumer.commit_sync_offsets(offsets).await.unwrap_err();
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "commit overran"
    );
    assert!(
        matches!(
            e,
            Error::Timeout {
                config_key: "default.api.timeout.ms",
                ..
            }
        ),
        "{e:?}"
    );
    assert!(e.to_string().contains("orphan-group"), "{e}");
    let e = consumer.committed(&[tp]).await.unwrap_err();
    assert!(e.to_string().contains("orphan-group"), "{e}");
    tokio::time::timeout(Duration::from_secs(10), consumer.close())
        .await
        .expect("close is bounded")
        .expect("close");
}

/// A pattern subscription picks up matching topics, including one created
/// after subscribing (re-evaluated every `metadata.max.age.ms`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pattern_subscription_follows_new_topics() {
    let Some((bootstrap, cluster, first, group)) = setup("cg-pattern", 1).await else {
        return;
    };
    let prefix = format!("{first}-x");
    let second = format!("{prefix}-a");
    support::create_topic(&cluster, &second, 1).await;
    records::produce(&cluster, &first, 0, &records::values("f", 3)).await;
    records::produce(&cluster, &second, 0, &records::values("a", 3)).await;
    let consumer = Consumer::connect(config(
        &bootstrap,
        &group,
        &[("metadata.max.age.ms", "500")],
    ))
    .await
    .expect("consumer");
    let p = prefix.clone();
    consumer
        .subscribe_matching(move |t| t.starts_with(&p))
        .expect("subscribe");
    let got = poll_n(&consumer, 3).await;
    assert!(got.iter().all(|r| *r.partition.topic == *second), "{got:?}");
    let third = format!("{prefix}-b");
    support::create_topic(&cluster, &third, 1).await;
    records::produce(&cluster, &third, 0, &records::values("b", 4)).await;
    let got = poll_n(&consumer, 4).await;
    assert!(got.iter().all(|r| *r.partition.topic == *third), "{got:?}");
    let mut subscribed = consumer.subscription();
    subscribed.sort();
    assert_eq!(subscribed, vec![second, third]);
    consumer.close().await.expect("close");
}

/// Commits through the `Consumer` handle from `on_revoked` (auto-commit
/// off) and the next owner starts exactly there.
struct CommitOnRevoke(Arc<Mutex<Vec<i64>>>);

#[purekafka::async_trait]
impl RebalanceListener for CommitOnRevoke {
    async fn on_revoked(&self, c: &Consumer, p: &[TopicPartition]) {
        c.commit_sync().await.expect("commit in on_revoked");
        for tp in p {
            let pos = c.position(tp).await.expect("position");
            self.0.lock().unwrap().push(pos);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listener_commits_on_revoke_and_next_owner_resumes_there() {
    let Some((bootstrap, cluster, topic, group)) = setup("cg-listener", 1).await else {
        return;
    };
    records::produce(&cluster, &topic, 0, &records::values("v", 30)).await;
    let cfg = || {
        config(
            &bootstrap,
            &group,
            &[("enable.auto.commit", "false"), ("max.poll.records", "10")],
        )
    };
    let first = Consumer::connect(cfg()).await.expect("consumer");
    let revoked_at = Arc::new(Mutex::new(Vec::new()));
    first.set_rebalance_listener(CommitOnRevoke(revoked_at.clone()));
    first.subscribe([topic.as_str()]).expect("subscribe");
    let got = poll_n(&first, 10).await;
    let handed = got.last().expect("records").offset + 1;
    first.close().await.expect("close");
    assert_eq!(*revoked_at.lock().unwrap(), vec![handed]);
    let second = Consumer::connect(cfg()).await.expect("consumer");
    second.subscribe([topic.as_str()]).expect("subscribe");
    let got = poll_n(&second, 1).await;
    assert_eq!(got[0].offset, handed, "resumed elsewhere than the commit");
    second.close().await.expect("close");
}
