//! The classic group member as a state machine: events in (JoinGroup,
//! SyncGroup, Heartbeat and LeaveGroup answers, timers, the application's
//! polls and acks), actions out (send a request, revoke or lose partitions,
//! publish the membership, wait). No sockets and no clock: the driver in
//! `classic` executes the actions and feeds back what happened.
//!
//! Protocol: <https://kafka.apache.org/protocol#The_Messages_JoinGroup>;
//! KIP-62 (heartbeats apart from polls, `max.poll.interval.ms`), KIP-345
//! (static membership), KIP-394 (MEMBER_ID_REQUIRED), KIP-429 (cooperative
//! rebalancing), KIP-814 (the leader's skipped assignment). Reactions follow
//! Java's `AbstractCoordinator`/`ConsumerCoordinator`:
//!
//! - REBALANCE_IN_PROGRESS: rejoin (at once after a stable period, with
//!   backoff when rebalances keep failing);
//! - UNKNOWN_MEMBER_ID (also what a member past `session.timeout.ms` gets):
//!   fenced, the partitions are lost, rejoin with no member id;
//!   ILLEGAL_GENERATION: the same, keeping the member id;
//! - NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE, lost connections: look the
//!   coordinator up again; a heartbeat keeps the membership meanwhile;
//! - FENCED_INSTANCE_ID (another static member took our
//!   `group.instance.id`), authorisation and protocol errors: fatal.
//!
//! Eager assignors revoke everything before JoinGroup; cooperative ones
//! (KIP-429) revoke only what SyncGroup took away, after it, and rejoin so
//! the freed partitions can move.

use std::collections::BTreeSet;

use kafka_protocol::messages::sync_group_request::SyncGroupRequestAssignment;
use kafka_protocol::messages::{
    HeartbeatResponse, JoinGroupResponse, LeaveGroupResponse, SyncGroupResponse,
};
use kafka_protocol::protocol::StrBytes;

use super::assignor::PartitionCounts;
use crate::error::{Error, KafkaCode, Result};
use crate::protocol::consumer_protocol as subscription;
use crate::TopicPartition;

const REBALANCE_IN_PROGRESS: i16 = 27;
const UNKNOWN_MEMBER_ID: i16 = 25;
const ILLEGAL_GENERATION: i16 = 22;
pub(super) const MEMBER_ID_REQUIRED: i16 = 79;
const COORDINATOR_LOAD_IN_PROGRESS: i16 = 14;

/// What happened, as the driver tells it.
#[derive(Debug)]
pub(crate) enum Event {
    /// Membership starts.
    Start,
    /// The application acknowledged the last [`Action::Revoke`] (or the
    /// rebalance timeout passed).
    RevokeDone,
    /// JoinGroup's answer (or why none came).
    Joined(Result<JoinGroupResponse>),
    /// The leader's assignment for [`Action::Lead`], with the partition
    /// counts it used.
    Led(Result<(Vec<SyncGroupRequestAssignment>, PartitionCounts)>),
    /// SyncGroup's answer.
    Synced(Result<SyncGroupResponse>),
    /// `heartbeat.interval.ms` passed; `counts` are the partition counts
    /// metadata now shows for [`ClassicMember::leader_topics`].
    HeartbeatDue { counts: PartitionCounts },
    /// Heartbeat's answer.
    Heartbeat(Result<HeartbeatResponse>),
    /// LeaveGroup's answer (best effort: any answer moves on).
    Left(Result<LeaveGroupResponse>),
    /// The application changed the subscription.
    SubscriptionChanged,
    /// An [`Action::Backoff`] elapsed.
    BackoffDone,
    /// `max.poll.interval.ms` passed without a poll (KIP-62).
    PollExpired,
    /// The application polled again after a poll expiry.
    Polled,
    /// The application closes the consumer.
    Close,
}

/// What the driver must do, in order.
#[derive(Debug)]
pub(crate) enum Action {
    /// Make this the membership commits and the consumer see.
    Publish {
        member_id: String,
        generation: i32,
        owned: BTreeSet<TopicPartition>,
    },
    /// Hand these back: fire the revocation callback and wait for its ack
    /// (bounded by the rebalance timeout), heartbeating meanwhile; then
    /// [`Event::RevokeDone`].
    Revoke(BTreeSet<TopicPartition>),
    /// These are gone without a hand-over (fenced, expired): fire the lost
    /// callback.
    Lose(BTreeSet<TopicPartition>),
    /// These are newly ours: fire the assignment callback.
    Assigned(Vec<TopicPartition>),
    /// Send JoinGroup with this identity and the partitions we still own
    /// (the subscription's metadata); then [`Event::Joined`].
    Join {
        member_id: String,
        generation: i32,
        owned: Vec<TopicPartition>,
    },
    /// As leader: run the assignor over the members of this JoinGroup
    /// answer; then [`Event::Led`].
    Lead(Box<JoinGroupResponse>),
    /// Send SyncGroup; then [`Event::Synced`].
    Sync {
        member_id: String,
        generation: i32,
        protocol: Option<StrBytes>,
        assignments: Vec<SyncGroupRequestAssignment>,
    },
    /// Wait for the next heartbeat (or a subscription change, a poll
    /// expiry, close).
    Wait,
    /// Send Heartbeat; then [`Event::Heartbeat`].
    Heartbeat { member_id: String, generation: i32 },
    /// Forget the coordinator: look it up again before the next request.
    Rediscover,
    /// Wait `attempt`'s backoff (`retry.backoff.ms` doubled per attempt,
    /// capped); then [`Event::BackoffDone`].
    Backoff { attempt: u32 },
    /// Send LeaveGroup; then [`Event::Left`].
    Leave { member_id: String, reason: String },
    /// Wait until the application polls again; then [`Event::Polled`].
    WaitForPoll,
    /// Membership failed for good: tell the consumer and stop.
    Fatal(Error),
    /// Membership is over.
    Stop,
}

/// Where the member stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Phase {
    /// Not in the group.
    Unjoined,
    /// Eager: revoking everything before JoinGroup.
    Rebalancing,
    /// JoinGroup sent; `id_rounds` MEMBER_ID_REQUIRED answers so far.
    Joining { id_rounds: u8 },
    /// The leader runs the assignor.
    Assigning,
    /// SyncGroup sent.
    Syncing,
    /// After SyncGroup: revoking what the new assignment took away.
    Revoking {
        assigned: BTreeSet<TopicPartition>,
        added: Vec<TopicPartition>,
        revoked: BTreeSet<TopicPartition>,
    },
    /// In the group: heartbeating (`in_flight` while one is out).
    Stable { in_flight: bool },
    /// Waiting before the next rebalance (`then_join`) or heartbeat.
    BackingOff { then_join: bool },
    /// LeaveGroup after a poll expiry.
    Leaving,
    /// Out of the group after a poll expiry, until the application polls.
    Fenced,
    /// Closing: revoking, then leaving.
    Closing { leaving: bool },
    /// Over.
    Closed,
}

/// How a failed step goes on.
#[derive(Debug)]
enum Next {
    Rejoin,
    Retry,
    Reset { forget_member_id: bool },
    Rediscover,
    Fatal(Error),
}

fn classify(e: Error) -> Next {
    match e.kafka_code().map(KafkaCode::code) {
        Some(REBALANCE_IN_PROGRESS) => Next::Rejoin,
        Some(UNKNOWN_MEMBER_ID) => Next::Reset {
            forget_member_id: true,
        },
        Some(ILLEGAL_GENERATION) => Next::Reset {
            forget_member_id: false,
        },
        Some(COORDINATOR_LOAD_IN_PROGRESS) => Next::Retry,
        _ if super::member::needs_rediscovery(&e) => Next::Rediscover,
        _ if e.is_retriable() => Next::Retry,
        _ => Next::Fatal(e),
    }
}

/// One classic member's protocol state.
#[derive(Debug)]
pub(crate) struct ClassicMember {
    group_id: String,
    /// `group.instance.id` (KIP-345): no LeaveGroup for static members.
    is_static: bool,
    cooperative: bool,
    phase: Phase,
    member_id: String,
    generation: i32,
    owned: BTreeSet<TopicPartition>,
    /// The protocol JoinGroup chose, for SyncGroup.
    protocol: Option<StrBytes>,
    /// As leader: the partition counts the assignment was computed from, 0
    /// for a subscribed topic metadata did not know; a change (partitions
    /// added, a topic created) triggers a rejoin, as in Java.
    assigned_counts: Option<PartitionCounts>,
    /// Failed rebalances in a row (0 after a stable period).
    attempt: u32,
    /// Failed heartbeats in a row.
    heartbeat_attempt: u32,
    /// The coordinator's label, for errors.
    coordinator: Option<String>,
}

impl ClassicMember {
    pub fn new(group_id: String, is_static: bool, cooperative: bool) -> ClassicMember {
        ClassicMember {
            group_id,
            is_static,
            cooperative,
            phase: Phase::Unjoined,
            member_id: String::new(),
            generation: -1,
            owned: BTreeSet::new(),
            protocol: None,
            assigned_counts: None,
            attempt: 0,
            heartbeat_attempt: 0,
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

    /// As leader, the topics whose partition counts the assignment used.
    pub fn leader_topics(&self) -> Vec<String> {
        self.assigned_counts
            .as_ref()
            .map(|c| c.keys().cloned().collect())
            .unwrap_or_default()
    }

    /// Whether a heartbeat may go out while a revocation waits (the
    /// identity of [`Action::Heartbeat`]).
    pub fn heartbeat_identity(&self) -> Option<(String, i32)> {
        (self.generation >= 0).then(|| (self.member_id.clone(), self.generation))
    }

    fn error(&self, code: KafkaCode, api: &str) -> Error {
        Error::Kafka {
            code,
            context: format!(
                "{api} for group {} member {} (generation {}) at coordinator {}",
                self.group_id,
                if self.member_id.is_empty() {
                    "<none>"
                } else {
                    &self.member_id
                },
                self.generation,
                self.coordinator.as_deref().unwrap_or("<unknown>"),
            ),
        }
    }

    fn check(&self, code: i16, api: &str) -> Result<()> {
        match KafkaCode::from_code(code) {
            None => Ok(()),
            Some(c) => Err(self.error(c, api)),
        }
    }

    fn publish(&self) -> Action {
        Action::Publish {
            member_id: self.member_id.clone(),
            generation: self.generation,
            owned: self.owned.clone(),
        }
    }

    /// Takes one event; returns what to do, in order.
    pub fn handle(&mut self, event: Event) -> Vec<Action> {
        if matches!(self.phase, Phase::Closed) {
            return vec![Action::Stop];
        }
        match event {
            Event::Start => self.rebalance(),
            Event::Close => self.close(),
            Event::RevokeDone => self.on_revoked(),
            Event::Joined(r) => self.on_joined(r),
            Event::Led(r) => self.on_led(r),
            Event::Synced(r) => self.on_synced(r),
            Event::HeartbeatDue { counts } => self.on_heartbeat_due(counts),
            Event::Heartbeat(r) => self.on_heartbeat(r),
            Event::Left(r) => self.on_left(r),
            Event::SubscriptionChanged => self.failed(Next::Rejoin),
            Event::BackoffDone => match self.phase {
                Phase::BackingOff { then_join: false } => {
                    self.phase = Phase::Stable { in_flight: false };
                    vec![Action::Wait]
                }
                _ => self.rebalance(),
            },
            Event::PollExpired => self.poll_expired(),
            Event::Polled => self.rebalance(),
        }
    }

    /// Starts a rebalance: eager protocols revoke everything first.
    fn rebalance(&mut self) -> Vec<Action> {
        if !self.cooperative && !self.owned.is_empty() {
            self.phase = Phase::Rebalancing;
            return vec![Action::Revoke(self.owned.clone())];
        }
        self.join()
    }

    fn join(&mut self) -> Vec<Action> {
        self.phase = Phase::Joining { id_rounds: 0 };
        vec![self.join_action()]
    }

    fn join_action(&self) -> Action {
        Action::Join {
            member_id: self.member_id.clone(),
            generation: self.generation,
            owned: self.owned.iter().cloned().collect(),
        }
    }

    fn on_revoked(&mut self) -> Vec<Action> {
        match std::mem::replace(&mut self.phase, Phase::Unjoined) {
            Phase::Rebalancing => {
                self.owned.clear();
                let mut out = vec![self.publish()];
                out.extend(self.join());
                out
            }
            Phase::Revoking {
                assigned,
                added,
                revoked,
            } => {
                self.owned = assigned;
                self.attempt = 0;
                let mut out = vec![self.publish(), Action::Assigned(added)];
                if self.cooperative && !revoked.is_empty() {
                    // KIP-429: rejoin so the freed partitions can move.
                    out.extend(self.rebalance());
                } else {
                    self.heartbeat_attempt = 0;
                    self.phase = Phase::Stable { in_flight: false };
                    out.push(Action::Wait);
                }
                out
            }
            Phase::Closing { .. } => {
                self.owned.clear();
                self.leave_on_close()
            }
            other => {
                self.phase = other;
                Vec::new()
            }
        }
    }

    fn on_joined(&mut self, r: Result<JoinGroupResponse>) -> Vec<Action> {
        let Phase::Joining { id_rounds } = self.phase else {
            return Vec::new();
        };
        let resp = match r {
            Ok(resp) => resp,
            Err(e) => return self.failed(classify(e)),
        };
        if resp.error_code == MEMBER_ID_REQUIRED {
            // KIP-394: join again with the id the coordinator gave, once.
            self.member_id = resp.member_id.as_str().to_owned();
            if id_rounds >= 1 {
                // Java rejoins whatever the round; a coordinator asking
                // twice in a row gets the rejoin with backoff.
                tracing::debug!(group = %self.group_id, "member id required twice; rejoining after a backoff");
                return self.failed(Next::Retry);
            }
            self.phase = Phase::Joining { id_rounds: 1 };
            return vec![self.join_action()];
        }
        if let Err(e) = self.check(resp.error_code, "JoinGroup") {
            return self.failed(classify(e));
        }
        self.member_id = resp.member_id.as_str().to_owned();
        self.generation = resp.generation_id;
        self.protocol = resp.protocol_name.clone();
        self.assigned_counts = None;
        let mut out = vec![self.publish()];
        if resp.leader == resp.member_id && !resp.skip_assignment {
            self.phase = Phase::Assigning;
            out.push(Action::Lead(Box::new(resp)));
        } else {
            out.push(self.sync(Vec::new()));
        }
        out
    }

    fn sync(&mut self, assignments: Vec<SyncGroupRequestAssignment>) -> Action {
        self.phase = Phase::Syncing;
        Action::Sync {
            member_id: self.member_id.clone(),
            generation: self.generation,
            protocol: self.protocol.clone(),
            assignments,
        }
    }

    fn on_led(
        &mut self,
        r: Result<(Vec<SyncGroupRequestAssignment>, PartitionCounts)>,
    ) -> Vec<Action> {
        if self.phase != Phase::Assigning {
            return Vec::new();
        }
        match r {
            Ok((assignments, counts)) => {
                self.assigned_counts = Some(counts);
                vec![self.sync(assignments)]
            }
            Err(e) => self.failed(classify(e)),
        }
    }

    fn on_synced(&mut self, r: Result<SyncGroupResponse>) -> Vec<Action> {
        if self.phase != Phase::Syncing {
            return Vec::new();
        }
        let assigned = r
            .and_then(|resp| {
                self.check(resp.error_code, "SyncGroup")?;
                subscription::decode_assignment(resp.assignment).map_err(|source| Error::Protocol {
                    broker: self
                        .coordinator
                        .clone()
                        .unwrap_or_else(|| "<unknown>".into())
                        .into(),
                    api: "SyncGroup assignment".into(),
                    source,
                })
            })
            .map(|parts| parts.into_iter().collect::<BTreeSet<_>>());
        let assigned = match assigned {
            Ok(a) => a,
            Err(e) => return self.failed(classify(e)),
        };
        let revoked: BTreeSet<TopicPartition> = self.owned.difference(&assigned).cloned().collect();
        let added: Vec<TopicPartition> = assigned.difference(&self.owned).cloned().collect();
        tracing::info!(
            group = %self.group_id,
            member = %self.member_id,
            generation = self.generation,
            assigned = assigned.len(),
            revoked = revoked.len(),
            "joined"
        );
        self.phase = Phase::Revoking {
            assigned,
            added,
            revoked: revoked.clone(),
        };
        if revoked.is_empty() {
            self.on_revoked()
        } else {
            vec![Action::Revoke(revoked)]
        }
    }

    fn on_heartbeat_due(&mut self, counts: PartitionCounts) -> Vec<Action> {
        if self.phase != (Phase::Stable { in_flight: false }) {
            return Vec::new();
        }
        if self.assigned_counts.as_ref().is_some_and(|c| *c != counts) {
            tracing::info!(group = %self.group_id, "subscribed topics' partitions changed; rebalancing");
            return self.failed(Next::Rejoin);
        }
        self.phase = Phase::Stable { in_flight: true };
        vec![Action::Heartbeat {
            member_id: self.member_id.clone(),
            generation: self.generation,
        }]
    }

    fn on_heartbeat(&mut self, r: Result<HeartbeatResponse>) -> Vec<Action> {
        if self.phase != (Phase::Stable { in_flight: true }) {
            return Vec::new();
        }
        match r.and_then(|resp| self.check(resp.error_code, "Heartbeat")) {
            Ok(()) => {
                self.heartbeat_attempt = 0;
                self.phase = Phase::Stable { in_flight: false };
                vec![Action::Wait]
            }
            Err(e) => match classify(e) {
                // The member may still be in the group: find the
                // coordinator and keep heartbeating.
                Next::Rediscover => {
                    let attempt = self.heartbeat_attempt;
                    self.heartbeat_attempt = attempt.saturating_add(1);
                    self.phase = Phase::BackingOff { then_join: false };
                    vec![Action::Rediscover, Action::Backoff { attempt }]
                }
                next => self.failed(next),
            },
        }
    }

    /// A step failed or the membership must rebalance.
    fn failed(&mut self, next: Next) -> Vec<Action> {
        match next {
            // At once after a stable period; with backoff when rebalances
            // keep failing (so a flapping group is never hammered).
            Next::Rejoin if self.attempt == 0 => {
                self.attempt = 1;
                self.rebalance()
            }
            Next::Rejoin | Next::Retry => self.backoff(Vec::new()),
            Next::Rediscover => self.backoff(vec![Action::Rediscover]),
            Next::Reset { forget_member_id } => {
                tracing::info!(group = %self.group_id, member = %self.member_id, "fenced; partitions lost, rejoining");
                let mut out = self.reset(forget_member_id);
                out.extend(self.rebalance());
                out
            }
            Next::Fatal(e) => {
                tracing::warn!(group = %self.group_id, error = %e, "membership failed");
                self.phase = Phase::Closed;
                vec![Action::Fatal(e)]
            }
        }
    }

    fn backoff(&mut self, mut out: Vec<Action>) -> Vec<Action> {
        let attempt = self.attempt;
        self.attempt = attempt.saturating_add(1);
        self.phase = Phase::BackingOff { then_join: true };
        out.push(Action::Backoff { attempt });
        out
    }

    /// Out of the group: forget the generation (and the member id), lose
    /// the partitions.
    fn reset(&mut self, forget_member_id: bool) -> Vec<Action> {
        self.generation = -1;
        if forget_member_id {
            self.member_id.clear();
        }
        let lost = std::mem::take(&mut self.owned);
        let mut out = vec![self.publish()];
        if !lost.is_empty() {
            out.push(Action::Lose(lost));
        }
        out
    }

    /// KIP-62: the application stopped polling; leave so the group moves
    /// on, and rejoin when it polls again.
    fn poll_expired(&mut self) -> Vec<Action> {
        tracing::warn!(
            group = %self.group_id,
            member = %self.member_id,
            "max.poll.interval.ms expired without a poll; leaving the group"
        );
        match self.leave_action("consumer poll timeout has expired") {
            Some(leave) => {
                self.phase = Phase::Leaving;
                vec![leave]
            }
            None => self.after_poll_leave(),
        }
    }

    fn after_poll_leave(&mut self) -> Vec<Action> {
        let mut out = self.reset(true);
        self.phase = Phase::Fenced;
        out.push(Action::WaitForPoll);
        out
    }

    /// LeaveGroup, for dynamic members only (KIP-345: a static member's
    /// absence is noticed by session timeout, so a quick restart costs no
    /// rebalance).
    fn leave_action(&self, reason: &str) -> Option<Action> {
        (!self.is_static && !self.member_id.is_empty()).then(|| Action::Leave {
            member_id: self.member_id.clone(),
            reason: reason.to_owned(),
        })
    }

    fn on_left(&mut self, r: Result<LeaveGroupResponse>) -> Vec<Action> {
        let code = r.map(|resp| {
            resp.members
                .iter()
                .map(|m| m.error_code)
                .find(|c| *c != 0)
                .unwrap_or(resp.error_code)
        });
        match code.and_then(|c| self.check(c, "LeaveGroup")) {
            Ok(()) => {}
            Err(e) => tracing::debug!(group = %self.group_id, error = %e, "LeaveGroup failed"),
        }
        match self.phase {
            Phase::Leaving => self.after_poll_leave(),
            Phase::Closing { leaving: true } => self.closed(),
            _ => Vec::new(),
        }
    }

    /// Java semantics: revoke what we own (so the consumer can commit), then
    /// leave (dynamic members only).
    fn close(&mut self) -> Vec<Action> {
        if matches!(self.phase, Phase::Closing { .. }) {
            return Vec::new();
        }
        self.phase = Phase::Closing { leaving: false };
        if self.owned.is_empty() {
            return self.leave_on_close();
        }
        vec![Action::Revoke(self.owned.clone())]
    }

    fn leave_on_close(&mut self) -> Vec<Action> {
        match self.leave_action("the consumer is being closed") {
            Some(leave) => {
                self.phase = Phase::Closing { leaving: true };
                vec![self.publish(), leave]
            }
            None => self.closed(),
        }
    }

    fn closed(&mut self) -> Vec<Action> {
        self.phase = Phase::Closed;
        vec![
            Action::Publish {
                member_id: String::new(),
                generation: -1,
                owned: BTreeSet::new(),
            },
            Action::Stop,
        ]
    }
}

#[cfg(test)]
#[path = "classic_member_tests.rs"]
mod tests;
