//! Process-level faults for the client (issue #17): a transactional
//! application paused with SIGSTOP while a second incarnation with the same
//! `transactional.id` takes over, then resumed with SIGCONT. The second
//! incarnation's `init_transactions` bumps the producer epoch (KIP-98), so
//! the first, a zombie, must be fenced: none of its late writes may reach
//! a read_committed reader, and the output holds every input record once.
//! The application is the `eos_copy` example, run as a child process.

use std::collections::HashMap;
use std::process::Stdio;
use std::time::Duration;

use purekafka::consumer::group::{GroupConfig, GroupMember};
use purekafka::consumer::{Consumer, ConsumerConfig, IsolationLevel};
use purekafka::producer::{Producer, ProducerConfig, ProducerRecord};
use purekafka::{Cluster, TopicPartition};
use tokio::io::AsyncReadExt;
use tokio::process::{Child, Command};

use crate::faults::eos_copy_bin;
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
        .map(|c| c.values().map(|o| o.offset).sum())
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_transactional_copier_is_fenced_when_it_resumes_and_the_output_stays_exact() {
    let Some(bootstrap) = support::bootstrap("zombie_transactional_copier") else {
        return;
    };
    support::trace();
    let cluster = Cluster::connect(support::config(&bootstrap)).await.unwrap();
    let input = support::unique_topic("zombie-in");
    let output = support::unique_topic("zombie-out");
    support::create_topic(&cluster, &input, 2).await;
    support::create_topic(&cluster, &output, 2).await;

    const N: usize = 4_000;
    let producer = Producer::new(
        ProducerConfig::builder()
            .bootstrap_servers(&bootstrap)
            .build()
            .unwrap(),
    )
    .await
    .unwrap();
    for i in 0..N {
        let p = (i % 2) as i32;
        producer
            .send_with_callback(
                ProducerRecord::new(&input)
                    .partition(p)
                    .value(format!("p{p}-{:06}", i / 2)),
                |r| {
                    r.expect("input record");
                },
            )
            .await
            .unwrap();
    }
    producer.flush().await;
    producer.close(Duration::from_secs(10)).await.unwrap();

    let group = support::unique_topic("zombie-group");
    let txn_id = support::unique_topic("zombie-txn");
    let copier = |pause_ms: &str, idle_ms: &str| {
        Command::new(eos_copy_bin())
            .args([
                "--bootstrap",
                &bootstrap,
                "--input",
                &input,
                "--output",
                &output,
                "--group",
                &group,
                "--transactional-id",
                &txn_id,
                "--transaction-size",
                "50",
                "--pause-ms",
                pause_ms,
                "--idle-exit-ms",
                idle_ms,
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
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

    let out = consume_values(&bootstrap, &output, 2, IsolationLevel::ReadCommitted).await;
    let mut seen: HashMap<&str, u32> = HashMap::new();
    for values in &out {
        let mut last: HashMap<&str, &str> = HashMap::new();
        for v in values {
            *seen.entry(v).or_default() += 1;
            let (p, seq) = v.split_once('-').expect("p<p>-<seq>");
            if let Some(prev) = last.insert(p, seq) {
                assert!(prev < seq, "{p}: {seq} after {prev}");
            }
        }
    }
    let dups: Vec<&&str> = seen
        .iter()
        .filter(|(_, c)| **c > 1)
        .map(|(v, _)| v)
        .collect();
    assert!(
        dups.is_empty(),
        "duplicates in the output: {:?}",
        &dups[..dups.len().min(5)]
    );
    assert_eq!(seen.len(), N, "every input record copied once");
    eprintln!(
        "zombie copier: A committed {before_pause} copies before SIGSTOP; B copied the rest; \
         A after SIGCONT: {status}, {}; output {N} records, 0 duplicates",
        a_err.lines().last().unwrap_or_default()
    );
}
