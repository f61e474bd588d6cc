//! KIP-714 client telemetry against `scripts/kafka up --telemetry`: a broker
//! whose metric reporter (`integration/kafka/TelemetryRecorder.java`)
//! decodes every PushTelemetry payload with Kafka's own OTLP classes and
//! appends one line per data point to a file (`PUREKAFKA_TELEMETRY_LOG`,
//! default `target/kafka/telemetry/node1/telemetry.log`). Each test makes a
//! client-metrics subscription (IncrementalAlterConfigs on a
//! `CLIENT_METRICS` resource) matching only its own `client.id`, so tests
//! do not see each other's pushes.

use std::time::{Duration, Instant};

use kafka_protocol::messages::incremental_alter_configs_request::{
    AlterConfigsResource, AlterableConfig,
};
use kafka_protocol::messages::IncrementalAlterConfigsRequest;
use kafka_protocol::protocol::StrBytes;
use purekafka::cluster::Workload;
use purekafka::producer::{Producer, ProducerConfig, ProducerRecord};
use purekafka::protocol::versions::Versions;
use purekafka::{AutoOffsetReset, ClientConfig, Cluster, Consumer, ConsumerConfig, TopicPartition};

use crate::support;

/// `CLIENT_METRICS` in ConfigResource types (KIP-714).
const CLIENT_METRICS: i8 = 16;

/// The telemetry broker, or `None` (after saying why) when none answers
/// outside CI; in CI an unreachable broker fails the test.
fn bootstrap(test: &str) -> Option<String> {
    let addr = std::env::var("PUREKAFKA_BOOTSTRAP_TELEMETRY")
        .ok()
        .filter(|v| !v.trim().is_empty())
        .unwrap_or_else(|| "127.0.0.1:19492".into());
    let up = addr.split(',').any(|a| {
        a.parse()
            .ok()
            .and_then(|s| std::net::TcpStream::connect_timeout(&s, Duration::from_secs(2)).ok())
            .is_some()
    });
    let ci = std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "0" && v != "false");
    if up {
        Some(addr)
    } else if ci {
        panic!("{test}: no telemetry broker at {addr} (CI=true forbids skipping; scripts/kafka up --telemetry)");
    } else {
        eprintln!("SKIPPED {test}: no telemetry broker at {addr} (scripts/kafka up --telemetry)");
        None
    }
}

fn log_path() -> std::path::PathBuf {
    std::env::var("PUREKAFKA_TELEMETRY_LOG")
        .ok()
        .filter(|v| !v.trim().is_empty())
        .map(Into::into)
        .unwrap_or_else(|| {
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("target/kafka/telemetry/node1/telemetry.log")
        })
}

/// One recorded line (`point` or `push`), split on tabs.
fn recorded(client_id: &str) -> Vec<Vec<String>> {
    let text = std::fs::read_to_string(log_path()).unwrap_or_default();
    text.lines()
        .map(|l| l.split('\t').map(str::to_owned).collect::<Vec<_>>())
        .filter(|f| match f[0].as_str() {
            "point" | "push" => f.get(3).map(String::as_str) == Some(client_id),
            _ => true,
        })
        .collect()
}

/// Waits (bounded) until `done` holds for the lines of `client_id`.
async fn wait_for(
    client_id: &str,
    what: &str,
    limit: Duration,
    done: impl Fn(&[Vec<String>]) -> bool,
) -> Vec<Vec<String>> {
    let deadline = Instant::now() + limit;
    loop {
        let lines = recorded(client_id);
        if done(&lines) {
            return lines;
        }
        assert!(
            Instant::now() < deadline,
            "{what} not recorded within {limit:?}; lines of {client_id}: {lines:#?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Makes (or replaces) the client-metrics subscription `name`: `metrics`
/// prefixes every `interval_ms`, for clients whose id is `client_id`.
async fn subscribe(
    cluster: &Cluster,
    name: &str,
    metrics: &str,
    interval_ms: u32,
    client_id: &str,
) {
    let set = |k: &str, v: String| {
        AlterableConfig::default()
            .with_name(StrBytes::from_string(k.to_owned()))
            .with_config_operation(0)
            .with_value(Some(StrBytes::from_string(v)))
    };
    let req = IncrementalAlterConfigsRequest::default().with_resources(vec![
        AlterConfigsResource::default()
            .with_resource_type(CLIENT_METRICS)
            .with_resource_name(StrBytes::from_string(name.to_owned()))
            .with_configs(vec![
                set("metrics", metrics.to_owned()),
                set("interval.ms", interval_ms.to_string()),
                set("match", format!("client_id={client_id}")),
            ]),
    ]);
    let conn = cluster
        .any_connection(Workload::Admin)
        .await
        .expect("connection");
    let resp = conn
        .send(&req, Versions::new(0, 1))
        .await
        .expect("IncrementalAlterConfigs");
    for r in &resp.responses {
        assert_eq!(
            r.error_code, 0,
            "subscription {name}: {:?}",
            r.error_message
        );
    }
}

fn client(bootstrap: &str, client_id: &str) -> purekafka::ClientConfigBuilder {
    ClientConfig::builder()
        .bootstrap_servers(bootstrap)
        .client_id(client_id)
        .request_timeout(Duration::from_secs(10))
        .default_api_timeout(Duration::from_secs(30))
}

/// Points of `metric` in `lines`: (terminating, kind, value).
fn points<'a>(lines: &'a [Vec<String>], metric: &str) -> Vec<(&'a str, &'a str, &'a str)> {
    lines
        .iter()
        .filter(|f| f[0] == "point" && f[4] == metric)
        .map(|f| (f[2].as_str(), f[5].as_str(), f[6].as_str()))
        .collect()
}

/// The total a counter reached: the sum of its deltas, or its last
/// cumulative value.
fn counter_total(lines: &[Vec<String>], metric: &str) -> Option<u64> {
    let ps = points(lines, metric);
    let (_, kind, _) = ps.last()?;
    let values = ps
        .iter()
        .map(|(_, _, v)| v.parse::<u64>().expect("integer sum"));
    Some(if *kind == "sum-delta" {
        values.sum()
    } else {
        values.max().unwrap_or(0)
    })
}

async fn produce(producer: &Producer, topic: &str, n: usize) {
    for i in 0..n {
        producer
            .send(ProducerRecord::new(topic).value(format!("v{i}")))
            .await
            .expect("enqueue")
            .await
            .expect("delivered");
    }
}

#[tokio::test]
async fn producer_pushes_the_subscribed_metrics_and_a_terminating_push_on_close() {
    let Some(bootstrap) = bootstrap("client_telemetry::producer_pushes") else {
        return;
    };
    let id = support::unique_topic("pk-telemetry-producer");
    let cluster = Cluster::connect(client(&bootstrap, &id).build().unwrap())
        .await
        .expect("cluster");
    let topic = support::unique_topic("telemetry");
    support::create_topic(&cluster, &topic, 1).await;
    subscribe(&cluster, &id, "org.apache.kafka.producer.", 500, &id).await;

    let producer = Producer::connect(
        ProducerConfig::builder()
            .client(client(&bootstrap, &id))
            .build()
            .expect("config"),
    )
    .await
    .expect("producer");
    let instance = producer
        .client_instance_id(Duration::from_secs(10))
        .await
        .expect("the broker assigns a client instance id");
    produce(&producer, &topic, 40).await;
    let instance = instance.to_string();
    wait_for(
        &id,
        "a push counting the 40 records",
        Duration::from_secs(20),
        |l| counter_total(l, "org.apache.kafka.producer.record.send.total") == Some(40),
    )
    .await;
    producer
        .close(Duration::from_secs(10))
        .await
        .expect("close");
    let lines = wait_for(&id, "the terminating push", Duration::from_secs(10), |l| {
        l.iter().any(|f| f[0] == "push" && f[2] == "true")
    })
    .await;

    assert!(
        lines.iter().all(|f| f[0] != "undecodable"),
        "Kafka's OTLP decoder read every payload: {lines:#?}"
    );
    let pushes: Vec<_> = lines.iter().filter(|f| f[0] == "push").collect();
    assert!(pushes.iter().all(|f| f[1] == instance), "{pushes:#?}");
    assert_eq!(
        pushes.iter().filter(|f| f[2] == "true").count(),
        1,
        "exactly one terminating push: {pushes:#?}"
    );
    assert_eq!(
        pushes.last().unwrap()[2],
        "true",
        "the terminating push is the last"
    );
    // Prefix matching: only producer metrics, and those we keep.
    for f in lines.iter().filter(|f| f[0] == "point") {
        assert!(f[4].starts_with("org.apache.kafka.producer."), "{f:?}");
    }
    assert_eq!(
        counter_total(&lines, "org.apache.kafka.producer.record.send.total"),
        Some(40)
    );
    assert_eq!(
        counter_total(&lines, "org.apache.kafka.producer.record.error.total"),
        Some(0)
    );
    let latency = points(&lines, "org.apache.kafka.producer.request.latency.max");
    assert!(!latency.is_empty());
    assert!(latency.iter().all(|(_, kind, _)| *kind == "gauge"));
    assert!(
        latency
            .iter()
            .any(|(_, _, v)| v.parse::<f64>().expect("double") > 0.0),
        "{latency:?}"
    );
}

#[tokio::test]
async fn consumer_pushes_only_what_the_prefixes_select_and_follows_a_new_subscription() {
    let Some(bootstrap) = bootstrap("client_telemetry::consumer_pushes") else {
        return;
    };
    let id = support::unique_topic("pk-telemetry-consumer");
    let cluster = Cluster::connect(client(&bootstrap, &id).build().unwrap())
        .await
        .expect("cluster");
    let topic = support::unique_topic("telemetry");
    support::create_topic(&cluster, &topic, 1).await;
    let producer = Producer::with_cluster(
        cluster.clone(),
        ProducerConfig::builder()
            .client(client(&bootstrap, "pk-telemetry-feeder").enable_metrics_push(false))
            .build()
            .unwrap(),
    )
    .await
    .expect("producer");
    produce(&producer, &topic, 40).await;
    subscribe(
        &cluster,
        &id,
        "org.apache.kafka.consumer.fetch.manager.records",
        500,
        &id,
    )
    .await;

    let consumer = Consumer::connect(
        ConsumerConfig::builder()
            .bootstrap_servers(&bootstrap)
            .client(|c| {
                c.client_id(&id)
                    .request_timeout(Duration::from_secs(10))
                    .default_api_timeout(Duration::from_secs(30))
            })
            .auto_offset_reset(AutoOffsetReset::Earliest)
            .build()
            .expect("config"),
    )
    .await
    .expect("consumer");
    consumer.assign(vec![TopicPartition::new(topic.as_str(), 0)]);
    let mut got = 0;
    let deadline = Instant::now() + Duration::from_secs(20);
    while got < 40 && Instant::now() < deadline {
        got += consumer
            .poll(Duration::from_millis(500))
            .await
            .expect("poll")
            .len();
    }
    assert_eq!(got, 40);
    let lines = wait_for(
        &id,
        "a push counting the 40 records",
        Duration::from_secs(20),
        |l| {
            counter_total(
                l,
                "org.apache.kafka.consumer.fetch.manager.records.consumed.total",
            ) == Some(40)
        },
    )
    .await;
    for f in lines.iter().filter(|f| f[0] == "point") {
        assert!(
            f[4].starts_with("org.apache.kafka.consumer.fetch.manager.records"),
            "not subscribed: {f:?}"
        );
    }
    let lag = lines
        .iter()
        .find(|f| f[0] == "point" && f[4] == "org.apache.kafka.consumer.fetch.manager.records.lag")
        .expect("per-partition lag");
    assert_eq!(lag[5], "gauge");
    assert_eq!(lag[7], format!("topic={topic},partition=0"));

    // A new subscription: the next push is refused (UNKNOWN_SUBSCRIPTION_ID),
    // the client asks again and pushes what is asked now.
    subscribe(
        &cluster,
        &id,
        "org.apache.kafka.consumer.coordinator.",
        500,
        &id,
    )
    .await;
    let lines = wait_for(
        &id,
        "assigned.partitions after the change",
        Duration::from_secs(20),
        |l| {
            l.iter().any(|f| {
                f[0] == "point"
                    && f[4] == "org.apache.kafka.consumer.coordinator.assigned.partitions"
            })
        },
    )
    .await;
    let assigned = lines
        .iter()
        .find(|f| {
            f[0] == "point" && f[4] == "org.apache.kafka.consumer.coordinator.assigned.partitions"
        })
        .unwrap();
    assert_eq!(assigned[6].parse::<f64>().unwrap(), 1.0);
    assert!(
        lines.iter().all(|f| f[0] != "point"
            || !f[4].starts_with("org.apache.kafka.consumer.fetch.manager.bytes")),
        "bytes.consumed was never subscribed"
    );
    consumer.close().await.expect("close");
    wait_for(&id, "the terminating push", Duration::from_secs(10), |l| {
        l.iter().any(|f| f[0] == "push" && f[2] == "true")
    })
    .await;
}

#[tokio::test]
async fn enable_metrics_push_false_pushes_nothing() {
    let Some(bootstrap) = bootstrap("client_telemetry::disabled") else {
        return;
    };
    let id = support::unique_topic("pk-telemetry-off");
    let cluster = Cluster::connect(client(&bootstrap, &id).build().unwrap())
        .await
        .expect("cluster");
    let topic = support::unique_topic("telemetry");
    support::create_topic(&cluster, &topic, 1).await;
    subscribe(&cluster, &id, "*", 200, &id).await;
    let producer = Producer::connect(
        ProducerConfig::builder()
            .client(
                client(&bootstrap, &id)
                    .set("enable.metrics.push", "false")
                    .unwrap(),
            )
            .build()
            .expect("config"),
    )
    .await
    .expect("producer");
    produce(&producer, &topic, 10).await;
    assert_eq!(
        producer
            .client_instance_id(Duration::from_millis(500))
            .await,
        None
    );
    // Ten push intervals.
    tokio::time::sleep(Duration::from_secs(2)).await;
    producer
        .close(Duration::from_secs(10))
        .await
        .expect("close");
    tokio::time::sleep(Duration::from_millis(500)).await;
    let lines = recorded(&id);
    assert!(
        lines.iter().all(|f| f[0] != "push" && f[0] != "point"),
        "pushed although disabled: {lines:#?}"
    );
}

/// The shared broker has no telemetry reporter, so it does not offer the
/// telemetry APIs: the client stops asking at once, and producing and
/// closing are unaffected.
#[tokio::test]
async fn a_broker_without_a_telemetry_reporter_is_left_alone() {
    let Some(bootstrap) = support::bootstrap("client_telemetry::no_reporter") else {
        return;
    };
    if !support::real_broker_only("client_telemetry::no_reporter", "client telemetry") {
        return;
    }
    let cluster = Cluster::connect(support::config(&bootstrap))
        .await
        .expect("cluster");
    let conn = cluster.any_connection(Workload::Admin).await.unwrap();
    let offered = conn.api_versions().broker_range(72).is_some();
    let topic = support::unique_topic("telemetry-none");
    support::create_topic(&cluster, &topic, 1).await;
    let producer = Producer::connect(
        ProducerConfig::builder()
            .client(client(&bootstrap, "pk-telemetry-none"))
            .build()
            .unwrap(),
    )
    .await
    .expect("producer");
    produce(&producer, &topic, 5).await;
    let id = producer.client_instance_id(Duration::from_secs(2)).await;
    if !offered {
        assert_eq!(id, None, "no subscription from a broker without API 72");
    }
    let t = Instant::now();
    producer
        .close(Duration::from_secs(10))
        .await
        .expect("close");
    assert!(
        t.elapsed() < Duration::from_secs(2),
        "close took {:?}",
        t.elapsed()
    );
}
