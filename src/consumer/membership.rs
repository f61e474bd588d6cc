//! Subscriptions: the consumer's side of group membership.
//!
//! [`Consumer::subscribe`] joins `group.id` through
//! [`GroupMember`](super::group::GroupMember) (classic protocol with
//! KIP-429 cooperative rebalancing and KIP-345 static membership, or the
//! KIP-848 consumer protocol) and a small task moves its events into a
//! queue. `poll` applies them on the application's task, as the Java client
//! does, so a rebalance listener runs between two polls:
//!
//! - `Assigned`: read committed offsets (offset and leader epoch, KIP-320)
//!   for the new partitions, add them to the assignment, seek them there
//!   (others start from `auto.offset.reset`), then `on_assigned`.
//! - `Revoked`: `on_revoked`, then (with `enable.auto.commit`) commit the
//!   positions of the revoked partitions, stop fetching them, and ack so
//!   membership proceeds. Only returned records move positions, so nothing
//!   is committed past what the application was given.
//! - `Lost`: `on_lost`, then drop the partitions without committing.
//!
//! [`Consumer::subscribe_matching`] re-evaluates a topic-name predicate
//! against the full topic list every `metadata.max.age.ms` (Java's
//! `subscribe(Pattern)`, matched client-side for both protocols).

use std::collections::{BTreeSet, VecDeque};
use std::sync::{Arc, Weak};

use tokio::task::JoinHandle;
use tokio::time::Instant;
use tracing::{debug, warn};

use super::group::{GroupEvent, GroupEvents, GroupMember, Offsets};
use super::listener::RebalanceListener;
use super::{Consumer, Position, Shared};
use crate::error::{Error, Result};
use crate::TopicPartition;

/// The consumer's group state, behind `Shared::group`.
#[derive(Default)]
pub(crate) struct GroupSlot {
    /// Membership after `subscribe`, or an offsets-only member for a
    /// manually assigned consumer with a `group.id`.
    pub member: Option<Arc<GroupMember>>,
    /// Whether `member` is a subscription (not offsets-only).
    pub subscribed: bool,
    /// The topics last subscribed.
    pub topics: Vec<String>,
    pub listener: Option<Arc<dyn RebalanceListener>>,
    /// Membership events not yet applied.
    pub pending: VecDeque<GroupEvent>,
    /// The error that ended the membership for good (authorization, a
    /// fenced static member, ...): every later `poll` fails with it at once,
    /// as the Java consumer rethrows it, until the consumer subscribes
    /// again.
    pub failed: Option<Error>,
    /// When auto-commit commits next (`None` until the first poll).
    pub next_auto_commit: Option<Instant>,
    /// Re-evaluates a pattern subscription.
    pub pattern_task: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for GroupSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GroupSlot")
            .field("subscribed", &self.subscribed)
            .field("topics", &self.topics)
            .field("pending", &self.pending.len())
            .finish_non_exhaustive()
    }
}

/// A topic-name predicate for [`Consumer::subscribe_matching`].
type TopicMatcher = Box<dyn Fn(&str) -> bool + Send + Sync + 'static>;

impl Shared {
    pub(crate) fn group(&self) -> std::sync::MutexGuard<'_, GroupSlot> {
        self.group.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Joins the group subscribed to `topics`, or changes the subscription.
    fn subscribe_topics(self: &Arc<Self>, topics: Vec<String>) -> Result<()> {
        if topics.is_empty() {
            return Err(Error::config(
                "subscription",
                "at least one topic is required (use unsubscribe to leave)",
            ));
        }
        let group = self.group_config()?;
        let mut slot = self.group();
        if slot.subscribed {
            if let Some(member) = &slot.member {
                member.subscribe(topics.clone())?;
                slot.topics = topics;
                return Ok(());
            }
        }
        if !self.lock().partitions.is_empty() {
            return Err(Error::invalid_state(
                crate::error::Origin::Consumer,
                "partitions were assigned manually; assign(vec![]) before subscribing",
            ));
        }
        let (member, events) = GroupMember::join_counted(
            &self.cluster,
            group,
            topics.clone(),
            self.group_metrics.clone(),
        )?;
        slot.member = Some(Arc::new(member));
        slot.failed = None;
        slot.subscribed = true;
        slot.topics = topics;
        tokio::spawn(forward_events(Arc::downgrade(self), events));
        Ok(())
    }

    /// The membership settings, or a config error without `group.id`.
    fn group_config(&self) -> Result<super::group::GroupConfig> {
        if self.config.group_id.is_none() {
            return Err(Error::config(
                "group.id",
                "required to subscribe or commit offsets",
            ));
        }
        Ok(self.config.group.clone())
    }

    /// The member commits go through: the subscription's, or an
    /// offsets-only one created on first use.
    pub(crate) fn commit_member(&self) -> Result<Arc<GroupMember>> {
        let group = self.group_config()?;
        let mut slot = self.group();
        if let Some(m) = &slot.member {
            return Ok(m.clone());
        }
        let m = Arc::new(GroupMember::without_membership_counted(
            &self.cluster,
            group,
            self.group_metrics.clone(),
        )?);
        slot.member = Some(m.clone());
        Ok(m)
    }
}

/// Moves membership events into the consumer's queue and wakes `poll`.
pub(crate) async fn forward_events(shared: Weak<Shared>, mut events: GroupEvents) {
    while let Some(event) = events.recv().await {
        let Some(shared) = shared.upgrade() else {
            return;
        };
        shared.group().pending.push_back(event);
        shared.data_ready.notify_waiters();
        shared.group_events.notify_waiters();
    }
}

/// Re-evaluates `matcher` against every topic each `metadata.max.age.ms`.
async fn follow_pattern(shared: Weak<Shared>, matcher: TopicMatcher) {
    let mut last: Vec<String> = Vec::new();
    loop {
        let Some(s) = shared.upgrade() else {
            return;
        };
        if *s.shutdown.borrow() {
            return;
        }
        let cluster = s.cluster.clone();
        drop(s);
        match cluster.refresh_metadata(None).await {
            Ok(m) => {
                let topics: Vec<String> = m
                    .topics
                    .values()
                    .filter(|t| !t.internal && t.error.is_none() && matcher(&t.name))
                    .map(|t| t.name.clone())
                    .collect();
                if topics != last && !topics.is_empty() {
                    let Some(s) = shared.upgrade() else {
                        return;
                    };
                    debug!(?topics, "pattern subscription changed");
                    match s.subscribe_topics(topics.clone()) {
                        Ok(()) => last = topics,
                        Err(e) => warn!(error = %e, "pattern subscription update failed"),
                    }
                }
            }
            Err(e) => debug!(error = %e, "metadata refresh for a pattern subscription failed"),
        }
        tokio::time::sleep(cluster.config().metadata_max_age).await;
    }
}

impl Consumer {
    /// Joins the consumer group `group.id` subscribed to `topics`, or
    /// replaces the subscription. Partitions arrive through rebalances,
    /// applied by [`poll`](Self::poll): positions start at the group's
    /// committed offsets, else `auto.offset.reset`. Fails without a
    /// `group.id` or after a manual [`assign`](Self::assign).
    pub fn subscribe<S: Into<String>>(&self, topics: impl IntoIterator<Item = S>) -> Result<()> {
        if let Some(t) = self.shared.group().pattern_task.take() {
            t.abort();
        }
        self.shared
            .subscribe_topics(topics.into_iter().map(Into::into).collect())
    }

    /// Subscribes to every non-internal topic whose name `matcher` accepts,
    /// re-evaluated every `metadata.max.age.ms` (the Java client's
    /// `subscribe(Pattern)`; pass e.g. a `regex::Regex`'s `is_match`). The
    /// group is joined once a topic matches.
    pub fn subscribe_matching(
        &self,
        matcher: impl Fn(&str) -> bool + Send + Sync + 'static,
    ) -> Result<()> {
        self.shared.group_config()?;
        let task = tokio::spawn(follow_pattern(
            Arc::downgrade(&self.shared),
            Box::new(matcher),
        ));
        if let Some(old) = self.shared.group().pattern_task.replace(task) {
            old.abort();
        }
        Ok(())
    }

    /// Sets the listener called on rebalances (replacing any earlier one).
    pub fn set_rebalance_listener(&self, listener: impl RebalanceListener) {
        self.shared.group().listener = Some(Arc::new(listener));
    }

    /// The subscribed topics (empty without a subscription).
    pub fn subscription(&self) -> Vec<String> {
        let slot = self.shared.group();
        if slot.subscribed {
            slot.topics.clone()
        } else {
            Vec::new()
        }
    }

    /// Leaves the group (after revoking, so auto-commit and the listener
    /// commit first) and drops the assignment. A no-op without a
    /// subscription.
    pub async fn unsubscribe(&self) -> Result<()> {
        let r = self.leave_group().await;
        self.assign(Vec::new());
        r
    }

    /// Applies queued membership events and auto-commits when due. Called
    /// by `poll`; skipped while another handle is doing it.
    pub(super) async fn group_work(&self) -> Result<()> {
        let Ok(_turn) = self.shared.rebalance.try_lock() else {
            return Ok(());
        };
        let (member, failed) = {
            let slot = self.shared.group();
            (slot.member.clone(), slot.failed.clone())
        };
        if let Some(e) = failed {
            return Err(e);
        }
        if let Some(member) = member {
            loop {
                let event = self.shared.group().pending.pop_front();
                let Some(event) = event else { break };
                self.apply(&member, event).await?;
            }
        }
        self.auto_commit().await;
        Ok(())
    }

    /// Feeds the member's `max.poll.interval.ms` timer.
    pub(super) fn notify_group_poll(&self) {
        if let Some(m) = &self.shared.group().member {
            m.notify_poll();
        }
    }

    async fn apply(&self, member: &GroupMember, event: GroupEvent) -> Result<()> {
        let listener = self.shared.group().listener.clone();
        match event {
            GroupEvent::Assigned(parts) => {
                let owned: BTreeSet<TopicPartition> = self.assignment().into_iter().collect();
                let new: Vec<TopicPartition> = parts
                    .iter()
                    .filter(|tp| !owned.contains(*tp))
                    .cloned()
                    .collect();
                let committed = match member.fetch_committed(&new).await {
                    Ok(c) => c,
                    Err(e) => {
                        // Applied again by the next poll.
                        self.shared
                            .group()
                            .pending
                            .push_front(GroupEvent::Assigned(parts));
                        return Err(e);
                    }
                };
                self.assign(owned.into_iter().chain(new).collect());
                for (tp, o) in committed {
                    let position = Position {
                        offset: o.offset,
                        leader_epoch: o.leader_epoch,
                    };
                    debug!(partition = %tp, offset = o.offset, "starting at the committed offset");
                    let _ = self.seek_position(&tp, position);
                }
                if let Some(l) = listener {
                    l.on_assigned(self, &parts).await;
                }
            }
            GroupEvent::Revoked(parts, ack) => {
                if let Some(l) = listener {
                    l.on_revoked(self, &parts).await;
                }
                if self.shared.config.enable_auto_commit {
                    let offsets = self.offsets_of(&parts);
                    if let Err(e) = member.commit(offsets).await {
                        warn!(error = %e, "auto-commit of revoked partitions failed");
                    }
                }
                self.drop_partitions(&parts);
                ack.ack();
            }
            GroupEvent::Lost(parts) => {
                if let Some(l) = listener {
                    l.on_lost(self, &parts).await;
                }
                self.drop_partitions(&parts);
            }
            GroupEvent::Fatal(e) => {
                self.shared.group().failed = Some(e.clone());
                return Err(e);
            }
        }
        Ok(())
    }

    fn drop_partitions(&self, parts: &[TopicPartition]) {
        let gone: BTreeSet<&TopicPartition> = parts.iter().collect();
        let keep = self
            .assignment()
            .into_iter()
            .filter(|tp| !gone.contains(tp))
            .collect();
        self.assign(keep);
    }

    /// The positions of `parts` (those that have one) as offsets to commit.
    pub(super) fn offsets_of(&self, parts: &[TopicPartition]) -> Offsets {
        let positions = self.positions();
        parts
            .iter()
            .filter_map(|tp| Some((tp.clone(), positions.get(tp)?)))
            .map(|(tp, p)| (tp, position_offset(p)))
            .collect()
    }

    /// Leaves the group: the member revokes what it owns (the listener and
    /// auto-commit run, as in `poll`) and sends LeaveGroup (static members
    /// do not). A manually assigned consumer commits its positions under
    /// auto-commit.
    pub(super) async fn leave_group(&self) -> Result<()> {
        let _turn = self.shared.rebalance.lock().await;
        let (member, subscribed) = {
            let mut slot = self.shared.group();
            if let Some(t) = slot.pattern_task.take() {
                t.abort();
            }
            (slot.member.clone(), slot.subscribed)
        };
        let Some(member) = member else {
            return Ok(());
        };
        if !subscribed {
            if self.shared.config.enable_auto_commit {
                let offsets = self.offsets_of(&self.assignment());
                if let Err(e) = member.commit(offsets).await {
                    warn!(error = %e, "final auto-commit failed");
                }
            }
            return Ok(());
        }
        let leave = member.close();
        tokio::pin!(leave);
        let result = loop {
            let arrived = self.shared.group_events.notified();
            tokio::pin!(arrived);
            arrived.as_mut().enable();
            self.apply_pending_quietly(&member).await;
            tokio::select! {
                r = &mut leave => break r,
                _ = arrived => {}
            }
        };
        self.apply_pending_quietly(&member).await;
        let mut slot = self.shared.group();
        slot.member = None;
        slot.subscribed = false;
        slot.topics.clear();
        slot.pending.clear();
        slot.failed = None;
        result
    }

    async fn apply_pending_quietly(&self, member: &GroupMember) {
        loop {
            let event = self.shared.group().pending.pop_front();
            let Some(event) = event else { return };
            if let GroupEvent::Assigned(_) = event {
                continue; // leaving: nothing to start
            }
            if let Err(e) = self.apply(member, event).await {
                debug!(error = %e, "membership event while leaving");
            }
        }
    }
}

pub(super) fn position_offset(p: &Position) -> super::group::OffsetAndMetadata {
    super::group::OffsetAndMetadata {
        offset: p.offset,
        leader_epoch: p.leader_epoch,
        metadata: String::new(),
    }
}
