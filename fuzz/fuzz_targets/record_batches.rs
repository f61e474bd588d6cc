//! cargo-fuzz entry for `harness::record_batches` (see `fuzz/harness/record_batches.rs`).
#![no_main]

#[path = "../harness/mod.rs"]
#[allow(dead_code)]
mod harness;

libfuzzer_sys::fuzz_target!(|data: &[u8]| harness::record_batches::run(data));
