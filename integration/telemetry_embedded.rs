//! The `metrics` feature for what `integration/telemetry.rs` leaves out:
//! a share consumer's acknowledgements by type (KIP-932) and their
//! failures, its fetches and rebalances; and the clients a running streams
//! application owns (its consumer and producer: connections, rebalances,
//! commits), published under its `application_id`. Scraped from the same
//! Prometheus endpoint (one global recorder per process).

use std::collections::HashMap;
use std::time::Duration;

use purekafka::admin::AlterConfigOp;
use purekafka::producer::serializer::StringSerializer;
use purekafka::streams::{Streams, StringDeserializer};
use purekafka::telemetry::MetricsPublisher;
use purekafka::{AcknowledgeType, Admin, Cluster, ShareConsumer, ShareConsumerConfig};
use tokio::time::Instant;

use crate::support::{self, records};
use crate::telemetry::metrics::{endpoint, get, scrape};

/// A share consumer in explicit mode accepts, releases and rejects records;
/// the released ones come back and are accepted. The counts by type, their
/// Java-named totals, the fetched records and the member's rebalance are
/// in `metrics()` and the exporter's output. Acknowledgements for a topic
/// deleted meanwhile fail, and count as errors.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn share_acknowledgements_are_counted_by_type() {
    let test = "telemetry-share-acks";
    let Some(bootstrap) = support::bootstrap(test) else {
        return;
    };
    if !support::real_broker_only(test, "share groups (KIP-932)") {
        return;
    }
    let addr = endpoint();
    let cluster = Cluster::connect(support::config(&bootstrap)).await.unwrap();
    let topic = support::unique_topic(test);
    support::create_topic(&cluster, &topic, 1).await;
    records::produce(&cluster, &topic, 0, &records::values("ack-", 10)).await;
    let group = support::unique_topic(&format!("{test}-group"));
    let admin = Admin::connect(support::config(&bootstrap)).await.unwrap();
    admin
        .alter_group_configs(
            &group,
            &[AlterConfigOp::Set(
                "share.auto.offset.reset".into(),
                "earliest".into(),
            )],
        )
        .await
        .expect("share group config");
    let id = support::unique_topic("share-acks");
    let consumer = ShareConsumer::connect(
        ShareConsumerConfig::from_properties([
            ("bootstrap.servers", bootstrap.as_str()),
            ("client.id", id.as_str()),
            ("group.id", group.as_str()),
            ("fetch.max.wait.ms", "200"),
            ("max.poll.records", "10"),
            ("share.acknowledgement.mode", "explicit"),
        ])
        .unwrap(),
    )
    .await
    .unwrap();
    consumer.subscribe([topic.as_str()]).unwrap();

    // First deliveries: offsets 0-5 accepted, 6-7 released, 8-9 rejected;
    // the released two come back and are accepted.
    let first_kind = |offset: i64| match offset {
        0..=5 => AcknowledgeType::Accept,
        6..=7 => AcknowledgeType::Release,
        _ => AcknowledgeType::Reject,
    };
    let mut settled = 0;
    let mut delivered = 0u64;
    let deadline = Instant::now() + Duration::from_secs(60);
    while settled < 10 {
        assert!(Instant::now() < deadline, "settled {settled} of 10");
        for r in consumer.poll(Duration::from_millis(500)).await.unwrap() {
            delivered += 1;
            let ty = if r.delivery_count == 1 {
                first_kind(r.offset)
            } else {
                AcknowledgeType::Accept
            };
            if ty != AcknowledgeType::Release {
                settled += 1;
            }
            consumer.acknowledge(&r, ty).unwrap();
        }
    }
    let results = consumer.commit_sync().await.unwrap();
    assert!(results.values().all(Result::is_ok), "{results:?}");
    assert_eq!(delivered, 12, "ten records, two of them twice");

    let m = consumer.metrics();
    let sent = m.acknowledgements_sent;
    assert_eq!((sent.accept, sent.release, sent.reject), (8, 2, 2), "{m:?}");
    assert_eq!(m.acknowledgement_errors.total(), 0, "{m:?}");
    assert_eq!(m.records_fetched, 12, "{m:?}");
    assert_eq!(m.records_consumed, 12, "{m:?}");
    assert!(m.rebalances >= 1, "the member's first assignment: {m:?}");
    assert!(m.fetch_requests >= 2, "{m:?}");
    assert!(m.fetch_latency_max > Duration::ZERO, "{m:?}");
    assert!(m.fetch_latency_avg <= m.fetch_latency_max, "{m:?}");

    let mut publisher = MetricsPublisher::new().share_consumer(&consumer);
    assert_eq!(publisher.publish(), 1);
    let scraped = scrape(addr).await;
    let l = format!("{{client_id=\"{id}\"}}");
    let metric = |name: &str| get(&scraped, &format!("kafka_share_consumer_{name}{l}"));
    assert_eq!(metric("acknowledgements_send_total"), 12.0);
    assert_eq!(metric("acknowledgements_error_total"), 0.0);
    assert_eq!(metric("records_fetched_total"), 12.0);
    assert!(metric("rebalance_total") >= 1.0);
    assert!(metric("fetch_request_total") >= 2.0);
    assert!(metric("fetch_latency_max_seconds") > 0.0);
    for (ty, n) in [("accept", 8.0), ("release", 2.0), ("reject", 2.0)] {
        let key = format!(
            "kafka_share_consumer_acknowledgements_send_by_type_total{{client_id=\"{id}\",type=\"{ty}\"}}"
        );
        assert_eq!(get(&scraped, &key), n, "{key}");
    }

    // Two more records, delivered and accepted; the topic is deleted
    // before the acknowledgements go out, so the broker refuses them.
    records::produce(&cluster, &topic, 0, &records::values("late-", 2)).await;
    let mut late = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    while late.len() < 2 {
        assert!(Instant::now() < deadline, "got {} late records", late.len());
        late.extend(consumer.poll(Duration::from_millis(500)).await.unwrap());
    }
    for r in &late {
        consumer.acknowledge(r, AcknowledgeType::Accept).unwrap();
    }
    admin
        .delete_topics(std::slice::from_ref(&topic))
        .await
        .expect("delete topic");
    let results = consumer.commit_sync().await;
    let m = consumer.metrics();
    assert_eq!(m.acknowledgements_sent.accept, 10, "{results:?} {m:?}");
    assert_eq!(
        m.acknowledgement_errors.accept, 2,
        "acknowledgements for a deleted topic: {results:?} {m:?}"
    );
    publisher.publish();
    let scraped = scrape(addr).await;
    let metric = |name: &str| get(&scraped, &format!("kafka_share_consumer_{name}{l}"));
    assert_eq!(metric("acknowledgements_send_total"), 14.0);
    assert_eq!(metric("acknowledgements_error_total"), 2.0);
    let _ = consumer.close().await;
    drop(consumer);
    assert_eq!(publisher.publish(), 0, "gone");
}

/// The value of the one `name` series labelled with `application_id=app`.
fn of_app(m: &HashMap<String, f64>, name: &str, app: &str) -> f64 {
    let label = format!("application_id=\"{app}\"");
    let hits: Vec<f64> = m
        .iter()
        .filter(|(k, _)| k.starts_with(&format!("{name}{{")) && k.contains(&label))
        .map(|(_, v)| *v)
        .collect();
    match hits.as_slice() {
        [v] => *v,
        _ => panic!("{name} of {app}: {hits:?} in {:?}", m.keys()),
    }
}

/// A running application's own consumer and producer are published under
/// its `application_id`: the consumer's rebalance, commits, assignment,
/// consumed records and connections, the producer's sent records; the
/// request counts rise as it works on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streams_apps_own_clients_are_published_under_its_application_id() {
    const PARTITIONS: i32 = 2;
    const N: usize = 30;
    let Some((bootstrap, cluster, topic)) =
        crate::streams::setup("telemetry-streams-clients", PARTITIONS).await
    else {
        return;
    };
    let addr = endpoint();
    crate::streams::produce(&bootstrap, &topic, N, 6).await;
    let app = support::unique_topic("metrics-streams-clients");
    let out = format!("{topic}-out");
    support::create_topic(&cluster, &out, 1).await;
    let running = Streams::topology(
        crate::streams::config(&bootstrap, &app)
            .consumer_property("auto.offset.reset", "earliest")
            .build()
            .unwrap(),
    )
    .source(topic.as_str(), StringDeserializer, StringDeserializer)
    .map(Ok)
    .to(out.as_str(), StringSerializer, StringSerializer)
    .build()
    .start()
    .await
    .unwrap();
    crate::streams::wait_for(&running, |r| {
        let m = r.metrics();
        m.processed >= N as u64 && m.commits >= 1
    })
    .await;

    let mut publisher = MetricsPublisher::new().streams(&running);
    assert_eq!(
        publisher.publish(),
        3,
        "the app, its consumer, its producer"
    );
    let m = scrape(addr).await;
    let v = |name: &str| of_app(&m, name, &app);
    assert!(
        v("kafka_consumer_rebalance_total") >= 1.0,
        "joined the group"
    );
    let commits = v("kafka_consumer_commit_total");
    assert!(commits >= 1.0, "{commits} commits");
    assert_eq!(v("kafka_consumer_assigned_partitions"), PARTITIONS as f64);
    assert_eq!(v("kafka_consumer_records_consumed_total"), N as f64);
    assert!(v("kafka_consumer_connection_creation_total") >= 1.0);
    assert!(v("kafka_consumer_connection_count") >= 1.0);
    let consumer_requests = v("kafka_consumer_request_total");
    assert_eq!(v("kafka_producer_record_send_total"), N as f64);
    let producer_requests = v("kafka_producer_produce_request_total");
    assert!(producer_requests >= 1.0);
    assert_eq!(v("kafka_streams_process_total"), N as f64);

    // More input: the counts follow.
    crate::streams::produce(&bootstrap, &topic, N, 6).await;
    let before = running.metrics().commits;
    crate::streams::wait_for(&running, |r| {
        let m = r.metrics();
        m.processed >= 2 * N as u64 && m.commits > before
    })
    .await;
    publisher.publish();
    let m = scrape(addr).await;
    let v = |name: &str| of_app(&m, name, &app);
    assert_eq!(v("kafka_consumer_records_consumed_total"), 2.0 * N as f64);
    assert_eq!(v("kafka_producer_record_send_total"), 2.0 * N as f64);
    assert!(v("kafka_consumer_commit_total") > commits);
    assert!(v("kafka_consumer_request_total") > consumer_requests);
    assert!(v("kafka_producer_produce_request_total") > producer_requests);

    running.shutdown().await.unwrap();
    // The clients' background tasks end just after the shutdown returns.
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut left = publisher.publish();
    while left > 0 {
        assert!(
            Instant::now() < deadline,
            "{left} sources left after shutdown"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
        left = publisher.publish();
    }
}

/// A streams app on a share group (`source.group=share`): its share
/// consumer's acknowledgements are published under its `application_id`,
/// one accept per record and one release per failed first delivery.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_share_group_streams_apps_acknowledgements_are_published() {
    use purekafka::streams::{
        delivery_count, Backoff, FailurePolicy, OrderingMode, ProcessingError, SourceGroup,
        StreamsConfig,
    };
    const N: usize = 20;
    let test = "telemetry-streams-share";
    let Some((bootstrap, _cluster, topic)) = crate::streams::setup(test, 1).await else {
        return;
    };
    if !support::real_broker_only(test, "share groups (KIP-932)") {
        return;
    }
    let addr = endpoint();
    let app = support::unique_topic("metrics-streams-share");
    Admin::connect(support::config(&bootstrap))
        .await
        .unwrap()
        .alter_group_configs(
            &app,
            &[AlterConfigOp::Set(
                "share.auto.offset.reset".into(),
                "earliest".into(),
            )],
        )
        .await
        .unwrap();
    crate::streams::produce(&bootstrap, &topic, N, 4).await;
    // Values divisible by 5 fail their first delivery: released, then
    // accepted on the second.
    let running = Streams::topology(
        StreamsConfig::builder(&app, &bootstrap)
            .source_group(SourceGroup::Share)
            .ordering(OrderingMode::Unordered)
            .failure_policy(FailurePolicy::Retry(Backoff::fixed(
                Duration::from_millis(50),
                3,
            )))
            .build()
            .unwrap(),
    )
    .source(topic.as_str(), StringDeserializer, StringDeserializer)
    .for_each_async(|rec| async move {
        let v: usize = rec.value.parse().unwrap();
        if v.is_multiple_of(5) && delivery_count() == Some(1) {
            Err(ProcessingError::new(format!("{v}: first delivery fails")))
        } else {
            Ok(())
        }
    })
    .build()
    .start()
    .await
    .unwrap();
    let mut publisher = MetricsPublisher::new().streams(&running);
    let key = |ty: &str| {
        format!("kafka_share_consumer_acknowledgements_send_by_type_total{{client_id=\"{app}\",application_id=\"{app}\",type=\"{ty}\"}}")
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    let m = loop {
        assert!(!running.is_finished(), "the app stopped");
        assert_eq!(
            publisher.publish(),
            3,
            "the app, its share consumer, its producer"
        );
        let m = scrape(addr).await;
        if m.get(&key("accept")) == Some(&(N as f64)) {
            break m;
        }
        assert!(
            Instant::now() < deadline,
            "accepts: {:?}, releases: {:?}",
            m.get(&key("accept")),
            m.get(&key("release"))
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(get(&m, &key("release")), (N / 5) as f64);
    assert_eq!(get(&m, &key("reject")), 0.0);
    let v = |name: &str| of_app(&m, name, &app);
    assert_eq!(v("kafka_share_consumer_acknowledgements_error_total"), 0.0);
    assert!(v("kafka_share_consumer_rebalance_total") >= 1.0);
    assert!(v("kafka_share_consumer_connection_creation_total") >= 1.0);
    assert_eq!(
        v("kafka_share_consumer_records_fetched_total"),
        (N + N / 5) as f64
    );
    running.shutdown().await.unwrap();
}
