//! Errors of a streams application: why a record failed
//! ([`ProcessingError`], returned by a processor) and why the application
//! stopped ([`StreamsError`]). Their own module, so every part of the
//! runtime can name them without importing the runtime.

use std::fmt;
use std::time::Duration;

use crate::error::Error;
use crate::TopicPartition;

/// Why processing a record failed: a message for the failure policy, the
/// retry headers and the dead-letter topic. Any `std::error::Error`
/// converts into it with `?`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcessingError {
    message: String,
}

impl ProcessingError {
    /// An error with this message.
    pub fn new(message: impl Into<String>) -> ProcessingError {
        ProcessingError {
            message: message.into(),
        }
    }

    /// The message.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for ProcessingError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl<E: std::error::Error> From<E> for ProcessingError {
    fn from(e: E) -> Self {
        ProcessingError::new(e.to_string())
    }
}

/// Why a streams application stopped.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum StreamsError {
    /// A record failed under [`FailurePolicy::Fail`](super::FailurePolicy::Fail) (or exhausted in-place
    /// retries); its offset and everything after it stay uncommitted.
    #[error(
        "processing {partition} at offset {offset} failed after {attempts} attempt(s): {error}"
    )]
    Processing {
        /// The record's partition.
        partition: TopicPartition,
        /// The record's offset.
        offset: i64,
        /// Attempts made.
        attempts: u32,
        /// The last failure.
        error: ProcessingError,
    },
    /// The dead-letter rate guard tripped: of the records the main lane
    /// finished in the window, too many were dead-lettered.
    #[error("{dead_lettered} of {processed} records were dead-lettered within {window:?}, above the guard's share")]
    DeadLetterRate {
        /// Dead letters in the window.
        dead_lettered: u64,
        /// Records the main lane finished in the window.
        processed: u64,
        /// The window.
        window: Duration,
    },
    /// A state store's changelog write failed (after the producer's own
    /// retries), found when a commit awaited it: the input offsets of
    /// `partition` from the last commit on stay uncommitted, so a
    /// restarted application processes those records again (it helps once
    /// the cause is fixed: the changelog topic deleted, a record above its
    /// `max.message.bytes`, a denied write).
    #[error("changelog {changelog} of store {store} (input {partition}): a write was not acknowledged, so the input offsets are not committed: {error}")]
    Changelog {
        /// The store.
        store: String,
        /// Its changelog topic-partition.
        changelog: TopicPartition,
        /// The input partition (task) whose record wrote it.
        partition: TopicPartition,
        /// The producer's error.
        error: ProcessingError,
    },
    /// The client failed (connect, produce, commit, transaction).
    #[error(transparent)]
    Client(#[from] Error),
}
