//! State shared between the membership task and the consumer-facing handle,
//! and the helpers both drivers (classic and KIP-848) use: coordinator
//! connections, bounded event delivery and the poll timer.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{mpsc, oneshot, watch, Notify};
use tokio::time::Instant;
use tracing::warn;

use super::config::GroupConfig;
use super::events::{ConsumerGroupMetadata, GroupEvent, RevokeAck};
use super::metrics::GroupMetrics;
use crate::cluster::{Cluster, CoordinatorKind};
use crate::error::{Error, Result};
use crate::group_metadata::PublishedMembership;
use crate::net::{BrokerAddr, Connection, ConnectionConfig};
use crate::TopicPartition;

/// Who we are in the group, as commits and the consumer see it.
#[derive(Debug, Default)]
pub(crate) struct MemberState {
    pub member_id: String,
    /// Classic generation or KIP-848 member epoch; -1 when not a member.
    pub generation: i32,
    pub assignment: BTreeSet<TopicPartition>,
    /// The coordinator's label, for error messages.
    pub coordinator: Option<String>,
}

/// Shared by the handle, the commit lane and the membership task.
#[derive(Debug)]
pub(crate) struct Shared {
    pub group_id: String,
    pub instance_id: Option<String>,
    pub member: Mutex<MemberState>,
    last_poll: Mutex<Instant>,
    pub polled: Notify,
    /// This member's own coordinator connection (see [`coordinator`]).
    conn: tokio::sync::Mutex<Option<(BrokerAddr, Connection)>>,
    /// The consumer's rebalance, heartbeat and commit counters.
    pub metrics: Arc<GroupMetrics>,
    /// Every [`Driver::publish`], for a transactional producer that resends
    /// offsets with a newer epoch.
    published: watch::Sender<PublishedMembership>,
}

impl Shared {
    pub fn new(config: &GroupConfig, metrics: Arc<GroupMetrics>) -> Shared {
        let (published, _) = watch::channel(PublishedMembership {
            metadata: ConsumerGroupMetadata {
                group_id: config.group_id.clone(),
                generation_id: -1,
                member_id: String::new(),
                group_instance_id: config.group_instance_id.clone(),
            },
            owned: BTreeSet::new(),
        });
        Shared {
            published,
            metrics,
            group_id: config.group_id.clone(),
            instance_id: config.group_instance_id.clone(),
            member: Mutex::new(MemberState {
                generation: -1,
                ..MemberState::default()
            }),
            last_poll: Mutex::new(Instant::now()),
            polled: Notify::new(),
            conn: tokio::sync::Mutex::new(None),
        }
    }

    pub fn state(&self) -> std::sync::MutexGuard<'_, MemberState> {
        self.member.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn metadata(&self) -> ConsumerGroupMetadata {
        let s = self.state();
        ConsumerGroupMetadata {
            group_id: self.group_id.clone(),
            generation_id: s.generation,
            member_id: s.member_id.clone(),
            group_instance_id: self.instance_id.clone(),
        }
    }

    /// What the membership publishes, from now on.
    pub fn watch_membership(&self) -> watch::Receiver<PublishedMembership> {
        self.published.subscribe()
    }

    pub fn notify_poll(&self) {
        *self.last_poll.lock().unwrap_or_else(|p| p.into_inner()) = Instant::now();
        self.polled.notify_waiters();
    }

    pub fn last_poll(&self) -> Instant {
        *self.last_poll.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// "group g member m (generation n) at coordinator c", for errors.
    pub fn describe(&self) -> String {
        let s = self.state();
        format!(
            "group {} member {} (generation {}) at coordinator {}",
            self.group_id,
            if s.member_id.is_empty() {
                "<none>"
            } else {
                &s.member_id
            },
            s.generation,
            s.coordinator.as_deref().unwrap_or("<unknown>"),
        )
    }
}

/// The coordinator's address and this member's connection to it.
///
/// Each member dials its own group connection instead of sharing the pool's
/// per-broker `Workload::Group` socket: a broker handles one request at a
/// time per connection and holds JoinGroup for the whole rebalance, so two
/// members sharing a socket would block each other's JoinGroup and
/// heartbeats (and be evicted).
pub(crate) async fn coordinator(
    cluster: &Cluster,
    shared: &Shared,
) -> Result<(BrokerAddr, Connection)> {
    let addr = cluster
        .coordinator(CoordinatorKind::Group, &shared.group_id)
        .await?;
    shared.state().coordinator = Some(addr.to_string());
    let mut slot = shared.conn.lock().await;
    if let Some((a, c)) = slot.as_ref() {
        if *a == addr && !c.is_closed() {
            return Ok((addr, c.clone()));
        }
    }
    let cfg = cluster.config();
    let conn_cfg = ConnectionConfig::from_client(cfg);
    match Connection::connect_counted(&addr, &conn_cfg, cluster.connection_metrics()).await {
        Ok(conn) => {
            *slot = Some((addr.clone(), conn.clone()));
            Ok((addr, conn))
        }
        Err(e) => {
            *slot = None;
            cluster.invalidate_coordinator(CoordinatorKind::Group, &shared.group_id);
            Err(e)
        }
    }
}

/// Whether `e` means we should look the coordinator up again.
pub(crate) fn needs_rediscovery(e: &Error) -> bool {
    match e.kafka_code() {
        Some(code) => code.invalidates_coordinator(),
        None => e.is_retriable(),
    }
}

/// Everything a membership driver needs.
pub(crate) struct Driver {
    pub cluster: Cluster,
    pub config: GroupConfig,
    pub shared: Arc<Shared>,
    /// The subscribed topics; the handle may change them.
    pub subscription: watch::Receiver<Vec<String>>,
    pub events: mpsc::Sender<GroupEvent>,
    pub close: watch::Receiver<bool>,
}

impl Driver {
    /// The subscribed topics now.
    pub fn topics(&self) -> Vec<String> {
        self.subscription.borrow().clone()
    }

    /// The subscribed topics now, marking them seen by
    /// [`subscription_changed`](Self::subscription_changed).
    pub fn read_topics(&mut self) -> Vec<String> {
        self.subscription.borrow_and_update().clone()
    }

    /// Resolves when the subscription differs from what
    /// [`read_topics`](Self::read_topics) last returned (never, once the
    /// handle is gone).
    pub fn subscription_changed(&self) -> impl std::future::Future<Output = ()> + 'static {
        let mut rx = self.subscription.clone();
        async move {
            if rx.changed().await.is_err() {
                std::future::pending::<()>().await;
            }
        }
    }

    pub fn closing(&self) -> bool {
        *self.close.borrow()
    }

    /// Resolves when close is requested (or the handle is gone).
    pub async fn closed(&self) {
        self.close_signal().await;
    }

    /// Like [`closed`](Self::closed) without borrowing the driver.
    pub fn close_signal(&self) -> impl std::future::Future<Output = ()> + 'static {
        let mut rx = self.close.clone();
        async move {
            let _ = rx.wait_for(|c| *c).await;
        }
    }

    /// Whether the application has not polled within `max.poll.interval.ms`.
    pub fn poll_expired(&self) -> bool {
        self.shared.last_poll().elapsed() > self.config.max_poll_interval
    }

    /// When the poll timer expires unless the application polls first.
    pub fn poll_deadline(&self) -> Instant {
        self.shared.last_poll() + self.config.max_poll_interval + Duration::from_millis(1)
    }

    /// Waits until the application polls again (or close).
    pub async fn wait_for_poll(&self) {
        let since = self.shared.last_poll();
        loop {
            let notified = self.shared.polled.notified();
            if self.shared.last_poll() > since || self.closing() {
                return;
            }
            tokio::select! {
                _ = notified => {}
                _ = self.closed() => return,
                _ = tokio::time::sleep(Duration::from_secs(1)) => {}
            }
        }
    }

    /// Delivers an event, waiting at most the rebalance timeout for room.
    pub async fn emit(&self, event: GroupEvent) {
        let bound = self.config.rebalance_timeout();
        match tokio::time::timeout(bound, self.events.send(event)).await {
            Ok(_) => {}
            Err(_) => warn!(
                group = %self.shared.group_id,
                "consumer did not take a membership event within the rebalance timeout"
            ),
        }
    }

    /// Membership failed for good: hands `e` to the consumer, and again on
    /// each later poll until close, so `poll` keeps failing (as Java's
    /// `poll` keeps throwing, e.g. `GroupAuthorizationException`) instead
    /// of returning nothing from a group that is gone. The subscription is
    /// dropped first, so a later `subscribe` fails with [`Error::Closed`].
    pub async fn fail(mut self, e: Error) {
        self.subscription = watch::channel(Vec::new()).1;
        loop {
            self.emit(GroupEvent::Fatal(e.clone())).await;
            self.wait_for_poll().await;
            if self.closing() {
                return;
            }
        }
    }

    /// Sends `Revoked` and returns the ack receiver, or `None` if there is
    /// nothing to revoke.
    pub async fn start_revoke(
        &self,
        partitions: &BTreeSet<TopicPartition>,
    ) -> Option<oneshot::Receiver<()>> {
        if partitions.is_empty() {
            return None;
        }
        let (ack, rx) = RevokeAck::new();
        self.emit(GroupEvent::Revoked(
            partitions.iter().cloned().collect(),
            ack,
        ))
        .await;
        Some(rx)
    }

    /// The partitions are gone without a hand-over.
    pub async fn lose(&self, owned: &mut BTreeSet<TopicPartition>) {
        if owned.is_empty() {
            return;
        }
        let lost: Vec<TopicPartition> = std::mem::take(owned).into_iter().collect();
        self.shared.state().assignment.clear();
        self.emit(GroupEvent::Lost(lost)).await;
    }

    /// Backoff between retries of a failed membership step.
    pub async fn backoff(&self, attempt: &mut u32) {
        let base = self.cluster.config().retry_backoff;
        let max = self.cluster.config().retry_backoff_max;
        let wait = base.saturating_mul(1 << (*attempt).min(10)).min(max);
        *attempt = attempt.saturating_add(1);
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = self.closed() => {}
        }
    }

    /// Publishes membership for commits and the handle.
    pub fn publish(&self, member_id: &str, generation: i32, owned: &BTreeSet<TopicPartition>) {
        {
            let mut s = self.shared.state();
            s.member_id = member_id.to_owned();
            s.generation = generation;
            s.assignment = owned.clone();
        }
        let metadata = self.shared.metadata();
        self.shared.published.send_if_modified(|p| {
            let changed = p.metadata != metadata || p.owned != *owned;
            if changed {
                p.metadata = metadata;
                p.owned = owned.clone();
            }
            changed
        });
    }
}
