//! State stores for stateful stages (issue #16): key-value stores over
//! bytes, in memory or persistent (redb), each backed by a compacted
//! changelog topic `<application.id>-<store>-changelog` with the input's
//! partition count, restored before a task's first record reaches the
//! store. The semantics follow Kafka Streams' state stores (KIP-67's
//! store API, the changelog naming and `.checkpoint` files of its
//! `ProcessorStateManager`); DESIGN.md ("State stores") describes what is
//! built and why.
//!
//! - `blocking`: store file work (opens, flushes, checkpoints, drops) run
//!   off the async runtime;
//! - `store`: the [`KeyValueStore`] trait, [`InMemoryStore`] and
//!   [`PersistentStore`] (one redb file per store and partition);
//! - `window`: [`WindowStore`], a key-value store of windowed keys with
//!   an index by window start, whose windows expire after their retention;
//! - `cache`: the record cache of key-value aggregations (KIP-63,
//!   `statestore.cache.max.bytes`), and the flush ticks that write it out
//!   on commit;
//! - `checkpoint`: the `.checkpoint` file (the changelog offset the store
//!   holds everything below), written on a clean close and after
//!   at-least-once commits, removed on open;
//! - `changelog`: naming, creating and checking changelog topics, and
//!   restoring a store from its changelog;
//! - `registry`: the application's stores, per partition: open, restore,
//!   write through to the changelog, close;
//! - `query`: [`ReadOnlyKeyValueStore`], interactive queries on the
//!   partitions open in this instance;
//! - `table`: a table's store following its source topic (the topic is
//!   its changelog: Kafka Streams' source-topic optimisation).

mod blocking;
mod cache;
mod changelog;
mod checkpoint;
mod query;
mod registry;
mod store;
mod table;
mod window;

use std::path::PathBuf;

pub(crate) use cache::{flush_tick, is_flush_tick, CacheBudget, CacheEntry};
pub use changelog::changelog_topic;
pub(crate) use changelog::{check_copartitioned, ensure_changelogs, partition_count};
pub use checkpoint::{Checkpoint, CheckpointFile};
pub(crate) use query::QueryCodec;
pub use query::ReadOnlyKeyValueStore;
pub use registry::{StoreKind, StoreSpec};
pub(crate) use registry::{Stores, StoresRuntime, TaskStore, Write};
pub use store::{InMemoryStore, KeyValueStore, PersistentStore};
pub(crate) use window::window_start;
pub use window::WindowStore;

/// Why a state store failed.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The store's file is held by another instance (or another open
    /// store in this one): two instances share a `state.dir`. Give each
    /// its own; retrying helps only once the other closes it.
    #[error(
        "state store {path} is locked by another instance; give each instance its own state.dir"
    )]
    Locked {
        /// The store file.
        path: PathBuf,
    },
    /// The store's directory or file cannot be created, opened, read or
    /// written (permissions, disk full, a damaged file).
    #[error("state store {path}: {reason} (check state.dir)")]
    Io {
        /// The store file or directory.
        path: PathBuf,
        /// What failed.
        reason: String,
    },
}

impl StoreError {
    pub(crate) fn io(path: impl Into<PathBuf>, reason: impl ToString) -> StoreError {
        StoreError::Io {
            path: path.into(),
            reason: reason.to_string(),
        }
    }
}
