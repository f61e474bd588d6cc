//! Shared helpers: broker discovery, unique topic names, topic creation, and
//! a loopback TCP proxy that can cut or stall a live connection.

pub mod chaos;
pub mod copier;
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
use purekafka::cluster::Workload;
use purekafka::protocol::versions::Versions;
use purekafka::{ClientConfig, Cluster};

/// Where the brokers under test come from: `PUREKAFKA_BROKER`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BrokerProvider {
    /// `jvm` (the default): `scripts/kafka` runs Kafka's jars with `java`
    /// on loopback; the addresses default to its fixed ports.
    Jvm,
    /// `container`: Kafka containers started through purekafka-testkit
    /// (`cargo run -p purekafka-testkit --example kafka_containers`, which
    /// `scripts/test` runs); their addresses come from the `PUREKAFKA_BOOTSTRAP*`
    /// variables it prints. The 3-node fault tests stay on the JVM cluster:
    /// they drive its nodes through `scripts/kafka`.
    Container,
    /// `external`: brokers someone else runs, named by the variables only.
    External,
    /// `fake`: purekafka-testkit's in-process fake cluster, run as its
    /// `fake-kafka` binary (`scripts/test` starts one) and named by
    /// `PUREKAFKA_BOOTSTRAP`. Only the single-node modules run on it; a test
    /// that needs broker behaviour the fake does not model says so through
    /// [`real_broker_only`] (the list is in `integration/kafka/README.md`).
    Fake,
}

/// The provider `PUREKAFKA_BROKER` names (`jvm` when unset). An unknown
/// value panics: a typo must not quietly test something else.
pub fn broker_provider() -> BrokerProvider {
    match std::env::var("PUREKAFKA_BROKER")
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase()
        .as_str()
    {
        "" | "jvm" => BrokerProvider::Jvm,
        "container" => BrokerProvider::Container,
        "external" => BrokerProvider::External,
        "fake" => BrokerProvider::Fake,
        other => panic!("PUREKAFKA_BROKER={other}: expected container, jvm, external or fake"),
    }
}

/// How to get the broker `var` names under `provider`.
fn how_to_start(provider: BrokerProvider, var: &str, jvm: &str) -> String {
    match provider {
        BrokerProvider::Jvm => format!("run `{jvm}`"),
        BrokerProvider::Container => format!(
            "set {var} from `cargo run -p purekafka-testkit --example kafka_containers` \
             (scripts/test does), or use PUREKAFKA_BROKER=jvm"
        ),
        BrokerProvider::External => format!("set {var} to the broker's address"),
        BrokerProvider::Fake => format!(
            "set {var} to the address `cargo run -p purekafka-testkit --bin fake-kafka` \
             prints (scripts/test does)"
        ),
    }
}

/// False, after saying why, when the brokers are the fake cluster and `test`
/// needs broker behaviour it does not model (`missing`, e.g. an API it does
/// not serve); true otherwise. A deliberate, listed exclusion (see
/// `integration/kafka/README.md`), not a missing broker, so it holds in CI.
pub fn real_broker_only(test: &str, missing: &str) -> bool {
    if broker_provider() == BrokerProvider::Fake {
        eprintln!("NOT ON THE FAKE {test}: the fake cluster does not model {missing}");
        return false;
    }
    true
}

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
/// through `PUREKAFKA_BOOTSTRAP_3`; same skip rules as [`bootstrap`]. Always
/// the JVM cluster unless `PUREKAFKA_BROKER=external`: the fault tests kill
/// and pause its nodes through `scripts/kafka`.
pub fn bootstrap3(test: &str) -> Option<String> {
    let provider = match broker_provider() {
        BrokerProvider::External => BrokerProvider::External,
        _ => BrokerProvider::Jvm,
    };
    reachable_or_skip_with(
        provider,
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

/// The OIDC node (`scripts/kafka up --oidc`): OAUTHBEARER with JWTs from
/// the test identity provider, found through `PUREKAFKA_BOOTSTRAP_OIDC`;
/// same skip rules as [`bootstrap`].
#[cfg(feature = "oauth")]
pub fn bootstrap_oidc(test: &str) -> Option<String> {
    reachable_or_skip(
        test,
        "PUREKAFKA_BOOTSTRAP_OIDC",
        "127.0.0.1:19392",
        "scripts/kafka up --oidc",
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
    reachable_or_skip_with(broker_provider(), test, var, default, how)
}

/// `var`'s address (the JVM harness's `default` port only for
/// [`BrokerProvider::Jvm`]) if a broker answers there; else skip, or panic in CI.
fn reachable_or_skip_with(
    provider: BrokerProvider,
    test: &str,
    var: &str,
    default: &str,
    jvm_how: &str,
) -> Option<String> {
    let how = how_to_start(provider, var, jvm_how);
    let addr = match (std::env::var(var), provider) {
        (Ok(v), _) if !v.trim().is_empty() => v,
        (_, BrokerProvider::Jvm) => default.to_owned(),
        _ => {
            assert!(
                !ci(),
                "{test}: {var} is unset (CI=true forbids skipping; {how})"
            );
            eprintln!("SKIPPED {test}: {var} is unset; {how}");
            return None;
        }
    };
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
    assert!(
        !ci(),
        "{test}: no Kafka broker at {addr} (CI=true forbids skipping; {how})"
    );
    eprintln!("SKIPPED {test}: no Kafka broker at {addr}; {how}");
    None
}

/// Writes `n` records through the producer, alternating over partitions 0
/// and 1 of `topic`: partition `p` holds `p<p>-<seq>` with `seq` counting
/// from 0, in order. The input the exactly-once copier tests check against.
pub async fn fill_copier_input(bootstrap: &str, topic: &str, n: usize) {
    use purekafka::producer::{Producer, ProducerConfig, ProducerRecord};
    let producer = Producer::connect(
        ProducerConfig::builder()
            .bootstrap_servers(bootstrap)
            .build()
            .unwrap(),
    )
    .await
    .unwrap();
    for i in 0..n {
        let p = (i % 2) as i32;
        producer
            .send_with_callback(
                ProducerRecord::new(topic)
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
}

/// Whether `CI` is set to something true.
fn ci() -> bool {
    std::env::var("CI").is_ok_and(|v| {
        let v = v.trim().to_ascii_lowercase();
        !v.is_empty() && v != "0" && v != "false"
    })
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
