//! Commits (sync, async, or through the transaction under exactly-once,
//! with KIP-447 group metadata), drains and revocations, run by the
//! dispatcher. Only the contiguous done prefix of each task (its
//! [`CommitWatermark`](crate::streams::CommitWatermark)) is committed.

use std::sync::Arc;

use tokio::time::Instant;
use tracing::{debug, warn};

use super::task::Shared;
use crate::consumer::{OffsetAndMetadata, Offsets};
use crate::error::Error;
use crate::streams::config::{CommitMode, CommitOutcome};
use crate::streams::error::StreamsError;
use crate::streams::metrics::bump;
use crate::TopicPartition;

impl Shared {
    /// The offsets to commit: each task's watermark (revoked tasks only when
    /// named in `only`), skipping unchanged ones unless `all`.
    fn committable(&self, only: Option<&[TopicPartition]>, all: bool) -> Offsets {
        let core = self.lock();
        core.tasks
            .iter()
            .filter(|(tp, t)| only.map_or(!t.revoked, |o| o.contains(tp)))
            .filter_map(|(tp, t)| {
                let at = t.watermark.committable()?;
                (all || t.committed != Some(at)).then(|| (tp.clone(), OffsetAndMetadata::new(at)))
            })
            .collect()
    }

    fn mark_committed(&self, offsets: &Offsets) {
        let mut core = self.lock();
        for (tp, o) in offsets {
            if let Some(t) = core.tasks.get_mut(tp) {
                t.committed = Some(o.offset);
            }
        }
    }

    /// The commit of each interval, run by the dispatcher. At-least-once,
    /// the dispatcher goes on starting records while the commit waits
    /// (the record caches' flush, the changelog writes' and outputs'
    /// acknowledgements): the offsets it commits were chosen when it
    /// began, every record below them done, so the records started
    /// meanwhile are above them, and nothing they write is needed before
    /// that commit. Only the offset commit's own round trip holds starts
    /// back (`Core::hold`, sync commits). Exactly-once closes the epoch
    /// first (see `close_epoch`): unchanged.
    pub(super) async fn commit_on_interval(
        self: &Arc<Self>,
    ) -> std::result::Result<(), StreamsError> {
        if self.config.is_exactly_once() {
            return self.commit(None, false).await;
        }
        let commit = self.commit(None, false);
        tokio::pin!(commit);
        let result = loop {
            tokio::select! {
                biased;
                r = &mut commit => break r,
                _ = self.wake.notified() => {
                    if !self.stopped() {
                        self.dispatch();
                    }
                    // Wake-ups can come faster than a dispatch: yield now
                    // and then (`Notified` spends no budget), or tasks
                    // woken from this thread, the commit's among them,
                    // wait behind this loop.
                    tokio::task::consume_budget().await;
                }
            }
        };
        // The wake-ups this loop took while the offset commit held starts
        // back (workers that ended, records fetched) started nothing.
        // Start what they were for now: the dispatcher's next wake-up
        // would otherwise be the interval's timer, that is, the next
        // commit, and records would run only from one commit's start to
        // its hold (a release pass-through fell from 385 k to 2.7 k
        // records/s).
        if !self.stopped() {
            self.dispatch();
        }
        result
    }

    /// A fatal error is recorded or the application is stopping: nothing
    /// more is to start.
    fn stopped(&self) -> bool {
        self.lock().fatal.is_some() || self.stopping.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Commits the watermarks by the commit mode; `last` makes it
    /// synchronous (revoke, shutdown).
    pub(super) async fn commit(
        self: &Arc<Self>,
        only: Option<&[TopicPartition]>,
        last: bool,
    ) -> std::result::Result<(), StreamsError> {
        match &self.config.commit_mode {
            CommitMode::ExactlyOnce => return self.commit_transaction(only).await,
            CommitMode::Async(callback) if !last => {
                let offsets = self.committable(only, false);
                if offsets.is_empty() {
                    return Ok(());
                }
                self.flush_caches().await?;
                self.config.stores.flush_changelogs().await?;
                self.mark_committed(&offsets);
                let (callback, counters) = (callback.clone(), self.counters.clone());
                let sent = offsets.clone();
                self.consumer
                    .commit_async_offsets(offsets, move |result| {
                        if let Some(e) = counters.commit_result(&result) {
                            counters.set_fatal(e);
                        }
                        callback(&CommitOutcome {
                            offsets: sent,
                            result,
                        });
                    })
                    .await;
                return Ok(());
            }
            _ => {}
        }
        let offsets = self.committable(only, last);
        if offsets.is_empty() {
            return Ok(());
        }
        self.flush_caches().await?;
        // Every record below the offsets is done, so its changelog writes
        // are sent: they must be acknowledged before its offset commits.
        self.config.stores.flush_changelogs().await?;
        let started = Instant::now();
        // Sync commits: no record starts until the commit completes.
        self.lock().hold = true;
        let result = self.consumer.commit_sync_offsets(offsets.clone()).await;
        self.lock().hold = false;
        self.record_commit_latency(started);
        if result.is_ok() {
            self.mark_committed(&offsets);
            // At-least-once only: exactly-once returned above.
            self.config.stores.checkpoint(offsets.keys()).await;
        }
        let fatal = self.counters.commit_result(&result);
        if let CommitMode::Async(callback) = &self.config.commit_mode {
            callback(&CommitOutcome { offsets, result });
        }
        match fatal {
            Some(e) => Err(e.into()),
            None => Ok(()),
        }
    }

    /// Exactly-once: drain everything in flight, put the watermarks into the
    /// open transaction with the group metadata (KIP-447), commit, begin
    /// the next.
    async fn commit_transaction(
        self: &Arc<Self>,
        only: Option<&[TopicPartition]>,
    ) -> std::result::Result<(), StreamsError> {
        // close_epoch holds starts back from the moment the epoch is
        // closed; they resume once the next transaction is open.
        let result = self.close_and_commit(only).await;
        self.lock().hold = false;
        result
    }

    async fn close_and_commit(
        self: &Arc<Self>,
        only: Option<&[TopicPartition]>,
    ) -> std::result::Result<(), StreamsError> {
        if !self.close_epoch().await {
            return Err(Error::config(
                "drain.timeout",
                "in-flight records did not finish before the transaction's commit",
            )
            .into());
        }
        if std::mem::take(&mut self.lock().dispatched_since_commit) == 0 {
            return Ok(());
        }
        self.flush_caches().await?;
        let mut offsets = self.committable(None, true);
        if let Some(only) = only {
            // Revoked partitions are committed too (they are drained).
            offsets.extend(self.committable(Some(only), true));
        }
        let started = Instant::now();
        if !offsets.is_empty() {
            let membership = self.consumer.watch_membership()?;
            self.producer
                .send_offsets_to_transaction_watched(&offsets, &membership)
                .await?;
        }
        if self.lock().fatal.is_some() {
            // Partitions were lost (see the listener's `on_lost`): this
            // transaction must not commit; the dispatch loop stops on the
            // error and the shutdown aborts it.
            return Ok(());
        }
        self.producer.commit_transaction().await?;
        // The commit flushed the changelog writes (a failed one fails it):
        // this only collects their acknowledgements, waiting for nothing.
        self.config.stores.flush_changelogs().await?;
        self.producer.begin_transaction()?;
        self.record_commit_latency(started);
        self.mark_committed(&offsets);
        bump(&self.counters.commits);
        debug!(elapsed = ?started.elapsed(), partitions = offsets.len(), "transaction committed");
        Ok(())
    }

    /// Exactly-once, before a transaction commits: finishes every record
    /// older than the newest one started in each task (starting those a
    /// busy key held back; none newer), so that the committed offset
    /// (the lowest record not done) covers every output in the
    /// transaction: with Key or Unordered ordering, records finish out of
    /// order, and a record done above the watermark would be processed
    /// again after a restart, its first output committed. Up to the drain
    /// timeout; true when closed.
    async fn close_epoch(self: &Arc<Self>) -> bool {
        let deadline = Instant::now() + self.config.drain_timeout;
        {
            let mut core = self.lock();
            core.watchers += 1;
            core.closing = true;
            for (_, _, t) in core.tasks.iter_mut() {
                t.fence = t.queue.started_end();
            }
        }
        let closed = loop {
            let progress = self.progress.notified();
            tokio::pin!(progress);
            progress.as_mut().enable();
            self.dispatch();
            let done = {
                let core = self.lock();
                // Acking records too: their offsets go into this
                // transaction, so their outputs must be in it.
                let done = core
                    .tasks
                    .iter()
                    .all(|(_, t)| t.acking == 0 && t.queue.done_below(t.fence));
                done
            };
            if done {
                break true;
            }
            tokio::select! {
                _ = progress => {}
                _ = tokio::time::sleep_until(deadline) => break false,
            }
        };
        let mut core = self.lock();
        core.closing = false;
        for (_, _, t) in core.tasks.iter_mut() {
            t.fence = u64::MAX;
        }
        core.hold = true;
        core.watchers -= 1;
        drop(core);
        closed
    }

    /// Waits until nothing is in flight or acking for `only` (every task
    /// when `None`), up to the drain timeout; true when drained.
    pub(super) async fn drain(&self, only: Option<&[TopicPartition]>) -> bool {
        self.lock().watchers += 1;
        let drained = self.drain_watched(only).await;
        self.lock().watchers -= 1;
        drained
    }

    /// [`drain`](Self::drain), counted in `Core::watchers` by the caller.
    async fn drain_watched(&self, only: Option<&[TopicPartition]>) -> bool {
        let deadline = Instant::now() + self.config.drain_timeout;
        loop {
            let progress = self.progress.notified();
            tokio::pin!(progress);
            progress.as_mut().enable();
            let busy = {
                let core = self.lock();
                // Records acking count: their watermarks are committed
                // next.
                match only {
                    None => core.in_flight + core.awaiting.len(),
                    Some(o) => o
                        .iter()
                        .filter_map(|tp| core.tasks.get(tp))
                        .map(|t| t.queue.in_flight() + t.acking)
                        .sum(),
                }
            };
            if busy == 0 {
                return true;
            }
            tokio::select! {
                _ = progress => {}
                _ = tokio::time::sleep_until(deadline) => return false,
            }
        }
    }

    /// Revocation, run by the dispatcher: stop dispatching the partitions,
    /// drain them, commit, forget them.
    pub(super) async fn revoke(
        self: &Arc<Self>,
        partitions: &[TopicPartition],
    ) -> std::result::Result<(), StreamsError> {
        if self.config.is_exactly_once() {
            // Close the transaction while the partitions still dispatch, so
            // that their records below the fence finish (see close_epoch).
            self.commit_transaction(None).await?;
        }
        {
            let mut core = self.lock();
            for tp in partitions {
                if let Some(t) = core.tasks.get_mut(tp) {
                    t.revoked = true;
                    t.queue.clear_buffer();
                }
            }
        }
        if !self.drain(Some(partitions)).await {
            warn!(
                ?partitions,
                "drain timed out on revoke; committing what is done"
            );
        }
        let r = self.commit(Some(partitions), true).await;
        self.config.stores.close(partitions, r.is_ok()).await;
        let mut core = self.lock();
        for tp in partitions {
            core.tasks.remove(tp);
        }
        r
    }
}
