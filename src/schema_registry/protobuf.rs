//! Protobuf serdes in the Confluent wire format (feature
//! `schema-registry-protobuf`; the framing of Confluent's
//! `KafkaProtobufSerializer`): header, the message-index path of the
//! message type inside its `.proto` file ([`wire::put_message_indexes`]),
//! then the Protobuf encoding of the message.
//!
//! Schemas are registered as `.proto` text with `schemaType` `PROTOBUF`;
//! imports other than Google's well-known types are registered as schema
//! references (one subject per imported file, as the Java serializer does):
//! each file references the files it imports itself, imports of imports
//! are registered first, and a file imported twice is registered once.
//! The text is compiled at run time with protox (a pure-Rust protobuf
//! compiler), so the dynamic deserializer can decode any registered type
//! into a [`prost_reflect::DynamicMessage`].
//!
//! The index path counts, at each nesting level, the message types declared
//! in the `.proto` source, in order (map-entry types that protoc
//! synthesizes for `map<..>` fields are not declared, so not counted).
//!
//! As for Avro, every registry call happens up front
//! ([`ProtobufSerializer::prepare`], [`DynamicProtobufDeserializer::resolve`]
//! / [`DynamicProtobufDeserializer::prewarm`]); `serialize` and
//! `deserialize` do no I/O.

use std::collections::{HashMap, HashSet};
use std::marker::PhantomData;
use std::sync::{Arc, Mutex, PoisonError};

use bytes::{BufMut, Bytes, BytesMut};
use prost_reflect::{DynamicMessage, FileDescriptor, MessageDescriptor};

use super::client::{Schema, SchemaReference, SchemaRegistryClient, SchemaType, Version};
use super::subject::{Part, SerdeConfig};
use super::wire;
use super::RegistryError;
use crate::error::{Error, Result};
use crate::producer::Serializer;
use crate::streams::Deserializer;

/// The name the registered (top-level) file is compiled under; imports
/// keep their own names.
const MAIN_FILE: &str = "purekafka_registered.proto";

/// Most schema references followed when compiling a registered schema
/// (imports of imports included): a bound against a hostile registry.
const MAX_REFERENCES: usize = 256;

/// A `.proto` file another one imports, registered under its own subject.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProtoImport {
    /// The import path as written in `import "..."` (for example
    /// `common/money.proto`); it is the reference's name.
    pub name: String,
    /// The subject it is registered under (the Java serializer's default
    /// is the import path itself).
    pub subject: String,
    /// Its `.proto` text.
    pub text: String,
}

impl ProtoImport {
    /// An import registered under a subject named after its path.
    pub fn new(name: impl Into<String>, text: impl Into<String>) -> Self {
        let name = name.into();
        ProtoImport {
            subject: name.clone(),
            name,
            text: text.into(),
        }
    }
}

/// A compiled `.proto` schema: the registered text, its imports and the
/// descriptors built from them.
#[derive(Debug, Clone)]
pub struct ProtobufSchema {
    text: String,
    imports: Vec<ProtoImport>,
    file: FileDescriptor,
}

impl ProtobufSchema {
    /// Compiles `text`, which may import Google's well-known types
    /// (`google/protobuf/*.proto`) but nothing else.
    pub fn new(text: &str) -> std::result::Result<Self, RegistryError> {
        ProtobufSchema::with_imports(text, Vec::new())
    }

    /// Compiles `text` with the files it imports.
    pub fn with_imports(
        text: &str,
        imports: Vec<ProtoImport>,
    ) -> std::result::Result<Self, RegistryError> {
        let sources: HashMap<String, String> = imports
            .iter()
            .map(|i| (i.name.clone(), i.text.clone()))
            .collect();
        let file = compile(text, &sources).map_err(|reason| RegistryError::Config {
            key: "schema".into(),
            reason,
        })?;
        Ok(ProtobufSchema {
            text: text.to_owned(),
            imports,
            file,
        })
    }

    /// The message type `full_name` (`package.Outer.Inner`), when this
    /// file declares it; use it to build [`DynamicMessage`]s.
    pub fn message(&self, full_name: &str) -> Option<MessageDescriptor> {
        self.file
            .parent_pool()
            .get_message_by_name(full_name)
            .filter(|m| m.parent_file() == self.file)
    }

    /// The message-index path of `full_name` in this file (`[0]` for the
    /// first top-level message).
    pub fn message_indexes(&self, full_name: &str) -> Option<Vec<i32>> {
        message_indexes(&self.file, full_name)
    }
}

/// Compiles `main` (with `imports` by import path, plus Google's
/// well-known types) and answers the main file's descriptor.
fn compile(
    main: &str,
    imports: &HashMap<String, String>,
) -> std::result::Result<FileDescriptor, String> {
    if imports.contains_key(MAIN_FILE) {
        return Err(format!("an import may not be named `{MAIN_FILE}`"));
    }
    let mut files = imports.clone();
    files.insert(MAIN_FILE.to_owned(), main.to_owned());
    let mut resolver = protox::file::ChainFileResolver::new();
    resolver.add(Sources(files));
    resolver.add(protox::file::GoogleFileResolver::new());
    let mut compiler = protox::Compiler::with_file_resolver(resolver);
    compiler
        .open_file(MAIN_FILE)
        .map_err(|e| format!("not a valid .proto schema: {e}"))?;
    compiler
        .descriptor_pool()
        .get_file_by_name(MAIN_FILE)
        .ok_or_else(|| "the compiled schema has no main file".to_owned())
}

/// Files by import path, for protox.
struct Sources(HashMap<String, String>);

impl protox::file::FileResolver for Sources {
    fn open_file(&self, name: &str) -> std::result::Result<protox::file::File, protox::Error> {
        match self.0.get(name) {
            Some(text) => protox::file::File::from_source(name, text),
            None => Err(protox::Error::file_not_found(name)),
        }
    }
}

/// Message types declared at one level, in source order.
fn declared(
    messages: impl Iterator<Item = MessageDescriptor>,
) -> impl Iterator<Item = MessageDescriptor> {
    messages.filter(|m| !m.is_map_entry())
}

fn message_indexes(file: &FileDescriptor, full_name: &str) -> Option<Vec<i32>> {
    fn walk(
        level: impl Iterator<Item = MessageDescriptor>,
        full_name: &str,
        path: &mut Vec<i32>,
    ) -> bool {
        for (i, m) in declared(level).enumerate() {
            path.push(i32::try_from(i).unwrap_or(i32::MAX));
            if m.full_name() == full_name || walk(m.child_messages(), full_name, path) {
                return true;
            }
            path.pop();
        }
        false
    }
    let mut path = Vec::new();
    walk(file.messages(), full_name, &mut path).then_some(path)
}

/// The message type at `indexes` in `file`.
fn message_at(file: &FileDescriptor, indexes: &[i32]) -> Option<MessageDescriptor> {
    let (first, rest) = indexes.split_first()?;
    let mut m = declared(file.messages()).nth(usize::try_from(*first).ok()?)?;
    for i in rest {
        let next = declared(m.child_messages()).nth(usize::try_from(*i).ok()?)?;
        m = next;
    }
    Some(m)
}

/// Frames an encoded message: header, index path, message.
fn frame(id: u32, indexes: &[i32], message: &impl prost::Message) -> Bytes {
    let mut out = BytesMut::with_capacity(wire::HEADER_LEN + 1 + message.encoded_len());
    out.put_u8(wire::MAGIC_BYTE);
    out.put_u32(id);
    wire::put_message_indexes(&mut out, indexes);
    // Encoding into a BytesMut cannot run out of room: it grows.
    message.encode_raw(&mut out);
    out.freeze()
}

/// Splits a framed Protobuf value into schema id, index path and message.
fn unframe(data: &[u8]) -> std::result::Result<(u32, Vec<i32>, &[u8]), String> {
    let (id, payload) = wire::unframe(data)?;
    let (indexes, message) =
        wire::take_message_indexes(payload).map_err(|e| format!("schema id {id}: {e}"))?;
    Ok((id, indexes, message))
}

/// Writes Protobuf messages (prost-generated types or [`DynamicMessage`]s)
/// of one message type, framed with their schema id and index path.
#[derive(Debug)]
pub struct ProtobufSerializer<T: ?Sized> {
    client: SchemaRegistryClient,
    schema: ProtobufSchema,
    message: String,
    indexes: Vec<i32>,
    part: Part,
    config: SerdeConfig,
    ids: Mutex<HashMap<String, u32>>,
    _values: PhantomData<fn(&T)>,
}

impl<T: ?Sized> ProtobufSerializer<T> {
    /// A serializer of `part` writing messages of type `message` (its full
    /// name, `package.Name`) declared in `schema`; fails when the schema
    /// does not declare it. The full name is the record name of the record
    /// subject strategies.
    pub fn new(
        client: SchemaRegistryClient,
        schema: ProtobufSchema,
        message: &str,
        part: Part,
        config: SerdeConfig,
    ) -> std::result::Result<Self, RegistryError> {
        let indexes = schema
            .message_indexes(message)
            .ok_or_else(|| RegistryError::Config {
                key: "schema".into(),
                reason: format!("the .proto schema declares no message `{message}`"),
            })?;
        Ok(ProtobufSerializer {
            client,
            schema,
            message: message.to_owned(),
            indexes,
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
            .subject(topic, self.part, Some(&self.message))
            .map_err(|reason| RegistryError::Config {
                key: self.part.strategy_key().into(),
                reason,
            })
    }

    /// The message-index path written before every message.
    pub fn message_indexes(&self) -> &[i32] {
        &self.indexes
    }

    /// Resolves the schema id for `topic`'s subject: registers the imports
    /// under their subjects and the schema with references to them (or
    /// looks them up, or takes the subject's latest version, as the config
    /// says). Call it before serializing for a topic; at most one round of
    /// registry calls per subject.
    pub async fn prepare(&self, topic: &str) -> std::result::Result<u32, RegistryError> {
        let subject = self.subject(topic)?;
        if let Some(id) = self.lock().get(&subject) {
            return Ok(*id);
        }
        let id = if self.config.use_latest_version {
            let latest = self.client.version(&subject, Version::Latest).await?;
            if latest.schema.schema_type != SchemaType::Protobuf {
                return Err(RegistryError::Decode {
                    url: subject.clone(),
                    reason: format!(
                        "latest schema is {:?}, not Protobuf",
                        latest.schema.schema_type
                    ),
                });
            }
            latest.id
        } else {
            // Leaves first: a file is registered once every file it imports
            // is, with references to exactly those.
            let by_name: HashMap<&str, &ProtoImport> = self
                .schema
                .imports
                .iter()
                .map(|i| (i.name.as_str(), i))
                .collect();
            let mut order = Vec::new();
            import_order(&self.schema.file, &by_name, &mut HashSet::new(), &mut order);
            let mut registered: HashMap<String, SchemaReference> = HashMap::new();
            for file in &order {
                let Some(import) = by_name.get(file.name()) else {
                    continue;
                };
                let schema = proto_schema(&import.text, references_of(file, &registered));
                let version = if self.config.auto_register_schemas {
                    self.client.register(&import.subject, &schema).await?;
                    self.client.lookup(&import.subject, &schema).await?.version
                } else {
                    self.client.lookup(&import.subject, &schema).await?.version
                };
                registered.insert(
                    import.name.clone(),
                    SchemaReference {
                        name: import.name.clone(),
                        subject: import.subject.clone(),
                        version,
                    },
                );
            }
            let references = references_of(&self.schema.file, &registered);
            let schema = proto_schema(&self.schema.text, references);
            if self.config.auto_register_schemas {
                self.client.register(&subject, &schema).await?
            } else {
                self.client.lookup(&subject, &schema).await?.id
            }
        };
        self.lock().insert(subject, id);
        Ok(id)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, u32>> {
        self.ids.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The files `file` imports, transitively, that are given as
/// [`ProtoImport`]s (Google's well-known types are built in, not
/// registered), each once and after every file it imports.
fn import_order(
    file: &FileDescriptor,
    imports: &HashMap<&str, &ProtoImport>,
    seen: &mut HashSet<String>,
    order: &mut Vec<FileDescriptor>,
) {
    for dependency in file.dependencies() {
        if imports.contains_key(dependency.name()) && seen.insert(dependency.name().to_owned()) {
            import_order(&dependency, imports, seen, order);
            order.push(dependency);
        }
    }
}

/// The references for `file`: one per file it imports directly that has
/// been registered.
fn references_of(
    file: &FileDescriptor,
    registered: &HashMap<String, SchemaReference>,
) -> Vec<SchemaReference> {
    file.dependencies()
        .filter_map(|d| registered.get(d.name()).cloned())
        .collect()
}

fn proto_schema(text: &str, references: Vec<SchemaReference>) -> Schema {
    Schema {
        schema: text.to_owned(),
        schema_type: SchemaType::Protobuf,
        references,
    }
}

impl<T: prost::Message> Serializer<T> for ProtobufSerializer<T> {
    fn serialize(&self, topic: &str, data: &T) -> Result<Bytes> {
        let err = |reason: String| Error::Serialization {
            topic: topic.to_owned(),
            part: self.part.name(),
            reason,
        };
        let subject = self.subject(topic).map_err(|e| err(e.to_string()))?;
        let Some(id) = self.lock().get(&subject).copied() else {
            return Err(err(format!(
                "no schema id for subject `{subject}` yet: call ProtobufSerializer::prepare(\"{topic}\") first"
            )));
        };
        Ok(frame(id, &self.indexes, data))
    }
}

/// Reads Confluent-framed Protobuf into a prost-generated type `T`; no
/// registry call (the type is known), the header and index path are
/// checked and skipped.
#[derive(Debug, Clone, Copy, Default)]
pub struct ProtobufDeserializer<T>(PhantomData<fn() -> T>);

impl<T> ProtobufDeserializer<T> {
    /// A deserializer for `T`.
    pub fn new() -> Self {
        ProtobufDeserializer(PhantomData)
    }
}

impl<T: prost::Message + Default + 'static> Deserializer for ProtobufDeserializer<T> {
    type Output = T;

    fn deserialize(&self, topic: &str, data: &Bytes) -> Result<T> {
        let err = |reason: String| Error::Serialization {
            topic: topic.to_owned(),
            part: "record (deserializing Protobuf)",
            reason,
        };
        let (id, _, message) = unframe(data).map_err(err)?;
        T::decode(message).map_err(|e| err(format!("schema id {id}: {e}")))
    }
}

/// Reads Confluent-framed Protobuf of any registered type into
/// [`DynamicMessage`]s: the schema is fetched by id (with its references),
/// compiled, and the index path picks the message type.
#[derive(Debug, Clone)]
pub struct DynamicProtobufDeserializer {
    client: SchemaRegistryClient,
    compiled: Arc<Mutex<HashMap<u32, FileDescriptor>>>,
    fetching: Arc<Mutex<HashSet<u32>>>,
}

impl DynamicProtobufDeserializer {
    /// A deserializer asking `client` for schemas.
    pub fn new(client: SchemaRegistryClient) -> Self {
        DynamicProtobufDeserializer {
            client,
            compiled: Arc::default(),
            fetching: Arc::default(),
        }
    }

    /// Fetches and compiles the schemas of every framed value in
    /// `payloads` not compiled yet (call it after a poll). Values that are
    /// not framed are skipped here; their deserialization reports them.
    pub async fn resolve<'a>(
        &self,
        payloads: impl IntoIterator<Item = &'a [u8]>,
    ) -> std::result::Result<(), RegistryError> {
        let ids: HashSet<u32> = payloads
            .into_iter()
            .filter_map(|p| wire::unframe(p).ok().map(|(id, _)| id))
            .collect();
        for id in ids {
            if !self.is_compiled(id) {
                let schema = self.client.schema_by_id(id).await?;
                let file = compile_registered(&self.client, id, &schema).await?;
                self.remember(id, file);
            }
        }
        Ok(())
    }

    /// Fetches and compiles every registered version of `subject`.
    pub async fn prewarm(&self, subject: &str) -> std::result::Result<(), RegistryError> {
        for v in self.client.versions(subject).await? {
            let registered = self.client.version(subject, Version::Number(v)).await?;
            if !self.is_compiled(registered.id) {
                let file =
                    compile_registered(&self.client, registered.id, &registered.schema).await?;
                self.remember(registered.id, file);
            }
        }
        Ok(())
    }

    fn is_compiled(&self, id: u32) -> bool {
        self.compiled
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .contains_key(&id)
    }

    fn remember(&self, id: u32, file: FileDescriptor) {
        let mut cache = self.compiled.lock().unwrap_or_else(PoisonError::into_inner);
        if cache.len() < self.client.config().cache_capacity {
            cache.insert(id, file);
        }
    }

    fn file(&self, id: u32) -> std::result::Result<FileDescriptor, String> {
        if let Some(file) = self
            .compiled
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&id)
        {
            return Ok(file.clone());
        }
        self.fetch_in_background(id);
        Err(format!(
            "schema id {id} is not compiled yet: call DynamicProtobufDeserializer::resolve (after poll) or prewarm first; a background fetch was started if a tokio runtime is running"
        ))
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
        let this = self.clone();
        handle.spawn(async move {
            let result = async {
                let schema = this.client.schema_by_id(id).await?;
                compile_registered(&this.client, id, &schema).await
            }
            .await;
            match result {
                Ok(file) => this.remember(id, file),
                Err(e) => {
                    tracing::warn!(schema_id = id, error = %e, "fetching an unknown schema id failed")
                }
            }
            this.fetching
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .remove(&id);
        });
    }
}

impl Deserializer for DynamicProtobufDeserializer {
    type Output = DynamicMessage;

    fn deserialize(&self, topic: &str, data: &Bytes) -> Result<DynamicMessage> {
        let err = |reason: String| Error::Serialization {
            topic: topic.to_owned(),
            part: "record (deserializing Protobuf)",
            reason,
        };
        let (id, indexes, message) = unframe(data).map_err(err)?;
        let file = self.file(id).map_err(err)?;
        let descriptor = message_at(&file, &indexes).ok_or_else(|| {
            err(format!(
                "schema id {id}: message index path {indexes:?} names no message type"
            ))
        })?;
        DynamicMessage::decode(descriptor.clone(), message).map_err(|e| {
            err(format!(
                "schema id {id}: not a valid `{}`: {e}",
                descriptor.full_name()
            ))
        })
    }
}

/// Compiles a registered schema after fetching its references (and
/// theirs), at most [`MAX_REFERENCES`] of them.
async fn compile_registered(
    client: &SchemaRegistryClient,
    id: u32,
    schema: &Schema,
) -> std::result::Result<FileDescriptor, RegistryError> {
    let decode = |reason: String| RegistryError::Decode {
        url: format!("schema id {id}"),
        reason,
    };
    if schema.schema_type != SchemaType::Protobuf {
        return Err(decode(format!("{:?}, not Protobuf", schema.schema_type)));
    }
    let mut sources = HashMap::new();
    let mut pending: Vec<SchemaReference> = schema.references.clone();
    let mut seen = 0;
    while let Some(reference) = pending.pop() {
        if sources.contains_key(&reference.name) {
            continue;
        }
        seen += 1;
        if seen > MAX_REFERENCES {
            return Err(decode(format!(
                "more than {MAX_REFERENCES} schema references"
            )));
        }
        let found = client
            .version(&reference.subject, Version::Number(reference.version))
            .await?;
        pending.extend(found.schema.references.iter().cloned());
        sources.insert(reference.name, found.schema.schema);
    }
    compile(&schema.schema, &sources).map_err(decode)
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost_reflect::Value;

    const ORDERS: &str = r#"
syntax = "proto3";
package shop;
import "google/protobuf/timestamp.proto";

message Order {
  int64 id = 1;
  string item = 2;
  map<string, int32> counts = 3;
  message Line {
    string sku = 1;
    message Note { string text = 1; }
  }
  message Audit { google.protobuf.Timestamp at = 1; }
}

message Refund { int64 order_id = 1; }
"#;

    #[derive(Clone, PartialEq, prost::Message)]
    struct Order {
        #[prost(int64, tag = "1")]
        id: i64,
        #[prost(string, tag = "2")]
        item: String,
    }

    #[test]
    fn index_paths_count_declared_messages_only() {
        let s = ProtobufSchema::new(ORDERS).unwrap();
        assert_eq!(s.message_indexes("shop.Order"), Some(vec![0]));
        assert_eq!(s.message_indexes("shop.Refund"), Some(vec![1]));
        // The map entry protoc synthesizes for `counts` is not counted.
        assert_eq!(s.message_indexes("shop.Order.Line"), Some(vec![0, 0]));
        assert_eq!(s.message_indexes("shop.Order.Audit"), Some(vec![0, 1]));
        assert_eq!(
            s.message_indexes("shop.Order.Line.Note"),
            Some(vec![0, 0, 0])
        );
        assert_eq!(s.message_indexes("shop.Nope"), None);
        let file = &s.file;
        for name in ["shop.Order", "shop.Refund", "shop.Order.Line.Note"] {
            let path = s.message_indexes(name).unwrap();
            assert_eq!(message_at(file, &path).unwrap().full_name(), name);
        }
        assert!(message_at(file, &[2]).is_none());
        assert!(message_at(file, &[0, 5]).is_none());
        assert!(message_at(file, &[]).is_none());
    }

    #[test]
    fn bad_proto_text_is_a_config_error() {
        let e = ProtobufSchema::new("message {").unwrap_err();
        assert!(e.to_string().contains("not a valid .proto schema"), "{e}");
        let e = ProtobufSchema::new("syntax = \"proto3\"; import \"missing.proto\";").unwrap_err();
        assert!(e.to_string().contains("missing.proto"), "{e}");
    }

    #[test]
    fn imports_compile_with_their_sources() {
        let money = "syntax = \"proto3\"; package common; message Money { int64 cents = 1; }";
        let main = "syntax = \"proto3\"; package shop; import \"common/money.proto\"; message Price { common.Money amount = 1; }";
        let s =
            ProtobufSchema::with_imports(main, vec![ProtoImport::new("common/money.proto", money)])
                .unwrap();
        assert_eq!(s.message_indexes("shop.Price"), Some(vec![0]));
        // Types of the imported file are not this file's messages.
        assert!(s.message("common.Money").is_none());
        assert!(s.message("shop.Price").is_some());
    }

    // Golden vectors written by hand from the format (Confluent's Java
    // serializer cannot run here: it is not on Maven Central). `Order{id: 7,
    // item: "tea"}` is field 1 varint 7 (08 07) and field 2 length 3
    // (12 03 't' 'e' 'a').
    const ORDER_ID1: &[u8] = &[0, 0, 0, 0, 1, 0, 0x08, 0x07, 0x12, 0x03, b't', b'e', b'a'];
    // `Order.Line{sku: "x"}` under id 0x01020304: path [0, 0] is count 2
    // (zig-zag 04), 0, 0.
    const LINE_ID16909060: &[u8] = &[0, 1, 2, 3, 4, 0x04, 0x00, 0x00, 0x0a, 0x01, b'x'];

    #[test]
    fn typed_messages_match_the_golden_bytes() {
        let order = Order {
            id: 7,
            item: "tea".into(),
        };
        assert_eq!(&frame(1, &[0], &order)[..], ORDER_ID1);
        let back: Order = ProtobufDeserializer::new()
            .deserialize("t", &Bytes::from_static(ORDER_ID1))
            .unwrap();
        assert_eq!(back, order);
    }

    #[test]
    fn dynamic_messages_match_the_golden_bytes() {
        let s = ProtobufSchema::new(ORDERS).unwrap();
        let line = s.message("shop.Order.Line").unwrap();
        let mut msg = DynamicMessage::new(line.clone());
        msg.set_field_by_name("sku", Value::String("x".into()));
        let path = s.message_indexes("shop.Order.Line").unwrap();
        assert_eq!(&frame(0x0102_0304, &path, &msg)[..], LINE_ID16909060);
        let (id, indexes, rest) = unframe(LINE_ID16909060).unwrap();
        assert_eq!((id, &indexes[..]), (0x0102_0304, &[0, 0][..]));
        let found = message_at(&s.file, &indexes).unwrap();
        assert_eq!(found.full_name(), "shop.Order.Line");
        assert_eq!(DynamicMessage::decode(found, rest).unwrap(), msg);
    }

    #[test]
    fn hostile_frames_are_errors() {
        let de = ProtobufDeserializer::<Order>::new();
        for bad in [
            &[][..],
            &[1, 0, 0, 0, 1, 0][..],
            // Index count claims 2^31 entries.
            &[0, 0, 0, 0, 1, 0xfe, 0xff, 0xff, 0xff, 0x0f][..],
            // Field 2 claims 100 bytes, 1 present.
            &[0, 0, 0, 0, 1, 0, 0x12, 100, b'x'][..],
        ] {
            let e = de
                .deserialize("t", &Bytes::copy_from_slice(bad))
                .unwrap_err();
            assert!(e.to_string().contains("Protobuf"), "{e}");
        }
    }

    #[test]
    fn the_dynamic_deserializer_names_an_uncompiled_id() {
        let client =
            SchemaRegistryClient::new(super::super::RegistryConfig::new("http://127.0.0.1:9"))
                .unwrap();
        let de = DynamicProtobufDeserializer::new(client);
        let e = de
            .deserialize("t", &Bytes::from_static(ORDER_ID1))
            .unwrap_err();
        assert!(e.to_string().contains("schema id 1"), "{e}");
    }
}
