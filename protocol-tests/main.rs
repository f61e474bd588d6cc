//! Protocol tests: golden vectors, round-trip properties and interop
//! fixtures for the pure protocol layer.

mod compression;
mod frame;
mod fuzz_replay;
mod java_interop;
mod records;
