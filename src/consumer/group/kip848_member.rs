//! The KIP-848 group member (`group.protocol=consumer`) as a state machine:
//! ConsumerGroupHeartbeat answers, timers, polls and acks in; heartbeats,
//! revocations, assignments and waits out. No sockets and no clock: the
//! driver in `kip848` executes the actions and feeds back what happened.
//!
//! KIP-848 (<https://cwiki.apache.org/confluence/display/KAFKA/KIP-848%3A+The+Next+Generation+of+the+Consumer+Rebalance+Protocol>):
//! the member joins with epoch 0 and its subscription; an answer may carry
//! its target assignment (topic ids). Reconciliation revokes what is no
//! longer assigned first (the application acks), then adds the new
//! partitions, and heartbeats at once with what it now owns, which is how
//! the coordinator learns a revocation is done. An assignment arriving while
//! a revocation is acked is kept (the coordinator sends each one once).
//! FENCED_MEMBER_EPOCH and UNKNOWN_MEMBER_ID lose the partitions and rejoin
//! with epoch 0. Leaving sends epoch -1, or -2 for a static member (its
//! assignment is kept for the session timeout, KIP-345's semantics).

use std::collections::BTreeSet;
use std::time::Duration;

use kafka_protocol::messages::consumer_group_heartbeat_response::TopicPartitions;
use kafka_protocol::messages::ConsumerGroupHeartbeatResponse;

use crate::error::{Error, KafkaCode, Result};
use crate::TopicPartition;

const UNKNOWN_MEMBER_ID: i16 = 25;
const FENCED_MEMBER_EPOCH: i16 = 110;
const COORDINATOR_LOAD_IN_PROGRESS: i16 = 14;
/// The epoch a dynamic member leaves with.
pub(crate) const LEAVE_EPOCH: i32 = -1;
/// The epoch a static member leaves with (it may come back).
pub(crate) const LEAVE_STATIC_EPOCH: i32 = -2;

/// What happened, as the driver tells it.
#[derive(Debug)]
pub(crate) enum Event {
    Start,
    /// ConsumerGroupHeartbeat's answer (or why none came).
    Heartbeat(Result<ConsumerGroupHeartbeatResponse>),
    /// The target assignment of an [`Action::Resolve`], by topic name.
    Resolved(BTreeSet<TopicPartition>),
    /// The application acknowledged the last [`Action::Revoke`].
    RevokeDone,
    /// Time for the next heartbeat (the interval passed, or the
    /// subscription changed and must be sent at once).
    HeartbeatDue,
    BackoffDone,
    /// `max.poll.interval.ms` passed without a poll.
    PollExpired,
    /// The application polled again after a poll expiry.
    Polled,
    Close,
}

/// What the driver must do, in order.
#[derive(Debug)]
pub(crate) enum Action {
    /// Make this the membership commits and the consumer see.
    Publish {
        member_id: String,
        epoch: i32,
        owned: BTreeSet<TopicPartition>,
    },
    /// Send ConsumerGroupHeartbeat; `epoch` < 0 is a leave, otherwise the
    /// request carries the subscription and `owned`. Then
    /// [`Event::Heartbeat`].
    Heartbeat {
        member_id: String,
        epoch: i32,
        owned: BTreeSet<TopicPartition>,
    },
    /// Map the assignment's topic ids to names; then [`Event::Resolved`].
    Resolve(Vec<TopicPartitions>),
    /// Fire the revocation callback and wait for its ack, heartbeating
    /// meanwhile with [`Kip848Member::heartbeat_action`] and feeding the
    /// answers back; then [`Event::RevokeDone`].
    Revoke(BTreeSet<TopicPartition>),
    /// Gone without a hand-over: fire the lost callback.
    Lose(BTreeSet<TopicPartition>),
    /// Newly ours: fire the assignment callback.
    Assigned(Vec<TopicPartition>),
    /// Wait for `interval` (or a subscription change, a poll expiry,
    /// close); then [`Event::HeartbeatDue`].
    Wait {
        interval: Duration,
    },
    /// Forget the coordinator.
    Rediscover,
    /// Wait `attempt`'s backoff; then [`Event::BackoffDone`].
    Backoff {
        attempt: u32,
    },
    /// Wait until the application polls; then [`Event::Polled`].
    WaitForPoll,
    Fatal(Error),
    Stop,
}

/// Where the member stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Phase {
    Unjoined,
    /// A heartbeat is out.
    Heartbeating,
    /// Between heartbeats.
    Stable,
    /// Resolving a new target assignment's topic ids.
    Resolving,
    /// Revoking before taking the new target.
    Reconciling {
        revoked: BTreeSet<TopicPartition>,
        added: Vec<TopicPartition>,
    },
    BackingOff,
    /// The leave heartbeat is out; `closing`: then stop, else wait for a
    /// poll (after a poll expiry).
    Leaving {
        closing: bool,
    },
    /// Out after a poll expiry, until the application polls.
    Fenced,
    /// Closing: revoking what we own.
    Closing,
    Closed,
}

/// One KIP-848 member's protocol state.
#[derive(Debug)]
pub(crate) struct Kip848Member {
    group_id: String,
    is_static: bool,
    phase: Phase,
    member_id: String,
    epoch: i32,
    owned: BTreeSet<TopicPartition>,
    interval: Duration,
    /// A target assignment not reconciled yet.
    pending: Option<Vec<TopicPartitions>>,
    attempt: u32,
    coordinator: Option<String>,
}

impl Kip848Member {
    /// `member_id`: generated by the client (KIP-1082); `interval`: the
    /// heartbeat interval until the coordinator names its own.
    pub fn new(
        group_id: String,
        member_id: String,
        is_static: bool,
        interval: Duration,
    ) -> Kip848Member {
        Kip848Member {
            group_id,
            is_static,
            phase: Phase::Unjoined,
            member_id,
            epoch: 0,
            owned: BTreeSet::new(),
            interval,
            pending: None,
            attempt: 0,
            coordinator: None,
        }
    }

    #[cfg(test)]
    pub fn phase(&self) -> &Phase {
        &self.phase
    }

    /// The coordinator answering from now on (for error messages).
    pub fn at(&mut self, coordinator: Option<String>) {
        self.coordinator = coordinator;
    }

    /// The heartbeat interval in force (the coordinator's, once named).
    pub fn interval(&self) -> Duration {
        self.interval
    }

    /// The heartbeat to send now (also while a revocation waits).
    pub fn heartbeat_action(&self) -> Action {
        Action::Heartbeat {
            member_id: self.member_id.clone(),
            epoch: self.epoch,
            owned: self.owned.clone(),
        }
    }

    fn publish(&self) -> Action {
        Action::Publish {
            member_id: self.member_id.clone(),
            epoch: self.epoch,
            owned: self.owned.clone(),
        }
    }

    fn heartbeat(&mut self) -> Vec<Action> {
        self.phase = Phase::Heartbeating;
        vec![self.heartbeat_action()]
    }

    /// Takes one event; returns what to do, in order.
    pub fn handle(&mut self, event: Event) -> Vec<Action> {
        if self.phase == Phase::Closed {
            return vec![Action::Stop];
        }
        match event {
            Event::Start | Event::Polled => self.heartbeat(),
            Event::HeartbeatDue | Event::BackoffDone => match self.phase {
                Phase::Stable | Phase::BackingOff => self.heartbeat(),
                _ => Vec::new(),
            },
            Event::Heartbeat(r) => self.on_heartbeat(r),
            Event::Resolved(target) => self.on_resolved(target),
            Event::RevokeDone => self.on_revoked(),
            Event::PollExpired => self.poll_expired(),
            Event::Close => self.close(),
        }
    }

    /// The answer's error, naming the API, the member and the coordinator.
    fn check(&self, resp: &ConsumerGroupHeartbeatResponse) -> Result<()> {
        let Some(code) = KafkaCode::from_code(resp.error_code) else {
            return Ok(());
        };
        let msg = resp.error_message.as_deref().unwrap_or("");
        let api = if msg.is_empty() {
            "ConsumerGroupHeartbeat".to_owned()
        } else {
            format!("ConsumerGroupHeartbeat ({msg})")
        };
        Err(Error::Kafka {
            code,
            context: format!(
                "{api} for group {} member {} (epoch {}) at coordinator {}",
                self.group_id,
                self.member_id,
                self.epoch,
                self.coordinator.as_deref().unwrap_or("<unknown>"),
            ),
        })
    }

    /// Takes the member id, epoch, interval and any target assignment.
    fn absorb(&mut self, resp: ConsumerGroupHeartbeatResponse) {
        if let Some(id) = resp.member_id.as_ref().filter(|id| !id.is_empty()) {
            self.member_id = id.as_str().to_owned();
        }
        self.epoch = resp.member_epoch;
        if resp.heartbeat_interval_ms > 0 {
            self.interval = Duration::from_millis(resp.heartbeat_interval_ms as u64);
        }
        if let Some(a) = resp.assignment {
            self.pending = Some(a.topic_partitions);
        }
    }

    fn on_heartbeat(&mut self, r: Result<ConsumerGroupHeartbeatResponse>) -> Vec<Action> {
        let r = r.and_then(|resp| self.check(&resp).map(|()| resp));
        match self.phase.clone() {
            Phase::Heartbeating => {}
            // Heartbeats while a revocation waits: keep what they say;
            // errors surface again at the next regular heartbeat.
            Phase::Reconciling { .. } | Phase::Closing => {
                return match r {
                    Ok(resp) => {
                        self.absorb(resp);
                        vec![self.publish()]
                    }
                    Err(_) => Vec::new(),
                };
            }
            Phase::Leaving { closing } => {
                if let Err(e) = r {
                    tracing::debug!(group = %self.group_id, error = %e, "leave heartbeat failed");
                }
                return self.left(closing);
            }
            _ => return Vec::new(),
        }
        let resp = match r {
            Ok(resp) => resp,
            Err(e) => return self.failed(e),
        };
        self.absorb(resp);
        let mut out = vec![self.publish()];
        match self.pending.take() {
            Some(target) => {
                self.phase = Phase::Resolving;
                out.push(Action::Resolve(target));
            }
            None => out.extend(self.settle()),
        }
        out
    }

    /// Nothing to reconcile: wait for the next heartbeat.
    fn settle(&mut self) -> Vec<Action> {
        self.attempt = 0;
        self.phase = Phase::Stable;
        vec![Action::Wait {
            interval: self.interval,
        }]
    }

    /// Reconciliation: revoke first, then add.
    fn on_resolved(&mut self, target: BTreeSet<TopicPartition>) -> Vec<Action> {
        if self.phase != Phase::Resolving {
            return Vec::new();
        }
        let revoked: BTreeSet<TopicPartition> = self.owned.difference(&target).cloned().collect();
        let added: Vec<TopicPartition> = target.difference(&self.owned).cloned().collect();
        if revoked.is_empty() && added.is_empty() {
            return self.settle();
        }
        tracing::debug!(group = %self.group_id, member = %self.member_id, epoch = self.epoch, revoked = revoked.len(), added = added.len(), "reconciling");
        if revoked.is_empty() {
            return self.take(added);
        }
        self.phase = Phase::Reconciling {
            revoked: revoked.clone(),
            added,
        };
        vec![Action::Revoke(revoked)]
    }

    /// Adds the new partitions and reports them at once.
    fn take(&mut self, added: Vec<TopicPartition>) -> Vec<Action> {
        self.owned.extend(added.iter().cloned());
        self.attempt = 0;
        let mut out = vec![self.publish(), Action::Assigned(added)];
        out.extend(self.heartbeat());
        out
    }

    fn on_revoked(&mut self) -> Vec<Action> {
        match std::mem::replace(&mut self.phase, Phase::Unjoined) {
            Phase::Reconciling { revoked, added } => {
                self.owned.retain(|tp| !revoked.contains(tp));
                self.take(added)
            }
            Phase::Closing => {
                self.owned.clear();
                self.leave(true)
            }
            other => {
                self.phase = other;
                Vec::new()
            }
        }
    }

    fn failed(&mut self, e: Error) -> Vec<Action> {
        let attempt = self.attempt;
        match e.kafka_code().map(KafkaCode::code) {
            Some(FENCED_MEMBER_EPOCH | UNKNOWN_MEMBER_ID) => {
                tracing::info!(group = %self.group_id, member = %self.member_id, error = %e, "fenced; partitions lost, rejoining");
                let mut out = self.fenced();
                out.extend(self.heartbeat());
                out
            }
            Some(COORDINATOR_LOAD_IN_PROGRESS) => self.backoff(Vec::new(), attempt),
            _ if super::member::needs_rediscovery(&e) => {
                self.backoff(vec![Action::Rediscover], attempt)
            }
            _ if e.is_retriable() => self.backoff(Vec::new(), attempt),
            _ => {
                tracing::warn!(group = %self.group_id, error = %e, "membership failed");
                self.phase = Phase::Closed;
                vec![Action::Fatal(e)]
            }
        }
    }

    fn backoff(&mut self, mut out: Vec<Action>, attempt: u32) -> Vec<Action> {
        self.attempt = attempt.saturating_add(1);
        self.phase = Phase::BackingOff;
        out.push(Action::Backoff { attempt });
        out
    }

    /// Out of the group: epoch 0, nothing pending, the partitions lost.
    fn fenced(&mut self) -> Vec<Action> {
        self.epoch = 0;
        self.pending = None;
        let lost = std::mem::take(&mut self.owned);
        let mut out = vec![Action::Publish {
            member_id: self.member_id.clone(),
            epoch: -1,
            owned: BTreeSet::new(),
        }];
        if !lost.is_empty() {
            out.push(Action::Lose(lost));
        }
        out
    }

    /// The application is not polling: nobody would ack a revocation, so
    /// leave without one, lose the partitions, and wait for a poll.
    fn poll_expired(&mut self) -> Vec<Action> {
        tracing::warn!(group = %self.group_id, member = %self.member_id, "max.poll.interval.ms expired without a poll; leaving the group");
        self.leave(false)
    }

    /// Leaves with epoch -1, or -2 for a static member; best effort, and
    /// only when the coordinator knows us (epoch > 0).
    fn leave(&mut self, closing: bool) -> Vec<Action> {
        if self.epoch <= 0 {
            return self.left(closing);
        }
        let epoch = if self.is_static {
            LEAVE_STATIC_EPOCH
        } else {
            LEAVE_EPOCH
        };
        self.phase = Phase::Leaving { closing };
        vec![Action::Heartbeat {
            member_id: self.member_id.clone(),
            epoch,
            owned: BTreeSet::new(),
        }]
    }

    fn left(&mut self, closing: bool) -> Vec<Action> {
        self.epoch = 0;
        if closing {
            self.phase = Phase::Closed;
            return vec![
                Action::Publish {
                    member_id: self.member_id.clone(),
                    epoch: -1,
                    owned: self.owned.clone(),
                },
                Action::Stop,
            ];
        }
        let mut out = self.fenced();
        self.phase = Phase::Fenced;
        out.push(Action::WaitForPoll);
        out
    }

    /// Revoke what we own (so the consumer can commit), then leave.
    fn close(&mut self) -> Vec<Action> {
        if matches!(self.phase, Phase::Closing | Phase::Leaving { .. }) {
            return Vec::new();
        }
        if self.owned.is_empty() {
            return self.leave(true);
        }
        self.phase = Phase::Closing;
        vec![Action::Revoke(self.owned.clone())]
    }
}

#[cfg(test)]
#[path = "kip848_member_tests.rs"]
mod tests;
