//! purekafka: a pure-Rust Kafka client and streams runtime (no librdkafka, no C).
#![forbid(unsafe_code)]

pub mod protocol;
