//! Stateful streams against the real broker (issue #16): a count by key
//! equals the reference computed from the input; a restarted instance
//! continues from its checkpointed store, a fresh one (another state.dir)
//! restores the store from the changelog, and a corrupt checkpoint wipes
//! the store and restores it; a changelog with the wrong partition count
//! is an error at start; exactly-once counts are exact read_committed;
//! after an instance is killed mid-run, its successor restores the store
//! from the changelog and nothing is lost (exactly-once: nothing doubled);
//! a rebalance moves stores to a new instance, which restores them and
//! counts on; retry in place does not count twice; tumbling windows drop
//! and count records past grace.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use purekafka::consumer::IsolationLevel;
use purekafka::streams::state::{
    Checkpoint, CheckpointFile, KeyValueStore, PersistentStore, StoreSpec,
};

use purekafka::streams::Topology;

use super::*;

/// A count-by-key application: the updates go to `out` as `key=count`,
/// every one of them (the record cache off).
fn counting(
    bootstrap: &str,
    app: &str,
    input: &str,
    out: &str,
    state_dir: &Path,
    store: StoreSpec,
    mode: CommitMode,
) -> Topology {
    let config = config(bootstrap, app)
        .ordering(OrderingMode::Key)
        .max_in_flight(32, 64)
        .commit_mode(mode)
        .state_dir(state_dir)
        .cache_max_bytes(0)
        .build()
        .unwrap();
    counting_slow(config, input, out, store, 0)
}

fn counting_slow(
    config: StreamsConfig,
    input: &str,
    out: &str,
    store: StoreSpec,
    delay_ms: u64,
) -> Topology {
    Streams::topology(config)
        .source(input, StringDeserializer, StringDeserializer)
        .map_async(move |r| async move {
            if delay_ms > 0 {
                tokio::time::sleep(Duration::from_millis(delay_ms)).await;
            }
            Ok(r)
        })
        .group_by_key()
        .count(store, StringSerializer)
        .to_stream()
        .map(|r| {
            let v = format!("{}={}", r.key.clone().unwrap_or_default(), r.value);
            Ok(r.with_value(v))
        })
        .to(out, StringSerializer, StringSerializer)
}

/// The reference: records per key among those [`produce`] wrote with
/// `keys` keys in calls of `batches` records (each call starts at key-0).
fn reference(batches: &[usize], keys: usize) -> BTreeMap<String, i64> {
    let mut m = BTreeMap::new();
    for n in batches {
        for i in 0..*n {
            *m.entry(format!("key-{}", i % keys)).or_insert(0) += 1;
        }
    }
    m
}

/// Every `key=count` update in `out`, per key in output order.
async fn updates(
    bootstrap: &str,
    out: &str,
    partitions: i32,
    isolation: IsolationLevel,
) -> BTreeMap<String, Vec<i64>> {
    let mut m: BTreeMap<String, Vec<i64>> = BTreeMap::new();
    for partition in support::read::consume_values(bootstrap, out, partitions, isolation).await {
        for v in partition {
            let (k, n) = v.split_once('=').expect("key=count");
            m.entry(k.to_owned()).or_default().push(n.parse().unwrap());
        }
    }
    m
}

/// Asserts that each key's updates count 1, 2, ... up to its reference
/// count, with nothing lost, doubled or out of order.
fn assert_exact(updates: &BTreeMap<String, Vec<i64>>, expected: &BTreeMap<String, i64>) {
    assert_eq!(
        updates.keys().collect::<Vec<_>>(),
        expected.keys().collect::<Vec<_>>()
    );
    for (k, n) in expected {
        let want: Vec<i64> = (1..=*n).collect();
        assert_eq!(updates[k], want, "updates of {k}");
    }
}

/// Asserts what a count behind a record cache writes: each key's updates
/// rise strictly (a record counted twice or an update lost out of order
/// would show) and the last is its reference count.
fn assert_rising_to(updates: &BTreeMap<String, Vec<i64>>, expected: &BTreeMap<String, i64>) {
    assert_eq!(
        updates.keys().collect::<Vec<_>>(),
        expected.keys().collect::<Vec<_>>()
    );
    for (k, n) in expected {
        let u = &updates[k];
        assert!(u.windows(2).all(|w| w[0] < w[1]), "{k}: {u:?}");
        assert_eq!(u.last(), Some(n), "{k}: {u:?}");
    }
}

/// Produces one record per key, value its index, in order.
async fn produce_keys(bootstrap: &str, topic: &str, keys: &[String]) {
    let p = super::producer(bootstrap).await;
    let mut acks = Vec::new();
    for (i, k) in keys.iter().enumerate() {
        let r = ProducerRecord::new(topic)
            .key(k.clone())
            .value(i.to_string());
        acks.push(p.send(r).await.unwrap());
    }
    for a in acks {
        a.await.unwrap();
    }
    p.close(Duration::from_secs(10)).await.unwrap();
}

/// Records in `topic`'s partitions `0..partitions`.
async fn records_in(cluster: &Cluster, topic: &str, partitions: i32) -> usize {
    let mut n = 0;
    for p in 0..partitions {
        n += support::read::read_partition(cluster, topic, p).await.len();
    }
    n
}

fn state_dir(test: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(support::unique_topic(test));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A test's set-up: its input (`partitions` partitions), an output topic
/// with as many, an application id and two state dirs (two machines),
/// removed when the test ends.
struct Fixture {
    bootstrap: String,
    cluster: Cluster,
    input: String,
    out: String,
    partitions: i32,
    app: String,
    dirs: [PathBuf; 2],
}

impl Fixture {
    async fn new(test: &str, partitions: i32) -> Option<Fixture> {
        let (bootstrap, cluster, input) = setup(test, partitions).await?;
        let out = format!("{input}-out");
        support::create_topic(&cluster, &out, partitions).await;
        Some(Fixture {
            bootstrap,
            cluster,
            input,
            out,
            partitions,
            app: support::unique_topic(&format!("{test}-app")),
            dirs: [state_dir(test), state_dir(test)],
        })
    }

    /// The count-by-key application on machine `m` (0 or 1).
    fn counting(&self, m: usize, store: StoreSpec, mode: CommitMode) -> Topology {
        counting(
            &self.bootstrap,
            &self.app,
            &self.input,
            &self.out,
            &self.dirs[m],
            store,
            mode,
        )
    }

    /// Every `key=count` update in the output, per key in output order.
    async fn updates(&self, isolation: IsolationLevel) -> BTreeMap<String, Vec<i64>> {
        updates(&self.bootstrap, &self.out, self.partitions, isolation).await
    }

    /// The store directory of `partition` on machine `m`.
    fn task_dir(&self, m: usize, partition: i32) -> PathBuf {
        self.dirs[m].join(&self.app).join(format!("0_{partition}"))
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        for dir in &self.dirs {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

async fn run_until(topology: purekafka::streams::Topology, processed: u64) -> u64 {
    let running = topology.build().start().await.expect("start");
    wait_for(&running, |r| r.metrics().processed >= processed).await;
    let restored = running.restored_records();
    running.shutdown().await.expect("clean shutdown");
    restored
}

#[tokio::test]
async fn count_by_key_restarts_from_its_checkpoint_and_a_fresh_instance_restores_from_the_changelog(
) {
    let Some(f) = Fixture::new("streams_count_restart", 3).await else {
        return;
    };
    let bootstrap = &f.bootstrap;
    let count = |m: usize| f.counting(m, StoreSpec::persistent("counts"), CommitMode::Sync);
    const KEYS: usize = 17;
    // 1. Count 300 records; a clean shutdown checkpoints the stores.
    produce(bootstrap, &f.input, 300, KEYS).await;
    let restored = run_until(count(0), 300).await;
    assert_eq!(restored, 0, "a new application has an empty changelog");
    assert_exact(
        &f.updates(IsolationLevel::ReadUncommitted).await,
        &reference(&[300], KEYS),
    );
    for p in 0..3 {
        let cp = f.task_dir(0, p).join("counts.checkpoint");
        assert!(cp.exists(), "{} after a clean shutdown", cp.display());
    }
    // 2. The same state.dir: the checkpoint covers the whole changelog,
    // nothing to restore, and counting goes on from the stored counts.
    produce(bootstrap, &f.input, 100, KEYS).await;
    let restored = run_until(count(0), 100).await;
    assert_eq!(
        restored, 0,
        "restored from the checkpoint, not the changelog"
    );
    // 3. Another state.dir (another machine): the whole changelog is
    // restored, and counting goes on.
    produce(bootstrap, &f.input, 100, KEYS).await;
    let running = count(1).build().start().await.expect("start");
    wait_for(&running, |r| r.metrics().processed >= 100).await;
    assert_eq!(
        running.restored_records(),
        400,
        "one changelog record per update so far"
    );
    // Interactive queries read the local stores, typed by the stage.
    let counts = running.store::<String, i64>("counts").unwrap();
    assert_eq!(counts.partitions(), vec![0, 1, 2]);
    for (k, n) in reference(&[300, 100, 100], KEYS) {
        assert_eq!(counts.get(&k).unwrap(), Some(n), "{k}");
    }
    assert_eq!(counts.get(&"no-such-key".to_owned()).unwrap(), None);
    let wrong = running.store::<String, String>("counts").err().unwrap();
    assert!(
        wrong.to_string().contains("other key or value types"),
        "{wrong}"
    );
    assert!(running.store::<String, i64>("nope").is_err());
    running.shutdown().await.expect("clean shutdown");
    let total: Vec<(String, i64)> = reference(&[300, 100, 100], KEYS).into_iter().collect();
    let mut seen: Vec<(String, i64)> = Vec::new();
    for (k, counts) in f.updates(IsolationLevel::ReadUncommitted).await {
        seen.push((k, *counts.last().unwrap()));
    }
    assert_eq!(seen, total, "the last update of each key is its count");
    assert_exact(
        &f.updates(IsolationLevel::ReadUncommitted).await,
        &reference(&[300, 100, 100], KEYS),
    );
}

#[tokio::test]
async fn a_corrupt_checkpoint_wipes_the_store_and_restores_it_from_the_changelog() {
    let Some(f) = Fixture::new("streams_count_corrupt", 3).await else {
        return;
    };
    let count = || f.counting(0, StoreSpec::persistent("counts"), CommitMode::Sync);
    const KEYS: usize = 5;
    produce(&f.bootstrap, &f.input, 100, KEYS).await;
    run_until(count(), 100).await;
    // Damage every partition's store behind the runtime's back (a count
    // no input gave), and its checkpoint: a store trusted without its
    // checkpoint would count on from the bogus value.
    let mut changelog_records = 0;
    for p in 0..3 {
        let task = f.task_dir(0, p);
        let store = PersistentStore::open(task.join("counts.redb")).unwrap();
        let entries = store
            .range(std::ops::Bound::Unbounded, std::ops::Bound::Unbounded, 100)
            .unwrap();
        for (k, v) in entries {
            let n = i64::from_be_bytes(v[..].try_into().unwrap());
            changelog_records += n as u64;
            store
                .put(k, bytes::Bytes::copy_from_slice(&1000i64.to_be_bytes()))
                .unwrap();
        }
        store.flush().unwrap();
        drop(store);
        std::fs::write(task.join("counts.checkpoint"), "0\n1\ngarbage\n").unwrap();
    }
    assert_eq!(changelog_records, 100);
    produce(&f.bootstrap, &f.input, 50, KEYS).await;
    let restored = run_until(count(), 50).await;
    assert_eq!(restored, 100, "wiped, then the whole changelog restored");
    assert_exact(
        &f.updates(IsolationLevel::ReadUncommitted).await,
        &reference(&[100, 50], KEYS),
    );
}

#[tokio::test]
async fn exactly_once_counts_are_exact_read_committed() {
    let Some(f) = Fixture::new("streams_count_eos", 3).await else {
        return;
    };
    let count = || f.counting(0, StoreSpec::in_memory("counts"), CommitMode::ExactlyOnce);
    produce(&f.bootstrap, &f.input, 200, 7).await;
    run_until(count(), 200).await;
    produce(&f.bootstrap, &f.input, 60, 7).await;
    // In memory: the new instance restores all 200 updates, read_committed.
    let restored = run_until(count(), 60).await;
    assert_eq!(restored, 200);
    assert_exact(
        &f.updates(IsolationLevel::ReadCommitted).await,
        &reference(&[200, 60], 7),
    );
}

#[tokio::test]
async fn a_changelog_with_another_partition_count_is_an_error_at_start() {
    let Some(f) = Fixture::new("streams_changelog_partitions", 3).await else {
        return;
    };
    let changelog = purekafka::streams::state::changelog_topic(&f.app, "counts");
    support::create_topic(&f.cluster, &changelog, 1).await;
    let topology = f.counting(0, StoreSpec::in_memory("counts"), CommitMode::Sync);
    let err = match topology.build().start().await {
        Ok(_) => panic!("started with a 1-partition changelog for a 3-partition input"),
        Err(e) => e.to_string(),
    };
    assert!(
        err.contains(&changelog) && err.contains("1 partition") && err.contains("has 3"),
        "{err}"
    );
}

#[tokio::test]
async fn a_stateful_stage_under_unordered_is_refused_at_start() {
    let dir = state_dir("streams_unordered_stateful");
    let config = StreamsConfig::builder("app", "127.0.0.1:1")
        .ordering(OrderingMode::Unordered)
        .state_dir(&dir)
        .build()
        .unwrap();
    let topology = Streams::topology(config)
        .source("in", StringDeserializer, StringDeserializer)
        .group_by_key()
        .count(StoreSpec::in_memory("counts"), StringSerializer)
        .to_stream()
        .for_each(|_| Ok(()));
    let err = match topology.build().start().await {
        Ok(_) => panic!("a stateful stage ran under Unordered"),
        Err(e) => e.to_string(),
    };
    assert!(
        err.contains("ordering") && err.contains("Unordered"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(dir);
}

/// The broker's least session timeout (`group.min.session.timeout.ms`,
/// 6 s) on Kafka, 1.5 s on the fake (which has no least; 15 of the
/// streams tests' 100 ms heartbeats, sent from membership's own thread).
fn killed_session_timeout_ms() -> &'static str {
    if support::broker_provider() == support::BrokerProvider::Fake {
        "1500"
    } else {
        "6000"
    }
}

/// [`counting_slow`]: each record first waits `delay_ms` (a lookup), so
/// that a run lasts long enough to be killed midway.
///
/// Instance A counts with a persistent store and is killed (no drain, no
/// commit, no checkpoint) a third of the way; instance B, with another
/// state.dir, restores the store from the changelog and finishes.
/// Both run with the record cache on (the default), so updates are merged.
/// Exactly-once: B's store is exact and the read_committed updates of each
/// key rise strictly to its reference count (nothing doubled or lost).
/// At-least-once: every key's count reaches at least its reference, and
/// B's store holds its last update.
async fn killed_and_restored(test: &str, mode: CommitMode) {
    let Some(f) = Fixture::new(test, 3).await else {
        return;
    };
    const N: usize = 1500;
    const KEYS: usize = 13;
    produce(&f.bootstrap, &f.input, N, KEYS).await;
    let exactly_once = matches!(mode, CommitMode::ExactlyOnce);
    let topology = |m: usize| {
        let config = config(&f.bootstrap, &f.app)
            .ordering(OrderingMode::Key)
            .max_in_flight(16, 32)
            .commit_mode(mode.clone())
            .commit_interval(Duration::from_millis(100))
            .producer_property("transaction.timeout.ms", "5000")
            // Exactly-once, B gets A's partitions when A's session expires:
            // the broker's least (group.min.session.timeout.ms), 1.5 s on
            // the fake; read_committed, it then waits for A's open
            // transaction, if it wrote anything, to time out.
            .consumer_property("session.timeout.ms", killed_session_timeout_ms())
            .state_dir(&f.dirs[m]);
        // At-least-once, B replaces A as the same static member (KIP-345,
        // a rescheduled pod on a fresh disk) and gets its partitions at
        // once; nothing it restores or counts depends on how it got them.
        let config = if exactly_once {
            config
        } else {
            config.consumer_property("group.instance.id", format!("{}-instance", f.app))
        }
        .build()
        .unwrap();
        counting_slow(config, &f.input, &f.out, StoreSpec::persistent("counts"), 3)
    };
    let (rt, a) = super::kill::start_killable(topology(0)).await;
    // Kill A once every partition's task has committed past its start and
    // that commit has finished (a sync commit checkpoints the stores
    // before it counts): a count of commits alone can be reached before a
    // slow-opening store's task commits anything.
    wait_for(&a, |r| {
        let m = r.metrics();
        m.processed >= N as u64 / 3
            && m.partitions.len() == 3
            && m.partitions
                .iter()
                .all(|p| p.committed.is_some_and(|o| o > 0))
    })
    .await;
    let commits = a.metrics().commits;
    wait_for(&a, |r| r.metrics().commits > commits).await;
    // For a failure's message: how far A got (processed, committed).
    let at_kill = a.metrics();
    let a_progress = format!(
        "A at the kill: processed {}, committed {:?}",
        at_kill.processed,
        at_kill
            .partitions
            .iter()
            .map(|p| (p.partition.partition, p.committed))
            .collect::<Vec<_>>()
    );
    super::kill::kill(rt, a);
    // At-least-once, each commit checkpoints the stores, so a restart on
    // this machine would replay only the changelog past it; exactly-once
    // never leaves one behind a crash (the store may hold aborted writes).
    for p in 0..3 {
        let changelog = TopicPartition::new(
            purekafka::streams::state::changelog_topic(&f.app, "counts"),
            p,
        );
        let file = CheckpointFile::new(f.task_dir(0, p).join("counts.checkpoint"));
        match file.read(&changelog).unwrap() {
            Checkpoint::Offset(o) if !exactly_once => assert!(o > 0, "partition {p}: {o}"),
            Checkpoint::Missing if exactly_once => {}
            other => panic!("partition {p}: {other:?} (exactly-once: {exactly_once})"),
        }
    }
    let expected = reference(&[N], KEYS);
    let b = topology(1).build().start().await.unwrap();
    let counts = b.store::<String, i64>("counts").unwrap();
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let done = expected
            .iter()
            .all(|(k, n)| counts.get(k).unwrap().is_some_and(|c| c >= *n));
        if done {
            break;
        }
        assert!(!b.is_finished(), "instance B stopped early");
        assert!(Instant::now() < deadline, "instance B did not finish");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(b.restored_records() > 0, "B restored A's changelog");
    // At-least-once, B may still be counting records A counted too: read
    // the store once it has nothing left to do.
    wait_for(&b, |r| {
        let m = r.metrics();
        m.in_flight == 0 && m.partitions.len() == 3 && m.partitions.iter().all(|p| p.lag == Some(0))
    })
    .await;
    let stored: BTreeMap<String, i64> = expected
        .keys()
        .map(|k| (k.clone(), counts.get(k).unwrap().unwrap()))
        .collect();
    let b_end = b.metrics();
    let progress = format!(
        "{a_progress}; B restored {} changelog records, committed {:?}, processed {}",
        b.restored_records(),
        b_end
            .partitions
            .iter()
            .map(|p| (p.partition.partition, p.committed))
            .collect::<Vec<_>>(),
        b_end.processed
    );
    b.shutdown().await.unwrap();
    let isolation = if exactly_once {
        IsolationLevel::ReadCommitted
    } else {
        IsolationLevel::ReadUncommitted
    };
    let updates = f.updates(isolation).await;
    if exactly_once {
        assert_eq!(stored, expected, "the restored store is exact ({progress})");
        assert_rising_to(&updates, &expected);
    } else {
        // At-least-once, the output of each key is A's updates (merged by
        // the cache, rising), then B's from what it restored (A's last
        // changelog write, at or past A's committed input) on: records
        // past A's commit are counted again, so a count may pass its
        // reference, never fall short; and B's store is its last update.
        for (k, n) in &expected {
            let u = &updates[k];
            let last = *u.last().unwrap();
            assert!(
                last >= *n,
                "{k}: counted {last}, below {n}: updates {u:?} ({progress})"
            );
            assert_eq!(
                stored[k], last,
                "{k}: the store holds the last update: updates {u:?} ({progress})"
            );
        }
    }
}

#[tokio::test]
async fn exactly_once_count_killed_midway_restores_exactly() {
    killed_and_restored("streams_count_kill_eos", CommitMode::ExactlyOnce).await;
}

#[tokio::test]
async fn at_least_once_count_killed_midway_loses_nothing() {
    killed_and_restored("streams_count_kill_alo", CommitMode::Sync).await;
}

/// FailurePolicy::Retry runs the whole topology again for a failed
/// record: a failure after the count (here in the stage after it, once per
/// record) must not count the record twice.
#[tokio::test]
async fn retry_in_place_after_the_count_does_not_count_twice() {
    let Some(f) = Fixture::new("streams_count_retry", 3).await else {
        return;
    };
    const KEYS: usize = 7;
    produce(&f.bootstrap, &f.input, 140, KEYS).await;
    let config = config(&f.bootstrap, &f.app)
        .ordering(OrderingMode::Key)
        .failure_policy(FailurePolicy::Retry(Backoff::fixed(
            Duration::from_millis(5),
            3,
        )))
        .state_dir(&f.dirs[0])
        .build()
        .unwrap();
    let failed_once: Arc<Mutex<BTreeSet<(i32, i64)>>> = Arc::default();
    let failed = failed_once.clone();
    let topology = Streams::topology(config)
        .source(f.input.as_str(), StringDeserializer, StringDeserializer)
        .group_by_key()
        .count(StoreSpec::in_memory("counts"), StringSerializer)
        .to_stream()
        .map(move |r| {
            if failed
                .lock()
                .unwrap()
                .insert((r.partition.partition, r.offset))
            {
                return Err(ProcessingError::new("fails once after the count"));
            }
            let v = format!("{}={}", r.key.clone().unwrap_or_default(), r.value);
            Ok(r.with_value(v))
        })
        .to(f.out.as_str(), StringSerializer, StringSerializer);
    let running = topology.build().start().await.expect("start");
    wait_for(&running, |r| r.metrics().processed >= 140).await;
    assert_eq!(running.metrics().retried_in_place, 140);
    running.shutdown().await.expect("clean shutdown");
    assert_eq!(failed_once.lock().unwrap().len(), 140);
    assert_exact(
        &f.updates(IsolationLevel::ReadUncommitted).await,
        &reference(&[140], KEYS),
    );
}

/// Tumbling windows of 10 s with 5 s grace, one partition, Partition
/// ordering (stream time in offset order): each key and window counts its
/// records until stream time passes the window's end plus grace; records
/// for a closed window are dropped and counted, never counted in.
#[tokio::test]
async fn windowed_count_drops_and_counts_records_past_grace() {
    use purekafka::streams::{TimeWindows, Windowed};
    let Some(f) = Fixture::new("streams_windowed_count", 1).await else {
        return;
    };
    let (bootstrap, input, out) = (&f.bootstrap, &f.input, &f.out);
    // (key, timestamp): the reference below follows the rule by hand.
    let base = super::windows::recent_base(); // a multiple of 10 s
    let input_records: Vec<(&str, i64)> = vec![
        ("a", 0),
        ("b", 1_000),
        ("a", 9_999),
        ("a", 10_000), // window 10 s
        ("b", 14_000), // stream time 14 s: window 0 still open (closes at 15 s)
        ("a", 2_000),  // late but within grace: counted in window 0
        ("a", 21_000), // stream time 21 s: window 0 closed
        ("a", 3_000),  // dropped
        ("b", 9_000),  // dropped
        ("b", 12_000), // window 10 s closes at 25 s: counted
        ("a", 25_000), // stream time 25 s: window 10 s closed too
        ("b", 13_000), // dropped
    ];
    let p = super::producer(bootstrap).await;
    for (k, ts) in &input_records {
        let r = ProducerRecord::new(input.as_str())
            .key(k.to_string())
            .value("x")
            .timestamp(base + ts);
        p.send(r).await.unwrap().await.unwrap();
    }
    p.close(Duration::from_secs(10)).await.unwrap();
    let config = config(bootstrap, &f.app)
        .ordering(OrderingMode::Partition)
        .state_dir(&f.dirs[0])
        .build()
        .unwrap();
    let windows = TimeWindows::of_size_and_grace(Duration::from_secs(10), Duration::from_secs(5));
    let running = Streams::topology(config)
        .source(input.as_str(), StringDeserializer, StringDeserializer)
        .group_by_key()
        .windowed_by(windows)
        .count(
            // Kept a minute of stream time (the default, size + grace,
            // would have deleted windows 0 and 10 by the end), so the
            // query below sees every window.
            StoreSpec::in_memory("window-counts").with_retention(Duration::from_secs(60)),
            StringSerializer,
        )
        .to_stream()
        .map(move |r| {
            let w = r.key.clone().unwrap();
            let v = format!("{}@{}={}", w.key, (w.start - base) / 1000, r.value);
            Ok(purekafka::streams::Record {
                key: Some(w.key),
                value: v,
                timestamp: r.timestamp,
                headers: r.headers,
                partition: r.partition,
                offset: r.offset,
            })
        })
        .to(out.as_str(), StringSerializer, StringSerializer)
        .build()
        .start()
        .await
        .expect("start");
    wait_for(&running, |r| {
        r.metrics().processed >= input_records.len() as u64
    })
    .await;
    assert_eq!(running.dropped_late_records(), 3);
    let counts = running
        .store::<Windowed<String>, i64>("window-counts")
        .unwrap();
    let at = |key: &str, start_s: i64| Windowed {
        key: key.to_owned(),
        start: base + start_s * 1000,
        end: base + start_s * 1000 + 10_000,
    };
    assert_eq!(counts.get(&at("a", 0)).unwrap(), Some(3));
    assert_eq!(counts.get(&at("b", 0)).unwrap(), Some(1));
    assert_eq!(counts.get(&at("a", 10)).unwrap(), Some(1));
    assert_eq!(counts.get(&at("b", 10)).unwrap(), Some(2));
    assert_eq!(counts.get(&at("a", 20)).unwrap(), Some(2));
    assert_eq!(counts.get(&at("b", 20)).unwrap(), None);
    running.shutdown().await.expect("clean shutdown");
    let written: Vec<String> =
        support::read::consume_values(bootstrap, out, 1, IsolationLevel::ReadUncommitted)
            .await
            .concat();
    let expected = [
        "a@0=1", "b@0=1", "a@0=2", "a@10=1", "b@10=1", "a@0=3", "a@20=1", "b@10=2", "a@20=2",
    ];
    assert_eq!(written, expected);
}

/// A second instance joins: the partitions that move take their stores
/// along (the new owner restores them from the changelog) and the counts
/// go on from where the first instance left them.
#[tokio::test]
async fn a_rebalance_moves_stores_to_the_new_instance_which_restores_and_counts_on() {
    let Some(f) = Fixture::new("streams_count_rebalance", 4).await else {
        return;
    };
    let count = |m: usize| f.counting(m, StoreSpec::persistent("counts"), CommitMode::Sync);
    const KEYS: usize = 23;
    produce(&f.bootstrap, &f.input, 400, KEYS).await;
    let a = count(0).build().start().await.unwrap();
    wait_for(&a, |r| {
        r.metrics().processed >= 400 && r.metrics().partitions.len() == 4
    })
    .await;
    let b = count(1).build().start().await.unwrap();
    // Cooperative rebalancing: A gives up the partitions that move.
    wait_for(&a, |r| r.metrics().partitions.len() < 4).await;
    produce(&f.bootstrap, &f.input, 400, KEYS).await;
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
    b.shutdown().await.unwrap();
    a.shutdown().await.unwrap();
    assert!(moved > 0, "no partition moved to the second instance");
    assert!(restored > 0, "the second instance restored nothing");
    assert_exact(
        &f.updates(IsolationLevel::ReadUncommitted).await,
        &reference(&[400, 400], KEYS),
    );
}

/// `reduce` and `aggregate` with typed serdes: per key, the sum of the
/// values (reduce, kept as a string) and the list of them (aggregate, as
/// comma-separated text), compared with sums and lists computed from the
/// input.
#[tokio::test]
async fn reduce_and_aggregate_match_the_input() {
    let Some(f) = Fixture::new("streams_reduce", 3).await else {
        return;
    };
    let (bootstrap, input) = (&f.bootstrap, &f.input);
    // Two applications: the sums go to the fixture's output, the lists to
    // a second topic.
    let (sums, lists) = (f.out.clone(), format!("{input}-lists"));
    support::create_topic(&f.cluster, &lists, 3).await;
    const N: usize = 120;
    const KEYS: usize = 6;
    produce(bootstrap, input, N, KEYS).await;
    // The sums behind the record cache (the default), the lists without.
    let config = |app: String, cache: usize| {
        config(bootstrap, &app)
            .ordering(OrderingMode::Key)
            .state_dir(&f.dirs[0])
            .cache_max_bytes(cache)
            .build()
            .unwrap()
    };
    let sum = Streams::topology(config(
        support::unique_topic("streams_reduce_app"),
        10 << 20,
    ))
    .source(input.as_str(), StringDeserializer, StringDeserializer)
    .group_by_key()
    .reduce(
        StoreSpec::persistent("sums"),
        StringSerializer,
        StringSerializer,
        StringDeserializer,
        |a, v| (a.parse::<i64>().unwrap() + v.parse::<i64>().unwrap()).to_string(),
    )
    .to_stream()
    .to(sums.as_str(), StringSerializer, StringSerializer)
    .build()
    .start()
    .await
    .unwrap();
    let list = Streams::topology(config(support::unique_topic("streams_aggregate_app"), 0))
        .source(input.as_str(), StringDeserializer, StringDeserializer)
        .group_by_key()
        .aggregate(
            StoreSpec::in_memory("lists"),
            StringSerializer,
            StringSerializer,
            StringDeserializer,
            String::new,
            |_, v, mut agg: String| {
                if !agg.is_empty() {
                    agg.push(',');
                }
                agg.push_str(&v);
                agg
            },
        )
        .to_stream()
        .to(lists.as_str(), StringSerializer, StringSerializer)
        .build()
        .start()
        .await
        .unwrap();
    wait_for(&sum, |r| r.metrics().processed >= N as u64).await;
    wait_for(&list, |r| r.metrics().processed >= N as u64).await;
    let stored_sums = sum.store::<String, String>("sums").unwrap();
    let mut want_sum: BTreeMap<String, i64> = BTreeMap::new();
    let mut want_list: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for i in 0..N {
        let k = format!("key-{}", i % KEYS);
        *want_sum.entry(k.clone()).or_default() += i as i64;
        want_list.entry(k).or_default().push(i.to_string());
    }
    for (k, s) in &want_sum {
        assert_eq!(stored_sums.get(k).unwrap(), Some(s.to_string()), "{k}");
    }
    sum.shutdown().await.unwrap();
    list.shutdown().await.unwrap();
    // Every key's full value was written (as its last update).
    let written = |partitions: Vec<Vec<String>>| -> BTreeSet<String> {
        partitions.into_iter().flatten().collect()
    };
    let sums_out = written(
        support::read::consume_values(bootstrap, &sums, 3, IsolationLevel::ReadUncommitted).await,
    );
    for s in want_sum.values() {
        assert!(sums_out.contains(&s.to_string()), "sum {s} never written");
    }
    let lists_out = written(
        support::read::consume_values(bootstrap, &lists, 3, IsolationLevel::ReadUncommitted).await,
    );
    for l in want_list.values() {
        let full = l.join(",");
        assert!(lists_out.contains(&full), "list {full} never written");
    }
    assert_eq!(lists_out.len(), N, "one update per record");
}

/// The record cache (KIP-63, `statestore.cache.max.bytes`, on by default):
/// with no commit during the run (a 60 s commit interval) and room for
/// every key, nothing reaches the changelog or the output while the
/// records are counted, yet interactive queries see the exact counts
/// (they read through the cache); the commit on shutdown flushes it: one
/// changelog record and one update per key, the exact count. A fresh
/// instance restores those and counts on.
#[tokio::test]
async fn a_record_cache_merges_updates_until_the_commit_and_queries_read_through_it() {
    let Some(f) = Fixture::new("streams_count_cache", 3).await else {
        return;
    };
    const N: usize = 600;
    const KEYS: usize = 11;
    produce(&f.bootstrap, &f.input, N, KEYS).await;
    let changelog = purekafka::streams::state::changelog_topic(&f.app, "counts");
    let topology = |m: usize| {
        let config = config(&f.bootstrap, &f.app)
            .ordering(OrderingMode::Key)
            .commit_interval(Duration::from_secs(60))
            .state_dir(&f.dirs[m])
            .build()
            .unwrap();
        assert_eq!(config.cache_max_bytes, 10 * 1024 * 1024, "the default");
        counting_slow(config, &f.input, &f.out, StoreSpec::persistent("counts"), 0)
    };
    let running = topology(0).build().start().await.unwrap();
    wait_for(&running, |r| r.metrics().processed >= N as u64).await;
    let expected = reference(&[N], KEYS);
    let counts = running.store::<String, i64>("counts").unwrap();
    for (k, n) in &expected {
        assert_eq!(
            counts.get(k).unwrap(),
            Some(*n),
            "{k}, read through the cache"
        );
    }
    assert_eq!(records_in(&f.cluster, &changelog, 3).await, 0, "changelog");
    assert_eq!(records_in(&f.cluster, &f.out, 3).await, 0, "output");
    running.shutdown().await.unwrap();
    assert_eq!(
        records_in(&f.cluster, &changelog, 3).await,
        KEYS,
        "changelog"
    );
    let updates = f.updates(IsolationLevel::ReadUncommitted).await;
    let want: BTreeMap<String, Vec<i64>> = expected
        .iter()
        .map(|(k, n)| (k.clone(), vec![*n]))
        .collect();
    assert_eq!(updates, want, "one update per key, its count");
    // Another machine restores the KEYS changelog records and counts on.
    produce(&f.bootstrap, &f.input, 2 * KEYS, KEYS).await;
    let b = topology(1).build().start().await.unwrap();
    wait_for(&b, |r| r.metrics().processed >= 2 * KEYS as u64).await;
    assert_eq!(b.restored_records(), KEYS as u64);
    b.shutdown().await.unwrap();
    assert_rising_to(
        &f.updates(IsolationLevel::ReadUncommitted).await,
        &reference(&[N, 2 * KEYS], KEYS),
    );
}

/// A record cache too small for the keys evicts the least recently
/// updated ones while records are counted (each written to the store, the
/// changelog and downstream once per eviction): one partition, every other
/// record of one hot key, the others cycling over 40 keys, 1 KiB of cache
/// (about 9 entries). Before any commit (a 60 s interval) the changelog
/// has records (the cold keys, evicted), and in the end fewer than the
/// input's (the hot key's updates merged); every key's updates rise to its
/// exact count. With the cache off, the same input writes one changelog
/// record per record.
#[tokio::test]
async fn a_full_record_cache_evicts_and_with_the_cache_off_every_update_is_written() {
    let Some(f) = Fixture::new("streams_count_evict", 1).await else {
        return;
    };
    const N: usize = 1200;
    let keys: Vec<String> = (0..N)
        .map(|i| match i % 2 {
            0 => "hot".to_owned(),
            _ => format!("key-{}", i / 2 % 40),
        })
        .collect();
    produce_keys(&f.bootstrap, &f.input, &keys).await;
    let mut expected: BTreeMap<String, i64> = BTreeMap::new();
    for k in &keys {
        *expected.entry(k.clone()).or_default() += 1;
    }
    let changelog = purekafka::streams::state::changelog_topic(&f.app, "counts");
    let config = config(&f.bootstrap, &f.app)
        .ordering(OrderingMode::Key)
        .commit_interval(Duration::from_secs(60))
        .state_dir(&f.dirs[0])
        .cache_max_bytes(1024)
        .build()
        .unwrap();
    let topology = counting_slow(config, &f.input, &f.out, StoreSpec::in_memory("counts"), 0);
    let running = topology.build().start().await.unwrap();
    wait_for(&running, |r| r.metrics().processed >= N as u64).await;
    let evicted = records_in(&f.cluster, &changelog, 1).await;
    running.shutdown().await.unwrap();
    let flushed = records_in(&f.cluster, &changelog, 1).await;
    assert!(evicted > 0, "nothing evicted before the commit");
    // Every cold update is written (evicted or flushed): N / 2 of them.
    assert!(
        flushed < N / 2 + N / 20,
        "{flushed} changelog records for {N} updates"
    );
    let updates = f.updates(IsolationLevel::ReadUncommitted).await;
    assert_rising_to(&updates, &expected);
    let hot = updates["hot"].len();
    assert!(
        hot < N / 20,
        "the hot key's {} updates written {hot} times",
        N / 2
    );
    // The cache off: one changelog record per update.
    let app = support::unique_topic("streams_count_evict_off");
    let off = counting(
        &f.bootstrap,
        &app,
        &f.input,
        &format!("{}-off", f.out),
        &f.dirs[1],
        StoreSpec::in_memory("counts"),
        CommitMode::Sync,
    );
    support::create_topic(&f.cluster, &format!("{}-off", f.out), 1).await;
    run_until(off, N as u64).await;
    let changelog = purekafka::streams::state::changelog_topic(&app, "counts");
    assert_eq!(records_in(&f.cluster, &changelog, 1).await, N);
}
