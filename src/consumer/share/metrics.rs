//! The share consumer's counters, named after Java's share-consumer
//! metrics (KIP-932): `records-consumed-total` and `bytes-consumed-total`
//! of `consumer-share-fetch-manager-metrics`, `heartbeat-total` of
//! `consumer-share-coordinator-metrics`. One atomic add each, where the
//! events happen.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use super::ShareRecord;

/// Counters the share consumer keeps as it runs.
#[derive(Debug, Default)]
pub(super) struct ShareCounters {
    records: AtomicU64,
    bytes: AtomicU64,
    heartbeats: AtomicU64,
}

impl ShareCounters {
    /// `records` are about to be returned by `poll`.
    pub(super) fn handed_out(&self, records: &[ShareRecord]) {
        let bytes: usize = records
            .iter()
            .map(|r| {
                let r = &r.record;
                r.key.as_ref().map_or(0, |k| k.len()) + r.value.as_ref().map_or(0, |v| v.len())
            })
            .sum();
        self.records.fetch_add(records.len() as u64, Relaxed);
        self.bytes.fetch_add(bytes as u64, Relaxed);
    }

    /// A ShareGroupHeartbeat got its answer.
    pub(super) fn heartbeat(&self) {
        self.heartbeats.fetch_add(1, Relaxed);
    }

    pub(super) fn snapshot(&self) -> ShareConsumerMetrics {
        ShareConsumerMetrics {
            records_consumed: self.records.load(Relaxed),
            bytes_consumed: self.bytes.load(Relaxed),
            heartbeats: self.heartbeats.load(Relaxed),
        }
    }
}

/// A snapshot of a share consumer's counters since it was created (see
/// [`ShareConsumer::metrics`](super::ShareConsumer::metrics)); Java's
/// names in brackets.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ShareConsumerMetrics {
    /// Records handed out by `poll` (`records-consumed-total`).
    pub records_consumed: u64,
    /// Key and value bytes of those records (`bytes-consumed-total`; Java
    /// counts fetched bytes).
    pub bytes_consumed: u64,
    /// ShareGroupHeartbeat requests answered (`heartbeat-total`).
    pub heartbeats: u64,
}
