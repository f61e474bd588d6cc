//! The group and producer admin APIs on the fake cluster, through
//! purekafka's admin client: OffsetDelete (KIP-496), DeleteGroups and
//! DescribeProducers (KIP-664), and ACLs (KIP-140), with the broker's error
//! codes.

use std::time::{Duration, Instant};

use purekafka::admin::{
    AclBinding, AclFilter, AclOperation, AclPermission, AclResourceType, PatternType,
};
use purekafka::producer::{Producer, ProducerConfig, ProducerRecord};
use purekafka::{Admin, ClientConfig, Consumer, ConsumerConfig, KafkaCode, TopicPartition};
use purekafka_testkit::fake::{Committed, FakeCluster};

fn client(bootstrap: &str) -> purekafka::ClientConfigBuilder {
    ClientConfig::builder()
        .bootstrap_servers(bootstrap)
        .request_timeout(Duration::from_secs(5))
        .default_api_timeout(Duration::from_secs(10))
}

fn code(e: &purekafka::Error) -> Option<i16> {
    e.kafka_code().map(KafkaCode::code)
}

#[tokio::test]
async fn offsets_and_empty_groups_are_deleted_live_ones_are_refused() {
    let fake = FakeCluster::start(3).await.expect("fake");
    fake.create_topic("t", 2).expect("topic");
    fake.create_topic("other", 1).expect("topic");
    let b = fake.bootstrap();
    let admin = Admin::connect(client(&b).build().expect("config"))
        .await
        .expect("admin");
    let tps: Vec<TopicPartition> = (0..2).map(|p| TopicPartition::new("t", p)).collect();

    // An offsets-only group: both operations succeed.
    let committed = admin
        .alter_group_offsets("g", &[(tps[0].clone(), 3), (tps[1].clone(), 4)])
        .await
        .expect("commit");
    assert!(committed.values().all(|r| r.is_ok()), "{committed:?}");
    let deleted = admin
        .delete_group_offsets("g", &tps[..1])
        .await
        .expect("offset delete");
    assert!(deleted[&tps[0]].is_ok(), "{deleted:?}");
    assert_eq!(fake.committed_offset("g", "t", 0), None);
    assert_eq!(fake.committed_offset("g", "t", 1), Some(4));
    let listed = admin.list_group_offsets("g", None).await.expect("list");
    assert!(!listed.contains_key(&tps[0]), "{listed:?}");
    assert_eq!(listed[&tps[1]].as_ref().expect("offset").offset, 4);

    // A group that does not exist.
    let missing = admin
        .delete_group_offsets("nope", &tps[..1])
        .await
        .map(|m| m.into_values().collect::<Vec<_>>());
    let missing_code = match &missing {
        Ok(results) => results.iter().find_map(|r| r.as_ref().err().and_then(code)),
        Err(e) => code(e),
    };
    assert_eq!(missing_code, Some(69), "GROUP_ID_NOT_FOUND: {missing:?}");

    // A live member subscribed to `t`: its offsets and its group stay.
    let consumer = Consumer::connect(
        ConsumerConfig::from_properties([
            ("bootstrap.servers", b.as_str()),
            ("group.id", "live"),
            ("request.timeout.ms", "5000"),
            ("fetch.max.wait.ms", "100"),
            ("session.timeout.ms", "6000"),
            ("heartbeat.interval.ms", "200"),
        ])
        .expect("config"),
    )
    .await
    .expect("consumer");
    consumer.subscribe(["t"]).expect("subscribe");
    let deadline = Instant::now() + Duration::from_secs(15);
    while consumer.assignment().is_empty() && Instant::now() < deadline {
        consumer
            .poll(Duration::from_millis(100))
            .await
            .expect("poll");
    }
    assert!(!consumer.assignment().is_empty(), "the member joined");
    // An offset of a topic the group does not subscribe to (left from an
    // earlier subscription), written straight into the state.
    fake.with_state(|s| {
        let committed = Committed {
            offset: 7,
            leader_epoch: -1,
            metadata: None,
        };
        s.groups.commit("live", "other", 0, committed);
    });
    assert_eq!(fake.committed_offset("live", "other", 0), Some(7));
    let other = TopicPartition::new("other", 0);
    let refused = admin
        .delete_group_offsets("live", &[tps[0].clone(), other.clone()])
        .await
        .expect("offset delete");
    assert_eq!(
        refused[&tps[0]].as_ref().err().and_then(code),
        Some(86),
        "GROUP_SUBSCRIBED_TO_TOPIC: {refused:?}"
    );
    assert!(
        refused[&other].is_ok(),
        "an unsubscribed topic's offset goes: {refused:?}"
    );
    assert_eq!(fake.committed_offset("live", "other", 0), None);

    let groups = admin
        .delete_groups(&["live".to_string(), "g".to_string(), "nope".to_string()])
        .await
        .expect("delete groups");
    assert_eq!(
        groups["live"].as_ref().err().and_then(code),
        Some(68),
        "{groups:?}"
    );
    assert!(groups["g"].is_ok(), "{groups:?}");
    assert_eq!(
        groups["nope"].as_ref().err().and_then(code),
        Some(69),
        "{groups:?}"
    );
    assert!(fake.group_phase("g").is_none(), "g is gone");
    assert_eq!(fake.committed_offset("g", "t", 1), None);
    assert!(fake.group_phase("live").is_some(), "live stays");
    consumer.close().await.expect("close");
}

#[tokio::test]
async fn describe_producers_lists_idempotent_producers_per_partition() {
    let fake = FakeCluster::start(3).await.expect("fake");
    fake.create_topic("p", 1).expect("topic");
    let b = fake.bootstrap();
    let producer = Producer::connect(
        ProducerConfig::builder()
            .client(client(&b))
            .build()
            .expect("config"),
    )
    .await
    .expect("producer");
    for i in 0..5 {
        producer
            .send(
                ProducerRecord::new("p")
                    .partition(0)
                    .timestamp(1_000 + i)
                    .value(format!("v{i}")),
            )
            .await
            .expect("enqueue")
            .await
            .expect("delivered");
    }
    let admin = Admin::connect(client(&b).build().expect("config"))
        .await
        .expect("admin");
    let tp = TopicPartition::new("p", 0);
    let missing = TopicPartition::new("p", 9);
    let described = admin
        .describe_producers(&[tp.clone(), missing.clone()])
        .await
        .expect("describe producers");
    let states = described[&tp].as_ref().expect("partition 0");
    assert_eq!(states.len(), 1, "{states:?}");
    let s = &states[0];
    let stored_pid =
        fake.with_state(|st| st.partition("p", 0).expect("log").batches()[0].producer_id);
    assert_eq!(s.producer_id, stored_pid);
    assert_eq!(s.last_sequence, 4, "five records, sequences 0..=4");
    assert_eq!(s.last_timestamp, 1_004);
    assert_eq!(s.current_txn_start_offset, None);
    assert!(described[&missing].is_err(), "{described:?}");
}

fn binding(name: &str, pattern: PatternType, op: AclOperation) -> AclBinding {
    AclBinding {
        resource_type: AclResourceType::Topic,
        resource_name: name.into(),
        pattern_type: pattern,
        principal: "User:alice".into(),
        host: "*".into(),
        operation: op,
        permission: AclPermission::Allow,
    }
}

#[tokio::test]
async fn acls_are_stored_matched_and_deleted() {
    let fake = FakeCluster::start(1).await.expect("fake");
    let admin = Admin::connect(client(&fake.bootstrap()).build().expect("config"))
        .await
        .expect("admin");
    let literal = binding("orders", PatternType::Literal, AclOperation::Read);
    let prefixed = binding("ord", PatternType::Prefixed, AclOperation::Write);
    let other = binding("payments", PatternType::Literal, AclOperation::Read);
    let mut bad = binding("orders", PatternType::Literal, AclOperation::Read);
    bad.principal = "alice".into();
    let created = admin
        .create_acls(&[literal.clone(), prefixed.clone(), other.clone(), bad])
        .await
        .expect("create");
    assert!(created[..3].iter().all(|(_, r)| r.is_ok()), "{created:?}");
    assert_eq!(
        created[3].1.as_ref().err().and_then(code),
        Some(42),
        "a principal without a type is INVALID_REQUEST: {created:?}"
    );

    // MATCH: what applies to the topic `orders`.
    let applies = AclFilter {
        resource_name: Some("orders".into()),
        pattern_type: Some(PatternType::Match),
        ..AclFilter::any()
    };
    let mut found = admin.describe_acls(&applies).await.expect("describe");
    found.sort_by(|a, b| a.resource_name.cmp(&b.resource_name));
    assert_eq!(found, vec![prefixed.clone(), literal.clone()]);
    assert_eq!(
        admin
            .describe_acls(&AclFilter::any())
            .await
            .expect("all")
            .len(),
        3
    );

    let deleted = admin
        .delete_acls(&[AclFilter {
            resource_name: Some("orders".into()),
            ..AclFilter::any()
        }])
        .await
        .expect("delete");
    assert_eq!(deleted[0].as_ref().expect("filter result"), &vec![literal]);
    let mut left = admin.describe_acls(&AclFilter::any()).await.expect("left");
    left.sort_by(|a, b| a.resource_name.cmp(&b.resource_name));
    assert_eq!(left, vec![prefixed, other]);
}
