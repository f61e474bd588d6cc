//! Protocol tests: golden vectors and round-trip properties, no broker needed.
mod frame;
