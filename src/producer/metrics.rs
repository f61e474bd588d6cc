//! Producer counters, readable at any time through
//! [`Producer::metrics`](super::Producer::metrics).

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

/// A snapshot of a producer's counters since it was created.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ProducerMetrics {
    /// Records acknowledged by the broker (or written, with `acks=0`).
    pub records_sent: u64,
    /// Bytes of record batches acknowledged, as sent (after compression).
    pub bytes_sent: u64,
    /// Record batches acknowledged.
    pub batches_sent: u64,
    /// Produce requests answered (successfully or not).
    pub requests: u64,
    /// Sum of Produce request latencies, send to response.
    pub request_latency_total: Duration,
    /// Largest Produce request latency seen.
    pub request_latency_max: Duration,
    /// Batches sent again after a retriable error.
    pub retries: u64,
    /// Records that failed (expired, rejected or fenced).
    pub record_errors: u64,
    /// Idempotent producer epoch bumps (KIP-360) after a lost sequence.
    pub epoch_bumps: u64,
    /// Batches split in two after the broker refused them as too large
    /// (`MESSAGE_TOO_LARGE`).
    pub batch_splits: u64,
    /// Produce responses in which a broker asked us to wait (KIP-219 quota
    /// throttling).
    pub throttled_responses: u64,
    /// Longest throttle time a broker asked for (Java's
    /// `produce-throttle-time-max`).
    pub throttle_time_max: Duration,
    /// The producer's connections (those of its [`Cluster`](crate::Cluster),
    /// shared with any client built on the same handle).
    pub connections: crate::net::ConnectionStats,
}

impl ProducerMetrics {
    /// Average records per acknowledged batch.
    pub fn records_per_batch(&self) -> f64 {
        if self.batches_sent == 0 {
            0.0
        } else {
            self.records_sent as f64 / self.batches_sent as f64
        }
    }

    /// Average bytes per acknowledged batch.
    pub fn batch_size_avg(&self) -> f64 {
        if self.batches_sent == 0 {
            0.0
        } else {
            self.bytes_sent as f64 / self.batches_sent as f64
        }
    }

    /// Average Produce request latency.
    pub fn request_latency_avg(&self) -> Duration {
        if self.requests == 0 {
            Duration::ZERO
        } else {
            self.request_latency_total / self.requests as u32
        }
    }
}

/// The live counters.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub records_sent: AtomicU64,
    pub bytes_sent: AtomicU64,
    pub batches_sent: AtomicU64,
    pub requests: AtomicU64,
    pub latency_total_us: AtomicU64,
    pub latency_max_us: AtomicU64,
    pub retries: AtomicU64,
    pub record_errors: AtomicU64,
    pub epoch_bumps: AtomicU64,
    pub batch_splits: AtomicU64,
    pub throttled_responses: AtomicU64,
    pub throttle_max_ms: AtomicU64,
}

impl Counters {
    pub(crate) fn request_done(&self, latency: Duration) {
        let us = latency.as_micros().min(u64::MAX as u128) as u64;
        self.requests.fetch_add(1, Relaxed);
        self.latency_total_us.fetch_add(us, Relaxed);
        self.latency_max_us.fetch_max(us, Relaxed);
    }

    pub(crate) fn throttled(&self, time: Duration) {
        self.throttled_responses.fetch_add(1, Relaxed);
        let ms = time.as_millis().min(u64::MAX as u128) as u64;
        self.throttle_max_ms.fetch_max(ms, Relaxed);
    }

    pub(crate) fn snapshot(&self) -> ProducerMetrics {
        ProducerMetrics {
            records_sent: self.records_sent.load(Relaxed),
            bytes_sent: self.bytes_sent.load(Relaxed),
            batches_sent: self.batches_sent.load(Relaxed),
            requests: self.requests.load(Relaxed),
            request_latency_total: Duration::from_micros(self.latency_total_us.load(Relaxed)),
            request_latency_max: Duration::from_micros(self.latency_max_us.load(Relaxed)),
            retries: self.retries.load(Relaxed),
            record_errors: self.record_errors.load(Relaxed),
            epoch_bumps: self.epoch_bumps.load(Relaxed),
            batch_splits: self.batch_splits.load(Relaxed),
            throttled_responses: self.throttled_responses.load(Relaxed),
            throttle_time_max: Duration::from_millis(self.throttle_max_ms.load(Relaxed)),
            connections: Default::default(),
        }
    }
}
