//! The schema-registry serdes against a real registry: Apicurio Registry
//! through its Confluent-compatible API (`/apis/ccompat/v7`), started by
//! `scripts/schema-registry` (see integration/apicurio/pom.xml for the
//! release and why). Avro, Protobuf (with an import registered as a
//! reference) and JSON Schema values are registered, produced to the real
//! broker, read back and decoded with fresh clients; a compatibility level
//! set through the registry decides what it accepts.
//!
//! The registry is found through `PUREKAFKA_APICURIO_URL` (`scripts/test`
//! starts it in the background and sets it). A registry still starting is
//! waited for, up to `PUREKAFKA_APICURIO_WAIT_SECS` (default 900: on a
//! machine with an empty Maven cache, assembling it took 588 s here), once
//! per run: after a failed wait the other tests fail at once. Without
//! the variable each test prints `SKIPPED`, except under `CI=true`, where it
//! fails.
//!
//! The tests take turns ([`SERIAL`]): Apicurio 2.4.2's in-memory (H2)
//! storage fails concurrent registrations ("Concurrent update in table
//! SEQUENCES" in its log), and answers the loser with a 409 "artifact
//! version already exists".

use std::time::{Duration, Instant};

use bytes::Bytes;
use purekafka::producer::{Producer, ProducerConfig, ProducerRecord};
use purekafka::schema_registry::apache_avro::types::Value;
use purekafka::schema_registry::{
    AvroDeserializer, AvroSerializer, Compatibility, Part, RegistryConfig, Schema,
    SchemaRegistryClient, SerdeConfig, Version,
};
use purekafka::streams::Deserializer;
use purekafka::Cluster;

use crate::support::{self, read::read_partition};

/// Held for the whole of each test here (see the module docs).
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Why the registry was not reached, once a wait for it has failed.
static UNREACHABLE: std::sync::OnceLock<String> = std::sync::OnceLock::new();

/// A client for the registry once it answers; `None` when unset (outside
/// CI only).
async fn apicurio(test: &str) -> Option<SchemaRegistryClient> {
    let url = match std::env::var("PUREKAFKA_APICURIO_URL") {
        Ok(url) if !url.trim().is_empty() => url,
        _ => {
            let ci = std::env::var("CI").is_ok_and(|v| v == "true");
            assert!(
                !ci,
                "{test}: PUREKAFKA_APICURIO_URL is unset (CI=true forbids skipping; scripts/test starts the registry with scripts/schema-registry)"
            );
            eprintln!("SKIPPED {test}: PUREKAFKA_APICURIO_URL is unset");
            return None;
        }
    };
    if let Some(reason) = UNREACHABLE.get() {
        panic!("{test}: {reason}");
    }
    let wait = std::env::var("PUREKAFKA_APICURIO_WAIT_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(900);
    let deadline = Instant::now() + Duration::from_secs(wait);
    let client = SchemaRegistryClient::new(RegistryConfig::new(url.clone())).unwrap();
    loop {
        match client.subjects().await {
            Ok(_) => return Some(client),
            Err(_) if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            Err(e) => {
                let reason = format!("Apicurio Registry at {url} did not serve within {wait} s: {e} (its log is in target/schema-registry/)");
                let reason = UNREACHABLE.get_or_init(|| reason);
                panic!("{test}: {reason}");
            }
        }
    }
}

/// A fresh client for the same registry (empty caches).
fn fresh(client: &SchemaRegistryClient) -> SchemaRegistryClient {
    SchemaRegistryClient::new(client.config().clone()).unwrap()
}

struct Setup {
    _turn: tokio::sync::MutexGuard<'static, ()>,
    registry: SchemaRegistryClient,
    cluster: Cluster,
    producer: Producer,
    topic: String,
}

async fn setup(test: &str, prefix: &str) -> Option<Setup> {
    let turn = SERIAL.lock().await;
    let registry = apicurio(test).await?;
    let bootstrap = support::bootstrap(test)?;
    let cluster = Cluster::connect(support::config(&bootstrap)).await.unwrap();
    let topic = support::unique_topic(prefix);
    support::create_topic(&cluster, &topic, 1).await;
    let producer = Producer::connect(
        ProducerConfig::builder()
            .bootstrap_servers(&bootstrap)
            .build()
            .unwrap(),
    )
    .await
    .unwrap();
    Some(Setup {
        _turn: turn,
        registry,
        cluster,
        producer,
        topic,
    })
}

async fn send(producer: &Producer, record: ProducerRecord) {
    producer.send(record).await.unwrap().await.unwrap();
}

async fn stored_values(cluster: &Cluster, topic: &str) -> Vec<Bytes> {
    read_partition(cluster, topic, 0)
        .await
        .iter()
        .map(|r| r.value.clone().unwrap())
        .collect()
}

const READING_V1: &str = r#"{"type":"record","name":"Reading","namespace":"it.apicurio","fields":[{"name":"sensor","type":"string"},{"name":"celsius","type":"double"}]}"#;
/// V1 plus a field without a default: old data cannot be read with it.
const READING_NO_DEFAULT: &str = r#"{"type":"record","name":"Reading","namespace":"it.apicurio","fields":[{"name":"sensor","type":"string"},{"name":"celsius","type":"double"},{"name":"site","type":"string"}]}"#;
/// V1 plus a field with a default: backward compatible.
const READING_V2: &str = r#"{"type":"record","name":"Reading","namespace":"it.apicurio","fields":[{"name":"sensor","type":"string"},{"name":"celsius","type":"double"},{"name":"site","type":"string","default":"none"}]}"#;

fn reading(sensor: &str, celsius: f64) -> Value {
    Value::Record(vec![
        ("sensor".into(), Value::String(sensor.into())),
        ("celsius".into(), Value::Double(celsius)),
    ])
}

#[tokio::test]
async fn avro_values_round_trip_and_the_registry_enforces_backward_compatibility() {
    let test = "schema_registry_apicurio::avro_values_round_trip_and_the_registry_enforces_backward_compatibility";
    let Some(Setup {
        _turn,
        registry,
        cluster,
        producer,
        topic,
    }) = setup(test, "apicurio-avro").await
    else {
        return;
    };
    let subject = format!("{topic}-value");
    let v1 = AvroSerializer::new(
        registry.clone(),
        READING_V1,
        Part::Value,
        SerdeConfig::default(),
    )
    .unwrap();
    let id1 = v1.prepare(&topic).await.unwrap();
    let values = [reading("a", 21.5), reading("ключ", -3.25)];
    for v in &values {
        send(
            &producer,
            ProducerRecord::new(topic.as_str())
                .value_with(&v1, v)
                .unwrap(),
        )
        .await;
    }

    // The registry's own view: one version, under the topic strategy's
    // subject, with the id the serializer framed.
    assert_eq!(registry.versions(&subject).await.unwrap(), [1]);
    let latest = fresh(&registry)
        .version(&subject, Version::Latest)
        .await
        .unwrap();
    assert_eq!((latest.id, latest.version), (id1, 1));

    // Read back through the broker, decoded by a client with empty caches.
    let payloads = stored_values(&cluster, &topic).await;
    assert_eq!(payloads.len(), values.len());
    let de = AvroDeserializer::new(fresh(&registry));
    de.resolve(payloads.iter().map(|p| &p[..])).await.unwrap();
    for (payload, expected) in payloads.iter().zip(&values) {
        assert_eq!(payload[0], 0, "magic byte");
        assert_eq!(&payload[1..5], &id1.to_be_bytes());
        assert_eq!(&de.deserialize(&topic, payload).unwrap(), expected);
    }

    // BACKWARD, set on the subject: a required new field is refused, a
    // defaulted one accepted and registered as version 2.
    registry
        .set_compatibility(Some(&subject), Compatibility::Backward)
        .await
        .unwrap();
    assert_eq!(
        registry.compatibility(Some(&subject)).await.unwrap(),
        Compatibility::Backward
    );
    assert!(!registry
        .is_compatible(&subject, Version::Latest, &Schema::avro(READING_NO_DEFAULT))
        .await
        .unwrap());
    assert!(registry
        .is_compatible(&subject, Version::Latest, &Schema::avro(READING_V2))
        .await
        .unwrap());
    let refused = fresh(&registry)
        .register(&subject, &Schema::avro(READING_NO_DEFAULT))
        .await
        .unwrap_err();
    assert!(
        !refused.is_retriable(),
        "an incompatible schema is not a retriable failure: {refused}"
    );
    let v2 = AvroSerializer::new(
        registry.clone(),
        READING_V2,
        Part::Value,
        SerdeConfig::default(),
    )
    .unwrap();
    let id2 = v2.prepare(&topic).await.unwrap();
    assert_ne!(id2, id1);
    assert_eq!(registry.versions(&subject).await.unwrap(), [1, 2]);
    let with_site = Value::Record(vec![
        ("sensor".into(), Value::String("b".into())),
        ("celsius".into(), Value::Double(0.5)),
        ("site".into(), Value::String("roof".into())),
    ]);
    send(
        &producer,
        ProducerRecord::new(topic.as_str())
            .value_with(&v2, &with_site)
            .unwrap(),
    )
    .await;
    let payloads = stored_values(&cluster, &topic).await;
    assert_eq!(payloads.len(), 3);
    let de = AvroDeserializer::new(fresh(&registry));
    de.resolve(payloads.iter().map(|p| &p[..])).await.unwrap();
    assert_eq!(&payloads[2][1..5], &id2.to_be_bytes());
    assert_eq!(de.deserialize(&topic, &payloads[2]).unwrap(), with_site);
    assert_eq!(de.deserialize(&topic, &payloads[0]).unwrap(), values[0]);
}

#[cfg(feature = "schema-registry-protobuf")]
mod protobuf {
    use super::*;
    use purekafka::schema_registry::prost::Message as _;
    use purekafka::schema_registry::prost_reflect::{
        DynamicMessage, ReflectMessage, Value as PbValue,
    };
    use purekafka::schema_registry::{
        DynamicProtobufDeserializer, ProtoImport, ProtobufDeserializer, ProtobufSchema,
        ProtobufSerializer, SchemaType,
    };

    const UNITS: &str = r#"syntax = "proto3";
package apicurio.common;
message Temperature { double celsius = 1; string unit = 2; }
"#;
    const READINGS: &str = r#"syntax = "proto3";
package apicurio.sensors;
import "apicurio/common/units.proto";
message Reading {
  string sensor = 1;
  apicurio.common.Temperature temperature = 2;
  repeated int32 flags = 3;
}
"#;

    /// What prost-build would generate for `apicurio.common.Temperature`.
    #[derive(Clone, PartialEq, purekafka::schema_registry::prost::Message)]
    #[prost(prost_path = "::purekafka::schema_registry::prost")]
    struct Temperature {
        #[prost(double, tag = "1")]
        celsius: f64,
        #[prost(string, tag = "2")]
        unit: String,
    }

    /// What prost-build would generate for `apicurio.sensors.Reading`.
    #[derive(Clone, PartialEq, purekafka::schema_registry::prost::Message)]
    #[prost(prost_path = "::purekafka::schema_registry::prost")]
    struct Reading {
        #[prost(string, tag = "1")]
        sensor: String,
        #[prost(message, optional, tag = "2")]
        temperature: Option<Temperature>,
        #[prost(int32, repeated, tag = "3")]
        flags: Vec<i32>,
    }

    #[tokio::test]
    async fn messages_with_an_imported_type_round_trip_through_references() {
        let test = "schema_registry_apicurio::protobuf::messages_with_an_imported_type_round_trip_through_references";
        let Some(Setup {
            _turn,
            registry,
            cluster,
            producer,
            topic,
        }) = setup(test, "apicurio-protobuf").await
        else {
            return;
        };
        let schema = || {
            ProtobufSchema::with_imports(
                READINGS,
                vec![ProtoImport::new("apicurio/common/units.proto", UNITS)],
            )
            .unwrap()
        };
        let ser = ProtobufSerializer::<Reading>::new(
            registry.clone(),
            schema(),
            "apicurio.sensors.Reading",
            Part::Value,
            SerdeConfig::default(),
        )
        .unwrap();
        let id = ser.prepare(&topic).await.unwrap();
        let readings = [
            Reading {
                sensor: "a".into(),
                temperature: Some(Temperature {
                    celsius: 21.5,
                    unit: "C".into(),
                }),
                flags: vec![1, 300],
            },
            Reading {
                sensor: "b".into(),
                temperature: None,
                flags: vec![],
            },
        ];
        for r in &readings {
            send(
                &producer,
                ProducerRecord::new(topic.as_str())
                    .value_with(&ser, r)
                    .unwrap(),
            )
            .await;
        }

        // Apicurio stored the import under its own subject and the main
        // schema with a reference to it.
        let latest = fresh(&registry)
            .version(&format!("{topic}-value"), Version::Latest)
            .await
            .unwrap();
        assert_eq!(latest.id, id);
        assert_eq!(latest.schema.schema_type, SchemaType::Protobuf);
        assert_eq!(latest.schema.references.len(), 1);
        assert_eq!(
            latest.schema.references[0].name,
            "apicurio/common/units.proto"
        );
        let import = registry
            .version(&latest.schema.references[0].subject, Version::Latest)
            .await
            .unwrap();
        assert_eq!(import.schema.schema_type, SchemaType::Protobuf);
        assert!(import.schema.schema.contains("message Temperature"));

        let payloads = stored_values(&cluster, &topic).await;
        assert_eq!(payloads.len(), readings.len());
        for (payload, expected) in payloads.iter().zip(&readings) {
            // Magic byte, schema id, the single-byte index path [0].
            assert_eq!(payload[0], 0);
            assert_eq!(&payload[1..5], &id.to_be_bytes());
            assert_eq!(payload[5], 0);
            let typed: Reading = ProtobufDeserializer::new()
                .deserialize(&topic, payload)
                .unwrap();
            assert_eq!(&typed, expected);
        }
        // A fresh client fetches the schema by id, follows the reference,
        // and decodes the imported type's fields.
        let de = DynamicProtobufDeserializer::new(fresh(&registry));
        de.resolve(payloads.iter().map(|p| &p[..])).await.unwrap();
        let first: DynamicMessage = de.deserialize(&topic, &payloads[0]).unwrap();
        assert_eq!(first.descriptor().full_name(), "apicurio.sensors.Reading");
        let temperature = first.get_field_by_name("temperature").unwrap();
        let temperature = temperature.as_message().unwrap();
        assert_eq!(
            temperature
                .get_field_by_name("celsius")
                .unwrap()
                .into_owned(),
            PbValue::F64(21.5)
        );
        assert_eq!(first.encode_to_vec(), readings[0].encode_to_vec());
    }
}

#[cfg(feature = "schema-registry-json-schema")]
mod json_schema {
    use super::*;
    use purekafka::producer::Serializer;
    use purekafka::schema_registry::{
        JsonSchemaSerializer, SchemaType, ValidatingJsonSchemaDeserializer,
    };
    use serde_json::json;

    const READING: &str = r#"{"$schema":"http://json-schema.org/draft-07/schema#","title":"Reading","type":"object","properties":{"sensor":{"type":"string"},"celsius":{"type":"number"}},"required":["sensor","celsius"]}"#;

    #[tokio::test]
    async fn documents_are_registered_validated_and_read_back() {
        let test =
            "schema_registry_apicurio::json_schema::documents_are_registered_validated_and_read_back";
        let Some(Setup {
            _turn,
            registry,
            cluster,
            producer,
            topic,
        }) = setup(test, "apicurio-json").await
        else {
            return;
        };
        let validating = SerdeConfig {
            json_fail_invalid_schema: true,
            ..SerdeConfig::default()
        };
        let ser: JsonSchemaSerializer<serde_json::Value> =
            JsonSchemaSerializer::new(registry.clone(), READING, Part::Value, validating).unwrap();
        let id = ser.prepare(&topic).await.unwrap();
        let latest = fresh(&registry)
            .version(&format!("{topic}-value"), Version::Latest)
            .await
            .unwrap();
        assert_eq!(latest.id, id);
        assert_eq!(latest.schema.schema_type, SchemaType::Json);

        let good = json!({"sensor": "a", "celsius": 21.5});
        send(
            &producer,
            ProducerRecord::new(topic.as_str())
                .value_with(&ser, &good)
                .unwrap(),
        )
        .await;
        let err = ser
            .serialize(&topic, &json!({"sensor": "a"}))
            .unwrap_err()
            .to_string();
        assert!(err.contains(&format!("schema id {id}")), "{err}");

        let payloads = stored_values(&cluster, &topic).await;
        assert_eq!(payloads.len(), 1);
        assert_eq!(&payloads[0][1..5], &id.to_be_bytes());
        let de = ValidatingJsonSchemaDeserializer::<serde_json::Value>::new(fresh(&registry));
        de.resolve([&payloads[0][..]]).await.unwrap();
        assert_eq!(de.deserialize(&topic, &payloads[0]).unwrap(), good);
    }
}
