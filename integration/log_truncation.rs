//! KIP-320 on the 3-node cluster: a consumer that has read records which an
//! unclean leader election then removes from the log notices the
//! divergence, instead of carrying on at an offset that now names other
//! records. Takes the fault lock (it stops nodes).
//!
//! Replicas {A, B} of a one-partition topic (min.insync.replicas=1, unclean
//! election allowed); the third node keeps the controller quorum. B is
//! killed, so A alone takes records 10..20; A is paused and B restarted, so
//! B, which stopped at 10, is elected uncleanly and takes 15 new records.
//! Offsets 10..20 now hold different records, and offsets 20..25 follow
//! them: a consumer that resumed at 20 would silently skip ten new records.

use std::time::Duration;

use purekafka::admin::{ElectionType, NewTopic};
use purekafka::consumer::{AutoOffsetReset, Consumer, ConsumerConfig, ConsumerRecord};
use purekafka::producer::{Producer, ProducerConfig, ProducerRecord};
use purekafka::{Admin, Cluster, Error, TopicPartition};

use crate::support;
use crate::support::chaos::{node_command, FAULTS};

/// Waits (bounded) until `tp`'s metadata satisfies `ok`; returns its
/// leader and in-sync replicas.
async fn wait_partition(
    cluster: &Cluster,
    tp: &TopicPartition,
    what: &str,
    ok: impl Fn(i32, &[i32]) -> bool,
) -> (i32, Vec<i32>) {
    let topics = vec![tp.topic.to_string()];
    let mut last = None;
    for _ in 0..300 {
        if let Ok(m) = cluster.refresh_metadata(Some(&topics)).await {
            if let Some(p) = m.partition(&tp.topic, tp.partition) {
                if ok(p.leader, &p.isr) {
                    return (p.leader, p.isr.clone());
                }
                last = Some((p.leader, p.isr.clone()));
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    panic!("{tp}: {what} within 60 s; last (leader, isr) {last:?}");
}

/// Resumes `a` and starts `b` when dropped, also while a failed assertion
/// unwinds, so later fault tests find all three nodes serving.
struct Heal {
    a: i32,
    b: i32,
}

impl Drop for Heal {
    fn drop(&mut self) {
        let _ = node_command("resume", self.a);
        let _ = node_command("start", self.b);
    }
}

async fn node(action: &'static str, n: i32) {
    tokio::task::spawn_blocking(move || node_command(action, n))
        .await
        .expect("node command task")
        .unwrap_or_else(|e| panic!("{e}"));
}

fn consumer_config(bootstrap: &str, reset: AutoOffsetReset) -> ConsumerConfig {
    ConsumerConfig::builder()
        .client(|b| {
            b.bootstrap_servers(bootstrap)
                .client_id("purekafka-truncation")
                .request_timeout(Duration::from_secs(5))
        })
        .auto_offset_reset(reset)
        .build()
        .expect("consumer config")
}

fn values(records: &[ConsumerRecord]) -> Vec<String> {
    records
        .iter()
        .map(|r| String::from_utf8_lossy(r.value.as_deref().unwrap_or_default()).into_owned())
        .collect()
}

/// Polls until `want` records came back (bounded).
async fn poll_n(c: &Consumer, want: usize) -> Vec<ConsumerRecord> {
    let mut got = Vec::new();
    for _ in 0..100 {
        got.extend(c.poll(Duration::from_millis(200)).await.expect("poll"));
        if got.len() >= want {
            break;
        }
    }
    got
}

async fn send_all(producer: &Producer, topic: &str, prefix: &str, n: usize) {
    let mut acks = Vec::new();
    for i in 0..n {
        let record = ProducerRecord::new(topic)
            .partition(0)
            .value(format!("{prefix}-{i}"));
        acks.push(producer.send(record).await.expect("enqueue"));
    }
    for a in acks {
        a.await.expect("acked");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consumer_detects_log_truncation_after_an_unclean_election() {
    let _serial = FAULTS.lock().await;
    let Some(bootstrap) = support::bootstrap3("log_truncation") else {
        return;
    };
    support::trace();
    let cluster = Cluster::connect(support::config(&bootstrap))
        .await
        .expect("connect");
    let admin = Admin::with_cluster(cluster.clone());
    let topic = support::unique_topic("trunc");
    let created = admin
        .create_topics(
            &[NewTopic::new(&topic, 1)
                .replication_factor(2)
                .config("min.insync.replicas", "1")
                .config("unclean.leader.election.enable", "true")],
            false,
        )
        .await
        .expect("CreateTopics");
    for (name, r) in created {
        r.unwrap_or_else(|e| panic!("create {name}: {e}"));
    }
    let tp = TopicPartition::new(topic.as_str(), 0);
    let (a, isr) = wait_partition(&cluster, &tp, "two in-sync replicas", |l, isr| {
        l >= 0 && isr.len() == 2
    })
    .await;
    let b = *isr.iter().find(|n| **n != a).expect("a follower");
    let producer = Producer::connect(
        ProducerConfig::builder()
            .client(purekafka::ClientConfig::builder().bootstrap_servers(&bootstrap))
            .delivery_timeout(Duration::from_secs(60))
            .build()
            .expect("producer config"),
    )
    .await
    .expect("producer");

    // Two consumers read 0..20 from A: one resets on truncation, one has
    // auto.offset.reset=none.
    let resetting = Consumer::connect(consumer_config(&bootstrap, AutoOffsetReset::Earliest))
        .await
        .expect("consumer");
    let strict = Consumer::connect(consumer_config(&bootstrap, AutoOffsetReset::None))
        .await
        .expect("consumer");
    for c in [&resetting, &strict] {
        c.assign(vec![tp.clone()]);
        c.seek(&tp, 0).expect("seek");
    }
    send_all(&producer, &topic, "both", 10).await;
    // From here on nodes go down: bring them back however the test ends.
    let _heal = Heal { a, b };
    node("kill", b).await;
    {
        wait_partition(&cluster, &tp, "B out of the ISR", |l, isr| {
            l == a && isr == [a]
        })
        .await;
        send_all(&producer, &topic, "a-only", 10).await;
        for c in [&resetting, &strict] {
            let got = poll_n(c, 20).await;
            assert_eq!(got.len(), 20, "read 0..20 from A: {:?}", values(&got));
            // Fetching stops while the leadership moves.
            c.pause(std::slice::from_ref(&tp)).expect("pause");
        }

        // A stops answering; B comes back without A's last ten records and
        // is elected although it is not in sync.
        node("pause", a).await;
        node("start", b).await;
        // Once A is fenced the partition has no leader; an unclean election
        // (ours, or the controller's own) makes B the leader.
        let mut last = String::new();
        let mut leader = a;
        for _ in 0..60 {
            let elected = admin
                .elect_leaders(ElectionType::Unclean, Some(std::slice::from_ref(&tp)))
                .await;
            last = match elected.as_ref().map(|r| &r[&tp]) {
                Ok(Ok(())) => "elected".into(),
                Ok(Err(e)) => e.to_string(),
                Err(e) => e.to_string(),
            };
            leader = wait_partition(&cluster, &tp, "metadata", |_, _| true)
                .await
                .0;
            if leader == b {
                break;
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        assert_eq!(
            leader, b,
            "B elected uncleanly; last ElectLeaders answer: {last}"
        );
        eprintln!("log truncation: B (node {b}) leads after an unclean election; last ElectLeaders answer: {last}");
        // A new producer: B lost the old one's last sequence numbers, so its
        // next batch would (rightly) fail with OUT_OF_ORDER_SEQUENCE_NUMBER.
        let after = Producer::connect(
            ProducerConfig::builder()
                .client(purekafka::ClientConfig::builder().bootstrap_servers(&bootstrap))
                .build()
                .expect("producer config"),
        )
        .await
        .expect("producer");
        send_all(&after, &topic, "b-new", 15).await;
        let _ = after.close(Duration::from_secs(5)).await;
        node("resume", a).await;

        for c in [&resetting, &strict] {
            c.resume(std::slice::from_ref(&tp)).expect("resume");
        }
        // Resumes at the divergence (offset 10): every new record is read,
        // none of the ten skipped.
        let got = poll_n(&resetting, 15).await;
        let want: Vec<String> = (0..15).map(|i| format!("b-new-{i}")).collect();
        assert_eq!(values(&got), want, "read after the truncation");
        assert_eq!(got[0].offset, 10, "resumed at the first diverged offset");

        let mut err = None;
        for _ in 0..50 {
            match strict.poll(Duration::from_millis(200)).await {
                Err(e) => {
                    err = Some(e);
                    break;
                }
                Ok(r) => assert!(r.is_empty(), "records past a truncation: {:?}", values(&r)),
            }
        }
        match err {
            Some(Error::LogTruncation {
                partition,
                offset: 20,
                divergent_offset: 10,
            }) => assert_eq!(partition, tp),
            other => panic!("expected LogTruncation at 20 diverging at 10, got {other:?}"),
        }
        // Seeking is the way on.
        strict.seek(&tp, 10).expect("seek");
        let got = poll_n(&strict, 15).await;
        assert_eq!(values(&got), want, "read after seeking to the divergence");
    }
    let _ = resetting.close().await;
    let _ = strict.close().await;
    let _ = producer.close(Duration::from_secs(5)).await;
}
