//! The runtime on a streams group (`group.protocol=streams`, KIP-1071):
//! two instances of a stateless application share the tasks the
//! coordinator assigns, every input record is processed (at-least-once),
//! and an instance that shuts down hands its tasks to the other; a
//! stateful instance declares its store's changelog and counts right.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use purekafka::admin::StreamsGroupDescription;
use purekafka::streams::{
    CommitMode, GroupProtocol, OrderingMode, RunningStreams, Streams, StringDeserializer,
};
use purekafka::Admin;
use tokio::time::Instant;

use purekafka::consumer::IsolationLevel;
use purekafka::producer::serializer::StringSerializer;
use purekafka::producer::ProducerRecord;
use purekafka::streams::state::StoreSpec;

use super::{config, group_committed, produce, producer, setup, wait_for};
use crate::support;

const PARTITIONS: i32 = 4;

/// Each described member's current active tasks of subtopology `0`.
fn active(g: &StreamsGroupDescription) -> Vec<BTreeSet<i32>> {
    g.members
        .iter()
        .map(|m| {
            m.assignment
                .active
                .get("0")
                .map(|ps| ps.iter().copied().collect())
                .unwrap_or_default()
        })
        .collect()
}

/// Waits until the group has `members` members whose active tasks are
/// disjoint, each non-empty, and together every partition.
async fn described(admin: &Admin, app: &str, members: usize) -> StreamsGroupDescription {
    let all: BTreeSet<i32> = (0..PARTITIONS).collect();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let g = admin
            .describe_streams_groups(&[app.to_owned()])
            .await
            .expect("describe call")
            .swap_remove(app)
            .expect("one result");
        if let Ok(g) = g {
            let sets = active(&g);
            let total: usize = sets.iter().map(BTreeSet::len).sum();
            let union: BTreeSet<i32> = sets.iter().flatten().copied().collect();
            if sets.len() == members
                && union == all
                && total == all.len()
                && sets.iter().all(|s| !s.is_empty())
            {
                return g;
            }
            assert!(
                Instant::now() < deadline,
                "not {members} members sharing every task within 60 s: {sets:?}"
            );
        } else {
            assert!(Instant::now() < deadline, "group not described: {g:?}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn two_instances_on_a_streams_group_share_the_tasks_and_hand_them_over() {
    let Some((bootstrap, _cluster, topic)) = setup("streams-sg", PARTITIONS).await else {
        return;
    };
    const N: usize = 400;
    produce(&bootstrap, &topic, N, 64).await;
    let app = support::unique_topic("streams-sg-app");
    let seen: Arc<Mutex<Vec<(usize, i64)>>> = Arc::default();
    let start = |id: usize| {
        let seen = seen.clone();
        let config = config(&bootstrap, &app)
            .ordering(OrderingMode::Partition)
            .group_protocol(GroupProtocol::Streams)
            .build()
            .unwrap();
        Streams::topology(config)
            .source(topic.as_str(), StringDeserializer, StringDeserializer)
            .for_each_async(move |rec| {
                let seen = seen.clone();
                async move {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    seen.lock().unwrap().push((id, rec.value.parse().unwrap()));
                    Ok(())
                }
            })
            .build()
            .start()
    };
    let a: RunningStreams = start(0).await.expect("instance a");
    let b: RunningStreams = start(1).await.expect("instance b");
    let admin = Admin::connect(support::config(&bootstrap))
        .await
        .expect("admin");
    let g = described(&admin, &app, 2).await;
    assert_eq!(g.subtopologies.len(), 1);
    assert_eq!(g.subtopologies[0].source_topics, vec![topic.clone()]);

    // b shuts down (drains, commits, leaves): a takes every task, and
    // records produced afterwards reach it on the partitions b had.
    b.shutdown().await.expect("b shut down");
    described(&admin, &app, 1).await;
    // A second batch, values N..2N, after the hand-over.
    let p = producer(&bootstrap).await;
    let mut acks = Vec::new();
    for i in N..2 * N {
        let r = ProducerRecord::new(topic.as_str())
            .key(format!("key-{}", i % 64))
            .value(i.to_string());
        acks.push(p.send(r).await.expect("send"));
    }
    for ack in acks {
        ack.await.expect("acknowledged");
    }
    p.close(Duration::from_secs(10))
        .await
        .expect("producer closed");
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let distinct: BTreeSet<i64> = seen.lock().unwrap().iter().map(|(_, v)| *v).collect();
        if distinct.len() == 2 * N {
            break;
        }
        assert!(!a.is_finished(), "instance a stopped");
        assert!(
            Instant::now() < deadline,
            "only {} of {} distinct values processed",
            distinct.len(),
            2 * N
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let by_b_after: usize = seen
        .lock()
        .unwrap()
        .iter()
        .filter(|(id, v)| *id == 1 && *v >= N as i64)
        .count();
    assert_eq!(by_b_after, 0, "b processed records after it shut down");
    a.shutdown().await.expect("a shut down");
}

/// A count by key on a streams group writing every `key=count` update to
/// `out` (the record cache off).
fn counting(
    bootstrap: &str,
    app: &str,
    input: &str,
    out: &str,
    dir: &std::path::Path,
) -> purekafka::streams::Topology {
    let config = config(bootstrap, app)
        .ordering(OrderingMode::Key)
        .group_protocol(GroupProtocol::Streams)
        .state_dir(dir)
        .cache_max_bytes(0)
        .build()
        .unwrap();
    Streams::topology(config)
        .source(input, StringDeserializer, StringDeserializer)
        .group_by_key()
        .count(StoreSpec::persistent("counts"), StringSerializer)
        .to_stream()
        .map(|r| {
            let v = format!("{}={}", r.key.clone().unwrap_or_default(), r.value);
            Ok(r.with_value(v))
        })
        .to(out, StringSerializer, StringSerializer)
}

/// Every `key=count` update in `out`, per key in output order.
async fn updates(bootstrap: &str, out: &str) -> BTreeMap<String, Vec<i64>> {
    let mut m: BTreeMap<String, Vec<i64>> = BTreeMap::new();
    for partition in
        support::read::consume_values(bootstrap, out, PARTITIONS, IsolationLevel::ReadUncommitted)
            .await
    {
        for v in partition {
            let (k, n) = v.split_once('=').expect("key=count");
            m.entry(k.to_owned())
                .or_default()
                .push(n.parse().expect("a count"));
        }
    }
    m
}

/// A count by key on a streams group: the topology declares the store's
/// changelog topic (which the runtime created at start), the coordinator
/// accepts it, and each key's last count is its number of records.
#[tokio::test]
async fn a_stateful_instance_declares_its_changelog_and_counts_every_record() {
    let Some((bootstrap, cluster, topic)) = setup("streams-sg-count", PARTITIONS).await else {
        return;
    };
    const N: usize = 200;
    const KEYS: usize = 8;
    let out = format!("{topic}-out");
    support::create_topic(&cluster, &out, PARTITIONS).await;
    produce(&bootstrap, &topic, N, KEYS).await;
    let app = support::unique_topic("streams-sg-count-app");
    let dir = std::env::temp_dir().join(support::unique_topic("streams-sg-count-state"));
    let running = counting(&bootstrap, &app, &topic, &out, &dir)
        .build()
        .start()
        .await
        .expect("start");
    let admin = Admin::connect(support::config(&bootstrap))
        .await
        .expect("admin");
    let g = described(&admin, &app, 1).await;
    assert_eq!(
        g.subtopologies[0].state_changelog_topics,
        vec![(format!("{app}-counts-changelog"), PARTITIONS)]
    );
    wait_for(&running, |r| r.metrics().processed >= N as u64).await;
    running.shutdown().await.expect("clean shutdown");
    let _ = std::fs::remove_dir_all(&dir);
    let last: BTreeMap<String, i64> = updates(&bootstrap, &out)
        .await
        .into_iter()
        .map(|(k, u)| (k, u.last().copied().unwrap_or_default()))
        .collect();
    let want: BTreeMap<String, i64> = (0..KEYS)
        .map(|k| (format!("key-{k}"), (N / KEYS) as i64))
        .collect();
    assert_eq!(last, want);
}

/// Exactly-once on a streams group: the watermarks go into the
/// transaction with the member's epoch (KIP-447 group metadata), the
/// read_committed output holds every input record once, and the group's
/// committed offsets reach the end of the input.
#[tokio::test]
async fn exactly_once_commits_through_the_transaction() {
    let Some((bootstrap, cluster, topic)) = setup("streams-sg-eos", PARTITIONS).await else {
        return;
    };
    const N: usize = 200;
    let out = format!("{topic}-out");
    support::create_topic(&cluster, &out, PARTITIONS).await;
    produce(&bootstrap, &topic, N, 16).await;
    let app = support::unique_topic("streams-sg-eos-app");
    let config = config(&bootstrap, &app)
        .commit_mode(CommitMode::ExactlyOnce)
        .group_protocol(GroupProtocol::Streams)
        .build()
        .unwrap();
    let running = Streams::topology(config)
        .source(topic.as_str(), StringDeserializer, StringDeserializer)
        .map(Ok)
        .to(out.as_str(), StringSerializer, StringSerializer)
        .build()
        .start()
        .await
        .expect("start");
    wait_for(&running, |r| r.metrics().processed >= N as u64).await;
    running.shutdown().await.expect("clean shutdown");
    let values: Vec<String> =
        support::read::consume_values(&bootstrap, &out, PARTITIONS, IsolationLevel::ReadCommitted)
            .await
            .into_iter()
            .flatten()
            .collect();
    let distinct: BTreeSet<&String> = values.iter().collect();
    assert_eq!(values.len(), N, "each record once");
    assert_eq!(distinct.len(), N);
    let tps: Vec<purekafka::TopicPartition> = (0..PARTITIONS)
        .map(|p| purekafka::TopicPartition::new(topic.as_str(), p))
        .collect();
    let committed: i64 = group_committed(&bootstrap, &app, &tps)
        .await
        .values()
        .map(|o| o.offset)
        .sum();
    assert_eq!(committed, N as i64, "committed to the end of the input");
}

/// Stores move with their tasks: a second instance joins a counting
/// instance; the coordinator moves some tasks to it, it restores their
/// stores from the changelogs, and every key is counted 1, 2, ... n with
/// nothing lost or counted twice across the hand-over.
#[tokio::test]
async fn stores_move_with_their_tasks_and_every_count_is_exact() {
    let Some((bootstrap, cluster, topic)) = setup("streams-sg-move", PARTITIONS).await else {
        return;
    };
    const KEYS: usize = 23;
    let out = format!("{topic}-out");
    support::create_topic(&cluster, &out, PARTITIONS).await;
    let app = support::unique_topic("streams-sg-move-app");
    let dirs = [
        std::env::temp_dir().join(support::unique_topic("streams-sg-move-a")),
        std::env::temp_dir().join(support::unique_topic("streams-sg-move-b")),
    ];
    produce(&bootstrap, &topic, 400, KEYS).await;
    let a = counting(&bootstrap, &app, &topic, &out, &dirs[0])
        .build()
        .start()
        .await
        .expect("a");
    wait_for(&a, |r| {
        r.metrics().processed >= 400 && r.metrics().partitions.len() == PARTITIONS as usize
    })
    .await;
    let b = counting(&bootstrap, &app, &topic, &out, &dirs[1])
        .build()
        .start()
        .await
        .expect("b");
    wait_for(&a, |r| r.metrics().partitions.len() < PARTITIONS as usize).await;
    produce(&bootstrap, &topic, 400, KEYS).await;
    let deadline = Instant::now() + Duration::from_secs(90);
    while a.metrics().processed + b.metrics().processed < 800 {
        assert!(!a.is_finished() && !b.is_finished(), "an instance stopped");
        assert!(
            Instant::now() < deadline,
            "the second batch was not counted"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (moved, restored) = (b.metrics().partitions.len(), b.restored_records());
    b.shutdown().await.expect("b");
    a.shutdown().await.expect("a");
    for d in &dirs {
        let _ = std::fs::remove_dir_all(d);
    }
    assert!(moved > 0, "no task moved to the second instance");
    assert!(restored > 0, "the second instance restored nothing");
    let mut want: BTreeMap<String, i64> = BTreeMap::new();
    for i in 0..400 {
        *want.entry(format!("key-{}", i % KEYS)).or_default() += 2;
    }
    let got = updates(&bootstrap, &out).await;
    assert_eq!(
        got.keys().collect::<Vec<_>>(),
        want.keys().collect::<Vec<_>>()
    );
    for (k, n) in &want {
        assert_eq!(got[k], (1..=*n).collect::<Vec<i64>>(), "updates of {k}");
    }
}
