//! ACL enforcement on the fake cluster (SASL PLAIN users, an authorizer
//! with one super user) through purekafka's own clients: what a principal
//! may do follows Kafka's StandardAuthorizer (nothing without an ACL,
//! prefixed and literal bindings, deny wins, implied DESCRIBE, super
//! users), refused with TOPIC_, GROUP_ and CLUSTER_AUTHORIZATION_FAILED.

use std::time::{Duration, Instant};

use purekafka::admin::{
    AclBinding, AclFilter, AclOperation, AclPermission, AclResourceType, PatternType,
};
use purekafka::producer::{Producer, ProducerConfig, ProducerRecord};
use purekafka::{Admin, ClientConfig, Consumer, ConsumerConfig, Error, KafkaCode, TopicPartition};
use purekafka_testkit::fake::{Authorizer, FakeCluster};

fn props<'a>(bootstrap: &'a str, user: &'a str) -> Vec<(&'a str, &'a str)> {
    let password = if user == "admin" {
        "admin-secret"
    } else {
        "alice-secret"
    };
    vec![
        ("bootstrap.servers", bootstrap),
        ("security.protocol", "SASL_PLAINTEXT"),
        ("sasl.mechanism", "PLAIN"),
        ("sasl.username", user),
        ("sasl.password", password),
        ("request.timeout.ms", "5000"),
        ("default.api.timeout.ms", "5000"),
    ]
}

async fn fake() -> FakeCluster {
    let fake = FakeCluster::builder()
        .sasl_plain("admin", "admin-secret")
        .sasl_plain("alice", "alice-secret")
        .authorizer(Authorizer::new().super_user("User:admin"))
        .start()
        .await
        .expect("fake");
    fake.create_topic("orders", 1).expect("topic");
    fake.create_topic("audit", 1).expect("topic");
    fake
}

async fn admin(bootstrap: &str, user: &str) -> Admin {
    let config = ClientConfig::from_properties(props(bootstrap, user)).expect("config");
    Admin::connect(config).await.expect("admin")
}

fn binding(
    resource_type: AclResourceType,
    (name, pattern_type): (&str, PatternType),
    operation: AclOperation,
    permission: AclPermission,
) -> AclBinding {
    AclBinding {
        resource_type,
        resource_name: name.into(),
        pattern_type,
        principal: "User:alice".into(),
        host: "*".into(),
        operation,
        permission,
    }
}

async fn grant(admin: &Admin, acl: AclBinding) {
    for (acl, result) in admin.create_acls(&[acl]).await.expect("create_acls") {
        result.unwrap_or_else(|e| panic!("{acl:?}: {e}"));
    }
}

fn code(e: &Error) -> Option<KafkaCode> {
    e.kafka_code()
}

/// Sends one record to `topic` as `user` (idempotence as asked); the
/// delivery's outcome.
async fn produce(bootstrap: &str, user: &str, topic: &str, idempotent: bool) -> Result<(), Error> {
    let mut p = props(bootstrap, user);
    p.push(("delivery.timeout.ms", "6000"));
    p.push((
        "enable.idempotence",
        if idempotent { "true" } else { "false" },
    ));
    if !idempotent {
        p.push(("acks", "1"));
    }
    let producer = Producer::connect(ProducerConfig::from_properties(p).expect("config")).await?;
    let sent = producer
        .send(ProducerRecord::new(topic).value(format!("from {user}")))
        .await;
    let result = match sent {
        Ok(delivery) => delivery.await.map(|_| ()),
        Err(e) => Err(e),
    };
    let _ = producer.close(Duration::from_secs(2)).await;
    result
}

#[tokio::test]
async fn topic_and_cluster_acls_decide_as_the_standard_authorizer() {
    let fake = fake().await;
    let b = fake.bootstrap();
    let root = admin(&b, "admin").await;
    let alice = admin(&b, "alice").await;

    // Nothing is allowed without an ACL (allow.everyone.if.no.acl.found=false).
    let e = alice
        .describe_acls(&AclFilter::any())
        .await
        .expect_err("DescribeAcls needs DESCRIBE on the cluster");
    assert_eq!(
        code(&e),
        Some(KafkaCode::CLUSTER_AUTHORIZATION_FAILED),
        "{e}"
    );
    let topic_read = binding(
        AclResourceType::Topic,
        ("orders", PatternType::Literal),
        AclOperation::Read,
        AclPermission::Allow,
    );
    let created = alice.create_acls(&[topic_read]).await;
    let e = match created {
        Ok(mut v) => v
            .remove(0)
            .1
            .expect_err("CreateAcls needs ALTER on the cluster"),
        Err(e) => e,
    };
    assert_eq!(
        code(&e),
        Some(KafkaCode::CLUSTER_AUTHORIZATION_FAILED),
        "{e}"
    );
    let e = produce(&b, "alice", "orders", false)
        .await
        .expect_err("no WRITE");
    assert_eq!(code(&e), Some(KafkaCode::TOPIC_AUTHORIZATION_FAILED), "{e}");
    let e = produce(&b, "alice", "orders", true)
        .await
        .expect_err("an idempotent producer needs IDEMPOTENT_WRITE or WRITE on a topic");
    assert_eq!(
        code(&e),
        Some(KafkaCode::CLUSTER_AUTHORIZATION_FAILED),
        "{e}"
    );
    assert!(
        alice.list_topics(false).await.expect("list").is_empty(),
        "topics alice may not describe are left out"
    );

    // The super user needs no ACL.
    produce(&b, "admin", "audit", true)
        .await
        .expect("super user");
    assert_eq!(root.list_topics(false).await.expect("list").len(), 2);

    // A prefixed ALLOW on "ord": WRITE to orders (and, implied, DESCRIBE);
    // audit stays refused.
    grant(
        &root,
        binding(
            AclResourceType::Topic,
            ("ord", PatternType::Prefixed),
            AclOperation::Write,
            AclPermission::Allow,
        ),
    )
    .await;
    produce(&b, "alice", "orders", false)
        .await
        .expect("WRITE on ord*");
    produce(&b, "alice", "orders", true)
        .await
        .expect("WRITE on a topic lets an idempotent producer start");
    let e = produce(&b, "alice", "audit", false)
        .await
        .expect_err("audit");
    assert_eq!(code(&e), Some(KafkaCode::TOPIC_AUTHORIZATION_FAILED), "{e}");
    let names: Vec<String> = alice
        .list_topics(false)
        .await
        .expect("list")
        .into_iter()
        .map(|t| t.name)
        .collect();
    assert_eq!(names, ["orders"]);

    // Deny wins over the prefixed allow.
    grant(
        &root,
        binding(
            AclResourceType::Topic,
            ("orders", PatternType::Literal),
            AclOperation::Write,
            AclPermission::Deny,
        ),
    )
    .await;
    let e = produce(&b, "alice", "orders", false)
        .await
        .expect_err("denied");
    assert_eq!(code(&e), Some(KafkaCode::TOPIC_AUTHORIZATION_FAILED), "{e}");
    assert_eq!(
        fake.high_watermark("orders", 0),
        Some(2),
        "nothing appended"
    );
}

#[tokio::test]
async fn a_group_needs_read_on_the_group() {
    let fake = fake().await;
    let b = fake.bootstrap();
    let root = admin(&b, "admin").await;
    produce(&b, "admin", "orders", true)
        .await
        .expect("super user");
    grant(
        &root,
        binding(
            AclResourceType::Topic,
            ("orders", PatternType::Literal),
            AclOperation::Read,
            AclPermission::Allow,
        ),
    )
    .await;
    let consumer = |group: &'static str| {
        let mut c = props(&b, "alice");
        c.extend([("group.id", group), ("auto.offset.reset", "earliest")]);
        ConsumerConfig::from_properties(c).expect("config")
    };
    // DESCRIBE (FindCoordinator) but not READ (JoinGroup) on the group.
    grant(
        &root,
        binding(
            AclResourceType::Group,
            ("g-refused", PatternType::Literal),
            AclOperation::Describe,
            AclPermission::Allow,
        ),
    )
    .await;
    let refused = Consumer::connect(consumer("g-refused"))
        .await
        .expect("consumer");
    refused.subscribe(["orders"]).expect("subscribe");
    let deadline = Instant::now() + Duration::from_secs(10);
    let e = loop {
        assert!(Instant::now() < deadline, "no group error within 10 s");
        match refused.poll(Duration::from_millis(200)).await {
            Ok(records) => assert!(records.is_empty(), "{records:?}"),
            Err(e) => break e,
        }
    };
    assert_eq!(code(&e), Some(KafkaCode::GROUP_AUTHORIZATION_FAILED), "{e}");

    grant(
        &root,
        binding(
            AclResourceType::Group,
            ("g-", PatternType::Prefixed),
            AclOperation::Read,
            AclPermission::Allow,
        ),
    )
    .await;
    let allowed = Consumer::connect(consumer("g-allowed"))
        .await
        .expect("consumer");
    allowed.subscribe(["orders"]).expect("subscribe");
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut got = Vec::new();
    while got.is_empty() {
        assert!(Instant::now() < deadline, "nothing consumed within 10 s");
        got = allowed
            .poll(Duration::from_millis(200))
            .await
            .expect("poll");
    }
    assert_eq!(got[0].value.as_deref(), Some(&b"from admin"[..]));
    allowed
        .commit_sync()
        .await
        .expect("commit with READ on group and topic");
    assert_eq!(fake.committed_offset("g-allowed", "orders", 0), Some(1));
}

/// With no ACL at all on the group, FindCoordinator answers
/// GROUP_AUTHORIZATION_FAILED: `poll` must fail promptly with that error
/// (Java throws GroupAuthorizationException from `poll`), naming the group
/// and FindCoordinator, not retriable, for both group protocols.
#[tokio::test]
async fn no_acl_on_the_group_fails_poll_at_find_coordinator() {
    let fake = fake().await;
    let b = fake.bootstrap();
    let root = admin(&b, "admin").await;
    grant(
        &root,
        binding(
            AclResourceType::Topic,
            ("orders", PatternType::Literal),
            AclOperation::Read,
            AclPermission::Allow,
        ),
    )
    .await;
    for protocol in ["classic", "consumer"] {
        let group = format!("g-no-acl-{protocol}");
        let mut c = props(&b, "alice");
        c.extend([
            ("group.id", group.as_str()),
            ("group.protocol", protocol),
            ("auto.offset.reset", "earliest"),
        ]);
        let consumer = Consumer::connect(ConsumerConfig::from_properties(c).expect("config"))
            .await
            .expect("consumer");
        consumer.subscribe(["orders"]).expect("subscribe");
        let started = Instant::now();
        let e = loop {
            assert!(
                started.elapsed() < Duration::from_secs(4),
                "{protocol}: no group error within 4 s"
            );
            match consumer.poll(Duration::from_millis(200)).await {
                Ok(records) => assert!(records.is_empty(), "{protocol}: {records:?}"),
                Err(e) => break e,
            }
        };
        assert!(
            matches!(
                &e,
                Error::Kafka {
                    code: KafkaCode::GROUP_AUTHORIZATION_FAILED,
                    ..
                }
            ),
            "{protocol}: {e:?}"
        );
        assert_eq!(code(&e).map(KafkaCode::code), Some(30), "{protocol}: {e}");
        assert!(!e.is_retriable(), "{protocol}: {e}");
        assert!(e.is_authorization_failure(), "{protocol}: {e}");
        let text = e.to_string();
        assert!(text.contains(&group), "{protocol}: names the group: {text}");
        assert!(
            text.contains("FindCoordinator"),
            "{protocol}: names the API: {text}"
        );
        // Fatal for the group: the next poll fails the same way at once.
        let again = tokio::time::timeout(
            Duration::from_secs(2),
            consumer.poll(Duration::from_millis(200)),
        )
        .await
        .expect("second poll is bounded");
        let e2 = again.expect_err("the group stays failed");
        assert_eq!(
            code(&e2),
            Some(KafkaCode::GROUP_AUTHORIZATION_FAILED),
            "{protocol}: {e2}"
        );
        // The committed-offset read meets the same refusal, at once.
        let read = tokio::time::timeout(
            Duration::from_secs(2),
            consumer.committed(&[TopicPartition::new("orders", 0)]),
        )
        .await
        .expect("committed() is bounded");
        let e3 = read.expect_err("no DESCRIBE on the group");
        assert_eq!(
            code(&e3),
            Some(KafkaCode::GROUP_AUTHORIZATION_FAILED),
            "{protocol}: {e3}"
        );
        assert!(
            !e3.is_retriable() && e3.to_string().contains("FindCoordinator"),
            "{protocol}: {e3}"
        );
    }
}
