//! Consumer-group membership and committed offsets: the part of the
//! consumer that talks to the group coordinator.
//!
//! [`GroupMember::join`] starts a background task that keeps this member in
//! its group on a dedicated [`Workload::Group`](crate::net::Workload)
//! connection to the coordinator (so a long fetch never delays a
//! heartbeat), and returns [`GroupEvents`]: the partitions
//! [`Assigned`](GroupEvent::Assigned), [`Revoked`](GroupEvent::Revoked)
//! (membership waits, bounded, for the consumer's ack so it can commit
//! first) and [`Lost`](GroupEvent::Lost). The consumer calls
//! [`GroupMember::notify_poll`] on every poll: a member whose application
//! stops polling for `max.poll.interval.ms` leaves the group, as in the Java
//! client.
//!
//! Two protocols, chosen by `group.protocol`:
//!
//! - `classic`: JoinGroup / SyncGroup / Heartbeat with client-side
//!   assignors ([`assignor`]); MEMBER_ID_REQUIRED (KIP-394), static
//!   membership (KIP-345), incremental cooperative rebalancing (KIP-429);
//!   see the protocol guide
//!   (<https://kafka.apache.org/protocol#The_Messages_JoinGroup>) and the
//!   embedded consumer protocol in [`crate::protocol::consumer_protocol`].
//! - `consumer`: the KIP-848 ConsumerGroupHeartbeat protocol with a
//!   server-side assignor (`group.remote.assignor`), in `kip848`.
//!
//! Offsets ([`GroupMember::commit`], [`GroupMember::commit_async`],
//! [`GroupMember::fetch_committed`]) carry the current generation or member
//! epoch; all commits go through one ordered lane (see `offsets`).

pub mod assignor;
mod classic;
mod classic_member;
pub mod config;
pub mod events;
mod kip848;
mod kip848_member;
mod member;
pub(crate) mod metrics;
mod offsets;
pub mod streams;
/// The consumer-protocol wire format (subscription and assignment), now in
/// [`crate::protocol::consumer_protocol`]; this path stays for one release.
pub use crate::protocol::consumer_protocol as subscription;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tracing::Instrument;

pub use config::{AssignmentStrategy, GroupConfig, GroupProtocol};
pub use events::{ConsumerGroupMetadata, GroupEvent, GroupEvents, OffsetAndMetadata, RevokeAck};
pub use offsets::{CommitCallback, Offsets};

/// Whether a commit failed because the group moved on: the same as
/// [`Error::is_commit_failed`], which now covers both the variant and the
/// plain codes.
#[deprecated(note = "use Error::is_commit_failed")]
pub fn is_commit_failed(e: &Error) -> bool {
    e.is_commit_failed()
}

use crate::cluster::Cluster;
use crate::error::{Error, Result};
use crate::TopicPartition;
use member::{Driver, Shared};
use offsets::CommitLane;

/// Membership events buffered before the membership task waits.
const EVENT_DEPTH: usize = 64;

/// This process's membership in one consumer group. Dropping it asks the
/// membership task to leave; [`close`](Self::close) does so and waits.
#[derive(Debug)]
pub struct GroupMember {
    cluster: Cluster,
    shared: Arc<Shared>,
    close: watch::Sender<bool>,
    subscription: watch::Sender<Vec<String>>,
    task: Mutex<Option<JoinHandle<()>>>,
    commits: CommitLane,
}

impl GroupMember {
    /// Validates `config` and starts joining `config.group_id` subscribed to
    /// `topics`. Must be called inside a Tokio runtime.
    pub fn join(
        cluster: &Cluster,
        config: GroupConfig,
        topics: Vec<String>,
    ) -> Result<(GroupMember, GroupEvents)> {
        Self::join_counted(cluster, config, topics, Arc::default())
    }

    /// [`join`](Self::join), counting rebalances, heartbeats and commits
    /// into `metrics` (the consumer's own).
    pub(crate) fn join_counted(
        cluster: &Cluster,
        config: GroupConfig,
        topics: Vec<String>,
        metrics: Arc<metrics::GroupMetrics>,
    ) -> Result<(GroupMember, GroupEvents)> {
        config.validate()?;
        if topics.is_empty() {
            return Err(Error::config(
                "subscription",
                format!("group {} needs at least one topic", config.group_id),
            ));
        }
        let protocol = config.protocol;
        let span = tracing::info_span!("group", group = %config.group_id, ?protocol);
        Ok(Self::launch(
            cluster,
            config,
            topics,
            metrics,
            true,
            |driver| match protocol {
                GroupProtocol::Classic => tokio::spawn(classic::run(driver).instrument(span)),
                GroupProtocol::Consumer => tokio::spawn(kip848::run(driver).instrument(span)),
            },
        ))
    }

    /// Starts a member of any protocol: tracks `topics`, spawns the driver
    /// through `spawn`, starts the commit lane and returns the handle.
    /// With `resubscribable` false the handle's subscription channel has no
    /// receiver, so [`subscribe`](Self::subscribe) on it fails (a streams
    /// member's topics are its topology's).
    pub(super) fn launch(
        cluster: &Cluster,
        config: GroupConfig,
        topics: Vec<String>,
        metrics: Arc<metrics::GroupMetrics>,
        resubscribable: bool,
        spawn: impl FnOnce(Driver) -> tokio::task::JoinHandle<()>,
    ) -> (GroupMember, GroupEvents) {
        cluster.track_topics(topics.iter().cloned());
        let shared = Arc::new(Shared::new(&config, metrics));
        let (events_tx, rx) = mpsc::channel(EVENT_DEPTH);
        let (close, close_rx) = watch::channel(false);
        let (subscription, subscription_rx) = if resubscribable {
            watch::channel(topics)
        } else {
            (watch::channel(topics.clone()).0, watch::channel(topics).1)
        };
        let driver = Driver {
            cluster: cluster.clone(),
            config,
            shared: shared.clone(),
            subscription: subscription_rx,
            events: events_tx,
            close: close_rx,
        };
        let task = spawn(driver);
        let commits = CommitLane::start(cluster.clone(), shared.clone());
        let member = GroupMember {
            cluster: cluster.clone(),
            shared,
            close,
            subscription,
            task: Mutex::new(Some(task)),
            commits,
        };
        (member, GroupEvents { rx })
    }

    /// Offsets only, no membership: for a consumer with manually assigned
    /// partitions that still commits to `config.group_id`. Commits carry
    /// generation -1 and no member id, which the coordinator accepts only
    /// while the group has no active members (as for the Java client).
    pub fn without_membership(cluster: &Cluster, config: GroupConfig) -> Result<GroupMember> {
        Self::without_membership_counted(cluster, config, Arc::default())
    }

    /// [`without_membership`](Self::without_membership), counting commits
    /// into `metrics` (the consumer's own).
    pub(crate) fn without_membership_counted(
        cluster: &Cluster,
        config: GroupConfig,
        metrics: Arc<metrics::GroupMetrics>,
    ) -> Result<GroupMember> {
        if config.group_id.is_empty() {
            return Err(Error::config("group.id", "required to commit offsets"));
        }
        let shared = Arc::new(Shared::new(&config, metrics));
        let (close, _) = watch::channel(false);
        let (subscription, _) = watch::channel(Vec::new());
        Ok(GroupMember {
            cluster: cluster.clone(),
            commits: CommitLane::start(cluster.clone(), shared.clone()),
            shared,
            close,
            subscription,
            task: Mutex::new(None),
        })
    }

    /// Replaces the subscription; the member rebalances (classic) or sends
    /// the new topics with its next heartbeat, at once (KIP-848). Partitions
    /// of topics no longer subscribed are revoked by the rebalance.
    pub fn subscribe(&self, topics: Vec<String>) -> Result<()> {
        if topics.is_empty() {
            return Err(Error::config(
                "subscription",
                format!("group {} needs at least one topic", self.shared.group_id),
            ));
        }
        if self.subscription.is_closed() {
            return Err(Error::Closed);
        }
        self.cluster.track_topics(topics.iter().cloned());
        self.subscription.send_replace(topics);
        Ok(())
    }

    /// Records an application poll (resets the `max.poll.interval.ms` timer;
    /// after a poll-timeout leave, triggers the rejoin).
    pub fn notify_poll(&self) {
        self.shared.notify_poll();
    }

    /// Who we are in the group now (for KIP-447 transactional commits).
    pub fn group_metadata(&self) -> ConsumerGroupMetadata {
        self.shared.metadata()
    }

    /// Who we are and what we own, as the membership publishes it.
    pub(crate) fn watch_membership(
        &self,
    ) -> tokio::sync::watch::Receiver<crate::group_metadata::PublishedMembership> {
        self.shared.watch_membership()
    }

    /// The partitions this member owns now, sorted.
    pub fn assignment(&self) -> Vec<TopicPartition> {
        self.shared.state().assignment.iter().cloned().collect()
    }

    /// Commits `offsets` and waits for the result, after every earlier
    /// commit. Retriable errors are retried within `default.api.timeout.ms`;
    /// a rebalance or fencing fails it with [`Error::is_commit_failed`] true.
    pub async fn commit(&self, offsets: Offsets) -> Result<()> {
        self.commits.commit(offsets).await
    }

    /// Queues `offsets` for commit after every earlier commit; `callback`
    /// gets the result, callbacks run in commit order. Not retried (a later
    /// commit supersedes). Waits only when 128 commits are already queued.
    pub async fn commit_async(
        &self,
        offsets: Offsets,
        callback: impl FnOnce(Result<()>) + Send + 'static,
    ) {
        self.commits.commit_async(offsets, Box::new(callback)).await
    }

    /// The group's committed offsets for `partitions` (partitions without
    /// one are absent). Asks for stable offsets (KIP-447), retrying while a
    /// transaction's commit is pending, within `default.api.timeout.ms`.
    pub async fn fetch_committed(
        &self,
        partitions: &[TopicPartition],
    ) -> Result<HashMap<TopicPartition, OffsetAndMetadata>> {
        offsets::fetch_committed(&self.cluster, &self.shared, partitions).await
    }

    /// Leaves the group: revokes owned partitions (answer the `Revoked`
    /// event to commit first), then sends LeaveGroup (dynamic members) or the
    /// KIP-848 leave heartbeat. Waits at most `default.api.timeout.ms`
    /// (the task finishes leaving in the background after a timeout).
    /// Later calls return at once.
    pub async fn close(&self) -> Result<()> {
        let _ = self.close.send(true);
        let task = self.task.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(task) = task {
            let bound = self.cluster.config().default_api_timeout;
            if tokio::time::timeout(bound, task).await.is_err() {
                return Err(Error::Timeout {
                    broker: self.shared.describe().into(),
                    api: "leaving the group".into(),
                    after: bound,
                    config_key: "default.api.timeout.ms",
                });
            }
        }
        Ok(())
    }
}

impl Drop for GroupMember {
    fn drop(&mut self) {
        let _ = self.close.send(true);
    }
}
