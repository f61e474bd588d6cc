//! cargo-fuzz entry for `harness::sasl` (see `fuzz/harness/sasl.rs`).
#![no_main]

#[path = "../harness/mod.rs"]
#[allow(dead_code)]
mod harness;

libfuzzer_sys::fuzz_target!(|data: &[u8]| harness::sasl::run(data));
