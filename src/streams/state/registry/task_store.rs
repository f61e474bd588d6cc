//! One store of one input partition ([`TaskStore`]): read-modify-write
//! into the store (or its record cache) and through to the store's
//! changelog partition, window expiry and emit-on-close, checkpoints and
//! the close (Kafka Streams' `ChangeLoggingKeyValueBytesStore` and
//! `ProcessorStateManager`; KIP-63 for the cache).

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use tracing::{debug, warn};

use super::super::cache::{CacheBudget, CacheEntry, RecordCache, Update};
use super::super::checkpoint::CheckpointFile;
use super::super::store::KeyValueStore;
use super::super::window::WindowStore;
use super::super::StoreError;
use super::changelog_acks::ChangelogAcks;
use super::{lock, Opened, StoreSpec, StoresRuntime};
use crate::producer::{DeliveryReceiver, Producer, ProducerRecord};
use crate::protocol::records::RecordHeader;
use crate::streams::error::ProcessingError;
use crate::TopicPartition;

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
    pub(super) name: String,
    store: Arc<dyn KeyValueStore>,
    /// The same store when it is a window store.
    windows: Option<Arc<WindowStore>>,
    pub(super) changelog: TopicPartition,
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
    /// The changelog writes' acknowledgements: every write is sent
    /// without waiting, tagged, and the commit waits for all of them
    /// (`await_unacked`) before the input offsets covering them are
    /// committed. Once a write failed (after the producer's own retries)
    /// every later wait reports it, so no commit covers the writes lost,
    /// and no checkpoint is written.
    acks: Arc<ChangelogAcks>,
    /// The same, as the producer's receiver.
    receiver: Arc<dyn DeliveryReceiver>,
    /// The offset of the last checkpoint written since the store opened
    /// (`i64::MIN`: none yet).
    checkpointed: AtomicI64,
    /// The changelog's end when the store was restored.
    restored_end: i64,
    /// A table's reader of its topic, when the store is a table's.
    pub(super) follower: Option<super::super::table::Follower>,
}

/// Changelog records past the last checkpoint before a commit writes the
/// next one (Kafka Streams' `OFFSET_DELTA_THRESHOLD_FOR_CHECKPOINT`).
const CHECKPOINT_DELTA: i64 = 10_000;

/// A write of [`TaskStore::rewrite`]: key, new value (`None`: delete)
/// and the changelog record's timestamp.
pub(crate) type Write = (Bytes, Option<Bytes>, i64);

impl TaskStore {
    /// The task store of `opened`, holding every changelog write below
    /// `end` (where its restore, or its follower, stopped).
    pub(super) fn assemble(
        rt: &StoresRuntime,
        spec: &StoreSpec,
        opened: Opened,
        end: i64,
        follower: Option<super::super::table::Follower>,
    ) -> Arc<TaskStore> {
        let acks = Arc::new(ChangelogAcks::default());
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
            receiver: acks.clone(),
            acks,
            checkpointed: AtomicI64::new(i64::MIN),
            restored_end: end,
            follower,
        })
    }

    /// The parts of this store, to open it again in another role
    /// (promotion, demotion); `from`: the changelog offset it holds
    /// everything below.
    pub(super) fn reopened(&self) -> Opened {
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
            // Boxed: a rare branch whose future would otherwise be
            // inlined into every record's.
            Box::pin(self.send_to_changelog(&k, &e)).await?;
            evicted.push((k, e));
        }
        Ok(evicted)
    }

    /// Writes every cached entry out (store, then changelog, not awaited:
    /// the commit that runs this flush awaits every changelog write before
    /// it commits offsets); returns the entries, least recently updated
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

    /// Sends a cache entry already in the store to the changelog (the
    /// commit awaits it: [`await_unacked`](Self::await_unacked)).
    async fn send_to_changelog(&self, key: &Bytes, e: &CacheEntry) -> Result<(), ProcessingError> {
        let mut record = ProducerRecord::new(&self.changelog.topic)
            .key(key.clone())
            .partition(self.changelog.partition)
            .timestamp(e.timestamp);
        if let Some(v) = &e.value {
            record = record.value(v.clone());
        }
        self.send_write(record).await.map_err(|err| {
            ProcessingError::new(format!(
                "changelog {} of store {} (writing out the record cache): {err}",
                self.changelog, self.name
            ))
        })
    }

    /// Sends a changelog write without waiting for its acknowledgement:
    /// the producer reports it with the other writes of its batch, and
    /// [`await_unacked`](Self::await_unacked) waits for them all. The
    /// caller holds `write`, so the changelog gets writes in the store's
    /// order.
    async fn send_write(&self, record: ProducerRecord) -> crate::Result<()> {
        let sending = self.acks.begin();
        self.producer
            .send_tagged(record, &self.receiver, sending.tag)
            .await?;
        sending.sent();
        Ok(())
    }

    /// Waits until every changelog write sent so far is acknowledged
    /// (under exactly-once, after the transaction's commit flushed them,
    /// they are already), advancing the offset a checkpoint records. The
    /// runtime's commit runs it (through `Stores::flush_changelogs`)
    /// before it commits input offsets. A write that failed (after the
    /// producer's retries) fails this and every later call: its message,
    /// naming the changelog partition.
    pub(crate) async fn await_unacked(&self) -> Result<(), String> {
        let end = self.acks.wait().await?;
        self.next_offset.fetch_max(end, Ordering::AcqRel);
        Ok(())
    }

    /// Read-modify-write of `key` for the input record at `offset`: `f`
    /// gets the old value and gives the new one (`None` deletes); the
    /// write goes to the store, then is sent to the changelog (key, new
    /// value or a tombstone, `timestamp`) without waiting for its
    /// acknowledgement: the commit awaits it before it commits the
    /// record's offset (as Kafka Streams flushes its record collector at
    /// commit). A record run again
    /// in place (FailurePolicy::Retry) that this store already applied is
    /// not applied twice: its result is the current value.
    pub(crate) async fn update(
        &self,
        key: Bytes,
        offset: i64,
        timestamp: i64,
        f: impl FnOnce(Option<&Bytes>) -> Result<Option<Bytes>, ProcessingError>,
    ) -> Result<Option<Bytes>, ProcessingError> {
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
        if let Err(e) = self.send_write(record).await {
            // Not in the changelog: undo it, so a retry applies it once.
            self.write_local(&key, old.as_ref())?;
            return Err(ProcessingError::new(format!(
                "changelog {} of store {}: {e}",
                self.changelog, self.name
            )));
        }
        if let Some(applied) = &self.applied {
            lock(applied).insert(key, offset);
        }
        Ok(new)
    }

    /// Deletes the windows expired at `stream_time` (a window store's
    /// retention) that start at most at `at_most` (emit-on-close: the
    /// windows already emitted), from the store and, by tombstones with `timestamp`,
    /// from the changelog (sent; the commit awaits them). Returns how many
    /// windows expired.
    pub(crate) async fn expire_windows(
        &self,
        stream_time: i64,
        timestamp: i64,
        at_most: i64,
    ) -> Result<usize, ProcessingError> {
        let Some(windows) = &self.windows else {
            return Ok(0);
        };
        let n = {
            let _write = self.write.lock().await;
            let expired =
                windows.expired(stream_time.min(at_most.saturating_add(windows.retention_ms())));
            let n = expired.len();
            for key in expired {
                self.write_local(&key, None)?;
                if let Some(applied) = &self.applied {
                    lock(applied).remove(&key);
                }
                let record = ProducerRecord::new(&self.changelog.topic)
                    .key(key)
                    .partition(self.changelog.partition)
                    .timestamp(timestamp);
                self.send_write(record).await.map_err(|e| {
                    ProcessingError::new(format!(
                        "changelog {} of store {} (expiring a window): {e}",
                        self.changelog, self.name
                    ))
                })?;
            }
            n
        };
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
        if let Err(e) = self.send_write(record).await {
            self.write_local(&key, marker.as_ref())?;
            return Err(ProcessingError::new(format!(
                "changelog {} of store {} (closing windows): {e}",
                self.changelog, self.name
            )));
        }
        Ok((closed, last))
    }

    /// Read-modify-write of several keys for the input record at
    /// `offset` (a session merge): `f` gets the entries with keys in
    /// `from..=to` (key order) and whether this record was already applied
    /// (run again in place: it must then write nothing), and gives the
    /// writes, in order (key, new value or `None` to delete, changelog
    /// timestamp), and a result. Each write goes to the store, then is
    /// sent to the changelog (the commit awaits them). If a changelog send fails, the store's writes
    /// are undone. `applied` names the record's key for the retry-in-place
    /// bookkeeping.
    pub(crate) async fn rewrite<R>(
        &self,
        (from, to): (&[u8], &[u8]),
        (offset, applied): (i64, &Bytes),
        f: impl FnOnce(Vec<(Bytes, Bytes)>, bool) -> Result<(Vec<Write>, R), ProcessingError>,
    ) -> Result<R, ProcessingError> {
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
            if let Err(e) = self.send_write(record).await {
                for (key, old) in undo.iter().rev() {
                    self.write_local(key, old.as_ref())?;
                }
                return Err(ProcessingError::new(format!(
                    "changelog {} of store {}: {e}",
                    self.changelog, self.name
                )));
            }
        }
        if let Some(a) = &self.applied {
            lock(a).insert(applied.clone(), offset);
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

    pub(super) fn close(&self, clean: bool) {
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
    pub(super) fn checkpoint_due(&self, always: bool) -> bool {
        if self.checkpoint.is_none() || self.acks.failed() {
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
    pub(in crate::streams::state) fn write_checkpoint(&self, always: bool) {
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
