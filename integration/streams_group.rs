//! The streams group protocol (KIP-1071) against the broker (Kafka 4.2+
//! serves it by default; the fake cluster too): the StreamsGroupHeartbeat/StreamsGroupDescribe
//! types (API keys 88, 89) on the wire, `Admin::describe_streams_groups`,
//! and members driven by `StreamsGroupMember` sharing the tasks of one
//! group.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kafka_protocol::messages::streams_group_heartbeat_request::{Subtopology, Topology};
use kafka_protocol::messages::{
    GroupId, StreamsGroupDescribeRequest, StreamsGroupHeartbeatRequest, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use purekafka::admin::StreamsGroupDescription;
use purekafka::cluster::{CoordinatorKind, Workload};
use purekafka::consumer::group::streams::{
    StreamsGroupMember, StreamsTopology, Subtopology as AppSubtopology, TaskChange, TaskId,
};
use purekafka::protocol::versions::Versions;
use purekafka::{Admin, Cluster, KafkaCode};
use tokio::time::Instant;

use crate::support::{self, records};

const GROUP_ID_NOT_FOUND: i16 = 69;

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

fn topology(source: &str, changelog: Option<&str>) -> StreamsTopology {
    StreamsTopology {
        epoch: 1,
        subtopologies: vec![AppSubtopology {
            id: "0".into(),
            source_topics: vec![source.to_owned()],
            state_changelog_topics: changelog.map(str::to_owned).into_iter().collect(),
            ..AppSubtopology::default()
        }],
    }
}

/// One group's result of `describe_streams_groups` (the call itself must succeed).
async fn describe(admin: &Admin, group: &str) -> purekafka::Result<StreamsGroupDescription> {
    let mut d = admin
        .describe_streams_groups(&[group.to_owned()])
        .await
        .expect("describe call");
    d.swap_remove(group).expect("one result")
}

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_owned())
}

#[tokio::test]
async fn raw_heartbeat_and_describe_are_answered_by_the_broker() {
    let Some((bootstrap, cluster, topic)) = setup("sg-raw", 2).await else {
        return;
    };
    let group = support::unique_topic("sg-raw-group");
    // StreamsGroupDescribe of an unknown group: GROUP_ID_NOT_FOUND, named.
    let admin = Admin::connect(support::config(&bootstrap))
        .await
        .expect("admin");
    let err = describe(&admin, &group).await.unwrap_err();
    assert_eq!(
        err.kafka_code(),
        KafkaCode::from_code(GROUP_ID_NOT_FOUND),
        "{err}"
    );
    assert!(err.to_string().contains("StreamsGroupDescribe"), "{err}");

    // A join with a one-subtopology topology, built from the raw types.
    let addr = cluster
        .coordinator(CoordinatorKind::Group, &group)
        .await
        .expect("coordinator");
    let join = StreamsGroupHeartbeatRequest::default()
        .with_group_id(GroupId(s(&group)))
        .with_member_id(s("raw-member-1"))
        .with_member_epoch(0)
        .with_rebalance_timeout_ms(10_000)
        .with_process_id(Some(s("raw-process")))
        .with_client_tags(Some(vec![]))
        .with_active_tasks(Some(vec![]))
        .with_standby_tasks(Some(vec![]))
        .with_warmup_tasks(Some(vec![]))
        .with_topology(Some(Topology::default().with_epoch(1).with_subtopologies(
            vec![
            Subtopology::default()
                .with_subtopology_id(s("0"))
                .with_source_topics(vec![TopicName(s(&topic))]),
        ],
        )));
    let resp = cluster
        .send(&addr, Workload::Group, &join, Versions::new(0, 1))
        .await
        .expect("StreamsGroupHeartbeat");
    assert_eq!(resp.error_code, 0, "{:?}", resp.error_message);
    assert_eq!(resp.member_id.as_str(), "raw-member-1");
    assert!(resp.member_epoch >= 1, "epoch {}", resp.member_epoch);
    assert!(resp.heartbeat_interval_ms > 0);

    // The group now exists, as a streams group with that member.
    let g = describe(&admin, &group).await.expect("described");
    assert_eq!(g.members.len(), 1);
    assert_eq!(g.members[0].member_id, "raw-member-1");
    assert_eq!(g.members[0].process_id, "raw-process");

    // Leave (epoch -1).
    let leave = StreamsGroupHeartbeatRequest::default()
        .with_group_id(GroupId(s(&group)))
        .with_member_id(s("raw-member-1"))
        .with_member_epoch(-1);
    let resp = cluster
        .send(&addr, Workload::Group, &leave, Versions::new(0, 1))
        .await
        .expect("leave");
    assert_eq!(resp.error_code, 0, "{:?}", resp.error_message);
    assert_eq!(resp.member_epoch, -1);
}

/// Heartbeats every member until `done` holds for their active tasks,
/// acknowledging revocations at once, and checks at every step that no
/// active task is owned by two members.
async fn drive(
    members: &mut [StreamsGroupMember],
    what: &str,
    done: impl Fn(&[BTreeSet<TaskId>]) -> bool,
) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        for m in members.iter_mut() {
            let mut changes = m
                .heartbeat()
                .await
                .unwrap_or_else(|e| panic!("{what}: {e}"));
            while changes.iter().any(|c| matches!(c, TaskChange::Revoke(_))) {
                changes = m.revoke_done();
                changes.extend(m.heartbeat().await.expect("heartbeat after revoke"));
            }
            for c in &changes {
                assert!(!matches!(c, TaskChange::Lose(_)), "{what}: lost {c:?}");
            }
        }
        let owned: Vec<BTreeSet<TaskId>> =
            members.iter().map(|m| m.tasks().active.clone()).collect();
        for (i, a) in owned.iter().enumerate() {
            for b in &owned[i + 1..] {
                assert!(a.is_disjoint(b), "{what}: a task owned twice: {owned:?}");
            }
        }
        if done(&owned) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: not reached in 60 s: {owned:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn covers(owned: &[BTreeSet<TaskId>], partitions: i32) -> bool {
    let all: BTreeSet<TaskId> = (0..partitions).map(|p| TaskId::new("0", p)).collect();
    let union: BTreeSet<TaskId> = owned.iter().flatten().cloned().collect();
    union == all && owned.iter().all(|o| !o.is_empty())
}

#[tokio::test]
async fn members_share_every_task_and_a_third_member_takes_some() {
    const PARTITIONS: i32 = 6;
    let Some((bootstrap, cluster, topic)) = setup("sg-scale", PARTITIONS).await else {
        return;
    };
    let group = support::unique_topic("sg-scale-group");
    let changelog = format!("{group}-store-changelog");
    let member = |process: &str| {
        StreamsGroupMember::new(
            cluster.clone(),
            &group,
            process,
            Duration::from_secs(10),
            topology(&topic, Some(&changelog)),
        )
    };
    let mut members = vec![member("process-a"), member("process-b")];
    drive(&mut members, "two members", |o| covers(o, PARTITIONS)).await;
    for m in &members {
        assert!(m.state().epoch() > 0);
    }

    // The coordinator describes the same: the topology it initialized
    // (with the changelog topic it created, one partition per task) and
    // each member's tasks.
    let admin = Admin::connect(support::config(&bootstrap))
        .await
        .expect("admin");
    let g = describe(&admin, &group).await.expect("described");
    assert_eq!(g.topology_epoch, Some(1));
    assert_eq!(g.subtopologies.len(), 1);
    assert_eq!(g.subtopologies[0].source_topics, vec![topic.clone()]);
    assert_eq!(
        g.subtopologies[0].state_changelog_topics,
        vec![(changelog.clone(), PARTITIONS)]
    );
    assert_eq!(g.members.len(), 2);
    for m in &members {
        let described = g
            .members
            .iter()
            .find(|x| x.member_id == m.state().member_id())
            .expect("member described");
        let ours: Vec<i32> = m.tasks().active.iter().map(|t| t.partition).collect();
        assert_eq!(described.target_assignment.active.get("0"), Some(&ours));
    }

    // Scale out: a third member joins and gets some of the tasks; still
    // every task once.
    members.push(member("process-c"));
    drive(&mut members, "three members", |o| covers(o, PARTITIONS)).await;

    for m in &mut members {
        m.leave().await.expect("leave");
        assert!(m.state().has_left());
    }
    let g = describe(&admin, &group).await.expect("described");
    assert!(g.members.is_empty(), "{:?}", g.members);
    assert_eq!(g.state, "Empty");
}

/// `purekafka groups describe` recognises a streams group and shows its
/// members' tasks, as `kafka-streams-groups.sh --describe --members`.
#[cfg(feature = "cli")]
#[tokio::test]
async fn cli_describes_a_streams_group() {
    const PARTITIONS: i32 = 3;
    let Some((bootstrap, cluster, topic)) = setup("sg-cli", PARTITIONS).await else {
        return;
    };
    let group = support::unique_topic("sg-cli-group");
    let mut members = vec![StreamsGroupMember::new(
        cluster.clone(),
        &group,
        "process-cli",
        Duration::from_secs(10),
        topology(&topic, None),
    )];
    drive(&mut members, "one member", |o| covers(o, PARTITIONS)).await;
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_purekafka"))
        .args(["groups", "describe", &group, "--json"])
        .env("PUREKAFKA_BOOTSTRAP", &bootstrap)
        .output()
        .expect("run purekafka");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "purekafka groups describe: {stderr}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(v["type"], "streams");
    assert_eq!(v["group"], group.as_str());
    assert_eq!(v["subtopologies"][0]["source_topics"][0], topic.as_str());
    let m = &v["members"][0];
    assert_eq!(m["member_id"], members[0].state().member_id());
    assert_eq!(m["process_id"], "process-cli");
    assert_eq!(m["active_tasks"]["0"], serde_json::json!([0, 1, 2]));
    members[0].leave().await.expect("leave");
}

/// A consumer in a streams group, polling in a task until stopped and
/// recording every record it is given as (consumer, partition, offset).
struct StreamsWorker {
    consumer: purekafka::Consumer,
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<()>,
}

type Seen = Arc<Mutex<Vec<(usize, i32, i64)>>>;

impl StreamsWorker {
    async fn start(id: usize, bootstrap: &str, group: &str, source: &str, out: Seen) -> Self {
        let config = purekafka::ConsumerConfig::from_properties([
            ("bootstrap.servers", bootstrap),
            ("group.id", group),
            ("auto.offset.reset", "earliest"),
            ("fetch.max.wait.ms", "200"),
            ("max.poll.interval.ms", "30000"),
            ("request.timeout.ms", "10000"),
            ("default.api.timeout.ms", "30000"),
            ("client.rack", &format!("rack-{id}")),
        ])
        .expect("consumer config");
        let consumer = purekafka::Consumer::connect(config)
            .await
            .expect("consumer");
        consumer
            .subscribe_streams(topology(source, None), Some(format!("process-{id}")))
            .expect("subscribe_streams");
        let stop = Arc::new(AtomicBool::new(false));
        let (c, s) = (consumer.clone(), stop.clone());
        let task = tokio::spawn(async move {
            while !s.load(Ordering::SeqCst) {
                let records = c.poll(Duration::from_millis(200)).await.expect("poll");
                let mut out = out.lock().unwrap();
                out.extend(
                    records
                        .iter()
                        .map(|r| (id, r.partition.partition, r.offset)),
                );
            }
        });
        StreamsWorker {
            consumer,
            stop,
            task,
        }
    }

    /// Stops polling, then closes (revoking, so auto-commit commits, and
    /// leaving the group).
    async fn close(self) {
        self.stop.store(true, Ordering::SeqCst);
        self.task.await.expect("poll task");
        tokio::time::timeout(Duration::from_secs(30), self.consumer.close())
            .await
            .expect("close within 30 s")
            .expect("close");
    }
}

/// Waits until the consumers' assignments are disjoint, each non-empty,
/// and together every partition of `topic`.
async fn settled(consumers: &[&purekafka::Consumer], topic: &str, partitions: i32) {
    let all: BTreeSet<(String, i32)> = (0..partitions).map(|p| (topic.to_owned(), p)).collect();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let sets: Vec<BTreeSet<(String, i32)>> = consumers
            .iter()
            .map(|c| {
                c.assignment()
                    .into_iter()
                    .map(|tp| (tp.topic.to_string(), tp.partition))
                    .collect()
            })
            .collect();
        let total: usize = sets.iter().map(BTreeSet::len).sum();
        let union: BTreeSet<(String, i32)> = sets.iter().flatten().cloned().collect();
        if union == all && total == all.len() && sets.iter().all(|s| !s.is_empty()) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "assignments not settled within 60 s: {sets:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Two consumers join one streams group through `subscribe_streams` while
/// records are produced: the coordinator gives them disjoint tasks covering
/// every partition; one closes and the other takes its tasks; every record
/// is consumed exactly once (each hand-over commits with the member epoch
/// before the other member starts at that commit).
#[tokio::test]
async fn consumers_share_the_tasks_and_consume_each_record_once() {
    const PARTITIONS: i32 = 4;
    let Some((bootstrap, cluster, topic)) = setup("sg-consumers", PARTITIONS).await else {
        return;
    };
    let group = support::unique_topic("sg-consumers-group");
    let expected: Arc<Mutex<BTreeSet<(i32, i64)>>> = Arc::default();
    let producing = Arc::new(AtomicBool::new(true));
    let producer = {
        let (cluster, topic, expected) = (cluster.clone(), topic.clone(), expected.clone());
        let producing = producing.clone();
        tokio::spawn(async move {
            while producing.load(Ordering::SeqCst) {
                for p in 0..PARTITIONS {
                    let values = records::values(&format!("p{p}-"), 10);
                    let base = records::produce(&cluster, &topic, p, &values).await;
                    expected
                        .lock()
                        .unwrap()
                        .extend((0..10).map(|i| (p, base + i)));
                }
                tokio::time::sleep(Duration::from_millis(150)).await;
            }
        })
    };
    let out: Seen = Arc::default();
    let a = StreamsWorker::start(1, &bootstrap, &group, &topic, out.clone()).await;
    let b = StreamsWorker::start(2, &bootstrap, &group, &topic, out.clone()).await;
    settled(&[&a.consumer, &b.consumer], &topic, PARTITIONS).await;
    // Each member joined with its `client.rack` and process id.
    let addr = cluster
        .coordinator(CoordinatorKind::Group, &group)
        .await
        .expect("coordinator");
    let req = StreamsGroupDescribeRequest::default().with_group_ids(vec![GroupId(s(&group))]);
    let resp = cluster
        .send(&addr, Workload::Group, &req, Versions::new(0, 1))
        .await
        .expect("StreamsGroupDescribe");
    let racks: BTreeSet<(String, Option<String>)> = resp.groups[0]
        .members
        .iter()
        .map(|m| {
            (
                m.process_id.to_string(),
                m.rack_id.as_ref().map(ToString::to_string),
            )
        })
        .collect();
    assert_eq!(
        racks,
        [
            ("process-1".to_owned(), Some("rack-1".to_owned())),
            ("process-2".to_owned(), Some("rack-2".to_owned())),
        ]
        .into()
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    while out
        .lock()
        .unwrap()
        .iter()
        .map(|r| r.0)
        .collect::<BTreeSet<_>>()
        .len()
        < 2
    {
        assert!(Instant::now() < deadline, "a consumer idle for 30 s");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    a.close().await;
    settled(&[&b.consumer], &topic, PARTITIONS).await;
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
            "{} of {} records consumed within 45 s",
            got.len(),
            expected.len()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // A commit carries the member epoch and the streams group takes it.
    b.consumer
        .commit_sync()
        .await
        .expect("commit with the member epoch");
    b.close().await;
    let out = out.lock().unwrap().clone();
    let by: BTreeSet<usize> = out.iter().map(|r| r.0).collect();
    assert_eq!(by.len(), 2, "both consumers consumed records");
    let mut count: BTreeMap<(i32, i64), usize> = BTreeMap::new();
    for (_, p, o) in &out {
        *count.entry((*p, *o)).or_default() += 1;
    }
    let dups: Vec<_> = count.iter().filter(|(_, n)| **n > 1).collect();
    assert!(
        dups.is_empty(),
        "consumed twice: {:?}",
        &dups[..dups.len().min(5)]
    );
}

/// A streams group member whose application stops polling for
/// `max.poll.interval.ms` leaves the group (the coordinator describes it
/// empty) and rejoins, getting its tasks back, at the next poll.
#[tokio::test]
async fn a_consumer_that_stops_polling_leaves_and_rejoins_at_the_next_poll() {
    const PARTITIONS: i32 = 2;
    let Some((bootstrap, _cluster, topic)) = setup("sg-poll-expiry", PARTITIONS).await else {
        return;
    };
    let group = support::unique_topic("sg-poll-expiry-group");
    let config = purekafka::ConsumerConfig::from_properties([
        ("bootstrap.servers", bootstrap.as_str()),
        ("group.id", group.as_str()),
        // `polled_until` polls back to back, so the interval runs only
        // from its last poll.
        ("max.poll.interval.ms", "1000"),
    ])
    .expect("consumer config");
    let consumer = purekafka::Consumer::connect(config)
        .await
        .expect("consumer");
    consumer
        .subscribe_streams(topology(&topic, None), None)
        .expect("subscribe_streams");
    let polled_until = |want: usize| {
        let consumer = consumer.clone();
        async move {
            let deadline = Instant::now() + Duration::from_secs(60);
            while consumer.assignment().len() != want {
                assert!(
                    Instant::now() < deadline,
                    "no {want} partitions within 60 s"
                );
                consumer
                    .poll(Duration::from_millis(200))
                    .await
                    .expect("poll");
            }
        }
    };
    polled_until(PARTITIONS as usize).await;
    // No poll now: within max.poll.interval.ms and a heartbeat the member
    // leaves.
    let admin = Admin::connect(support::config(&bootstrap))
        .await
        .expect("admin");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let g = describe(&admin, &group).await.expect("described");
        if g.members.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "still a member 30 s after the last poll: {:?}",
            g.members
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // The next polls apply the loss, rejoin and take the tasks again.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        consumer
            .poll(Duration::from_millis(200))
            .await
            .expect("poll");
        if consumer.assignment().len() == PARTITIONS as usize {
            let g = describe(&admin, &group).await.expect("described");
            let active = g.members.first().map(|m| m.assignment.active.clone());
            if g.members.len() == 1 && active.and_then(|a| a.get("0").cloned()) == Some(vec![0, 1])
            {
                break;
            }
        }
        assert!(
            Instant::now() < deadline,
            "not back in the group within 60 s"
        );
    }
    tokio::time::timeout(Duration::from_secs(30), consumer.close())
        .await
        .expect("close within 30 s")
        .expect("close");
}

/// Records `on_lost` calls.
#[derive(Clone, Default)]
struct Losses(Arc<Mutex<Vec<Vec<purekafka::TopicPartition>>>>);

#[purekafka::async_trait]
impl purekafka::consumer::RebalanceListener for Losses {
    async fn on_lost(&self, _: &purekafka::Consumer, p: &[purekafka::TopicPartition]) {
        self.0.lock().unwrap().push(p.to_vec());
    }
}

/// A member the coordinator no longer knows (here: removed by a leave
/// heartbeat sent on its behalf) gets UNKNOWN_MEMBER_ID at its next
/// heartbeat: its partitions are lost (the listener's `on_lost`), and it
/// rejoins with the same member id and gets its tasks back.
#[tokio::test]
async fn an_unknown_member_loses_its_partitions_and_rejoins() {
    const PARTITIONS: i32 = 2;
    let Some((bootstrap, cluster, topic)) = setup("sg-unknown", PARTITIONS).await else {
        return;
    };
    let group = support::unique_topic("sg-unknown-group");
    let config = purekafka::ConsumerConfig::from_properties([
        ("bootstrap.servers", bootstrap.as_str()),
        ("group.id", group.as_str()),
    ])
    .expect("consumer config");
    let consumer = purekafka::Consumer::connect(config)
        .await
        .expect("consumer");
    let losses = Losses::default();
    consumer.set_rebalance_listener(losses.clone());
    consumer
        .subscribe_streams(topology(&topic, None), None)
        .expect("subscribe_streams");
    let deadline = Instant::now() + Duration::from_secs(60);
    while consumer.assignment().len() != PARTITIONS as usize {
        assert!(Instant::now() < deadline, "not assigned within 60 s");
        consumer
            .poll(Duration::from_millis(200))
            .await
            .expect("poll");
    }
    // A committed offset keeps the group while it is empty: the
    // coordinator's periodic cleanup (`offsets.retention.check.interval.ms`)
    // deletes an empty group with none, and a heartbeat after that gets
    // GROUP_ID_NOT_FOUND, fatal as in the Java client, instead of
    // UNKNOWN_MEMBER_ID (seen once in CI).
    let mut offsets = purekafka::consumer::Offsets::new();
    for p in 0..PARTITIONS {
        offsets.insert(
            purekafka::TopicPartition::new(topic.as_str(), p),
            purekafka::consumer::OffsetAndMetadata::new(0),
        );
    }
    consumer
        .commit_sync_offsets(offsets)
        .await
        .expect("commit while a member");
    let member_id = consumer.group_metadata().expect("metadata").member_id;
    let addr = cluster
        .coordinator(CoordinatorKind::Group, &group)
        .await
        .expect("coordinator");
    let leave = StreamsGroupHeartbeatRequest::default()
        .with_group_id(GroupId(s(&group)))
        .with_member_id(s(&member_id))
        .with_member_epoch(-1);
    let resp = cluster
        .send(&addr, Workload::Group, &leave, Versions::new(0, 1))
        .await
        .expect("leave on its behalf");
    assert_eq!(resp.error_code, 0, "{:?}", resp.error_message);
    let admin = Admin::connect(support::config(&bootstrap))
        .await
        .expect("admin");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        consumer
            .poll(Duration::from_millis(200))
            .await
            .expect("poll");
        let lost = losses.0.lock().unwrap().clone();
        if !lost.is_empty() && consumer.assignment().len() == PARTITIONS as usize {
            let g = describe(&admin, &group).await.expect("described");
            if g.members.len() == 1 && g.members[0].assignment.active.get("0") == Some(&vec![0, 1])
            {
                assert_eq!(g.members[0].member_id, member_id, "rejoined as itself");
                assert_eq!(lost.len(), 1, "{lost:?}");
                assert_eq!(lost[0].len(), PARTITIONS as usize, "{lost:?}");
                break;
            }
        }
        assert!(
            Instant::now() < deadline,
            "not lost and back within 60 s: lost {lost:?}, assigned {:?}",
            consumer.assignment()
        );
    }
    tokio::time::timeout(Duration::from_secs(30), consumer.close())
        .await
        .expect("close within 30 s")
        .expect("close");
}
