//! The application's stores: the specs its stateful stages registered
//! when the topology was built, and per (store, input partition) the open
//! store. A task's store is opened and restored from its changelog the
//! first time a record reaches it (so before the first record it serves;
//! the other records of the task wait for the restore), and closed when
//! the partition is revoked or the application stops: flushed and
//! checkpointed on a clean close (and, at-least-once, after every commit).

use std::any::Any;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use tokio::sync::OnceCell;
use tokio::time::Instant;
use tracing::{debug, info, warn};

use super::blocking::off_runtime;
use super::cache::CacheBudget;
use super::changelog::{changelog_topic, restore};
use super::checkpoint::{Checkpoint, CheckpointFile};
use super::store::{InMemoryStore, KeyValueStore, PersistentStore};
use super::window::WindowStore;
use super::StoreError;
use crate::cluster::Cluster;
use crate::consumer::ConsumerConfig;
use crate::producer::Producer;
use crate::streams::error::{ProcessingError, StreamsError};
use crate::TopicPartition;

/// Where a store keeps its data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum StoreKind {
    /// In memory; restored from the whole changelog on each assignment.
    InMemory,
    /// A redb file under `state.dir`; restored from its checkpoint.
    Persistent,
}

/// The store a stateful stage materializes into (Kafka Streams'
/// `Materialized.as(name)`): its name (which names its changelog topic,
/// `<application.id>-<name>-changelog`) and its kind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreSpec {
    name: String,
    kind: StoreKind,
    retention_ms: Option<i64>,
    /// Set by a windowed stage: the store is a [`WindowStore`] keeping
    /// windows this long after their start.
    window_retention_ms: Option<i64>,
    /// Set by a session-windowed stage: the window store is a session
    /// store ([`WindowStore::sessions`]).
    sessions: bool,
    /// Set by a key-value aggregation when `statestore.cache.max.bytes` is
    /// above 0: its updates wait in a record cache.
    cached: bool,
    /// Set by a table read from a topic: that topic is the store's
    /// changelog (Kafka Streams' source-topic optimisation), which the
    /// store follows while it is open.
    source_topic: Option<String>,
}

impl StoreSpec {
    /// A persistent store (the default kind, as in Kafka Streams).
    pub fn persistent(name: impl Into<String>) -> StoreSpec {
        StoreSpec {
            name: name.into(),
            kind: StoreKind::Persistent,
            retention_ms: None,
            window_retention_ms: None,
            sessions: false,
            cached: false,
            source_topic: None,
        }
    }

    /// An in-memory store.
    pub fn in_memory(name: impl Into<String>) -> StoreSpec {
        StoreSpec {
            name: name.into(),
            kind: StoreKind::InMemory,
            retention_ms: None,
            window_retention_ms: None,
            sessions: false,
            cached: false,
            source_topic: None,
        }
    }

    /// The store's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Its kind.
    pub fn kind(&self) -> StoreKind {
        self.kind
    }

    /// How long a windowed aggregation keeps each window after its start,
    /// in stream time (Kafka Streams' `Materialized.withRetention`). The
    /// default, and the least a window store keeps, is the window size
    /// plus grace: a shorter retention is raised to it, as a window must
    /// outlive the time it accepts records. Key-value aggregations keep
    /// every key and ignore it.
    pub fn with_retention(mut self, retention: std::time::Duration) -> StoreSpec {
        self.retention_ms = Some(i64::try_from(retention.as_millis()).unwrap_or(i64::MAX));
        self
    }

    /// The retention set by [`with_retention`](Self::with_retention), ms.
    pub fn retention_ms(&self) -> Option<i64> {
        self.retention_ms
    }

    /// Puts a record cache in front of the store (see `cache`).
    pub(crate) fn cached(mut self, cached: bool) -> StoreSpec {
        self.cached = cached;
        self
    }

    /// Makes this a table of `topic`: the topic is its changelog, read
    /// and then followed while the store is open; nothing writes to it.
    pub(crate) fn following(mut self, topic: &str) -> StoreSpec {
        self.source_topic = Some(topic.to_owned());
        self
    }

    /// The topic a table store follows (see [`following`](Self::following)).
    pub(crate) fn source_topic(&self) -> Option<&str> {
        self.source_topic.as_deref()
    }

    /// Makes this a window store keeping windows `retention_ms` after
    /// their start.
    pub(crate) fn windowed(mut self, retention_ms: i64) -> StoreSpec {
        self.window_retention_ms = Some(retention_ms);
        self
    }

    /// Makes this a session store keeping sessions `retention_ms` after
    /// their end.
    pub(crate) fn sessioned(mut self, retention_ms: i64) -> StoreSpec {
        self.window_retention_ms = Some(retention_ms);
        self.sessions = true;
        self
    }
}

/// What the stores need from the running application.
pub(crate) struct StoresRuntime {
    pub(crate) cluster: Cluster,
    pub(crate) producer: Producer,
    /// The main consumer's config (isolation level, security): restores
    /// read with it, without the group.
    pub(crate) restore_config: ConsumerConfig,
    pub(crate) application_id: String,
    pub(crate) state_dir: PathBuf,
    /// Whether a record can run again in place (FailurePolicy::Retry): a
    /// store then remembers, per key, the input offset it applied last.
    pub(crate) retries_in_place: bool,
    /// `statestore.cache.max.bytes`, shared by the record caches.
    pub(crate) cache_budget: Arc<CacheBudget>,
}

type Slot = Arc<OnceCell<Arc<TaskStore>>>;

#[derive(Default)]
struct Registry {
    specs: Mutex<Vec<StoreSpec>>,
    runtime: OnceLock<StoresRuntime>,
    /// Per store name, per input partition (nested, so that a record's
    /// lookup by `&str` allocates nothing).
    open: Mutex<HashMap<String, HashMap<i32, Slot>>>,
    /// Per store name, the topic whose partitions its stage reads (a
    /// stage after a `group_by` reads the repartition topic): revoking a
    /// partition of another topic leaves the store open.
    owners: Mutex<HashMap<String, Arc<str>>>,
    restored_records: AtomicU64,
    dropped_late: AtomicU64,
    /// The standby tasks' stores (`standby`).
    standbys: standby::Standbys,
    /// Per store, its stage's `QueryCodec<K, V>` (interactive queries).
    codecs: Mutex<HashMap<String, Arc<dyn Any + Send + Sync>>>,
}

/// The application's stores (shared by its stages and its runtime).
#[derive(Clone, Default)]
pub(crate) struct Stores(Arc<Registry>);

impl std::fmt::Debug for Stores {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(lock(&self.0.specs).iter()).finish()
    }
}

mod changelog_acks;
mod standby;
mod task_store;

pub(crate) use task_store::{TaskStore, Write};

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Stores {
    /// Registers a stage's store (at build time).
    pub(crate) fn register(&self, spec: StoreSpec) {
        lock(&self.0.specs).push(spec);
    }

    /// Registers the serdes interactive queries of store `name` use.
    pub(crate) fn register_codec(&self, name: &str, codec: Arc<dyn Any + Send + Sync>) {
        lock(&self.0.codecs).insert(name.to_owned(), codec);
    }

    /// The serdes of store `name`.
    pub(crate) fn codec(&self, name: &str) -> Option<Arc<dyn Any + Send + Sync>> {
        lock(&self.0.codecs).get(name).cloned()
    }

    /// The registered stores.
    pub(crate) fn specs(&self) -> Vec<StoreSpec> {
        lock(&self.0.specs).clone()
    }

    /// Whether a stage caches its updates: the runtime then flushes the
    /// caches before it commits.
    pub(crate) fn caching(&self) -> bool {
        lock(&self.0.specs).iter().any(|s| s.cached)
    }

    /// Connects the stores to the running application (once).
    pub(crate) fn start(&self, runtime: StoresRuntime) {
        let _ = self.0.runtime.set(runtime);
    }

    /// Counts a record a windowed stage dropped: its window had closed.
    pub(crate) fn count_late(&self) {
        self.0.dropped_late.fetch_add(1, Ordering::Relaxed);
    }

    /// Records windowed stages dropped as late so far.
    pub(crate) fn dropped_late_records(&self) -> u64 {
        self.0.dropped_late.load(Ordering::Relaxed)
    }

    /// Changelog records applied by restores so far.
    pub(crate) fn restored_records(&self) -> u64 {
        self.0.restored_records.load(Ordering::Relaxed)
    }

    /// The store `name` of input partition `partition`, opened and
    /// restored on first use.
    pub(crate) async fn task_store(
        &self,
        name: &str,
        partition: &TopicPartition,
    ) -> Result<Arc<TaskStore>, ProcessingError> {
        let slot = {
            let mut open = lock(&self.0.open);
            let found = open.get(name).and_then(|m| m.get(&partition.partition));
            match found {
                Some(slot) => slot.clone(),
                None => {
                    lock(&self.0.owners)
                        .entry(name.to_owned())
                        .or_insert_with(|| partition.topic.clone());
                    open.entry(name.to_owned())
                        .or_default()
                        .entry(partition.partition)
                        .or_default()
                        .clone()
                }
            }
        };
        if let Some(store) = slot.get() {
            return Ok(store.clone());
        }
        // Boxed: opening (and restoring) is a large future, which would
        // otherwise be inlined into every record's stage future (measured
        // ~8 KB allocated per record by the count benchmark).
        slot.get_or_try_init(|| Box::pin(self.open(name, partition.partition)))
            .await
            .cloned()
    }

    /// The open store `name` of `partition`, if this instance has it
    /// (interactive queries).
    pub(crate) fn local(&self, name: &str, partition: i32) -> Option<Arc<TaskStore>> {
        lock(&self.0.open)
            .get(name)
            .and_then(|m| m.get(&partition))
            .and_then(|s| s.get().cloned())
    }

    /// The partitions with an open store `name`.
    pub(crate) fn local_partitions(&self, name: &str) -> Vec<i32> {
        let open = lock(&self.0.open);
        let mut ps: Vec<i32> = open
            .get(name)
            .into_iter()
            .flatten()
            .filter(|(_, s)| s.initialized())
            .map(|(p, _)| *p)
            .collect();
        ps.sort_unstable();
        ps
    }

    async fn open(&self, name: &str, partition: i32) -> Result<Arc<TaskStore>, ProcessingError> {
        let (rt, spec) = self.runtime_and_spec(name)?;
        // A standby of this task here: promote it (its store is current up
        // to its follower's position; only the tail is restored).
        if let Some(standby) = self.take_standby(name, partition) {
            return self.promote(rt, &spec, standby).await;
        }
        let opened = open_store(rt, &spec, partition).await?;
        let started = Instant::now();
        info!(store = name, changelog = %opened.changelog, from = ?opened.from, "restoring state store");
        let restored =
            restore_store(rt, name, &opened.changelog, opened.from, &opened.store).await?;
        self.0
            .restored_records
            .fetch_add(restored.records, Ordering::Relaxed);
        info!(
            store = name,
            changelog = %opened.changelog,
            records = restored.records,
            end = restored.end,
            entries = restored.entries,
            took_ms = started.elapsed().as_millis() as u64,
            "restored state store"
        );
        let follower = spec
            .source_topic()
            .map(|_| super::table::Follower::default());
        let store = TaskStore::assemble(rt, &spec, opened, restored.end, follower);
        if let Some(follower) = &store.follower {
            follower.start(&store, rt, restored.end);
        }
        Ok(store)
    }

    /// The running application's side and the spec of store `name`.
    fn runtime_and_spec(&self, name: &str) -> Result<(&StoresRuntime, StoreSpec), ProcessingError> {
        let rt = self.0.runtime.get().ok_or_else(|| {
            ProcessingError::new(format!("store {name}: the application has not started"))
        })?;
        let spec = self
            .specs()
            .into_iter()
            .find(|s| s.name == name)
            .ok_or_else(|| ProcessingError::new(format!("store {name} is not registered")))?;
        Ok((rt, spec))
    }

    /// Closes the stores of `partitions` (revoked or lost); `clean`: the
    /// offsets covering their writes are committed, so checkpoint them.
    /// The checkpoints and the stores' drop (a redb `Database` closes its
    /// file) run off the runtime; returns once they are done, so a store
    /// this instance no longer holds elsewhere has its file unlocked.
    pub(crate) async fn close(&self, partitions: &[TopicPartition], clean: bool) {
        // An active task that stays here as a standby keeps its store
        // (demotion); only a clean close's store holds nothing that may be
        // undone.
        let standby = if clean {
            self.standby_partitions()
        } else {
            Default::default()
        };
        let closing: Vec<(String, i32, Slot)> = {
            let owners = lock(&self.0.owners).clone();
            let mut open = lock(&self.0.open);
            let mut demoting = lock(&self.0.standbys.demoting);
            let mut closing = Vec::new();
            for (name, slots) in open.iter_mut() {
                let owner = owners.get(name);
                slots.retain(|p, slot| {
                    let revoked = partitions.iter().any(|tp| owns(owner, tp, *p));
                    if revoked {
                        if standby.contains(p) {
                            demoting.insert((name.clone(), *p));
                        }
                        closing.push((name.clone(), *p, slot.clone()));
                    }
                    !revoked
                });
            }
            closing
        };
        let (demoted, closing): (Vec<_>, Vec<_>) = closing
            .into_iter()
            .partition(|(_, p, _)| standby.contains(p));
        close_off_runtime(closing.into_iter().map(|(_, _, s)| s).collect(), clean).await;
        self.demote(demoted).await;
    }

    /// After an at-least-once commit: checkpoints the persistent stores of
    /// `partitions` when due (see `TaskStore::write_checkpoint`), so that after a crash a restore replays only the
    /// changelog written since (the store may hold more: replaying a write
    /// it has is harmless, and a write the changelog lost belongs to a
    /// record whose offset was not committed, so it runs again, as
    /// at-least-once allows). Never under exactly-once, where a store may
    /// hold writes of a transaction that will abort. The flush and the
    /// file write run off the runtime; returns once they are done.
    pub(crate) async fn checkpoint<'a>(
        &self,
        partitions: impl IntoIterator<Item = &'a TopicPartition>,
    ) {
        let tps: Vec<&TopicPartition> = partitions.into_iter().collect();
        let owners = lock(&self.0.owners).clone();
        let stores: Vec<Arc<TaskStore>> = lock(&self.0.open)
            .iter()
            .flat_map(|(name, slots)| slots.iter().map(move |(p, s)| (name, p, s)))
            .filter(|(name, p, _)| tps.iter().any(|tp| owns(owners.get(*name), tp, **p)))
            .filter_map(|(_, _, s)| s.get().cloned())
            .collect();
        let due: Vec<Arc<TaskStore>> = stores
            .into_iter()
            .filter(|t| t.checkpoint_due(false))
            .collect();
        if due.is_empty() {
            return;
        }
        let written = off_runtime("checkpointing state stores", move || {
            for t in &due {
                t.write_checkpoint(false);
            }
            // The last reference may be here: drop them off the runtime too.
            drop(due);
        })
        .await;
        if let Err(e) = written {
            warn!(error = %e, "checkpoints not written; the next open restores from the changelog's start");
        }
    }

    /// Before input offsets are committed (or, under exactly-once, after
    /// the transaction committed: its commit flushed them, so nothing
    /// waits here): waits until every changelog write of every open store
    /// is acknowledged. The first that failed (after the producer's own
    /// retries) is the error, naming the store, its changelog partition
    /// and the input partition; the store keeps failing from then on, so
    /// no later commit covers the lost write.
    pub(crate) async fn flush_changelogs(&self) -> Result<(), StreamsError> {
        let owners = lock(&self.0.owners).clone();
        let stores: Vec<(Arc<str>, i32, Arc<TaskStore>)> = lock(&self.0.open)
            .iter()
            .flat_map(|(name, slots)| slots.iter().map(move |(p, s)| (name, *p, s)))
            .filter_map(|(name, p, s)| {
                let owner = owners.get(name)?.clone();
                Some((owner, p, s.get()?.clone()))
            })
            .collect();
        for (topic, p, store) in stores {
            if let Err(error) = store.await_unacked().await {
                return Err(StreamsError::Changelog {
                    store: store.name.clone(),
                    changelog: store.changelog.clone(),
                    partition: TopicPartition::new(topic, p),
                    error: ProcessingError::new(error),
                });
            }
        }
        Ok(())
    }

    /// Closes every store (shutdown), off the runtime as
    /// [`close`](Self::close).
    pub(crate) async fn close_all(&self, clean: bool) {
        let closing: Vec<Slot> = lock(&self.0.open)
            .drain()
            .flat_map(|(_, slots)| slots.into_values())
            .collect();
        close_off_runtime(closing, clean).await;
        self.close_standbys().await;
    }
}

/// Whether partition `p` of a store whose stage reads `owner` is the
/// task of `tp` (a store not opened yet has no owner: any topic).
fn owns(owner: Option<&Arc<str>>, tp: &TopicPartition, p: i32) -> bool {
    tp.partition == p && owner.is_none_or(|o| **o == *tp.topic)
}

/// Closes `slots`' stores on the blocking pool (checkpoints when `clean`)
/// and drops them there, so a `Database` whose last holder is the slot
/// closes its file off the runtime.
async fn close_off_runtime(slots: Vec<Slot>, clean: bool) {
    if slots.is_empty() {
        return;
    }
    let closed = off_runtime("closing state stores", move || {
        for slot in slots {
            if let Some(s) = slot.get() {
                s.close(clean);
            }
        }
    })
    .await;
    if let Err(e) = closed {
        warn!(error = %e, "state stores not closed cleanly; the next open restores from the changelog");
    }
}

/// How long opening a persistent store retries while its file is locked:
/// a store of this instance closed just before (a partition revoked and
/// assigned again) unlocks its file once the last holder lets go, e.g. a
/// table's follower applying a batch at that moment.
const LOCKED_RETRY: std::time::Duration = std::time::Duration::from_secs(2);

/// Opens the persistent store at `path` off the runtime (redb creates or
/// checks the file and commits durably), retrying a locked file for up to
/// [`LOCKED_RETRY`] (another instance's lock stays: then the error).
async fn open_persistent(path: PathBuf) -> Result<PersistentStore, StoreError> {
    let deadline = Instant::now() + LOCKED_RETRY;
    loop {
        let p = path.clone();
        let opened = off_runtime("opening a state store", move || PersistentStore::open(p))
            .await
            .map_err(|e| StoreError::io(&path, e))?;
        match opened {
            Err(StoreError::Locked { .. }) if Instant::now() < deadline => {
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
            opened => return opened,
        }
    }
}

/// A store of one partition opened from its files (or fresh, in memory),
/// not restored yet.
struct Opened {
    store: Arc<dyn KeyValueStore>,
    windows: Option<Arc<WindowStore>>,
    changelog: TopicPartition,
    checkpoint: Option<CheckpointFile>,
    /// Where its restore starts (`None`: the changelog's start).
    from: Option<i64>,
}

/// Opens store `spec` of `partition`: a persistent one from its file and
/// checkpoint (wiped when the checkpoint is missing or corrupt), and a
/// window store's index.
async fn open_store(
    rt: &StoresRuntime,
    spec: &StoreSpec,
    partition: i32,
) -> Result<Opened, ProcessingError> {
    let name = spec.name();
    let changelog = match spec.source_topic() {
        Some(topic) => TopicPartition::new(topic, partition),
        None => TopicPartition::new(changelog_topic(&rt.application_id, name), partition),
    };
    let (store, checkpoint, from): (Box<dyn KeyValueStore>, _, _) = match spec.kind {
        StoreKind::InMemory => (Box::new(InMemoryStore::new()), None, None),
        StoreKind::Persistent => {
            let dir = rt
                .state_dir
                .join(&rt.application_id)
                .join(format!("0_{partition}"));
            let store = open_persistent(dir.join(format!("{name}.redb"))).await?;
            let checkpoint = CheckpointFile::new(dir.join(format!("{name}.checkpoint")));
            let path = checkpoint.path().to_path_buf();
            let cl = changelog.clone();
            let (store, checkpoint, from) =
                off_runtime("reading a store's checkpoint", move || {
                    let from = start_from_checkpoint(&store, &checkpoint, &cl)?;
                    Ok::<_, StoreError>((store, checkpoint, from))
                })
                .await
                .map_err(|e| StoreError::io(path, e))??;
            (Box::new(store), Some(checkpoint), from)
        }
    };
    let (store, windows): (Arc<dyn KeyValueStore>, _) = match spec.window_retention_ms {
        Some(retention) => {
            let sessions = spec.sessions;
            // A persistent window store rebuilds its index by a scan.
            let w = off_runtime("opening a window store", move || {
                if sessions {
                    WindowStore::sessions(store, retention)
                } else {
                    WindowStore::new(store, retention)
                }
            })
            .await
            .map_err(|e| ProcessingError::new(format!("store {name}: {e}")))??;
            let w = Arc::new(w);
            (w.clone(), Some(w))
        }
        None => (Arc::from(store), None),
    };
    Ok(Opened {
        store,
        windows,
        changelog,
        checkpoint,
        from,
    })
}

/// Restores `store` (store `name`) from `changelog` at `from` (`None`:
/// its start) to its end, tracing progress.
async fn restore_store(
    rt: &StoresRuntime,
    name: &str,
    changelog: &TopicPartition,
    from: Option<i64>,
    store: &Arc<dyn KeyValueStore>,
) -> Result<super::changelog::Restored, ProcessingError> {
    let progress = |n: u64| debug!(store = name, %changelog, records = n, "restoring");
    restore(
        &rt.cluster,
        rt.restore_config.clone(),
        changelog,
        from,
        store,
        &progress,
    )
    .await
    .map_err(|e| ProcessingError::new(format!("restoring store {name} from {changelog}: {e}")))
}

/// Where a just-opened persistent store restores from (blocking file
/// work): its checkpoint's offset, or the changelog's start (`None`)
/// after wiping the store when the checkpoint is missing or corrupt. The
/// checkpoint is removed: from here on the store may hold writes no
/// checkpoint covers, and only a clean close writes one again.
fn start_from_checkpoint(
    store: &PersistentStore,
    checkpoint: &CheckpointFile,
    changelog: &TopicPartition,
) -> Result<Option<i64>, StoreError> {
    let from = match checkpoint.read(changelog)? {
        Checkpoint::Offset(o) => Some(o),
        Checkpoint::Missing => {
            debug!(%changelog, "no checkpoint; wiping the store");
            store.wipe()?;
            None
        }
        Checkpoint::Corrupt(reason) => {
            warn!(%changelog, path = %checkpoint.path().display(), %reason,
                "corrupt checkpoint; wiping the store and restoring it from the changelog");
            store.wipe()?;
            None
        }
    };
    checkpoint.remove()?;
    Ok(from)
}
