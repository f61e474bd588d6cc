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
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use bytes::Bytes;
use tokio::sync::OnceCell;
use tokio::time::Instant;
use tracing::{debug, info, warn};

use super::blocking::off_runtime;
use super::cache::{CacheBudget, CacheEntry, RecordCache, Update};
use super::changelog::{changelog_topic, restore};
use super::checkpoint::{Checkpoint, CheckpointFile};
use super::store::{InMemoryStore, KeyValueStore, PersistentStore};
use super::window::WindowStore;
use super::StoreError;
use crate::cluster::Cluster;
use crate::consumer::ConsumerConfig;
use crate::producer::{DeliveryFuture, Producer, ProducerRecord};
use crate::protocol::records::RecordHeader;
use crate::streams::error::ProcessingError;
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

mod standby;

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

/// The key of a window store's emit-on-close marker (see
/// [`TaskStore::close_windows`]).
const CLOSED_KEY: &[u8] = b"";

/// A marker's previous cutoff, cutoff and the input offset that wrote it.
fn closed_marker(b: &[u8]) -> Option<(i64, i64, i64)> {
    let field = |i: usize| -> Option<i64> {
        Some(i64::from_be_bytes(
            b.get(i * 8..i * 8 + 8)?.try_into().ok()?,
        ))
    };
    Some((field(0)?, field(1)?, field(2)?))
}

/// Entries taken out of a record cache, with the bytes they freed.
type TakenEntries = (Vec<(Bytes, CacheEntry)>, usize);

/// One store of one input partition, writing through to its changelog
/// partition.
pub(crate) struct TaskStore {
    name: String,
    store: Arc<dyn KeyValueStore>,
    /// The same store when it is a window store.
    windows: Option<Arc<WindowStore>>,
    changelog: TopicPartition,
    checkpoint: Option<CheckpointFile>,
    producer: Producer,
    /// Serializes read-modify-write and the changelog send, so the
    /// changelog gets a key's writes in the store's order.
    write: tokio::sync::Mutex<()>,
    /// The changelog offset below which every write is acknowledged.
    next_offset: AtomicI64,
    applied: Option<Mutex<HashMap<Bytes, i64>>>,
    /// The highest record timestamp this store's stage has seen since the
    /// store opened (windowed stages judge lateness by it).
    stream_time: AtomicI64,
    /// The record cache and the application's budget, when the stage
    /// caches.
    cache: Option<(Mutex<RecordCache>, Arc<CacheBudget>)>,
    /// Changelog writes of cache evictions and flushes not awaited yet.
    unacked: Mutex<Vec<DeliveryFuture>>,
    /// The offset of the last checkpoint written since the store opened
    /// (`i64::MIN`: none yet).
    checkpointed: AtomicI64,
    /// The changelog's end when the store was restored.
    restored_end: i64,
    /// A table's reader of its topic, when the store is a table's.
    follower: Option<super::table::Follower>,
}

/// Changelog records past the last checkpoint before a commit writes the
/// next one (Kafka Streams' `OFFSET_DELTA_THRESHOLD_FOR_CHECKPOINT`).
const CHECKPOINT_DELTA: i64 = 10_000;

/// A write of [`TaskStore::rewrite`]: key, new value (`None`: delete)
/// and the changelog record's timestamp.
pub(crate) type Write = (Bytes, Option<Bytes>, i64);

/// Unawaited changelog writes at which an update waits for them (bounds
/// the list between two commits).
const MAX_UNACKED: usize = 4096;

impl TaskStore {
    /// The task store of `opened`, holding every changelog write below
    /// `end` (where its restore, or its follower, stopped).
    fn assemble(
        rt: &StoresRuntime,
        spec: &StoreSpec,
        opened: Opened,
        end: i64,
        follower: Option<super::table::Follower>,
    ) -> Arc<TaskStore> {
        Arc::new(TaskStore {
            name: spec.name.clone(),
            store: opened.store,
            windows: opened.windows,
            changelog: opened.changelog,
            checkpoint: opened.checkpoint,
            producer: rt.producer.clone(),
            write: tokio::sync::Mutex::new(()),
            next_offset: AtomicI64::new(end),
            applied: rt.retries_in_place.then(Mutex::default),
            stream_time: AtomicI64::new(i64::MIN),
            cache: spec
                .cached
                .then(|| (Mutex::default(), rt.cache_budget.clone())),
            unacked: Mutex::default(),
            checkpointed: AtomicI64::new(i64::MIN),
            restored_end: end,
            follower,
        })
    }

    /// The parts of this store, to open it again in another role
    /// (promotion, demotion); `from`: the changelog offset it holds
    /// everything below.
    fn reopened(&self) -> Opened {
        Opened {
            store: self.store.clone(),
            windows: self.windows.clone(),
            changelog: self.changelog.clone(),
            checkpoint: self.checkpoint.clone(),
            from: Some(self.next_offset.load(Ordering::Acquire)),
        }
    }

    /// Observes a record's timestamp; returns the stream time after it.
    pub(crate) fn observe(&self, timestamp: i64) -> i64 {
        self.stream_time
            .fetch_max(timestamp, Ordering::AcqRel)
            .max(timestamp)
    }

    /// The value of `key`, read through the record cache (interactive
    /// queries).
    pub(crate) fn get(&self, key: &[u8]) -> Result<Option<Bytes>, StoreError> {
        if let Some((cache, _)) = &self.cache {
            if let Some(v) = lock(cache).get(key) {
                return Ok(v.cloned());
            }
        }
        self.store.get(key)
    }

    /// Read-modify-write of `key` into the record cache, for the input
    /// record at `offset` (its context: `timestamp`, `headers`): `f` gets
    /// `origin` (the stage's typed key, kept with a new entry) and the old
    /// value (read through the cache, borrowed: a cached value is never
    /// copied) and gives the new one. Nothing is
    /// written to the store or the changelog unless the application's
    /// cache budget is exceeded: then the least recently updated entries
    /// of this store are written out (store, then changelog, not awaited
    /// here: a flush awaits them) and returned, for the stage to forward.
    /// A record run again in place that this store already applied is not
    /// applied twice. Returns the evicted entries.
    pub(crate) async fn update_cached<K: Send + Sync + 'static>(
        &self,
        key: Bytes,
        (offset, timestamp, headers): (i64, i64, Vec<RecordHeader>),
        origin: K,
        f: impl FnOnce(&K, Option<&Bytes>) -> Result<Option<Bytes>, ProcessingError>,
    ) -> Result<Vec<(Bytes, CacheEntry)>, ProcessingError> {
        let Some((cache, budget)) = &self.cache else {
            return Err(ProcessingError::new(format!(
                "store {}: no record cache",
                self.name
            )));
        };
        let (evicted, wait) = {
            let _write = self.write.lock().await;
            if let Some(applied) = &self.applied {
                if lock(applied).get(&key) == Some(&offset) {
                    return Ok(Vec::new());
                }
            }
            let applied_key = self.applied.as_ref().map(|_| key.clone());
            // One lookup: the old value is the cached one (borrowed) or,
            // on a miss, the store's.
            let update = Update {
                timestamp,
                offset,
                headers,
            };
            let delta = lock(cache).update(
                key,
                update,
                origin,
                |k| self.store.get(k).map_err(ProcessingError::from),
                f,
            )?;
            if let (Some(applied), Some(key)) = (&self.applied, applied_key) {
                lock(applied).insert(key, offset);
            }
            budget.add(delta);
            let mut evicted = Vec::new();
            while budget.exceeded() {
                // Out of the cache and into the store in one hold of the
                // cache's lock (see `write_out_locally`).
                let (mut taken, size) = self.write_out_locally(|c| {
                    c.evict()
                        .map_or((Vec::new(), 0), |(k, e, size)| (vec![(k, e)], size))
                })?;
                let Some((k, e)) = taken.pop() else {
                    break;
                };
                budget.release(size);
                // Boxed, as the wait below: rare branches whose futures
                // would otherwise be inlined into every record's.
                Box::pin(self.send_to_changelog(&k, &e)).await?;
                evicted.push((k, e));
            }
            (evicted, lock(&self.unacked).len() >= MAX_UNACKED)
        };
        if wait {
            Box::pin(self.await_unacked()).await?;
        }
        Ok(evicted)
    }

    /// Writes every cached entry out (store, then changelog) and waits
    /// until every changelog write made so far is acknowledged (or inside
    /// the open transaction); returns the entries, least recently updated
    /// first, for the stage to forward. The runtime's commit runs it (by a
    /// flush tick) before the offsets are committed.
    pub(crate) async fn flush_cache(&self) -> Result<Vec<(Bytes, CacheEntry)>, ProcessingError> {
        let Some((_, budget)) = &self.cache else {
            return Ok(Vec::new());
        };
        let flushed = {
            let _write = self.write.lock().await;
            let (entries, freed) = self.write_out_locally(RecordCache::drain)?;
            budget.release(freed);
            for (k, e) in &entries {
                self.send_to_changelog(k, e).await?;
            }
            entries
        };
        self.await_unacked().await?;
        if !flushed.is_empty() {
            debug!(store = %self.name, changelog = %self.changelog, entries = flushed.len(),
                "flushed the record cache");
        }
        Ok(flushed)
    }

    /// Takes entries out of the record cache with `take` and writes them
    /// to the store while still holding the cache's lock. A query reads
    /// the cache, then on a miss the store: were the lock released in
    /// between (as when each entry's changelog send was awaited before the
    /// next entry's store write), a query could miss the cache and read
    /// the store's older value: a count going back while a flush sends.
    /// Returns the entries and the bytes they freed.
    fn write_out_locally(
        &self,
        take: impl FnOnce(&mut RecordCache) -> TakenEntries,
    ) -> Result<TakenEntries, ProcessingError> {
        let Some((cache, _)) = &self.cache else {
            return Ok((Vec::new(), 0));
        };
        let mut cache = lock(cache);
        let (entries, freed) = take(&mut cache);
        for (k, e) in &entries {
            self.write_local(k, e.value.as_ref())?;
        }
        Ok((entries, freed))
    }

    /// Sends a cache entry already in the store to the changelog, keeping
    /// the delivery for [`await_unacked`](Self::await_unacked).
    async fn send_to_changelog(&self, key: &Bytes, e: &CacheEntry) -> Result<(), ProcessingError> {
        let mut record = ProducerRecord::new(&self.changelog.topic)
            .key(key.clone())
            .partition(self.changelog.partition)
            .timestamp(e.timestamp);
        if let Some(v) = &e.value {
            record = record.value(v.clone());
        }
        let delivery = self.producer.send(record).await.map_err(|err| {
            ProcessingError::new(format!(
                "changelog {} of store {} (writing out the record cache): {err}",
                self.changelog, self.name
            ))
        })?;
        lock(&self.unacked).push(delivery);
        Ok(())
    }

    /// Waits for the changelog writes of evictions and flushes so far.
    async fn await_unacked(&self) -> Result<(), ProcessingError> {
        let pending = std::mem::take(&mut *lock(&self.unacked));
        for delivery in pending {
            let meta = delivery.await.map_err(|e| {
                ProcessingError::new(format!(
                    "changelog {} of store {} (writing out the record cache): {e}",
                    self.changelog, self.name
                ))
            })?;
            if meta.offset >= 0 {
                self.next_offset
                    .fetch_max(meta.offset + 1, Ordering::AcqRel);
            }
        }
        Ok(())
    }

    /// Read-modify-write of `key` for the input record at `offset`: `f`
    /// gets the old value and gives the new one (`None` deletes); the
    /// write goes to the store, then to the changelog (key, new value or a
    /// tombstone, `timestamp`), and returns once the changelog write is
    /// acknowledged (or inside the open transaction). A record run again
    /// in place (FailurePolicy::Retry) that this store already applied is
    /// not applied twice: its result is the current value.
    pub(crate) async fn update(
        &self,
        key: Bytes,
        offset: i64,
        timestamp: i64,
        f: impl FnOnce(Option<&Bytes>) -> Result<Option<Bytes>, ProcessingError>,
    ) -> Result<Option<Bytes>, ProcessingError> {
        let (delivery, new) = {
            let _write = self.write.lock().await;
            let old = self.store.get(&key)?;
            if let Some(applied) = &self.applied {
                if lock(applied).get(&key) == Some(&offset) {
                    return Ok(old);
                }
            }
            let new = f(old.as_ref())?;
            let mut record = ProducerRecord::new(&self.changelog.topic)
                .key(key.clone())
                .partition(self.changelog.partition)
                .timestamp(timestamp);
            self.write_local(&key, new.as_ref())?;
            if let Some(v) = &new {
                record = record.value(v.clone());
            }
            let sent = match self.producer.send(record).await {
                Ok(d) => d,
                Err(e) => {
                    // Not in the changelog: undo it, so a retry applies it
                    // once.
                    self.write_local(&key, old.as_ref())?;
                    return Err(ProcessingError::new(format!(
                        "changelog {} of store {}: {e}",
                        self.changelog, self.name
                    )));
                }
            };
            if let Some(applied) = &self.applied {
                lock(applied).insert(key, offset);
            }
            (sent, new)
        };
        let meta = delivery.await.map_err(|e| {
            ProcessingError::new(format!(
                "changelog {} of store {}: {e}",
                self.changelog, self.name
            ))
        })?;
        if meta.offset >= 0 {
            self.next_offset
                .fetch_max(meta.offset + 1, Ordering::AcqRel);
        }
        Ok(new)
    }

    /// Deletes the windows expired at `stream_time` (a window store's
    /// retention) that start at most at `at_most` (emit-on-close: the
    /// windows already emitted), from the store and, by tombstones with `timestamp`,
    /// from the changelog; returns once the tombstones are acknowledged (or
    /// inside the open transaction). Returns how many windows expired.
    pub(crate) async fn expire_windows(
        &self,
        stream_time: i64,
        timestamp: i64,
        at_most: i64,
    ) -> Result<usize, ProcessingError> {
        let Some(windows) = &self.windows else {
            return Ok(0);
        };
        let sent = {
            let _write = self.write.lock().await;
            let expired =
                windows.expired(stream_time.min(at_most.saturating_add(windows.retention_ms())));
            let mut sent = Vec::with_capacity(expired.len());
            for key in expired {
                self.write_local(&key, None)?;
                if let Some(applied) = &self.applied {
                    lock(applied).remove(&key);
                }
                let record = ProducerRecord::new(&self.changelog.topic)
                    .key(key)
                    .partition(self.changelog.partition)
                    .timestamp(timestamp);
                sent.push(self.producer.send(record).await.map_err(|e| {
                    ProcessingError::new(format!(
                        "changelog {} of store {} (expiring a window): {e}",
                        self.changelog, self.name
                    ))
                })?);
            }
            sent
        };
        let n = sent.len();
        for delivery in sent {
            let meta = delivery.await.map_err(|e| {
                ProcessingError::new(format!(
                    "changelog {} of store {} (expiring a window): {e}",
                    self.changelog, self.name
                ))
            })?;
            if meta.offset >= 0 {
                self.next_offset
                    .fetch_max(meta.offset + 1, Ordering::AcqRel);
            }
        }
        if n > 0 {
            debug!(store = %self.name, changelog = %self.changelog, stream_time, windows = n,
                "expired windows past retention");
        }
        Ok(n)
    }

    /// Emit-on-close (a window store's final results): the windows whose
    /// start is at most `cutoff` and that no earlier record closed, for
    /// the input record at `offset`. The last cutoff emitted is kept in
    /// the store under the empty key (no windowed key is that short),
    /// written through to the changelog like any entry, so a restored
    /// store never emits a window twice; with it the previous cutoff and
    /// the offset that moved it, so that the same record run again in place
    /// gets the same windows. Returns the windows (store key, value) and
    /// the previous cutoff: windows up to it may be expired.
    pub(crate) async fn close_windows(
        &self,
        cutoff: i64,
        offset: i64,
        timestamp: i64,
    ) -> Result<(Vec<(Bytes, Bytes)>, i64), ProcessingError> {
        let Some(windows) = &self.windows else {
            return Ok((Vec::new(), i64::MIN));
        };
        let (closed, previous, delivery) = {
            let _write = self.write.lock().await;
            let marker = self.store.get(CLOSED_KEY)?;
            let (before, last, by) =
                marker
                    .as_deref()
                    .and_then(closed_marker)
                    .unwrap_or((i64::MIN, i64::MIN, -1));
            if by == offset {
                // Run again in place: the same windows as the first time.
                return Ok((
                    windows.starting_within(before.saturating_add(1), last)?,
                    before,
                ));
            }
            if cutoff <= last {
                return Ok((Vec::new(), last));
            }
            let closed = windows.starting_within(last.saturating_add(1), cutoff)?;
            if closed.is_empty() {
                return Ok((closed, last));
            }
            let mut value = Vec::with_capacity(24);
            value.extend_from_slice(&last.to_be_bytes());
            value.extend_from_slice(&cutoff.to_be_bytes());
            value.extend_from_slice(&offset.to_be_bytes());
            let value = Bytes::from(value);
            let key = Bytes::from_static(CLOSED_KEY);
            self.write_local(&key, Some(&value))?;
            let record = ProducerRecord::new(&self.changelog.topic)
                .key(key.clone())
                .value(value)
                .partition(self.changelog.partition)
                .timestamp(timestamp);
            let sent = match self.producer.send(record).await {
                Ok(d) => d,
                Err(e) => {
                    let old = marker.as_ref();
                    self.write_local(&key, old)?;
                    return Err(ProcessingError::new(format!(
                        "changelog {} of store {} (closing windows): {e}",
                        self.changelog, self.name
                    )));
                }
            };
            (closed, last, sent)
        };
        let meta = delivery.await.map_err(|e| {
            ProcessingError::new(format!(
                "changelog {} of store {} (closing windows): {e}",
                self.changelog, self.name
            ))
        })?;
        if meta.offset >= 0 {
            self.next_offset
                .fetch_max(meta.offset + 1, Ordering::AcqRel);
        }
        Ok((closed, previous))
    }

    /// Read-modify-write of several keys for the input record at
    /// `offset` (a session merge): `f` gets the entries with keys in
    /// `from..=to` (key order) and whether this record was already applied
    /// (run again in place: it must then write nothing), and gives the
    /// writes, in order (key, new value or `None` to delete, changelog
    /// timestamp), and a result. Each write goes to the store, then to
    /// the changelog; returns once they are acknowledged (or inside the
    /// open transaction). If a changelog send fails, the store's writes
    /// are undone. `applied` names the record's key for the retry-in-place
    /// bookkeeping.
    pub(crate) async fn rewrite<R>(
        &self,
        (from, to): (&[u8], &[u8]),
        (offset, applied): (i64, &Bytes),
        f: impl FnOnce(Vec<(Bytes, Bytes)>, bool) -> Result<(Vec<Write>, R), ProcessingError>,
    ) -> Result<R, ProcessingError> {
        let (sent, result) = {
            let _write = self.write.lock().await;
            let entries = self.store.range(
                std::ops::Bound::Included(from),
                std::ops::Bound::Included(to),
                usize::MAX,
            )?;
            let rerun = self
                .applied
                .as_ref()
                .is_some_and(|a| lock(a).get(applied) == Some(&offset));
            let (writes, result) = f(entries, rerun)?;
            let mut undo = Vec::with_capacity(writes.len());
            let mut sent = Vec::with_capacity(writes.len());
            for (key, value, timestamp) in writes {
                undo.push((key.clone(), self.store.get(&key)?));
                self.write_local(&key, value.as_ref())?;
                let mut record = ProducerRecord::new(&self.changelog.topic)
                    .key(key)
                    .partition(self.changelog.partition)
                    .timestamp(timestamp);
                if let Some(v) = value {
                    record = record.value(v);
                }
                match self.producer.send(record).await {
                    Ok(d) => sent.push(d),
                    Err(e) => {
                        for (key, old) in undo.iter().rev() {
                            self.write_local(key, old.as_ref())?;
                        }
                        return Err(ProcessingError::new(format!(
                            "changelog {} of store {}: {e}",
                            self.changelog, self.name
                        )));
                    }
                }
            }
            if let Some(a) = &self.applied {
                lock(a).insert(applied.clone(), offset);
            }
            (sent, result)
        };
        for delivery in sent {
            let meta = delivery.await.map_err(|e| {
                ProcessingError::new(format!(
                    "changelog {} of store {}: {e}",
                    self.changelog, self.name
                ))
            })?;
            if meta.offset >= 0 {
                self.next_offset
                    .fetch_max(meta.offset + 1, Ordering::AcqRel);
            }
        }
        Ok(result)
    }

    /// A table's records read from its topic, applied in offset order
    /// (a null value deletes the key, a null key is skipped); the store
    /// then holds everything below `next`, the reader's position.
    pub(crate) fn apply_followed(
        &self,
        records: Vec<crate::consumer::ConsumerRecord>,
        next: i64,
    ) -> Result<(), StoreError> {
        for r in records {
            let Some(key) = r.key else { continue };
            match r.value {
                Some(v) => self.store.put(key, v)?,
                None => self.store.delete(&key)?,
            }
        }
        self.next_offset.fetch_max(next, Ordering::AcqRel);
        Ok(())
    }

    /// Why a table store stopped following its topic, if it did (its
    /// joins then fail rather than read a table that no longer moves).
    pub(crate) fn follow_error(&self) -> Option<String> {
        self.follower.as_ref().and_then(|f| f.error())
    }

    /// The topic partition this store restores from (a table's: its
    /// source topic's).
    pub(crate) fn changelog(&self) -> &TopicPartition {
        &self.changelog
    }

    fn write_local(&self, key: &Bytes, value: Option<&Bytes>) -> Result<(), ProcessingError> {
        match value {
            Some(v) => self.store.put(key.clone(), v.clone())?,
            None => self.store.delete(key)?,
        }
        Ok(())
    }

    fn close(&self, clean: bool) {
        if let Some(follower) = &self.follower {
            follower.stop();
        }
        // What the cache still holds belongs to records not committed:
        // whoever gets the partition next runs them again.
        if let Some((cache, budget)) = &self.cache {
            let (dropped, freed) = lock(cache).drain();
            budget.release(freed);
            if !dropped.is_empty() {
                debug!(store = %self.name, entries = dropped.len(), "dropped the record cache on close");
            }
        }
        if clean {
            self.write_checkpoint(true);
        }
    }

    /// Whether [`write_checkpoint`](Self::write_checkpoint) would write
    /// (a persistent store, and `always` or a checkpoint due).
    fn checkpoint_due(&self, always: bool) -> bool {
        if self.checkpoint.is_none() {
            return false;
        }
        let offset = self.next_offset.load(Ordering::Acquire);
        let last = self.checkpointed.load(Ordering::Acquire);
        always
            || last == i64::MIN
            || (offset > last
                && (last <= self.restored_end || offset.saturating_sub(last) > CHECKPOINT_DELTA))
    }

    /// Flushes a persistent store and records the changelog offset below
    /// which it holds every write. Unless `always` (a clean close), only
    /// until one covers a write made since the store opened, then once
    /// the changelog grew more than [`CHECKPOINT_DELTA`] records past the
    /// last one (as Kafka Streams): a checkpoint costs a durable commit of
    /// the store.
    pub(super) fn write_checkpoint(&self, always: bool) {
        let Some(checkpoint) = &self.checkpoint else {
            return;
        };
        if !self.checkpoint_due(always) {
            return;
        }
        let offset = self.next_offset.load(Ordering::Acquire);
        let written = self
            .store
            .flush()
            .and_then(|()| checkpoint.write(&self.changelog, offset));
        match written {
            Ok(()) => {
                self.checkpointed.store(offset, Ordering::Release);
                debug!(store = %self.name, changelog = %self.changelog, offset, "checkpointed")
            }
            Err(e) => {
                warn!(store = %self.name, error = %e, "checkpoint not written; the next open restores from the changelog's start")
            }
        }
    }
}
