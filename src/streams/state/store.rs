//! The key-value store API (Kafka Streams' `KeyValueStore`, KIP-67) over
//! bytes, and its two engines: a `BTreeMap` in memory and a redb file.
//! Typed access goes through the stage's serdes; the store keeps bytes,
//! so its changelog holds exactly what the store holds.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};

use bytes::Bytes;
use redb::{Database, Durability, ReadableTableMetadata, TableDefinition};

use super::StoreError;

/// A key-value store over bytes: ordered by key (byte order), so `range`
/// is a scan. Methods take `&self` (the engines lock inside) so that a
/// store can be shared by the workers of a task.
pub trait KeyValueStore: Send + Sync {
    /// The value of `key`, if any.
    fn get(&self, key: &[u8]) -> Result<Option<Bytes>, StoreError>;
    /// Sets `key` to `value`.
    fn put(&self, key: Bytes, value: Bytes) -> Result<(), StoreError>;
    /// Removes `key` (nothing if absent).
    fn delete(&self, key: &[u8]) -> Result<(), StoreError>;
    /// The entries with keys in `from..to` bounds, in key order, at most
    /// `limit` of them.
    fn range(
        &self,
        from: Bound<&[u8]>,
        to: Bound<&[u8]>,
        limit: usize,
    ) -> Result<Vec<(Bytes, Bytes)>, StoreError>;
    /// Number of entries.
    fn len(&self) -> Result<u64, StoreError>;
    /// Whether the store is empty.
    fn is_empty(&self) -> Result<bool, StoreError> {
        Ok(self.len()? == 0)
    }
    /// Removes every entry (before a restore from the changelog's start).
    fn wipe(&self) -> Result<(), StoreError>;
    /// Makes every write so far durable (a no-op in memory).
    fn flush(&self) -> Result<(), StoreError>;
    /// Whether the store outlives the process (then a checkpoint lets a
    /// restore start from its offset).
    fn is_persistent(&self) -> bool;
}

/// A store in memory (Kafka Streams' in-memory store): restored from the
/// whole changelog on every assignment.
#[derive(Debug, Default)]
pub struct InMemoryStore {
    map: Mutex<BTreeMap<Bytes, Bytes>>,
}

impl InMemoryStore {
    /// An empty store.
    pub fn new() -> InMemoryStore {
        InMemoryStore::default()
    }

    fn map(&self) -> MutexGuard<'_, BTreeMap<Bytes, Bytes>> {
        self.map.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl KeyValueStore for InMemoryStore {
    fn get(&self, key: &[u8]) -> Result<Option<Bytes>, StoreError> {
        Ok(self.map().get(key).cloned())
    }

    fn put(&self, key: Bytes, value: Bytes) -> Result<(), StoreError> {
        self.map().insert(key, value);
        Ok(())
    }

    fn delete(&self, key: &[u8]) -> Result<(), StoreError> {
        self.map().remove(key);
        Ok(())
    }

    fn range(
        &self,
        from: Bound<&[u8]>,
        to: Bound<&[u8]>,
        limit: usize,
    ) -> Result<Vec<(Bytes, Bytes)>, StoreError> {
        if holds_nothing(from, to) {
            return Ok(Vec::new());
        }
        Ok(self
            .map()
            .range::<[u8], _>((from, to))
            .take(limit)
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect())
    }

    fn len(&self) -> Result<u64, StoreError> {
        Ok(self.map().len() as u64)
    }

    fn wipe(&self) -> Result<(), StoreError> {
        self.map().clear();
        Ok(())
    }

    fn flush(&self) -> Result<(), StoreError> {
        Ok(())
    }

    fn is_persistent(&self) -> bool {
        false
    }
}

/// Whether the bounds admit no key: inverted, or equal with one side
/// excluded (the engines' range scans panic on some of these).
fn holds_nothing(from: Bound<&[u8]>, to: Bound<&[u8]>) -> bool {
    match (from, to) {
        (Bound::Included(a), Bound::Included(b)) => a > b,
        (Bound::Included(a) | Bound::Excluded(a), Bound::Included(b) | Bound::Excluded(b)) => {
            a >= b
        }
        _ => false,
    }
}

const TABLE: TableDefinition<&[u8], &[u8]> = TableDefinition::new("kv");

/// Writes kept in memory before they are committed to redb in one
/// transaction (a redb write transaction per put cost ~75 µs of CPU).
const PENDING_MAX: usize = 8192;

/// Batch commits between two durable ones: the ones in between are not
/// synced (the changelog has their writes), and a durable one lets redb
/// free the pages the others left.
const DURABLE_EVERY: u32 = 8;

/// A store in one redb file (copy-on-write B-tree, ACID commits, crash
/// safe). Writes wait in memory and go to redb in one transaction, not
/// synced, per 8192 of them, before a `range` or `len`, and on `flush`,
/// which commits durably (as does every 8th batch). Writes not yet
/// committed are lost in a crash, which the changelog covers: a checkpoint
/// is written only after a flush. The file is locked while open: a second
/// open, here or in another process, is [`StoreError::Locked`].
pub struct PersistentStore {
    db: Database,
    path: PathBuf,
    /// Writes not yet in redb (`None`: a delete), and the batch commits
    /// since the last durable one. Held across redb calls, so a read never
    /// falls between the two.
    pending: Mutex<(BTreeMap<Bytes, Option<Bytes>>, u32)>,
}

impl std::fmt::Debug for PersistentStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PersistentStore")
            .field("path", &self.path)
            .finish()
    }
}

impl PersistentStore {
    /// Opens (or creates) the store file at `path`, creating its directory.
    pub fn open(path: impl AsRef<Path>) -> Result<PersistentStore, StoreError> {
        let path = path.as_ref().to_path_buf();
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(|e| StoreError::io(dir, e))?;
        }
        let db = match Database::create(&path) {
            Ok(db) => db,
            Err(redb::DatabaseError::DatabaseAlreadyOpen) => {
                return Err(StoreError::Locked { path });
            }
            Err(e) => return Err(StoreError::io(&path, e)),
        };
        let store = PersistentStore {
            db,
            path,
            pending: Mutex::new((BTreeMap::new(), 0)),
        };
        // Create the table, so that reads of a new store find it.
        store.write(Durability::Immediate, |_| Ok(()))?;
        Ok(store)
    }

    /// The store file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn err(&self, e: impl ToString) -> StoreError {
        StoreError::io(&self.path, e)
    }

    fn write(
        &self,
        durability: Durability,
        f: impl FnOnce(
            &mut redb::Table<'_, &'static [u8], &'static [u8]>,
        ) -> Result<(), redb::StorageError>,
    ) -> Result<(), StoreError> {
        let mut tx = self.db.begin_write().map_err(|e| self.err(e))?;
        tx.set_durability(durability);
        {
            let mut table = tx.open_table(TABLE).map_err(|e| self.err(e))?;
            f(&mut table).map_err(|e| self.err(e))?;
        }
        tx.commit().map_err(|e| self.err(e))
    }

    fn pending(&self) -> MutexGuard<'_, (BTreeMap<Bytes, Option<Bytes>>, u32)> {
        self.pending.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Commits the waiting writes in one transaction (durably when
    /// `durable`, or every [`DURABLE_EVERY`]th batch).
    fn commit(
        &self,
        pending: &mut (BTreeMap<Bytes, Option<Bytes>>, u32),
        durable: bool,
    ) -> Result<(), StoreError> {
        if pending.0.is_empty() && !durable {
            return Ok(());
        }
        pending.1 = pending.1.wrapping_add(1);
        let durability = if durable || pending.1.is_multiple_of(DURABLE_EVERY) {
            pending.1 = 0;
            Durability::Immediate
        } else {
            Durability::None
        };
        let writes = &pending.0;
        self.write(durability, |t| {
            for (k, v) in writes {
                match v {
                    Some(v) => {
                        t.insert(&k[..], &v[..])?;
                    }
                    None => {
                        t.remove(&k[..])?;
                    }
                }
            }
            Ok(())
        })?;
        pending.0.clear();
        Ok(())
    }

    fn stage(&self, key: Bytes, value: Option<Bytes>) -> Result<(), StoreError> {
        let mut pending = self.pending();
        pending.0.insert(key, value);
        if pending.0.len() >= PENDING_MAX {
            self.commit(&mut pending, false)?;
        }
        Ok(())
    }

    fn read<T>(
        &self,
        f: impl FnOnce(
            &redb::ReadOnlyTable<&'static [u8], &'static [u8]>,
        ) -> Result<T, redb::StorageError>,
    ) -> Result<T, StoreError> {
        let tx = self.db.begin_read().map_err(|e| self.err(e))?;
        let table = tx.open_table(TABLE).map_err(|e| self.err(e))?;
        f(&table).map_err(|e| self.err(e))
    }
}

impl KeyValueStore for PersistentStore {
    fn get(&self, key: &[u8]) -> Result<Option<Bytes>, StoreError> {
        let pending = self.pending();
        if let Some(v) = pending.0.get(key) {
            return Ok(v.clone());
        }
        self.read(|t| Ok(t.get(key)?.map(|v| Bytes::copy_from_slice(v.value()))))
    }

    fn put(&self, key: Bytes, value: Bytes) -> Result<(), StoreError> {
        self.stage(key, Some(value))
    }

    fn delete(&self, key: &[u8]) -> Result<(), StoreError> {
        self.stage(Bytes::copy_from_slice(key), None)
    }

    fn range(
        &self,
        from: Bound<&[u8]>,
        to: Bound<&[u8]>,
        limit: usize,
    ) -> Result<Vec<(Bytes, Bytes)>, StoreError> {
        if holds_nothing(from, to) {
            return Ok(Vec::new());
        }
        // redb's entries with the waiting writes laid over them (no
        // commit: a scan per record, as a session merge does, would
        // otherwise cost a write transaction each). Each waiting write in
        // the range hides at most one of redb's entries, so redb's first
        // `limit` plus that many hold the first `limit` of the result.
        let pending = self.pending();
        let over: Vec<(&Bytes, &Option<Bytes>)> = pending.0.range::<[u8], _>((from, to)).collect();
        let mut merged = self.read(|t| {
            let mut out = BTreeMap::new();
            for entry in t
                .range::<&[u8]>((from, to))?
                .take(limit.saturating_add(over.len()))
            {
                let (k, v) = entry?;
                out.insert(
                    Bytes::copy_from_slice(k.value()),
                    Bytes::copy_from_slice(v.value()),
                );
            }
            Ok(out)
        })?;
        for (k, v) in over {
            match v {
                Some(v) => merged.insert(k.clone(), v.clone()),
                None => merged.remove(k),
            };
        }
        Ok(merged.into_iter().take(limit).collect())
    }

    fn len(&self) -> Result<u64, StoreError> {
        let mut pending = self.pending();
        self.commit(&mut pending, false)?;
        self.read(|t| t.len())
    }

    fn wipe(&self) -> Result<(), StoreError> {
        let mut pending = self.pending();
        pending.0.clear();
        self.write(Durability::Immediate, |t| t.retain(|_, _| false))
    }

    fn flush(&self) -> Result<(), StoreError> {
        let mut pending = self.pending();
        self.commit(&mut pending, true)
    }

    fn is_persistent(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(s: &str) -> Bytes {
        Bytes::copy_from_slice(s.as_bytes())
    }

    fn exercise(store: &dyn KeyValueStore) {
        assert!(store.is_empty().unwrap());
        for k in ["b", "a", "d", "c"] {
            store.put(b(k), b(&k.to_uppercase())).unwrap();
        }
        assert_eq!(store.get(b"a").unwrap(), Some(b("A")));
        assert_eq!(store.get(b"z").unwrap(), None);
        store.put(b("a"), b("A2")).unwrap();
        assert_eq!(store.get(b"a").unwrap(), Some(b("A2")));
        store.delete(b"c").unwrap();
        store.delete(b"missing").unwrap();
        assert_eq!(store.len().unwrap(), 3);
        let keys = |v: Vec<(Bytes, Bytes)>| v.into_iter().map(|(k, _)| k).collect::<Vec<_>>();
        let all = store.range(Bound::Unbounded, Bound::Unbounded, 10).unwrap();
        assert_eq!(keys(all), vec![b("a"), b("b"), b("d")]);
        let some = store
            .range(Bound::Included(b"b"), Bound::Excluded(b"d"), 10)
            .unwrap();
        assert_eq!(keys(some), vec![b("b")]);
        let limited = store.range(Bound::Unbounded, Bound::Unbounded, 2).unwrap();
        assert_eq!(limited.len(), 2);
        let inverted = store
            .range(Bound::Included(b"d"), Bound::Included(b"a"), 10)
            .unwrap();
        assert!(inverted.is_empty());
        let one = store
            .range(Bound::Included(b"b"), Bound::Included(b"b"), 10)
            .unwrap();
        assert_eq!(keys(one), vec![b("b")]);
        let none = store
            .range(Bound::Excluded(b"b"), Bound::Excluded(b"b"), 10)
            .unwrap();
        assert!(none.is_empty());
        store.wipe().unwrap();
        assert!(store.is_empty().unwrap());
    }

    #[test]
    fn in_memory_store_gets_puts_deletes_and_ranges() {
        let store = InMemoryStore::new();
        exercise(&store);
        assert!(!store.is_persistent());
    }

    #[test]
    fn persistent_store_gets_puts_deletes_ranges_and_survives_a_reopen() {
        let dir = crate::streams::state::checkpoint::tests::temp_dir("kv");
        let path = dir.join("counts.redb");
        {
            let store = PersistentStore::open(&path).unwrap();
            exercise(&store);
            assert!(store.is_persistent());
            store.put(b("k"), b("v")).unwrap();
            store.flush().unwrap();
        }
        let store = PersistentStore::open(&path).unwrap();
        assert_eq!(store.get(b"k").unwrap(), Some(b("v")));
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn persistent_writes_wait_in_memory_until_a_batch_or_a_flush() {
        let dir = crate::streams::state::checkpoint::tests::temp_dir("batch");
        let path = dir.join("b.redb");
        let n = PENDING_MAX as u64 * 2 + 10;
        {
            let store = PersistentStore::open(&path).unwrap();
            for i in 0..n {
                store.put(b(&format!("k{i:06}")), b("v")).unwrap();
            }
            store.delete(b"k000000").unwrap();
            store.flush().unwrap();
            // Ranges lay the waiting writes over redb's entries.
            store.delete(b"k000002").unwrap();
            store.put(b("k000001"), b("w")).unwrap();
            store.put(b("k0000015"), b("new")).unwrap();
            let first = store
                .range(Bound::Included(b"k000000"), Bound::Unbounded, 3)
                .unwrap();
            assert_eq!(
                first,
                vec![
                    (b("k000001"), b("w")),
                    (b("k0000015"), b("new")),
                    (b("k000003"), b("v"))
                ]
            );
            store.put(b("k000001"), b("v")).unwrap();
            store.put(b("k000002"), b("v")).unwrap();
            store.delete(b"k0000015").unwrap();
            // Reads see the waiting writes.
            assert_eq!(store.get(b"k000000").unwrap(), None);
            assert_eq!(store.get(b"k000001").unwrap(), Some(b("v")));
            assert_eq!(store.len().unwrap(), n - 1);
            store.put(b("late"), b("x")).unwrap();
            store.flush().unwrap();
            store.put(b("lost"), b("x")).unwrap();
        }
        let store = PersistentStore::open(&path).unwrap();
        assert_eq!(store.get(b"late").unwrap(), Some(b("x")));
        assert_eq!(store.get(b"lost").unwrap(), None, "never flushed");
        assert_eq!(store.len().unwrap(), n);
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn a_store_file_open_elsewhere_is_a_lock_error_naming_the_path() {
        let dir = crate::streams::state::checkpoint::tests::temp_dir("lock");
        let path = dir.join("counts.redb");
        let _held = PersistentStore::open(&path).unwrap();
        let err = PersistentStore::open(&path).unwrap_err();
        assert!(matches!(err, StoreError::Locked { .. }), "{err:?}");
        assert!(
            err.to_string().contains(&path.display().to_string())
                && err.to_string().contains("state.dir"),
            "{err}"
        );
        let _ = std::fs::remove_dir_all(dir);
    }
}
