//! The tests that need no broker (issue #17): the hostile fake broker's
//! suites, which run the real client APIs against a scripted broker on
//! loopback. `cargo test --test offline` runs them anywhere; `scripts/test`
//! runs this target on its own, before any broker is started.

mod support {
    //! The part of the integration support code these tests use.
    pub mod hostile;
}

mod hostile;
mod hostile_connection;
mod hostile_kip848;
mod hostile_lies;
mod hostile_sasl;
