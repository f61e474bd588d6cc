//! Bootstrap, metadata, leader routing, coordinators and version negotiation
//! against the real broker.

use kafka_protocol::messages::MetadataRequest;
use purekafka::cluster::Workload;
use purekafka::protocol::versions::Versions;
use purekafka::{Cluster, CoordinatorKind, Error, KafkaCode};

use crate::support;

#[tokio::test]
async fn bootstrap_lists_brokers_and_controller() {
    let Some(bootstrap) = support::bootstrap("bootstrap_lists_brokers") else {
        return;
    };
    let cluster = Cluster::connect(support::config(&bootstrap))
        .await
        .expect("connect");
    let m = cluster.metadata();
    assert!(!m.brokers.is_empty());
    assert!(
        m.brokers.contains_key(&m.controller_id),
        "controller {} is a listed broker",
        m.controller_id
    );
    assert!(m.cluster_id.as_deref().is_some_and(|id| !id.is_empty()));
    assert!(m.generation >= 1);
    let listed: Vec<String> = m
        .brokers
        .values()
        .map(|b| format!("{}:{}", b.host, b.port))
        .collect();
    assert!(
        bootstrap.split(',').any(|b| listed.contains(&b.to_owned())),
        "{listed:?} vs {bootstrap}"
    );
}

#[tokio::test]
async fn api_versions_are_negotiated_per_connection() {
    let Some(bootstrap) = support::bootstrap("api_versions_negotiated") else {
        return;
    };
    let cluster = Cluster::connect(support::config(&bootstrap))
        .await
        .expect("connect");
    let conn = cluster.any_connection(Workload::Admin).await.expect("conn");
    let table = conn.api_versions();
    for key in [0i16, 1, 3, 10, 18, 22] {
        assert!(
            table.broker_range(key).is_some(),
            "broker advertises API {key}"
        );
    }
    // Kafka 4.x serves Metadata up to v13; we speak up to 12, so 12 is picked.
    assert_eq!(
        conn.version_for::<MetadataRequest>(Versions::new(1, 12))
            .unwrap(),
        12
    );
    // A range the broker cannot meet names the API and both ranges.
    let err = conn.version_for::<MetadataRequest>(Versions::new(14, 20));
    // kafka-protocol caps Metadata at v13, so the client range is clamped to empty.
    let text = err.expect_err("no overlap").to_string();
    assert!(
        text.contains("Metadata") && text.contains("broker supports"),
        "{text}"
    );
}

#[tokio::test]
async fn leaders_are_routed_for_new_topics() {
    let Some(bootstrap) = support::bootstrap("leaders_are_routed") else {
        return;
    };
    let cluster = Cluster::connect(support::config(&bootstrap))
        .await
        .expect("connect");
    let topic = support::unique_topic("routing");
    support::create_topic(&cluster, &topic, 3).await;
    for p in 0..3 {
        let leader = cluster.leader(&topic, p).await.expect("leader");
        assert!(leader.id.is_some(), "leader has a node id");
        assert!(cluster.metadata().brokers.contains_key(&leader.id.unwrap()));
    }
    let err = cluster
        .leader(&topic, 7)
        .await
        .expect_err("partition 7 does not exist");
    assert!(
        matches!(err, Error::UnknownPartition { partition: 7, .. }),
        "{err:?}"
    );
    assert!(err.to_string().contains(&topic));
}

#[tokio::test]
async fn unknown_topic_is_a_typed_kafka_error() {
    let Some(bootstrap) = support::bootstrap("unknown_topic") else {
        return;
    };
    let cluster = Cluster::connect(support::config(&bootstrap))
        .await
        .expect("connect");
    let topic = support::unique_topic("missing");
    let err = cluster.leader(&topic, 0).await.expect_err("no such topic");
    assert_eq!(
        err.kafka_code(),
        Some(KafkaCode::UNKNOWN_TOPIC_OR_PARTITION),
        "{err:?}"
    );
    assert!(
        err.to_string().contains(&topic),
        "error names the topic: {err}"
    );
    assert!(err.is_retriable());
}

#[tokio::test]
async fn group_and_transaction_coordinators_are_found() {
    let Some(bootstrap) = support::bootstrap("coordinators_found") else {
        return;
    };
    let cluster = Cluster::connect(support::config(&bootstrap))
        .await
        .expect("connect");
    let group = support::unique_topic("group");
    let g = cluster
        .coordinator(CoordinatorKind::Group, &group)
        .await
        .expect("group coordinator");
    assert!(cluster.metadata().brokers.contains_key(&g.id.unwrap()));
    let t = cluster
        .coordinator(CoordinatorKind::Transaction, &support::unique_topic("txn"))
        .await
        .expect("transaction coordinator");
    assert!(t.id.is_some());
    // Cached until invalidated.
    assert_eq!(
        cluster
            .coordinator(CoordinatorKind::Group, &group)
            .await
            .unwrap(),
        g
    );
    cluster.invalidate_coordinator(CoordinatorKind::Group, &group);
    assert_eq!(
        cluster
            .coordinator(CoordinatorKind::Group, &group)
            .await
            .unwrap(),
        g
    );
}

#[tokio::test]
async fn unreachable_bootstrap_is_a_bounded_error() {
    // Port 9 on loopback: nothing listens there.
    let config = purekafka::ClientConfig::builder()
        .bootstrap_servers("127.0.0.1:9")
        .default_api_timeout(std::time::Duration::from_secs(5))
        .build()
        .unwrap();
    let started = std::time::Instant::now();
    let err = Cluster::connect(config).await.expect_err("nothing listens");
    assert!(started.elapsed() < std::time::Duration::from_secs(6));
    assert!(matches!(err, Error::NoBrokerAvailable { .. }), "{err:?}");
    assert!(err.to_string().contains("127.0.0.1:9"), "{err}");
    assert!(err.is_retriable());
}

#[tokio::test]
async fn pipelined_requests_on_one_connection_all_succeed() {
    let Some(bootstrap) = support::bootstrap("pipelined_requests") else {
        return;
    };
    let cluster = Cluster::connect(support::config(&bootstrap))
        .await
        .expect("connect");
    let conn = cluster.any_connection(Workload::Admin).await.expect("conn");
    // Many requests in flight at once: responses arrive back to back while
    // the next pending entry is queued, which must never look unsolicited.
    let tasks: Vec<_> = (0..300)
        .map(|_| {
            let c = conn.clone();
            tokio::spawn(async move {
                c.send(&MetadataRequest::default(), Versions::new(1, 12))
                    .await
            })
        })
        .collect();
    for t in tasks {
        let resp = t
            .await
            .expect("no panic")
            .expect("every pipelined request succeeds");
        assert!(!resp.brokers.is_empty());
    }
    assert!(!conn.is_closed());
}
