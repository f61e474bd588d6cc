//! purekafka-testkit: brokers for tests, for purekafka's users and its own suites.
//!
//! The client crate keeps no test-only dependency; everything a test needs to
//! get a broker lives here.
//!
//! - [`container`]: Apache Kafka in a container through testcontainers
//!   ([`KafkaContainer`]).
//! - [`fake`]: an in-process, wire-compatible fake cluster ([`FakeCluster`])
//!   with fault injection, for fast and deterministic tests.
#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod container;
pub mod fake;
pub mod oidc;
pub mod registry;

pub use container::{KafkaContainer, KafkaContainerBuilder};
pub use fake::FakeCluster;
