//! The record cache of a key-value aggregation (Kafka Streams' KIP-63
//! cache, sized by `statestore.cache.max.bytes`): per store partition, the
//! latest value of each key updated since the last flush. Updates to a
//! cached key replace its entry, so the store, the changelog and the
//! stage's downstream see one write per key per flush instead of one per
//! record. Entries leave the cache, least recently updated first, when the
//! application's cache budget is exceeded (an eviction, written out by the
//! record that caused it) or all at once when the runtime commits (a
//! flush, run through the topology by a *flush tick*, see
//! [`flush_tick`]).
//!
//! The cache is pure: no store, producer or clock. Its owner
//! (`TaskStore`) writes what leaves it.

use std::any::Any;
use std::collections::hash_map::Entry;
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicUsize, Ordering};

use bytes::Bytes;

use crate::consumer::ConsumerRecord;
use crate::protocol::records::{RecordHeader, TimestampType};
use crate::TopicPartition;

/// Bytes counted per entry on top of its key, value and headers (the map
/// slot, the LRU queue slot, the record context).
const ENTRY_OVERHEAD: usize = 96;

/// A key's latest update, waiting in the cache.
pub(crate) struct CacheEntry {
    /// The new value (`None`: a delete).
    pub(crate) value: Option<Bytes>,
    /// The timestamp, input offset and headers of the record that wrote it
    /// last (its record context, given to the downstream record).
    pub(crate) timestamp: i64,
    pub(crate) offset: i64,
    pub(crate) headers: Vec<RecordHeader>,
    /// The stage's typed key, handed back when the entry leaves.
    pub(crate) origin: Box<dyn Any + Send + Sync>,
    seq: u64,
    size: usize,
}

impl std::fmt::Debug for CacheEntry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CacheEntry")
            .field("value", &self.value)
            .field("timestamp", &self.timestamp)
            .field("offset", &self.offset)
            .finish()
    }
}

/// The cache of one store partition.
#[derive(Default)]
pub(crate) struct RecordCache {
    entries: HashMap<Bytes, CacheEntry>,
    /// (update sequence, key), oldest first. An update appends; the older
    /// pair of its key stays until it reaches the front and is skipped
    /// (its sequence no longer matches the entry's), so an update costs no
    /// search. Compacted when stale pairs outnumber the entries.
    order: VecDeque<(u64, Bytes)>,
    next_seq: u64,
    bytes: usize,
}

/// The record context of an update for [`RecordCache::update`].
pub(crate) struct Update {
    pub(crate) timestamp: i64,
    pub(crate) offset: i64,
    pub(crate) headers: Vec<RecordHeader>,
}

impl RecordCache {
    /// The cached value of `key`: `Some(None)` when its latest update is a
    /// delete, `None` when it is not cached.
    pub(crate) fn get(&self, key: &[u8]) -> Option<Option<&Bytes>> {
        self.entries.get(key).map(|e| e.value.as_ref())
    }

    /// Read-modify-write of `key` in one map lookup: `f` gets `origin`
    /// (the stage's typed key, kept in a new entry) and the old value
    /// (the cached one, borrowed, or on a miss what `miss` reads from the
    /// store) and gives the new one (`None`: a delete), cached as the
    /// key's latest with `update`'s context. Returns the change in the
    /// cache's size, in bytes.
    pub(crate) fn update<K: Send + Sync + 'static, E>(
        &mut self,
        key: Bytes,
        update: Update,
        origin: K,
        miss: impl FnOnce(&[u8]) -> Result<Option<Bytes>, E>,
        f: impl FnOnce(&K, Option<&Bytes>) -> Result<Option<Bytes>, E>,
    ) -> Result<isize, E> {
        let seq = self.next_seq;
        let header_bytes: usize = update
            .headers
            .iter()
            .map(|h| h.key.len() + h.value.as_ref().map_or(0, Bytes::len))
            .sum();
        let size = |key: &Bytes, value: &Option<Bytes>| {
            key.len() + value.as_ref().map_or(0, Bytes::len) + header_bytes + ENTRY_OVERHEAD
        };
        let before = self.bytes;
        match self.entries.entry(key) {
            Entry::Occupied(mut o) => {
                let value = f(&origin, o.get().value.as_ref())?;
                let size = size(o.key(), &value);
                // The queue shares the map's key (a refcount, no copy).
                self.order.push_back((seq, o.key().clone()));
                let e = o.get_mut();
                self.bytes = self.bytes - e.size + size;
                e.value = value;
                e.timestamp = update.timestamp;
                e.offset = update.offset;
                e.headers = update.headers;
                e.seq = seq;
                e.size = size;
            }
            Entry::Vacant(v) => {
                let old = miss(v.key())?;
                let value = f(&origin, old.as_ref())?;
                let size = size(v.key(), &value);
                self.order.push_back((seq, v.key().clone()));
                self.bytes += size;
                v.insert(CacheEntry {
                    value,
                    timestamp: update.timestamp,
                    offset: update.offset,
                    headers: update.headers,
                    origin: Box::new(origin),
                    seq,
                    size,
                });
            }
        }
        self.next_seq += 1;
        if self.order.len() > 2 * self.entries.len() + 1024 {
            self.compact();
        }
        Ok(self.bytes as isize - before as isize)
    }

    /// Drops the stale pairs of `order`, keeping its order.
    fn compact(&mut self) {
        let entries = &self.entries;
        self.order
            .retain(|(seq, k)| entries.get(k).is_some_and(|e| e.seq == *seq));
    }

    /// Removes the least recently updated entry; with the bytes it freed.
    pub(crate) fn evict(&mut self) -> Option<(Bytes, CacheEntry, usize)> {
        while let Some((seq, key)) = self.order.pop_front() {
            if self.entries.get(&key).is_some_and(|e| e.seq == seq) {
                let entry = self.entries.remove(&key)?;
                self.bytes -= entry.size;
                let size = entry.size;
                return Some((key, entry, size));
            }
        }
        None
    }

    /// Removes every entry, least recently updated first; with the bytes
    /// freed.
    pub(crate) fn drain(&mut self) -> (Vec<(Bytes, CacheEntry)>, usize) {
        let freed = self.bytes;
        let mut out = Vec::with_capacity(self.entries.len());
        while let Some((key, entry, _)) = self.evict() {
            out.push((key, entry));
        }
        self.order.clear();
        self.bytes = 0;
        (out, freed)
    }
}

/// The application's cache budget (`statestore.cache.max.bytes`), shared
/// by the caches of all its stores and partitions, as Kafka Streams shares
/// one among a thread's tasks.
#[derive(Debug)]
pub(crate) struct CacheBudget {
    max: usize,
    used: AtomicUsize,
}

impl CacheBudget {
    pub(crate) fn new(max: usize) -> CacheBudget {
        CacheBudget {
            max,
            used: AtomicUsize::new(0),
        }
    }

    /// Adds a cache's change in size.
    pub(crate) fn add(&self, delta: isize) {
        if delta >= 0 {
            self.used.fetch_add(delta as usize, Ordering::AcqRel);
        } else {
            self.release(delta.unsigned_abs());
        }
    }

    /// Gives back bytes a cache freed.
    pub(crate) fn release(&self, bytes: usize) {
        let _ = self
            .used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |u| {
                Some(u.saturating_sub(bytes))
            });
    }

    /// Whether the caches hold more than the budget.
    pub(crate) fn exceeded(&self) -> bool {
        self.used.load(Ordering::Acquire) > self.max
    }
}

/// The value of a flush tick: recognised by its address, which no
/// record read from a broker (a slice of a fetch response) can have.
static TICK: [u8; 1] = [0];

/// A flush tick for input partition `partition`: run through the
/// topology's processor when the runtime commits, it makes every caching
/// stage write out its cache for that partition (and passes what upstream
/// caches wrote out through the stage, as records); the source stage turns
/// it into no record.
pub(crate) fn flush_tick(partition: &TopicPartition) -> ConsumerRecord {
    ConsumerRecord {
        partition: partition.clone(),
        offset: -1,
        timestamp: -1,
        timestamp_type: TimestampType::CreateTime,
        key: None,
        value: Some(Bytes::from_static(&TICK)),
        headers: Vec::new(),
        leader_epoch: None,
    }
}

/// Whether `record` is a [`flush_tick`].
pub(crate) fn is_flush_tick(record: &ConsumerRecord) -> bool {
    record
        .value
        .as_ref()
        .is_some_and(|v| v.len() == 1 && std::ptr::eq(v.as_ptr(), TICK.as_ptr()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(s: &str) -> Bytes {
        Bytes::copy_from_slice(s.as_bytes())
    }

    /// Sets `key` to `v` at `offset`, keeping `origin` for a new entry;
    /// the change in size.
    fn put<K: Send + Sync + 'static>(
        c: &mut RecordCache,
        key: Bytes,
        v: &str,
        offset: i64,
        origin: K,
    ) -> isize {
        let context = Update {
            timestamp: offset * 10,
            offset,
            headers: Vec::new(),
        };
        c.update(
            key,
            context,
            origin,
            |_| Ok::<_, ()>(None),
            |_, _| Ok(Some(b(v))),
        )
        .unwrap()
    }

    #[test]
    fn updates_merge_per_key_and_leave_least_recently_updated_first() {
        let mut c = RecordCache::default();
        let d1 = put(&mut c, b("a"), "1", 0, "a");
        assert_eq!(d1, (1 + 1 + ENTRY_OVERHEAD) as isize);
        put(&mut c, b("b"), "1", 1, "b");
        put(&mut c, b("a"), "22", 2, "a2");
        assert_eq!(put(&mut c, b("c"), "1", 3, "c"), d1);
        assert_eq!(c.entries.len(), 3);
        assert_eq!(c.get(b"a"), Some(Some(&b("22"))));
        assert_eq!(c.get(b"z"), None);
        let (k, e, size) = c.evict().unwrap();
        assert_eq!(
            (k, e.offset, e.timestamp, size),
            (b("b"), 1, 10, d1 as usize)
        );
        assert_eq!(*e.origin.downcast::<&str>().unwrap(), "b");
        let (all, freed) = c.drain();
        let keys: Vec<(Bytes, i64)> = all.iter().map(|(k, e)| (k.clone(), e.offset)).collect();
        assert_eq!(keys, vec![(b("a"), 2), (b("c"), 3)]);
        assert_eq!(freed, 2 * d1 as usize + 1);
        assert_eq!(c.entries.len(), 0);
        assert!(c.evict().is_none());
        // The updated entry kept the typed key made by its first update.
        assert_eq!(*all[0].1.origin.downcast_ref::<&str>().unwrap(), "a");
    }

    #[test]
    fn an_update_reads_the_store_on_a_miss_only_and_builds_on_the_old_value() {
        let mut c = RecordCache::default();
        let mut misses = 0;
        let add_one = |_: &(), old: Option<&Bytes>| {
            let n: u8 = old.map_or(0, |b| b[0]);
            Ok::<_, ()>(Some(Bytes::copy_from_slice(&[n + 1])))
        };
        let context = |offset| Update {
            timestamp: 0,
            offset,
            headers: Vec::new(),
        };
        for offset in 0..3 {
            c.update(
                b("k"),
                context(offset),
                (),
                |_| {
                    misses += 1;
                    Ok(Some(Bytes::from_static(&[10])))
                },
                add_one,
            )
            .unwrap();
        }
        // The store's 10 read once, then three increments on the cached value.
        assert_eq!(misses, 1);
        assert_eq!(c.get(b"k"), Some(Some(&Bytes::from_static(&[13]))));
        // A failing update changes nothing.
        let failed = c.update(b("k"), context(3), (), |_| Ok(None), |_, _| Err("no"));
        assert_eq!(failed, Err("no"));
        assert_eq!(c.get(b"k"), Some(Some(&Bytes::from_static(&[13]))));
        assert_eq!(c.evict().map(|(_, e, _)| e.offset), Some(2));
    }

    #[test]
    fn the_order_queue_stays_bounded_under_repeated_updates() {
        let mut c = RecordCache::default();
        for i in 0..100_000 {
            put(&mut c, b(&format!("k{}", i % 10)), "v", i, ());
        }
        assert!(c.order.len() <= 2 * 10 + 1024 + 1, "{}", c.order.len());
        let (all, _) = c.drain();
        let offsets: Vec<i64> = all.iter().map(|(_, e)| e.offset).collect();
        assert_eq!(offsets, (99_990..100_000).collect::<Vec<_>>());
    }

    #[test]
    fn a_budget_is_shared_and_ticks_are_known_by_address_only() {
        let budget = CacheBudget::new(100);
        budget.add(60);
        budget.add(60);
        assert!(budget.exceeded());
        budget.add(-30);
        assert!(!budget.exceeded());
        budget.release(1000);
        assert!(!budget.exceeded());
        let tp = TopicPartition::new("t", 3);
        let tick = flush_tick(&tp);
        assert!(is_flush_tick(&tick));
        let mut lookalike = tick.clone();
        lookalike.value = Some(Bytes::copy_from_slice(&[0]));
        assert!(!is_flush_tick(&lookalike));
    }
}
