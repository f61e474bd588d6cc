//! purekafka's schema registry client and Avro serdes against the fake
//! registry (purekafka_testkit::registry), over HTTP on loopback.
#![cfg(feature = "schema-registry")]

use bytes::Bytes;
use purekafka::producer::Serializer;
use purekafka::schema_registry::apache_avro::types::Value;
use purekafka::schema_registry::{
    AvroDeserializer, AvroSerializer, Part, RegistryConfig, RegistryError, Schema,
    SchemaRegistryClient, SerdeConfig, Version,
};
use purekafka::streams::Deserializer;
use purekafka_testkit::registry::FakeRegistry;

const ORDER_V1: &str = r#"{"type":"record","name":"Order","namespace":"com.example","fields":[{"name":"id","type":"long"},{"name":"item","type":"string"}]}"#;
/// Adds a field with a default: BACKWARD compatible with v1.
const ORDER_V2: &str = r#"{"type":"record","name":"Order","namespace":"com.example","fields":[{"name":"id","type":"long"},{"name":"item","type":"string"},{"name":"qty","type":"int","default":1}]}"#;
/// Adds a field without a default: not BACKWARD compatible.
const ORDER_BAD: &str = r#"{"type":"record","name":"Order","namespace":"com.example","fields":[{"name":"id","type":"long"},{"name":"item","type":"string"},{"name":"price","type":"double"}]}"#;

fn client(registry: &FakeRegistry) -> SchemaRegistryClient {
    SchemaRegistryClient::new(RegistryConfig::new(registry.url())).unwrap()
}

fn order(id: i64, item: &str) -> Value {
    Value::Record(vec![
        ("id".into(), Value::Long(id)),
        ("item".into(), Value::String(item.into())),
    ])
}

#[tokio::test]
async fn register_lookup_versions_and_compatibility() {
    let registry = FakeRegistry::start().await.unwrap();
    let c = client(&registry);
    let id1 = c
        .register("orders-value", &Schema::avro(ORDER_V1))
        .await
        .unwrap();
    let id2 = c
        .register("orders-value", &Schema::avro(ORDER_V2))
        .await
        .unwrap();
    assert_ne!(id1, id2);
    // The same schema under another subject keeps its global id.
    assert_eq!(
        c.register("other-value", &Schema::avro(ORDER_V1))
            .await
            .unwrap(),
        id1
    );
    assert_eq!(c.subjects().await.unwrap(), ["orders-value", "other-value"]);
    assert_eq!(c.versions("orders-value").await.unwrap(), [1, 2]);
    let latest = c.version("orders-value", Version::Latest).await.unwrap();
    assert_eq!(
        (latest.id, latest.version, latest.schema.schema.as_str()),
        (id2, 2, ORDER_V2)
    );
    let found = c
        .lookup("orders-value", &Schema::avro(ORDER_V1))
        .await
        .unwrap();
    assert_eq!((found.id, found.version), (id1, 1));
    assert!(c
        .is_compatible("orders-value", Version::Latest, &Schema::avro(ORDER_V2))
        .await
        .unwrap());
    assert!(!c
        .is_compatible("orders-value", Version::Latest, &Schema::avro(ORDER_BAD))
        .await
        .unwrap());
    let err = c
        .register("orders-value", &Schema::avro(ORDER_BAD))
        .await
        .unwrap_err();
    assert!(
        matches!(err, RegistryError::Registry { status: 409, .. }),
        "{err}"
    );
    assert!(!err.is_retriable());
    let err = c
        .lookup("nope-value", &Schema::avro(ORDER_V1))
        .await
        .unwrap_err();
    assert!(err.is_not_found(), "{err}");
    assert!(
        matches!(
            err,
            RegistryError::Registry {
                error_code: 40401,
                ..
            }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("/subjects/nope-value"), "{err}");
}

#[tokio::test]
async fn the_caches_ask_the_registry_once() {
    let registry = FakeRegistry::start().await.unwrap();
    let c = client(&registry);
    let id = c
        .register("t-value", &Schema::avro(ORDER_V1))
        .await
        .unwrap();
    assert_eq!(
        c.register("t-value", &Schema::avro(ORDER_V1))
            .await
            .unwrap(),
        id
    );
    // A fresh client fetches the id once, then answers from its cache.
    let fresh = client(&registry);
    assert_eq!(fresh.cached_schema(id), None);
    assert_eq!(fresh.schema_by_id(id).await.unwrap().schema, ORDER_V1);
    assert_eq!(fresh.schema_by_id(id).await.unwrap().schema, ORDER_V1);
    assert_eq!(fresh.cached_schema(id).unwrap().schema, ORDER_V1);
    let requests = registry.requests();
    let registers = requests
        .iter()
        .filter(|r| *r == "POST /subjects/t-value/versions")
        .count();
    let by_id = requests
        .iter()
        .filter(|r| *r == &format!("GET /schemas/ids/{id}"))
        .count();
    assert_eq!((registers, by_id), (1, 1), "{requests:?}");
}

#[tokio::test]
async fn basic_and_bearer_auth() {
    // base64("user:pa:ss"): the password may hold a colon.
    let registry = FakeRegistry::start_with_auth(Some("Basic dXNlcjpwYTpzcw==".into()))
        .await
        .unwrap();
    let url = registry.url();
    let good = RegistryConfig::from_properties([
        ("schema.registry.url", url.as_str()),
        ("basic.auth.credentials.source", "USER_INFO"),
        ("basic.auth.user.info", "user:pa:ss"),
    ])
    .unwrap();
    let c = SchemaRegistryClient::new(good).unwrap();
    assert_eq!(c.subjects().await.unwrap(), Vec::<String>::new());
    let wrong = RegistryConfig::from_properties([
        ("schema.registry.url", url.as_str()),
        ("basic.auth.user.info", "user:wrong"),
    ])
    .unwrap();
    let err = SchemaRegistryClient::new(wrong)
        .unwrap()
        .subjects()
        .await
        .unwrap_err();
    assert!(
        matches!(err, RegistryError::Registry { status: 401, .. }),
        "{err}"
    );
    assert!(
        !err.to_string().contains("wrong"),
        "no secret in errors: {err}"
    );

    let bearer = FakeRegistry::start_with_auth(Some("Bearer t0ken".into()))
        .await
        .unwrap();
    let url = bearer.url();
    let config = RegistryConfig::from_properties([
        ("schema.registry.url", url.as_str()),
        ("bearer.auth.credentials.source", "STATIC_TOKEN"),
        ("bearer.auth.token", "t0ken"),
    ])
    .unwrap();
    assert!(SchemaRegistryClient::new(config)
        .unwrap()
        .subjects()
        .await
        .is_ok());
}

#[tokio::test]
async fn a_dead_url_is_skipped_for_the_next_one() {
    let registry = FakeRegistry::start().await.unwrap();
    let dead = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dead_url = format!("http://{}", dead.local_addr().unwrap());
    drop(dead);
    let urls = format!("{dead_url},{}", registry.url());
    let config = RegistryConfig::from_properties([("schema.registry.url", urls.as_str())]).unwrap();
    let c = SchemaRegistryClient::new(config).unwrap();
    assert!(c.register("x-value", &Schema::avro(ORDER_V1)).await.is_ok());
    // With only the dead URL the error is retriable and names it.
    let only_dead = SchemaRegistryClient::new(RegistryConfig::new(dead_url.clone())).unwrap();
    let err = only_dead.subjects().await.unwrap_err();
    assert!(
        err.is_retriable() && err.to_string().contains(&dead_url),
        "{err}"
    );
}

#[tokio::test]
async fn avro_round_trip_in_the_confluent_wire_format() {
    let registry = FakeRegistry::start().await.unwrap();
    let c = client(&registry);
    let ser =
        AvroSerializer::new(c.clone(), ORDER_V1, Part::Value, SerdeConfig::default()).unwrap();
    // Before prepare: a named error, never a registry call on the hot path.
    let err = ser.serialize("orders", &order(1, "tea")).unwrap_err();
    assert!(err.to_string().contains("prepare"), "{err}");
    let id = ser.prepare("orders").await.unwrap();
    let bytes = ser.serialize("orders", &order(7, "tea")).unwrap();
    // Magic 0, id big-endian, then Avro: zig-zag long 7 = 0x0e, string "tea".
    let mut expected = vec![0u8];
    expected.extend_from_slice(&id.to_be_bytes());
    expected.extend_from_slice(&[0x0e, 0x06, b't', b'e', b'a']);
    assert_eq!(&bytes[..], &expected[..]);
    // A value that does not fit the schema is refused by name.
    let err = ser.serialize("orders", &Value::Long(1)).unwrap_err();
    assert!(err.to_string().contains("orders-value"), "{err}");

    // A fresh deserializer needs resolve() first; then it decodes.
    let de = AvroDeserializer::new(client(&registry));
    let before = de.deserialize("orders", &bytes);
    assert!(before
        .unwrap_err()
        .to_string()
        .contains(&format!("schema id {id}")));
    let de = AvroDeserializer::new(client(&registry));
    de.resolve([&bytes[..]]).await.unwrap();
    assert_eq!(de.deserialize("orders", &bytes).unwrap(), order(7, "tea"));

    // A reader schema v2 fills the new field's default.
    let de2 = AvroDeserializer::new(c.clone())
        .with_reader_schema(ORDER_V2)
        .unwrap();
    match de2.deserialize("orders", &bytes).unwrap() {
        Value::Record(fields) => assert_eq!(fields[2], ("qty".into(), Value::Int(1))),
        other => panic!("{other:?}"),
    }
    // Hostile input: wrong magic, short header, truncated datum.
    for bad in [
        &b"\x01\x00\x00\x00\x01"[..],
        &b"\x00\x00"[..],
        &bytes[..bytes.len() - 1],
    ] {
        let result = de.deserialize("orders", &Bytes::copy_from_slice(bad));
        assert!(result.is_err(), "{bad:?} decoded as {result:?}");
    }
}

#[tokio::test]
async fn the_deserializer_fetches_an_unknown_id_in_the_background() {
    let registry = FakeRegistry::start().await.unwrap();
    let ser = AvroSerializer::new(
        client(&registry),
        ORDER_V1,
        Part::Value,
        SerdeConfig::default(),
    )
    .unwrap();
    ser.prepare("bg").await.unwrap();
    let bytes = ser.serialize("bg", &order(1, "x")).unwrap();
    let de = AvroDeserializer::new(client(&registry));
    assert!(de.deserialize("bg", &bytes).is_err());
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        if let Ok(v) = de.deserialize("bg", &bytes) {
            assert_eq!(v, order(1, "x"));
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "background fetch never filled the cache"
        );
    }
}

#[tokio::test]
async fn subject_strategies_and_registration_modes() {
    let registry = FakeRegistry::start().await.unwrap();
    let c = client(&registry);
    let record = SerdeConfig::from_properties([(
        "value.subject.name.strategy",
        "io.confluent.kafka.serializers.subject.TopicRecordNameStrategy",
    )])
    .unwrap();
    let ser = AvroSerializer::new(c.clone(), ORDER_V1, Part::Value, record).unwrap();
    ser.prepare("shop").await.unwrap();
    assert_eq!(c.subjects().await.unwrap(), ["shop-com.example.Order"]);

    // auto.register.schemas=false: a schema that is not registered fails.
    let lookup_only = SerdeConfig::from_properties([("auto.register.schemas", "false")]).unwrap();
    let ser = AvroSerializer::new(c.clone(), ORDER_V1, Part::Key, lookup_only.clone()).unwrap();
    let err = ser.prepare("shop").await.unwrap_err();
    assert!(err.is_not_found(), "{err}");
    c.register("shop-key", &Schema::avro(ORDER_V1))
        .await
        .unwrap();
    let id = ser.prepare("shop").await.unwrap();
    assert_eq!(c.version("shop-key", Version::Latest).await.unwrap().id, id);

    // use.latest.version: writes with v2 although built with v1.
    c.register("shop-value", &Schema::avro(ORDER_V1))
        .await
        .unwrap();
    let v2 = c
        .register("shop-value", &Schema::avro(ORDER_V2))
        .await
        .unwrap();
    let latest = SerdeConfig::from_properties([("use.latest.version", "true")]).unwrap();
    let ser = AvroSerializer::new(c.clone(), ORDER_V1, Part::Value, latest).unwrap();
    assert_eq!(ser.prepare("shop").await.unwrap(), v2);
    let v2_value = Value::Record(vec![
        ("id".into(), Value::Long(1)),
        ("item".into(), Value::String("a".into())),
        ("qty".into(), Value::Int(3)),
    ]);
    let bytes = ser.serialize("shop", &v2_value).unwrap();
    assert_eq!(&bytes[1..5], &v2.to_be_bytes());
}

/// Golden vectors written by Apache Avro's Java library with the Confluent
/// framing (src/registry/golden/GenerateGolden.java, ./regenerate).
mod golden {
    use super::*;
    use purekafka::schema_registry::wire;
    use std::collections::HashMap;

    const ORDER_AVSC: &str = include_str!("../src/registry/golden/order.avsc");
    const ORDER_BIN: &[u8] = include_bytes!("../src/registry/golden/order-id1.bin");
    const ALL_AVSC: &str = include_str!("../src/registry/golden/all-types.avsc");
    const ALL_BIN: &[u8] = include_bytes!("../src/registry/golden/all-types-id16909060.bin");

    #[tokio::test]
    async fn the_serializer_writes_what_java_writes_and_reads_it_back() {
        let registry = FakeRegistry::start().await.unwrap();
        let ser = AvroSerializer::new(
            client(&registry),
            ORDER_AVSC.trim(),
            Part::Value,
            SerdeConfig::default(),
        )
        .unwrap();
        // A fresh fake registry gives the first schema id 1, as in the vector.
        assert_eq!(ser.prepare("golden").await.unwrap(), 1);
        assert_eq!(
            &ser.serialize("golden", &order(7, "tea")).unwrap()[..],
            ORDER_BIN
        );
        let de = AvroDeserializer::new(client(&registry));
        de.resolve([ORDER_BIN]).await.unwrap();
        assert_eq!(
            de.deserialize("golden", &Bytes::from_static(ORDER_BIN))
                .unwrap(),
            order(7, "tea")
        );
    }

    #[test]
    fn every_avro_type_matches_java_byte_for_byte() {
        use purekafka::schema_registry::apache_avro::{from_avro_datum, to_avro_datum, Schema};
        let schema = Schema::parse_str(ALL_AVSC).unwrap();
        let value = Value::Record(vec![
            ("flag".into(), Value::Boolean(true)),
            ("count".into(), Value::Int(-3)),
            ("big".into(), Value::Long(1234567890123)),
            ("ratio".into(), Value::Float(0.5)),
            ("precise".into(), Value::Double(-2.25)),
            ("raw".into(), Value::Bytes(vec![0, 1, 0xff])),
            ("name".into(), Value::String("ключ".into())),
            ("maybe".into(), Value::Union(0, Box::new(Value::Null))),
            (
                "maybe_text".into(),
                Value::Union(1, Box::new(Value::String("yes".into()))),
            ),
            ("colour".into(), Value::Enum(1, "GREEN".into())),
            (
                "tags".into(),
                Value::Array(vec![Value::String("a".into()), Value::String("b".into())]),
            ),
            (
                "scores".into(),
                Value::Map(HashMap::from([("x".to_owned(), Value::Long(1))])),
            ),
            ("hash".into(), Value::Fixed(4, vec![9, 8, 7, 6])),
        ]);
        let framed = wire::frame(0x0102_0304, &to_avro_datum(&schema, value.clone()).unwrap());
        assert_eq!(&framed[..], ALL_BIN);
        let (id, mut payload) = wire::unframe(ALL_BIN).unwrap();
        assert_eq!(id, 0x0102_0304);
        assert_eq!(from_avro_datum(&schema, &mut payload, None).unwrap(), value);
        assert!(payload.is_empty());
    }
}

mod json_schema {
    use super::*;
    use purekafka::schema_registry::{
        JsonSchemaDeserializer, JsonSchemaSerializer, SchemaType, SubjectNameStrategy,
    };
    use serde_json::json;

    const PERSON: &str = r#"{"$schema":"http://json-schema.org/draft-07/schema#","title":"Person","type":"object","properties":{"name":{"type":"string"}}}"#;

    #[tokio::test]
    async fn json_values_are_framed_with_a_json_schema_id() {
        let registry = FakeRegistry::start().await.unwrap();
        let c = client(&registry);
        let ser: JsonSchemaSerializer<serde_json::Value> =
            JsonSchemaSerializer::new(c.clone(), PERSON, Part::Value, SerdeConfig::default())
                .unwrap();
        let doc = json!({"name": "Ada"});
        assert!(ser.serialize("people", &doc).is_err(), "before prepare");
        let id = ser.prepare("people").await.unwrap();
        let bytes = ser.serialize("people", &doc).unwrap();
        let mut expected = vec![0u8];
        expected.extend_from_slice(&id.to_be_bytes());
        expected.extend_from_slice(br#"{"name":"Ada"}"#);
        assert_eq!(&bytes[..], &expected[..]);
        // Registered as a JSON schema under the topic subject.
        let registered = c.version("people-value", Version::Latest).await.unwrap();
        assert_eq!(
            (registered.id, registered.schema.schema_type),
            (id, SchemaType::Json)
        );
        let back: serde_json::Value = JsonSchemaDeserializer::new()
            .deserialize("people", &bytes)
            .unwrap();
        assert_eq!(back, doc);
        // Not framed: refused by name.
        let plain = Bytes::from_static(br#"{"name":"Ada"}"#);
        let err = JsonSchemaDeserializer::<serde_json::Value>::new()
            .deserialize("people", &plain)
            .unwrap_err();
        assert!(err.to_string().contains("magic byte"), "{err}");
    }

    #[tokio::test]
    async fn the_record_strategy_uses_the_schema_title() {
        let registry = FakeRegistry::start().await.unwrap();
        let config = SerdeConfig {
            value_subject_name_strategy: SubjectNameStrategy::Record,
            ..SerdeConfig::default()
        };
        let ser: JsonSchemaSerializer<serde_json::Value> =
            JsonSchemaSerializer::new(client(&registry), PERSON, Part::Value, config).unwrap();
        ser.prepare("people").await.unwrap();
        assert_eq!(client(&registry).subjects().await.unwrap(), ["Person"]);
        // Validation is refused by name rather than skipped silently.
        let err = SerdeConfig::from_properties([("json.fail.invalid.schema", "true")]).unwrap_err();
        assert!(
            err.to_string().contains("json.fail.invalid.schema"),
            "{err}"
        );
    }
}
