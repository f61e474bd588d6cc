//! A consumer's group membership counters: the Java consumer's
//! `consumer-coordinator-metrics` (rebalances, heartbeats, commits; KIP-78,
//! and for the consumer protocol the rebalance metrics of KIP-848's
//! reconciliation).
//!
//! A rebalance starts when the member sends JoinGroup (classic) or gets a
//! new target assignment (KIP-848), and completes when the new assignment
//! is taken (after any revocation). A classic JoinGroup or SyncGroup that
//! fails (other than the first join's MEMBER_ID_REQUIRED, KIP-394) fails
//! the rebalance, and the next JoinGroup goes on with the same start, as
//! the Java client counts; a KIP-848 reconciliation fails when its
//! partitions are lost or membership fails.
//!
//! The drivers count here with one call per event, into the
//! [`GroupMetrics`] of the consumer that owns the membership (handed to
//! the member when it joins), so no two consumers share counters.

use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

/// One consumer's group counters.
#[derive(Debug, Default)]
pub(crate) struct GroupMetrics(Mutex<Counts>);

#[derive(Debug, Default, Clone)]
struct Counts {
    started: Option<Instant>,
    rebalances: u64,
    failed_rebalances: u64,
    rebalance_latency_total: Duration,
    rebalance_latency_max: Duration,
    last_rebalance: Option<Instant>,
    heartbeats: u64,
    commits: u64,
    commit_latency_total: Duration,
    commit_latency_max: Duration,
}

impl GroupMetrics {
    fn counts(&self) -> std::sync::MutexGuard<'_, Counts> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A rebalance starts (kept if one is under way already).
    pub(crate) fn rebalance_started(&self) {
        self.counts().started.get_or_insert_with(Instant::now);
    }

    /// The rebalance under way, if any, failed; with `keep_start` the next
    /// attempt continues it (classic), else it is over (KIP-848).
    pub(crate) fn rebalance_failed(&self, keep_start: bool) {
        let mut c = self.counts();
        if c.started.is_some() {
            c.failed_rebalances += 1;
            if !keep_start {
                c.started = None;
            }
        }
    }

    /// The rebalance under way, if any, completed.
    pub(crate) fn rebalance_completed(&self) {
        let mut c = self.counts();
        if let Some(start) = c.started.take() {
            let now = Instant::now();
            let latency = now.saturating_duration_since(start);
            c.rebalances += 1;
            c.rebalance_latency_total += latency;
            c.rebalance_latency_max = c.rebalance_latency_max.max(latency);
            c.last_rebalance = Some(now);
        }
    }

    /// Nothing to reconcile after all: forget the start (KIP-848).
    pub(crate) fn rebalance_abandoned(&self) {
        self.counts().started = None;
    }

    /// A heartbeat got its answer.
    pub(crate) fn heartbeat(&self) {
        self.counts().heartbeats += 1;
    }

    /// An OffsetCommit got its answer `latency` after it was sent.
    pub(crate) fn committed(&self, latency: Duration) {
        let mut c = self.counts();
        c.commits += 1;
        c.commit_latency_total += latency;
        c.commit_latency_max = c.commit_latency_max.max(latency);
    }

    /// A snapshot of the counters.
    pub(crate) fn stats(&self) -> GroupStats {
        let c = self.counts().clone();
        let avg = |total: Duration, n: u64| match u32::try_from(n) {
            Ok(0) => Duration::ZERO,
            Ok(n) => total / n,
            Err(_) => total.div_f64(n as f64),
        };
        GroupStats {
            rebalances: c.rebalances,
            failed_rebalances: c.failed_rebalances,
            rebalance_latency_avg: avg(c.rebalance_latency_total, c.rebalances),
            rebalance_latency_max: c.rebalance_latency_max,
            rebalance_latency_total: c.rebalance_latency_total,
            last_rebalance_ago: c.last_rebalance.map(|t| t.elapsed()),
            heartbeats: c.heartbeats,
            commits: c.commits,
            commit_latency_avg: avg(c.commit_latency_total, c.commits),
            commit_latency_max: c.commit_latency_max,
        }
    }
}

/// A consumer's group counters since it was created (see
/// [`ConsumerMetrics::group`](crate::consumer::ConsumerMetrics)); the Java
/// client's `consumer-coordinator-metrics` names in brackets. Averages and
/// maxima are over that whole time (Java's over a 30 s window).
#[derive(Debug, Clone, Default, PartialEq)]
#[non_exhaustive]
pub struct GroupStats {
    /// Rebalances completed (`rebalance-total`).
    pub rebalances: u64,
    /// Rebalance attempts that failed (`failed-rebalance-total`).
    pub failed_rebalances: u64,
    /// Mean time from a rebalance's start to its completion
    /// (`rebalance-latency-avg`).
    pub rebalance_latency_avg: Duration,
    /// The longest of those (`rebalance-latency-max`).
    pub rebalance_latency_max: Duration,
    /// All of those (`rebalance-latency-total`).
    pub rebalance_latency_total: Duration,
    /// Since the last rebalance completed (`last-rebalance-seconds-ago`);
    /// `None` before the first.
    pub last_rebalance_ago: Option<Duration>,
    /// Heartbeats answered (`heartbeat-total`): Heartbeat (classic) or
    /// ConsumerGroupHeartbeat (KIP-848).
    pub heartbeats: u64,
    /// OffsetCommit requests answered (`commit-total`).
    pub commits: u64,
    /// Mean OffsetCommit round trip (`commit-latency-avg`).
    pub commit_latency_avg: Duration,
    /// The longest of those (`commit-latency-max`).
    pub commit_latency_max: Duration,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Moves the start of the rebalance under way `by` into the past.
    fn age(m: &GroupMetrics, by: Duration) {
        let mut c = m.counts();
        let start = c.started.expect("a rebalance under way");
        c.started = Some(start.checked_sub(by).expect("uptime"));
    }

    #[test]
    fn rebalances_count_from_their_first_attempt() {
        let m = GroupMetrics::default();
        // A completion with nothing under way counts nothing.
        m.rebalance_completed();
        m.rebalance_started();
        age(&m, Duration::from_millis(100));
        m.rebalance_failed(true);
        // The retry goes on with the same start.
        m.rebalance_started();
        age(&m, Duration::from_millis(200));
        m.rebalance_completed();
        m.rebalance_started();
        age(&m, Duration::from_millis(100));
        m.rebalance_completed();
        // KIP-848: a target with nothing to reconcile is no rebalance.
        m.rebalance_started();
        m.rebalance_abandoned();
        m.rebalance_completed();
        // A failure with nothing under way counts nothing.
        m.rebalance_failed(false);
        m.heartbeat();
        m.committed(Duration::from_millis(4));
        m.committed(Duration::from_millis(8));
        let s = m.stats();
        assert_eq!((s.rebalances, s.failed_rebalances), (2, 1));
        // Measured with the clock: at least the ages given, a little more.
        let near = |d: Duration, ms: u64| {
            d >= Duration::from_millis(ms) && d < Duration::from_millis(ms + 50)
        };
        assert!(near(s.rebalance_latency_max, 300), "{s:?}");
        assert!(near(s.rebalance_latency_avg, 200), "{s:?}");
        assert!(near(s.rebalance_latency_total, 400), "{s:?}");
        assert!(s.last_rebalance_ago.unwrap() < Duration::from_secs(1));
        assert_eq!((s.heartbeats, s.commits), (1, 2));
        assert_eq!(s.commit_latency_avg, Duration::from_millis(6));
        assert_eq!(s.commit_latency_max, Duration::from_millis(8));
    }
}
