//! Typed records through a schema registry (feature `schema-registry`,
//! issue #20): a client for the Confluent Schema Registry REST API and
//! serdes in the Confluent wire format (magic byte 0, a 4-byte big-endian
//! schema id, then the payload), as Confluent's Java serdes write them.
//!
//! - [`SchemaRegistryClient`]: subjects, versions, register, lookup by id,
//!   compatibility checks and levels, with caches; basic or bearer auth; `https` with
//!   the `tls` feature.
//! - [`AvroSerializer`] (a producer [`Serializer`](crate::producer::Serializer))
//!   and [`AvroDeserializer`] (a streams
//!   [`Deserializer`](crate::streams::Deserializer), usable on consumer
//!   records too).
//! - [`JsonSchemaSerializer`] / [`JsonSchemaDeserializer`]: JSON Schema
//!   (any serde type); with feature `schema-registry-json-schema` and
//!   `json.fail.invalid.schema=true` values are validated against the
//!   schema, and `ValidatingJsonSchemaDeserializer` checks what it reads.
//! - With feature `schema-registry-protobuf`: `ProtobufSerializer` (prost
//!   messages and `DynamicMessage`s), `ProtobufDeserializer` (a prost type)
//!   and `DynamicProtobufDeserializer` (any registered type).
//! - [`SubjectNameStrategy`]: topic, record, topic-record names.
//!
//! Serializers are synchronous hot-path traits, the registry is remote:
//! schema ids are resolved up front ([`AvroSerializer::prepare`],
//! [`AvroDeserializer::resolve`] / [`AvroDeserializer::prewarm`]), then
//! every record is encoded or decoded without I/O. DESIGN.md has the why.

mod avro;
mod client;
mod json;
#[cfg(feature = "schema-registry-protobuf")]
mod protobuf;
mod subject;
pub mod wire;

pub use apache_avro;
pub use avro::{
    set_avro_max_allocation_bytes, AvroDeserializer, AvroSerializer,
    DEFAULT_AVRO_MAX_ALLOCATION_BYTES,
};
pub use client::{
    Compatibility, RegisteredSchema, RegistryConfig, RegistryError, Schema, SchemaReference,
    SchemaRegistryClient, SchemaType, Version,
};
#[cfg(feature = "schema-registry-json-schema")]
pub use json::ValidatingJsonSchemaDeserializer;
pub use json::{JsonSchemaDeserializer, JsonSchemaSerializer};
#[cfg(feature = "schema-registry-protobuf")]
pub use protobuf::{
    DynamicProtobufDeserializer, ProtoImport, ProtobufDeserializer, ProtobufSchema,
    ProtobufSerializer,
};
pub use subject::{Part, SerdeConfig, SubjectNameStrategy};
#[cfg(feature = "schema-registry-protobuf")]
pub use {prost, prost_reflect};
