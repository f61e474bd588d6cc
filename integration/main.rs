//! Integration tests against a real Apache Kafka broker started by
//! `scripts/kafka up` or, with `PUREKAFKA_BROKER=container`, by
//! purekafka-testkit (see `support::broker_provider`; `fake` runs the
//! single-node modules on the testkit's fake cluster) (see README). The broker is found through
//! `PUREKAFKA_BOOTSTRAP` (default `127.0.0.1:19092`).
//!
//! Without a reachable broker each test prints `SKIPPED` and returns, unless
//! `CI=true`, where it fails: CI must never pass by skipping. The tests that
//! need no broker (the hostile fake broker's) are in the `offline` target
//! (`integration/offline.rs`).

mod support;

mod admin;
// KIP-714 client telemetry against `scripts/kafka up --telemetry`.
#[cfg(feature = "cli")]
mod cli_admin;
mod client_telemetry;
mod cluster;
mod compat;
mod consumer;
mod consumer_group;
mod faults;
mod group;
mod log_truncation;
// Runs the built CLI binary, which exists only with feature `cli`.
#[cfg(feature = "cli")]
mod consumer_cli;
mod net_faults;
// OIDC client credentials against `scripts/kafka up --oidc` (feature `oauth`).
#[cfg(feature = "oauth")]
mod oauth;
mod process_faults;
mod producer;
// KIP-1102 rebootstrap: the cluster moves behind proxies.
mod rebootstrap;
#[cfg(feature = "schema-registry")]
mod schema_registry;
// The same serdes against Apicurio Registry (`scripts/schema-registry`).
#[cfg(feature = "schema-registry")]
mod schema_registry_apicurio;
mod security;
// Share groups (KIP-932): needs a broker with share.version >= 1.
mod share;
mod streams;
// The streams group protocol (KIP-1071, API keys 88 and 89).
mod streams_group;
// The `metrics` feature (issue #20); `otel` is a target of its own.
#[cfg(feature = "metrics")]
mod telemetry;
// The share consumer's acknowledgements and a streams app's own clients.
#[cfg(feature = "metrics")]
mod telemetry_embedded;
mod transactions;
