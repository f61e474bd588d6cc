//! Committed offsets on [`Consumer`]: synchronous and asynchronous commits,
//! reading them back, auto-commit, and the group metadata a transactional
//! producer sends with its offsets (KIP-447).
//!
//! Every commit goes through the group member's ordered lane
//! (`group::offsets`), so commits reach the coordinator, and callbacks run,
//! in call order; an asynchronous commit is not retried (a later one
//! supersedes it). Positions advance only for records `poll` returned, so
//! committing [`Consumer::positions`] never commits past what the
//! application was given. Auto-commit does exactly that, from `poll`, every
//! `auto.commit.interval.ms`, as well as on revoke and on close.

use std::collections::HashMap;

use tokio::time::Instant;
use tracing::{debug, warn};

use super::group::{ConsumerGroupMetadata, OffsetAndMetadata, Offsets};
use super::Consumer;
use crate::error::Result;
use crate::TopicPartition;

impl Consumer {
    /// Commits the positions of every assigned partition (the offsets after
    /// the records `poll` returned) and waits, after earlier commits.
    /// Retriable errors are retried within `default.api.timeout.ms`; a
    /// rebalance or fencing fails it with [`Error::CommitFailed`](crate::Error::CommitFailed).
    pub async fn commit_sync(&self) -> Result<()> {
        let offsets = self.offsets_of(&self.assignment());
        self.commit_sync_offsets(offsets).await
    }

    /// Commits `offsets` (each the *next* offset to consume, with optional
    /// leader epoch and metadata string) and waits.
    pub async fn commit_sync_offsets(&self, offsets: Offsets) -> Result<()> {
        self.shared.commit_member()?.commit(offsets).await
    }

    /// Queues a commit of every assigned partition's position; `callback`
    /// gets the result. Callbacks run in commit order; not retried.
    pub async fn commit_async(&self, callback: impl FnOnce(Result<()>) + Send + 'static) {
        let offsets = self.offsets_of(&self.assignment());
        self.commit_async_offsets(offsets, callback).await
    }

    /// Queues a commit of `offsets`; see [`commit_async`](Self::commit_async).
    /// Waits only when 128 commits are already queued.
    pub async fn commit_async_offsets(
        &self,
        offsets: Offsets,
        callback: impl FnOnce(Result<()>) + Send + 'static,
    ) {
        match self.shared.commit_member() {
            Ok(m) => m.commit_async(offsets, callback).await,
            Err(e) => callback(Err(e)),
        }
    }

    /// The group's committed offsets for `partitions`; partitions without
    /// one are absent. Reads stable offsets (KIP-447), within
    /// `default.api.timeout.ms`.
    pub async fn committed(
        &self,
        partitions: &[TopicPartition],
    ) -> Result<HashMap<TopicPartition, OffsetAndMetadata>> {
        self.shared
            .commit_member()?
            .fetch_committed(partitions)
            .await
    }

    /// Who this consumer is in its group now (generation -1 and no member
    /// id when not a member), for a transactional producer's
    /// `send_offsets_to_transaction` (KIP-447). Fails without `group.id`.
    pub fn group_metadata(&self) -> Result<ConsumerGroupMetadata> {
        Ok(self.shared.commit_member()?.group_metadata())
    }

    /// [`group_metadata`](Self::group_metadata) and the owned partitions,
    /// watched as the membership publishes them: what a transactional
    /// producer needs to resend offsets refused with STALE_MEMBER_EPOCH.
    pub(crate) fn watch_membership(
        &self,
    ) -> Result<tokio::sync::watch::Receiver<crate::group_metadata::PublishedMembership>> {
        Ok(self.shared.commit_member()?.watch_membership())
    }

    /// Commits positions when `auto.commit.interval.ms` has passed since
    /// the last auto-commit (asynchronously: a failure is logged and the
    /// next one supersedes it).
    pub(super) async fn auto_commit(&self) {
        let config = &self.shared.config;
        if !config.enable_auto_commit || config.group_id.is_none() {
            return;
        }
        let now = Instant::now();
        {
            let mut slot = self.shared.group();
            let due = slot.next_auto_commit.is_some_and(|at| now >= at);
            if due || slot.next_auto_commit.is_none() {
                slot.next_auto_commit = Some(now + config.auto_commit_interval);
            }
            if !due {
                return;
            }
        }
        let offsets = self.offsets_of(&self.assignment());
        if offsets.is_empty() {
            return;
        }
        debug!(partitions = offsets.len(), "auto-commit");
        self.commit_async_offsets(offsets, |r| {
            if let Err(e) = r {
                warn!(error = %e, "auto-commit failed; the next one supersedes it");
            }
        })
        .await;
    }
}
