//! cargo-fuzz entry for `harness::group_protocol` (see `fuzz/harness/group_protocol.rs`).
#![no_main]

#[path = "../harness/mod.rs"]
#[allow(dead_code)]
mod harness;

libfuzzer_sys::fuzz_target!(|data: &[u8]| harness::group_protocol::run(data));
