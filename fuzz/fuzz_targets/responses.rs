//! cargo-fuzz entry for `harness::responses` (see `fuzz/harness/responses.rs`).
#![no_main]

#[path = "../harness/mod.rs"]
#[allow(dead_code)]
mod harness;

libfuzzer_sys::fuzz_target!(|data: &[u8]| harness::responses::run(data));
