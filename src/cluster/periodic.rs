//! The background metadata refresh of a [`Cluster`]: the tracked topics
//! every `metadata.max.age.ms`, sooner while one is unsettled (as the Java
//! client's `Metadata` asks again after `retry.backoff.ms`), and the idle
//! sweeps of `metadata.max.idle.ms` (KIP-526) in between.

use std::sync::{Arc, Weak};

use tokio::sync::Notify;
use tracing::{debug, warn};

use super::{Cluster, Inner};

/// Refreshes tracked topics every `metadata.max.age.ms`, or sooner when asked.
/// While a tracked topic is unsettled (unknown, or a partition without a
/// leader), it asks again after `retry.backoff.ms`, doubling up to
/// `retry.backoff.max.ms`, as the Java client does: a consumer group leader
/// that assigned while its topic was unknown rebalances once it appears.
/// Between refreshes it wakes when a topic tracked while used may have
/// gone idle (`metadata.max.idle.ms`) and drops it, which needs no request.
/// Ends when the last [`Cluster`] handle is dropped.
pub(super) async fn refresh(inner: Weak<Inner>, wanted: Arc<Notify>, recheck: Arc<Notify>) {
    let mut backoff: Option<std::time::Duration> = None;
    // When the next refresh is due; kept across idle sweeps, so they never
    // postpone it.
    let mut due: Option<tokio::time::Instant> = None;
    loop {
        let (refresh_at, sweep_at) = {
            let Some(inner) = inner.upgrade() else {
                return;
            };
            let cluster = Cluster { inner };
            let c = &cluster.inner.config;
            let refresh_at = *due.get_or_insert_with(|| {
                let wait = match cluster.tracked_unsettled(&cluster.metadata()) {
                    Some(topic) => {
                        let next =
                            backoff.map_or(c.retry_backoff, |b| (b * 2).min(c.retry_backoff_max));
                        debug!(%topic, backoff = ?next, "tracked topic unsettled; asking again");
                        backoff = Some(next);
                        next
                    }
                    None => {
                        backoff = None;
                        c.metadata_max_age
                    }
                };
                tokio::time::Instant::now() + wait
            });
            let sweep_at = cluster.tracked().next_sweep();
            (refresh_at, sweep_at)
        };
        let notified = wanted.notified();
        let rechecked = recheck.notified();
        tokio::select! {
            _ = notified => {}
            _ = tokio::time::sleep_until(refresh_at) => {}
            // Only while settled (the backoff's own refreshes must not
            // recompute it): a topic now unsettled moves the refresh
            // closer; either way the next sweep is looked up again.
            _ = rechecked, if backoff.is_none() => {
                let Some(inner) = inner.upgrade() else { return };
                let cluster = Cluster { inner };
                if cluster.tracked_unsettled(&cluster.metadata()).is_some() {
                    due = None;
                }
                continue;
            }
            _ = tokio::time::sleep_until(sweep_at.unwrap_or(refresh_at)),
                if sweep_at.is_some_and(|s| s < refresh_at) =>
            {
                let Some(inner) = inner.upgrade() else { return };
                Cluster { inner }.drop_idle_topics().await;
                continue;
            }
        }
        due = None;
        let Some(inner) = inner.upgrade() else { return };
        let cluster = Cluster { inner };
        // A sweep due by now goes first, so the refresh skips idle topics.
        if sweep_at.is_some_and(|s| s <= tokio::time::Instant::now()) {
            cluster.drop_idle_topics().await;
        }
        let topics: Vec<String> = cluster.tracked().names().cloned().collect();
        if let Err(e) = cluster.refresh_metadata(Some(&topics)).await {
            warn!(error = %e, "periodic metadata refresh failed");
            tokio::time::sleep(cluster.inner.config.retry_backoff).await;
        }
    }
}
