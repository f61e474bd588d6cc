//! Standby replicas on a streams group (`num.standby.replicas`,
//! KIP-1071): with one standby, the second instance of a counting
//! application keeps a copy of the active task's store, caught up from
//! its changelog; when the active instance stops mid-run, the successor
//! promotes its standby and restores only the tail of the changelog (not
//! all of it), and the read_committed counts are exact (exactly-once).
//! An active task moved to another instance stays here as a standby and
//! keeps its (in-memory) store: it does not restore it again, and when
//! the other instance stops, it is promoted with exact counts.

use std::collections::BTreeMap;
use std::path::PathBuf;

use purekafka::consumer::IsolationLevel;
use purekafka::streams::state::StoreSpec;
use purekafka::streams::{GroupProtocol, Topology};

use super::*;

const KEYS: usize = 6;

/// What these tests need that the fake cluster does not model.
const STANDBY_TASKS: &str = "standby tasks on streams groups (streams.num.standby.replicas)";

/// The count-by-key application (exactly-once, one standby, the record
/// cache off: one changelog record per input record).
fn counting(bootstrap: &str, app: &str, input: &str, out: &str, dir: &PathBuf) -> Topology {
    counting_in(
        bootstrap,
        app,
        input,
        out,
        dir,
        StoreSpec::persistent("counts"),
    )
}

fn counting_in(
    bootstrap: &str,
    app: &str,
    input: &str,
    out: &str,
    dir: &PathBuf,
    store: StoreSpec,
) -> Topology {
    let config = config(bootstrap, app)
        .ordering(OrderingMode::Key)
        .commit_mode(CommitMode::ExactlyOnce)
        .group_protocol(GroupProtocol::Streams)
        .num_standby_replicas(1)
        .state_dir(dir)
        .cache_max_bytes(0)
        .build()
        .unwrap();
    Streams::topology(config)
        .source(input, StringDeserializer, StringDeserializer)
        .group_by_key()
        .count(store, StringSerializer)
        .to_stream()
        .map(|r| {
            let v = format!("{}={}", r.key.clone().unwrap_or_default(), r.value);
            Ok(r.with_value(v))
        })
        .to(out, StringSerializer, StringSerializer)
}

/// Records per key among `n` records written by [`produce`] with
/// [`KEYS`] keys in calls of `batches` records.
fn reference(batches: &[usize]) -> BTreeMap<String, i64> {
    let mut m = BTreeMap::new();
    for n in batches {
        for i in 0..*n {
            *m.entry(format!("key-{}", i % KEYS)).or_insert(0) += 1;
        }
    }
    m
}

/// Data records in the changelog partition (control batches skipped;
/// every transaction of this test commits).
async fn changelog_records(cluster: &Cluster, changelog: &str) -> usize {
    changelog_partition(cluster, changelog, 0).await
}

/// Data records in partition `p` of the changelog.
async fn changelog_partition(cluster: &Cluster, changelog: &str, p: i32) -> usize {
    support::read::read_partition(cluster, changelog, p)
        .await
        .len()
}

/// Asserts each key's read_committed updates in `out` (`partitions`
/// partitions) count 1, 2, ... up to its reference count.
async fn assert_exact(
    bootstrap: &str,
    out: &str,
    partitions: i32,
    expected: &BTreeMap<String, i64>,
) {
    let mut updates: BTreeMap<String, Vec<i64>> = BTreeMap::new();
    for v in
        support::read::consume_values(bootstrap, out, partitions, IsolationLevel::ReadCommitted)
            .await
            .into_iter()
            .flatten()
    {
        let (k, n) = v.split_once('=').expect("key=count");
        updates
            .entry(k.to_owned())
            .or_default()
            .push(n.parse().unwrap());
    }
    assert_eq!(
        updates.keys().collect::<Vec<_>>(),
        expected.keys().collect::<Vec<_>>()
    );
    for (k, n) in expected {
        let want: Vec<i64> = (1..=*n).collect();
        assert_eq!(updates[k], want, "updates of {k}");
    }
}

/// Waits until `what` holds, up to 90 s, failing with `about`.
async fn until(about: &str, mut what: impl AsyncFnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(90);
    while !what().await {
        assert!(Instant::now() < deadline, "not within 90 s: {about}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn a_standby_is_promoted_and_restores_only_the_tail_with_exact_counts() {
    if !support::real_broker_only(
        "a_standby_is_promoted_and_restores_only_the_tail_with_exact_counts",
        STANDBY_TASKS,
    ) {
        return;
    }
    let Some((bootstrap, cluster, input)) = setup("streams-standby", 1).await else {
        return;
    };
    let out = format!("{input}-out");
    support::create_topic(&cluster, &out, 1).await;
    let app = support::unique_topic("streams-standby-app");
    let changelog = format!("{app}-counts-changelog");
    let dirs: Vec<PathBuf> = (0..2)
        .map(|_| std::env::temp_dir().join(support::unique_topic("streams-standby-state")))
        .collect();
    const N1: usize = 300;
    const N2: usize = 120;
    const N3: usize = 90;

    // a runs the only task; b joins and holds its standby.
    let a = counting(&bootstrap, &app, &input, &out, &dirs[0])
        .build()
        .start()
        .await
        .expect("start a");
    produce(&bootstrap, &input, N1, KEYS).await;
    wait_for(&a, |r| r.metrics().processed >= N1 as u64).await;
    let b = counting(&bootstrap, &app, &input, &out, &dirs[1])
        .build()
        .start()
        .await
        .expect("start b");
    until("b holds a caught-up standby of the task", async || {
        assert!(!b.is_finished(), "b stopped");
        b.standby_stores() == 1
            && b.standby_records() >= changelog_records(&cluster, &changelog).await as u64
    })
    .await;
    assert_eq!(b.metrics().processed, 0, "b runs no active task");
    assert_eq!(a.standby_stores(), 0, "a holds the active task");

    // More input while the standby follows; a stops mid-run (the second
    // batch partly processed): b is promoted.
    produce(&bootstrap, &input, N2, KEYS).await;
    wait_for(&a, |r| r.metrics().processed >= (N1 + N2 / 2) as u64).await;
    let followed = b.standby_records();
    a.shutdown().await.expect("a shut down");
    let length = changelog_records(&cluster, &changelog).await;
    assert!(length >= N1 + N2 / 2, "changelog of {length} records");
    produce(&bootstrap, &input, N3, KEYS).await;
    let tps = [TopicPartition::new(input.as_str(), 0)];
    until("b commits to the end of the input", async || {
        assert!(!b.is_finished(), "b stopped");
        let committed = group_committed(&bootstrap, &app, &tps).await;
        committed.get(&tps[0]).map(|o| o.offset) == Some((N1 + N2 + N3) as i64)
    })
    .await;
    let restored = b.restored_records();
    let standby_applied = b.standby_records();
    b.shutdown().await.expect("b shut down");
    for d in &dirs {
        let _ = std::fs::remove_dir_all(d);
    }
    // The standby followed the changelog; the promotion restored only
    // what it had not applied yet, not the whole changelog.
    assert!(
        followed >= N1 as u64,
        "the standby applied {followed} records"
    );
    assert!(
        (restored as usize) < length,
        "the promotion restored {restored} of the changelog's {length} records"
    );
    assert!(standby_applied >= followed);
    // Exactly-once: each key counted 1, 2, ... n, nothing lost or doubled.
    assert_exact(&bootstrap, &out, 1, &reference(&[N1, N2, N3])).await;
}

#[tokio::test]
async fn an_active_task_moved_away_stays_here_as_a_standby_with_its_store() {
    if !support::real_broker_only(
        "an_active_task_moved_away_stays_here_as_a_standby_with_its_store",
        STANDBY_TASKS,
    ) {
        return;
    }
    let Some((bootstrap, cluster, input)) = setup("streams-demote", 2).await else {
        return;
    };
    let out = format!("{input}-out");
    support::create_topic(&cluster, &out, 2).await;
    let app = support::unique_topic("streams-demote-app");
    let changelog = format!("{app}-counts-changelog");
    let dir = std::env::temp_dir().join(support::unique_topic("streams-demote-state"));
    let start = || {
        counting_in(
            &bootstrap,
            &app,
            &input,
            &out,
            &dir,
            StoreSpec::in_memory("counts"),
        )
        .build()
        .start()
    };
    const N1: usize = 240;
    const N2: usize = 120;
    const N3: usize = 60;
    // a runs both tasks, then b joins: one task moves to b, and with one
    // standby per task each instance holds the other's task as a standby.
    let a = start().await.expect("start a");
    produce(&bootstrap, &input, N1, KEYS).await;
    wait_for(&a, |r| r.metrics().processed >= N1 as u64).await;
    let shortest = changelog_partition(&cluster, &changelog, 0)
        .await
        .min(changelog_partition(&cluster, &changelog, 1).await);
    assert!(shortest > 0, "both partitions hold keys");
    let b = start().await.expect("start b");
    until("each instance holds one standby", async || {
        assert!(!a.is_finished() && !b.is_finished(), "an instance stopped");
        a.standby_stores() == 1 && b.standby_stores() == 1
    })
    .await;
    // a's standby is the task it ran: its store was kept (in memory),
    // not restored again from the changelog.
    assert!(
        (a.standby_records() as usize) < shortest,
        "a's standby applied {} records; its task's changelog has at least {shortest}",
        a.standby_records()
    );
    produce(&bootstrap, &input, N2, KEYS).await;
    let tps: Vec<TopicPartition> = (0..2)
        .map(|p| TopicPartition::new(input.as_str(), p))
        .collect();
    let committed_to = |n: usize| {
        let tps = tps.clone();
        let bootstrap = bootstrap.clone();
        let app = app.clone();
        async move {
            let c = group_committed(&bootstrap, &app, &tps).await;
            tps.iter()
                .map(|tp| c.get(tp).map_or(0, |o| o.offset))
                .sum::<i64>()
                == n as i64
        }
    };
    until("both commit to the end of the input", async || {
        assert!(!a.is_finished() && !b.is_finished(), "an instance stopped");
        committed_to(N1 + N2).await
    })
    .await;
    // b stops: a is promoted on b's task and keeps both.
    b.shutdown().await.expect("b shut down");
    let restored_before = a.restored_records();
    produce(&bootstrap, &input, N3, KEYS).await;
    until("a commits to the end of the input", async || {
        assert!(!a.is_finished(), "a stopped");
        committed_to(N1 + N2 + N3).await
    })
    .await;
    let length = changelog_partition(&cluster, &changelog, 0)
        .await
        .max(changelog_partition(&cluster, &changelog, 1).await);
    let promoted_tail = a.restored_records() - restored_before;
    a.shutdown().await.expect("a shut down");
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        (promoted_tail as usize) < length,
        "the promotion restored {promoted_tail} records"
    );
    assert_exact(&bootstrap, &out, 2, &reference(&[N1, N2, N3])).await;
}
