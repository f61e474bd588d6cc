//! Wire compatibility with a client we did not write: Java's console
//! producer and group consumer and Java's transactional producer
//! (ProducerPerformance with a transactional id, transactions v1 and v2),
//! run through the repo's `scripts/kafka tool` against the fake cluster, in
//! both directions with purekafka, and Java's console clients over SASL
//! (PLAIN and SCRAM-SHA-512) with a client config file.
//!
//! Without Java or the Kafka jars these tests print why and pass, except
//! under `CI=true`, where a missing Java is a failure.

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use kafka_protocol::messages::ApiKey;
use purekafka::producer::{Producer, ProducerConfig, ProducerRecord};
use purekafka::ClientConfig;
use purekafka_testkit::fake::{Action, FakeCluster, Rule, SaslMechanism};

fn script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../scripts/kafka")
}

/// Whether the Java tools can run here; panics in CI when they cannot.
fn java_available(test: &str) -> bool {
    let java_ok = Command::new("java")
        .arg("-version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
        || std::env::var_os("JAVA_HOME").is_some()
        || std::env::var_os("JAVA").is_some();
    if java_ok && script().exists() {
        return true;
    }
    let why = format!(
        "{test}: no java or no {} to run the Kafka tools",
        script().display()
    );
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "{why} (CI=true: a failure)"
    );
    eprintln!("skipping {why}");
    false
}

/// Runs a Kafka tool class, feeding `stdin`; returns stdout.
fn tool(class: &str, args: &[&str], stdin: Option<&str>) -> String {
    let mut child = Command::new("bash")
        .arg(script())
        .arg("tool")
        .arg(class)
        .args(args)
        // C1 only and the serial GC: these runs are short (scripts/kafka).
        .env("PUREKAFKA_TOOL_JIT", "quick")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("starting {class}: {e}"));
    let mut input = child.stdin.take().expect("stdin");
    if let Some(text) = stdin {
        input.write_all(text.as_bytes()).expect("write stdin");
    }
    drop(input);
    let out = child.wait_with_output().expect("run tool");
    assert!(
        out.status.success(),
        "{class} {args:?} failed ({}):\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

async fn tool_async(class: &'static str, args: Vec<String>, stdin: Option<String>) -> String {
    tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        tool(class, &args, stdin.as_deref())
    })
    .await
    .expect("tool thread")
}

const PRODUCER: &str = "org.apache.kafka.tools.ConsoleProducer";
const CONSUMER: &str = "org.apache.kafka.tools.consumer.ConsoleConsumer";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn java_console_producer_and_group_consumer_round_trip_through_the_fake() {
    if !java_available("java_round_trip") {
        return;
    }
    let fake = FakeCluster::start(3).await.expect("fake");
    fake.create_topic("java-in", 3).expect("topic");
    let bootstrap = fake.bootstrap();
    let lines: Vec<String> = (0..60).map(|i| format!("key-{i}\tvalue-{i}")).collect();
    let input = lines.join("\n") + "\n";
    tool_async(
        PRODUCER,
        [
            "--bootstrap-server",
            &bootstrap,
            "--topic",
            "java-in",
            "--reader-property",
            "parse.key=true",
            "--reader-property",
            "key.separator=\t",
            "--command-property",
            "acks=all",
        ]
        .map(String::from)
        .to_vec(),
        Some(input),
    )
    .await;
    let mut stored: Vec<String> = (0..3)
        .flat_map(|p| fake.records("java-in", p).expect("records"))
        .map(|r| String::from_utf8(r.value.expect("value").to_vec()).expect("utf8"))
        .collect();
    stored.sort();
    let mut want: Vec<String> = (0..60).map(|i| format!("value-{i}")).collect();
    want.sort();
    assert_eq!(stored, want, "the fake stored what Java produced");

    let out = tool_async(
        CONSUMER,
        [
            "--bootstrap-server",
            &bootstrap,
            "--topic",
            "java-in",
            "--group",
            "java-group",
            "--from-beginning",
            "--max-messages",
            "60",
            "--timeout-ms",
            "30000",
        ]
        .map(String::from)
        .to_vec(),
        None,
    )
    .await;
    let mut read: Vec<String> = out.lines().map(str::to_owned).collect();
    read.sort();
    assert_eq!(read, want, "Java's group consumer read every record back");
    let committed: i64 = (0..3)
        .map(|p| {
            fake.committed_offset("java-group", "java-in", p)
                .unwrap_or(0)
        })
        .sum();
    assert!(
        committed > 0,
        "Java's consumer committed offsets to the fake"
    );
}

/// Writes a Java client config file for SASL_PLAINTEXT with `jaas`.
fn sasl_config(name: &str, mechanism: &str, jaas: &str) -> PathBuf {
    let path = std::env::temp_dir().join(format!(
        "fake-java-{name}-{}.properties",
        std::process::id()
    ));
    std::fs::write(
        &path,
        format!(
            "security.protocol=SASL_PLAINTEXT\nsasl.mechanism={mechanism}\nsasl.jaas.config={jaas}\n"
        ),
    )
    .expect("write client config");
    path
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn java_console_clients_authenticate_with_plain_and_scram() {
    if !java_available("java_sasl") {
        return;
    }
    let fake = FakeCluster::builder()
        .sasl_plain("alice", "alice-secret")
        .sasl_user(SaslMechanism::ScramSha512, "carol", "carol-secret")
        .start()
        .await
        .expect("fake");
    fake.create_topic("java-sasl", 1).expect("topic");
    let bootstrap = fake.bootstrap();
    let plain = sasl_config(
        "plain",
        "PLAIN",
        "org.apache.kafka.common.security.plain.PlainLoginModule required \
         username=\"alice\" password=\"alice-secret\";",
    );
    let scram = sasl_config(
        "scram",
        "SCRAM-SHA-512",
        "org.apache.kafka.common.security.scram.ScramLoginModule required \
         username=\"carol\" password=\"carol-secret\";",
    );
    let want: Vec<String> = (0..20).map(|i| format!("sasl-{i}")).collect();
    tool_async(
        PRODUCER,
        vec![
            "--bootstrap-server".into(),
            bootstrap.clone(),
            "--topic".into(),
            "java-sasl".into(),
            "--command-config".into(),
            plain.display().to_string(),
        ],
        Some(want.join("\n") + "\n"),
    )
    .await;
    let stored = fake.records("java-sasl", 0).expect("records").len();
    assert_eq!(stored, 20, "Java's PLAIN producer wrote to the fake");
    let out = tool_async(
        CONSUMER,
        vec![
            "--bootstrap-server".into(),
            bootstrap,
            "--topic".into(),
            "java-sasl".into(),
            "--from-beginning".into(),
            "--max-messages".into(),
            "20".into(),
            "--timeout-ms".into(),
            "30000".into(),
            "--command-config".into(),
            scram.display().to_string(),
        ],
        None,
    )
    .await;
    let _ = std::fs::remove_file(plain);
    let _ = std::fs::remove_file(scram);
    let read: Vec<String> = out.lines().map(str::to_owned).collect();
    assert_eq!(
        read, want,
        "Java's SCRAM-SHA-512 consumer read every record"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn java_reads_what_purekafka_wrote_to_the_fake() {
    if !java_available("java_reads_purekafka") {
        return;
    }
    let fake = FakeCluster::start(1).await.expect("fake");
    fake.create_topic("from-rust", 2).expect("topic");
    let config = ProducerConfig::builder()
        .client(
            ClientConfig::builder()
                .bootstrap_servers(fake.bootstrap())
                .request_timeout(Duration::from_secs(5)),
        )
        .build()
        .expect("config");
    let producer = Producer::connect(config).await.expect("producer");
    let mut pending = Vec::new();
    for i in 0..40 {
        let record = ProducerRecord::new("from-rust")
            .key(format!("k{i}"))
            .value(format!("rust-{i}"));
        pending.push(producer.send(record).await.expect("send"));
    }
    for p in pending {
        p.await.expect("delivered");
    }
    let out = tool_async(
        CONSUMER,
        [
            "--bootstrap-server",
            &fake.bootstrap(),
            "--topic",
            "from-rust",
            "--from-beginning",
            "--max-messages",
            "40",
            "--timeout-ms",
            "30000",
            "--isolation-level",
            "read_committed",
        ]
        .map(String::from)
        .to_vec(),
        None,
    )
    .await;
    let mut read: Vec<String> = out.lines().map(str::to_owned).collect();
    read.sort();
    let mut want: Vec<String> = (0..40).map(|i| format!("rust-{i}")).collect();
    want.sort();
    assert_eq!(read, want);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn java_transactional_producer_commits_through_the_fake_v1() {
    java_transactions(1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn java_transactional_producer_commits_through_the_fake_v2() {
    java_transactions(2).await;
}

async fn java_transactions(version: i16) {
    if !java_available("java_transactional_producer") {
        return;
    }
    let fake = FakeCluster::builder()
        .brokers(3)
        .transaction_version(version)
        .start()
        .await
        .expect("fake");
    fake.create_topic("java-tx", 2).expect("topic");
    // An aborted transaction of ours first in the log, for Java's
    // read_committed consumer to skip.
    abort_one_transaction(&fake, "java-tx").await;
    fake.intercept(Rule::new(Action::Pass).on_api(ApiKey::AddPartitionsToTxn));
    let bootstrap = fake.bootstrap();
    tool_async(
        "org.apache.kafka.tools.ProducerPerformance",
        [
            "--topic",
            "java-tx",
            "--num-records",
            "200",
            "--record-size",
            "20",
            "--throughput",
            "-1",
            "--command-property",
            &format!("bootstrap.servers={bootstrap}"),
            "--transactional-id",
            "java-tx-1",
            "--transaction-duration-ms",
            "50",
        ]
        .map(String::from)
        .to_vec(),
        None,
    )
    .await;
    let (data, markers) = fake.with_state(|s| {
        s.topics["java-tx"]
            .partitions
            .iter()
            .fold((0, 0), |(d, m), p| {
                let markers = p.batches().iter().filter(|b| b.control).count();
                let data: i64 = p
                    .batches()
                    .iter()
                    .filter(|b| !b.control)
                    .map(|b| b.last_offset - b.base_offset + 1)
                    .sum();
                (d + data, m + markers)
            })
    });
    assert_eq!(data, 200 + ABORTED, "every record stored");
    assert!(markers > 0, "the transactions ended with markers");
    assert!(
        fake.with_state(|s| s.txns.by_id["java-tx-1"].started_ms.is_none()),
        "no transaction left open"
    );
    let adds = fake.rule_hits()[0];
    if version == 1 {
        assert!(adds > 0, "Java v1 adds partitions with AddPartitionsToTxn");
    } else {
        assert_eq!(adds, 0, "Java v2 adds partitions through Produce v12");
    }
    let out = tool_async(
        CONSUMER,
        [
            "--bootstrap-server",
            &bootstrap,
            "--topic",
            "java-tx",
            "--from-beginning",
            "--isolation-level",
            "read_committed",
            "--max-messages",
            "200",
            "--timeout-ms",
            "30000",
        ]
        .map(String::from)
        .to_vec(),
        None,
    )
    .await;
    assert_eq!(
        out.lines().count(),
        200,
        "Java read_committed sees every committed record"
    );
    // ProducerPerformance's values are upper-case letters.
    assert!(
        !out.contains("aborted"),
        "Java read_committed hides the aborted transaction"
    );
}

/// Records in [`abort_one_transaction`]'s transaction.
const ABORTED: i64 = 50;

/// Writes [`ABORTED`] records to `topic` in one transaction of our
/// producer, and aborts it.
async fn abort_one_transaction(fake: &FakeCluster, topic: &str) {
    let config = ProducerConfig::builder()
        .client(
            ClientConfig::builder()
                .bootstrap_servers(fake.bootstrap())
                .request_timeout(Duration::from_secs(5)),
        )
        .transactional_id("rust-aborts")
        .build()
        .expect("config");
    let producer = Producer::connect(config).await.expect("producer");
    producer.init_transactions().await.expect("init");
    producer.begin_transaction().expect("begin");
    let mut pending = Vec::new();
    for i in 0..ABORTED {
        let record = ProducerRecord::new(topic).value(format!("aborted-{i}"));
        pending.push(producer.send(record).await.expect("send"));
    }
    for p in pending {
        p.await.expect("delivered");
    }
    producer.abort_transaction().await.expect("abort");
    producer.close(Duration::from_secs(5)).await.expect("close");
}
