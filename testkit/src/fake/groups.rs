//! Classic consumer groups (the JoinGroup/SyncGroup protocol, KIP-62
//! session timeouts, KIP-345 static members, KIP-394 member ids) and their
//! committed offsets, as a state machine over explicit time.
//!
//! A group moves Empty -> PreparingRebalance -> CompletingRebalance ->
//! Stable. A rebalance completes when every known member has rejoined, or
//! at the rebalance deadline, which drops the members that did not.

use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;

use kafka_protocol::messages::join_group_response::JoinGroupResponseMember;
use kafka_protocol::messages::JoinGroupResponse;

use super::consumer_groups::ConsumerGroup;
use super::errors::Code;
use super::state::Ticket;
use super::streams_groups::StreamsGroup;
use super::wire::FakeResponse;

/// The lifecycle of a classic group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GroupPhase {
    /// No members.
    Empty,
    /// Waiting for members to (re)join.
    PreparingRebalance,
    /// Joined; waiting for the leader's assignment.
    CompletingRebalance,
    /// Every member has its assignment.
    Stable,
}

impl GroupPhase {
    /// The state name DescribeGroups and ListGroups use.
    pub fn name(self) -> &'static str {
        match self {
            GroupPhase::Empty => "Empty",
            GroupPhase::PreparingRebalance => "PreparingRebalance",
            GroupPhase::CompletingRebalance => "CompletingRebalance",
            GroupPhase::Stable => "Stable",
        }
    }
}

/// A member of a classic group.
#[derive(Debug, Clone)]
pub struct Member {
    /// Its id.
    pub id: String,
    /// Its static instance id (KIP-345).
    pub instance_id: Option<String>,
    /// Its client id.
    pub client_id: String,
    /// Session timeout.
    pub session_timeout_ms: i64,
    /// Rebalance timeout.
    pub rebalance_timeout_ms: i64,
    /// `(protocol name, metadata)` in preference order.
    pub protocols: Vec<(String, Bytes)>,
    /// Its assignment from the last SyncGroup.
    pub assignment: Bytes,
    last_seen_ms: i64,
    /// A JoinGroup waiting for the rebalance.
    join: Option<Ticket>,
    /// A SyncGroup waiting for the leader.
    sync: Option<Ticket>,
}

/// A committed offset.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Committed {
    /// The offset.
    pub offset: i64,
    /// Leader epoch of the record before it (-1: unknown).
    pub leader_epoch: i32,
    /// Client metadata.
    pub metadata: Option<String>,
}

/// A classic group.
#[derive(Debug, Clone)]
pub struct Group {
    /// Its phase.
    pub phase: GroupPhase,
    /// Current generation.
    pub generation: i32,
    /// `consumer` for consumer groups.
    pub protocol_type: Option<String>,
    /// The chosen assignor.
    pub protocol: Option<String>,
    /// The leader's member id.
    pub leader: Option<String>,
    /// Members by id.
    pub members: BTreeMap<String, Member>,
    /// Committed offsets by topic-partition.
    pub offsets: BTreeMap<(String, i32), Committed>,
    /// Member ids handed out with MEMBER_ID_REQUIRED, not joined yet.
    pending: BTreeSet<String>,
    /// When a rebalance gives up on members that have not rejoined.
    rebalance_deadline_ms: i64,
    /// A new group's first rebalance waits until then for more members
    /// (`group.initial.rebalance.delay.ms`).
    join_not_before_ms: i64,
}

impl Group {
    fn new() -> Group {
        Group {
            phase: GroupPhase::Empty,
            generation: 0,
            protocol_type: None,
            protocol: None,
            leader: None,
            members: BTreeMap::new(),
            offsets: BTreeMap::new(),
            pending: BTreeSet::new(),
            rebalance_deadline_ms: 0,
            join_not_before_ms: 0,
        }
    }
}

/// What a JoinGroup carries, decoded from any version.
#[derive(Debug, Clone)]
pub struct JoinArgs {
    /// The group.
    pub group: String,
    /// Member id (empty for a new member).
    pub member_id: String,
    /// Static instance id.
    pub instance_id: Option<String>,
    /// Client id.
    pub client_id: String,
    /// Protocol type.
    pub protocol_type: String,
    /// Session timeout.
    pub session_timeout_ms: i64,
    /// Rebalance timeout (the session timeout before v1).
    pub rebalance_timeout_ms: i64,
    /// Offered protocols.
    pub protocols: Vec<(String, Bytes)>,
    /// Request version (v4+ asks new members to rejoin with an id).
    pub version: i16,
}

/// Every group, plus the answers of deferred requests.
#[derive(Debug, Default)]
pub struct Groups {
    /// Groups by id.
    pub groups: BTreeMap<String, Group>,
    completed: Vec<(Ticket, FakeResponse)>,
    next_ticket: Ticket,
    next_member: u64,
    /// `group.initial.rebalance.delay.ms`.
    pub initial_delay_ms: i64,
    /// KIP-848 groups by id (their offsets live in `groups`).
    pub consumer: BTreeMap<String, ConsumerGroup>,
    /// Streams groups (KIP-1071) by id (their offsets live in `groups`).
    pub streams: BTreeMap<String, StreamsGroup>,
}

/// How a JoinGroup was answered.
#[derive(Debug, Clone, PartialEq)]
pub enum JoinOutcome {
    /// Answered at once.
    Now(kafka_protocol::messages::JoinGroupResponse),
    /// Parked until the rebalance completes.
    Later(Ticket),
}

impl Groups {
    fn ticket(&mut self) -> Ticket {
        self.next_ticket += 1;
        self.next_ticket
    }

    /// Answers of deferred joins and syncs that completed.
    pub fn take_completed(&mut self) -> Vec<(Ticket, FakeResponse)> {
        std::mem::take(&mut self.completed)
    }

    /// A JoinGroup.
    pub fn join(&mut self, args: JoinArgs, now_ms: i64) -> JoinOutcome {
        let error = |code: Code, member: &str| {
            JoinOutcome::Now(
                JoinGroupResponse::default()
                    .with_error_code(code.value())
                    .with_generation_id(-1)
                    .with_member_id(member.to_string().into()),
            )
        };
        if args.session_timeout_ms < 1 || args.session_timeout_ms > 1_800_000 {
            return error(Code::InvalidSessionTimeout, &args.member_id);
        }
        if args.protocols.is_empty() || args.protocol_type.is_empty() {
            return error(Code::InconsistentGroupProtocol, &args.member_id);
        }
        self.next_member += 1;
        let fresh_id = format!("{}-{}", client_or(&args.client_id), self.next_member);
        let initial_delay = self.initial_delay_ms;
        let ticket = self.ticket();
        let group = self
            .groups
            .entry(args.group.clone())
            .or_insert_with(Group::new);
        if let Some(t) = &group.protocol_type {
            if !group.members.is_empty() && *t != args.protocol_type {
                return error(Code::InconsistentGroupProtocol, &args.member_id);
            }
        }
        if !group.members.is_empty()
            && !args.protocols.iter().any(|(name, _)| {
                group
                    .members
                    .values()
                    .all(|m| m.protocols.iter().any(|(n, _)| n == name))
            })
        {
            return error(Code::InconsistentGroupProtocol, &args.member_id);
        }
        // Static members keep their slot across restarts, under a new id.
        let static_prev = args.instance_id.as_ref().and_then(|iid| {
            group
                .members
                .values()
                .find(|m| m.instance_id.as_ref() == Some(iid))
                .map(|m| m.id.clone())
        });
        let member_id = if args.member_id.is_empty() {
            if args.instance_id.is_none() && args.version >= 4 {
                // KIP-394: hand out an id; the member rejoins with it.
                group.pending.insert(fresh_id.clone());
                return error(Code::MemberIdRequired, &fresh_id);
            }
            fresh_id
        } else {
            let known = group.members.contains_key(&args.member_id)
                || group.pending.remove(&args.member_id)
                || static_prev.is_some();
            if !known {
                return error(Code::UnknownMemberId, &args.member_id);
            }
            args.member_id.clone()
        };
        let mut replaced = None;
        if let Some(prev) = static_prev.filter(|p| *p != member_id) {
            if let Some(mut old) = group.members.remove(&prev) {
                if let Some(t) = old.join.take() {
                    self.completed
                        .push((t, join_error(Code::FencedInstanceId, &prev)));
                }
                if group.leader.as_deref() == Some(prev.as_str()) {
                    group.leader = Some(member_id.clone());
                }
                replaced = Some(old);
            }
        }
        // KIP-345: a static member coming back to a stable group that still
        // speaks the group's protocol takes its old slot and assignment; no
        // rebalance (the leader is told to skip assigning).
        let keeps_protocol = group
            .protocol
            .as_ref()
            .is_some_and(|p| args.protocols.iter().any(|(n, _)| n == p));
        if let Some(old) = replaced.filter(|_| group.phase == GroupPhase::Stable && keeps_protocol)
        {
            let member = Member {
                id: member_id.clone(),
                protocols: args.protocols.clone(),
                last_seen_ms: now_ms,
                join: None,
                sync: None,
                client_id: args.client_id.clone(),
                ..old
            };
            group.members.insert(member_id.clone(), member);
            let is_leader = group.leader.as_deref() == Some(member_id.as_str());
            let members = if is_leader {
                member_list(group)
            } else {
                Vec::new()
            };
            return JoinOutcome::Now(
                JoinGroupResponse::default()
                    .with_generation_id(group.generation)
                    .with_protocol_type(group.protocol_type.clone().map(Into::into))
                    .with_protocol_name(group.protocol.clone().map(Into::into))
                    .with_leader(group.leader.clone().unwrap_or_default().into())
                    .with_skip_assignment(is_leader)
                    .with_member_id(member_id.into())
                    .with_members(members),
            );
        }
        let member = group
            .members
            .entry(member_id.clone())
            .or_insert_with(|| Member {
                id: member_id.clone(),
                instance_id: args.instance_id.clone(),
                client_id: args.client_id.clone(),
                session_timeout_ms: args.session_timeout_ms,
                rebalance_timeout_ms: args.rebalance_timeout_ms,
                protocols: Vec::new(),
                assignment: Bytes::new(),
                last_seen_ms: now_ms,
                join: None,
                sync: None,
            });
        member.protocols = args.protocols;
        member.session_timeout_ms = args.session_timeout_ms;
        member.rebalance_timeout_ms = args.rebalance_timeout_ms;
        member.last_seen_ms = now_ms;
        if let Some(old) = member.join.replace(ticket) {
            self.completed
                .push((old, join_error(Code::RebalanceInProgress, &member_id)));
        }
        group.protocol_type = Some(args.protocol_type);
        match group.phase {
            GroupPhase::Empty => {
                group.phase = GroupPhase::PreparingRebalance;
                group.join_not_before_ms = now_ms + initial_delay;
                group.rebalance_deadline_ms = now_ms + initial_delay.max(args.rebalance_timeout_ms);
            }
            GroupPhase::Stable | GroupPhase::CompletingRebalance => {
                start_rebalance(group, now_ms, &mut self.completed);
            }
            GroupPhase::PreparingRebalance => {}
        }
        let group_id = args.group;
        self.try_complete_join(&group_id, now_ms, false);
        JoinOutcome::Later(ticket)
    }

    /// Completes the join phase if every member rejoined (or `forced` at the
    /// deadline, dropping the others).
    fn try_complete_join(&mut self, group_id: &str, now_ms: i64, forced: bool) {
        let Some(group) = self.groups.get_mut(group_id) else {
            return;
        };
        if group.phase != GroupPhase::PreparingRebalance {
            return;
        }
        let all_joined = group.members.values().all(|m| m.join.is_some());
        if !(forced || (all_joined && now_ms >= group.join_not_before_ms)) {
            return;
        }
        group.members.retain(|_, m| m.join.is_some());
        if group.members.is_empty() {
            group.phase = GroupPhase::Empty;
            group.generation += 1;
            group.leader = None;
            group.protocol = None;
            return;
        }
        group.generation += 1;
        if !group
            .leader
            .as_ref()
            .is_some_and(|l| group.members.contains_key(l))
        {
            group.leader = group.members.keys().next().cloned();
        }
        let protocol = choose_protocol(group);
        group.protocol = protocol.clone();
        group.phase = GroupPhase::CompletingRebalance;
        let leader = group.leader.clone().unwrap_or_default();
        let all = member_list(group);
        for m in group.members.values_mut() {
            m.last_seen_ms = now_ms;
            let Some(ticket) = m.join.take() else {
                continue;
            };
            let members = if m.id == leader {
                all.clone()
            } else {
                Vec::new()
            };
            let response = kafka_protocol::messages::JoinGroupResponse::default()
                .with_generation_id(group.generation)
                .with_protocol_type(group.protocol_type.clone().map(Into::into))
                .with_protocol_name(protocol.clone().map(Into::into))
                .with_leader(leader.clone().into())
                .with_member_id(m.id.clone().into())
                .with_members(members);
            self.completed
                .push((ticket, FakeResponse::JoinGroup(response)));
        }
    }

    /// A SyncGroup: the leader's assignment completes the rebalance.
    pub fn sync(
        &mut self,
        group_id: &str,
        member_id: &str,
        generation: i32,
        assignments: Vec<(String, Bytes)>,
        now_ms: i64,
    ) -> Result<Option<Ticket>, Code> {
        let ticket = self.ticket();
        let group = self.groups.get_mut(group_id).ok_or(Code::UnknownMemberId)?;
        let Some(member) = group.members.get_mut(member_id) else {
            return Err(Code::UnknownMemberId);
        };
        if generation != group.generation {
            return Err(Code::IllegalGeneration);
        }
        member.last_seen_ms = now_ms;
        match group.phase {
            GroupPhase::Empty | GroupPhase::PreparingRebalance => Err(Code::RebalanceInProgress),
            GroupPhase::Stable => {
                let assignment = member.assignment.clone();
                self.completed.push((ticket, sync_ok(group, assignment)));
                Ok(Some(ticket))
            }
            GroupPhase::CompletingRebalance => {
                member.sync = Some(ticket);
                if group.leader.as_deref() == Some(member_id) {
                    for m in group.members.values_mut() {
                        m.assignment = Bytes::new();
                    }
                    for (id, bytes) in assignments {
                        if let Some(m) = group.members.get_mut(&id) {
                            m.assignment = bytes;
                        }
                    }
                    group.phase = GroupPhase::Stable;
                    let waiting: Vec<(Ticket, Bytes)> = group
                        .members
                        .values_mut()
                        .filter_map(|m| m.sync.take().map(|t| (t, m.assignment.clone())))
                        .collect();
                    for (t, a) in waiting {
                        self.completed.push((t, sync_ok(group, a)));
                    }
                }
                Ok(Some(ticket))
            }
        }
    }

    /// A Heartbeat.
    pub fn heartbeat(
        &mut self,
        group_id: &str,
        member_id: &str,
        generation: i32,
        now_ms: i64,
    ) -> Code {
        let Some(group) = self.groups.get_mut(group_id) else {
            return Code::UnknownMemberId;
        };
        let Some(member) = group.members.get_mut(member_id) else {
            return Code::UnknownMemberId;
        };
        member.last_seen_ms = now_ms;
        if group.phase == GroupPhase::PreparingRebalance {
            return Code::RebalanceInProgress;
        }
        if generation != group.generation {
            return Code::IllegalGeneration;
        }
        Code::None
    }

    /// A member leaves; the others rebalance.
    pub fn leave(
        &mut self,
        group_id: &str,
        member_id: &str,
        instance_id: Option<&str>,
        now_ms: i64,
    ) -> Code {
        let Some(group) = self.groups.get_mut(group_id) else {
            return Code::UnknownMemberId;
        };
        let id = if member_id.is_empty() {
            instance_id.and_then(|iid| {
                group
                    .members
                    .values()
                    .find(|m| m.instance_id.as_deref() == Some(iid))
                    .map(|m| m.id.clone())
            })
        } else {
            Some(member_id.to_string())
        };
        let Some(member) = id.and_then(|id| group.members.remove(&id)) else {
            return Code::UnknownMemberId;
        };
        if let Some(t) = member.join {
            self.completed
                .push((t, join_error(Code::UnknownMemberId, &member.id)));
        }
        if let Some(t) = member.sync {
            self.completed.push((
                t,
                FakeResponse::SyncGroup(
                    kafka_protocol::messages::SyncGroupResponse::default()
                        .with_error_code(Code::UnknownMemberId.value()),
                ),
            ));
        }
        if group.members.is_empty() {
            group.phase = GroupPhase::Empty;
            group.leader = None;
            group.generation += 1;
        } else {
            start_rebalance(group, now_ms, &mut self.completed);
            let gid = group_id.to_string();
            self.try_complete_join(&gid, now_ms, false);
        }
        Code::None
    }

    /// Expires members past their session timeout and rebalances past
    /// their deadline. Runs every tick over every group the cluster ever
    /// had, so it touches (and copies the id of) only the groups with
    /// something to do: a rebalance under way or a member past its session.
    pub fn tick(&mut self, now_ms: i64) {
        let ids: Vec<String> = self
            .groups
            .iter()
            .filter(|(_, g)| {
                g.phase == GroupPhase::PreparingRebalance
                    || g.members.values().any(|m| is_expired(m, now_ms))
            })
            .map(|(id, _)| id.clone())
            .collect();
        for id in ids {
            let Some(group) = self.groups.get_mut(&id) else {
                continue;
            };
            let expired: Vec<String> = group
                .members
                .values()
                .filter(|m| is_expired(m, now_ms))
                .map(|m| m.id.clone())
                .collect();
            for m in expired {
                self.leave(&id, &m, None, now_ms);
            }
            let due = self.groups.get(&id).is_some_and(|g| {
                g.phase == GroupPhase::PreparingRebalance && now_ms >= g.rebalance_deadline_ms
            });
            self.try_complete_join(&id, now_ms, due);
        }
    }

    /// Whether `member_id` of `generation` may commit to `group_id`
    /// (generation -1: a commit from outside any group).
    pub fn check_commit(&self, group_id: &str, member_id: &str, generation: i32) -> Code {
        if let Some(g) = self.streams.get(group_id) {
            if !g.members.is_empty() || !member_id.is_empty() {
                return g.check_commit(member_id, generation);
            }
        }
        if let Some(g) = self.consumer.get(group_id) {
            if !g.members.is_empty() || !member_id.is_empty() {
                return g.check_commit(member_id, generation);
            }
        }
        if generation < 0 {
            return match self.groups.get(group_id) {
                Some(g) if !g.members.is_empty() => Code::UnknownMemberId,
                _ => Code::None,
            };
        }
        let Some(group) = self.groups.get(group_id) else {
            return Code::IllegalGeneration;
        };
        if !group.members.contains_key(member_id) {
            return Code::UnknownMemberId;
        }
        if group.generation != generation {
            return Code::IllegalGeneration;
        }
        // Members commit what they processed while the group prepares a
        // rebalance (commit on revoke); between join and sync they may not.
        if group.phase == GroupPhase::CompletingRebalance {
            return Code::RebalanceInProgress;
        }
        Code::None
    }

    /// Stores a committed offset.
    pub fn commit(&mut self, group_id: &str, topic: &str, partition: i32, committed: Committed) {
        self.groups
            .entry(group_id.to_string())
            .or_insert_with(Group::new)
            .offsets
            .insert((topic.to_string(), partition), committed);
    }

    /// A committed offset, if any.
    pub fn committed(&self, group_id: &str, topic: &str, partition: i32) -> Option<&Committed> {
        self.groups
            .get(group_id)?
            .offsets
            .get(&(topic.to_string(), partition))
    }
}

/// Whether `m` has been silent past its session timeout (a member waiting
/// in a join is not: its JoinGroup is its sign of life).
fn is_expired(m: &Member, now_ms: i64) -> bool {
    m.join.is_none() && now_ms - m.last_seen_ms > m.session_timeout_ms
}

/// Moves a formed group back to PreparingRebalance: waiting syncs fail with
/// REBALANCE_IN_PROGRESS; the deadline is the longest rebalance timeout.
fn start_rebalance(group: &mut Group, now_ms: i64, completed: &mut Vec<(Ticket, FakeResponse)>) {
    for m in group.members.values_mut() {
        if let Some(t) = m.sync.take() {
            completed.push((
                t,
                FakeResponse::SyncGroup(
                    kafka_protocol::messages::SyncGroupResponse::default()
                        .with_error_code(Code::RebalanceInProgress.value()),
                ),
            ));
        }
    }
    if group.phase != GroupPhase::PreparingRebalance {
        let timeout = group
            .members
            .values()
            .map(|m| m.rebalance_timeout_ms)
            .max()
            .unwrap_or(0);
        group.rebalance_deadline_ms = now_ms + timeout;
        group.phase = GroupPhase::PreparingRebalance;
    }
}

/// Every member with its metadata for the chosen protocol, as the leader
/// receives them.
fn member_list(group: &Group) -> Vec<JoinGroupResponseMember> {
    group
        .members
        .values()
        .map(|m| {
            let meta = m
                .protocols
                .iter()
                .find(|(n, _)| Some(n) == group.protocol.as_ref())
                .map(|(_, b)| b.clone())
                .unwrap_or_default();
            JoinGroupResponseMember::default()
                .with_member_id(m.id.clone().into())
                .with_group_instance_id(m.instance_id.clone().map(Into::into))
                .with_metadata(meta)
        })
        .collect()
}

/// The first protocol of the leader's list every member supports.
fn choose_protocol(group: &Group) -> Option<String> {
    let leader = group.leader.as_ref().and_then(|l| group.members.get(l))?;
    leader
        .protocols
        .iter()
        .map(|(n, _)| n)
        .find(|name| {
            group
                .members
                .values()
                .all(|m| m.protocols.iter().any(|(n, _)| n == *name))
        })
        .cloned()
}

fn sync_ok(group: &Group, assignment: Bytes) -> FakeResponse {
    FakeResponse::SyncGroup(
        kafka_protocol::messages::SyncGroupResponse::default()
            .with_protocol_type(group.protocol_type.clone().map(Into::into))
            .with_protocol_name(group.protocol.clone().map(Into::into))
            .with_assignment(assignment),
    )
}

fn join_error(code: Code, member_id: &str) -> FakeResponse {
    FakeResponse::JoinGroup(
        kafka_protocol::messages::JoinGroupResponse::default()
            .with_error_code(code.value())
            .with_generation_id(-1)
            .with_member_id(member_id.to_string().into()),
    )
}

fn client_or(client_id: &str) -> &str {
    if client_id.is_empty() {
        "member"
    } else {
        client_id
    }
}
