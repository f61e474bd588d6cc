//! Process-level faults for the client (issue #17), on applications run as
//! child processes (the `eos_copy` and `eos_streams` examples):
//! - a transactional copier paused with SIGSTOP while a second incarnation
//!   with the same `transactional.id` takes over, then resumed with
//!   SIGCONT: the second one's `init_transactions` bumps the producer epoch
//!   (KIP-98), so the first, a zombie, is fenced;
//! - an exactly-once streams instance SIGKILLed mid-run, and another one
//!   SIGSTOPped while a second instance takes its partitions over, then
//!   resumed: the group generation and the transaction timeout fence it
//!   (KIP-447).
//!
//! In every case no late write reaches a read_committed reader, and the
//! output holds every input record once. A resumed zombie (copier or
//! streams instance) must stop on its own: exit status 1 with the fatal
//! fencing error it got from the broker on its stderr.

use std::collections::BTreeSet;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use purekafka::consumer::group::{GroupConfig, GroupMember};
use purekafka::consumer::{Consumer, ConsumerConfig, IsolationLevel};
use purekafka::producer::{Producer, ProducerConfig, ProducerRecord};
use purekafka::{Cluster, TopicPartition};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};
use tokio::process::{Child, Command};
use tokio::time::Instant;

use crate::support::copier::{example_bin, CopierRun};
use crate::support::{self, read::consume_values};

/// Sends `signal` (`STOP`, `CONT`) to the child.
fn signal(child: &Child, signal: &str) {
    let pid = child.id().expect("the child is running");
    let status = std::process::Command::new("kill")
        .args([&format!("-{signal}"), &pid.to_string()])
        .status()
        .expect("run kill");
    assert!(status.success(), "kill -{signal} {pid}: {status}");
}

/// The input records whose copies are committed: the sum of the group's
/// committed offsets, which the copier commits inside its transactions.
async fn committed_copies(member: &GroupMember, tps: &[TopicPartition]) -> i64 {
    member
        .fetch_committed(tps)
        .await
        .map(|c| c.values().map(|o| o.offset.max(0)).sum())
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_transactional_copier_is_fenced_when_it_resumes_and_the_output_stays_exact() {
    let Some(bootstrap) = support::bootstrap("zombie_transactional_copier") else {
        return;
    };
    support::trace();
    const N: usize = 4_000;
    let run = CopierRun::prepare(&bootstrap, "zombie", N, 2).await;
    let (input, group) = (run.input.clone(), run.group.clone());
    let copier = |pause_ms: &str, idle_ms: &str| {
        run.command(
            &bootstrap,
            &[
                "--transaction-size",
                "50",
                "--pause-ms",
                pause_ms,
                "--idle-exit-ms",
                idle_ms,
            ],
        )
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start eos_copy")
    };

    // A copies slowly; once it has committed a few transactions, it is
    // paused where it stands.
    let tps: Vec<TopicPartition> = (0..2)
        .map(|p| TopicPartition::new(input.as_str(), p))
        .collect();
    let watcher = Consumer::connect(
        ConsumerConfig::builder()
            .bootstrap_servers(&bootstrap)
            .build()
            .unwrap(),
    )
    .await
    .unwrap();
    let member = GroupMember::without_membership(watcher.cluster(), GroupConfig::new(&group))
        .expect("group reader");
    let mut a = copier("200", "60000");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while committed_copies(&member, &tps).await < 150 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "A committed no 3 transactions within 60 s"
        );
        assert!(a.try_wait().unwrap().is_none(), "A exited early");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    signal(&a, "STOP");
    let before_pause = committed_copies(&member, &tps).await;

    // B, same transactional id and group, fences A and copies the rest.
    let b = copier("0", "3000");
    let b_out = tokio::time::timeout(Duration::from_secs(180), b.wait_with_output())
        .await
        .expect("B finished within 180 s")
        .expect("B ran");
    assert!(
        b_out.status.success(),
        "B failed: {}",
        String::from_utf8_lossy(&b_out.stderr)
    );
    let after_b = committed_copies(&member, &tps).await;
    assert_eq!(
        after_b, N as i64,
        "B committed the copy of every input record"
    );

    // A resumes: its next transactional request carries the old epoch.
    signal(&a, "CONT");
    let status = tokio::time::timeout(Duration::from_secs(120), a.wait())
        .await
        .expect("A exits within 120 s of resuming")
        .expect("A ran");
    let mut a_err = String::new();
    a.stderr
        .take()
        .expect("A's stderr")
        .read_to_string(&mut a_err)
        .await
        .expect("read A's stderr");
    assert!(!status.success(), "the zombie must fail: {status}, {a_err}");
    // Fenced: the broker refuses the old epoch (INVALID_PRODUCER_EPOCH or
    // PRODUCER_FENCED), a fatal transaction error.
    assert!(
        a_err.contains("fatal")
            && (a_err.contains("InvalidProducerEpoch") || a_err.contains("ProducerFenced")),
        "the zombie fails because it is fenced: {a_err}"
    );
    assert_eq!(
        committed_copies(&member, &tps).await,
        N as i64,
        "the zombie moved no committed offset"
    );

    run.assert_exact_copy(&bootstrap, N).await;
    eprintln!(
        "zombie copier: A committed {before_pause} copies before SIGSTOP; B copied the rest; \
         A after SIGCONT: {status}, {}; output {N} records, 0 duplicates",
        a_err.lines().last().unwrap_or_default()
    );
}

/// A running `eos_streams` instance and the values it reported processing.
struct StreamsApp {
    child: Child,
    /// Each `seen <v>` line, with when it arrived.
    seen: Arc<Mutex<Vec<(Instant, i64)>>>,
    /// Its stderr lines (also copied to the test's stderr).
    errors: Arc<Mutex<Vec<String>>>,
    /// The stdout and stderr readers; they end at the pipes' EOF.
    readers: Vec<tokio::task::JoinHandle<()>>,
    /// Its stdin (`stall`, see the example's docs).
    stdin: Option<tokio::process::ChildStdin>,
    /// Set once it printed `stalling <v>`: how many `seen` lines came
    /// before that line.
    stalled: Arc<Mutex<Option<usize>>>,
}

impl StreamsApp {
    fn start(bootstrap: &str, input: &str, output: &str, app: &str) -> StreamsApp {
        StreamsApp::start_with(bootstrap, input, output, app, &[])
    }

    /// As `start`, with more arguments for the example (e.g. `--delay-ms`).
    fn start_with(
        bootstrap: &str,
        input: &str,
        output: &str,
        app: &str,
        extra: &[&str],
    ) -> StreamsApp {
        let app_id = app.to_owned();
        let mut child = Command::new(example_bin("eos_streams"))
            .args(extra)
            .args([
                "--bootstrap",
                bootstrap,
                "--input",
                input,
                "--output",
                output,
                "--app",
                app,
                "--session-timeout-ms",
                "6000",
                "--transaction-timeout-ms",
                "5000",
            ])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("start eos_streams");
        let stdin = child.stdin.take();
        let errors: Arc<Mutex<Vec<String>>> = Arc::default();
        let mut err_lines = BufReader::new(child.stderr.take().expect("stderr")).lines();
        let err_sink = errors.clone();
        let err_reader = tokio::spawn(async move {
            while let Ok(Some(line)) = err_lines.next_line().await {
                eprintln!("eos_streams[{app_id}]: {line}");
                err_sink.lock().unwrap().push(line);
            }
        });
        let seen: Arc<Mutex<Vec<(Instant, i64)>>> = Arc::default();
        let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
        let sink = seen.clone();
        let stalled: Arc<Mutex<Option<usize>>> = Arc::default();
        let stall_sink = stalled.clone();
        let out_reader = tokio::spawn(async move {
            while let Ok(Some(line)) = lines.next_line().await {
                if let Some(v) = line.strip_prefix("seen ").and_then(|v| v.parse().ok()) {
                    sink.lock().unwrap().push((Instant::now(), v));
                } else if line.starts_with("stalling ") {
                    *stall_sink.lock().unwrap() = Some(sink.lock().unwrap().len());
                }
            }
        });
        StreamsApp {
            child,
            seen,
            errors,
            readers: vec![out_reader, err_reader],
            stdin,
            stalled,
        }
    }

    /// Writes a command line to its stdin (`stall`, `go`: see the
    /// example's docs).
    async fn command(&mut self, line: &str) {
        use tokio::io::AsyncWriteExt;
        let stdin = self.stdin.as_mut().expect("stdin");
        stdin
            .write_all(format!("{line}\n").as_bytes())
            .await
            .expect("write to stdin");
        stdin.flush().await.expect("flush stdin");
    }

    /// Waits for the child to exit, then for its readers to reach the
    /// pipes' EOF, so `values()` and `errors` hold every line it wrote:
    /// the lines written just before a kill (the records of its open
    /// transaction) may still sit in the pipe when the exit is seen.
    async fn exited(&mut self) -> std::process::ExitStatus {
        let status = tokio::time::timeout(Duration::from_secs(60), self.child.wait())
            .await
            .expect("the instance exits within 60 s")
            .expect("wait");
        for reader in self.readers.drain(..) {
            tokio::time::timeout(Duration::from_secs(10), reader)
                .await
                .expect("its output is read to the end within 10 s of its exit")
                .expect("output reader");
        }
        status
    }

    fn values(&self) -> Vec<i64> {
        self.seen.lock().unwrap().iter().map(|(_, v)| *v).collect()
    }

    /// SIGTERM, then the exit status (bounded; output read to the end).
    async fn stop(mut self) -> std::process::ExitStatus {
        signal(&self.child, "TERM");
        self.exited().await
    }
}

/// An input topic of `n` values (0..n, 97 keys) on 3 partitions and an
/// empty 3-partition output; returns (input, output, app id).
async fn streams_topics(bootstrap: &str, n: usize, test: &str) -> (String, String, String) {
    let cluster = Cluster::connect(support::config(bootstrap)).await.unwrap();
    let input = support::unique_topic(&format!("{test}-in"));
    let output = support::unique_topic(&format!("{test}-out"));
    support::create_topic(&cluster, &input, 3).await;
    support::create_topic(&cluster, &output, 3).await;
    let producer = Producer::connect(
        ProducerConfig::builder()
            .bootstrap_servers(bootstrap)
            .build()
            .unwrap(),
    )
    .await
    .unwrap();
    for v in 0..n {
        producer
            .send_with_callback(
                ProducerRecord::new(&input)
                    .key(format!("key-{}", v % 97))
                    .value(v.to_string()),
                |r| {
                    r.expect("input record");
                },
            )
            .await
            .unwrap();
    }
    producer.flush().await;
    producer.close(Duration::from_secs(10)).await.unwrap();
    (input, output, support::unique_topic(&format!("{test}-app")))
}

/// Reads the output with read_committed until it holds `n` records (an
/// open transaction of a dead or paused instance holds the last stable
/// offset back until the broker aborts it) or 90 s pass; the values
/// (`out-v` as `v`), sorted.
async fn committed_output(bootstrap: &str, output: &str, n: usize) -> Vec<i64> {
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let mut vs: Vec<i64> = consume_values(bootstrap, output, 3, IsolationLevel::ReadCommitted)
            .await
            .into_iter()
            .flatten()
            .map(|v| {
                v.strip_prefix("out-")
                    .and_then(|v| v.parse().ok())
                    .unwrap_or_else(|| panic!("output value {v:?}"))
            })
            .collect();
        vs.sort_unstable();
        if vs.len() >= n || Instant::now() > deadline {
            return vs;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Waits (bounded) until `done` holds, checking `app` is alive.
async fn wait_until(
    what: &str,
    within: Duration,
    app: &mut StreamsApp,
    done: impl Fn(&StreamsApp) -> bool,
) {
    let deadline = Instant::now() + within;
    while !done(app) {
        assert!(Instant::now() < deadline, "{what}: not within {within:?}");
        assert!(
            app.child.try_wait().unwrap().is_none(),
            "{what}: the instance exited"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sigkilled_exactly_once_streams_instance_is_replaced_without_loss_or_duplicate() {
    let Some(bootstrap) = support::bootstrap("streams_eos_sigkill") else {
        return;
    };
    // Enough input that A, at full speed, is still busy when it is told to
    // stall a record.
    const N: usize = 6_000;
    let (input, output, app) = streams_topics(&bootstrap, N, "eos-kill").await;
    let tps: Vec<TopicPartition> = (0..3)
        .map(|p| TopicPartition::new(input.as_str(), p))
        .collect();
    let watcher = Consumer::connect(
        ConsumerConfig::builder()
            .bootstrap_servers(&bootstrap)
            .build()
            .unwrap(),
    )
    .await
    .unwrap();
    let member = GroupMember::without_membership(watcher.cluster(), GroupConfig::new(&app))
        .expect("group reader");

    let mut a = StreamsApp::start(&bootstrap, &input, &output, &app);
    wait_until(
        "A processes a third",
        Duration::from_secs(90),
        &mut a,
        |a| a.values().len() >= N / 3,
    )
    .await;
    let mut committed_before = 0;
    let deadline = Instant::now() + Duration::from_secs(30);
    while committed_before == 0 {
        assert!(Instant::now() < deadline, "A committed no transaction");
        committed_before = committed_copies(&member, &tps).await;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // One record of A stalls: no commit of A completes after it started
    // (the commit drains it first), so the committed offsets read once
    // it stalls are final, and each record A reports done beyond them is
    // in its open transaction. Rarely the stalled record is the only one
    // left (it started within a commit's drain): then it is released and
    // another one stalled, up to 5 times.
    let mut held = false;
    for _ in 0..5 {
        *a.stalled.lock().unwrap() = None;
        a.command("stall").await;
        wait_until("A stalls a record", Duration::from_secs(15), &mut a, |a| {
            a.stalled.lock().unwrap().is_some()
        })
        .await;
        let frozen = committed_copies(&member, &tps).await;
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline && (a.values().len() as i64) <= frozen {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        if a.values().len() as i64 > frozen {
            held = true;
            break;
        }
        a.command("go").await;
    }
    assert!(
        held,
        "A held done records in its open transaction when killed"
    );
    a.child.start_kill().expect("SIGKILL A");
    a.exited().await;
    let by_a = a.values();
    // A's open transaction sent no offsets (that happens at commit, after
    // the drain), so the group's committed offsets are final now.
    let committed_at_kill = member
        .fetch_committed(&tps)
        .await
        .expect("A's committed offsets after the kill")
        .values()
        .map(|o| o.offset.max(0))
        .sum::<i64>();

    let mut b = StreamsApp::start(&bootstrap, &input, &output, &app);
    wait_until("B finishes", Duration::from_secs(120), &mut b, |b| {
        b.values()
            .into_iter()
            .chain(by_a.iter().copied())
            .collect::<BTreeSet<_>>()
            .len()
            == N
    })
    .await;
    let written = committed_output(&bootstrap, &output, N).await;
    let by_b = b.values();
    let status = b.stop().await;
    assert!(status.success(), "B stopped cleanly: {status}");

    let seen_by_a: BTreeSet<i64> = by_a.iter().copied().collect();
    let reprocessed = by_b.iter().filter(|v| seen_by_a.contains(v)).count();
    eprintln!(
        "streams EOS SIGKILL: A processed {} and committed {committed_at_kill} offsets before \
         the kill ({committed_before} when first seen); B processed {} ({reprocessed} of them \
         already processed by A); output {} records",
        by_a.len(),
        by_b.len(),
        written.len()
    );
    assert!(
        committed_at_kill >= committed_before && committed_before > 0,
        "A committed a transaction before the kill"
    );
    assert_eq!(seen_by_a.len(), by_a.len(), "A processed each record once");
    // B starts at A's committed offsets: it processes again exactly the
    // records A finished above them, the ones in A's aborted transaction.
    assert_eq!(
        reprocessed as i64,
        by_a.len() as i64 - committed_at_kill,
        "B reprocessed exactly what A had done and not committed"
    );
    assert!(reprocessed > 0, "B reprocessed what A had not committed");
    assert_eq!(
        written,
        (0..N as i64).collect::<Vec<_>>(),
        "every input once in the output"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_exactly_once_streams_instance_is_fenced_when_it_resumes() {
    let Some(bootstrap) = support::bootstrap("streams_eos_zombie") else {
        return;
    };
    const N: usize = 3_000;
    let (input, output, app) = streams_topics(&bootstrap, N, "eos-zombie").await;
    let tps: Vec<TopicPartition> = (0..3)
        .map(|p| TopicPartition::new(input.as_str(), p))
        .collect();
    let watcher = Consumer::connect(
        ConsumerConfig::builder()
            .bootstrap_servers(&bootstrap)
            .build()
            .unwrap(),
    )
    .await
    .unwrap();
    let member = GroupMember::without_membership(watcher.cluster(), GroupConfig::new(&app))
        .expect("group reader");

    // 40 ms per record (32 in flight: ~0.8 k records/s) keeps A busy for
    // seconds, so the pause below finds it mid-transaction with records
    // still to write; at full speed A could finish all 3,000 before it.
    let mut a = StreamsApp::start_with(&bootstrap, &input, &output, &app, &["--delay-ms", "40"]);
    wait_until(
        "A processes a quarter",
        Duration::from_secs(90),
        &mut a,
        |a| a.values().len() >= N / 4,
    )
    .await;
    let deadline = Instant::now() + Duration::from_secs(30);
    while committed_copies(&member, &tps).await == 0 {
        assert!(Instant::now() < deadline, "A committed no transaction");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    signal(&a.child, "STOP");
    let paused_at = Instant::now();

    // B joins; once A's session times out, B owns every partition and
    // finishes the input.
    let mut b = StreamsApp::start(&bootstrap, &input, &output, &app);
    let by_a_before = a.values();
    let distinct_before = by_a_before.iter().collect::<BTreeSet<_>>().len();
    assert!(
        distinct_before < N,
        "A was paused with input left to process (it had seen {distinct_before} of {N}); \
         otherwise the pause tests nothing"
    );
    wait_until("B finishes", Duration::from_secs(120), &mut b, |b| {
        b.values()
            .into_iter()
            .chain(by_a_before.iter().copied())
            .collect::<BTreeSet<_>>()
            .len()
            == N
    })
    .await;
    let written = committed_output(&bootstrap, &output, N).await;
    assert_eq!(
        written,
        (0..N as i64).collect::<Vec<_>>(),
        "B's output is exact"
    );

    // A resumes with its fetched records, its open transaction (the broker
    // aborted it after `transaction.timeout.ms`, 5 s, bumping the producer
    // epoch) and its old generation. Its next Produce, TxnOffsetCommit or
    // EndTxn is refused as fenced, or its heartbeat finds it out of the
    // group and its partitions lost while the transaction held their
    // outputs: either way the runtime stops on that fatal error and the
    // example exits with status 1, naming it (as its docs say). Only when A
    // was paused between a commit and its next record (nothing in its
    // transaction) is there nothing to fence: it rejoins as a member, and
    // must then stop cleanly on SIGTERM.
    signal(&a.child, "CONT");
    let resumed = Instant::now();
    let a_exit = tokio::time::timeout(Duration::from_secs(30), a.child.wait()).await;
    let exited_after = resumed.elapsed();
    let exited = a_exit.is_ok();
    let a_err_lines = a.errors.clone();
    let a_seen = a.seen.clone();
    let a_status = match a_exit {
        Ok(status) => {
            status.expect("wait for A");
            a.exited().await
        }
        Err(_) => {
            eprintln!(
                "streams EOS zombie: A still runs 30 s after SIGCONT: it had nothing to fence \
                 and rejoined; stopping it"
            );
            let status = a.stop().await;
            assert!(
                status.success(),
                "a resumed A that was not stopped as fenced stops cleanly: {status}"
            );
            status
        }
    };
    let late = a_seen
        .lock()
        .unwrap()
        .iter()
        .filter(|(at, _)| *at > paused_at)
        .count();
    let written = committed_output(&bootstrap, &output, N).await;
    let b_status = b.stop().await;
    let a_errors = a_err_lines.lock().unwrap().join("\n");
    eprintln!(
        "streams EOS zombie: A processed {} before SIGSTOP, {late} after SIGCONT, then {a_status} \
         {exited_after:?} after SIGCONT; output {} records",
        by_a_before.len(),
        written.len()
    );
    if exited {
        assert_eq!(
            a_status.code(),
            Some(1),
            "the zombie stops on a fatal error: {a_status}, stderr: {a_errors}"
        );
        let fenced = [
            "InvalidProducerEpoch (47)",
            "ProducerFenced (90)",
            "IllegalGeneration (22)",
            "UnknownMemberId (25)",
            "were lost",
            // Transactions v2 (KIP-890): the coordinator's timeout abort
            // bumped the epoch by one, so A's EndTxn(commit) looks like a
            // retry of a transaction that completed as aborted: refused.
            "InvalidTxnState (48)",
        ];
        assert!(
            fenced.iter().any(|f| a_errors.contains(f)),
            "the zombie reports that it was fenced (one of {fenced:?}): {a_errors}"
        );
    }
    assert!(b_status.success(), "B stopped cleanly: {b_status}");
    assert_eq!(
        written,
        (0..N as i64).collect::<Vec<_>>(),
        "the zombie's late writes are fenced: the output is still exact"
    );
}
