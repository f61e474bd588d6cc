//! cargo-fuzz entry for `harness::decompress` (see `fuzz/harness/decompress.rs`).
#![no_main]

#[path = "../harness/mod.rs"]
#[allow(dead_code)]
mod harness;

libfuzzer_sys::fuzz_target!(|data: &[u8]| harness::decompress::run(data));
