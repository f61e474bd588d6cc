//! The group, producer and partition admin APIs on the fake cluster,
//! through purekafka's admin client: OffsetDelete (KIP-496), DeleteGroups,
//! ConsumerGroupDescribe (KIP-848), DescribeProducers (KIP-664),
//! ElectLeaders (KIP-183, KIP-460) and ACLs (KIP-140), with the broker's
//! error codes.

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

/// Admin's describe of a consumer-protocol (KIP-848) group goes through
/// ConsumerGroupDescribe: the member, its assignment and the server
/// assignor; a group of another protocol or none gets GROUP_ID_NOT_FOUND,
/// on which the admin falls back to DescribeGroups.
#[tokio::test]
async fn a_consumer_protocol_group_is_described_with_consumer_group_describe() {
    use kafka_protocol::messages::{ConsumerGroupDescribeRequest, GroupId};
    use kafka_protocol::protocol::StrBytes;
    use purekafka::admin::GroupType;
    use purekafka::cluster::{Cluster, CoordinatorKind, Workload};
    use purekafka::protocol::versions::Versions;

    let fake = FakeCluster::start(1).await.expect("fake");
    fake.create_topic("cgd", 2).expect("topic");
    let b = fake.bootstrap();
    let consumer = Consumer::connect(
        ConsumerConfig::from_properties([
            ("bootstrap.servers", b.as_str()),
            ("group.id", "cgd-group"),
            ("group.protocol", "consumer"),
        ])
        .expect("config"),
    )
    .await
    .expect("consumer");
    consumer.subscribe(["cgd"]).expect("subscribe");
    let deadline = Instant::now() + Duration::from_secs(20);
    while consumer.assignment().len() != 2 {
        assert!(Instant::now() < deadline, "not assigned within 20 s");
        consumer
            .poll(Duration::from_millis(100))
            .await
            .expect("poll");
    }
    let admin = Admin::connect(client(&b).build().expect("config"))
        .await
        .expect("admin");
    let d = admin
        .describe_groups(&["cgd-group".to_owned()])
        .await
        .expect("describe");
    let g = d["cgd-group"].as_ref().expect("described");
    assert_eq!(g.group_type, GroupType::Consumer);
    assert_eq!(
        (g.state.as_str(), g.assignor.as_str()),
        ("Stable", "uniform")
    );
    assert_eq!(g.members.len(), 1);
    let want: Vec<TopicPartition> = (0..2).map(|p| TopicPartition::new("cgd", p)).collect();
    assert_eq!(g.members[0].assignment, want);

    // An offsets-only (classic) group: the admin falls back to DescribeGroups.
    admin
        .alter_group_offsets("cgd-classic", &[(want[0].clone(), 1)])
        .await
        .expect("commit");
    let d = admin
        .describe_groups(&["cgd-classic".to_owned()])
        .await
        .expect("describe");
    let g = d["cgd-classic"].as_ref().expect("described");
    assert_eq!(g.group_type, GroupType::Classic);

    // The error code itself, on the wire.
    let cluster = Cluster::connect(client(&b).build().expect("config"))
        .await
        .expect("cluster");
    let addr = cluster
        .coordinator(CoordinatorKind::Group, "cgd-classic")
        .await
        .expect("coordinator");
    let req = ConsumerGroupDescribeRequest::default().with_group_ids(vec![
        GroupId(StrBytes::from_static_str("cgd-classic")),
        GroupId(StrBytes::from_static_str("cgd-none")),
    ]);
    let resp = cluster
        .send(&addr, Workload::Group, &req, Versions::new(0, 1))
        .await
        .expect("ConsumerGroupDescribe");
    let codes: Vec<i16> = resp.groups.iter().map(|g| g.error_code).collect();
    assert_eq!(codes, [69, 69], "GROUP_ID_NOT_FOUND: {resp:?}");
    tokio::time::timeout(Duration::from_secs(10), consumer.close())
        .await
        .expect("close within 10 s")
        .expect("close");
}

/// ElectLeaders through the admin: a partition led by another replica than
/// its preferred one is moved back by a preferred election
/// (the leader epoch moves); again, it is not needed; an unknown partition,
/// an unclean election with a live leader and a preferred replica that is
/// down get Kafka's codes.
#[tokio::test]
async fn preferred_and_unclean_elections_with_the_brokers_codes() {
    use purekafka::admin::ElectionType;

    let fake = FakeCluster::start(3).await.expect("fake");
    fake.create_topic("el", 3).expect("topic");
    let b = fake.bootstrap();
    let admin = Admin::connect(client(&b).build().expect("config"))
        .await
        .expect("admin");
    let leader = |p: i32| {
        fake.with_state(|s| {
            s.partition("el", p)
                .map(|l| (l.leader, l.leader_epoch, l.replicas[0]))
                .expect("partition")
        })
    };
    let (first, epoch, preferred) = leader(0);
    assert_eq!(first, preferred);
    fake.move_leader("el", 0, (preferred + 1) % 3)
        .expect("move");
    let (moved, _, _) = leader(0);
    assert_ne!(moved, preferred, "led by another replica");

    let tp = |p: i32| TopicPartition::new("el", p);
    let unknown = TopicPartition::new("el", 7);
    let r = admin
        .elect_leaders(ElectionType::Preferred, Some(&[tp(0), unknown.clone()]))
        .await
        .expect("elect");
    assert!(r[&tp(0)].is_ok(), "{r:?}");
    let (back, new_epoch, _) = leader(0);
    assert_eq!(back, preferred);
    assert!(
        new_epoch > epoch + 1,
        "kill and election each bump the epoch"
    );
    assert_eq!(r[&unknown].as_ref().err().and_then(code), Some(3), "{r:?}");

    let r = admin
        .elect_leaders(ElectionType::Preferred, Some(&[tp(0)]))
        .await
        .expect("elect");
    assert_eq!(
        r[&tp(0)].as_ref().err().and_then(code),
        Some(84),
        "ELECTION_NOT_NEEDED"
    );
    let r = admin
        .elect_leaders(ElectionType::Unclean, Some(&[tp(0)]))
        .await
        .expect("elect");
    assert_eq!(
        r[&tp(0)].as_ref().err().and_then(code),
        Some(84),
        "leader alive"
    );

    // Every partition (None): only those that needed an election answer.
    let (_, _, preferred1) = leader(1);
    fake.move_leader("el", 1, (preferred1 + 1) % 3)
        .expect("move");
    let r = admin
        .elect_leaders(ElectionType::Preferred, None)
        .await
        .expect("elect all");
    let answered: Vec<&TopicPartition> = r.keys().collect();
    assert_eq!(answered, [&tp(1)], "{r:?}");
    assert_eq!(leader(1).0, preferred1);

    // The preferred replica is down: PREFERRED_LEADER_NOT_AVAILABLE.
    let (_, _, preferred2) = leader(2);
    fake.kill_broker(preferred2).expect("kill");
    let r = admin
        .elect_leaders(ElectionType::Preferred, Some(&[tp(2)]))
        .await
        .expect("elect");
    assert_eq!(r[&tp(2)].as_ref().err().and_then(code), Some(80), "{r:?}");
}
