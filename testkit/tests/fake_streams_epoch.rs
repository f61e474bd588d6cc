//! A streams group member (KIP-1071) whose epoch moves while its
//! exactly-once commit is on the way. The coordinator checks a
//! `TxnOffsetCommit`'s member epoch exactly, so a commit that read the
//! epoch before a heartbeat moved it is refused with STALE_MEMBER_EPOCH; the
//! client sends it again with the new epoch. Made deterministic with the
//! fake: every heartbeat is served at once but answered late, so the member
//! commits while the coordinator already holds its next epoch.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kafka_protocol::messages::ApiKey;
use purekafka::producer::{Producer, ProducerConfig, ProducerRecord};
use purekafka::streams::{
    CommitMode, GroupProtocol, RunningStreams, Streams, StreamsConfig, StringDeserializer,
};
use purekafka::ClientConfig;
use purekafka_testkit::fake::{Action, FakeCluster, Rule};

const APP: &str = "epoch-race";
const PARTITIONS: i32 = 2;
/// How late each heartbeat is answered once the race is set up.
const LATE: Duration = Duration::from_secs(8);

async fn produce(fake: &FakeCluster, values: std::ops::Range<usize>) {
    let config = ProducerConfig::builder()
        .client(ClientConfig::builder().bootstrap_servers(fake.bootstrap()))
        .build()
        .expect("producer config");
    let producer = Producer::connect(config).await.expect("producer");
    let mut pending = Vec::new();
    for i in values {
        let record = ProducerRecord::new("in")
            .partition(i as i32 % PARTITIONS)
            .value(i.to_string());
        pending.push(producer.send(record).await.expect("send"));
    }
    for p in pending {
        p.await.expect("delivered");
    }
}

async fn start(fake: &FakeCluster, seen: &Arc<Mutex<BTreeSet<String>>>) -> RunningStreams {
    let seen = seen.clone();
    Streams::topology(
        StreamsConfig::builder(APP, fake.bootstrap())
            .commit_mode(CommitMode::ExactlyOnce)
            .group_protocol(GroupProtocol::Streams)
            .commit_interval(Duration::from_millis(100))
            .build()
            .expect("streams config"),
    )
    .source("in", StringDeserializer, StringDeserializer)
    .for_each_async(move |rec| {
        let seen = seen.clone();
        async move {
            seen.lock().expect("lock").insert(rec.value.clone());
            Ok(())
        }
    })
    .build()
    .start()
    .await
    .expect("start")
}

/// Waits (30 s at most) until `cond` holds for the fake's streams group
/// (its members, each with its epoch and tasks, and the group epoch).
async fn until_group(
    fake: &FakeCluster,
    what: &str,
    cond: impl Fn(&[(i32, usize, usize)], i32) -> bool,
) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (members, epoch) = fake.with_state(|s| match s.groups.streams.get(APP) {
            Some(g) => (
                g.members
                    .values()
                    .map(|m| (m.epoch, m.assigned.len(), m.revoking.len()))
                    .collect::<Vec<_>>(),
                g.epoch,
            ),
            None => (Vec::new(), -1),
        });
        if cond(&members, epoch) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: members (epoch, tasks, revoking) {members:?}, group epoch {epoch}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Waits (30 s at most) until `n` records were seen; false if `a` stopped.
async fn until_seen(seen: &Arc<Mutex<BTreeSet<String>>>, n: usize, a: &RunningStreams) -> bool {
    let deadline = Instant::now() + Duration::from_secs(30);
    while seen.lock().expect("lock").len() < n {
        if a.is_finished() {
            return false;
        }
        assert!(Instant::now() < deadline, "{:?}", a.metrics());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    true
}

/// `a`'s error, once it stopped early.
async fn stopped(a: RunningStreams) -> ! {
    panic!("instance a stopped: {:?}", a.shutdown().await)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_exactly_once_commit_raced_by_an_epoch_bump_is_sent_again_with_the_new_epoch() {
    let fake = FakeCluster::start(1).await.expect("fake");
    fake.create_topic("in", PARTITIONS).expect("topic");
    let seen: Arc<Mutex<BTreeSet<String>>> = Arc::default();
    produce(&fake, 0..20).await;
    let a = start(&fake, &seen).await;
    if !until_seen(&seen, 20, &a).await {
        stopped(a).await;
    }

    // A second instance takes one task; both settle at the group's epoch.
    let b = start(&fake, &Arc::default()).await;
    until_group(&fake, "two settled members", |m, epoch| {
        m.len() == 2
            && m.iter()
                .all(|&(e, tasks, rev)| e == epoch && tasks == 1 && rev == 0)
    })
    .await;

    // From now on heartbeats are served at once and answered LATE later.
    fake.intercept(
        Rule::new(Action::DelayAnswer(LATE))
            .on_api(ApiKey::StreamsGroupHeartbeat)
            .on_group(APP),
    );
    let b = tokio::spawn(async move { b.shutdown().await });
    // B's leave bumps the group epoch; a's next heartbeat moves it to the
    // new epoch with both tasks, but a learns that only LATE later.
    until_group(&fake, "a alone at the new epoch", |m, epoch| {
        m.len() == 1 && m[0].0 == epoch && m[0].1 == PARTITIONS as usize
    })
    .await;
    let moved = Instant::now();
    // Records on a's own task: processed and committed (100 ms commit
    // interval) with the epoch a still holds.
    produce(&fake, 20..40).await;
    if !until_seen(&seen, 30, &a).await {
        stopped(a).await;
    }
    assert!(
        moved.elapsed() < LATE,
        "the records were processed only after a could have learnt its new epoch ({:?})",
        moved.elapsed()
    );

    if !until_seen(&seen, 40, &a).await {
        stopped(a).await;
    }
    b.await.expect("b's task").expect("b shut down");
    a.shutdown().await.expect("a shut down");
    let want: BTreeSet<String> = (0..40).map(|i| i.to_string()).collect();
    assert_eq!(*seen.lock().expect("lock"), want);
    let committed: i64 = (0..PARTITIONS)
        .map(|p| fake.committed_offset(APP, "in", p).unwrap_or(0))
        .sum();
    assert_eq!(committed, 40, "the final commit covers every record");
}
