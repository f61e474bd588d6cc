//! The README's "Testing your application" example, kept compiling and
//! passing: a test that starts Kafka in a container, produces, consumes, and
//! runs a small streams app end to end.
//!
//! Needs a container engine (`DOCKER_HOST`) and the image
//! (`PUREKAFKA_KAFKA_IMAGE`, default `apache/kafka:4.4.0`). Without an engine
//! it prints `SKIPPED` and returns, unless `CI=true`.

use std::time::Duration;

use purekafka::admin::NewTopic;
use purekafka::producer::serializer::StringSerializer;
use purekafka::producer::{Producer, ProducerRecord};
use purekafka::streams::{Streams, StreamsConfig, StringDeserializer};
use purekafka::{Admin, AutoOffsetReset, Consumer};
use purekafka_testkit::container::Error;
use purekafka_testkit::KafkaContainer;

#[tokio::test]
async fn uppercases_orders_end_to_end() {
    // One Kafka node in a container; dropped (and removed) at the end of the test.
    let kafka = match KafkaContainer::builder().start().await {
        Ok(kafka) => kafka,
        Err(e @ Error::EngineUnreachable { .. }) if std::env::var("CI").is_err() => {
            eprintln!("SKIPPED uppercases_orders_end_to_end: {e}");
            return;
        }
        Err(e) => panic!("{e}"),
    };

    let admin = Admin::connect(kafka.client_config().build().unwrap())
        .await
        .unwrap();
    let topics = [NewTopic::new("orders", 1), NewTopic::new("orders-upper", 1)];
    for (topic, result) in admin.create_topics(&topics, false).await.unwrap() {
        result.unwrap_or_else(|e| panic!("create {topic}: {e}"));
    }

    // Produce.
    let producer = Producer::connect(kafka.producer_config().build().unwrap())
        .await
        .unwrap();
    for order in ["apples", "pears", "plums"] {
        producer
            .send(ProducerRecord::new("orders").key(order).value(order))
            .await
            .unwrap()
            .await
            .unwrap();
    }
    producer.close(Duration::from_secs(10)).await.unwrap();

    // The application under test: a streams app that upper-cases orders.
    let config = StreamsConfig::builder("uppercaser", kafka.bootstrap_servers())
        .build()
        .unwrap();
    let app = Streams::topology(config)
        .source("orders", StringDeserializer, StringDeserializer)
        .map(|r| {
            let upper = r.value.to_uppercase();
            Ok(r.with_value(upper))
        })
        .to("orders-upper", StringSerializer, StringSerializer)
        .build()
        .start()
        .await
        .unwrap();

    // Consume its output.
    let consumer = Consumer::connect(
        kafka
            .consumer_config()
            .group_id("checker")
            .auto_offset_reset(AutoOffsetReset::Earliest)
            .build()
            .unwrap(),
    )
    .await
    .unwrap();
    consumer.subscribe(["orders-upper"]).unwrap();
    let mut seen = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while seen.len() < 3 {
        assert!(tokio::time::Instant::now() < deadline, "saw only {seen:?}");
        for r in consumer.poll(Duration::from_secs(1)).await.unwrap() {
            seen.push(String::from_utf8_lossy(r.value.as_deref().unwrap_or_default()).into_owned());
        }
    }
    assert_eq!(seen, ["APPLES", "PEARS", "PLUMS"]);

    consumer.close().await.unwrap();
    app.shutdown().await.unwrap();
}
