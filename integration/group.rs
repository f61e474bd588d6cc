//! Consumer-group membership and offsets against the real broker, through
//! the membership API directly (no fetching): assignments for every
//! assignor and both group protocols, hand-over when members come and go,
//! cooperative stickiness, static membership, commits.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use purekafka::consumer::group::{
    GroupConfig, GroupEvent, GroupEvents, GroupMember, OffsetAndMetadata,
};
use purekafka::{Cluster, TopicPartition};

use crate::support;

const PARTITIONS: i32 = 6;
const SETTLE: Duration = Duration::from_secs(60);

/// What one member saw, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Seen {
    Assigned(Vec<TopicPartition>),
    Revoked(Vec<TopicPartition>),
    Lost(Vec<TopicPartition>),
    Fatal(String),
}

/// A member plus a task that answers its events the way a consumer would
/// (revocations acked at once) and records them.
struct TestMember {
    member: GroupMember,
    seen: Arc<Mutex<Vec<Seen>>>,
}

impl TestMember {
    fn start(cluster: &Cluster, config: GroupConfig, topic: &str) -> TestMember {
        let (member, events) =
            GroupMember::join(cluster, config, vec![topic.to_owned()]).expect("join");
        let seen = Arc::new(Mutex::new(Vec::new()));
        tokio::spawn(drain(events, seen.clone()));
        TestMember { member, seen }
    }

    fn assignment(&self) -> BTreeSet<TopicPartition> {
        self.member.assignment().into_iter().collect()
    }

    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}

async fn drain(mut events: GroupEvents, seen: Arc<Mutex<Vec<Seen>>>) {
    while let Some(e) = events.recv().await {
        let s = match e {
            GroupEvent::Assigned(p) => Seen::Assigned(p),
            GroupEvent::Revoked(p, ack) => {
                ack.ack();
                Seen::Revoked(p)
            }
            GroupEvent::Lost(p) => Seen::Lost(p),
            GroupEvent::Fatal(e) => Seen::Fatal(e.to_string()),
            other => panic!("unexpected event {other:?}"),
        };
        seen.lock().unwrap().push(s);
    }
}

fn group_config(group: &str, props: &[(&str, &str)]) -> GroupConfig {
    let mut c = GroupConfig::new(group);
    for (k, v) in [
        ("session.timeout.ms", "10000"),
        ("heartbeat.interval.ms", "100"),
        ("max.poll.interval.ms", "30000"),
    ]
    .iter()
    .chain(props)
    {
        c.try_set(k, v).expect("known key").expect("valid value");
    }
    c
}

/// Waits (polling each member) until the members' assignments are
/// disjoint, cover every partition, and give each member at least one;
/// returns them.
async fn settled(members: &[&TestMember], topic: &str) -> Vec<BTreeSet<TopicPartition>> {
    let all: BTreeSet<TopicPartition> = (0..PARTITIONS)
        .map(|p| TopicPartition::new(topic, p))
        .collect();
    let deadline = tokio::time::Instant::now() + SETTLE;
    loop {
        // As a consumer would: poll while waiting.
        for m in members {
            m.member.notify_poll();
        }
        let sets: Vec<BTreeSet<TopicPartition>> = members.iter().map(|m| m.assignment()).collect();
        let total: usize = sets.iter().map(BTreeSet::len).sum();
        let union: BTreeSet<TopicPartition> = sets.iter().flatten().cloned().collect();
        if total == all.len() && union == all && sets.iter().all(|s| !s.is_empty()) {
            return sets;
        }
        for m in members {
            if let Some(Seen::Fatal(e)) = m.seen().last() {
                panic!("membership failed: {e}");
            }
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no settled assignment within {SETTLE:?}: {sets:?}; events: {:?}",
            members.iter().map(|m| m.seen()).collect::<Vec<_>>()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Waits (bounded) until each member's recorded events add up to its
/// assignment. The event task records an event after the member's
/// assignment has changed, so a count of events taken right after
/// [`settled`] may miss the last rebalance's assignment, which would then
/// be judged as part of the next one.
async fn events_caught_up(members: &[&TestMember]) {
    let deadline = tokio::time::Instant::now() + SETTLE;
    loop {
        let behind: Vec<(BTreeSet<TopicPartition>, BTreeSet<TopicPartition>)> = members
            .iter()
            .map(|m| {
                let mut owned = BTreeSet::new();
                for s in m.seen() {
                    match s {
                        Seen::Assigned(ps) => owned.extend(ps),
                        Seen::Revoked(ps) | Seen::Lost(ps) => {
                            for tp in &ps {
                                owned.remove(tp);
                            }
                        }
                        Seen::Fatal(e) => panic!("membership failed: {e}"),
                    }
                }
                (owned, m.assignment())
            })
            .filter(|(owned, assigned)| owned != assigned)
            .collect();
        if behind.is_empty() {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "events never added up to the assignments within {SETTLE:?}: {behind:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Longer than a heartbeat interval: 100 ms for classic members here; for
/// KIP-848 members the broker's `group.consumer.heartbeat.interval.ms`,
/// 5 s on Kafka and 50 ms on the fake cluster.
fn heartbeat_window(props: &[(&str, &str)]) -> Duration {
    let kip848 = props.contains(&("group.protocol", "consumer"));
    if kip848 && support::broker_provider() != support::BrokerProvider::Fake {
        Duration::from_secs(6)
    } else {
        Duration::from_millis(500)
    }
}

/// [`settled`], and then the same assignment and one generation across
/// every member, unchanged for `window`; returns the assignment.
async fn settled_fully(
    members: &[&TestMember],
    topic: &str,
    window: Duration,
) -> Vec<BTreeSet<TopicPartition>> {
    let deadline = tokio::time::Instant::now() + SETTLE;
    loop {
        let sets = settled(members, topic).await;
        let generations: BTreeSet<i32> = members
            .iter()
            .map(|m| m.member.group_metadata().generation_id)
            .collect();
        let since = tokio::time::Instant::now();
        while generations.len() == 1 && since.elapsed() < window {
            for m in members {
                m.member.notify_poll();
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
            let now: BTreeSet<i32> = members
                .iter()
                .map(|m| m.member.group_metadata().generation_id)
                .collect();
            let same = members.iter().zip(&sets).all(|(m, s)| m.assignment() == *s);
            if now != generations || !same {
                break;
            }
        }
        if generations.len() == 1 && since.elapsed() >= window {
            return sets;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no stable generation within {SETTLE:?}: {generations:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn setup(test: &str) -> Option<(Cluster, String, String)> {
    let bootstrap = support::bootstrap(test)?;
    let cluster = Cluster::connect(support::config(&bootstrap))
        .await
        .expect("connect");
    let topic = support::unique_topic(test);
    support::create_topic(&cluster, &topic, PARTITIONS).await;
    Some((
        cluster,
        topic,
        support::unique_topic(&format!("{test}-group")),
    ))
}

/// Two members split the partitions, a third joins, then one leaves and the
/// others take its partitions over.
async fn split_join_leave(test: &str, props: &[(&str, &str)]) {
    let Some((cluster, topic, group)) = setup(test).await else {
        return;
    };
    let a = TestMember::start(&cluster, group_config(&group, props), &topic);
    let b = TestMember::start(&cluster, group_config(&group, props), &topic);
    let two = settled(&[&a, &b], &topic).await;
    assert_eq!(two.iter().map(BTreeSet::len).sum::<usize>(), 6);
    let c = TestMember::start(&cluster, group_config(&group, props), &topic);
    let three = settled(&[&a, &b, &c], &topic).await;
    assert!(three.iter().all(|s| s.len() == 2), "{three:?}");
    assert_eq!(a.member.group_metadata().group_id, group);
    assert!(a.member.group_metadata().generation_id > 0);
    b.member.close().await.expect("close");
    let after = settled(&[&a, &c], &topic).await;
    assert!(after.iter().all(|s| s.len() == 3), "{after:?}");
    for m in [&a, &c] {
        assert!(
            !m.seen()
                .iter()
                .any(|s| matches!(s, Seen::Lost(_) | Seen::Fatal(_))),
            "{:?}",
            m.seen()
        );
    }
    a.member.close().await.expect("close");
    c.member.close().await.expect("close");
}

#[tokio::test]
async fn classic_range_splits_and_hands_over() {
    split_join_leave("group-range", &[("partition.assignment.strategy", "range")]).await;
}

#[tokio::test]
async fn classic_roundrobin_splits_and_hands_over() {
    split_join_leave(
        "group-rr",
        &[("partition.assignment.strategy", "roundrobin")],
    )
    .await;
}

#[tokio::test]
async fn classic_cooperative_sticky_splits_and_hands_over() {
    split_join_leave(
        "group-coop",
        &[("partition.assignment.strategy", "cooperative-sticky")],
    )
    .await;
}

#[tokio::test]
async fn consumer_protocol_uniform_splits_and_hands_over() {
    split_join_leave(
        "group-848-uniform",
        &[
            ("group.protocol", "consumer"),
            ("group.remote.assignor", "uniform"),
        ],
    )
    .await;
}

#[tokio::test]
async fn consumer_protocol_range_splits_and_hands_over() {
    split_join_leave(
        "group-848-range",
        &[
            ("group.protocol", "consumer"),
            ("group.remote.assignor", "range"),
        ],
    )
    .await;
}

/// Incremental rebalancing: when a member joins, the others only revoke
/// the partitions that move to it, and keep the rest throughout.
async fn incremental_keeps_unmoved(test: &str, props: &[(&str, &str)]) {
    let Some((cluster, topic, group)) = setup(test).await else {
        return;
    };
    let a = TestMember::start(&cluster, group_config(&group, props), &topic);
    let b = TestMember::start(&cluster, group_config(&group, props), &topic);
    let before = settled(&[&a, &b], &topic).await;
    events_caught_up(&[&a, &b]).await;
    let (seen_a, seen_b) = (a.seen().len(), b.seen().len());
    let c = TestMember::start(&cluster, group_config(&group, props), &topic);
    let after = settled(&[&a, &b, &c], &topic).await;
    for (i, (m, skip)) in [(&a, seen_a), (&b, seen_b)].into_iter().enumerate() {
        assert!(after[i].is_subset(&before[i]), "{before:?} -> {after:?}");
        for s in &m.seen()[skip..] {
            match s {
                Seen::Revoked(ps) => {
                    for tp in ps {
                        assert!(after[2].contains(tp), "revoked {tp}, which did not move");
                    }
                }
                Seen::Assigned(ps) => assert!(ps.is_empty(), "unexpected assignment {ps:?}"),
                other => panic!("unexpected {other:?}"),
            }
        }
    }
    for m in [a, b, c] {
        m.member.close().await.expect("close");
    }
}

#[tokio::test]
async fn classic_cooperative_sticky_keeps_unmoved_partitions() {
    incremental_keeps_unmoved(
        "group-coop-sticky",
        &[("partition.assignment.strategy", "cooperative-sticky")],
    )
    .await;
}

#[tokio::test]
async fn consumer_protocol_keeps_unmoved_partitions() {
    incremental_keeps_unmoved("group-848-sticky", &[("group.protocol", "consumer")]).await;
}

/// A static member (KIP-345) that restarts within the session timeout gets
/// its assignment back, and the group does not rebalance: the other member
/// sees no event and keeps its generation (classic) or member epoch (KIP-848).
async fn static_restart(test: &str, props: &[(&str, &str)]) {
    let Some((cluster, topic, group)) = setup(test).await else {
        return;
    };
    let config = |id: &str| {
        let mut c = group_config(&group, props);
        c.try_set("group.instance.id", id).unwrap().unwrap();
        c
    };
    let a = TestMember::start(&cluster, config("a"), &topic);
    let b = TestMember::start(&cluster, config("b"), &topic);
    // Let the group settle fully: both members at one generation (member
    // epoch) owning every partition, unchanged for longer than a heartbeat
    // interval (a pending rebalance reaches a member at its next heartbeat;
    // KIP-848 members also confirm their assignment there).
    let before = settled_fully(&[&a, &b], &topic, heartbeat_window(props)).await;
    let generation = a.member.group_metadata().generation_id;
    let b_generation = b.member.group_metadata().generation_id;
    let seen_b = b.seen();
    a.member.close().await.expect("close");
    let a2 = TestMember::start(&cluster, config("a"), &topic);
    let after = settled(&[&a2, &b], &topic).await;
    assert_eq!(after, before);
    if !props.contains(&("group.protocol", "consumer")) {
        assert_eq!(a2.member.group_metadata().generation_id, generation);
    }
    assert_eq!(b.member.group_metadata().generation_id, b_generation);
    assert_eq!(b.seen(), seen_b, "the other member saw a rebalance");
    for m in [a2, b] {
        m.member.close().await.expect("close");
    }
}

#[tokio::test]
async fn static_member_restart_keeps_assignment_without_rebalance() {
    static_restart("group-static", &[]).await;
}

#[tokio::test]
async fn consumer_protocol_static_member_restart_keeps_assignment() {
    static_restart("group-848-static", &[("group.protocol", "consumer")]).await;
}

async fn joined(test: &str, props: &[(&str, &str)]) -> Option<(TestMember, Vec<TopicPartition>)> {
    let (cluster, topic, group) = setup(test).await?;
    let m = TestMember::start(&cluster, group_config(&group, props), &topic);
    let parts = settled(&[&m], &topic).await;
    Some((m, parts[0].iter().cloned().collect()))
}

async fn commit_round_trip(test: &str, props: &[(&str, &str)]) {
    let Some((m, parts)) = joined(test, props).await else {
        return;
    };
    let offsets: HashMap<TopicPartition, OffsetAndMetadata> = parts
        .iter()
        .map(|tp| {
            let o = OffsetAndMetadata {
                offset: 10 + i64::from(tp.partition),
                leader_epoch: Some(0),
                metadata: format!("meta-{}", tp.partition),
            };
            (tp.clone(), o)
        })
        .collect();
    m.member.commit(offsets.clone()).await.expect("commit");
    let back = m.member.fetch_committed(&parts).await.expect("fetch");
    assert_eq!(back, offsets);
    m.member.close().await.expect("close");
}

#[tokio::test]
async fn classic_commit_then_fetch_round_trips() {
    commit_round_trip("group-commit", &[]).await;
}

#[tokio::test]
async fn consumer_protocol_commit_then_fetch_round_trips() {
    commit_round_trip("group-848-commit", &[("group.protocol", "consumer")]).await;
}

#[tokio::test]
async fn async_commit_callbacks_arrive_in_commit_order() {
    let Some((m, parts)) = joined("group-async", &[]).await else {
        return;
    };
    let order = Arc::new(Mutex::new(Vec::new()));
    for i in 0..20i64 {
        let offsets = parts
            .iter()
            .map(|tp| (tp.clone(), OffsetAndMetadata::new(i)))
            .collect();
        let order = order.clone();
        m.member
            .commit_async(offsets, move |r| order.lock().unwrap().push((i, r.is_ok())))
            .await;
    }
    // A synchronous commit completes after every earlier one.
    m.member.commit(HashMap::new()).await.expect("empty commit");
    let last: HashMap<_, _> = parts
        .iter()
        .map(|tp| (tp.clone(), OffsetAndMetadata::new(19)))
        .collect();
    m.member.commit(last).await.expect("commit");
    let seen = order.lock().unwrap().clone();
    assert_eq!(seen, (0..20).map(|i| (i, true)).collect::<Vec<_>>());
    let back = m.member.fetch_committed(&parts).await.expect("fetch");
    assert!(back.values().all(|o| o.offset == 19), "{back:?}");
    m.member.close().await.expect("close");
}

/// A member whose application stops polling leaves after
/// `max.poll.interval.ms`: its partitions are lost to it and go to the
/// other member, its commits fail as commit-failed, and the next poll
/// brings it back.
async fn poll_timeout_leaves_and_poll_rejoins(test: &str, props: &[(&str, &str)]) {
    let Some((cluster, topic, group)) = setup(test).await else {
        return;
    };
    let slow: Vec<(&str, &str)> = props
        .iter()
        .copied()
        // `settled` notifies a poll every 100 ms, so a's interval runs
        // only once the group has settled.
        .chain([("max.poll.interval.ms", "1000")])
        .collect();
    let a = TestMember::start(&cluster, group_config(&group, &slow), &topic);
    let b = TestMember::start(&cluster, group_config(&group, props), &topic);
    let before = settled(&[&a, &b], &topic).await;
    let deadline = tokio::time::Instant::now() + SETTLE;
    while b.assignment().len() < PARTITIONS as usize {
        b.member.notify_poll();
        assert!(
            tokio::time::Instant::now() < deadline,
            "b never got a's partitions"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(a.assignment().is_empty());
    assert!(
        a.seen()
            .contains(&Seen::Lost(before[0].iter().cloned().collect())),
        "{:?}",
        a.seen()
    );
    let stale: HashMap<_, _> = before[0]
        .iter()
        .map(|tp| (tp.clone(), OffsetAndMetadata::new(1)))
        .collect();
    let err = a.member.commit(stale).await.expect_err("stale commit");
    assert!(err.is_commit_failed(), "{err}");
    assert!(err.to_string().contains(&group), "{err}");
    a.member.notify_poll();
    let keep_polling = async {
        loop {
            a.member.notify_poll();
            b.member.notify_poll();
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    };
    let both = [&a, &b];
    tokio::select! {
        _ = settled(&both, &topic) => {}
        _ = keep_polling => {}
    }
    for m in [a, b] {
        m.member.close().await.expect("close");
    }
}

#[tokio::test]
async fn classic_poll_timeout_leaves_and_poll_rejoins() {
    poll_timeout_leaves_and_poll_rejoins("group-poll", &[]).await;
}

#[tokio::test]
async fn consumer_protocol_poll_timeout_leaves_and_poll_rejoins() {
    poll_timeout_leaves_and_poll_rejoins("group-848-poll", &[("group.protocol", "consumer")]).await;
}

/// The rebalance-listener contract: on `Revoked`, the consumer can still
/// commit the revoked partitions' offsets (membership waits for the ack),
/// and the member that takes them over reads those offsets.
async fn commit_on_revoke(test: &str, props: &[(&str, &str)]) {
    let Some((cluster, topic, group)) = setup(test).await else {
        return;
    };
    let (a, mut events) =
        GroupMember::join(&cluster, group_config(&group, props), vec![topic.clone()])
            .expect("join");
    let deadline = tokio::time::Instant::now() + SETTLE;
    while a.assignment().len() < PARTITIONS as usize {
        assert!(
            tokio::time::Instant::now() < deadline,
            "a never got everything"
        );
        if let Some(GroupEvent::Fatal(e)) = events.recv_timeout(Duration::from_millis(100)).await {
            panic!("{e}");
        }
        a.notify_poll();
    }
    let b = TestMember::start(&cluster, group_config(&group, props), &topic);
    let revoked = loop {
        a.notify_poll();
        b.member.notify_poll();
        assert!(
            tokio::time::Instant::now() < deadline,
            "a never had to revoke"
        );
        match events.recv_timeout(Duration::from_millis(100)).await {
            Some(GroupEvent::Revoked(parts, ack)) => {
                let offsets: HashMap<_, _> = parts
                    .iter()
                    .map(|tp| {
                        let o = OffsetAndMetadata {
                            offset: 100 + i64::from(tp.partition),
                            leader_epoch: None,
                            metadata: "on-revoke".into(),
                        };
                        (tp.clone(), o)
                    })
                    .collect();
                a.commit(offsets).await.expect("commit while revoking");
                ack.ack();
                break parts;
            }
            Some(GroupEvent::Fatal(e)) => panic!("{e}"),
            _ => {}
        }
    };
    tokio::spawn(drain(events, Arc::new(Mutex::new(Vec::new()))));
    let a = TestMember {
        member: a,
        seen: Arc::new(Mutex::new(Vec::new())),
    };
    let sets = settled(&[&a, &b], &topic).await;
    let moved: Vec<TopicPartition> = revoked
        .into_iter()
        .filter(|tp| sets[1].contains(tp))
        .collect();
    assert!(!moved.is_empty(), "nothing moved to b: {sets:?}");
    let back = b.member.fetch_committed(&moved).await.expect("fetch");
    for tp in &moved {
        assert_eq!(back[tp].offset, 100 + i64::from(tp.partition));
        assert_eq!(back[tp].metadata, "on-revoke");
    }
    for m in [a, b] {
        m.member.close().await.expect("close");
    }
}

#[tokio::test]
async fn classic_eager_commit_on_revoke_reaches_the_next_owner() {
    commit_on_revoke(
        "group-revoke-eager",
        &[("partition.assignment.strategy", "range")],
    )
    .await;
}

#[tokio::test]
async fn classic_cooperative_commit_on_revoke_reaches_the_next_owner() {
    commit_on_revoke(
        "group-revoke-coop",
        &[("partition.assignment.strategy", "cooperative-sticky")],
    )
    .await;
}

#[tokio::test]
async fn consumer_protocol_commit_on_revoke_reaches_the_next_owner() {
    commit_on_revoke("group-revoke-848", &[("group.protocol", "consumer")]).await;
}

/// Runs a Java Kafka tool class through `scripts/kafka tool`, in a
/// process group of its own (the script runs java as its child).
fn java_tool(args: &[&str]) -> tokio::process::Command {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/kafka");
    let mut cmd = tokio::process::Command::new(script);
    cmd.arg("tool")
        .args(args)
        .env(support::java::QUICK_JIT.0, support::java::QUICK_JIT.1)
        .process_group(0)
        .kill_on_drop(true);
    cmd
}

/// Ends a tool's whole process group when dropped, panics included.
struct KillGroup(Option<u32>);

impl Drop for KillGroup {
    fn drop(&mut self) {
        if let Some(pid) = self.0 {
            let _ = std::process::Command::new("kill")
                .arg("--")
                .arg(format!("-{pid}"))
                .status();
        }
    }
}

/// Waits until `m` owns exactly `n` partitions.
async fn owns(m: &TestMember, n: usize) {
    let deadline = tokio::time::Instant::now() + SETTLE;
    while m.assignment().len() != n {
        m.member.notify_poll();
        assert!(
            tokio::time::Instant::now() < deadline,
            "never owned {n}: {:?}",
            m.seen()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Interop with the Java consumer in one classic group: the Java client
/// decodes our leader's assignment (and `kafka-consumer-groups` describes
/// it), and we decode the assignment a Java leader computes for us.
#[tokio::test]
async fn classic_group_shared_with_a_java_consumer() {
    let Some((cluster, topic, group)) = setup("group-java").await else {
        return;
    };
    let bootstrap = cluster.config().bootstrap_servers.join(",");
    let props = [("partition.assignment.strategy", "range")];
    // We join first, so we lead the first rebalance with the Java member.
    let ours = TestMember::start(&cluster, group_config(&group, &props), &topic);
    owns(&ours, 6).await;
    let java = java_tool(&[
        "org.apache.kafka.tools.consumer.ConsoleConsumer",
        "--bootstrap-server",
        &bootstrap,
        "--topic",
        &topic,
        "--group",
        &group,
        "--timeout-ms",
        "60000",
        "--consumer-property",
        "partition.assignment.strategy=org.apache.kafka.clients.consumer.RangeAssignor",
        "--consumer-property",
        "heartbeat.interval.ms=300",
    ])
    .stdout(std::process::Stdio::null())
    .stderr(std::process::Stdio::null())
    .spawn()
    .expect("start the Java console consumer");
    let _java_group = KillGroup(java.id());
    owns(&ours, 3).await;
    let out = java_tool(&[
        "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand",
        "--bootstrap-server",
        &bootstrap,
        "--describe",
        "--group",
        &group,
        "--members",
        "--verbose",
    ])
    .output()
    .await
    .expect("describe the group");
    let text = String::from_utf8_lossy(&out.stdout);
    let our_id = ours.member.group_metadata().member_id;
    let our_line = text
        .lines()
        .find(|l| l.contains(&our_id))
        .unwrap_or_else(|| panic!("{our_id} not described:\n{text}"));
    let ours_now = ours.assignment();
    let listed = ours_now
        .iter()
        .map(|tp| tp.partition.to_string())
        .collect::<Vec<_>>()
        .join(",");
    assert!(
        our_line.contains(&format!("{topic}:{listed}")),
        "Java reads our assignment as: {our_line}"
    );
    // Now the Java member is the only one left, so it leads the next
    // rebalance and computes the assignment a new member of ours decodes.
    ours.member.close().await.expect("close");
    tokio::time::sleep(Duration::from_secs(2)).await;
    let ours2 = TestMember::start(&cluster, group_config(&group, &props), &topic);
    owns(&ours2, 3).await;
    ours2.member.close().await.expect("close");
}

#[tokio::test]
async fn manual_assignment_commits_without_membership() {
    let Some((cluster, topic, group)) = setup("group-manual").await else {
        return;
    };
    let m = GroupMember::without_membership(&cluster, GroupConfig::new(&group)).expect("offsets");
    let tp = TopicPartition::new(topic.as_str(), 4);
    let o = OffsetAndMetadata {
        offset: 42,
        leader_epoch: None,
        metadata: String::new(),
    };
    m.commit(HashMap::from([(tp.clone(), o.clone())]))
        .await
        .expect("commit");
    let other = TopicPartition::new(topic.as_str(), 5);
    let back = m
        .fetch_committed(&[tp.clone(), other.clone()])
        .await
        .expect("fetch");
    assert_eq!(back.get(&tp), Some(&o));
    assert!(!back.contains_key(&other), "never committed: {back:?}");
    assert_eq!(m.group_metadata().generation_id, -1);
    m.close().await.expect("close");
}

/// Changing the subscription rebalances: new topics' partitions are
/// assigned, dropped topics' partitions are revoked.
async fn subscription_change(test: &str, props: &[(&str, &str)]) {
    let Some((cluster, topic, group)) = setup(test).await else {
        return;
    };
    let other = support::unique_topic(&format!("{test}-other"));
    support::create_topic(&cluster, &other, 2).await;
    let m = TestMember::start(&cluster, group_config(&group, props), &topic);
    owns(&m, 6).await;
    m.member
        .subscribe(vec![topic.clone(), other.clone()])
        .expect("subscribe");
    owns(&m, 8).await;
    m.member.subscribe(vec![other.clone()]).expect("subscribe");
    owns(&m, 2).await;
    assert!(m.assignment().iter().all(|tp| *tp.topic == *other));
    let revoked: BTreeSet<TopicPartition> = m
        .seen()
        .into_iter()
        .filter_map(|s| match s {
            Seen::Revoked(ps) => Some(ps),
            _ => None,
        })
        .flatten()
        .collect();
    assert!(
        (0..PARTITIONS).all(|p| revoked.contains(&TopicPartition::new(topic.as_str(), p))),
        "{:?}",
        m.seen()
    );
    m.member.close().await.expect("close");
}

/// A member subscribed to a topic that does not exist yet gets its
/// partitions soon after it is created, not at the next
/// `metadata.max.age.ms` (5 minutes): as the Java client, metadata that
/// lacks a subscribed topic is asked for again after `retry.backoff.ms`.
async fn topic_created_after_subscribing(test: &str, props: &[(&str, &str)]) {
    support::trace();
    let Some((cluster, _, group)) = setup(test).await else {
        return;
    };
    let later = support::unique_topic(&format!("{test}-later"));
    let m = TestMember::start(&cluster, group_config(&group, props), &later);
    // In the group, owning nothing: the topic is unknown.
    let deadline = tokio::time::Instant::now() + SETTLE;
    while m.member.group_metadata().generation_id < 0 {
        m.member.notify_poll();
        assert!(tokio::time::Instant::now() < deadline, "never joined");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(m.assignment().is_empty(), "{:?}", m.seen());
    // Created through another client, so the member's metadata learns of
    // it only by asking again.
    let creator = Cluster::connect(cluster.config().clone())
        .await
        .expect("connect");
    support::create_topic(&creator, &later, PARTITIONS).await;
    let created = tokio::time::Instant::now();
    owns(&m, PARTITIONS as usize).await;
    assert!(
        created.elapsed() < Duration::from_secs(30),
        "the partitions came only after {:?}",
        created.elapsed()
    );
    m.member.close().await.expect("close");
}

#[tokio::test]
async fn classic_a_topic_created_after_subscribing_is_assigned() {
    topic_created_after_subscribing("group-later", &[]).await;
}

#[tokio::test]
async fn consumer_protocol_a_topic_created_after_subscribing_is_assigned() {
    topic_created_after_subscribing("group-848-later", &[("group.protocol", "consumer")]).await;
}

#[tokio::test]
async fn classic_subscription_change_rebalances() {
    subscription_change(
        "group-resub",
        &[("partition.assignment.strategy", "cooperative-sticky")],
    )
    .await;
}

#[tokio::test]
async fn consumer_protocol_subscription_change_rebalances() {
    subscription_change("group-848-resub", &[("group.protocol", "consumer")]).await;
}
