//! The KIP-1071 streams group member as a state machine: StreamsGroupHeartbeat
//! answers and the application's acknowledgements in; heartbeat requests and
//! task changes out. No sockets and no clock: a driver sends
//! [`StreamsMemberState::heartbeat_request`] when due and feeds the answer to
//! [`StreamsMemberState::on_heartbeat`].
//!
//! KIP-1071: the member joins with epoch 0 and its topology; the coordinator
//! answers with an epoch and, once it has assigned, the member's tasks
//! (active, standby, warm-up; each a subtopology id and partitions), or null
//! when they did not change. Active tasks no longer assigned are revoked
//! first (the application closes them and acknowledges), then the new ones
//! are added, and the next heartbeat reports what the member owns, which is
//! how the coordinator learns a revocation is done. FENCED_MEMBER_EPOCH and
//! UNKNOWN_MEMBER_ID lose every task and rejoin with epoch 0 and the
//! topology. Leaving sends epoch -1, or -2 for a static member.

use std::collections::BTreeSet;
use std::time::Duration;

use kafka_protocol::messages::streams_group_heartbeat_request::{
    self as wire_req, CopartitionGroup, KeyValue,
};
use kafka_protocol::messages::streams_group_heartbeat_response::TaskIds;
use kafka_protocol::messages::{
    GroupId, StreamsGroupHeartbeatRequest, StreamsGroupHeartbeatResponse, TopicName,
};
use kafka_protocol::protocol::StrBytes;

use crate::error::{Error, KafkaCode, Result};

const COORDINATOR_LOAD_IN_PROGRESS: i16 = 14;
const COORDINATOR_NOT_AVAILABLE: i16 = 15;
const NOT_COORDINATOR: i16 = 16;
const UNKNOWN_MEMBER_ID: i16 = 25;
const FENCED_MEMBER_EPOCH: i16 = 110;
/// The epoch a dynamic member leaves with.
pub const LEAVE_EPOCH: i32 = -1;
/// The epoch a static member leaves with (it may come back).
pub const LEAVE_STATIC_EPOCH: i32 = -2;

/// One task: a subtopology and one partition of its input topics.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TaskId {
    /// The subtopology id, as in the topology the member sent.
    pub subtopology: String,
    /// The partition of the subtopology's input topics.
    pub partition: i32,
}

impl TaskId {
    /// The task for `partition` of `subtopology`.
    pub fn new(subtopology: impl Into<String>, partition: i32) -> TaskId {
        TaskId {
            subtopology: subtopology.into(),
            partition,
        }
    }
}

impl std::fmt::Display for TaskId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}_{}", self.subtopology, self.partition)
    }
}

/// The tasks assigned to a member.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TaskAssignment {
    /// Tasks this member processes.
    pub active: BTreeSet<TaskId>,
    /// Tasks this member keeps a replica of the state for.
    pub standby: BTreeSet<TaskId>,
    /// Standby tasks catching up before they become active elsewhere.
    pub warmup: BTreeSet<TaskId>,
}

/// One subtopology of the topology a member sends when it joins.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Subtopology {
    /// Unique, deterministic id (Kafka Streams uses `"0"`, `"1"`, ...).
    pub id: String,
    /// The topics it reads.
    pub source_topics: Vec<String>,
    /// Repartition topics it writes to.
    pub repartition_sink_topics: Vec<String>,
    /// Changelog topics of its state stores; the coordinator creates them
    /// with as many partitions as the subtopology has tasks.
    pub state_changelog_topics: Vec<String>,
    /// Repartition topics it reads, with their partition count (0: the
    /// coordinator derives it); the coordinator creates them.
    pub repartition_source_topics: Vec<(String, i32)>,
}

/// The topology a streams application sends when it joins.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StreamsTopology {
    /// Bumped when the application's topology changes.
    pub epoch: i32,
    /// The subtopologies.
    pub subtopologies: Vec<Subtopology>,
}

impl StreamsTopology {
    fn to_wire(&self) -> wire_req::Topology {
        let names = |ts: &[String]| ts.iter().map(|t| TopicName(s(t))).collect::<Vec<_>>();
        let info = |name: &str, partitions: i32| {
            wire_req::TopicInfo::default()
                .with_name(TopicName(s(name)))
                .with_partitions(partitions)
                .with_topic_configs(Vec::<KeyValue>::new())
        };
        wire_req::Topology::default()
            .with_epoch(self.epoch)
            .with_subtopologies(
                self.subtopologies
                    .iter()
                    .map(|st| {
                        wire_req::Subtopology::default()
                            .with_subtopology_id(s(&st.id))
                            .with_source_topics(names(&st.source_topics))
                            .with_repartition_sink_topics(names(&st.repartition_sink_topics))
                            .with_state_changelog_topics(
                                st.state_changelog_topics
                                    .iter()
                                    .map(|t| info(t, 0))
                                    .collect(),
                            )
                            .with_repartition_source_topics(
                                st.repartition_source_topics
                                    .iter()
                                    .map(|(t, p)| info(t, *p))
                                    .collect(),
                            )
                            .with_copartition_groups(Vec::<CopartitionGroup>::new())
                    })
                    .collect(),
            )
    }
}

/// What the application must do after an answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TaskChange {
    /// Close these active tasks (commit their progress), then call
    /// [`StreamsMemberState::revoke_done`].
    Revoke(BTreeSet<TaskId>),
    /// Start processing these active tasks.
    Assign(BTreeSet<TaskId>),
    /// These tasks are no longer ours and were not handed over (fenced or
    /// unknown member): drop them without committing.
    Lose(BTreeSet<TaskId>),
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Phase {
    /// Not in the group: the next heartbeat joins (epoch 0, topology).
    Joining,
    Member,
    /// Waiting for the application to close revoked tasks; then `target`.
    Revoking {
        target: TaskAssignment,
    },
    /// The next heartbeat leaves.
    Leaving,
    Left,
}

/// The member's protocol state.
#[derive(Debug)]
pub struct StreamsMemberState {
    group_id: String,
    member_id: String,
    instance_id: Option<String>,
    process_id: String,
    rebalance_timeout_ms: i32,
    topology: StreamsTopology,
    epoch: i32,
    phase: Phase,
    owned: TaskAssignment,
    /// What the last heartbeat reported; owned tasks are sent only when they
    /// changed since (null otherwise, as KIP-1071 asks).
    reported: Option<TaskAssignment>,
    heartbeat_interval: Duration,
    statuses: Vec<(i8, String)>,
    /// `client.rack`, sent when joining (for rack-aware assignment).
    rack_id: Option<String>,
}

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_owned())
}

fn tasks(ids: &[TaskIds]) -> BTreeSet<TaskId> {
    ids.iter()
        .flat_map(|t| {
            t.partitions
                .iter()
                .map(|p| TaskId::new(t.subtopology_id.as_str(), *p))
        })
        .collect()
}

fn task_ids(set: &BTreeSet<TaskId>) -> Vec<wire_req::TaskIds> {
    let mut out: Vec<wire_req::TaskIds> = Vec::new();
    for t in set {
        match out.last_mut() {
            Some(last) if last.subtopology_id.as_str() == t.subtopology => {
                last.partitions.push(t.partition)
            }
            _ => out.push(
                wire_req::TaskIds::default()
                    .with_subtopology_id(s(&t.subtopology))
                    .with_partitions(vec![t.partition]),
            ),
        }
    }
    out
}

impl StreamsMemberState {
    /// A member of `group_id` about to join with `topology`.
    /// `member_id` is generated by the client and kept for its lifetime;
    /// `process_id` identifies the application instance.
    pub fn new(
        group_id: &str,
        member_id: &str,
        process_id: &str,
        instance_id: Option<String>,
        rebalance_timeout: Duration,
        topology: StreamsTopology,
    ) -> StreamsMemberState {
        StreamsMemberState {
            group_id: group_id.to_owned(),
            member_id: member_id.to_owned(),
            instance_id,
            process_id: process_id.to_owned(),
            rebalance_timeout_ms: i32::try_from(rebalance_timeout.as_millis()).unwrap_or(i32::MAX),
            topology,
            epoch: 0,
            phase: Phase::Joining,
            owned: TaskAssignment::default(),
            reported: None,
            heartbeat_interval: Duration::from_secs(5),
            statuses: Vec::new(),
            rack_id: None,
        }
    }

    /// Sends `rack` (`client.rack`) when joining; KIP-1071 sends it only
    /// when it changed, and it does not change for a member's lifetime.
    pub fn with_rack(mut self, rack: Option<String>) -> StreamsMemberState {
        self.rack_id = rack.filter(|r| !r.is_empty());
        self
    }

    /// The member id.
    pub fn member_id(&self) -> &str {
        &self.member_id
    }

    /// The current member epoch (0 before joining).
    pub fn epoch(&self) -> i32 {
        self.epoch
    }

    /// The tasks the member owns now.
    pub fn owned(&self) -> &TaskAssignment {
        &self.owned
    }

    /// The tasks the member is heading for: the pending target while
    /// revoked tasks await [`revoke_done`](Self::revoke_done), else what it
    /// owns. A runtime keeping standby state reads the standby and
    /// warm-up tasks here before the revocation completes, so an active
    /// task that becomes a standby keeps its store.
    pub fn target(&self) -> &TaskAssignment {
        match &self.phase {
            Phase::Revoking { target } => target,
            _ => &self.owned,
        }
    }

    /// The interval the coordinator asked for.
    pub fn heartbeat_interval(&self) -> Duration {
        self.heartbeat_interval
    }

    /// The group statuses of the last answer that carried them (code and
    /// detail, e.g. `1` MISSING_SOURCE_TOPICS).
    pub fn statuses(&self) -> &[(i8, String)] {
        &self.statuses
    }

    /// True once the leave heartbeat was answered.
    pub fn has_left(&self) -> bool {
        self.phase == Phase::Left
    }

    /// True while revoked tasks await [`StreamsMemberState::revoke_done`].
    pub fn is_revoking(&self) -> bool {
        matches!(self.phase, Phase::Revoking { .. })
    }

    /// The next StreamsGroupHeartbeat: a join (epoch 0 and the topology),
    /// a leave (epoch -1, or -2 for a static member), or a heartbeat with
    /// the owned tasks when they changed since the last one.
    pub fn heartbeat_request(&mut self) -> StreamsGroupHeartbeatRequest {
        let req = StreamsGroupHeartbeatRequest::default()
            .with_group_id(GroupId(s(&self.group_id)))
            .with_member_id(s(&self.member_id))
            .with_instance_id(self.instance_id.as_deref().map(s));
        match self.phase {
            Phase::Leaving | Phase::Left => {
                let epoch = if self.instance_id.is_some() {
                    LEAVE_STATIC_EPOCH
                } else {
                    LEAVE_EPOCH
                };
                req.with_member_epoch(epoch)
            }
            Phase::Joining => {
                self.reported = Some(self.owned.clone());
                req.with_member_epoch(0)
                    .with_rebalance_timeout_ms(self.rebalance_timeout_ms)
                    .with_process_id(Some(s(&self.process_id)))
                    .with_rack_id(self.rack_id.as_deref().map(s))
                    .with_topology(Some(self.topology.to_wire()))
                    .with_client_tags(Some(Vec::new()))
                    .with_active_tasks(Some(task_ids(&self.owned.active)))
                    .with_standby_tasks(Some(task_ids(&self.owned.standby)))
                    .with_warmup_tasks(Some(task_ids(&self.owned.warmup)))
            }
            Phase::Member | Phase::Revoking { .. } => {
                let req = req.with_member_epoch(self.epoch);
                if self.reported.as_ref() == Some(&self.owned) {
                    return req;
                }
                self.reported = Some(self.owned.clone());
                req.with_active_tasks(Some(task_ids(&self.owned.active)))
                    .with_standby_tasks(Some(task_ids(&self.owned.standby)))
                    .with_warmup_tasks(Some(task_ids(&self.owned.warmup)))
            }
        }
    }

    /// Leave: the next heartbeat carries the leave epoch. The application
    /// closes its tasks first; they are returned to be closed.
    pub fn leave(&mut self) -> BTreeSet<TaskId> {
        self.phase = Phase::Leaving;
        std::mem::take(&mut self.owned.active)
    }

    /// Joins again after leaving (e.g. once the application polls again
    /// after `max.poll.interval.ms` expired): the next heartbeat carries
    /// epoch 0 and the topology, and nothing is owned.
    pub fn rejoin(&mut self) {
        self.phase = Phase::Joining;
        self.epoch = 0;
        self.owned = TaskAssignment::default();
        self.reported = None;
    }

    /// Feeds an answer (or why none came); returns what the application
    /// must do, in order. A fatal error (invalid topology, authorization,
    /// ...) is returned as `Err`; retriable coordinator errors are `Err`
    /// too, and the driver rediscovers the coordinator and retries.
    pub fn on_heartbeat(
        &mut self,
        answer: Result<StreamsGroupHeartbeatResponse>,
    ) -> Result<Vec<TaskChange>> {
        let resp = match answer {
            Ok(r) => r,
            Err(e) => {
                // The request may not have arrived: report the owned tasks again.
                self.reported = None;
                return Err(e);
            }
        };
        if self.phase == Phase::Leaving {
            self.phase = Phase::Left;
            self.epoch = LEAVE_EPOCH;
            return match resp.error_code {
                0 | UNKNOWN_MEMBER_ID | FENCED_MEMBER_EPOCH => Ok(Vec::new()),
                code => Err(self.error(code, &resp)),
            };
        }
        match resp.error_code {
            0 => {}
            UNKNOWN_MEMBER_ID | FENCED_MEMBER_EPOCH => {
                let lost = std::mem::take(&mut self.owned.active);
                self.owned = TaskAssignment::default();
                self.epoch = 0;
                self.phase = Phase::Joining;
                self.reported = None;
                return Ok(if lost.is_empty() {
                    Vec::new()
                } else {
                    vec![TaskChange::Lose(lost)]
                });
            }
            code @ (COORDINATOR_LOAD_IN_PROGRESS | COORDINATOR_NOT_AVAILABLE | NOT_COORDINATOR) => {
                self.reported = None;
                return Err(self.error(code, &resp));
            }
            code => return Err(self.error(code, &resp)),
        }
        self.epoch = resp.member_epoch;
        if resp.heartbeat_interval_ms > 0 {
            self.heartbeat_interval = Duration::from_millis(resp.heartbeat_interval_ms as u64);
        }
        if let Some(st) = &resp.status {
            self.statuses = st
                .iter()
                .map(|x| (x.status_code, x.status_detail.to_string()))
                .collect();
        }
        if self.phase == Phase::Joining {
            self.phase = Phase::Member;
        }
        let target = match (&resp.active_tasks, &resp.standby_tasks, &resp.warmup_tasks) {
            (None, None, None) => return Ok(Vec::new()),
            (active, standby, warmup) => {
                let current = match &self.phase {
                    Phase::Revoking { target } => target.clone(),
                    _ => self.owned.clone(),
                };
                TaskAssignment {
                    active: active.as_deref().map(tasks).unwrap_or(current.active),
                    standby: standby.as_deref().map(tasks).unwrap_or(current.standby),
                    warmup: warmup.as_deref().map(tasks).unwrap_or(current.warmup),
                }
            }
        };
        Ok(self.reconcile(target))
    }

    fn reconcile(&mut self, target: TaskAssignment) -> Vec<TaskChange> {
        if let Phase::Revoking { target: pending } = &mut self.phase {
            // The revocation under way still holds; the newer target replaces
            // what follows it.
            let more: BTreeSet<TaskId> = self
                .owned
                .active
                .iter()
                .filter(|t| pending.active.contains(*t) && !target.active.contains(*t))
                .cloned()
                .collect();
            *pending = target;
            return if more.is_empty() {
                Vec::new()
            } else {
                vec![TaskChange::Revoke(more)]
            };
        }
        let revoked: BTreeSet<TaskId> = self
            .owned
            .active
            .difference(&target.active)
            .cloned()
            .collect();
        if revoked.is_empty() {
            return self.take(target);
        }
        self.phase = Phase::Revoking { target };
        vec![TaskChange::Revoke(revoked)]
    }

    /// The application closed the revoked tasks: they are given up, the
    /// pending target is taken, and the next heartbeat reports it.
    pub fn revoke_done(&mut self) -> Vec<TaskChange> {
        let Phase::Revoking { target } = std::mem::replace(&mut self.phase, Phase::Member) else {
            return Vec::new();
        };
        self.owned.active.retain(|t| target.active.contains(t));
        self.take(target)
    }

    fn take(&mut self, target: TaskAssignment) -> Vec<TaskChange> {
        let added: BTreeSet<TaskId> = target
            .active
            .difference(&self.owned.active)
            .cloned()
            .collect();
        self.owned = target;
        if added.is_empty() {
            Vec::new()
        } else {
            vec![TaskChange::Assign(added)]
        }
    }

    /// The answer's error, naming the API, the group, the member and its
    /// epoch; `KafkaCode::is_retriable` tells whether a retry can help.
    /// `code` is never 0 here (0 is success).
    fn error(&self, code: i16, resp: &StreamsGroupHeartbeatResponse) -> Error {
        let msg = resp.error_message.as_deref().unwrap_or("");
        Error::Kafka {
            code: KafkaCode::from_code(code).unwrap_or(KafkaCode::NOT_COORDINATOR),
            context: format!(
                "StreamsGroupHeartbeat{} for group {} member {} (epoch {})",
                if msg.is_empty() {
                    String::new()
                } else {
                    format!(" ({msg})")
                },
                self.group_id,
                self.member_id,
                self.epoch
            ),
        }
    }
}

#[cfg(test)]
#[path = "member_tests.rs"]
mod tests;
