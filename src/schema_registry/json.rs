//! JSON Schema serdes in the Confluent wire format (the framing of
//! Confluent's `KafkaJsonSchemaSerializer`): header, then the JSON document
//! as UTF-8.
//!
//! With the feature `schema-registry-json-schema` and
//! `json.fail.invalid.schema=true` ([`SerdeConfig::json_fail_invalid_schema`];
//! default false, as in Java's `KafkaJsonSchemaSerializerConfig`), the
//! serializer checks every value against its JSON Schema (the `jsonschema`
//! crate; drafts 4 to 2020-12; no remote `$ref`s) and refuses one that does
//! not match, naming the subject, the schema id and the failing path;
//! [`ValidatingJsonSchemaDeserializer`] checks what it reads. By default
//! nothing is validated, as with the Java serdes. As with
//! Avro, the schema id is resolved once per subject by
//! [`JsonSchemaSerializer::prepare`] and `serialize` does no I/O. The plain
//! deserializer needs no registry call: it checks the header and parses the
//! document into any `serde::Deserialize` type.

use std::collections::HashMap;
use std::marker::PhantomData;
use std::sync::{Mutex, PoisonError};

use bytes::Bytes;

use super::client::{Schema, SchemaRegistryClient, SchemaType, Version};
use super::subject::{Part, SerdeConfig};
use super::wire;
use super::RegistryError;
use crate::error::{Error, Result};
use crate::producer::Serializer;
use crate::streams::Deserializer;

/// Writes any `serde::Serialize` value as JSON framed with its schema id.
#[derive(Debug)]
pub struct JsonSchemaSerializer<T: ?Sized> {
    client: SchemaRegistryClient,
    schema: Schema,
    title: Option<String>,
    part: Part,
    config: SerdeConfig,
    ids: Mutex<HashMap<String, u32>>,
    #[cfg(feature = "schema-registry-json-schema")]
    validator: Option<jsonschema::Validator>,
    _values: PhantomData<fn(&T)>,
}

impl<T: ?Sized> JsonSchemaSerializer<T> {
    /// A serializer of `part` registering the JSON Schema `schema_text`;
    /// fails when it is not a JSON document. Its `title` is the record name
    /// for the record subject strategies (as in the Java serdes).
    pub fn new(
        client: SchemaRegistryClient,
        schema_text: &str,
        part: Part,
        config: SerdeConfig,
    ) -> std::result::Result<Self, RegistryError> {
        let doc: serde_json::Value =
            serde_json::from_str(schema_text).map_err(|e| RegistryError::Config {
                key: "schema".into(),
                reason: format!("a JSON Schema must be a JSON document: {e}"),
            })?;
        let title = doc.get("title").and_then(|t| t.as_str()).map(str::to_owned);
        #[cfg(feature = "schema-registry-json-schema")]
        let validator = if config.json_fail_invalid_schema {
            Some(
                compile_validator(&doc).map_err(|reason| RegistryError::Config {
                    key: "schema".into(),
                    reason,
                })?,
            )
        } else {
            None
        };
        #[cfg(not(feature = "schema-registry-json-schema"))]
        if config.json_fail_invalid_schema {
            return Err(RegistryError::Config {
                key: "json.fail.invalid.schema".into(),
                reason: "validating JSON values against their schema needs the `schema-registry-json-schema` feature"
                    .into(),
            });
        }
        Ok(JsonSchemaSerializer {
            #[cfg(feature = "schema-registry-json-schema")]
            validator,
            client,
            schema: Schema {
                schema: schema_text.to_owned(),
                schema_type: SchemaType::Json,
                references: Vec::new(),
            },
            title,
            part,
            config,
            ids: Mutex::new(HashMap::new()),
            _values: PhantomData,
        })
    }

    /// The subject for `topic`.
    pub fn subject(&self, topic: &str) -> std::result::Result<String, RegistryError> {
        self.config
            .strategy(self.part)
            .subject(topic, self.part, self.title.as_deref())
            .map_err(|reason| RegistryError::Config {
                key: self.part.strategy_key().into(),
                reason,
            })
    }

    /// Resolves the schema id for `topic`'s subject (register, look up, or
    /// the latest version, as the config says); call it before serializing
    /// for a topic. At most one registry call per subject.
    pub async fn prepare(&self, topic: &str) -> std::result::Result<u32, RegistryError> {
        let subject = self.subject(topic)?;
        if let Some(id) = self.lock().get(&subject) {
            return Ok(*id);
        }
        let id = if self.config.use_latest_version {
            let latest = self.client.version(&subject, Version::Latest).await?;
            if latest.schema.schema_type != SchemaType::Json {
                return Err(RegistryError::Decode {
                    url: subject.clone(),
                    reason: format!("latest schema is {:?}, not JSON", latest.schema.schema_type),
                });
            }
            latest.id
        } else if self.config.auto_register_schemas {
            self.client.register(&subject, &self.schema).await?
        } else {
            self.client.lookup(&subject, &self.schema).await?.id
        };
        self.lock().insert(subject, id);
        Ok(id)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, u32>> {
        self.ids.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl<T: serde::Serialize + ?Sized> Serializer<T> for JsonSchemaSerializer<T> {
    fn serialize(&self, topic: &str, data: &T) -> Result<Bytes> {
        let err = |reason: String| Error::Serialization {
            topic: topic.to_owned(),
            part: self.part.name(),
            reason,
        };
        let subject = self.subject(topic).map_err(|e| err(e.to_string()))?;
        let Some(id) = self.lock().get(&subject).copied() else {
            return Err(err(format!(
                "no schema id for subject `{subject}` yet: call JsonSchemaSerializer::prepare(\"{topic}\") first"
            )));
        };
        let doc = serde_json::to_vec(data).map_err(|e| err(e.to_string()))?;
        #[cfg(feature = "schema-registry-json-schema")]
        if let Some(validator) = &self.validator {
            check(validator, &doc)
                .map_err(|reason| err(format!("subject `{subject}`, schema id {id}: {reason}")))?;
        }
        Ok(wire::frame(id, &doc))
    }
}

/// Reads Confluent-framed JSON into any `serde::Deserialize` type.
#[derive(Debug, Clone, Copy, Default)]
pub struct JsonSchemaDeserializer<T>(PhantomData<fn() -> T>);

impl<T> JsonSchemaDeserializer<T> {
    /// A deserializer for `T`.
    pub fn new() -> Self {
        JsonSchemaDeserializer(PhantomData)
    }
}

impl<T: serde::de::DeserializeOwned + Send + 'static> Deserializer for JsonSchemaDeserializer<T> {
    type Output = T;

    fn deserialize(&self, topic: &str, data: &Bytes) -> Result<T> {
        let err = |reason: String| Error::Serialization {
            topic: topic.to_owned(),
            part: "record (deserializing JSON Schema)",
            reason,
        };
        let (id, payload) = wire::unframe(data).map_err(err)?;
        serde_json::from_slice(payload).map_err(|e| err(format!("schema id {id}: {e}")))
    }
}

/// Compiles a JSON Schema document; the error says why it is not one.
#[cfg(feature = "schema-registry-json-schema")]
fn compile_validator(
    doc: &serde_json::Value,
) -> std::result::Result<jsonschema::Validator, String> {
    jsonschema::validator_for(doc).map_err(|e| format!("not a valid JSON Schema: {}", e.masked()))
}

/// Most validation failures listed in one error.
#[cfg(feature = "schema-registry-json-schema")]
const MAX_REPORTED: usize = 3;

/// Checks the JSON document `doc` against `validator`; the error lists the
/// failing paths (JSON pointers) and what failed there, without the values
/// (they may be sensitive).
#[cfg(feature = "schema-registry-json-schema")]
fn check(validator: &jsonschema::Validator, doc: &[u8]) -> std::result::Result<(), String> {
    let value: serde_json::Value =
        serde_json::from_slice(doc).map_err(|e| format!("not a JSON document: {e}"))?;
    let mut failures = validator.iter_errors(&value).peekable();
    if failures.peek().is_none() {
        return Ok(());
    }
    let mut reasons = Vec::new();
    let mut total = 0usize;
    for e in failures {
        total += 1;
        if reasons.len() < MAX_REPORTED {
            let path = e.instance_path().to_string();
            let path = if path.is_empty() {
                "/".to_owned()
            } else {
                path
            };
            reasons.push(format!("at `{path}`: {}", e.masked()));
        }
    }
    let more = total.saturating_sub(reasons.len());
    let more = if more > 0 {
        format!(" (and {more} more)")
    } else {
        String::new()
    };
    Err(format!(
        "the value does not match its JSON Schema: {}{more}",
        reasons.join("; ")
    ))
}

/// Reads Confluent-framed JSON into any `serde::Deserialize` type after
/// checking the document against the schema its id names (feature
/// `schema-registry-json-schema`). Like the Avro deserializer it reads the
/// schemas from a cache filled up front by [`resolve`](Self::resolve)
/// (after a poll) or [`prewarm`](Self::prewarm).
#[cfg(feature = "schema-registry-json-schema")]
#[derive(Debug, Clone)]
pub struct ValidatingJsonSchemaDeserializer<T> {
    client: SchemaRegistryClient,
    validators: std::sync::Arc<Mutex<HashMap<u32, std::sync::Arc<jsonschema::Validator>>>>,
    _values: PhantomData<fn() -> T>,
}

#[cfg(feature = "schema-registry-json-schema")]
impl<T> ValidatingJsonSchemaDeserializer<T> {
    /// A deserializer asking `client` for schemas.
    pub fn new(client: SchemaRegistryClient) -> Self {
        ValidatingJsonSchemaDeserializer {
            client,
            validators: std::sync::Arc::default(),
            _values: PhantomData,
        }
    }

    /// Fetches and compiles the schemas of every framed value in
    /// `payloads` not seen yet. Values that are not framed are skipped
    /// here; their deserialization reports them.
    pub async fn resolve<'a>(
        &self,
        payloads: impl IntoIterator<Item = &'a [u8]>,
    ) -> std::result::Result<(), RegistryError> {
        let ids: std::collections::HashSet<u32> = payloads
            .into_iter()
            .filter_map(|p| wire::unframe(p).ok().map(|(id, _)| id))
            .collect();
        for id in ids {
            if !self.lock().contains_key(&id) {
                let schema = self.client.schema_by_id(id).await?;
                self.compile(id, &schema)?;
            }
        }
        Ok(())
    }

    /// Fetches and compiles every registered version of `subject`.
    pub async fn prewarm(&self, subject: &str) -> std::result::Result<(), RegistryError> {
        for v in self.client.versions(subject).await? {
            let registered = self.client.version(subject, Version::Number(v)).await?;
            self.compile(registered.id, &registered.schema)?;
        }
        Ok(())
    }

    fn compile(&self, id: u32, schema: &Schema) -> std::result::Result<(), RegistryError> {
        let decode = |reason: String| RegistryError::Decode {
            url: format!("schema id {id}"),
            reason,
        };
        if schema.schema_type != SchemaType::Json {
            return Err(decode(format!("{:?}, not JSON", schema.schema_type)));
        }
        let doc: serde_json::Value = serde_json::from_str(&schema.schema)
            .map_err(|e| decode(format!("not a JSON document: {e}")))?;
        let validator = compile_validator(&doc).map_err(decode)?;
        let mut cache = self.lock();
        if cache.len() < self.client.config().cache_capacity {
            cache.insert(id, std::sync::Arc::new(validator));
        }
        Ok(())
    }

    fn lock(
        &self,
    ) -> std::sync::MutexGuard<'_, HashMap<u32, std::sync::Arc<jsonschema::Validator>>> {
        self.validators
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(feature = "schema-registry-json-schema")]
impl<T: serde::de::DeserializeOwned + Send + 'static> Deserializer
    for ValidatingJsonSchemaDeserializer<T>
{
    type Output = T;

    fn deserialize(&self, topic: &str, data: &Bytes) -> Result<T> {
        let err = |reason: String| Error::Serialization {
            topic: topic.to_owned(),
            part: "record (deserializing JSON Schema)",
            reason,
        };
        let (id, payload) = wire::unframe(data).map_err(err)?;
        let Some(validator) = self.lock().get(&id).cloned() else {
            return Err(err(format!(
                "schema id {id} is not compiled yet: call ValidatingJsonSchemaDeserializer::resolve (after poll) or prewarm first"
            )));
        };
        check(&validator, payload).map_err(|reason| err(format!("schema id {id}: {reason}")))?;
        serde_json::from_slice(payload).map_err(|e| err(format!("schema id {id}: {e}")))
    }
}

#[cfg(all(test, feature = "schema-registry-json-schema"))]
mod tests {
    use super::*;
    use serde_json::json;

    const PERSON: &str = r#"{"$schema":"http://json-schema.org/draft-07/schema#","title":"Person","type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer","minimum":0},"tags":{"type":"array","items":{"type":"string"}}},"required":["name"]}"#;

    fn validator() -> jsonschema::Validator {
        compile_validator(&serde_json::from_str(PERSON).unwrap()).unwrap()
    }

    #[test]
    fn a_matching_document_passes() {
        let v = validator();
        check(&v, br#"{"name":"Ada","age":36,"tags":["x"]}"#).unwrap();
    }

    #[test]
    fn failures_name_the_path_without_the_value() {
        let v = validator();
        let e = check(&v, br#"{"name":"Ada","tags":["ok",{"secret":"s3cr3t"}]}"#).unwrap_err();
        assert!(e.contains("at `/tags/1`"), "{e}");
        assert!(!e.contains("s3cr3t"), "{e}");
        let e = check(&v, br#"{"age":-1}"#).unwrap_err();
        assert!(e.contains("at `/`"), "{e}");
        assert!(e.contains("at `/age`"), "{e}");
    }

    #[test]
    fn an_invalid_schema_is_refused() {
        let e = compile_validator(&json!({"type": 12})).unwrap_err();
        assert!(e.contains("not a valid JSON Schema"), "{e}");
    }

    #[test]
    fn the_serializer_compiles_its_schema_only_when_told_to_validate() {
        let client =
            SchemaRegistryClient::new(super::super::RegistryConfig::new("http://127.0.0.1:9"))
                .unwrap();
        let bad = r#"{"type": 12}"#;
        // Java's default: json.fail.invalid.schema=false, no validator.
        let default = SerdeConfig::from_properties([]).unwrap();
        assert!(!default.json_fail_invalid_schema);
        assert!(JsonSchemaSerializer::<serde_json::Value>::new(
            client.clone(),
            bad,
            Part::Value,
            default
        )
        .is_ok());
        let on = SerdeConfig::from_properties([("json.fail.invalid.schema", "true")]).unwrap();
        let e = JsonSchemaSerializer::<serde_json::Value>::new(client, bad, Part::Value, on)
            .unwrap_err();
        assert!(e.to_string().contains("not a valid JSON Schema"), "{e}");
    }

    #[test]
    fn by_default_the_serializer_writes_a_value_that_does_not_match() {
        let client =
            SchemaRegistryClient::new(super::super::RegistryConfig::new("http://127.0.0.1:9"))
                .unwrap();
        let serializer = |config| {
            let ser = JsonSchemaSerializer::<serde_json::Value>::new(
                client.clone(),
                PERSON,
                Part::Value,
                config,
            )
            .unwrap();
            // As if `prepare` had resolved id 7 (no registry needed here).
            ser.lock().insert("people-value".into(), 7);
            ser
        };
        let bad = json!({"age": -1});
        let written = serializer(SerdeConfig::default())
            .serialize("people", &bad)
            .unwrap();
        assert_eq!(&written[..5], &[0, 0, 0, 0, 7]);
        assert_eq!(
            serde_json::from_slice::<serde_json::Value>(&written[5..]).unwrap(),
            bad
        );
        let validating = SerdeConfig {
            json_fail_invalid_schema: true,
            ..SerdeConfig::default()
        };
        let e = serializer(validating)
            .serialize("people", &bad)
            .unwrap_err()
            .to_string();
        assert!(e.contains("schema id 7"), "{e}");
        assert!(e.contains("at `/age`"), "{e}");
    }
}
