//! Avro serdes in the Confluent wire format (the framing of Confluent's
//! `KafkaAvroSerializer` / `KafkaAvroDeserializer`): header, then the Avro
//! binary encoding of one datum (no container file, no codec).
//!
//! Serializing is synchronous (the producer's hot path): the schema id is
//! resolved once per subject, asynchronously, by
//! [`AvroSerializer::prepare`]; `serialize` then only encodes. Deserializing
//! is synchronous too: it reads schemas from the client's cache, filled by
//! [`AvroDeserializer::resolve`] (after a poll) or
//! [`AvroDeserializer::prewarm`] (before a stream starts). An unknown id is
//! an error naming it; inside a tokio runtime the deserializer also starts
//! one bounded background fetch of that id, so a retry of the record (for
//! example a streams retry-in-place policy) finds it.
//!
//! Hostile length prefixes: apache-avro sizes a string, bytes or fixed
//! buffer, and reserves an array or map block, from the length the datum
//! claims, up to a process-wide cap. Its default cap is 512 MiB; creating
//! any Avro serde here sets it to [`DEFAULT_AVRO_MAX_ALLOCATION_BYTES`]
//! unless [`set_avro_max_allocation_bytes`] set it first, so a record that
//! claims a huge length fails with an error instead of allocating it.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError};

use apache_avro::types::Value;
use bytes::Bytes;

use super::client::{Schema, SchemaRegistryClient, SchemaType, Version};
use super::subject::{Part, SerdeConfig};
use super::wire;
use super::RegistryError;
use crate::error::{Error, Result};
use crate::producer::Serializer;
use crate::streams::Deserializer;

/// purekafka's default for apache-avro's allocation cap: the longest
/// string, bytes or fixed value, and the most items in one array or map
/// block, a decoded datum may claim (8 MiB; Kafka's default record size
/// limit is 1 MiB).
pub const DEFAULT_AVRO_MAX_ALLOCATION_BYTES: usize = 8 * 1024 * 1024;

/// Sets apache-avro's process-wide allocation cap (see the module docs) and
/// answers the cap in force: the cap can be set once per process, so call
/// this before creating any Avro serde; later calls change nothing and
/// answer the cap already set.
pub fn set_avro_max_allocation_bytes(bytes: usize) -> usize {
    apache_avro::util::max_allocation_bytes(bytes)
}

/// Applies purekafka's default cap unless one is already set.
fn default_allocation_cap() {
    set_avro_max_allocation_bytes(DEFAULT_AVRO_MAX_ALLOCATION_BYTES);
}

/// The schema a serializer writes with, once resolved for a subject.
#[derive(Debug)]
struct Resolved {
    id: u32,
    writer: Arc<apache_avro::Schema>,
}

/// Writes Avro [`Value`]s framed with their schema id.
#[derive(Debug)]
pub struct AvroSerializer {
    client: SchemaRegistryClient,
    schema: Schema,
    parsed: Arc<apache_avro::Schema>,
    record_name: Option<String>,
    part: Part,
    config: SerdeConfig,
    resolved: Mutex<HashMap<String, Resolved>>,
}

impl AvroSerializer {
    /// A serializer of `part` writing with the Avro schema `schema_text`;
    /// fails when the schema does not parse.
    pub fn new(
        client: SchemaRegistryClient,
        schema_text: &str,
        part: Part,
        config: SerdeConfig,
    ) -> std::result::Result<Self, RegistryError> {
        default_allocation_cap();
        let parsed =
            apache_avro::Schema::parse_str(schema_text).map_err(|e| RegistryError::Config {
                key: "schema".into(),
                reason: format!("not a valid Avro schema: {e}"),
            })?;
        let record_name = parsed.name().map(|n| n.fullname(None));
        Ok(AvroSerializer {
            client,
            schema: Schema::avro(schema_text),
            parsed: Arc::new(parsed),
            record_name,
            part,
            config,
            resolved: Mutex::new(HashMap::new()),
        })
    }

    /// The subject this serializer uses for `topic`.
    pub fn subject(&self, topic: &str) -> std::result::Result<String, RegistryError> {
        self.config
            .strategy(self.part)
            .subject(topic, self.part, self.record_name.as_deref())
            .map_err(|reason| RegistryError::Config {
                key: self.part.strategy_key().into(),
                reason,
            })
    }

    /// Resolves the schema id for `topic`'s subject (registers the schema,
    /// looks it up, or takes the latest version, as the config says); call
    /// it before serializing for a topic. Each call asks the registry at most
    /// once per subject; the answer is kept.
    pub async fn prepare(&self, topic: &str) -> std::result::Result<u32, RegistryError> {
        let subject = self.subject(topic)?;
        if let Some(r) = self.lock().get(&subject) {
            return Ok(r.id);
        }
        let resolved = if self.config.use_latest_version {
            let latest = self.client.version(&subject, Version::Latest).await?;
            if latest.schema.schema_type != SchemaType::Avro {
                return Err(RegistryError::Decode {
                    url: subject.clone(),
                    reason: format!("latest schema is {:?}, not Avro", latest.schema.schema_type),
                });
            }
            let writer = parse(&latest.schema).map_err(|reason| RegistryError::Decode {
                url: subject.clone(),
                reason,
            })?;
            Resolved {
                id: latest.id,
                writer: Arc::new(writer),
            }
        } else {
            let id = if self.config.auto_register_schemas {
                self.client.register(&subject, &self.schema).await?
            } else {
                self.client.lookup(&subject, &self.schema).await?.id
            };
            Resolved {
                id,
                writer: self.parsed.clone(),
            }
        };
        let id = resolved.id;
        self.lock().insert(subject, resolved);
        Ok(id)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Resolved>> {
        self.resolved.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Serializer<Value> for AvroSerializer {
    fn serialize(&self, topic: &str, data: &Value) -> Result<Bytes> {
        let err = |reason: String| Error::Serialization {
            topic: topic.to_owned(),
            part: self.part.name(),
            reason,
        };
        let subject = self.subject(topic).map_err(|e| err(e.to_string()))?;
        let (id, writer) = match self.lock().get(&subject) {
            Some(r) => (r.id, r.writer.clone()),
            None => {
                return Err(err(format!(
                    "no schema id for subject `{subject}` yet: call AvroSerializer::prepare(\"{topic}\") first"
                )))
            }
        };
        let datum = apache_avro::to_avro_datum(&writer, data.clone()).map_err(|e| {
            err(format!(
                "value does not match the schema of subject `{subject}` (id {id}): {e}"
            ))
        })?;
        Ok(wire::frame(id, &datum))
    }
}

/// Reads Confluent-framed Avro into [`Value`]s, with the writer's schema
/// or resolved into an optional reader schema.
#[derive(Debug, Clone)]
pub struct AvroDeserializer {
    client: SchemaRegistryClient,
    reader: Option<Arc<apache_avro::Schema>>,
    parsed: Arc<Mutex<HashMap<u32, Arc<apache_avro::Schema>>>>,
    fetching: Arc<Mutex<HashSet<u32>>>,
}

impl AvroDeserializer {
    /// A deserializer answering values in the writer's schema.
    pub fn new(client: SchemaRegistryClient) -> Self {
        default_allocation_cap();
        AvroDeserializer {
            client,
            reader: None,
            parsed: Arc::default(),
            fetching: Arc::default(),
        }
    }

    /// Resolves every value into `schema_text` (Avro schema resolution:
    /// added fields take their defaults, removed ones are dropped).
    pub fn with_reader_schema(
        mut self,
        schema_text: &str,
    ) -> std::result::Result<Self, RegistryError> {
        let parsed =
            apache_avro::Schema::parse_str(schema_text).map_err(|e| RegistryError::Config {
                key: "reader schema".into(),
                reason: format!("not a valid Avro schema: {e}"),
            })?;
        self.reader = Some(Arc::new(parsed));
        Ok(self)
    }

    /// Fetches the schemas of every framed value in `payloads` that the
    /// cache does not hold yet (call it after a poll, before
    /// deserializing). Values that are not framed are skipped here; their
    /// deserialization reports them.
    pub async fn resolve<'a>(
        &self,
        payloads: impl IntoIterator<Item = &'a [u8]>,
    ) -> std::result::Result<(), RegistryError> {
        let ids: HashSet<u32> = payloads
            .into_iter()
            .filter_map(|p| wire::unframe(p).ok().map(|(id, _)| id))
            .collect();
        for id in ids {
            self.client.schema_by_id(id).await?;
        }
        Ok(())
    }

    /// Fetches every registered version of `subject` into the cache.
    pub async fn prewarm(&self, subject: &str) -> std::result::Result<(), RegistryError> {
        for v in self.client.versions(subject).await? {
            self.client.version(subject, Version::Number(v)).await?;
        }
        Ok(())
    }

    fn writer_schema(&self, id: u32) -> std::result::Result<Arc<apache_avro::Schema>, String> {
        if let Some(s) = self
            .parsed
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&id)
        {
            return Ok(s.clone());
        }
        let Some(schema) = self.client.cached_schema(id) else {
            self.fetch_in_background(id);
            return Err(format!(
                "schema id {id} is not in the cache: call AvroDeserializer::resolve (after poll) or prewarm first; a background fetch was started if a tokio runtime is running"
            ));
        };
        if schema.schema_type != SchemaType::Avro {
            return Err(format!(
                "schema id {id} is {:?}, not Avro",
                schema.schema_type
            ));
        }
        let parsed = Arc::new(parse(&schema)?);
        let mut cache = self.parsed.lock().unwrap_or_else(PoisonError::into_inner);
        if cache.len() < self.client.config().cache_capacity {
            cache.insert(id, parsed.clone());
        }
        Ok(parsed)
    }

    /// One fetch per unknown id at a time, bounded by the HTTP timeout.
    fn fetch_in_background(&self, id: u32) {
        let Ok(handle) = tokio::runtime::Handle::try_current() else {
            return;
        };
        if !self
            .fetching
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(id)
        {
            return;
        }
        let client = self.client.clone();
        let fetching = self.fetching.clone();
        handle.spawn(async move {
            if let Err(e) = client.schema_by_id(id).await {
                tracing::warn!(schema_id = id, error = %e, "fetching an unknown schema id failed");
            }
            fetching
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .remove(&id);
        });
    }
}

impl Deserializer for AvroDeserializer {
    type Output = Value;

    fn deserialize(&self, topic: &str, data: &Bytes) -> Result<Value> {
        let err = |reason: String| Error::Serialization {
            topic: topic.to_owned(),
            part: "record (deserializing Avro)",
            reason,
        };
        let (id, mut payload) = wire::unframe(data).map_err(err)?;
        let writer = self.writer_schema(id).map_err(err)?;
        let value = apache_avro::from_avro_datum(&writer, &mut payload, None)
            .map_err(|e| err(format!("schema id {id}: {e}")))?;
        if !payload.is_empty() {
            return Err(err(format!(
                "schema id {id}: {} bytes left after the datum",
                payload.len()
            )));
        }
        // apache-avro 0.21 decodes a string cut short by the end of the
        // input as null instead of failing; validating against the writer
        // schema turns that into an error.
        if !value.validate(&writer) {
            return Err(err(format!("schema id {id}: truncated or malformed datum")));
        }
        match &self.reader {
            Some(reader) => value
                .resolve(reader)
                .map_err(|e| err(format!("schema id {id}: into the reader schema: {e}"))),
            None => Ok(value),
        }
    }
}

fn parse(schema: &Schema) -> std::result::Result<apache_avro::Schema, String> {
    if !schema.references.is_empty() {
        return Err("Avro schemas with references are not supported yet (issue #20)".into());
    }
    apache_avro::Schema::parse_str(&schema.schema)
        .map_err(|e| format!("registered schema is not valid Avro: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    const RECORD: &str = r#"{"type":"record","name":"R","fields":[{"name":"s","type":"string"}]}"#;

    fn zigzag(v: i64) -> Vec<u8> {
        let mut z = ((v << 1) ^ (v >> 63)) as u64;
        let mut out = Vec::new();
        while z >= 0x80 {
            out.push((z as u8) | 0x80);
            z >>= 7;
        }
        out.push(z as u8);
        out
    }

    #[test]
    fn hostile_lengths_are_refused_before_allocating() {
        let client =
            SchemaRegistryClient::new(super::super::RegistryConfig::new("http://127.0.0.1:9"))
                .unwrap();
        let _de = AvroDeserializer::new(client);
        // The serde set purekafka's cap (nothing in this process set one
        // before), not apache-avro's 512 MiB.
        assert_eq!(
            set_avro_max_allocation_bytes(usize::MAX),
            DEFAULT_AVRO_MAX_ALLOCATION_BYTES
        );
        let schema = apache_avro::Schema::parse_str(RECORD).unwrap();
        for claimed in [1i64 << 40, DEFAULT_AVRO_MAX_ALLOCATION_BYTES as i64 + 1] {
            let datum = zigzag(claimed);
            let e = apache_avro::from_avro_datum(&schema, &mut &datum[..], None).unwrap_err();
            assert!(
                e.to_string().contains(&claimed.to_string()),
                "claimed {claimed}: {e}"
            );
        }
        // An array block claiming 2^40 items is refused the same way.
        let array = apache_avro::Schema::parse_str(r#"{"type":"array","items":"null"}"#).unwrap();
        let datum = zigzag(1 << 40);
        assert!(apache_avro::from_avro_datum(&array, &mut &datum[..], None).is_err());
    }
}
