//! Instances killed mid-run (no drain, no commit, no LeaveGroup): a
//! restarted instance loses nothing at-least-once, and under exactly-once
//! the read_committed output neither loses nor duplicates.

use super::*;

/// Starts a topology on its own runtime so that the test can kill it:
/// `Runtime::shutdown_background` drops every task of the instance (poll
/// loop, dispatcher, workers, producer and consumer I/O) at once, with no
/// drain, no commit, no LeaveGroup and no transaction abort.
pub(super) async fn start_killable(
    topology: purekafka::streams::Topology,
) -> (tokio::runtime::Runtime, RunningStreams) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let running = rt
        .spawn(async move { topology.build().start().await })
        .await
        .unwrap()
        .unwrap();
    (rt, running)
}

/// Kills an instance started by [`start_killable`].
pub(super) fn kill(rt: tokio::runtime::Runtime, running: RunningStreams) {
    rt.shutdown_background();
    // No Drop-based cleanup either: a killed process runs none.
    std::mem::forget(running);
}

/// The instances' `transaction.timeout.ms`: longer than
/// [`killed_exactly_once_instance_neither_loses_nor_duplicates`] waits for
/// its output once B is done, so only B fencing A can release it.
const TXN_TIMEOUT_MS: u64 = 60_000;

/// The kill-and-restart scenario: instance A copies `topic` to `out`
/// (value `v` becomes `out-v`), is killed after `kill_after` records, and
/// instance B (same application id) finishes. Returns the values each
/// processor invocation saw.
///
/// B is A restarted: the same static `group.instance.id` (KIP-345), as a
/// restarted pod keeps its name, so it takes A's partitions at once rather
/// than after A's session expires (the exactly-once stateful kill test
/// hands over through that expiry). A makes no commit at the kill, so B starts
/// from A's last commit either way. Under exactly-once B also has A's
/// transactional id (the runtime derives it from the instance id), so its
/// `InitProducerId` fences A and aborts A's open transaction at once;
/// `transaction.timeout.ms` is set longer than the exactly-once test waits
/// for its output, so the test passes only through that fencing.
async fn kill_and_restart(
    bootstrap: &str,
    topic: &str,
    out: &str,
    app: &str,
    mode: CommitMode,
    kill_after: u64,
    finished: impl Fn(&[i64]) -> bool,
) -> Vec<i64> {
    let seen: Arc<Mutex<Vec<i64>>> = Arc::default();
    let topology = |seen: Arc<Mutex<Vec<i64>>>| {
        let config = config(bootstrap, app)
            .ordering(OrderingMode::Key)
            .max_in_flight(32, 64)
            .commit_mode(mode.clone())
            .commit_interval(Duration::from_millis(100))
            .producer_property("transaction.timeout.ms", TXN_TIMEOUT_MS.to_string())
            .consumer_property("group.instance.id", format!("{app}-instance"))
            .build()
            .unwrap();
        Streams::topology(config)
            .source(topic, StringDeserializer, StringDeserializer)
            .map_async(move |rec| {
                let seen = seen.clone();
                async move {
                    tokio::time::sleep(Duration::from_millis(fastrand::u64(0..3))).await;
                    seen.lock().unwrap().push(rec.value.parse().unwrap());
                    let v = format!("out-{}", rec.value);
                    Ok(rec.with_value(v))
                }
            })
            .to(out, StringSerializer, StringSerializer)
    };
    let (rt, a) = start_killable(topology(seen.clone())).await;
    let deadline = Instant::now() + Duration::from_secs(60);
    while (seen.lock().unwrap().len() as u64) < kill_after {
        assert!(Instant::now() < deadline, "instance A made no progress");
        assert!(!a.is_finished(), "instance A stopped early");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    kill(rt, a);
    let b = topology(seen.clone()).build().start().await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(120);
    while !finished(&seen.lock().unwrap()) {
        assert!(!b.is_finished(), "instance B stopped early");
        assert!(Instant::now() < deadline, "instance B did not finish");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    b.shutdown().await.unwrap();
    let seen = seen.lock().unwrap().clone();
    seen
}

fn out_values(partitions: Vec<Vec<String>>) -> Vec<i64> {
    let mut vs: Vec<i64> = partitions
        .into_iter()
        .flatten()
        .map(|v| v.strip_prefix("out-").unwrap().parse().unwrap())
        .collect();
    vs.sort_unstable();
    vs
}

/// One killed-instance run: `n` records (97 keys) on a 3-partition input,
/// copied to a 3-partition output by [`kill_and_restart`] in `mode`, the
/// first instance killed a third of the way through and the second run
/// until every input value was seen. `None` when the test is skipped.
async fn killed_midway(test: &str, mode: CommitMode, n: usize) -> Option<KilledRun> {
    let (bootstrap, cluster, topic) = setup(test, 3).await?;
    let out = format!("{topic}-out");
    support::create_topic(&cluster, &out, 3).await;
    produce(&bootstrap, &topic, n, 97).await;
    let app = support::unique_topic(&format!("{test}-app"));
    let seen = kill_and_restart(&bootstrap, &topic, &out, &app, mode, n as u64 / 3, |seen| {
        seen.iter().collect::<BTreeSet<_>>().len() == n
    })
    .await;
    Some(KilledRun {
        bootstrap,
        out,
        seen,
    })
}

/// What [`killed_midway`] left behind.
struct KilledRun {
    bootstrap: String,
    out: String,
    /// The values each processor invocation saw, across both instances.
    seen: Vec<i64>,
}

impl KilledRun {
    /// The output's values (`out-v` read back as `v`), sorted, as a
    /// consumer with `isolation` reads them.
    async fn written(&self, isolation: purekafka::consumer::IsolationLevel) -> Vec<i64> {
        out_values(read::consume_values(&self.bootstrap, &self.out, 3, isolation).await)
    }
}

#[tokio::test]
async fn killed_at_least_once_instance_loses_nothing_on_restart() {
    const N: usize = 3000;
    let Some(run) = killed_midway("streams-kill-alo", CommitMode::Sync, N).await else {
        return;
    };
    let distinct: BTreeSet<i64> = run.seen.iter().copied().collect();
    assert_eq!(distinct.len(), N, "every input processed at least once");
    let written = run
        .written(purekafka::consumer::IsolationLevel::ReadUncommitted)
        .await;
    let written: BTreeSet<i64> = written.into_iter().collect();
    assert_eq!(written.len(), N, "every output written at least once");
}

#[tokio::test]
async fn killed_exactly_once_instance_neither_loses_nor_duplicates() {
    const N: usize = 3000;
    let Some(run) = killed_midway("streams-kill-eos", CommitMode::ExactlyOnce, N).await else {
        return;
    };
    let reprocessed = run.seen.len() - N;
    // The killed instance's open transaction would hold the last stable
    // offset back until the broker timed it out (TXN_TIMEOUT_MS, well past
    // this wait); B, with A's transactional id, fenced A and had it aborted
    // when it started, so read_committed sees everything B wrote.
    let deadline = Instant::now() + Duration::from_millis(TXN_TIMEOUT_MS / 2);
    let written = loop {
        let written = run
            .written(purekafka::consumer::IsolationLevel::ReadCommitted)
            .await;
        if written.len() >= N || Instant::now() > deadline {
            break written;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    let expected: Vec<i64> = (0..N as i64).collect();
    assert_eq!(
        written.len(),
        N,
        "read_committed output count (reprocessed {reprocessed})"
    );
    assert_eq!(written, expected, "zero duplicates and zero losses");
}
