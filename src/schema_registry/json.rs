//! JSON Schema serdes in the Confluent wire format (the framing of
//! Confluent's `KafkaJsonSchemaSerializer`): header, then the JSON document
//! as UTF-8.
//!
//! Values are not validated against the schema, as the Java serializer's
//! default (`json.fail.invalid.schema=false`); asking for validation is a
//! config error rather than a silent no-op. As with Avro, the schema id is
//! resolved once per subject by [`JsonSchemaSerializer::prepare`] and
//! `serialize` does no I/O. The deserializer needs no registry call: it
//! checks the header and parses the document into any
//! `serde::Deserialize` type.

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
        Ok(JsonSchemaSerializer {
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
