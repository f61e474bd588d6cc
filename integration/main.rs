//! Integration tests against a real Apache Kafka broker started by
//! `scripts/kafka up` (see README). The broker is found through
//! `PUREKAFKA_BOOTSTRAP` (default `127.0.0.1:19092`).
//!
//! Without a reachable broker each test prints `SKIPPED` and returns, unless
//! `CI=true`, where it fails: CI must never pass by skipping.

mod support;

mod cluster;
mod consumer;
mod faults;
mod group;
mod net_faults;
mod producer;
mod security;
