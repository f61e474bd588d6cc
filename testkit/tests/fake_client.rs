//! purekafka's own clients against the fake cluster: admin, idempotent
//! producer, assigned and group consumers, fault rules, leader moves, broker
//! kills, and garbage on the wire.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use kafka_protocol::messages::ApiKey;
use purekafka::admin::NewTopic;
use purekafka::producer::{Producer, ProducerConfig, ProducerRecord};
use purekafka::{Admin, ClientConfig, Consumer, ConsumerConfig, TopicPartition};
use purekafka_testkit::fake::{Action, FakeCluster, GroupPhase, Rule};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn client(bootstrap: &str) -> purekafka::ClientConfigBuilder {
    ClientConfig::builder()
        .bootstrap_servers(bootstrap)
        .request_timeout(Duration::from_secs(5))
        .default_api_timeout(Duration::from_secs(15))
}

async fn producer(bootstrap: &str) -> Producer {
    let config = ProducerConfig::builder()
        .client(client(bootstrap))
        .delivery_timeout(Duration::from_secs(15))
        .build()
        .expect("producer config");
    Producer::connect(config).await.expect("producer")
}

fn consumer_config(bootstrap: &str, group: Option<&str>) -> ConsumerConfig {
    let mut props = vec![
        ("bootstrap.servers", bootstrap),
        ("request.timeout.ms", "5000"),
        ("default.api.timeout.ms", "15000"),
        ("fetch.max.wait.ms", "100"),
        ("auto.offset.reset", "earliest"),
        ("session.timeout.ms", "6000"),
        ("heartbeat.interval.ms", "200"),
    ];
    if let Some(g) = group {
        props.push(("group.id", g));
    }
    ConsumerConfig::from_properties(props).expect("consumer config")
}

/// Sends `n` keyed records `prefix-i` and waits for every acknowledgement.
async fn send_all(producer: &Producer, topic: &str, prefix: &str, n: usize) -> Vec<i64> {
    let mut pending = Vec::with_capacity(n);
    for i in 0..n {
        let record = ProducerRecord::new(topic)
            .key(format!("k{i}"))
            .value(format!("{prefix}-{i}"));
        pending.push(producer.send(record).await.expect("enqueue"));
    }
    let mut offsets = Vec::with_capacity(n);
    for p in pending {
        offsets.push(p.await.expect("delivered").offset);
    }
    offsets
}

/// Polls `consumer` until `n` distinct values arrived or 20 s passed.
async fn poll_values(consumer: &Consumer, n: usize) -> BTreeSet<String> {
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut seen = BTreeSet::new();
    while seen.len() < n && Instant::now() < deadline {
        for r in consumer
            .poll(Duration::from_millis(200))
            .await
            .expect("poll")
        {
            let value = r.value.expect("value");
            seen.insert(String::from_utf8(value.to_vec()).expect("utf8"));
        }
    }
    seen
}

fn expected(prefix: &str, n: usize) -> BTreeSet<String> {
    (0..n).map(|i| format!("{prefix}-{i}")).collect()
}

#[tokio::test]
async fn admin_creates_topics_and_metadata_shows_leaders_on_three_brokers() {
    let fake = FakeCluster::start(3).await.expect("fake");
    let admin = Admin::connect(client(&fake.bootstrap()).build().expect("config"))
        .await
        .expect("admin");
    let created = admin
        .create_topics(&[NewTopic::new("orders", 6)], false)
        .await
        .expect("create");
    assert!(created.values().all(|r| r.is_ok()), "{created:?}");
    let again = admin
        .create_topics(&[NewTopic::new("orders", 6)], false)
        .await
        .expect("create again");
    assert!(
        again.values().all(|r| r.is_err()),
        "a second create must fail: {again:?}"
    );
    let leaders: BTreeSet<i32> = fake.with_state(|s| {
        s.topics["orders"]
            .partitions
            .iter()
            .map(|p| p.leader)
            .collect()
    });
    assert_eq!(
        leaders,
        BTreeSet::from([0, 1, 2]),
        "leaders spread over the brokers"
    );
    let deleted = admin
        .delete_topics(&["orders".to_string()])
        .await
        .expect("delete");
    assert!(deleted.values().all(|r| r.is_ok()), "{deleted:?}");
    assert!(fake.with_state(|s| s.topics.is_empty()));
}

#[tokio::test]
async fn idempotent_producer_and_assigned_consumer_round_trip() {
    let fake = FakeCluster::start(3).await.expect("fake");
    fake.create_topic("t", 3).expect("topic");
    let producer = producer(&fake.bootstrap()).await;
    let offsets = send_all(&producer, "t", "v", 300).await;
    assert_eq!(offsets.len(), 300);
    let stored: usize = (0..3)
        .map(|p| fake.records("t", p).expect("records").len())
        .sum();
    assert_eq!(stored, 300, "every record stored exactly once");
    let producer_ids: BTreeSet<i64> = fake.with_state(|s| {
        s.topics["t"]
            .partitions
            .iter()
            .flat_map(|p| p.batches().iter().map(|b| b.producer_id))
            .collect()
    });
    assert!(
        producer_ids.iter().all(|id| *id >= 0),
        "batches are idempotent: {producer_ids:?}"
    );

    let consumer = Consumer::connect(consumer_config(&fake.bootstrap(), None))
        .await
        .expect("consumer");
    consumer.assign((0..3).map(|p| TopicPartition::new("t", p)).collect());
    assert_eq!(poll_values(&consumer, 300).await, expected("v", 300));
}

#[tokio::test]
async fn a_refused_produce_is_retried_and_stored_once() {
    let fake = FakeCluster::start(1).await.expect("fake");
    fake.create_topic("retry", 1).expect("topic");
    fake.intercept(
        Rule::new(Action::Error(6))
            .on_api(ApiKey::Produce)
            .on_topic("retry")
            .times(2),
    );
    let producer = producer(&fake.bootstrap()).await;
    let offsets = send_all(&producer, "retry", "r", 5).await;
    assert_eq!(offsets, vec![0, 1, 2, 3, 4]);
    assert_eq!(fake.rule_hits(), vec![2], "both refusals were served");
    let values: Vec<_> = fake
        .records("retry", 0)
        .expect("records")
        .into_iter()
        .map(|r| r.value)
        .collect();
    assert_eq!(
        values.len(),
        5,
        "refused batches appended nothing: {values:?}"
    );
}

#[tokio::test]
async fn consumer_follows_a_moved_leader() {
    let fake = FakeCluster::start(3).await.expect("fake");
    fake.create_topic("moving", 1).expect("topic");
    let producer = producer(&fake.bootstrap()).await;
    send_all(&producer, "moving", "a", 20).await;
    let consumer = Consumer::connect(consumer_config(&fake.bootstrap(), None))
        .await
        .expect("consumer");
    consumer.assign(vec![TopicPartition::new("moving", 0)]);
    assert_eq!(poll_values(&consumer, 20).await, expected("a", 20));
    let old = fake.with_state(|s| s.topics["moving"].partitions[0].leader);
    let epoch = fake.move_leader("moving", 0, (old + 1) % 3).expect("move");
    assert_eq!(epoch, 1);
    send_all(&producer, "moving", "b", 20).await;
    assert_eq!(poll_values(&consumer, 20).await, expected("b", 20));
}

#[tokio::test]
async fn killing_the_leader_moves_partitions_and_clients_carry_on() {
    let fake = FakeCluster::start(3).await.expect("fake");
    fake.create_topic("k", 1).expect("topic");
    let producer = producer(&fake.bootstrap()).await;
    send_all(&producer, "k", "before", 10).await;
    let leader = fake.with_state(|s| s.topics["k"].partitions[0].leader);
    fake.kill_broker(leader).expect("kill");
    let after = fake.with_state(|s| s.topics["k"].partitions[0].leader);
    assert_ne!(after, leader);
    send_all(&producer, "k", "after", 10).await;
    assert_eq!(fake.records("k", 0).expect("records").len(), 20);
    fake.restart_broker(leader).await.expect("restart");
    assert!(fake.with_state(|s| s.brokers.iter().all(|b| b.alive)));
}

#[tokio::test]
async fn two_group_members_split_partitions_and_commit() {
    let fake = FakeCluster::start(3).await.expect("fake");
    fake.create_topic("g", 4).expect("topic");
    let producer = producer(&fake.bootstrap()).await;
    send_all(&producer, "g", "x", 200).await;

    let a = Consumer::connect(consumer_config(&fake.bootstrap(), Some("grp")))
        .await
        .expect("a");
    let b = Consumer::connect(consumer_config(&fake.bootstrap(), Some("grp")))
        .await
        .expect("b");
    a.subscribe(["g"]).expect("subscribe");
    b.subscribe(["g"]).expect("subscribe");
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut seen = BTreeSet::new();
    while Instant::now() < deadline {
        for c in [&a, &b] {
            for r in c.poll(Duration::from_millis(100)).await.expect("poll") {
                seen.insert(String::from_utf8(r.value.expect("value").to_vec()).expect("utf8"));
            }
        }
        let members = fake.group_members("grp").len();
        let stable = matches!(fake.group_phase("grp"), Some((GroupPhase::Stable, _)));
        if seen.len() == 200 && members == 2 && stable {
            break;
        }
    }
    assert_eq!(seen, expected("x", 200));
    assert_eq!(fake.group_members("grp").len(), 2);
    a.commit_sync().await.expect("commit a");
    b.commit_sync().await.expect("commit b");
    let committed: i64 = (0..4)
        .map(|p| fake.committed_offset("grp", "g", p).unwrap_or(0))
        .sum();
    assert_eq!(committed, 200, "both members committed their end offsets");
    a.close().await.expect("close a");
    let deadline = Instant::now() + Duration::from_secs(10);
    while fake.group_members("grp").len() != 1 && Instant::now() < deadline {
        b.poll(Duration::from_millis(100)).await.expect("poll b");
    }
    assert_eq!(fake.group_members("grp").len(), 1, "a left the group");
}

#[tokio::test]
async fn garbage_closes_the_connection_and_the_fake_keeps_serving() {
    let fake = FakeCluster::start(1).await.expect("fake");
    let (_, port) = fake.brokers()[0];
    let garbage: [&[u8]; 4] = [
        &[0, 0, 0, 8, 0x7f, 0x7f, 0, 0, 0, 0, 0, 1],
        &[0xff, 0xff, 0xff, 0xff],
        &[0, 0, 0, 12, 0, 3, 0, 99, 0, 0, 0, 7, 1, 2, 3, 4],
        &[0, 0, 0, 10, 0, 0, 0, 9, 0, 0, 0, 1, 0xff, 0xff],
    ];
    for bytes in garbage {
        let mut sock = tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .expect("connect");
        sock.write_all(bytes).await.expect("write");
        let mut buf = [0u8; 64];
        let read = tokio::time::timeout(Duration::from_secs(5), sock.read(&mut buf))
            .await
            .expect("the fake answers or closes, never hangs");
        assert!(
            matches!(read, Ok(0) | Err(_)),
            "closed after {bytes:?}: {read:?}"
        );
    }
    // ApiVersions at an unknown version: UNSUPPORTED_VERSION at v0 (KIP-511).
    let mut sock = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .expect("connect");
    sock.write_all(&[0, 0, 0, 10, 0, 18, 0, 99, 0, 0, 0, 42, 0, 0])
        .await
        .expect("write");
    let size = sock.read_i32().await.expect("size");
    let mut body = vec![0u8; usize::try_from(size).expect("size")];
    sock.read_exact(&mut body).await.expect("body");
    assert_eq!(&body[..4], &42i32.to_be_bytes(), "correlation id");
    assert_eq!(&body[4..6], &35i16.to_be_bytes(), "UNSUPPORTED_VERSION");
    let producer = producer(&fake.bootstrap()).await;
    fake.create_topic("after", 1).expect("topic");
    assert_eq!(send_all(&producer, "after", "ok", 3).await, vec![0, 1, 2]);
}

#[tokio::test]
async fn killing_the_group_coordinator_moves_the_group_and_commits_still_land() {
    let fake = FakeCluster::start(3).await.expect("fake");
    fake.create_topic("fo", 3).expect("topic");
    let producer = producer(&fake.bootstrap()).await;
    send_all(&producer, "fo", "a", 30).await;
    let consumer = Consumer::connect(consumer_config(&fake.bootstrap(), Some("fo-group")))
        .await
        .expect("consumer");
    consumer.subscribe(["fo"]).expect("subscribe");
    assert_eq!(poll_values(&consumer, 30).await, expected("a", 30));
    consumer.commit_sync().await.expect("commit before");
    let coordinator = fake
        .with_state(|s| s.coordinator_for("fo-group").map(|b| b.id))
        .expect("coordinator");
    fake.kill_broker(coordinator).expect("kill");
    let moved = fake.with_state(|s| s.coordinator_for("fo-group").map(|b| b.id));
    assert!(moved.is_some_and(|b| b != coordinator), "{moved:?}");
    send_all(&producer, "fo", "b", 30).await;
    assert_eq!(poll_values(&consumer, 30).await, expected("b", 30));
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let committed: i64 = (0..3)
            .map(|p| fake.committed_offset("fo-group", "fo", p).unwrap_or(0))
            .sum();
        if committed == 60 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "commits after failover: {committed} of 60"
        );
        let _ = consumer.commit_sync().await;
        consumer
            .poll(Duration::from_millis(100))
            .await
            .expect("poll");
    }
}

/// A group member keeps its session while the application's runtime is
/// blocked longer than `session.timeout.ms` (a streams app's store commits,
/// a slow callback): its heartbeats do not wait for that runtime, as the
/// Java consumer's heartbeat thread does not wait for `poll`. The fake runs
/// on a runtime of its own, so it keeps serving meanwhile, and the client
/// on a current-thread runtime (as in `#[tokio::test]`), which the test
/// blocks outright. Before heartbeats had their own thread the coordinator
/// evicted the member during the block (a new generation, and the member
/// found out as UNKNOWN_MEMBER_ID).
#[test]
fn a_blocked_application_runtime_does_not_cost_the_group_session() {
    let group = "hb-grp";
    let fake_rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("fake runtime");
    let fake = fake_rt.block_on(FakeCluster::start(1)).expect("fake");
    fake.create_topic("hb", 2).expect("topic");
    let client_rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("client runtime");
    client_rt.block_on(async {
        let config = ConsumerConfig::from_properties([
            ("bootstrap.servers", fake.bootstrap().as_str()),
            ("request.timeout.ms", "5000"),
            ("default.api.timeout.ms", "15000"),
            ("fetch.max.wait.ms", "100"),
            ("group.id", group),
            ("session.timeout.ms", "3000"),
            ("heartbeat.interval.ms", "200"),
        ])
        .expect("consumer config");
        let consumer = Consumer::connect(config).await.expect("consumer");
        consumer.subscribe(["hb"]).expect("subscribe");
        let deadline = Instant::now() + Duration::from_secs(30);
        while consumer.assignment().len() < 2 {
            assert!(Instant::now() < deadline, "no assignment within 30 s");
            consumer
                .poll(Duration::from_millis(100))
                .await
                .expect("poll");
        }
        let before = fake.group_phase(group).expect("group");
        assert_eq!(before.0, GroupPhase::Stable);
        let members = fake.group_members(group);
        assert_eq!(members.len(), 1);

        // Twice the session timeout without yielding to the runtime.
        std::thread::sleep(Duration::from_secs(6));

        assert_eq!(
            fake.group_phase(group),
            Some(before),
            "the blocked member was evicted (the group moved on)"
        );
        assert_eq!(fake.group_members(group), members);
        consumer
            .poll(Duration::from_millis(100))
            .await
            .expect("poll");
        assert_eq!(consumer.assignment().len(), 2);
        consumer.close().await.expect("close");
    });
    drop(fake);
    fake_rt.shutdown_background();
}

/// A full refresh (all topics, as a pattern subscription asks for) that
/// waits for another caller's partial refresh is not answered by it: it
/// sees a topic created while the partial one was in flight.
#[tokio::test]
async fn a_full_refresh_is_not_answered_by_a_partial_one() {
    let fake = FakeCluster::start(1).await.expect("fake");
    fake.create_topic("known", 1).expect("topic");
    let cluster = purekafka::Cluster::connect(client(&fake.bootstrap()).build().expect("config"))
        .await
        .expect("cluster");
    fake.intercept(
        Rule::new(Action::DelayAnswer(Duration::from_millis(300)))
            .on_api(ApiKey::Metadata)
            .on_topic("known")
            .once(),
    );
    let partial = {
        let cluster = cluster.clone();
        tokio::spawn(async move { cluster.refresh_metadata(Some(&["known".to_owned()])).await })
    };
    // The partial request is in flight (its answer held back) when the
    // topic appears and the full refresh is asked for.
    tokio::time::sleep(Duration::from_millis(100)).await;
    fake.create_topic("created", 1).expect("topic");
    let full = cluster.refresh_metadata(None).await.expect("full refresh");
    let partial = partial.await.expect("task").expect("partial refresh");
    assert!(partial.topics.contains_key("known"));
    assert_eq!(
        fake.rule_hits(),
        vec![1],
        "the partial request was held back"
    );
    assert!(
        full.topics.contains_key("created"),
        "the full refresh was answered by the partial one: {:?}",
        full.topics.keys().collect::<Vec<_>>()
    );
}
