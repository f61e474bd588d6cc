//! Avro records through a schema registry and the real broker (feature
//! `schema-registry`): the producer writes with [`AvroSerializer`], the
//! broker stores the Confluent-framed bytes, a plain Fetch reads them back
//! and [`AvroDeserializer`] decodes them with the schema fetched by id.
//!
//! The registry is found through `PUREKAFKA_SCHEMA_REGISTRY_URL`
//! (`scripts/test` starts the testkit's `fake-schema-registry`). Without it
//! the test prints `SKIPPED`, except under `CI=true`, where it fails.

use bytes::Bytes;
use purekafka::producer::{Producer, ProducerConfig, ProducerRecord};
use purekafka::schema_registry::apache_avro::types::Value;
use purekafka::schema_registry::{
    AvroDeserializer, AvroSerializer, Part, RegistryConfig, SchemaRegistryClient, SerdeConfig,
    Version,
};
use purekafka::streams::Deserializer;
use purekafka::Cluster;

use crate::support::{self, read::read_partition};

const SCHEMA: &str = r#"{"type":"record","name":"Payment","namespace":"it.purekafka","fields":[{"name":"id","type":"long"},{"name":"amount","type":"double"},{"name":"note","type":["null","string"],"default":null}]}"#;

fn registry_url(test: &str) -> Option<String> {
    match std::env::var("PUREKAFKA_SCHEMA_REGISTRY_URL") {
        Ok(url) if !url.trim().is_empty() => Some(url),
        _ => {
            let ci = std::env::var("CI").is_ok_and(|v| v == "true");
            assert!(
                !ci,
                "{test}: PUREKAFKA_SCHEMA_REGISTRY_URL is unset (CI=true forbids skipping; scripts/test starts fake-schema-registry)"
            );
            eprintln!("SKIPPED {test}: PUREKAFKA_SCHEMA_REGISTRY_URL is unset");
            None
        }
    }
}

/// What every test here starts from: the registry URL, the broker, and a
/// fresh single-partition topic named after `prefix`. `None` when the
/// registry or broker is not configured (outside CI only).
struct Setup {
    url: String,
    bootstrap: String,
    cluster: Cluster,
    topic: String,
}

async fn setup(test: &str, prefix: &str) -> Option<Setup> {
    let url = registry_url(test)?;
    let bootstrap = support::bootstrap(test)?;
    let cluster = Cluster::connect(support::config(&bootstrap)).await.unwrap();
    let topic = support::unique_topic(prefix);
    support::create_topic(&cluster, &topic, 1).await;
    Some(Setup {
        url,
        bootstrap,
        cluster,
        topic,
    })
}

fn payment(id: i64, amount: f64, note: Option<&str>) -> Value {
    Value::Record(vec![
        ("id".into(), Value::Long(id)),
        ("amount".into(), Value::Double(amount)),
        (
            "note".into(),
            match note {
                Some(n) => Value::Union(1, Box::new(Value::String(n.into()))),
                None => Value::Union(0, Box::new(Value::Null)),
            },
        ),
    ])
}

#[tokio::test]
async fn avro_values_round_trip_through_the_broker_and_the_registry() {
    let test = "schema_registry::avro_values_round_trip_through_the_broker_and_the_registry";
    let Some(Setup {
        url,
        bootstrap,
        cluster,
        topic,
    }) = setup(test, "registry-avro").await
    else {
        return;
    };

    let registry = SchemaRegistryClient::new(RegistryConfig::new(url.clone())).unwrap();
    let serializer = AvroSerializer::new(
        registry.clone(),
        SCHEMA,
        Part::Value,
        SerdeConfig::default(),
    )
    .unwrap();
    let id = serializer.prepare(&topic).await.unwrap();
    let producer = Producer::connect(
        ProducerConfig::builder()
            .bootstrap_servers(&bootstrap)
            .build()
            .unwrap(),
    )
    .await
    .unwrap();
    let values = [
        payment(1, 9.5, None),
        payment(2, 0.25, Some("refund")),
        payment(3, -1.0, Some("ключ")),
    ];
    for v in &values {
        let record = ProducerRecord::new(topic.as_str())
            .value_with(&serializer, v)
            .unwrap();
        producer.send(record).await.unwrap().await.unwrap();
    }

    // The registry names the subject after the topic (TopicNameStrategy).
    let latest = registry
        .version(&format!("{topic}-value"), Version::Latest)
        .await
        .unwrap();
    assert_eq!(latest.id, id);

    // A second client (empty caches) resolves the ids it sees, then decodes.
    let stored = read_partition(&cluster, &topic, 0).await;
    let payloads: Vec<Bytes> = stored.iter().map(|r| r.value.clone().unwrap()).collect();
    assert_eq!(payloads.len(), values.len());
    let deserializer =
        AvroDeserializer::new(SchemaRegistryClient::new(RegistryConfig::new(url)).unwrap());
    deserializer
        .resolve(payloads.iter().map(|p| &p[..]))
        .await
        .unwrap();
    for (payload, expected) in payloads.iter().zip(&values) {
        assert_eq!(payload[0], 0, "magic byte");
        assert_eq!(&payload[1..5], &id.to_be_bytes());
        assert_eq!(
            &deserializer.deserialize(&topic, payload).unwrap(),
            expected
        );
    }
}

// The README's "Schema registry" example, compiled and run here (the README
// doctests build without the feature). Keep the two in step.
const PAYMENT: &str = r#"{"type":"record","name":"Payment","namespace":"shop",
  "fields":[{"name":"id","type":"long"},{"name":"amount","type":"double"}]}"#;

async fn readme_example(
    bootstrap: &str,
    registry_url: &str,
    topic: &str,
    group: &str,
) -> Result<Vec<Value>, Box<dyn std::error::Error>> {
    use purekafka::{AutoOffsetReset, Consumer, ConsumerConfig};
    use std::time::Duration;

    let props = [
        ("schema.registry.url", registry_url),
        ("auto.register.schemas", "true"),
    ];
    let registry = SchemaRegistryClient::new(RegistryConfig::from_properties(props)?)?;

    // Producer side: resolve the schema id once (async), then serialize
    // without I/O on every send.
    let serializer = AvroSerializer::new(
        registry.clone(),
        PAYMENT,
        Part::Value,
        SerdeConfig::from_properties(props)?,
    )?;
    serializer.prepare(topic).await?;
    let producer = Producer::connect(
        ProducerConfig::builder()
            .bootstrap_servers(bootstrap)
            .build()?,
    )
    .await?;
    let payment = Value::Record(vec![
        ("id".into(), Value::Long(1)),
        ("amount".into(), Value::Double(9.5)),
    ]);
    let record = ProducerRecord::new(topic).value_with(&serializer, &payment)?;
    producer.send(record).await?.await?;

    // Consumer side: after each poll, fetch the schemas of ids not seen yet
    // (async), then deserialize without I/O.
    let deserializer = AvroDeserializer::new(registry);
    let consumer = Consumer::connect(
        ConsumerConfig::builder()
            .bootstrap_servers(bootstrap)
            .group_id(group)
            .auto_offset_reset(AutoOffsetReset::Earliest)
            .build()?,
    )
    .await?;
    consumer.subscribe([topic])?;
    let mut values = Vec::new();
    while values.is_empty() {
        let records = consumer.poll(Duration::from_secs(1)).await?;
        deserializer
            .resolve(records.iter().filter_map(|r| r.value.as_deref()))
            .await?;
        for r in &records {
            if let Some(bytes) = &r.value {
                values.push(deserializer.deserialize(topic, bytes)?);
            }
        }
    }
    Ok(values)
}

#[tokio::test]
async fn the_readme_example_runs() {
    let test = "schema_registry::the_readme_example_runs";
    let Some(Setup {
        url,
        bootstrap,
        topic,
        ..
    }) = setup(test, "registry-readme").await
    else {
        return;
    };
    let values = tokio::time::timeout(
        std::time::Duration::from_secs(60),
        // A fresh group per run: a fixed one would wait out the last run's
        // member (the README names it `payments-reader`).
        readme_example(
            &bootstrap,
            &url,
            &topic,
            &support::unique_topic("payments-reader"),
        ),
    )
    .await
    .expect("the example finished within 60 s")
    .unwrap();
    assert_eq!(
        values,
        [Value::Record(vec![
            ("id".into(), Value::Long(1)),
            ("amount".into(), Value::Double(9.5)),
        ])]
    );
}

/// The Avro deserializer as a streams source: prewarmed for the input
/// subject, it decodes every record inside the runtime without I/O.
#[tokio::test]
async fn a_stream_reads_avro_values_through_the_deserializer() {
    use purekafka::streams::{BytesDeserializer, Streams, StreamsConfig};
    use std::sync::{Arc, Mutex};
    use std::time::{Duration, Instant};

    let test = "schema_registry::a_stream_reads_avro_values_through_the_deserializer";
    let Some(Setup {
        url,
        bootstrap,
        topic,
        ..
    }) = setup(test, "registry-streams").await
    else {
        return;
    };
    let registry = SchemaRegistryClient::new(RegistryConfig::new(url.clone())).unwrap();
    let serializer =
        AvroSerializer::new(registry, SCHEMA, Part::Value, SerdeConfig::default()).unwrap();
    serializer.prepare(&topic).await.unwrap();

    let deserializer =
        AvroDeserializer::new(SchemaRegistryClient::new(RegistryConfig::new(url)).unwrap());
    deserializer
        .prewarm(&format!("{topic}-value"))
        .await
        .unwrap();
    let seen: Arc<Mutex<Vec<Value>>> = Arc::default();
    let sink = seen.clone();
    let config = StreamsConfig::builder(support::unique_topic("registry-app"), &bootstrap)
        .build()
        .unwrap();
    let running = Streams::topology(config)
        .source(topic.as_str(), BytesDeserializer, deserializer)
        .for_each_async(move |rec| {
            let sink = sink.clone();
            async move {
                sink.lock().unwrap().push(rec.value);
                Ok(())
            }
        })
        .build()
        .start()
        .await
        .unwrap();

    let producer = Producer::connect(
        ProducerConfig::builder()
            .bootstrap_servers(&bootstrap)
            .build()
            .unwrap(),
    )
    .await
    .unwrap();
    let values = [payment(10, 1.5, None), payment(11, 2.5, Some("b"))];
    for v in &values {
        let record = ProducerRecord::new(topic.as_str())
            .value_with(&serializer, v)
            .unwrap();
        producer.send(record).await.unwrap().await.unwrap();
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    while seen.lock().unwrap().len() < values.len() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    running.shutdown().await.unwrap();
    assert_eq!(*seen.lock().unwrap(), values);
}

/// Protobuf through the registry and the broker (feature
/// `schema-registry-protobuf`): a prost-generated type and a dynamic message
/// whose `.proto` imports another file, registered as a schema reference.
#[cfg(feature = "schema-registry-protobuf")]
mod protobuf {
    use super::*;
    use purekafka::producer::Serializer;
    use purekafka::schema_registry::prost::Message as _;
    use purekafka::schema_registry::prost_reflect::{
        DynamicMessage, ReflectMessage, Value as PbValue,
    };
    use purekafka::schema_registry::{
        DynamicProtobufDeserializer, ProtoImport, ProtobufDeserializer, ProtobufSchema,
        ProtobufSerializer,
    };

    const MONEY: &str = r#"syntax = "proto3";
package common;
message Money { string currency = 1; int64 cents = 2; }
"#;
    const ORDERS: &str = r#"syntax = "proto3";
package shop;
import "common/money.proto";
message Order {
  int64 id = 1;
  string item = 2;
  message Line { string sku = 1; common.Money price = 2; }
}
"#;

    /// What prost-build would generate for `shop.Order`.
    #[derive(Clone, PartialEq, purekafka::schema_registry::prost::Message)]
    #[prost(prost_path = "::purekafka::schema_registry::prost")]
    struct Order {
        #[prost(int64, tag = "1")]
        id: i64,
        #[prost(string, tag = "2")]
        item: String,
    }

    fn schema() -> ProtobufSchema {
        ProtobufSchema::with_imports(ORDERS, vec![ProtoImport::new("common/money.proto", MONEY)])
            .unwrap()
    }

    const SHOP: &str = include_str!("../testkit/src/registry/golden/shop.proto");
    /// Written by protobuf-java with the Confluent framing
    /// (testkit/src/registry/golden/GenerateProtobufGolden.java).
    const ORDER_ID1: &[u8] = include_bytes!("../testkit/src/registry/golden/shop-order-id1.bin");
    const NOTE_ID16909060: &[u8] =
        include_bytes!("../testkit/src/registry/golden/shop-note-id16909060.bin");

    /// `golden` with its schema id replaced by `id` (the shared registry
    /// numbers schemas in the order they arrive).
    fn with_id(golden: &[u8], id: u32) -> Bytes {
        let mut out = golden.to_vec();
        out[1..5].copy_from_slice(&id.to_be_bytes());
        Bytes::from(out)
    }

    #[tokio::test]
    async fn java_written_messages_decode_and_encode_to_the_same_bytes() {
        let test =
            "schema_registry::protobuf::java_written_messages_decode_and_encode_to_the_same_bytes";
        let Some(url) = registry_url(test) else {
            return;
        };
        assert_eq!(&ORDER_ID1[1..5], &1u32.to_be_bytes());
        assert_eq!(&NOTE_ID16909060[1..5], &0x0102_0304u32.to_be_bytes());
        let topic = support::unique_topic("registry-golden");
        let registry = SchemaRegistryClient::new(RegistryConfig::new(url.clone())).unwrap();
        let schema = ProtobufSchema::new(SHOP).unwrap();
        assert_eq!(
            schema.message_indexes("shop.Order.Line.Note"),
            Some(vec![0, 0, 0])
        );
        let record = SerdeConfig {
            value_subject_name_strategy:
                purekafka::schema_registry::SubjectNameStrategy::TopicRecord,
            ..SerdeConfig::default()
        };
        let de = DynamicProtobufDeserializer::new(
            SchemaRegistryClient::new(RegistryConfig::new(url)).unwrap(),
        );
        let mut decoded = Vec::new();
        for (golden, name) in [
            (ORDER_ID1, "shop.Order"),
            (NOTE_ID16909060, "shop.Order.Line.Note"),
        ] {
            let ser = ProtobufSerializer::<DynamicMessage>::new(
                registry.clone(),
                ProtobufSchema::new(SHOP).unwrap(),
                name,
                Part::Value,
                record.clone(),
            )
            .unwrap();
            let id = ser.prepare(&topic).await.unwrap();
            let bytes = with_id(golden, id);
            de.resolve([&bytes[..]]).await.unwrap();
            let message = de.deserialize(&topic, &bytes).unwrap();
            assert_eq!(message.descriptor().full_name(), name);
            assert_eq!(ser.serialize(&topic, &message).unwrap(), bytes, "{name}");
            decoded.push(message);
        }
        let order = &decoded[0];
        let field = |name: &str| order.get_field_by_name(name).unwrap().into_owned();
        assert_eq!(field("id"), PbValue::I64(7));
        assert_eq!(field("item"), PbValue::String("ключ".into()));
        assert_eq!(field("delta"), PbValue::I32(-3));
        assert_eq!(field("offset"), PbValue::I64(-5));
        assert_eq!(field("paid"), PbValue::Bool(true));
        assert_eq!(field("price"), PbValue::F64(2.5));
        assert_eq!(
            field("raw"),
            PbValue::Bytes(Bytes::from_static(&[0, 1, 0xff]))
        );
        assert_eq!(field("status"), PbValue::EnumNumber(2));
        assert_eq!(
            field("sizes"),
            PbValue::List(vec![PbValue::I32(1), PbValue::I32(300)])
        );
    }

    #[tokio::test]
    async fn typed_and_dynamic_messages_round_trip_with_a_reference() {
        let test =
            "schema_registry::protobuf::typed_and_dynamic_messages_round_trip_with_a_reference";
        let Some(Setup {
            url,
            bootstrap,
            cluster,
            topic,
        }) = setup(test, "registry-protobuf").await
        else {
            return;
        };
        let registry = SchemaRegistryClient::new(RegistryConfig::new(url.clone())).unwrap();
        let typed = ProtobufSerializer::<Order>::new(
            registry.clone(),
            schema(),
            "shop.Order",
            Part::Value,
            SerdeConfig::default(),
        )
        .unwrap();
        let order_id = typed.prepare(&topic).await.unwrap();
        // The record strategy: the nested type gets a subject of its own.
        let config = SerdeConfig {
            value_subject_name_strategy: purekafka::schema_registry::SubjectNameStrategy::Record,
            ..SerdeConfig::default()
        };
        let dynamic = ProtobufSerializer::<DynamicMessage>::new(
            registry.clone(),
            schema(),
            "shop.Order.Line",
            Part::Value,
            config,
        )
        .unwrap();
        let line_id = dynamic.prepare(&topic).await.unwrap();
        assert_eq!(dynamic.message_indexes(), [0, 0]);

        // The import went in under its own subject, referenced by name.
        let latest = registry
            .version(&format!("{topic}-value"), Version::Latest)
            .await
            .unwrap();
        assert_eq!(latest.id, order_id);
        assert_eq!(
            latest.schema.schema_type,
            purekafka::schema_registry::SchemaType::Protobuf
        );
        assert_eq!(latest.schema.references.len(), 1);
        assert_eq!(latest.schema.references[0].name, "common/money.proto");
        assert_eq!(latest.schema.references[0].subject, "common/money.proto");
        let by_record = registry
            .version("shop.Order.Line", Version::Latest)
            .await
            .unwrap();
        assert_eq!(by_record.id, line_id);

        let producer = Producer::connect(
            ProducerConfig::builder()
                .bootstrap_servers(&bootstrap)
                .build()
                .unwrap(),
        )
        .await
        .unwrap();
        let order = Order {
            id: 42,
            item: "tea".into(),
        };
        let s = schema();
        let mut line = DynamicMessage::new(s.message("shop.Order.Line").unwrap());
        line.set_field_by_name("sku", PbValue::String("TEA-1".into()));
        let money = s
            .message("shop.Order.Line")
            .unwrap()
            .get_field_by_name("price")
            .unwrap()
            .kind();
        let mut price = DynamicMessage::new(money.as_message().unwrap().clone());
        price.set_field_by_name("currency", PbValue::String("EUR".into()));
        price.set_field_by_name("cents", PbValue::I64(250));
        line.set_field_by_name("price", PbValue::Message(price));
        producer
            .send(
                ProducerRecord::new(topic.as_str())
                    .value_with(&typed, &order)
                    .unwrap(),
            )
            .await
            .unwrap()
            .await
            .unwrap();
        producer
            .send(
                ProducerRecord::new(topic.as_str())
                    .value_with(&dynamic, &line)
                    .unwrap(),
            )
            .await
            .unwrap()
            .await
            .unwrap();

        let stored = read_partition(&cluster, &topic, 0).await;
        let payloads: Vec<Bytes> = stored.iter().map(|r| r.value.clone().unwrap()).collect();
        assert_eq!(payloads.len(), 2);
        // Magic byte, schema id, then the single-byte index path [0].
        let mut header = vec![0u8];
        header.extend(order_id.to_be_bytes());
        header.push(0);
        assert_eq!(&payloads[0][..6], &header[..]);
        // Typed: no registry needed.
        let back: Order = ProtobufDeserializer::new()
            .deserialize(&topic, &payloads[0])
            .unwrap();
        assert_eq!(back, order);
        // Dynamic: a fresh client fetches both schemas and the reference.
        let de = DynamicProtobufDeserializer::new(
            SchemaRegistryClient::new(RegistryConfig::new(url)).unwrap(),
        );
        de.resolve(payloads.iter().map(|p| &p[..])).await.unwrap();
        let first = de.deserialize(&topic, &payloads[0]).unwrap();
        assert_eq!(first.descriptor().full_name(), "shop.Order");
        assert_eq!(
            first.get_field_by_name("item").unwrap().as_str(),
            Some("tea")
        );
        let second = de.deserialize(&topic, &payloads[1]).unwrap();
        assert_eq!(second.descriptor().full_name(), "shop.Order.Line");
        // Descriptors from two pools differ; the fields and bytes match.
        assert_eq!(
            second.get_field_by_name("sku").unwrap().as_str(),
            Some("TEA-1")
        );
        assert_eq!(second.encode_to_vec(), line.encode_to_vec());
    }
    /// A diamond of imports two deep: `shop.Basket` imports `lines.proto`
    /// and `fees.proto`, which both import `money.proto`. Each file is
    /// registered once, references exactly the files it imports, and a
    /// fresh dynamic deserializer follows the chain to decode the nested
    /// type.
    #[tokio::test]
    async fn imports_of_imports_are_registered_once_with_their_own_references() {
        let test = "schema_registry::protobuf::imports_of_imports_are_registered_once_with_their_own_references";
        let Some(url) = registry_url(test) else {
            return;
        };
        let topic = support::unique_topic("registry-nested");
        // Subjects of their own per run: the fake registry is shared.
        let sub = |name: &str| format!("{topic}/{name}");
        let money = "syntax = \"proto3\"; package nested; message Money { int64 cents = 1; }";
        let lines = "syntax = \"proto3\"; package nested; import \"money.proto\"; message Line { string sku = 1; Money price = 2; }";
        let fees = "syntax = \"proto3\"; package nested; import \"money.proto\"; message Fee { Money amount = 1; }";
        let basket = "syntax = \"proto3\"; package nested; import \"lines.proto\"; import \"fees.proto\"; message Basket { repeated Line lines = 1; Fee fee = 2; }";
        let import = |name: &str, text: &str| ProtoImport {
            name: name.into(),
            subject: sub(name),
            text: text.into(),
        };
        let schema = ProtobufSchema::with_imports(
            basket,
            vec![
                import("lines.proto", lines),
                import("fees.proto", fees),
                import("money.proto", money),
            ],
        )
        .unwrap();
        let registry = SchemaRegistryClient::new(RegistryConfig::new(url.clone())).unwrap();
        let ser = ProtobufSerializer::<DynamicMessage>::new(
            registry.clone(),
            schema.clone(),
            "nested.Basket",
            Part::Value,
            SerdeConfig::default(),
        )
        .unwrap();
        let id = ser.prepare(&topic).await.unwrap();

        let fresh = SchemaRegistryClient::new(RegistryConfig::new(url.clone())).unwrap();
        let names = |refs: &[purekafka::schema_registry::SchemaReference]| {
            let mut n: Vec<(String, String)> = refs
                .iter()
                .map(|r| (r.name.clone(), r.subject.clone()))
                .collect();
            n.sort();
            n
        };
        let main = fresh
            .version(&format!("{topic}-value"), Version::Latest)
            .await
            .unwrap();
        assert_eq!(main.id, id);
        assert_eq!(
            names(&main.schema.references),
            [
                ("fees.proto".to_owned(), sub("fees.proto")),
                ("lines.proto".to_owned(), sub("lines.proto")),
            ]
        );
        for file in ["lines.proto", "fees.proto"] {
            let registered = fresh.version(&sub(file), Version::Latest).await.unwrap();
            assert_eq!(
                names(&registered.schema.references),
                [("money.proto".to_owned(), sub("money.proto"))],
                "{file}"
            );
        }
        let leaf = fresh
            .version(&sub("money.proto"), Version::Latest)
            .await
            .unwrap();
        assert!(leaf.schema.references.is_empty());
        assert_eq!(fresh.versions(&sub("money.proto")).await.unwrap(), [1]);

        // A basket with a nested Money two imports away, decoded by a
        // deserializer that starts from the id alone.
        let pool_basket = schema.message("nested.Basket").unwrap();
        let mut basket_msg = DynamicMessage::new(pool_basket.clone());
        let fee_kind = pool_basket.get_field_by_name("fee").unwrap().kind();
        let fee_desc = fee_kind.as_message().unwrap().clone();
        let money_kind = fee_desc.get_field_by_name("amount").unwrap().kind();
        let mut amount = DynamicMessage::new(money_kind.as_message().unwrap().clone());
        amount.set_field_by_name("cents", PbValue::I64(1234));
        let mut fee = DynamicMessage::new(fee_desc);
        fee.set_field_by_name("amount", PbValue::Message(amount));
        basket_msg.set_field_by_name("fee", PbValue::Message(fee));
        let bytes = ser.serialize(&topic, &basket_msg).unwrap();
        let de = DynamicProtobufDeserializer::new(fresh);
        de.resolve([&bytes[..]]).await.unwrap();
        let back = de.deserialize(&topic, &bytes).unwrap();
        assert_eq!(back.descriptor().full_name(), "nested.Basket");
        let fee = back.get_field_by_name("fee").unwrap();
        let amount = fee
            .as_message()
            .unwrap()
            .get_field_by_name("amount")
            .unwrap();
        assert_eq!(
            amount
                .as_message()
                .unwrap()
                .get_field_by_name("cents")
                .unwrap()
                .into_owned(),
            PbValue::I64(1234)
        );
        assert_eq!(back.encode_to_vec(), basket_msg.encode_to_vec());
    }
}

/// JSON Schema validation against the registry (feature
/// `schema-registry-json-schema`): the serializer refuses a value that does
/// not match, naming subject, schema id and path; the validating
/// deserializer checks what it reads against the schema fetched by id.
#[cfg(feature = "schema-registry-json-schema")]
mod json_schema {
    use super::*;
    use purekafka::producer::Serializer;
    use purekafka::schema_registry::{JsonSchemaSerializer, ValidatingJsonSchemaDeserializer};
    use serde_json::json;

    const PERSON: &str = r#"{"$schema":"https://json-schema.org/draft/2020-12/schema","title":"Person","type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer","minimum":0}},"required":["name"]}"#;

    #[tokio::test]
    async fn values_are_validated_on_both_sides() {
        let test = "schema_registry::json_schema::values_are_validated_on_both_sides";
        let Some(url) = registry_url(test) else {
            return;
        };
        let topic = support::unique_topic("registry-json");
        let registry = SchemaRegistryClient::new(RegistryConfig::new(url.clone())).unwrap();
        let validating = SerdeConfig {
            json_fail_invalid_schema: true,
            ..SerdeConfig::default()
        };
        let ser: JsonSchemaSerializer<serde_json::Value> =
            JsonSchemaSerializer::new(registry.clone(), PERSON, Part::Value, validating).unwrap();
        let id = ser.prepare(&topic).await.unwrap();
        let good = ser
            .serialize(&topic, &json!({"name": "Ada", "age": 36}))
            .unwrap();
        let err = ser
            .serialize(&topic, &json!({"name": "Ada", "age": -4}))
            .unwrap_err()
            .to_string();
        assert!(err.contains(&format!("subject `{topic}-value`")), "{err}");
        assert!(err.contains(&format!("schema id {id}")), "{err}");
        assert!(err.contains("at `/age`"), "{err}");

        // A producer at the default (json.fail.invalid.schema=false, as in
        // Java) wrote a bad document under the same id; the validating
        // deserializer refuses it, reads the good one.
        let lax: JsonSchemaSerializer<serde_json::Value> =
            JsonSchemaSerializer::new(registry, PERSON, Part::Value, SerdeConfig::default())
                .unwrap();
        assert_eq!(lax.prepare(&topic).await.unwrap(), id);
        let bad = lax.serialize(&topic, &json!({"age": 1})).unwrap();

        let de = ValidatingJsonSchemaDeserializer::<serde_json::Value>::new(
            SchemaRegistryClient::new(RegistryConfig::new(url)).unwrap(),
        );
        let before = de.deserialize(&topic, &good).unwrap_err().to_string();
        assert!(before.contains("not compiled yet"), "{before}");
        de.resolve([&good[..], &bad[..]]).await.unwrap();
        assert_eq!(
            de.deserialize(&topic, &good).unwrap(),
            json!({"name": "Ada", "age": 36})
        );
        let refused = de.deserialize(&topic, &bad).unwrap_err().to_string();
        assert!(refused.contains(&format!("schema id {id}")), "{refused}");
        assert!(refused.contains("at `/`"), "{refused}");
    }
}

/// A record claiming a huge string length decodes to an error naming the
/// claim, not an out-of-memory abort (apache-avro's allocation cap, set by
/// the serdes to purekafka's default).
#[tokio::test]
async fn a_hostile_avro_length_is_an_error_not_an_allocation() {
    let test = "schema_registry::a_hostile_avro_length_is_an_error_not_an_allocation";
    let Some(url) = registry_url(test) else {
        return;
    };
    let subject = format!("{}-value", support::unique_topic("registry-hostile"));
    let registry = SchemaRegistryClient::new(RegistryConfig::new(url)).unwrap();
    let id = registry
        .register(
            &subject,
            &purekafka::schema_registry::Schema::avro(
                r#"{"type":"record","name":"Hostile","fields":[{"name":"s","type":"string"}]}"#,
            ),
        )
        .await
        .unwrap();
    let deserializer = AvroDeserializer::new(registry);
    // Header, then the string's length: zig-zag varint of 2^40.
    let mut record = vec![0u8];
    record.extend(id.to_be_bytes());
    record.extend([0x80, 0x80, 0x80, 0x80, 0x80, 0x40]);
    let record = Bytes::from(record);
    deserializer.resolve([&record[..]]).await.unwrap();
    let err = deserializer
        .deserialize("hostile", &record)
        .unwrap_err()
        .to_string();
    assert!(err.contains(&(1u64 << 40).to_string()), "{err}");
    assert!(err.contains(&format!("schema id {id}")), "{err}");
}
