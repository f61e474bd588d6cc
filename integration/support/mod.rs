//! Shared helpers: broker discovery, unique topic names, topic creation, and
//! a loopback TCP proxy that can cut or stall a live connection.

pub mod chaos;
pub mod fake;
pub mod hostile;
pub mod java;
pub mod no_coordinator;
pub mod proxy;
pub mod queue;
pub mod read;
pub mod records;

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use kafka_protocol::messages::create_topics_request::{CreatableTopic, CreatableTopicConfig};
use kafka_protocol::messages::{CreateTopicsRequest, TopicName};
use kafka_protocol::protocol::StrBytes;
use purekafka::net::Workload;
use purekafka::protocol::versions::Versions;
use purekafka::{ClientConfig, Cluster};

/// The broker's bootstrap address, or `None` (after printing why) when no
/// broker answers and we are not in CI. In CI an unreachable broker panics.
pub fn bootstrap(test: &str) -> Option<String> {
    reachable_or_skip(
        test,
        "PUREKAFKA_BOOTSTRAP",
        "127.0.0.1:19092",
        "scripts/kafka up",
    )
}

/// The 3-node cluster (`scripts/kafka up --nodes 3`) for fault tests, found
/// through `PUREKAFKA_BOOTSTRAP_3`; same skip rules as [`bootstrap`].
pub fn bootstrap3(test: &str) -> Option<String> {
    reachable_or_skip(
        test,
        "PUREKAFKA_BOOTSTRAP_3",
        "127.0.0.1:19192,127.0.0.1:19194,127.0.0.1:19196",
        "scripts/kafka up --nodes 3",
    )
}

/// The secure single node (`scripts/kafka up --secure`), SASL_PLAINTEXT
/// listener, found through `PUREKAFKA_BOOTSTRAP_SECURE`; same skip rules as
/// [`bootstrap`].
pub fn bootstrap_secure(test: &str) -> Option<String> {
    reachable_or_skip(
        test,
        "PUREKAFKA_BOOTSTRAP_SECURE",
        "127.0.0.1:19292",
        "scripts/kafka up --secure",
    )
}

/// The secure node's SASL_SSL listener (`PUREKAFKA_BOOTSTRAP_SECURE_TLS`).
#[cfg(feature = "tls")]
pub fn bootstrap_secure_tls(test: &str) -> Option<String> {
    reachable_or_skip(
        test,
        "PUREKAFKA_BOOTSTRAP_SECURE_TLS",
        "127.0.0.1:19293",
        "scripts/kafka up --secure",
    )
}

/// The secure node's SSL listener that requires client certificates
/// (`PUREKAFKA_BOOTSTRAP_SECURE_MTLS`).
#[cfg(feature = "tls")]
pub fn bootstrap_secure_mtls(test: &str) -> Option<String> {
    reachable_or_skip(
        test,
        "PUREKAFKA_BOOTSTRAP_SECURE_MTLS",
        "127.0.0.1:19296",
        "scripts/kafka up --secure",
    )
}

/// The secure node's test PKI (`scripts/kafka tls-dir`), through
/// `PUREKAFKA_SECURE_TLS_DIR`.
#[cfg(feature = "tls")]
pub fn secure_tls_dir() -> std::path::PathBuf {
    std::env::var_os("PUREKAFKA_SECURE_TLS_DIR")
        .map(Into::into)
        .unwrap_or_else(|| {
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("target/kafka/secure/tls")
        })
}

fn reachable_or_skip(test: &str, var: &str, default: &str, how: &str) -> Option<String> {
    let addr = std::env::var(var).unwrap_or_else(|_| default.into());
    // Any listed broker will do: a fault test may have one node down.
    let reachable = addr.split(',').any(|a| {
        a.trim()
            .parse::<std::net::SocketAddr>()
            .ok()
            .and_then(|sa| std::net::TcpStream::connect_timeout(&sa, Duration::from_secs(2)).ok())
            .is_some()
    });
    if reachable {
        return Some(addr);
    }
    let ci = std::env::var("CI").is_ok_and(|v| {
        let v = v.trim().to_ascii_lowercase();
        !v.is_empty() && v != "0" && v != "false"
    });
    assert!(
        !ci,
        "{test}: no Kafka broker at {addr} (CI=true forbids skipping; run `{how}`)"
    );
    eprintln!("SKIPPED {test}: no Kafka broker at {addr}; run `{how}`");
    None
}

/// Installs a tracing subscriber once, filtered by `RUST_LOG` (silent
/// when it is unset), for debugging a test run.
pub fn trace() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        if let Ok(filter) = std::env::var("RUST_LOG") {
            let _ = tracing_subscriber::fmt()
                .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
                .with_test_writer()
                .try_init();
        }
    });
}

/// A client config for `bootstrap` with short timeouts suited to tests.
pub fn config(bootstrap: &str) -> ClientConfig {
    ClientConfig::builder()
        .bootstrap_servers(bootstrap)
        .client_id("purekafka-it")
        .request_timeout(Duration::from_secs(10))
        .default_api_timeout(Duration::from_secs(30))
        .build()
        .expect("valid test config")
}

/// A topic name unique to this process and call.
pub fn unique_topic(prefix: &str) -> String {
    static SEQ: AtomicU32 = AtomicU32::new(0);
    let n = SEQ.fetch_add(1, Ordering::Relaxed);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!("{prefix}-{}-{n}-{nanos}", std::process::id())
}

/// Creates a topic through the controller-routed CreateTopics API and waits
/// until metadata shows a leader for every partition.
pub async fn create_topic(cluster: &Cluster, name: &str, partitions: i32) {
    create_topic_with(cluster, name, partitions, &[]).await;
}

/// [`create_topic`] with topic configs (`max.message.bytes`, ...).
pub async fn create_topic_with(
    cluster: &Cluster,
    name: &str,
    partitions: i32,
    configs: &[(&str, &str)],
) {
    let conn = cluster
        .any_connection(Workload::Admin)
        .await
        .expect("connection");
    let req = CreateTopicsRequest::default()
        .with_timeout_ms(15_000)
        .with_topics(vec![CreatableTopic::default()
            .with_name(TopicName(StrBytes::from_string(name.to_owned())))
            .with_num_partitions(partitions)
            .with_replication_factor(-1)
            .with_configs(
                configs
                    .iter()
                    .map(|(k, v)| {
                        CreatableTopicConfig::default()
                            .with_name(StrBytes::from_string((*k).to_owned()))
                            .with_value(Some(StrBytes::from_string((*v).to_owned())))
                    })
                    .collect(),
            )]);
    let resp = conn
        .send(&req, Versions::new(2, 7))
        .await
        .expect("CreateTopics round trip");
    let code = resp.topics.first().map(|t| t.error_code).unwrap_or(-1);
    assert_eq!(code, 0, "CreateTopics {name}: {resp:?}");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let m = cluster
            .refresh_metadata(Some(&[name.to_owned()]))
            .await
            .expect("metadata");
        let ready = m.topics.get(name).is_some_and(|t| {
            t.partitions.len() == partitions as usize && t.partitions.iter().all(|p| p.leader >= 0)
        });
        if ready {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "topic {name} never got leaders"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
