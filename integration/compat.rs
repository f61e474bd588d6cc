//! Version-matrix smoke tests: the client against a Kafka release other than
//! the pinned one (`KAFKA_VERSION=3.9.1 scripts/kafka up`; `scripts/compat`
//! runs every release of the matrix). The broker is named by
//! `PUREKAFKA_BOOTSTRAP_COMPAT` and its release by `PUREKAFKA_COMPAT_VERSION`.
//! Covers produce and consume in every codec, a consumer group with commits
//! and a 3-member group, transactions read `read_committed` (by us and by
//! Java's consumer), topic admin, the streams runtime (`runtime`), the
//! newest features (`newest`: share groups, client telemetry, streams
//! groups), and what an older broker lacks: refused through its ApiVersions
//! answer (KIP-511), by API name, not a hang. Results:
//! docs/compatibility.md.
//!
//! Without `PUREKAFKA_BOOTSTRAP_COMPAT` each test prints `SKIPPED`, unless
//! `CI=true`, where it fails (the rule of `support`).

use std::collections::BTreeSet;
use std::time::Duration;

use purekafka::admin::{Admin, NewTopic};
use purekafka::consumer::{AutoOffsetReset, Consumer, ConsumerConfig, IsolationLevel};
use purekafka::producer::{Producer, ProducerConfig, ProducerRecord};
use purekafka::protocol::compression::Compression;
use purekafka::{Cluster, Error, TopicPartition};

use crate::support::{self, java, read::consume_values};

mod newest;
mod runtime;

/// The compat broker's address and release, or `None` (after printing why)
/// outside CI. Under `CI=true` an unset variable or a silent broker fails.
fn compat_broker(test: &str) -> Option<(String, Release)> {
    let ci = std::env::var("CI").is_ok_and(|v| {
        let v = v.trim().to_ascii_lowercase();
        !v.is_empty() && v != "0" && v != "false"
    });
    let how = "run `KAFKA_VERSION=3.9.1 scripts/kafka up` and set PUREKAFKA_BOOTSTRAP_COMPAT \
               and PUREKAFKA_COMPAT_VERSION, or run scripts/compat";
    let Some(addr) = std::env::var("PUREKAFKA_BOOTSTRAP_COMPAT")
        .ok()
        .filter(|v| !v.trim().is_empty())
    else {
        assert!(
            !ci,
            "{test}: PUREKAFKA_BOOTSTRAP_COMPAT is unset (CI=true forbids skipping; {how})"
        );
        eprintln!("SKIPPED {test}: PUREKAFKA_BOOTSTRAP_COMPAT is unset; {how}");
        return None;
    };
    let version = std::env::var("PUREKAFKA_COMPAT_VERSION").unwrap_or_else(|_| {
        panic!("{test}: PUREKAFKA_BOOTSTRAP_COMPAT is set but PUREKAFKA_COMPAT_VERSION is not")
    });
    let release = Release::parse(&version)
        .unwrap_or_else(|| panic!("{test}: PUREKAFKA_COMPAT_VERSION={version}: expected X.Y.Z"));
    let reachable = addr.split(',').any(|a| {
        a.trim()
            .parse::<std::net::SocketAddr>()
            .ok()
            .and_then(|sa| std::net::TcpStream::connect_timeout(&sa, Duration::from_secs(2)).ok())
            .is_some()
    });
    assert!(reachable, "{test}: no Kafka {version} broker at {addr}");
    support::trace();
    Some((addr, release))
}

/// A Kafka release, `major.minor.patch`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Release(u16, u16, u16);

impl Release {
    fn parse(s: &str) -> Option<Release> {
        let mut it = s.trim().split('.').map(|p| p.parse::<u16>().ok());
        let r = Release(it.next()??, it.next()??, it.next()??);
        it.next().is_none().then_some(r)
    }
}

fn client(bootstrap: &str) -> purekafka::ClientConfigBuilder {
    purekafka::ClientConfig::builder()
        .bootstrap_servers(bootstrap)
        .client_id("purekafka-compat")
        .request_timeout(Duration::from_secs(10))
        .default_api_timeout(Duration::from_secs(30))
}

async fn new_topic(bootstrap: &str, prefix: &str, partitions: i32) -> String {
    let cluster = Cluster::connect(support::config(bootstrap))
        .await
        .expect("cluster");
    let topic = support::unique_topic(prefix);
    support::create_topic(&cluster, &topic, partitions).await;
    topic
}

async fn send_values(producer: &Producer, topic: &str, prefix: &str, n: usize) {
    let mut acks = Vec::new();
    for i in 0..n {
        let record = ProducerRecord::new(topic)
            .key(format!("k{i}"))
            .value(format!("{prefix}-{i:04}"));
        acks.push(producer.send(record).await.expect("send"));
    }
    for ack in acks {
        ack.await.expect("acknowledged");
    }
}

async fn values(bootstrap: &str, topic: &str, partitions: i32, iso: IsolationLevel) -> Vec<String> {
    let mut v: Vec<String> = consume_values(bootstrap, topic, partitions, iso)
        .await
        .into_iter()
        .flatten()
        .collect();
    v.sort();
    v
}

#[tokio::test]
async fn compat_every_codec_round_trips() {
    let Some((bootstrap, _)) = compat_broker("compat_every_codec_round_trips") else {
        return;
    };
    for codec in [
        Compression::None,
        Compression::Gzip,
        Compression::Snappy,
        Compression::Lz4,
        Compression::Zstd,
    ] {
        let topic = new_topic(&bootstrap, &format!("compat-{codec:?}"), 2).await;
        let producer = Producer::connect(
            ProducerConfig::builder()
                .client(client(&bootstrap))
                .compression(codec, None)
                .build()
                .unwrap(),
        )
        .await
        .expect("producer");
        send_values(&producer, &topic, "v", 200).await;
        producer.close(Duration::from_secs(10)).await.unwrap();
        let got = values(&bootstrap, &topic, 2, IsolationLevel::ReadUncommitted).await;
        let want: Vec<String> = (0..200).map(|i| format!("v-{i:04}")).collect();
        assert_eq!(got, want, "{codec:?}: every record back, once");
    }
}

#[tokio::test]
async fn compat_group_joins_consumes_and_commits() {
    let Some((bootstrap, _)) = compat_broker("compat_group_joins_consumes_and_commits") else {
        return;
    };
    let topic = new_topic(&bootstrap, "compat-group", 3).await;
    let producer = Producer::connect(
        ProducerConfig::builder()
            .client(client(&bootstrap))
            .build()
            .unwrap(),
    )
    .await
    .unwrap();
    send_values(&producer, &topic, "g", 90).await;
    producer.close(Duration::from_secs(10)).await.unwrap();

    let group = support::unique_topic("compat-group-id");
    let consumer = Consumer::connect(
        ConsumerConfig::builder()
            .client(|_| client(&bootstrap))
            .group_id(group.clone())
            .auto_offset_reset(AutoOffsetReset::Earliest)
            .set("enable.auto.commit", "false")
            .unwrap()
            .build()
            .unwrap(),
    )
    .await
    .expect("consumer");
    consumer.subscribe([topic.as_str()]).unwrap();
    let mut seen = BTreeSet::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while seen.len() < 90 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "group consumer got {} of 90",
            seen.len()
        );
        for r in consumer.poll(Duration::from_millis(500)).await.unwrap() {
            seen.insert(String::from_utf8(r.value.unwrap().to_vec()).unwrap());
        }
    }
    assert_eq!(
        consumer.assignment().len(),
        3,
        "one member owns every partition"
    );
    consumer.commit_sync().await.expect("commit");
    let tps: Vec<TopicPartition> = (0..3)
        .map(|p| TopicPartition::new(topic.as_str(), p))
        .collect();
    let committed = consumer.committed(&tps).await.expect("committed");
    let total: i64 = tps.iter().map(|tp| committed[tp].offset).sum();
    assert_eq!(
        total, 90,
        "committed offsets cover every record: {committed:?}"
    );
    consumer.close().await.unwrap();
}

/// One `poll` of each of three consumers, at once.
async fn poll_three(members: &[Consumer]) -> [Vec<purekafka::ConsumerRecord>; 3] {
    let d = Duration::from_millis(200);
    let (a, b, c) = tokio::join!(members[0].poll(d), members[1].poll(d), members[2].poll(d));
    [a.expect("poll"), b.expect("poll"), c.expect("poll")]
}

/// Three members of one classic group split a topic's 6 partitions
/// (disjoint, none empty), and the records produced once the split is
/// stable are each consumed once, by the member owning their partition.
#[tokio::test]
async fn compat_three_member_group_splits_the_partitions() {
    let Some((bootstrap, release)) =
        compat_broker("compat_three_member_group_splits_the_partitions")
    else {
        return;
    };
    let topic = new_topic(&bootstrap, "compat-group3", 6).await;
    let group = support::unique_topic("compat-group3-id");
    let mut members = Vec::new();
    for _ in 0..3 {
        let c = Consumer::connect(
            ConsumerConfig::builder()
                .client(|_| client(&bootstrap))
                .group_id(group.clone())
                .auto_offset_reset(AutoOffsetReset::Earliest)
                .build()
                .unwrap(),
        )
        .await
        .expect("consumer");
        c.subscribe([topic.as_str()]).unwrap();
        members.push(c);
    }
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    let owned = loop {
        for got in poll_three(&members).await {
            assert!(got.is_empty(), "records before any were produced");
        }
        let sets: Vec<BTreeSet<i32>> = members
            .iter()
            .map(|c| c.assignment().iter().map(|tp| tp.partition).collect())
            .collect();
        let total: usize = sets.iter().map(BTreeSet::len).sum();
        let union: BTreeSet<i32> = sets.iter().flatten().copied().collect();
        if total == 6 && union.len() == 6 && sets.iter().all(|s| !s.is_empty()) {
            break sets;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "Kafka {release:?}: no stable 3-way split in 60 s: {sets:?}"
        );
    };
    eprintln!("Kafka {release:?}: 3-member group owns {owned:?}");
    let producer = Producer::connect(
        ProducerConfig::builder()
            .client(client(&bootstrap))
            .build()
            .unwrap(),
    )
    .await
    .unwrap();
    send_values(&producer, &topic, "m", 120).await;
    producer.close(Duration::from_secs(10)).await.unwrap();
    let mut seen: Vec<(usize, i32, String)> = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while seen.len() < 120 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the group got {} of 120",
            seen.len()
        );
        for (m, got) in poll_three(&members).await.into_iter().enumerate() {
            for r in got {
                let v = String::from_utf8(r.value.unwrap().to_vec()).unwrap();
                seen.push((m, r.partition.partition, v));
            }
        }
    }
    let distinct: BTreeSet<&String> = seen.iter().map(|(_, _, v)| v).collect();
    assert_eq!((seen.len(), distinct.len()), (120, 120), "each record once");
    for (m, p, v) in &seen {
        assert!(
            owned[*m].contains(p),
            "{v} of partition {p} went to member {m}, which owns {:?}",
            owned[*m]
        );
    }
    let used: BTreeSet<usize> = seen.iter().map(|(m, _, _)| *m).collect();
    assert_eq!(used.len(), 3, "every member consumed: {used:?}");
    for c in members {
        c.close().await.expect("close");
    }
}

#[tokio::test]
async fn compat_transactions_commit_and_abort_read_committed() {
    let Some((bootstrap, _)) = compat_broker("compat_transactions_commit_and_abort_read_committed")
    else {
        return;
    };
    let topic = new_topic(&bootstrap, "compat-txn", 2).await;
    let producer = Producer::connect(
        ProducerConfig::builder()
            .client(client(&bootstrap))
            .transactional_id(support::unique_topic("compat-txn-id"))
            .build()
            .unwrap(),
    )
    .await
    .expect("transactional producer");
    producer.init_transactions().await.expect("init");
    producer.begin_transaction().unwrap();
    send_values(&producer, &topic, "a-committed", 50).await;
    producer.commit_transaction().await.expect("commit");
    producer.begin_transaction().unwrap();
    send_values(&producer, &topic, "b-aborted", 50).await;
    producer.abort_transaction().await.expect("abort");
    producer.begin_transaction().unwrap();
    send_values(&producer, &topic, "c-committed", 20).await;
    producer.commit_transaction().await.expect("commit");
    producer.close(Duration::from_secs(10)).await.unwrap();

    let committed = values(&bootstrap, &topic, 2, IsolationLevel::ReadCommitted).await;
    let mut want: Vec<String> = (0..50).map(|i| format!("a-committed-{i:04}")).collect();
    want.extend((0..20).map(|i| format!("c-committed-{i:04}")));
    want.sort();
    assert_eq!(
        committed, want,
        "read_committed sees the committed records only"
    );
    let all = values(&bootstrap, &topic, 2, IsolationLevel::ReadUncommitted).await;
    assert_eq!(all.len(), 120, "read_uncommitted sees the aborted ones too");

    // Java's consumer (the pinned release's tools), read_committed, agrees.
    let out = java::run(
        "org.apache.kafka.tools.consumer.ConsoleConsumer",
        &[
            "--bootstrap-server",
            &bootstrap,
            "--topic",
            &topic,
            "--from-beginning",
            "--isolation-level",
            "read_committed",
            "--max-messages",
            "70",
            "--timeout-ms",
            "20000",
        ],
        None,
    );
    let mut java_values: Vec<String> = out.lines().map(str::to_owned).collect();
    java_values.sort();
    assert_eq!(java_values, want, "Java read_committed");
}

#[tokio::test]
async fn compat_admin_creates_describes_and_deletes_a_topic() {
    let Some((bootstrap, _)) = compat_broker("compat_admin_creates_describes_and_deletes_a_topic")
    else {
        return;
    };
    let admin = Admin::connect(client(&bootstrap).build().unwrap())
        .await
        .expect("admin");
    let name = support::unique_topic("compat-admin");
    let created = admin
        .create_topics(
            &[NewTopic::new(&name, 4).config("retention.ms", "3600000")],
            false,
        )
        .await
        .expect("CreateTopics");
    created[&name].as_ref().expect("topic created");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let d = admin
            .describe_topics(std::slice::from_ref(&name))
            .await
            .unwrap();
        if let Ok(t) = &d[&name] {
            if t.partitions.len() == 4 {
                break;
            }
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "never described: {d:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let deleted = admin
        .delete_topics(std::slice::from_ref(&name))
        .await
        .expect("DeleteTopics");
    deleted[&name].as_ref().expect("topic deleted");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let d = admin
            .describe_topics(std::slice::from_ref(&name))
            .await
            .unwrap();
        if d[&name].is_err() {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "still there: {d:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// KIP-848 (`group.protocol=consumer`): GA from Kafka 4.0, where the member
/// gets its assignment from the broker. 3.9 advertises ConsumerGroupHeartbeat
/// v0 but its group coordinator runs the classic protocol only: the first
/// heartbeat is answered UNSUPPORTED_VERSION, which `poll` returns at once,
/// naming the API, the group and the broker (no retry loop, no hang).
#[tokio::test]
async fn compat_consumer_group_protocol_kip848() {
    let Some((bootstrap, release)) = compat_broker("compat_consumer_group_protocol_kip848") else {
        return;
    };
    let topic = new_topic(&bootstrap, "compat-kip848", 1).await;
    let consumer = Consumer::connect(
        ConsumerConfig::builder()
            .client(|_| client(&bootstrap))
            .group_id(support::unique_topic("compat-kip848-id"))
            .auto_offset_reset(AutoOffsetReset::Earliest)
            .set("group.protocol", "consumer")
            .unwrap()
            .build()
            .unwrap(),
    )
    .await
    .expect("consumer");
    consumer.subscribe([topic.as_str()]).unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let outcome = loop {
        match consumer.poll(Duration::from_millis(500)).await {
            Err(e) => break Err(e),
            Ok(_) if !consumer.assignment().is_empty() => break Ok(()),
            Ok(_) => assert!(
                tokio::time::Instant::now() < deadline,
                "Kafka {release:?}: group.protocol=consumer neither assigned nor refused in 30 s"
            ),
        }
    };
    eprintln!("Kafka {release:?}: group.protocol=consumer: {outcome:?}");
    let _ = consumer.close().await;
    if release >= Release(4, 0, 0) {
        outcome.expect("KIP-848 member gets the partition");
    } else {
        let err = outcome.expect_err("a 3.x broker has no KIP-848 group coordinator");
        assert!(
            matches!(
                &err,
                Error::Kafka {
                    code: purekafka::KafkaCode::UNSUPPORTED_VERSION,
                    ..
                }
            ),
            "{err:?}"
        );
        assert!(
            err.to_string().contains("ConsumerGroupHeartbeat"),
            "the refusal names the API: {err}"
        );
    }
}

/// Version negotiation against the broker's real ApiVersions answer: a
/// request version the broker does not serve is refused before anything is
/// sent, with an error naming the API and both ranges. Produce v12 is the
/// KIP-890 (transactions v2) version, served from 4.0 on.
#[tokio::test]
async fn compat_apiversions_refuses_what_the_broker_lacks_by_name() {
    let Some((bootstrap, release)) =
        compat_broker("compat_apiversions_refuses_what_the_broker_lacks_by_name")
    else {
        return;
    };
    let cluster = Cluster::connect(support::config(&bootstrap))
        .await
        .expect("cluster");
    let conn = cluster
        .any_connection(purekafka::cluster::Workload::Admin)
        .await
        .expect("connection");
    let v12 = conn.version_for::<kafka_protocol::messages::ProduceRequest>(
        purekafka::protocol::versions::Versions::new(12, 12),
    );
    if release >= Release(4, 0, 0) {
        assert_eq!(v12.expect("Produce v12 from 4.0 on"), 12);
    } else {
        let err = v12.expect_err("3.x serves Produce up to v11");
        assert!(matches!(err, Error::UnsupportedVersion { .. }), "{err:?}");
        let msg = err.to_string();
        eprintln!("Kafka {release:?}: Produce v12: {msg}");
        assert!(
            msg.contains("Produce") && msg.contains("client supports 12..=12"),
            "names the API and both ranges: {msg}"
        );
    }
    // The transactional producer reads the finalized `transaction.version`
    // feature from the same answer: only 4.x brokers finalize one.
    let tv = conn.api_versions().feature_level("transaction.version");
    eprintln!("Kafka {release:?}: finalized transaction.version = {tv:?}");
    if release < Release(4, 0, 0) {
        assert_eq!(tv, None, "3.x has no transaction.version feature");
    }
}
