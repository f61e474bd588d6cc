//! The fuzz targets' bodies, shared by the cargo-fuzz binaries
//! (`fuzz_targets/`) and by the normal test command, which replays the
//! committed corpora and regressions through them and feeds them random
//! bytes (`protocol-tests/fuzz_replay.rs`). Each `run` takes any bytes and
//! must return without panicking, hanging or allocating without bound.

pub mod compress_round_trip;
pub mod decompress;
pub mod group_protocol;
pub mod record_batches;
pub mod responses;
pub mod sasl;

/// A target's body.
pub type Target = fn(&[u8]);

/// Every target by name, as `fuzz/corpus/<name>/` is laid out.
pub const TARGETS: &[(&str, Target)] = &[
    ("compress_round_trip", compress_round_trip::run),
    ("decompress", decompress::run),
    ("group_protocol", group_protocol::run),
    ("record_batches", record_batches::run),
    ("responses", responses::run),
    ("sasl", sasl::run),
];
