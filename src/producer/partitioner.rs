//! Choosing a record's partition.
//!
//! - Keyed records: murmur2 of the key bytes, made positive, modulo the
//!   partition count: the same partition the Java client's default
//!   partitioner picks for the same key and partition count.
//! - Null keys (or `partitioner.ignore.keys`): the uniform sticky partitioner
//!   of KIP-480 and KIP-794. A topic sticks to one partition until
//!   `batch.size` bytes went there, then moves to another picked at random
//!   among partitions with a leader; with adaptive partitioning on, a
//!   partition is picked less often the longer its queue.
//! - Alternatives: [`Partitioning::RoundRobin`] and a user [`Partitioner`].

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex};

/// Kafka's murmur2 (the Java client's `Utils.murmur2`), seed `0x9747b28c`.
pub fn murmur2(data: &[u8]) -> i32 {
    const M: u32 = 0x5bd1_e995;
    const R: u32 = 24;
    let len = data.len();
    let mut h: u32 = 0x9747_b28c ^ (len as u32);
    let mut chunks = data.chunks_exact(4);
    for chunk in &mut chunks {
        let mut k = u32::from_le_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]);
        k = k.wrapping_mul(M);
        k ^= k >> R;
        k = k.wrapping_mul(M);
        h = h.wrapping_mul(M);
        h ^= k;
    }
    let rest = chunks.remainder();
    if rest.len() >= 3 {
        h ^= u32::from(rest[2]) << 16;
    }
    if rest.len() >= 2 {
        h ^= u32::from(rest[1]) << 8;
    }
    if !rest.is_empty() {
        h ^= u32::from(rest[0]);
        h = h.wrapping_mul(M);
    }
    h ^= h >> 13;
    h = h.wrapping_mul(M);
    h ^= h >> 15;
    h as i32
}

/// The partition the Java client's default partitioner gives `key` on a
/// topic with `partitions` partitions (`toPositive(murmur2(key)) % n`).
pub fn partition_for_key(key: &[u8], partitions: i32) -> i32 {
    (murmur2(key) & 0x7fff_ffff) % partitions.max(1)
}

/// A user-defined partitioner.
pub trait Partitioner: Send + Sync + 'static {
    /// The partition for a record. `partitions` is the topic's partition
    /// count (at least 1) and `available` the partitions that have a leader
    /// now. A result outside `0..partitions` fails the send with an error.
    fn partition(
        &self,
        topic: &str,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        partitions: i32,
        available: &[i32],
    ) -> i32;
}

/// How the producer partitions records that name no partition.
#[derive(Clone, Default)]
#[non_exhaustive]
pub enum Partitioning {
    /// Murmur2 for keys, uniform sticky for null keys (Java's default).
    #[default]
    Default,
    /// Every record to the next available partition in turn, keys ignored
    /// (Java's `RoundRobinPartitioner`).
    RoundRobin,
    /// A user partitioner.
    Custom(Arc<dyn Partitioner>),
}

impl fmt::Debug for Partitioning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Partitioning::Default => f.write_str("Default"),
            Partitioning::RoundRobin => f.write_str("RoundRobin"),
            Partitioning::Custom(_) => f.write_str("Custom(..)"),
        }
    }
}

/// Per-topic state of the sticky and round-robin partitioners.
#[derive(Debug, Default)]
pub(crate) struct StickyState {
    topics: Mutex<HashMap<Arc<str>, Sticky>>,
}

#[derive(Debug, Clone, Copy)]
struct Sticky {
    partition: i32,
    bytes: usize,
    round_robin: u32,
}

impl StickyState {
    /// The sticky partition for a null-key record of `size` bytes. Switches
    /// after `batch_size` bytes; `queued(p)` gives partition `p`'s queued
    /// bytes for adaptive choice (None: uniform).
    pub(crate) fn sticky(
        &self,
        topic: &Arc<str>,
        size: usize,
        batch_size: usize,
        partitions: i32,
        available: &[i32],
        queued: Option<&dyn Fn(i32) -> usize>,
    ) -> i32 {
        let mut topics = self.topics.lock().unwrap_or_else(|p| p.into_inner());
        let step = |entry: &mut Sticky| {
            let stale = entry.partition < 0 || entry.partition >= partitions;
            if stale || entry.bytes >= batch_size {
                entry.partition = pick(entry.partition, partitions, available, queued);
                entry.bytes = 0;
            }
            entry.bytes += size;
            entry.partition
        };
        // Looked up by `&str`: no reference count to touch per record.
        if let Some(entry) = topics.get_mut(&**topic) {
            return step(entry);
        }
        step(topics.entry(topic.clone()).or_insert(Sticky {
            partition: -1,
            bytes: 0,
            round_robin: 0,
        }))
    }

    /// The next partition in turn among `available` (all when none is).
    pub(crate) fn round_robin(&self, topic: &Arc<str>, partitions: i32, available: &[i32]) -> i32 {
        let mut topics = self.topics.lock().unwrap_or_else(|p| p.into_inner());
        let entry = topics.entry(topic.clone()).or_insert(Sticky {
            partition: -1,
            bytes: 0,
            round_robin: 0,
        });
        let n = entry.round_robin;
        entry.round_robin = n.wrapping_add(1);
        if available.is_empty() {
            (n % partitions.max(1) as u32) as i32
        } else {
            available[n as usize % available.len()]
        }
    }
}

/// A new sticky partition: not the previous one when there is a choice,
/// weighted toward short queues when `queued` is given (KIP-794).
fn pick(
    previous: i32,
    partitions: i32,
    available: &[i32],
    queued: Option<&dyn Fn(i32) -> usize>,
) -> i32 {
    let all: Vec<i32>;
    let mut candidates = if available.is_empty() {
        all = (0..partitions.max(1)).collect();
        &all[..]
    } else {
        available
    };
    let without_previous: Vec<i32>;
    if candidates.len() > 1 && candidates.contains(&previous) {
        without_previous = candidates
            .iter()
            .copied()
            .filter(|&p| p != previous)
            .collect();
        candidates = &without_previous;
    }
    let Some(queued) = queued else {
        return candidates[fastrand::usize(..candidates.len())];
    };
    let sizes: Vec<usize> = candidates.iter().map(|&p| queued(p)).collect();
    let max = sizes.iter().copied().max().unwrap_or(0);
    // Weight = max + 1 - queued: an empty queue weighs most, the longest 1.
    let weights: Vec<u64> = sizes.iter().map(|&s| (max - s) as u64 + 1).collect();
    let total: u64 = weights.iter().sum();
    let mut ticket = fastrand::u64(..total);
    for (i, w) in weights.iter().enumerate() {
        if ticket < *w {
            return candidates[i];
        }
        ticket -= w;
    }
    candidates[candidates.len() - 1]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn murmur2_matches_the_java_client() {
        // Vectors from the Java client's own tests (UtilsTest.testMurmur2).
        let cases: [(&str, i32); 6] = [
            ("21", -973_932_308),
            ("foobar", -790_332_482),
            ("a-little-bit-long-string", -985_981_536),
            ("a-little-bit-longer-string", -1_486_304_829),
            (
                "lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8",
                -58_897_971,
            ),
            ("abc", 479_470_107),
        ];
        for (key, want) in cases {
            assert_eq!(murmur2(key.as_bytes()), want, "murmur2({key:?})");
        }
    }

    #[test]
    fn keyed_partition_is_positive_modulo() {
        for n in 1..20 {
            for key in ["", "a", "user-17", "ключ"] {
                let p = partition_for_key(key.as_bytes(), n);
                assert!((0..n).contains(&p));
            }
        }
    }

    #[test]
    fn sticky_switches_after_batch_size_and_prefers_short_queues() {
        let state = StickyState::default();
        let topic: Arc<str> = Arc::from("t");
        let first = state.sticky(&topic, 100, 250, 4, &[0, 1, 2, 3], None);
        assert_eq!(
            state.sticky(&topic, 100, 250, 4, &[0, 1, 2, 3], None),
            first
        );
        assert_eq!(
            state.sticky(&topic, 100, 250, 4, &[0, 1, 2, 3], None),
            first
        );
        // 300 bytes went to `first`: the next record moves elsewhere.
        let second = state.sticky(&topic, 100, 250, 4, &[0, 1, 2, 3], None);
        assert_ne!(second, first);
        // Adaptive: partition 2's queue is empty, the others are long, so 2
        // wins far more often than an even share.
        let queued = |p: i32| if p == 2 { 0 } else { 1_000_000 };
        let wins = (0..400)
            .filter(|_| pick(-1, 4, &[0, 1, 2, 3], Some(&queued)) == 2)
            .count();
        assert!(wins > 390, "partition 2 picked {wins} of 400 times");
        // Only available partitions are picked.
        for _ in 0..50 {
            assert_eq!(pick(1, 4, &[3], None), 3);
        }
    }

    #[test]
    fn round_robin_cycles_available_partitions() {
        let state = StickyState::default();
        let topic: Arc<str> = Arc::from("t");
        let got: Vec<i32> = (0..6)
            .map(|_| state.round_robin(&topic, 4, &[0, 2, 3]))
            .collect();
        assert_eq!(got, [0, 2, 3, 0, 2, 3]);
    }
}
