//! cargo-fuzz entry for `harness::compress_round_trip` (see
//! `fuzz/harness/compress_round_trip.rs`).
#![no_main]

#[path = "../harness/mod.rs"]
#[allow(dead_code)]
mod harness;

libfuzzer_sys::fuzz_target!(|data: &[u8]| harness::compress_round_trip::run(data));
