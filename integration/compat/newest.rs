//! The newest client-facing features against each release of the matrix:
//! the share consumer (KIP-932), client telemetry (KIP-714) and the streams
//! group protocol (KIP-1071). A release without the APIs must refuse them
//! through its ApiVersions answer, by API name and broker, at once; one
//! with them must serve them.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use purekafka::admin::AlterConfigOp;
use purekafka::cluster::Workload;
use purekafka::producer::{Producer, ProducerConfig};
use purekafka::streams::{GroupProtocol, Streams, StreamsConfig, StreamsError, StringDeserializer};
use purekafka::{Admin, Cluster, Error, ShareConsumer, ShareConsumerConfig};
use tokio::time::Instant;

use super::{client, compat_broker, new_topic, send_values, values, Release};
use crate::support;
use purekafka::consumer::IsolationLevel;

/// GetTelemetrySubscriptions and PushTelemetry (KIP-714).
const GET_TELEMETRY_SUBSCRIPTIONS: i16 = 71;
const PUSH_TELEMETRY: i16 = 72;

/// The port of the compat broker, which every refusal must name.
fn port(bootstrap: &str) -> &str {
    bootstrap.rsplit(':').next().unwrap_or(bootstrap)
}

/// Asserts `err` is the ApiVersions refusal of `api` by the compat broker.
fn assert_refused(err: &Error, api: &str, bootstrap: &str, release: Release) {
    assert!(
        matches!(err, Error::UnsupportedVersion { .. }),
        "Kafka {release:?}: {api}: expected UnsupportedVersion, got {err:?}"
    );
    assert!(!err.is_retriable(), "{err:?}");
    let msg = err.to_string();
    assert!(
        msg.contains(api) && msg.contains(port(bootstrap)),
        "Kafka {release:?}: the refusal names {api} and the broker: {msg}"
    );
}

/// KIP-932 share groups: production-ready and on by default from 4.2;
/// 3.9 has no share APIs and 4.0 advertises none without enabling the
/// early-access feature. There, the first `poll` fails with the
/// heartbeat's refusal (no retry loop); on 4.2+ a few records are shared.
#[tokio::test]
async fn compat_share_consumer_kip932() {
    let Some((bootstrap, release)) = compat_broker("compat_share_consumer_kip932") else {
        return;
    };
    assert!(
        release < Release(4, 1, 0) || release >= Release(4, 2, 0),
        "Kafka {release:?}: share groups on 4.1 (preview) are not measured; add its expectation"
    );
    let serves = release >= Release(4, 2, 0);
    let topic = new_topic(&bootstrap, "compat-share", 1).await;
    let group = support::unique_topic("compat-share-id");
    const N: usize = 20;
    if serves {
        // A share group starts at the latest offset unless told otherwise.
        let admin = Admin::connect(client(&bootstrap).build().unwrap())
            .await
            .expect("admin");
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
        let producer = Producer::connect(
            ProducerConfig::builder()
                .client(client(&bootstrap))
                .build()
                .unwrap(),
        )
        .await
        .expect("producer");
        send_values(&producer, &topic, "s", N).await;
        producer.close(Duration::from_secs(10)).await.unwrap();
    }
    let consumer = ShareConsumer::connect(
        ShareConsumerConfig::from_properties([
            ("bootstrap.servers", bootstrap.as_str()),
            ("client.id", "purekafka-compat-share"),
            ("group.id", group.as_str()),
            ("request.timeout.ms", "10000"),
            ("default.api.timeout.ms", "30000"),
        ])
        .expect("share consumer config"),
    )
    .await
    .expect("share consumer");
    consumer.subscribe([topic.as_str()]).expect("subscribe");
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut got = BTreeSet::new();
    let outcome = loop {
        match consumer.poll(Duration::from_millis(500)).await {
            Err(e) => break Err(e),
            Ok(rs) => {
                for r in rs {
                    got.insert(String::from_utf8(r.record.value.unwrap().to_vec()).unwrap());
                }
                if got.len() >= N {
                    break Ok(());
                }
            }
        }
        assert!(
            Instant::now() < deadline,
            "Kafka {release:?}: the share consumer neither got {N} records nor was refused in 30 s (got {})",
            got.len()
        );
    };
    eprintln!("Kafka {release:?}: share consumer: {outcome:?}");
    let closed = consumer.close().await;
    if serves {
        outcome.expect("a share consumer on 4.2+");
        let want: BTreeSet<String> = (0..N).map(|i| format!("s-{i:04}")).collect();
        assert_eq!(got, want, "every record shared");
        closed.expect("close");
    } else {
        let err = outcome.expect_err("no share groups before 4.1");
        assert_refused(&err, "ShareGroupHeartbeat", &bootstrap, release);
        assert!(
            got.is_empty(),
            "records from a refused share group: {got:?}"
        );
    }
}

/// KIP-714 without the APIs: brokers advertise GetTelemetrySubscriptions
/// and PushTelemetry only with a telemetry reporter configured, which the
/// matrix brokers lack. The producer (telemetry on, the default) produces
/// as usual, and `client_instance_id` answers `None` as soon as the client
/// knows telemetry stopped, not after waiting out its timeout.
#[tokio::test]
async fn compat_client_telemetry_without_the_apis_stays_out_of_the_way() {
    let Some((bootstrap, release)) =
        compat_broker("compat_client_telemetry_without_the_apis_stays_out_of_the_way")
    else {
        return;
    };
    let cluster = Cluster::connect(support::config(&bootstrap))
        .await
        .expect("cluster");
    let conn = cluster
        .any_connection(Workload::Admin)
        .await
        .expect("connection");
    for api in [GET_TELEMETRY_SUBSCRIPTIONS, PUSH_TELEMETRY] {
        assert!(
            conn.api_versions().broker_range(api).is_none(),
            "Kafka {release:?} advertises API {api}: a telemetry reporter is configured, so this test measures nothing"
        );
    }
    let topic = new_topic(&bootstrap, "compat-telemetry", 1).await;
    let producer = Producer::connect(
        ProducerConfig::builder()
            .client(client(&bootstrap))
            .build()
            .unwrap(),
    )
    .await
    .expect("producer");
    send_values(&producer, &topic, "t", 20).await;
    let timeout = Duration::from_secs(20);
    let asked = Instant::now();
    let id = producer.client_instance_id(timeout).await;
    let took = asked.elapsed();
    eprintln!("Kafka {release:?}: client_instance_id = {id:?} after {took:?}");
    assert_eq!(id, None, "no instance id without GetTelemetrySubscriptions");
    assert!(
        took < timeout,
        "client_instance_id waited out its {timeout:?} instead of answering that telemetry stopped"
    );
    producer
        .close(Duration::from_secs(10))
        .await
        .expect("close");
    let got = values(&bootstrap, &topic, 1, IsolationLevel::ReadUncommitted).await;
    assert_eq!(got.len(), 20, "every record produced: {got:?}");
}

/// KIP-1071 `group.protocol=streams`: 3.9 and 4.0 have no
/// StreamsGroupHeartbeat (API 88), so `start` refuses the application by
/// that name and the coordinator, before joining anything; on 4.2+ the
/// application gets its tasks and processes every record.
#[tokio::test]
async fn compat_streams_group_protocol_kip1071() {
    let Some((bootstrap, release)) = compat_broker("compat_streams_group_protocol_kip1071") else {
        return;
    };
    assert!(
        release < Release(4, 1, 0) || release >= Release(4, 2, 0),
        "Kafka {release:?}: streams groups on 4.1 (early access) are not measured; add its expectation"
    );
    let serves = release >= Release(4, 2, 0);
    let topic = new_topic(&bootstrap, "compat-sgp", 2).await;
    const N: usize = 20;
    let producer = Producer::connect(
        ProducerConfig::builder()
            .client(client(&bootstrap))
            .build()
            .unwrap(),
    )
    .await
    .expect("producer");
    send_values(&producer, &topic, "p", N).await;
    producer.close(Duration::from_secs(10)).await.unwrap();
    let app = support::unique_topic("compat-sgp-app");
    let seen: Arc<Mutex<BTreeSet<String>>> = Arc::default();
    let s = seen.clone();
    let started = Streams::topology(
        StreamsConfig::builder(&app, &bootstrap)
            .group_protocol(GroupProtocol::Streams)
            .commit_interval(Duration::from_millis(200))
            .build()
            .unwrap(),
    )
    .source(topic.as_str(), StringDeserializer, StringDeserializer)
    .for_each_async(move |rec| {
        let s = s.clone();
        async move {
            s.lock().unwrap().insert(rec.value);
            Ok(())
        }
    })
    .build()
    .start()
    .await;
    match started {
        Ok(running) if serves => {
            let deadline = Instant::now() + Duration::from_secs(60);
            while seen.lock().unwrap().len() < N {
                assert!(!running.is_finished(), "the application stopped");
                assert!(
                    Instant::now() < deadline,
                    "{} of {N} records in 60 s",
                    seen.lock().unwrap().len()
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            running.shutdown().await.expect("clean shutdown");
        }
        Ok(running) => {
            let stopped = running.shutdown().await;
            panic!("Kafka {release:?}: group.protocol=streams started (then: {stopped:?})");
        }
        Err(e) if serves => panic!("Kafka {release:?}: streams group refused: {e}"),
        Err(StreamsError::Client(err)) => {
            eprintln!("Kafka {release:?}: group.protocol=streams: {err}");
            assert_refused(&err, "StreamsGroupHeartbeat", &bootstrap, release);
            assert!(seen.lock().unwrap().is_empty());
        }
        Err(e) => panic!("Kafka {release:?}: expected the client's refusal, got {e:?}"),
    }
}
