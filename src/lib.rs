//! purekafka: a pure-Rust Kafka client and streams runtime (no librdkafka, no C).
//!
//! # Getting started
//!
//! Every client is built the same way: a typed config (`…Config::builder()`,
//! or Kafka property names through `.set(key, value)` / `from_properties`),
//! then `connect(config)`, or `with_cluster(cluster, config)` to share one
//! [`Cluster`] (metadata cache and connections) between clients.
//!
//! ```no_run
//! # async fn demo() -> purekafka::Result<()> {
//! use std::time::Duration;
//! use purekafka::{
//!     ClientConfig, Cluster, Consumer, ConsumerConfig, Producer, ProducerConfig,
//!     ProducerRecord,
//! };
//!
//! let client = ClientConfig::builder()
//!     .bootstrap_servers("127.0.0.1:9092")
//!     .build()?;
//! let cluster = Cluster::connect(client.clone()).await?;
//!
//! let producer_config = ProducerConfig::builder().bootstrap_servers("127.0.0.1:9092").build()?;
//! let producer = Producer::with_cluster(cluster.clone(), producer_config).await?;
//! let delivery = producer.send(ProducerRecord::new("orders").key("id-1").value("qty=2")).await?;
//! println!("written at offset {}", delivery.await?.offset);
//!
//! let consumer_config = ConsumerConfig::builder()
//!     .bootstrap_servers("127.0.0.1:9092")
//!     .group_id("billing")
//!     .build()?;
//! let consumer = Consumer::with_cluster(cluster, consumer_config);
//! consumer.subscribe(["orders"])?;
//! for record in consumer.poll(Duration::from_secs(1)).await? {
//!     println!("{} @ {}", record.partition, record.offset);
//! }
//! consumer.commit_sync().await?;
//! # Ok(())
//! # }
//! ```
//!
//! # Which type for what
//!
//! | you want to | use |
//! |---|---|
//! | write records (idempotent by default; transactions with `transactional.id`) | [`Producer`], [`ProducerConfig`], [`ProducerRecord`] |
//! | read records, alone ([`Consumer::assign`]) or in a group ([`Consumer::subscribe`]) | [`Consumer`], [`ConsumerConfig`] |
//! | manage topics, configs, groups, offsets, ACLs | [`Admin`] |
//! | process records asynchronously with ordering, commit and retry policies | [`Streams`], [`StreamsConfig`], [`Streams::topology`] |
//! | see brokers, leaders and coordinators; send a raw request | [`Cluster`] |
//! | connection and security settings shared by all of them | [`ClientConfig`] ([`SecurityProtocol`], [`SaslMechanism`], [`TlsConfig`], [`TokenProvider`]) |
//! | decide what to do after a failure | [`Error`]: [`Error::is_retriable`], [`Error::is_auth_failure`], [`Error::is_commit_failed`], [`Error::txn_kind`] |
//!
//! The `examples/` directory has one program per capability: `producer`,
//! `consumer_group`, `admin`, `eos_copy` (exactly-once copy with
//! transactions), `streams_demo` and `cluster_info`.
//!
//! # Layout
//!
//! Layers import downward only, bottom up (`scripts/check-layers` fails on
//! an import up the order):
//!
//! 1. [`protocol`]: wire format with no I/O (framing, versions, record
//!    batches, compression, the consumer-protocol codec), beside the plain
//!    shared types ([`TopicPartition`], [`OffsetAndMetadata`],
//!    [`ConsumerGroupMetadata`]);
//! 2. [`error`]: the crate's [`Error`], which knows protocol error codes;
//! 3. `net`: one task per broker socket, SASL and TLS, pooled per broker
//!    and workload (internal; its user-facing types are re-exported by
//!    [`config`] and [`cluster`]);
//! 4. [`config`]: [`ClientConfig`], the settings every client shares, and the
//!    Kafka-property adapter;
//! 5. [`cluster`]: metadata cache, leader routing, coordinators;
//! 6. the clients, peers that never import each other: [`producer`]
//!    (batching, partitioning, idempotence, transactions), [`consumer`]
//!    (fetch sessions, positions, groups, commits) and [`admin`];
//! 7. [`streams`]: the runtime on top of the consumer and producer;
//! 8. the `purekafka` command-line tool (feature `cli`).
//!
//! # Features
//!
//! - `tls`: TLS through rustls with a pure-Rust crypto provider;
//! - `cli`: the `purekafka` command-line tool;
//! - `serde`: JSON (de)serializers for records and configs;
//! - `schema-registry`: a schema registry client and Avro and JSON Schema
//!   serdes in the Confluent wire format (module `schema_registry`);
//! - `oauth`: OAUTHBEARER tokens from an OIDC provider (KIP-768);
//! - `aws-msk-iam`: Amazon MSK IAM sign-in (a SigV4-signed token over SASL
//!   `OAUTHBEARER`);
//! - `metrics`: client and streams metrics through the `metrics` facade,
//!   and a Prometheus endpoint (module `telemetry`);
//! - `otel`: OpenTelemetry spans and W3C trace context in record headers
//!   (module `otel`);
//! - `internals`: makes the internal modules (`net`, `protocol::frame`)
//!   public for our own test crates and fuzzers, with no stability promise.
#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod admin;
mod clock;
pub mod cluster;
pub mod config;
pub mod consumer;
pub mod error;
mod group_metadata;
#[cfg(feature = "http")]
#[cfg_attr(not(feature = "internals"), doc(hidden))]
pub mod http;
#[cfg(feature = "internals")]
pub mod net;
#[cfg(not(feature = "internals"))]
mod net;
#[cfg(feature = "oauth")]
pub mod oauth;
#[cfg(feature = "otel")]
pub mod otel;
pub mod producer;
pub mod protocol;
#[cfg(feature = "schema-registry")]
pub mod schema_registry;
pub mod streams;
#[cfg(feature = "metrics")]
pub mod telemetry;
mod topic_partition;

pub use admin::Admin;
/// The attribute for implementing purekafka's async traits
/// ([`RebalanceListener`], [`TokenProvider`]) with `async fn`,
/// re-exported so users need no dependency of their own.
pub use async_trait::async_trait;
pub use cluster::{
    BrokerInfo, Cluster, ClusterMetadata, CoordinatorKind, PartitionInfo, TopicInfo,
};
pub use config::{
    ClientConfig, ClientConfigBuilder, SaslMechanism, SecurityProtocol, TlsConfig, TokenProvider,
};
pub use consumer::share::{
    AcknowledgeType, AcknowledgementMode, ShareConsumer, ShareConsumerConfig, ShareRecord,
};
pub use consumer::{
    AutoOffsetReset, Consumer, ConsumerConfig, ConsumerConfigBuilder, ConsumerRecord,
    IsolationLevel, OffsetAndTimestamp, Position, RebalanceListener, RecordStream,
};
pub use error::{BrokerRef, Error, KafkaCode, Origin, Result, TxnErrorKind};
pub use group_metadata::{ConsumerGroupMetadata, OffsetAndMetadata};
#[cfg(feature = "aws-msk-iam")]
pub use net::sasl::msk_iam::{AwsCredentials, MskIamTokenProvider};
#[cfg(feature = "oauth")]
pub use oauth::OidcTokenProvider;
pub use producer::{
    Acks, DeliveryFuture, Producer, ProducerConfig, ProducerConfigBuilder, ProducerRecord,
    RecordMetadata,
};
pub use streams::{
    RunningStreams, Streams, StreamsConfig, StreamsConfigBuilder, StreamsError, TopologyBuilder,
};
pub use topic_partition::TopicPartition;

/// The README's Rust snippets, compiled (and the runnable ones run) as
/// doctests, so the README cannot drift from the API.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
