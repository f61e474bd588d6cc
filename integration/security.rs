//! Security against the secure broker (`scripts/kafka up --secure`): every
//! SASL mechanism produces and reads back, wrong credentials fail at once
//! with a clear non-retriable error, KIP-368 session expiry closes the
//! connection before the broker would, no secret reaches `Debug`
//! output, error messages or logs, and ACLs (StandardAuthorizer) are
//! created, enforced with typed refusals, listed and deleted.

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use purekafka::cluster::{BrokerAddr, Connection, ConnectionConfig};
use purekafka::config::UnsecuredJwt;
use purekafka::config::{SaslMechanism, SecurityProtocol};
use purekafka::producer::{Producer, ProducerConfig, ProducerRecord};
use purekafka::{ClientConfig, ClientConfigBuilder, Cluster, Error};

use crate::support::{self, read::read_partition};

/// Users made by `scripts/kafka up --secure`.
const ALICE: &str = "alice";
const ALICE_PASSWORD: &str = "alice-secret";

fn base(bootstrap: &str) -> ClientConfigBuilder {
    ClientConfig::builder()
        .bootstrap_servers(bootstrap)
        .client_id("purekafka-it-security")
        .request_timeout(Duration::from_secs(10))
        .default_api_timeout(Duration::from_secs(30))
}

fn sasl(
    bootstrap: &str,
    protocol: SecurityProtocol,
    mechanism: SaslMechanism,
    password: &str,
) -> ClientConfigBuilder {
    sasl_as(bootstrap, protocol, mechanism, ALICE, password)
}

/// [`sasl`] as any `user` the secure node knows; an OAUTHBEARER token
/// names the user as its subject.
fn sasl_as(
    bootstrap: &str,
    protocol: SecurityProtocol,
    mechanism: SaslMechanism,
    user: &str,
    password: &str,
) -> ClientConfigBuilder {
    let b = base(bootstrap)
        .security_protocol(protocol)
        .sasl_mechanism(mechanism);
    if mechanism == SaslMechanism::OAuthBearer {
        b.sasl_token_provider(Arc::new(UnsecuredJwt {
            subject: user.into(),
            lifetime: Duration::from_secs(3600),
        }))
    } else {
        b.sasl_credentials(user, password)
    }
}

/// Creates a topic, produces with [`Producer`], reads it back with plain
/// Fetch requests: all over connections secured by `client`.
async fn produce_and_read_back(client: ClientConfigBuilder, label: &str) {
    let cluster = Cluster::connect(client.clone().build().expect("config"))
        .await
        .unwrap_or_else(|e| panic!("{label}: connect: {e}"));
    let topic = support::unique_topic(&format!("sec-{label}"));
    support::create_topic(&cluster, &topic, 1).await;
    let producer = Producer::connect(
        ProducerConfig::builder()
            .client(client)
            .delivery_timeout(Duration::from_secs(30))
            .build()
            .expect("producer config"),
    )
    .await
    .unwrap_or_else(|e| panic!("{label}: producer: {e}"));
    for i in 0..10 {
        producer
            .send(ProducerRecord::new(&topic).value(format!("{label}-{i}")))
            .await
            .expect("enqueue")
            .await
            .unwrap_or_else(|e| panic!("{label}: delivery: {e}"));
    }
    producer
        .close(Duration::from_secs(10))
        .await
        .expect("close");
    let records = read_partition(&cluster, &topic, 0).await;
    let values: Vec<String> = records
        .iter()
        .map(|r| String::from_utf8_lossy(r.value.as_deref().unwrap_or_default()).into_owned())
        .collect();
    let want: Vec<String> = (0..10).map(|i| format!("{label}-{i}")).collect();
    assert_eq!(values, want, "{label}");
}

#[tokio::test]
async fn sasl_plaintext_every_mechanism_produces_and_reads_back() {
    let Some(bootstrap) = support::bootstrap_secure("sasl_plaintext_every_mechanism") else {
        return;
    };
    support::trace();
    for mechanism in [
        SaslMechanism::Plain,
        SaslMechanism::ScramSha256,
        SaslMechanism::ScramSha512,
        SaslMechanism::OAuthBearer,
    ] {
        let client = sasl(
            &bootstrap,
            SecurityProtocol::SaslPlaintext,
            mechanism,
            ALICE_PASSWORD,
        );
        produce_and_read_back(client, &mechanism.name().to_ascii_lowercase()).await;
    }
}

#[tokio::test]
async fn java_properties_configure_sasl() {
    let Some(bootstrap) = support::bootstrap_secure("java_properties_configure_sasl") else {
        return;
    };
    let config = ClientConfig::from_properties([
        ("bootstrap.servers", bootstrap.as_str()),
        ("security.protocol", "SASL_PLAINTEXT"),
        ("sasl.mechanism", "SCRAM-SHA-512"),
        (
            "sasl.jaas.config",
            r#"org.apache.kafka.common.security.scram.ScramLoginModule required username="bob" password="bob-secret";"#,
        ),
    ])
    .expect("config");
    let cluster = Cluster::connect(config).await.expect("connect as bob");
    assert!(!cluster.metadata().brokers.is_empty());
}

#[tokio::test]
async fn acls_are_enforced_and_refusals_are_typed_and_name_the_topic() {
    use purekafka::admin::{
        AclBinding, AclFilter, AclOperation, AclPermission, AclResourceType, PatternType,
    };
    use purekafka::consumer::{Consumer, ConsumerConfig};
    use purekafka::{Admin, KafkaCode, TopicPartition};

    let Some(bootstrap) = support::bootstrap_secure("acls_are_enforced") else {
        return;
    };
    let scram = |user: &str, password: &str| {
        sasl_as(
            &bootstrap,
            SecurityProtocol::SaslPlaintext,
            SaslMechanism::ScramSha256,
            user,
            password,
        )
    };
    // alice is a super user; bob gets what the ACLs give him.
    let alice = Cluster::connect(scram(ALICE, ALICE_PASSWORD).build().unwrap())
        .await
        .expect("alice connects");
    let topic = support::unique_topic("sec-acl");
    support::create_topic(&alice, &topic, 1).await;
    let admin = Admin::with_cluster(alice.clone());
    let write = AclBinding {
        resource_type: AclResourceType::Topic,
        resource_name: topic.clone(),
        pattern_type: PatternType::Literal,
        principal: "User:bob".into(),
        host: "*".into(),
        operation: AclOperation::Write,
        permission: AclPermission::Allow,
    };
    let created = admin
        .create_acls(std::slice::from_ref(&write))
        .await
        .unwrap();
    assert_eq!(created.len(), 1);
    created[0].1.clone().expect("ACL created");
    let filter = AclFilter {
        resource_name: Some(topic.clone()),
        ..AclFilter::any()
    };
    // ACLs reach the authorizer through the metadata log: wait for it.
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let acls = admin.describe_acls(&filter).await.unwrap();
        if acls == vec![write.clone()] {
            break;
        }
        assert!(Instant::now() < deadline, "ACL never listed: {acls:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // bob may write...
    let bob = scram("bob", "bob-secret");
    let producer = Producer::connect(
        ProducerConfig::builder()
            .client(bob.clone())
            .build()
            .unwrap(),
    )
    .await
    .unwrap();
    producer
        .send(ProducerRecord::new(&topic).value("by bob"))
        .await
        .unwrap()
        .await
        .expect("bob has Write");
    producer.close(Duration::from_secs(10)).await.unwrap();
    // ...but not read: a typed, non-retriable refusal naming the topic,
    // well before any timeout.
    let consumer = Consumer::connect(
        ConsumerConfig::builder()
            .client(|_| bob.clone())
            .build()
            .unwrap(),
    )
    .await
    .unwrap();
    let tp = TopicPartition::new(topic.as_str(), 0);
    consumer.assign(vec![tp.clone()]);
    consumer.seek(&tp, 0).unwrap();
    let started = Instant::now();
    let err = loop {
        match consumer.poll(Duration::from_millis(500)).await {
            Err(e) => break e,
            Ok(records) => assert!(records.is_empty(), "bob read {records:?}"),
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "no authorization error after 20 s"
        );
    };
    assert_eq!(
        err.kafka_code(),
        Some(KafkaCode::TOPIC_AUTHORIZATION_FAILED),
        "{err}"
    );
    assert!(err.to_string().contains(&topic), "{err}");
    assert!(!err.is_retriable(), "{err}");

    // A topic whose only ACL is someone else's is closed to bob: the send
    // fails fast with the same typed refusal.
    let closed = support::unique_topic("sec-acl-closed");
    support::create_topic(&alice, &closed, 1).await;
    let carol_writes = AclBinding {
        resource_name: closed.clone(),
        principal: "User:carol".into(),
        ..write.clone()
    };
    admin
        .create_acls(std::slice::from_ref(&carol_writes))
        .await
        .unwrap()[0]
        .1
        .clone()
        .expect("ACL created");
    let closed_filter = AclFilter {
        resource_name: Some(closed.clone()),
        ..AclFilter::any()
    };
    while admin
        .describe_acls(&closed_filter)
        .await
        .unwrap()
        .is_empty()
    {
        assert!(
            Instant::now() < deadline + Duration::from_secs(15),
            "ACL never listed"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let producer = Producer::connect(
        ProducerConfig::builder()
            .client(bob.clone())
            .max_block(Duration::from_secs(20))
            .build()
            .unwrap(),
    )
    .await
    .unwrap();
    let started = Instant::now();
    let err = match producer.send(ProducerRecord::new(&closed).value("x")).await {
        Err(e) => e,
        Ok(delivery) => delivery.await.expect_err("bob lacks Write"),
    };
    assert_eq!(
        err.kafka_code(),
        Some(KafkaCode::TOPIC_AUTHORIZATION_FAILED),
        "{err}"
    );
    assert!(err.to_string().contains(&closed), "{err}");
    assert!(!err.is_retriable(), "{err}");
    assert!(started.elapsed() < Duration::from_secs(10), "{err}");
    producer.close(Duration::from_secs(10)).await.unwrap();

    let deleted = admin.delete_acls(&[filter, closed_filter]).await.unwrap();
    assert_eq!(deleted.len(), 2);
    assert_eq!(deleted[0].as_ref().unwrap(), &vec![write]);
    assert_eq!(deleted[1].as_ref().unwrap(), &vec![carol_writes]);
}

#[tokio::test]
async fn wrong_password_fails_fast_with_a_clear_error() {
    let Some(bootstrap) = support::bootstrap_secure("wrong_password_fails_fast") else {
        return;
    };
    for mechanism in [
        SaslMechanism::Plain,
        SaslMechanism::ScramSha256,
        SaslMechanism::ScramSha512,
    ] {
        let wrong = "not-the-password-4711";
        let config = sasl(
            &bootstrap,
            SecurityProtocol::SaslPlaintext,
            mechanism,
            wrong,
        )
        .build()
        .unwrap();
        let started = Instant::now();
        let err = Cluster::connect(config).await.expect_err("wrong password");
        let took = started.elapsed();
        assert!(took < Duration::from_secs(5), "{mechanism}: took {took:?}");
        assert!(
            matches!(err, Error::Authentication { .. }),
            "{mechanism}: {err:?}"
        );
        assert!(!err.is_retriable());
        assert!(err.is_auth_failure());
        let msg = err.to_string();
        assert!(msg.contains(mechanism.name()), "{msg}");
        assert!(msg.contains("authentication failed"), "{msg}");
        assert!(!msg.contains(wrong), "{msg}");
        assert!(!format!("{err:?}").contains(wrong));
    }
}

#[tokio::test]
async fn unknown_user_is_an_authentication_error() {
    let Some(bootstrap) = support::bootstrap_secure("unknown_user") else {
        return;
    };
    let (host, port) = purekafka::config::parse_host_port(&bootstrap).unwrap();
    let mut cfg = ConnectionConfig::from_client(
        &sasl(
            &bootstrap,
            SecurityProtocol::SaslPlaintext,
            SaslMechanism::ScramSha256,
            ALICE_PASSWORD,
        )
        .build()
        .unwrap(),
    );
    cfg.security.sasl.username = "nobody".into();
    let err = Connection::connect(&BrokerAddr::bootstrap(host, port), &cfg)
        .await
        .expect_err("unknown user");
    assert!(matches!(err, Error::Authentication { .. }), "{err:?}");
}

/// A token provider written the way a user writes one: an `async fn` body
/// (through `#[purekafka::async_trait]`) that awaits before answering, as a
/// call to an identity provider would. Counts its calls, so the test shows
/// the client really asked it.
#[derive(Debug, Default)]
struct AsyncIssuer(std::sync::atomic::AtomicUsize);

#[purekafka::async_trait]
impl purekafka::TokenProvider for AsyncIssuer {
    async fn token(&self) -> Result<purekafka::config::OAuthToken, String> {
        tokio::time::sleep(Duration::from_millis(20)).await;
        self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Ok(purekafka::config::OAuthToken {
            value: purekafka::config::unsecured_jwt(ALICE, Duration::from_secs(3600)),
            extensions: Vec::new(),
        })
    }
}

#[tokio::test]
async fn user_written_async_token_provider_authenticates() {
    let Some(bootstrap) = support::bootstrap_secure("user_written_async_token_provider") else {
        return;
    };
    let issuer = Arc::new(AsyncIssuer::default());
    let client = base(&bootstrap)
        .security_protocol(SecurityProtocol::SaslPlaintext)
        .sasl_mechanism(SaslMechanism::OAuthBearer)
        .sasl_token_provider(issuer.clone());
    produce_and_read_back(client, "async-issuer").await;
    let calls = issuer.0.load(std::sync::atomic::Ordering::SeqCst);
    assert!(calls >= 1, "the provider was never asked for a token");
}

/// KIP-368: an OAUTHBEARER token living 4 s gives a 4 s session; the
/// connection stops before then, and the client carries on over a new one.
#[tokio::test]
async fn session_lifetime_closes_the_connection_before_expiry() {
    let Some(bootstrap) = support::bootstrap_secure("session_lifetime") else {
        return;
    };
    let client = base(&bootstrap)
        .security_protocol(SecurityProtocol::SaslPlaintext)
        .sasl_mechanism(SaslMechanism::OAuthBearer)
        .sasl_token_provider(Arc::new(UnsecuredJwt {
            subject: ALICE.into(),
            lifetime: Duration::from_secs(4),
        }));
    let config = client.clone().build().unwrap();
    let (host, port) = purekafka::config::parse_host_port(&bootstrap).unwrap();
    let conn = Connection::connect(
        &BrokerAddr::bootstrap(host, port),
        &ConnectionConfig::from_client(&config),
    )
    .await
    .expect("connect");
    assert!(!conn.is_closed());
    tokio::time::sleep(Duration::from_millis(4200)).await;
    assert!(
        conn.is_closed(),
        "connection still open after its session expired"
    );
    // The pool redials on its own: a producer keeps working across expiries.
    produce_and_read_back(client, "reauth").await;
}

/// A `tracing` writer that keeps everything for inspection.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let mut kept = self.0.lock().unwrap();
        // Bounded: other tests in this process log here too.
        if kept.len() < 32 << 20 {
            kept.extend_from_slice(buf);
        }
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[tokio::test]
async fn secrets_never_reach_debug_errors_or_logs() {
    let Some(bootstrap) = support::bootstrap_secure("secrets_never_leak") else {
        return;
    };
    // A process-wide subscriber, so events from every thread and every
    // concurrently running test land in the buffer (all must be secret-free).
    // If RUST_LOG already installed one, only absence can be checked.
    let captured = Captured::default();
    let writer = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        // DEBUG: setup and SASL events, without the per-frame TRACE flood
        // of the other tests sharing this process.
        .with_max_level(tracing::Level::DEBUG)
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .finish();
    let capturing = tracing::subscriber::set_global_default(subscriber).is_ok();

    let good = sasl(
        &bootstrap,
        SecurityProtocol::SaslPlaintext,
        SaslMechanism::ScramSha256,
        ALICE_PASSWORD,
    )
    .build()
    .unwrap();
    assert!(!format!("{good:?}").contains(ALICE_PASSWORD));
    assert!(!format!("{good:#?}").contains(ALICE_PASSWORD));
    Cluster::connect(good).await.expect("connect");

    let wrong = "wrong-pw-0xdeadbeef";
    for mechanism in [SaslMechanism::Plain, SaslMechanism::ScramSha512] {
        let bad = sasl(
            &bootstrap,
            SecurityProtocol::SaslPlaintext,
            mechanism,
            wrong,
        )
        .build()
        .unwrap();
        assert!(!format!("{bad:?}").contains(wrong));
        let err = Cluster::connect(bad).await.expect_err("wrong password");
        assert!(!err.to_string().contains(wrong));
        assert!(!format!("{err:?}").contains(wrong));
    }
    let logs = String::from_utf8_lossy(&captured.0.lock().unwrap()).into_owned();
    assert!(
        !capturing || logs.contains("authenticated"),
        "logs were not captured"
    );
    assert!(!logs.contains(ALICE_PASSWORD), "password in logs");
    assert!(!logs.contains(wrong), "password in logs");
}

#[cfg(feature = "tls")]
mod tls {
    use super::*;
    use purekafka::config::TlsConfig;

    fn trusted() -> TlsConfig {
        TlsConfig {
            ca_location: Some(support::secure_tls_dir().join("ca.pem")),
            ..TlsConfig::default()
        }
    }

    fn addr(bootstrap: &str) -> (String, u16) {
        purekafka::config::parse_host_port(bootstrap).unwrap()
    }

    async fn dial(
        host: &str,
        port: u16,
        protocol: SecurityProtocol,
        tls: TlsConfig,
    ) -> purekafka::Result<Connection> {
        let config = sasl(
            &format!("{host}:{port}"),
            protocol,
            SaslMechanism::ScramSha256,
            ALICE_PASSWORD,
        )
        .tls(tls)
        .build()
        .unwrap();
        Connection::connect(
            &BrokerAddr::bootstrap(host, port),
            &ConnectionConfig::from_client(&config),
        )
        .await
    }

    #[tokio::test]
    async fn sasl_ssl_every_mechanism_produces_and_reads_back() {
        let Some(bootstrap) = support::bootstrap_secure_tls("sasl_ssl_every_mechanism") else {
            return;
        };
        for mechanism in [
            SaslMechanism::Plain,
            SaslMechanism::ScramSha256,
            SaslMechanism::ScramSha512,
            SaslMechanism::OAuthBearer,
        ] {
            let client = sasl(
                &bootstrap,
                SecurityProtocol::SaslSsl,
                mechanism,
                ALICE_PASSWORD,
            )
            .tls(trusted());
            produce_and_read_back(
                client,
                &format!("tls-{}", mechanism.name().to_ascii_lowercase()),
            )
            .await;
        }
    }

    #[tokio::test]
    async fn wrong_host_name_is_refused_unless_the_check_is_off() {
        let Some(bootstrap) = support::bootstrap_secure_tls("wrong_host_name") else {
            return;
        };
        let (_, port) = addr(&bootstrap);
        // The certificate names 127.0.0.1 and broker.purekafka.test only.
        let err = dial("localhost", port, SecurityProtocol::SaslSsl, trusted())
            .await
            .expect_err("host name mismatch");
        assert!(matches!(err, Error::Tls { .. }), "{err:?}");
        assert!(!err.is_retriable());
        assert!(err.to_string().contains("not valid for name"), "{err}");
        let relaxed = TlsConfig {
            verify_hostname: false,
            ..trusted()
        };
        dial("localhost", port, SecurityProtocol::SaslSsl, relaxed)
            .await
            .expect("ssl.endpoint.identification.algorithm= skips the name check");
    }

    #[tokio::test]
    async fn unknown_ca_is_refused() {
        let Some(bootstrap) = support::bootstrap_secure_tls("unknown_ca") else {
            return;
        };
        let (host, port) = addr(&bootstrap);
        // Default trust = the Mozilla roots, which never signed the test CA.
        let err = dial(&host, port, SecurityProtocol::SaslSsl, TlsConfig::default())
            .await
            .expect_err("unknown CA");
        assert!(matches!(err, Error::Tls { .. }), "{err:?}");
        assert!(err.to_string().contains("UnknownIssuer"), "{err}");
    }

    #[tokio::test]
    async fn mutual_tls_works_and_is_required() {
        let Some(bootstrap) = support::bootstrap_secure_mtls("mutual_tls") else {
            return;
        };
        let dir = support::secure_tls_dir();
        let with_cert = TlsConfig {
            certificate_location: Some(dir.join("client.pem")),
            key_location: Some(dir.join("client.key")),
            ..trusted()
        };
        let client = base(&bootstrap)
            .security_protocol(SecurityProtocol::Ssl)
            .tls(with_cert);
        produce_and_read_back(client, "mtls").await;
        let (host, port) = addr(&bootstrap);
        let started = Instant::now();
        let err = dial(&host, port, SecurityProtocol::Ssl, trusted())
            .await
            .expect_err("the listener requires a client certificate");
        assert!(started.elapsed() < Duration::from_secs(5), "{err}");
    }

    #[tokio::test]
    async fn an_encrypted_key_in_a_java_style_pem_keystore_works_for_mutual_tls() {
        let Some(bootstrap) = support::bootstrap_secure_mtls("mutual_tls_encrypted_key") else {
            return;
        };
        let dir = support::secure_tls_dir();
        // A PEM keystore as the Java client reads it (KIP-651): the key,
        // encrypted (PKCS#8, PBES2), then the certificate chain, in one file.
        let scratch =
            std::env::temp_dir().join(format!("purekafka-keystore-{}", std::process::id()));
        std::fs::create_dir_all(&scratch).unwrap();
        let encrypted = scratch.join("client-key-encrypted.pem");
        let out = std::process::Command::new("openssl")
            .args([
                "pkcs8",
                "-topk8",
                "-v2",
                "aes-256-cbc",
                "-passout",
                "pass:keystore-pw",
            ])
            .arg("-in")
            .arg(dir.join("client.key"))
            .arg("-out")
            .arg(&encrypted)
            .output()
            .expect("openssl (the secure harness needs it too)");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let keystore = scratch.join("client-keystore.pem");
        let mut pem = std::fs::read_to_string(&encrypted).unwrap();
        pem.push_str(&std::fs::read_to_string(dir.join("client.pem")).unwrap());
        std::fs::write(&keystore, pem).unwrap();
        let props = |password: &str| {
            base(&bootstrap)
                .set("security.protocol", "SSL")
                .and_then(|b| b.set("ssl.truststore.type", "PEM"))
                .and_then(|b| {
                    b.set(
                        "ssl.truststore.location",
                        &dir.join("ca.pem").to_string_lossy(),
                    )
                })
                .and_then(|b| b.set("ssl.keystore.type", "PEM"))
                .and_then(|b| b.set("ssl.keystore.location", &keystore.to_string_lossy()))
                .and_then(|b| b.set("ssl.key.password", password))
                .expect("Java TLS properties")
        };
        produce_and_read_back(props("keystore-pw"), "mtls-encrypted-key").await;
        let err = Cluster::connect(props("wrong-pw").build().unwrap())
            .await
            .expect_err("a wrong key password");
        assert!(err.to_string().contains("ssl.key.password"), "{err}");
        assert!(!err.to_string().contains("wrong-pw"), "{err}");
        assert!(!err.is_retriable());
        let _ = std::fs::remove_dir_all(&scratch);
    }
}
