//! purekafka: a pure-Rust Kafka client and streams runtime (no librdkafka, no C).
//!
//! # Getting started
//!
//! ```no_run
//! # async fn demo() -> purekafka::Result<()> {
//! use purekafka::{ClientConfig, Cluster};
//!
//! let config = ClientConfig::builder()
//!     .bootstrap_servers("127.0.0.1:9092")
//!     .build()?;
//! let cluster = Cluster::connect(config).await?;
//! for broker in cluster.metadata().brokers.values() {
//!     println!("broker {} at {}:{}", broker.id, broker.host, broker.port);
//! }
//! # Ok(())
//! # }
//! ```
//!
//! # Layout
//!
//! Layers import downward only:
//!
//! - [`protocol`]: wire format with no I/O (framing, versions, record batches, compression);
//! - [`net`]: one task per broker socket, pooled per broker and workload;
//! - [`cluster`]: metadata cache, leader routing, coordinators;
//! - [`consumer`]: assignment, positions, fetch sessions, `poll`; group
//!   subscriptions, rebalance listeners and commits;
//! - [`producer`]: batching, partitioning, idempotent delivery, transactions;
//! - [`admin`]: topics, configs, groups and their offsets, ACLs, cluster;
//! - [`streams`]: async processing with ordering modes, commit watermarks and
//!   retry lanes on top of the consumer and producer.
#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod admin;
mod clock;
pub mod cluster;
pub mod config;
pub mod consumer;
pub mod error;
mod group_metadata;
pub mod net;
pub mod producer;
pub mod protocol;
pub mod streams;
mod topic_partition;

pub use admin::Admin;
/// The attribute for implementing purekafka's async traits
/// ([`RebalanceListener`], [`net::sasl::TokenProvider`]) with `async fn`,
/// re-exported so users need no dependency of their own.
pub use async_trait::async_trait;
pub use cluster::{
    BrokerInfo, Cluster, ClusterMetadata, CoordinatorKind, PartitionInfo, TopicInfo,
};
pub use config::{ClientConfig, ClientConfigBuilder};
pub use consumer::{
    AutoOffsetReset, Consumer, ConsumerConfig, ConsumerConfigBuilder, ConsumerGroupMetadata,
    ConsumerRecord, IsolationLevel, OffsetAndMetadata, OffsetAndTimestamp, Position,
    RebalanceListener, RecordStream,
};
pub use error::{Error, KafkaCode, Origin, Result, TxnErrorKind};
pub use topic_partition::TopicPartition;
