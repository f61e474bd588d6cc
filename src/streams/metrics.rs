//! The runtime's counters and [`StreamsMetrics`], the commit-failure
//! policy (which commit errors are retried, which stop the application)
//! and the dead-letter rate guard.

use std::sync::atomic::{AtomicU64, Ordering as AtomicOrdering};
use std::sync::Mutex;
use std::time::Duration;

use hdrhistogram::Histogram;

use tokio::time::Instant;
use tracing::warn;

use super::config::DeadLetterGuard;
use super::error::StreamsError;
use crate::error::{Error, Result};
use crate::TopicPartition;

/// One assigned partition's progress, in [`StreamsMetrics::partitions`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct PartitionMetrics {
    /// The partition.
    pub partition: TopicPartition,
    /// The commit watermark: the lowest offset not done (what a commit
    /// would carry now); `None` before the first record.
    pub watermark: Option<i64>,
    /// The offset last committed by this instance.
    pub committed: Option<i64>,
    /// Records not done: fetched and pending here, plus those not fetched
    /// yet up to the high watermark (or last stable offset) of the last
    /// fetch; `None` before the first fetch.
    pub lag: Option<i64>,
    /// Records buffered, waiting to start.
    pub buffered: u64,
    /// Records started and not done (as [`StreamsMetrics::in_flight`]).
    pub in_flight: u64,
}

/// Counters of a running application, from [`RunningStreams::metrics`](super::RunningStreams::metrics).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct StreamsMetrics {
    /// Records done by the main lane (outputs acknowledged).
    pub processed: u64,
    /// Records started and not done now: being processed, or with
    /// outputs waiting for their acknowledgement.
    pub in_flight: u64,
    /// In-place retries made.
    pub retried_in_place: u64,
    /// Records handed to the retry lane by the main lane.
    pub handed_to_retry_lane: u64,
    /// Records the retry lane processed successfully.
    pub retry_lane_succeeded: u64,
    /// Records the retry lane queued again after another failure.
    pub retry_lane_requeued: u64,
    /// Records sent to the dead-letter topic.
    pub dead_lettered: u64,
    /// Retry-lane records waiting for their due time.
    pub retry_lane_held: u64,
    /// Commits that succeeded (async ones once acknowledged).
    pub commits: u64,
    /// Commits that failed.
    pub commit_failures: u64,
    /// Duration of the last synchronous or transactional commit, in µs.
    pub commit_latency_last_us: u64,
    /// Longest synchronous or transactional commit, in µs.
    pub commit_latency_max_us: u64,
    /// Mean time from a record's dispatch to done (outputs acknowledged,
    /// in-place retries included), in µs.
    pub processing_latency_mean_us: u64,
    /// Longest time from a record's dispatch to done, in µs.
    pub processing_latency_max_us: u64,
    /// Median time from a record's dispatch to done, in µs (within 0.1%).
    pub processing_latency_p50_us: u64,
    /// 99th percentile of the time from a record's dispatch to done, in µs.
    pub processing_latency_p99_us: u64,
    /// Median synchronous or transactional commit, in µs.
    pub commit_latency_p50_us: u64,
    /// 99th percentile of the synchronous or transactional commits, in µs.
    pub commit_latency_p99_us: u64,
    /// Each assigned partition's watermark, lag, buffer and in-flight count.
    pub partitions: Vec<PartitionMetrics>,
}

#[derive(Default)]
pub(crate) struct Counters {
    pub processed: AtomicU64,
    pub retried_in_place: AtomicU64,
    pub handed_to_retry_lane: AtomicU64,
    pub retry_lane_succeeded: AtomicU64,
    pub retry_lane_requeued: AtomicU64,
    pub dead_lettered: AtomicU64,
    pub retry_lane_held: AtomicU64,
    pub commits: AtomicU64,
    pub commit_failures: AtomicU64,
    pub commit_latency_last_us: AtomicU64,
    pub commit_latency_max_us: AtomicU64,
    pub processing_total_us: AtomicU64,
    pub processing_max_us: AtomicU64,
    pub processing: LatencyHistogram,
    pub commit_latency: LatencyHistogram,
    /// Commits failed in a row (reset by a successful one).
    pub commit_failures_in_row: AtomicU64,
    /// A fatal error seen where it cannot be returned (an async commit's
    /// callback, the poll loop); the dispatcher stops with it.
    pub fatal: Mutex<Option<Error>>,
}

/// A latency histogram (HdrHistogram: 3 significant digits, 1 µs to
/// 1 hour; longer values count as 1 hour), safe to share between tasks.
/// The runtime keeps one for processing and one for commit latency; the
/// demo uses one for end-to-end latency.
#[derive(Debug)]
pub struct LatencyHistogram(Mutex<Histogram<u64>>);

const MAX_LATENCY_US: u64 = 3_600_000_000;

impl Default for LatencyHistogram {
    fn default() -> Self {
        LatencyHistogram::new()
    }
}

impl LatencyHistogram {
    /// An empty histogram.
    pub fn new() -> LatencyHistogram {
        let h = Histogram::new_with_bounds(1, MAX_LATENCY_US, 3)
            .expect("1 <= 1 h and 3 significant digits are valid bounds");
        LatencyHistogram(Mutex::new(h))
    }

    /// Records one latency.
    pub fn record(&self, latency: Duration) {
        let us = u64::try_from(latency.as_micros())
            .unwrap_or(MAX_LATENCY_US)
            .clamp(1, MAX_LATENCY_US);
        // Within the bounds by the clamp: cannot fail.
        let _ = self.lock().record(us);
    }

    /// Records latencies given in µs, under one lock: taken only if free
    /// unless `wait`; `false` (nothing recorded) when it was not.
    pub(crate) fn record_all_us(&self, latencies_us: &[u64], wait: bool) -> bool {
        let mut h = match self.0.try_lock() {
            Ok(h) => h,
            Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
            Err(std::sync::TryLockError::WouldBlock) if wait => self.lock(),
            Err(std::sync::TryLockError::WouldBlock) => return false,
        };
        for us in latencies_us {
            // Within the bounds by the clamp: cannot fail.
            let _ = h.record((*us).clamp(1, MAX_LATENCY_US));
        }
        true
    }

    /// The latency at `quantile` (0.0 to 1.0), in µs; 0 when empty.
    pub fn quantile_us(&self, quantile: f64) -> u64 {
        let h = self.lock();
        if h.is_empty() {
            0
        } else {
            h.value_at_quantile(quantile)
        }
    }

    /// Latencies recorded.
    pub fn len(&self) -> u64 {
        self.lock().len()
    }

    /// Whether nothing was recorded.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Histogram<u64>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Commits failing in a row before the application stops.
pub(crate) const MAX_COMMIT_FAILURES_IN_ROW: u64 = 5;

impl Counters {
    /// Records a commit's result; a fatal error (authentication or
    /// authorization, a non-retriable broker error, or the
    /// [`MAX_COMMIT_FAILURES_IN_ROW`]th failure in a row) is returned.
    pub(crate) fn commit_result(&self, result: &Result<()>) -> Option<Error> {
        let Err(e) = result else {
            bump(&self.commits);
            self.commit_failures_in_row
                .store(0, AtomicOrdering::Relaxed);
            return None;
        };
        bump(&self.commit_failures);
        let in_row = self
            .commit_failures_in_row
            .fetch_add(1, AtomicOrdering::Relaxed)
            + 1;
        // A rebalance fenced the commit (CommitFailed) or the coordinator
        // moved (retriable): the records are redone by the next owner
        // (at-least-once) or committed next time; not fatal by itself.
        if (e.is_retriable() || e.is_commit_failed()) && in_row < MAX_COMMIT_FAILURES_IN_ROW {
            warn!(error = %e, in_row, "commit failed; retried at the next interval");
            None
        } else {
            Some(e.clone())
        }
    }

    pub(crate) fn take_fatal(&self) -> Option<Error> {
        self.fatal.lock().unwrap_or_else(|p| p.into_inner()).take()
    }

    pub(crate) fn set_fatal(&self, e: Error) {
        let mut f = self.fatal.lock().unwrap_or_else(|p| p.into_inner());
        f.get_or_insert(e);
    }
}

pub(crate) fn bump(c: &AtomicU64) {
    c.fetch_add(1, AtomicOrdering::Relaxed);
}

/// The dead-letter rate guard: samples the counters (at each commit
/// interval) and judges the share over the window.
pub(crate) fn check_dead_letters(
    c: &Counters,
    g: &DeadLetterGuard,
    samples: &mut std::collections::VecDeque<(Instant, u64, u64)>,
) -> std::result::Result<(), StreamsError> {
    let now = Instant::now();
    let (processed, dead) = (
        c.processed.load(AtomicOrdering::Relaxed),
        c.dead_lettered.load(AtomicOrdering::Relaxed),
    );
    samples.push_back((now, processed, dead));
    while samples.len() > 1 && now.duration_since(samples[1].0) >= g.window {
        samples.pop_front();
    }
    let (_, p0, d0) = samples[0];
    let (p, d) = (processed - p0, dead - d0);
    if p >= g.min_records.max(1) && d as f64 > g.max_share * p as f64 {
        return Err(StreamsError::DeadLetterRate {
            dead_lettered: d,
            processed: p,
            window: g.window,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latency_histogram_quantiles() {
        let h = LatencyHistogram::new();
        assert_eq!(h.quantile_us(0.5), 0);
        assert!(h.is_empty());
        for ms in 1..=100 {
            h.record(Duration::from_millis(ms));
        }
        h.record(Duration::from_secs(100 * 3600));
        assert_eq!(h.len(), 101);
        // 3 significant digits: within 0.1% of the exact rank's value.
        let near = |got: u64, want: u64| got.abs_diff(want) * 1000 <= want;
        assert!(near(h.quantile_us(0.5), 51_000), "{}", h.quantile_us(0.5));
        assert!(
            near(h.quantile_us(0.99), 100_000),
            "{}",
            h.quantile_us(0.99)
        );
        // Beyond the upper bound counts as the bound.
        assert!(near(h.quantile_us(1.0), MAX_LATENCY_US));
    }
}
