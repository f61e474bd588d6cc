//! The window store (Kafka Streams' `WindowStore`, KIP-67, with the
//! retention of KIP-328/KIP-633): a key-value store whose keys are a
//! record key followed by a window start (8 bytes big endian, Kafka
//! Streams' time-windowed layout, also the changelog's key), with an index
//! by window start so that windows past their retention are found without
//! a scan. A window starting at `start` is expired once stream time
//! reaches `start + retention`; the stage then deletes it from the store
//! and writes a tombstone to the changelog, so compaction drops it there
//! and a restore never brings it back.
//!
//! A session store ([`WindowStore::sessions`], Kafka Streams'
//! `SessionStore`) keeps session windows under a record key followed by
//! the session's end and start (Kafka Streams' session key layout) and
//! indexes them by end: a session expires once stream time reaches `end +
//! retention`.

use std::collections::BTreeSet;
use std::ops::Bound;
use std::sync::{Mutex, MutexGuard};

use bytes::Bytes;

use super::store::KeyValueStore;
use super::StoreError;

/// A window store over an engine ([`InMemoryStore`](super::InMemoryStore)
/// or [`PersistentStore`](super::PersistentStore)). As a
/// [`KeyValueStore`] it takes and gives the windowed keys; puts and
/// deletes keep the index. Keys shorter than 8 bytes (no window start)
/// are stored but not indexed: they never expire.
pub struct WindowStore {
    inner: Box<dyn KeyValueStore>,
    retention_ms: i64,
    /// Where a key's indexed time starts, counted from the key's end: 8
    /// (a window's start) or 16 (a session's end).
    time_at: usize,
    /// (window start, store key) of every windowed entry.
    index: Mutex<BTreeSet<(i64, Bytes)>>,
}

impl std::fmt::Debug for WindowStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WindowStore")
            .field("retention_ms", &self.retention_ms)
            .field("windows", &self.index().len())
            .finish()
    }
}

/// The window start of a windowed store key, if it has one.
pub(crate) fn window_start(key: &[u8]) -> Option<i64> {
    time_at(key, 8)
}

/// The 8 bytes big endian that start `from_end` bytes before the key's
/// end, if the key is that long.
fn time_at(key: &[u8], from_end: usize) -> Option<i64> {
    let at = key.len().checked_sub(from_end)?;
    let bytes: [u8; 8] = key.get(at..at + 8)?.try_into().ok()?;
    Some(i64::from_be_bytes(bytes))
}

/// Entries read from the engine per scan when the index is built.
const SCAN: usize = 4096;

impl WindowStore {
    /// Wraps `inner`, indexing the windows it already holds (a persistent
    /// store reopened).
    pub fn new(
        inner: Box<dyn KeyValueStore>,
        retention_ms: i64,
    ) -> Result<WindowStore, StoreError> {
        WindowStore::indexed(inner, retention_ms, 8)
    }

    /// A session store over `inner`: keys are a record key, the session's
    /// end and its start (8 bytes big endian each), indexed by end, so a
    /// session expires `retention_ms` after its end.
    pub fn sessions(
        inner: Box<dyn KeyValueStore>,
        retention_ms: i64,
    ) -> Result<WindowStore, StoreError> {
        WindowStore::indexed(inner, retention_ms, 16)
    }

    fn indexed(
        inner: Box<dyn KeyValueStore>,
        retention_ms: i64,
        time_at: usize,
    ) -> Result<WindowStore, StoreError> {
        let mut index = BTreeSet::new();
        let mut from: Option<Bytes> = None;
        loop {
            let lower = match &from {
                Some(k) => Bound::Excluded(&k[..]),
                None => Bound::Unbounded,
            };
            let page = inner.range(lower, Bound::Unbounded, SCAN)?;
            let Some((last, _)) = page.last() else {
                break;
            };
            from = Some(last.clone());
            let full = page.len() == SCAN;
            for (k, _) in page {
                if let Some(time) = self::time_at(&k, time_at) {
                    index.insert((time, k));
                }
            }
            if !full {
                break;
            }
        }
        Ok(WindowStore {
            inner,
            retention_ms,
            time_at,
            index: Mutex::new(index),
        })
    }

    fn index(&self) -> MutexGuard<'_, BTreeSet<(i64, Bytes)>> {
        self.index.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// How long a window is kept after its start, in stream time.
    pub fn retention_ms(&self) -> i64 {
        self.retention_ms
    }

    /// The keys of the windows expired at `stream_time` (start +
    /// retention <= stream time), oldest first; they stay in the store
    /// until deleted.
    pub fn expired(&self, stream_time: i64) -> Vec<Bytes> {
        let cutoff = stream_time.saturating_sub(self.retention_ms);
        let index = self.index();
        let expired: Box<dyn Iterator<Item = &(i64, Bytes)>> = match cutoff.checked_add(1) {
            // Every (start <= cutoff, key) sorts below (cutoff + 1, empty).
            Some(next) => Box::new(index.range(..(next, Bytes::new()))),
            None => Box::new(index.iter()),
        };
        expired.map(|(_, k)| k.clone()).collect()
    }

    /// The windowed entries with a start in `from..=to`, by start then key.
    pub fn starting_within(&self, from: i64, to: i64) -> Result<Vec<(Bytes, Bytes)>, StoreError> {
        if from > to {
            return Ok(Vec::new());
        }
        let keys: Vec<Bytes> = self
            .index()
            .range((from, Bytes::new())..)
            .take_while(|(s, _)| *s <= to)
            .map(|(_, k)| k.clone())
            .collect();
        let mut out = Vec::with_capacity(keys.len());
        for k in keys {
            if let Some(v) = self.inner.get(&k)? {
                out.push((k, v));
            }
        }
        Ok(out)
    }
}

impl KeyValueStore for WindowStore {
    fn get(&self, key: &[u8]) -> Result<Option<Bytes>, StoreError> {
        self.inner.get(key)
    }

    fn put(&self, key: Bytes, value: Bytes) -> Result<(), StoreError> {
        self.inner.put(key.clone(), value)?;
        if let Some(time) = time_at(&key, self.time_at) {
            self.index().insert((time, key));
        }
        Ok(())
    }

    fn delete(&self, key: &[u8]) -> Result<(), StoreError> {
        self.inner.delete(key)?;
        if let Some(time) = time_at(key, self.time_at) {
            self.index().remove(&(time, Bytes::copy_from_slice(key)));
        }
        Ok(())
    }

    fn range(
        &self,
        from: Bound<&[u8]>,
        to: Bound<&[u8]>,
        limit: usize,
    ) -> Result<Vec<(Bytes, Bytes)>, StoreError> {
        self.inner.range(from, to, limit)
    }

    fn len(&self) -> Result<u64, StoreError> {
        self.inner.len()
    }

    fn wipe(&self) -> Result<(), StoreError> {
        self.inner.wipe()?;
        self.index().clear();
        Ok(())
    }

    fn flush(&self) -> Result<(), StoreError> {
        self.inner.flush()
    }

    fn is_persistent(&self) -> bool {
        self.inner.is_persistent()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::streams::state::{InMemoryStore, PersistentStore};

    fn key(k: &str, start: i64) -> Bytes {
        let mut b = k.as_bytes().to_vec();
        b.extend_from_slice(&start.to_be_bytes());
        b.into()
    }

    #[test]
    fn windows_expire_after_their_retention_in_start_order() {
        let s = WindowStore::new(Box::new(InMemoryStore::new()), 15).unwrap();
        for (k, start) in [("b", 10), ("a", 0), ("a", 10), ("c", 20), ("a", 20)] {
            s.put(key(k, start), Bytes::from_static(b"1")).unwrap();
        }
        s.put(Bytes::from_static(b"meta"), Bytes::from_static(b"x"))
            .unwrap();
        assert!(s.expired(14).is_empty());
        assert_eq!(s.expired(15), vec![key("a", 0)]);
        assert_eq!(s.expired(25), vec![key("a", 0), key("a", 10), key("b", 10)]);
        let within = s.starting_within(10, 20).unwrap();
        let keys: Vec<Bytes> = within.into_iter().map(|(k, _)| k).collect();
        assert_eq!(
            keys,
            vec![key("a", 10), key("b", 10), key("a", 20), key("c", 20)]
        );
        for k in s.expired(25) {
            s.delete(&k).unwrap();
        }
        assert_eq!(s.len().unwrap(), 3);
        assert!(s.expired(34).is_empty());
        assert_eq!(
            s.expired(i64::MAX).len(),
            2,
            "the unwindowed key never expires"
        );
        assert_eq!(window_start(&key("a", -5)), Some(-5));
        assert_eq!(window_start(b"short"), None);
    }

    #[test]
    fn sessions_expire_after_their_retention_counted_from_their_end() {
        let s = WindowStore::sessions(Box::new(InMemoryStore::new()), 10).unwrap();
        // key, end, start: a long session (0..=50) and a short one (20..=20).
        let session = |k: &str, start: i64, end: i64| {
            let mut b = k.as_bytes().to_vec();
            b.extend_from_slice(&end.to_be_bytes());
            b.extend_from_slice(&start.to_be_bytes());
            Bytes::from(b)
        };
        s.put(session("a", 0, 50), Bytes::from_static(b"1"))
            .unwrap();
        s.put(session("b", 20, 20), Bytes::from_static(b"1"))
            .unwrap();
        assert!(s.expired(29).is_empty());
        assert_eq!(s.expired(30), vec![session("b", 20, 20)]);
        assert_eq!(s.expired(59), vec![session("b", 20, 20)]);
        assert_eq!(s.expired(60).len(), 2);
    }

    #[test]
    fn a_reopened_persistent_window_store_indexes_what_it_holds() {
        let dir = crate::streams::state::checkpoint::tests::temp_dir("window");
        let path = dir.join("w.redb");
        {
            let s = WindowStore::new(Box::new(PersistentStore::open(&path).unwrap()), 10).unwrap();
            for start in 0..5000 {
                s.put(key("k", start * 10), Bytes::from_static(b"v"))
                    .unwrap();
            }
            s.flush().unwrap();
        }
        let s = WindowStore::new(Box::new(PersistentStore::open(&path).unwrap()), 10).unwrap();
        assert_eq!(s.expired(30), vec![key("k", 0), key("k", 10), key("k", 20)]);
        assert_eq!(s.expired(50_000).len(), 5000);
        let _ = std::fs::remove_dir_all(dir);
    }
}
