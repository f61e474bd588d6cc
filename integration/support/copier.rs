//! The exactly-once copier runs shared by the fault tests (`faults.rs`,
//! `net_faults.rs`, `process_faults.rs`): the topics, the `eos_copy`
//! example as a child process, and the check of its output. The copier is
//! the equivalent of Kafka's TransactionalMessageCopier (KIP-98, KIP-447).

use std::collections::HashSet;
use std::time::Duration;

use purekafka::consumer::IsolationLevel;
use purekafka::Cluster;
use tokio::process::Command;

use super::read::consume_values;

/// An example's binary, built by `cargo test` next to the test binary.
pub fn example_bin(name: &str) -> std::path::PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    let dir = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("target dir");
    let bin = dir.join("examples").join(name);
    assert!(
        bin.exists(),
        "{} missing: `cargo test` builds examples",
        bin.display()
    );
    bin
}

/// A copier's topics, group and `transactional.id`, fresh per test.
pub struct CopierRun {
    /// A client of the brokers (not through any proxy).
    pub cluster: Cluster,
    /// Two partitions of `n` records: partition `p` holds `p<p>-<seq>`.
    pub input: String,
    /// Where the copies go.
    pub output: String,
    /// The output's partition count.
    pub output_partitions: i32,
    /// The copier's consumer group.
    pub group: String,
    /// The copier's `transactional.id` (every incarnation shares it).
    pub txn_id: String,
}

impl CopierRun {
    /// Creates the topics (names from `test`) and writes `n` input records.
    pub async fn prepare(bootstrap: &str, test: &str, n: usize, output_partitions: i32) -> Self {
        let cluster = Cluster::connect(
            purekafka::ClientConfig::builder()
                .bootstrap_servers(bootstrap)
                .request_timeout(Duration::from_secs(5))
                .default_api_timeout(Duration::from_secs(30))
                .build()
                .unwrap(),
        )
        .await
        .unwrap();
        let input = super::unique_topic(&format!("{test}-in"));
        let output = super::unique_topic(&format!("{test}-out"));
        super::create_topic(&cluster, &input, 2).await;
        super::create_topic(&cluster, &output, output_partitions).await;
        super::fill_copier_input(bootstrap, &input, n).await;
        CopierRun {
            cluster,
            input,
            output,
            output_partitions,
            group: super::unique_topic(&format!("{test}-group")),
            txn_id: super::unique_topic(&format!("{test}-txn")),
        }
    }

    /// The `eos_copy` command through `bootstrap` (the brokers or a proxy),
    /// with `extra` flags (`--transaction-size`, `--pause-ms`, ...); killed
    /// when its handle drops.
    pub fn command(&self, bootstrap: &str, extra: &[&str]) -> Command {
        let mut c = Command::new(example_bin("eos_copy"));
        c.args([
            "--bootstrap",
            bootstrap,
            "--input",
            &self.input,
            "--output",
            &self.output,
            "--group",
            &self.group,
            "--transactional-id",
            &self.txn_id,
        ])
        .args(extra)
        .kill_on_drop(true);
        c
    }

    /// Reads the output (read_committed) and asserts it is an exact copy
    /// of the `n` inputs: each input partition's records in order, none
    /// twice, none missing. Returns the number of records read.
    pub async fn assert_exact_copy(&self, bootstrap: &str, n: usize) -> usize {
        let out = consume_values(
            bootstrap,
            &self.output,
            self.output_partitions,
            IsolationLevel::ReadCommitted,
        )
        .await;
        let mut seen: HashSet<&str> = HashSet::new();
        let mut total = 0;
        for values in &out {
            let mut last: std::collections::HashMap<&str, &str> = Default::default();
            for v in values {
                total += 1;
                assert!(seen.insert(v), "{v} copied twice");
                let (p, seq) = v.split_once('-').expect("p<p>-<seq>");
                if let Some(prev) = last.insert(p, seq) {
                    assert!(prev < seq, "{p}: {seq} after {prev}");
                }
            }
        }
        let missing: Vec<String> = (0..n)
            .map(|i| format!("p{}-{:06}", i % 2, i / 2))
            .filter(|v| !seen.contains(v.as_str()))
            .take(5)
            .collect();
        assert!(missing.is_empty(), "inputs never copied, e.g. {missing:?}");
        assert_eq!(total, n, "output size");
        total
    }
}
