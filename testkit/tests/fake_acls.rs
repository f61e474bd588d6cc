//! ACL enforcement on the fake cluster (SASL PLAIN users, an authorizer
//! with one super user) through purekafka's own clients: what a principal
//! may do follows Kafka's StandardAuthorizer (nothing without an ACL,
//! prefixed and literal bindings, deny wins, implied DESCRIBE, super
//! users), refused with TOPIC_, GROUP_, CLUSTER_ and
//! TRANSACTIONAL_ID_AUTHORIZATION_FAILED, on the data, group, transaction,
//! config and admin APIs.

use std::time::{Duration, Instant};

use purekafka::admin::{
    AclBinding, AclFilter, AclOperation, AclPermission, AclResourceType, AlterConfigOp,
    ConfigResource, PatternType,
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

/// One test's cluster: SASL users `admin` (the super user) and `alice`,
/// topics `orders` and `audit`, and the super user's admin client, which
/// grants alice what each test needs.
struct Acls {
    fake: FakeCluster,
    bootstrap: String,
    root: Admin,
}

impl Acls {
    async fn new() -> Acls {
        let fake = FakeCluster::builder()
            .sasl_plain("admin", "admin-secret")
            .sasl_plain("alice", "alice-secret")
            .authorizer(Authorizer::new().super_user("User:admin"))
            .start()
            .await
            .expect("fake");
        fake.create_topic("orders", 1).expect("topic");
        fake.create_topic("audit", 1).expect("topic");
        let bootstrap = fake.bootstrap();
        let root = admin(&bootstrap, "admin").await;
        Acls {
            fake,
            bootstrap,
            root,
        }
    }

    /// Adds a binding for alice; it must be accepted.
    async fn grant(
        &self,
        resource_type: AclResourceType,
        name: (&str, PatternType),
        operation: AclOperation,
        permission: AclPermission,
    ) {
        let acl = binding(resource_type, name, operation, permission);
        for (acl, result) in self.root.create_acls(&[acl]).await.expect("create_acls") {
            result.unwrap_or_else(|e| panic!("{acl:?}: {e}"));
        }
    }

    /// Lets alice do `operation` on the resource.
    async fn allow(
        &self,
        resource_type: AclResourceType,
        name: (&str, PatternType),
        operation: AclOperation,
    ) {
        self.grant(resource_type, name, operation, AclPermission::Allow)
            .await;
    }
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

/// The Kafka code of `e`, or of what a transaction error wraps.
fn code(e: &Error) -> Option<KafkaCode> {
    match e {
        Error::Transaction { cause, .. } => code(cause),
        e => e.kafka_code(),
    }
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
    let f = Acls::new().await;
    let b = f.bootstrap.clone();
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
    assert_eq!(f.root.list_topics(false).await.expect("list").len(), 2);

    // A prefixed ALLOW on "ord": WRITE to orders (and, implied, DESCRIBE);
    // audit stays refused.
    f.allow(
        AclResourceType::Topic,
        ("ord", PatternType::Prefixed),
        AclOperation::Write,
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
    f.grant(
        AclResourceType::Topic,
        ("orders", PatternType::Literal),
        AclOperation::Write,
        AclPermission::Deny,
    )
    .await;
    let e = produce(&b, "alice", "orders", false)
        .await
        .expect_err("denied");
    assert_eq!(code(&e), Some(KafkaCode::TOPIC_AUTHORIZATION_FAILED), "{e}");
    assert_eq!(
        f.fake.high_watermark("orders", 0),
        Some(2),
        "nothing appended"
    );
}

#[tokio::test]
async fn a_group_needs_read_on_the_group() {
    let f = Acls::new().await;
    let b = f.bootstrap.clone();
    produce(&b, "admin", "orders", true)
        .await
        .expect("super user");
    f.allow(
        AclResourceType::Topic,
        ("orders", PatternType::Literal),
        AclOperation::Read,
    )
    .await;
    let consumer = |group: &'static str| {
        let mut c = props(&b, "alice");
        c.extend([("group.id", group), ("auto.offset.reset", "earliest")]);
        ConsumerConfig::from_properties(c).expect("config")
    };
    // DESCRIBE (FindCoordinator) but not READ (JoinGroup) on the group.
    f.allow(
        AclResourceType::Group,
        ("g-refused", PatternType::Literal),
        AclOperation::Describe,
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

    f.allow(
        AclResourceType::Group,
        ("g-", PatternType::Prefixed),
        AclOperation::Read,
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
    assert_eq!(f.fake.committed_offset("g-allowed", "orders", 0), Some(1));
}

/// With no ACL at all on the group, FindCoordinator answers
/// GROUP_AUTHORIZATION_FAILED: `poll` must fail promptly with that error
/// (Java throws GroupAuthorizationException from `poll`), naming the group
/// and FindCoordinator, not retriable, for both group protocols.
#[tokio::test]
async fn no_acl_on_the_group_fails_poll_at_find_coordinator() {
    let f = Acls::new().await;
    let b = f.bootstrap.clone();
    f.allow(
        AclResourceType::Topic,
        ("orders", PatternType::Literal),
        AclOperation::Read,
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

/// The config and admin APIs ask for their own operations, resource by
/// resource: DESCRIBE_CONFIGS / ALTER_CONFIGS (a broker's on the cluster),
/// ALTER for CreatePartitions, DELETE for DeleteRecords, DeleteGroups and
/// OffsetDelete. A refused resource changes nothing; an allowed one in the
/// same request is served.
#[tokio::test]
async fn config_and_admin_apis_check_their_operation_per_resource() {
    let f = Acls::new().await;
    let alice = admin(&f.bootstrap, "alice").await;
    let (orders, audit) = (
        ConfigResource::Topic("orders".into()),
        ConfigResource::Topic("audit".into()),
    );
    f.allow(
        AclResourceType::Topic,
        ("orders", PatternType::Literal),
        AclOperation::DescribeConfigs,
    )
    .await;
    let described = alice
        .describe_configs(
            &[orders.clone(), audit.clone(), ConfigResource::Broker(0)],
            &[],
        )
        .await
        .expect("describe_configs");
    assert!(described[&orders].is_ok(), "{described:?}");
    let refused = |r: &ConfigResource| described[r].as_ref().err().and_then(code);
    assert_eq!(refused(&audit), Some(KafkaCode::TOPIC_AUTHORIZATION_FAILED));
    assert_eq!(
        refused(&ConfigResource::Broker(0)),
        Some(KafkaCode::CLUSTER_AUTHORIZATION_FAILED)
    );

    let retention = || vec![AlterConfigOp::Set("retention.ms".into(), "60000".into())];
    let altered = alice
        .incremental_alter_configs(&[(orders.clone(), retention())], false)
        .await
        .expect("incremental_alter_configs");
    let e = altered[&orders]
        .as_ref()
        .expect_err("DESCRIBE_CONFIGS only");
    assert_eq!(code(e), Some(KafkaCode::TOPIC_AUTHORIZATION_FAILED), "{e}");
    f.allow(
        AclResourceType::Topic,
        ("orders", PatternType::Literal),
        AclOperation::AlterConfigs,
    )
    .await;
    let altered = alice
        .incremental_alter_configs(
            &[(orders.clone(), retention()), (audit.clone(), retention())],
            false,
        )
        .await
        .expect("incremental_alter_configs");
    assert!(altered[&orders].is_ok(), "{altered:?}");
    let e = altered[&audit]
        .as_ref()
        .expect_err("no ALTER_CONFIGS on audit");
    assert_eq!(code(e), Some(KafkaCode::TOPIC_AUTHORIZATION_FAILED), "{e}");

    // DeleteRecords: DELETE on the topic.
    for _ in 0..3 {
        produce(&f.bootstrap, "admin", "orders", true)
            .await
            .expect("super user");
    }
    let first = TopicPartition::new("orders", 0);
    let log_start = || {
        f.fake
            .with_state(|s| s.partition("orders", 0).map(|p| p.log_start()))
    };
    let deleted = alice
        .delete_records(&[(first.clone(), 2)])
        .await
        .expect("delete_records");
    let e = deleted[&first].as_ref().expect_err("no DELETE");
    assert_eq!(code(e), Some(KafkaCode::TOPIC_AUTHORIZATION_FAILED), "{e}");
    assert_eq!(log_start(), Some(0), "nothing deleted");
    f.allow(
        AclResourceType::Topic,
        ("orders", PatternType::Literal),
        AclOperation::Delete,
    )
    .await;
    let deleted = alice
        .delete_records(&[(first.clone(), 2)])
        .await
        .expect("delete_records");
    assert_eq!(deleted[&first].as_ref().ok(), Some(&2), "{deleted:?}");
    assert_eq!(log_start(), Some(2));

    // CreatePartitions: ALTER on the topic.
    let grown = alice
        .create_partitions(&[("orders".into(), 2), ("audit".into(), 2)], false)
        .await
        .expect("create_partitions");
    for t in ["orders", "audit"] {
        let e = grown[t].as_ref().expect_err("no ALTER");
        assert_eq!(
            code(e),
            Some(KafkaCode::TOPIC_AUTHORIZATION_FAILED),
            "{t}: {e}"
        );
    }
    f.allow(
        AclResourceType::Topic,
        ("orders", PatternType::Literal),
        AclOperation::Alter,
    )
    .await;
    let grown = alice
        .create_partitions(&[("orders".into(), 2), ("audit".into(), 2)], false)
        .await
        .expect("create_partitions");
    assert!(grown["orders"].is_ok(), "{grown:?}");
    assert!(grown["audit"].is_err(), "{grown:?}");
    let partitions = |t: &str| f.fake.with_state(|s| s.partition(t, 1).is_some());
    assert!(partitions("orders") && !partitions("audit"));

    // A group's offsets and the group: DELETE on the group (its
    // coordinator is found with DESCRIBE, implied by READ).
    f.allow(
        AclResourceType::Group,
        ("g-", PatternType::Prefixed),
        AclOperation::Read,
    )
    .await;
    f.allow(
        AclResourceType::Topic,
        ("orders", PatternType::Literal),
        AclOperation::Read,
    )
    .await;
    let committed = alice
        .alter_group_offsets("g-done", &[(first.clone(), 3)])
        .await
        .expect("OffsetCommit with READ on the group and the topic");
    assert!(committed[&first].is_ok(), "{committed:?}");
    assert_eq!(f.fake.committed_offset("g-done", "orders", 0), Some(3));
    let e = alice
        .delete_group_offsets("g-done", std::slice::from_ref(&first))
        .await
        .expect_err("OffsetDelete needs DELETE on the group");
    assert_eq!(code(&e), Some(KafkaCode::GROUP_AUTHORIZATION_FAILED), "{e}");
    let gone = alice
        .delete_groups(&["g-done".to_string()])
        .await
        .expect("delete_groups");
    let e = gone["g-done"].as_ref().expect_err("no DELETE on the group");
    assert_eq!(code(e), Some(KafkaCode::GROUP_AUTHORIZATION_FAILED), "{e}");
    assert_eq!(
        f.fake.committed_offset("g-done", "orders", 0),
        Some(3),
        "kept"
    );
    f.allow(
        AclResourceType::Group,
        ("g-done", PatternType::Literal),
        AclOperation::Delete,
    )
    .await;
    let removed = alice
        .delete_group_offsets("g-done", std::slice::from_ref(&first))
        .await
        .expect("OffsetDelete with DELETE on the group and READ on the topic");
    assert!(removed[&first].is_ok(), "{removed:?}");
    assert_eq!(f.fake.committed_offset("g-done", "orders", 0), None);
}

/// The transaction APIs need WRITE on the transactional id (InitProducerId,
/// AddPartitionsToTxn, AddOffsetsToTxn, EndTxn), READ on the group whose
/// offsets it commits and on their topics; a refused transaction leaves
/// nothing committed.
#[tokio::test]
async fn transactions_need_their_id_their_topics_and_their_group() {
    let f = Acls::new().await;
    f.allow(
        AclResourceType::Topic,
        ("orders", PatternType::Literal),
        AclOperation::Write,
    )
    .await;
    let producer = |id: &'static str| {
        let mut p = props(&f.bootstrap, "alice");
        p.extend([("transactional.id", id), ("delivery.timeout.ms", "6000")]);
        Producer::connect(ProducerConfig::from_properties(p).expect("config"))
    };
    let refused = producer("tx-refused").await.expect("producer");
    let e = refused
        .init_transactions()
        .await
        .expect_err("no WRITE on the transactional id");
    assert_eq!(
        code(&e),
        Some(KafkaCode::TRANSACTIONAL_ID_AUTHORIZATION_FAILED),
        "{e}"
    );

    f.allow(
        AclResourceType::TransactionalId,
        ("tx-ok", PatternType::Literal),
        AclOperation::Write,
    )
    .await;
    let p = producer("tx-ok").await.expect("producer");
    p.init_transactions().await.expect("WRITE on tx-ok");
    p.begin_transaction().expect("begin");
    let delivery = p
        .send(ProducerRecord::new("orders").value("in a transaction"))
        .await
        .expect("send");
    let group = purekafka::ConsumerGroupMetadata {
        group_id: "g-tx".into(),
        generation_id: -1,
        member_id: String::new(),
        group_instance_id: None,
    };
    let offsets = [(
        TopicPartition::new("orders", 0),
        purekafka::OffsetAndMetadata::new(1),
    )]
    .into_iter()
    .collect();
    let e = p
        .send_offsets_to_transaction(&offsets, &group)
        .await
        .expect_err("AddOffsetsToTxn needs READ on the group");
    assert_eq!(code(&e), Some(KafkaCode::GROUP_AUTHORIZATION_FAILED), "{e}");
    p.abort_transaction().await.expect("abort");
    let _ = delivery.await;

    f.allow(
        AclResourceType::Group,
        ("g-tx", PatternType::Literal),
        AclOperation::Read,
    )
    .await;
    p.begin_transaction().expect("begin");
    p.send(ProducerRecord::new("orders").value("committed"))
        .await
        .expect("send")
        .await
        .expect("delivered");
    // TxnOffsetCommit also needs READ on each committed topic.
    let e = p
        .send_offsets_to_transaction(&offsets, &group)
        .await
        .expect_err("no READ on orders");
    assert_eq!(code(&e), Some(KafkaCode::TOPIC_AUTHORIZATION_FAILED), "{e}");
    p.abort_transaction().await.expect("abort");
    f.allow(
        AclResourceType::Topic,
        ("orders", PatternType::Literal),
        AclOperation::Read,
    )
    .await;
    p.begin_transaction().expect("begin");
    p.send(ProducerRecord::new("orders").value("committed"))
        .await
        .expect("send")
        .await
        .expect("delivered");
    p.send_offsets_to_transaction(&offsets, &group)
        .await
        .expect("offsets with READ on the group and the topic");
    // The id is denied before the commit: EndTxn is refused.
    f.grant(
        AclResourceType::TransactionalId,
        ("tx-ok", PatternType::Literal),
        AclOperation::Write,
        AclPermission::Deny,
    )
    .await;
    let e = p.commit_transaction().await.expect_err("EndTxn refused");
    assert_eq!(
        code(&e),
        Some(KafkaCode::TRANSACTIONAL_ID_AUTHORIZATION_FAILED),
        "{e}"
    );
    assert_eq!(f.fake.committed_offset("g-tx", "orders", 0), None);
}
