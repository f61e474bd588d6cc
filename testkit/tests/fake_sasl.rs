//! SASL on the fake cluster (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512) with
//! purekafka's client: the right credentials produce and consume, wrong
//! ones fail fast with a non-retriable authentication error, and a client
//! that skips SASL gets nothing.

use std::time::{Duration, Instant};

use purekafka::producer::{Producer, ProducerConfig, ProducerRecord};
use purekafka::{Consumer, ConsumerConfig, TopicPartition};
use purekafka_testkit::fake::{FakeCluster, SaslMechanism};

fn props<'a>(
    bootstrap: &'a str,
    mechanism: &'a str,
    user: &'a str,
    password: &'a str,
) -> Vec<(&'a str, &'a str)> {
    vec![
        ("bootstrap.servers", bootstrap),
        ("security.protocol", "SASL_PLAINTEXT"),
        ("sasl.mechanism", mechanism),
        ("sasl.username", user),
        ("sasl.password", password),
        ("request.timeout.ms", "5000"),
        ("default.api.timeout.ms", "10000"),
    ]
}

async fn fake() -> FakeCluster {
    let fake = FakeCluster::builder()
        .sasl_plain("alice", "alice-secret")
        .sasl_user(SaslMechanism::ScramSha256, "bob", "bob-secret")
        .sasl_user(SaslMechanism::ScramSha512, "carol", "carol-secret")
        .start()
        .await
        .expect("fake");
    fake.create_topic("t", 1).expect("topic");
    fake
}

/// Produces one record as `user` and reads it back as the same user.
async fn round_trip(bootstrap: &str, mechanism: &str, user: &str, password: &str) {
    let mut p = props(bootstrap, mechanism, user, password);
    p.push(("delivery.timeout.ms", "10000"));
    let producer = Producer::connect(ProducerConfig::from_properties(p).expect("config"))
        .await
        .unwrap_or_else(|e| panic!("{mechanism} producer: {e}"));
    let value = format!("from {user} over {mechanism}");
    producer
        .send(ProducerRecord::new("t").value(value.clone()))
        .await
        .expect("enqueue")
        .await
        .unwrap_or_else(|e| panic!("{mechanism} delivery: {e}"));
    producer.close(Duration::from_secs(5)).await.expect("close");

    let mut c = props(bootstrap, mechanism, user, password);
    c.push(("auto.offset.reset", "earliest"));
    let consumer = Consumer::connect(ConsumerConfig::from_properties(c).expect("config"))
        .await
        .expect("consumer");
    consumer.assign(vec![TopicPartition::new("t", 0)]);
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut seen = Vec::new();
    while !seen.contains(&value) && Instant::now() < deadline {
        for r in consumer
            .poll(Duration::from_millis(200))
            .await
            .expect("poll")
        {
            seen.push(String::from_utf8(r.value.expect("value").to_vec()).expect("utf8"));
        }
    }
    assert!(seen.contains(&value), "{mechanism}: {seen:?}");
}

#[tokio::test]
async fn every_mechanism_authenticates_its_own_users() {
    let fake = fake().await;
    let b = fake.bootstrap();
    round_trip(&b, "PLAIN", "alice", "alice-secret").await;
    round_trip(&b, "SCRAM-SHA-256", "bob", "bob-secret").await;
    round_trip(&b, "SCRAM-SHA-512", "carol", "carol-secret").await;
    assert_eq!(fake.records("t", 0).expect("records").len(), 3);
}

#[tokio::test]
async fn wrong_credentials_fail_fast_and_are_not_retriable() {
    let fake = fake().await;
    let b = fake.bootstrap();
    for (mechanism, user, password) in [
        ("PLAIN", "alice", "wrong"),
        ("SCRAM-SHA-256", "bob", "wrong"),
        // Credentials are per mechanism: bob has no SCRAM-SHA-512 one.
        ("SCRAM-SHA-512", "bob", "bob-secret"),
        ("SCRAM-SHA-256", "nobody", "x"),
    ] {
        let started = Instant::now();
        let config =
            ProducerConfig::from_properties(props(&b, mechanism, user, password)).expect("config");
        let err = match Producer::connect(config).await {
            Ok(producer) => producer
                .send(ProducerRecord::new("t").value("never"))
                .await
                .expect("enqueue")
                .await
                .expect_err("delivery must fail"),
            Err(e) => e,
        };
        let text = err.to_string();
        assert!(
            matches!(err, purekafka::Error::Authentication { .. }),
            "{mechanism} {user}: {text}"
        );
        assert!(!err.is_retriable(), "{text}");
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{mechanism}: took {:?}",
            started.elapsed()
        );
    }
    assert!(fake.records("t", 0).expect("records").is_empty());
}

#[tokio::test]
async fn a_client_without_sasl_is_not_served() {
    let fake = fake().await;
    let b = fake.bootstrap();
    let config = ProducerConfig::from_properties([
        ("bootstrap.servers", b.as_str()),
        ("request.timeout.ms", "2000"),
        ("default.api.timeout.ms", "3000"),
        ("delivery.timeout.ms", "3000"),
    ])
    .expect("config");
    let outcome = match Producer::connect(config).await {
        Ok(producer) => producer
            .send(ProducerRecord::new("t").value("plaintext"))
            .await
            .expect("enqueue")
            .await
            .map(|_| ()),
        Err(e) => Err(e),
    };
    assert!(outcome.is_err(), "a plaintext client was served");
    assert!(fake.records("t", 0).expect("records").is_empty());
}
