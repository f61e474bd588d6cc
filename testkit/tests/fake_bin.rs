//! The standalone `fake-kafka` binary: first stdout line is the bootstrap
//! string, the brokers serve a client, SIGTERM ends it cleanly.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use purekafka::{ClientConfig, Cluster};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fake_kafka_prints_its_bootstrap_serves_and_stops_on_sigterm() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_fake-kafka"))
        .args(["--brokers", "3", "--port", "0"])
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn fake-kafka");
    let stdout = child.stdout.take().expect("stdout");
    let line = tokio::task::spawn_blocking(move || {
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line).map(|_| line)
    })
    .await
    .expect("reader")
    .expect("first line");
    let bootstrap = line.trim().to_owned();
    assert_eq!(bootstrap.split(',').count(), 3, "{bootstrap}");
    let config = ClientConfig::builder()
        .bootstrap_servers(&bootstrap)
        .request_timeout(Duration::from_secs(5))
        .build()
        .expect("config");
    let cluster = Cluster::connect(config).await.expect("connect");
    assert_eq!(cluster.metadata().brokers.len(), 3);
    drop(cluster);

    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .expect("kill");
    assert!(status.success());
    let deadline = Instant::now() + Duration::from_secs(10);
    let exit = loop {
        if let Some(exit) = child.try_wait().expect("wait") {
            break exit;
        }
        assert!(Instant::now() < deadline, "fake-kafka ignored SIGTERM");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(exit.success(), "{exit:?}");
}

#[test]
fn bad_arguments_exit_with_usage() {
    let out = Command::new(env!("CARGO_BIN_EXE_fake-kafka"))
        .args(["--brokers", "many"])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--brokers"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fake_kafka_sasl_users_authenticate_and_bad_specs_are_refused() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_fake-kafka"))
        .args(["--sasl", "SCRAM-SHA-256:bob:pass:with:colons"])
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn fake-kafka");
    let stdout = child.stdout.take().expect("stdout");
    let line = tokio::task::spawn_blocking(move || {
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line).map(|_| line)
    })
    .await
    .expect("reader")
    .expect("first line");
    let connect = |password: &'static str| {
        let bootstrap = line.trim().to_owned();
        async move {
            let config = ClientConfig::from_properties([
                ("bootstrap.servers", bootstrap.as_str()),
                ("security.protocol", "SASL_PLAINTEXT"),
                ("sasl.mechanism", "SCRAM-SHA-256"),
                ("sasl.username", "bob"),
                ("sasl.password", password),
                ("request.timeout.ms", "5000"),
            ])
            .expect("config");
            Cluster::connect(config).await
        }
    };
    let ok = connect("pass:with:colons").await;
    let wrong = connect("pass").await;
    let _ = child.kill();
    let _ = child.wait();
    assert!(ok.is_ok(), "{:?}", ok.err());
    let err = wrong.expect_err("a wrong password must fail");
    assert!(
        matches!(err, purekafka::Error::Authentication { .. }),
        "{err}"
    );

    for spec in ["GSSAPI:bob:x", "PLAIN:bob"] {
        let out = Command::new(env!("CARGO_BIN_EXE_fake-kafka"))
            .args(["--sasl", spec])
            .output()
            .expect("run");
        assert_eq!(out.status.code(), Some(2), "{spec}");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("--sasl"),
            "{spec}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fake_kafka_acls_let_super_users_through_and_refuse_others() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_fake-kafka"))
        .args([
            "--sasl",
            "PLAIN:admin:a-secret",
            "--sasl",
            "PLAIN:alice:b-secret",
        ])
        .args(["--super-user", "User:admin"])
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn fake-kafka");
    let stdout = child.stdout.take().expect("stdout");
    let line = tokio::task::spawn_blocking(move || {
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line).map(|_| line)
    })
    .await
    .expect("reader")
    .expect("first line");
    let describe_acls = |user: &'static str, password: &'static str| {
        let bootstrap = line.trim().to_owned();
        async move {
            let config = ClientConfig::from_properties([
                ("bootstrap.servers", bootstrap.as_str()),
                ("security.protocol", "SASL_PLAINTEXT"),
                ("sasl.mechanism", "PLAIN"),
                ("sasl.username", user),
                ("sasl.password", password),
                ("request.timeout.ms", "5000"),
            ])
            .expect("config");
            let admin = purekafka::Admin::connect(config).await?;
            admin
                .describe_acls(&purekafka::admin::AclFilter::any())
                .await
        }
    };
    let root = describe_acls("admin", "a-secret").await;
    let alice = describe_acls("alice", "b-secret").await;
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(root.expect("a super user may describe ACLs"), vec![]);
    let e = alice.expect_err("alice has no DESCRIBE on the cluster");
    assert_eq!(
        e.kafka_code(),
        Some(purekafka::KafkaCode::CLUSTER_AUTHORIZATION_FAILED),
        "{e}"
    );

    let out = Command::new(env!("CARGO_BIN_EXE_fake-kafka"))
        .args(["--super-user", "admin"])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--super-user"));
}
