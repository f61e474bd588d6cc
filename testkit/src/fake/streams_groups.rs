//! Streams groups (KIP-1071, `group.protocol=streams`): the rules behind
//! StreamsGroupHeartbeat (API key 88) and StreamsGroupDescribe (89).
//!
//! The first member to join declares the topology; the coordinator
//! configures it against the cluster's topics: a subtopology has as many
//! tasks as its largest source (or repartition source) topic has
//! partitions; a missing source topic leaves the group `NotReady` with the
//! status MISSING_SOURCE_TOPICS; missing internal topics (changelogs with one
//! partition per task, repartition topics with the declared or derived
//! count) are returned for the cluster to create, with the status
//! MISSING_INTERNAL_TOPICS, and an existing one with the wrong partition
//! count gives INCORRECTLY_PARTITIONED_TOPICS. Active tasks are spread over
//! the members (uniform and sticky) and reconciled as KIP-848 partitions
//! are: a member first gives up what its new target takes away, a task is
//! handed over only once its owner reported it released, and a member's
//! epoch reaches the group epoch once nothing is left to revoke. A member
//! silent past the session timeout, or revoking for longer than its
//! rebalance timeout, is removed.
//!
//! Simplifications, stated: no standby or warm-up tasks (Kafka's default is
//! zero standby replicas), no rack- or process-aware placement, no source
//! topic regexes (Kafka 4.4 refuses them too), no copartition enforcement,
//! no topology updates (a higher topology epoch than the group's gets
//! STREAMS_INVALID_TOPOLOGY_EPOCH), and the member epoch must match exactly.

use std::collections::{BTreeMap, BTreeSet};

use kafka_protocol::messages::streams_group_describe_response as describe;
use kafka_protocol::messages::streams_group_heartbeat_request::{self as req_types, TopicInfo};
use kafka_protocol::messages::streams_group_heartbeat_response::{Status, TaskIds};
use kafka_protocol::messages::{
    GroupId, StreamsGroupHeartbeatRequest, StreamsGroupHeartbeatResponse,
};
use kafka_protocol::protocol::StrBytes;

use super::consumer_groups::TopicView;
use super::errors::Code;

/// `group.streams.session.timeout.ms` (Kafka's default).
pub const SESSION_TIMEOUT_MS: i64 = 45_000;
/// `group.streams.heartbeat.interval.ms` answered to members. Kafka's
/// default is 5 s; as for KIP-848 groups the fake answers 50 ms so that an
/// assignment settles in a few hundred ms.
pub const HEARTBEAT_INTERVAL_MS: i32 = 50;
/// `TaskOffsetIntervalMs` (Kafka's `group.streams.task.offset.interval.ms`).
const TASK_OFFSET_INTERVAL_MS: i32 = 60_000;
/// `AcceptableRecoveryLag` (Kafka Streams' `acceptable.recovery.lag`);
/// v0 carries it as `AcceptableRecoveryLagLegacy` ([`for_version`]).
pub const ACCEPTABLE_RECOVERY_LAG: i64 = 10_000;

/// KIP-1071 group statuses (`StreamsGroupHeartbeatResponse.Status`).
const STALE_TOPOLOGY: i8 = 0;
const MISSING_SOURCE_TOPICS: i8 = 1;
const INCORRECTLY_PARTITIONED_TOPICS: i8 = 2;
const MISSING_INTERNAL_TOPICS: i8 = 3;

/// STREAMS_INVALID_TOPOLOGY and STREAMS_INVALID_TOPOLOGY_EPOCH.
const STREAMS_INVALID_TOPOLOGY: i16 = 130;
const STREAMS_INVALID_TOPOLOGY_EPOCH: i16 = 131;

/// A task: subtopology id and partition.
pub type Task = (String, i32);

/// An internal topic a subtopology declares: name, partitions (0: derived),
/// replication factor (0: the cluster's default) and configs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct InternalTopic {
    /// Topic name.
    pub name: String,
    /// Declared partitions; 0 when the coordinator decides.
    pub partitions: i32,
    /// Declared replication factor; 0 for the default.
    pub replication_factor: i16,
    /// Topic configs to create it with.
    pub configs: BTreeMap<String, String>,
}

impl InternalTopic {
    fn from_wire(t: &TopicInfo) -> InternalTopic {
        InternalTopic {
            name: t.name.0.to_string(),
            partitions: t.partitions,
            replication_factor: t.replication_factor,
            configs: t
                .topic_configs
                .iter()
                .map(|kv| (kv.key.to_string(), kv.value.to_string()))
                .collect(),
        }
    }
}

/// One subtopology as the group stores it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StreamsSubtopology {
    /// Its id.
    pub id: String,
    /// Topics it reads.
    pub source_topics: Vec<String>,
    /// Repartition topics it writes.
    pub repartition_sink_topics: Vec<String>,
    /// Changelog topics of its stores.
    pub changelogs: Vec<InternalTopic>,
    /// Repartition topics it reads.
    pub repartition_sources: Vec<InternalTopic>,
}

/// The topology the group was initialized with.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StreamsTopology {
    /// Topology epoch.
    pub epoch: i32,
    /// Subtopologies by id.
    pub subtopologies: BTreeMap<String, StreamsSubtopology>,
}

impl StreamsTopology {
    fn from_wire(t: &req_types::Topology) -> Result<StreamsTopology, String> {
        let mut subtopologies = BTreeMap::new();
        for st in &t.subtopologies {
            if let Some(c) = st.state_changelog_topics.iter().find(|c| c.partitions != 0) {
                return Err(format!(
                    "Changelog topic {} must have an undefined partition count, but it is set to {}.",
                    c.name.0, c.partitions
                ));
            }
            let names = |v: &[kafka_protocol::messages::TopicName]| {
                v.iter().map(|n| n.0.to_string()).collect::<Vec<_>>()
            };
            let id = st.subtopology_id.to_string();
            let sub = StreamsSubtopology {
                id: id.clone(),
                source_topics: names(&st.source_topics),
                repartition_sink_topics: names(&st.repartition_sink_topics),
                changelogs: st
                    .state_changelog_topics
                    .iter()
                    .map(InternalTopic::from_wire)
                    .collect(),
                repartition_sources: st
                    .repartition_source_topics
                    .iter()
                    .map(InternalTopic::from_wire)
                    .collect(),
            };
            if sub.source_topics.is_empty() && sub.repartition_sources.is_empty() {
                return Err(format!("Subtopology {id} has no source topics."));
            }
            if subtopologies.insert(id.clone(), sub).is_some() {
                return Err(format!("Duplicate subtopology id {id}."));
            }
        }
        Ok(StreamsTopology {
            epoch: t.epoch,
            subtopologies,
        })
    }
}

/// The topology configured against the cluster's topics.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Configured {
    /// Every topic exists: tasks per subtopology, partitions per internal topic.
    Ready {
        /// Number of tasks of each subtopology.
        tasks: BTreeMap<String, i32>,
        /// Partitions of each internal topic.
        internal: BTreeMap<String, i32>,
    },
    /// Not assignable: a status code and its detail; `create` holds the
    /// internal topics the cluster must create.
    NotReady {
        /// The KIP-1071 status code.
        status: i8,
        /// Its detail.
        detail: String,
        /// Internal topics to create: (topic, partitions).
        create: Vec<(InternalTopic, i32)>,
    },
}

/// Configures `topology` against `topics` (Kafka's `InternalTopicManager`).
pub fn configure(topology: &StreamsTopology, topics: &TopicView) -> Configured {
    let not_ready = |status: i8, detail: String| Configured::NotReady {
        status,
        detail,
        create: Vec::new(),
    };
    let missing: BTreeSet<&String> = topology
        .subtopologies
        .values()
        .flat_map(|st| st.source_topics.iter())
        .filter(|t| !topics.contains_key(*t))
        .collect();
    if !missing.is_empty() {
        let names: Vec<&str> = missing.iter().map(|s| s.as_str()).collect();
        return not_ready(
            MISSING_SOURCE_TOPICS,
            format!("Source topics {} are missing.", names.join(", ")),
        );
    }
    let existing = |t: &str| topics.get(t).map(|(_, n)| *n);
    // Repartition topics: the declared count, or else the task count of the
    // subtopologies that write them, resolved until nothing changes.
    let mut decided: BTreeMap<String, i32> = BTreeMap::new();
    for st in topology.subtopologies.values() {
        for r in st.repartition_sources.iter().filter(|r| r.partitions > 0) {
            decided.insert(r.name.clone(), r.partitions);
        }
    }
    let count = |t: &str, decided: &BTreeMap<String, i32>| existing(t).or(decided.get(t).copied());
    let tasks_of = |st: &StreamsSubtopology, decided: &BTreeMap<String, i32>| -> Option<i32> {
        let counts: Option<Vec<i32>> = st
            .source_topics
            .iter()
            .chain(st.repartition_sources.iter().map(|r| &r.name))
            .map(|t| count(t, decided))
            .collect();
        counts.and_then(|c| c.into_iter().max())
    };
    loop {
        let mut progressed = false;
        for st in topology.subtopologies.values() {
            for r in &st.repartition_sources {
                if count(&r.name, &decided).is_some() {
                    continue;
                }
                let writers = topology
                    .subtopologies
                    .values()
                    .filter(|w| w.repartition_sink_topics.contains(&r.name))
                    .filter_map(|w| tasks_of(w, &decided))
                    .max();
                if let Some(n) = writers {
                    decided.insert(r.name.clone(), n);
                    progressed = true;
                }
            }
        }
        if !progressed {
            break;
        }
    }
    let mut tasks = BTreeMap::new();
    let mut internal = BTreeMap::new();
    let mut create = Vec::new();
    let mut wrong = Vec::new();
    for st in topology.subtopologies.values() {
        let Some(n) = tasks_of(st, &decided) else {
            return not_ready(
                MISSING_SOURCE_TOPICS,
                format!(
                    "The partition count of the repartition topics of subtopology {} cannot be derived.",
                    st.id
                ),
            );
        };
        tasks.insert(st.id.clone(), n);
        let wanted = st
            .repartition_sources
            .iter()
            .map(|r| (r, count(&r.name, &decided).unwrap_or(n)))
            .chain(st.changelogs.iter().map(|c| (c, n)));
        for (topic, partitions) in wanted {
            internal.insert(topic.name.clone(), partitions);
            match existing(&topic.name) {
                None => create.push((topic.clone(), partitions)),
                Some(have) if have != partitions => wrong.push(format!(
                    "Existing topic {} has different number of partitions: expected {partitions}, found {have}",
                    topic.name
                )),
                Some(_) => {}
            }
        }
    }
    if let Some(first) = wrong.into_iter().next() {
        return not_ready(INCORRECTLY_PARTITIONED_TOPICS, first);
    }
    if !create.is_empty() {
        let names: Vec<&str> = create.iter().map(|(t, _)| t.name.as_str()).collect();
        return Configured::NotReady {
            status: MISSING_INTERNAL_TOPICS,
            detail: format!("Internal topics are missing: {}", names.join(", ")),
            create,
        };
    }
    Configured::Ready { tasks, internal }
}

/// A member of a streams group.
#[derive(Debug, Clone, Default)]
pub struct StreamsMember {
    /// Member id (chosen by the client).
    pub id: String,
    /// Static instance id.
    pub instance_id: Option<String>,
    /// The application instance.
    pub process_id: String,
    /// `client.rack`.
    pub rack_id: Option<String>,
    /// The client id of its last heartbeat.
    pub client_id: String,
    /// The topology epoch it joined with.
    pub topology_epoch: i32,
    /// Member epoch.
    pub epoch: i32,
    /// Active tasks it owns now.
    pub assigned: BTreeSet<Task>,
    /// Active tasks it was told to give up and has not yet released.
    pub revoking: BTreeSet<Task>,
    /// A static member that left temporarily (epoch -2).
    pub away: bool,
    rebalance_timeout_ms: i64,
    revoke_deadline_ms: Option<i64>,
    last_seen_ms: i64,
    sent: Option<BTreeSet<Task>>,
}

/// A streams group.
#[derive(Debug, Clone, Default)]
pub struct StreamsGroup {
    /// Group epoch: bumped on every membership or configuration change.
    pub epoch: i32,
    /// The topology, once a member initialized it.
    pub topology: Option<StreamsTopology>,
    /// The topology as last configured.
    pub configured: Option<Configured>,
    /// Members by id.
    pub members: BTreeMap<String, StreamsMember>,
    /// Target assignment of the current epoch.
    pub target: BTreeMap<String, BTreeSet<Task>>,
}

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_owned())
}

fn error(code: i16, message: impl Into<String>) -> StreamsGroupHeartbeatResponse {
    StreamsGroupHeartbeatResponse::default()
        .with_error_code(code)
        .with_error_message(Some(s(&message.into())))
}

/// The request checks Kafka makes before the group is looked at.
fn validate(req: &StreamsGroupHeartbeatRequest) -> Result<(), String> {
    let empty = |v: Option<&StrBytes>| v.is_some_and(|v| v.is_empty());
    if req.member_id.is_empty() {
        return Err("MemberId can't be empty.".into());
    }
    if req.group_id.0.is_empty() {
        return Err("GroupId can't be empty.".into());
    }
    if empty(req.instance_id.as_ref()) {
        return Err("InstanceId can't be empty.".into());
    }
    if empty(req.rack_id.as_ref()) {
        return Err("RackId can't be empty.".into());
    }
    let any_tasks = |v: &Option<Vec<req_types::TaskIds>>| v.as_ref().is_some_and(|t| !t.is_empty());
    match req.member_epoch {
        0 => {
            if req.rebalance_timeout_ms == -1 {
                return Err("RebalanceTimeoutMs must be provided in first request.".into());
            }
            if any_tasks(&req.active_tasks)
                || any_tasks(&req.standby_tasks)
                || any_tasks(&req.warmup_tasks)
            {
                return Err("Tasks must be empty when (re-)joining.".into());
            }
            if req.topology.is_none() {
                return Err("Topology must be non-null when (re-)joining.".into());
            }
        }
        -2 if req.instance_id.is_none() => return Err("InstanceId can't be null.".into()),
        e if e < -2 => {
            return Err(format!(
                "MemberEpoch is {e}, but must be greater than or equal to -2."
            ))
        }
        _ => {}
    }
    let some = [&req.active_tasks, &req.standby_tasks, &req.warmup_tasks]
        .iter()
        .filter(|t| t.is_some())
        .count();
    if some != 0 && some != 3 {
        return Err("If one task-type is non-null, all must be non-null.".into());
    }
    if req.member_epoch != 0 && req.topology.is_some() {
        return Err("Topology can only be provided when (re-)joining.".into());
    }
    if let Some(t) = &req.topology {
        if t.subtopologies
            .iter()
            .any(|st| !st.source_topic_regex.is_empty())
        {
            return Err("Regular expressions for source topics are not supported yet.".into());
        }
    }
    Ok(())
}

fn owned_tasks(ids: &[req_types::TaskIds]) -> BTreeSet<Task> {
    ids.iter()
        .flat_map(|t| {
            t.partitions
                .iter()
                .map(|p| (t.subtopology_id.to_string(), *p))
        })
        .collect()
}

fn task_ids(tasks: &BTreeSet<Task>) -> Vec<TaskIds> {
    let mut out: Vec<TaskIds> = Vec::new();
    for (st, p) in tasks {
        match out.last_mut() {
            Some(last) if last.subtopology_id.as_str() == st => last.partitions.push(*p),
            _ => out.push(
                TaskIds::default()
                    .with_subtopology_id(s(st))
                    .with_partitions(vec![*p]),
            ),
        }
    }
    out
}

/// What a heartbeat produced: the answer and the internal topics the
/// cluster must create.
pub struct Beat {
    /// The answer.
    pub response: StreamsGroupHeartbeatResponse,
    /// Internal topics to create: (topic, partitions).
    pub create: Vec<(InternalTopic, i32)>,
}

impl StreamsGroup {
    /// One heartbeat from `client_id` at `now_ms`.
    pub fn heartbeat(
        &mut self,
        req: &StreamsGroupHeartbeatRequest,
        topics: &TopicView,
        client_id: &str,
        now_ms: i64,
    ) -> Beat {
        let only = |response| Beat {
            response,
            create: Vec::new(),
        };
        if let Err(message) = validate(req) {
            return only(error(Code::InvalidRequest.value(), message));
        }
        let member_id = req.member_id.to_string();
        let mut statuses = Vec::new();
        let mut membership_changed = false;
        match req.member_epoch {
            -1 | -2 => return only(self.leave(&member_id, req.member_epoch, now_ms)),
            0 => {
                let topology = match req.topology.as_ref().map(StreamsTopology::from_wire) {
                    Some(Ok(t)) => t,
                    Some(Err(message)) => return only(error(STREAMS_INVALID_TOPOLOGY, message)),
                    None => return only(error(Code::InvalidRequest.value(), "no topology")),
                };
                match &self.topology {
                    None => self.topology = Some(topology.clone()),
                    Some(t) if topology.epoch > t.epoch => {
                        return only(error(
                            STREAMS_INVALID_TOPOLOGY_EPOCH,
                            format!(
                                "Topology epoch {} is newer than the group's {}: topology updates are not supported.",
                                topology.epoch, t.epoch
                            ),
                        ))
                    }
                    Some(t) if topology.epoch < t.epoch => statuses.push((
                        STALE_TOPOLOGY,
                        format!(
                            "The member's topology epoch {} is older than the group's {}.",
                            topology.epoch, t.epoch
                        ),
                    )),
                    Some(_) => {}
                }
                match self.join(&member_id, req, topology.epoch, now_ms) {
                    Ok(took_over) => membership_changed = !took_over,
                    Err(code) => return only(error(code.value(), "")),
                }
            }
            e => {
                let Some(m) = self.members.get(&member_id) else {
                    return only(error(
                        Code::UnknownMemberId.value(),
                        format!("Member {member_id} is not a member of the group."),
                    ));
                };
                if e != m.epoch {
                    return only(error(
                        Code::FencedMemberEpoch.value(),
                        format!(
                            "The streams group member has a mismatched member epoch: {e} (expected {}).",
                            m.epoch
                        ),
                    ));
                }
            }
        }
        if let Some(m) = self.members.get_mut(&member_id) {
            m.last_seen_ms = now_ms;
            m.client_id = client_id.to_owned();
            if let Some(p) = &req.process_id {
                m.process_id = p.to_string();
            }
            if let Some(r) = &req.rack_id {
                m.rack_id = Some(r.to_string());
            }
            if req.rebalance_timeout_ms > 0 {
                m.rebalance_timeout_ms = i64::from(req.rebalance_timeout_ms);
            }
            if let Some(active) = &req.active_tasks {
                let owned = owned_tasks(active);
                m.revoking.retain(|t| owned.contains(t));
                if m.revoking.is_empty() {
                    m.revoke_deadline_ms = None;
                }
            }
        }
        let configured = self.topology.as_ref().map(|t| configure(t, topics));
        let mut create = Vec::new();
        if let Some(Configured::NotReady {
            status,
            detail,
            create: missing,
        }) = &configured
        {
            statuses.push((*status, detail.clone()));
            create.clone_from(missing);
        }
        let tasks_changed =
            task_counts(configured.as_ref()) != task_counts(self.configured.as_ref());
        self.configured = configured;
        if membership_changed || tasks_changed {
            self.bump();
        }
        let mut response = self.reconcile(&member_id, now_ms);
        response.status = Some(
            statuses
                .into_iter()
                .map(|(code, detail)| {
                    Status::default()
                        .with_status_code(code)
                        .with_status_detail(s(&detail))
                })
                .collect(),
        );
        Beat { response, create }
    }

    /// Adds (or resets) a member; `Ok(true)` when a static member took over
    /// its earlier incarnation's slot.
    fn join(
        &mut self,
        member_id: &str,
        req: &StreamsGroupHeartbeatRequest,
        topology_epoch: i32,
        now_ms: i64,
    ) -> Result<bool, Code> {
        let instance = req.instance_id.as_ref().map(|i| i.to_string());
        if let Some(iid) = &instance {
            let prev = self
                .members
                .values()
                .find(|m| m.instance_id.as_ref() == Some(iid) && m.id != member_id)
                .map(|m| (m.id.clone(), m.away));
            if let Some((prev_id, away)) = prev {
                if !away {
                    return Err(Code::UnreleasedInstanceId);
                }
                if let Some(old) = self.members.remove(&prev_id) {
                    let taken = StreamsMember {
                        id: member_id.to_owned(),
                        away: false,
                        last_seen_ms: now_ms,
                        sent: None,
                        topology_epoch,
                        ..old
                    };
                    if let Some(t) = self.target.remove(&prev_id) {
                        self.target.insert(member_id.to_owned(), t);
                    }
                    self.members.insert(member_id.to_owned(), taken);
                    return Ok(true);
                }
            }
        }
        // A known member joining again (epoch 0) lost what it had: it starts
        // over with nothing owned.
        self.members.insert(
            member_id.to_owned(),
            StreamsMember {
                id: member_id.to_owned(),
                instance_id: instance,
                topology_epoch,
                last_seen_ms: now_ms,
                rebalance_timeout_ms: i64::from(req.rebalance_timeout_ms.max(0)),
                ..StreamsMember::default()
            },
        );
        Ok(false)
    }

    fn leave(&mut self, member_id: &str, epoch: i32, now_ms: i64) -> StreamsGroupHeartbeatResponse {
        match self.members.get_mut(member_id) {
            Some(m) if epoch == -2 && m.instance_id.is_some() => {
                m.away = true;
                m.last_seen_ms = now_ms;
            }
            Some(_) => {
                self.members.remove(member_id);
                self.target.remove(member_id);
                self.bump();
            }
            None => {
                return error(
                    Code::UnknownMemberId.value(),
                    format!("Member {member_id} is not a member of the group."),
                )
                .with_member_id(s(member_id))
                .with_member_epoch(epoch)
            }
        }
        StreamsGroupHeartbeatResponse::default()
            .with_member_id(s(member_id))
            .with_member_epoch(epoch)
    }

    /// Removes members silent past the session timeout, or revoking past
    /// their rebalance timeout; true if any.
    pub fn expire(&mut self, now_ms: i64) -> bool {
        let before = self.members.len();
        self.members.retain(|_, m| {
            now_ms - m.last_seen_ms <= SESSION_TIMEOUT_MS
                && m.revoke_deadline_ms.is_none_or(|d| now_ms <= d)
        });
        let expired = self.members.len() != before;
        if expired {
            self.bump();
        }
        expired
    }

    fn bump(&mut self) {
        self.epoch += 1;
        self.target = self.assign();
    }

    /// Every task of the configured topology to a member: each keeps what it
    /// has up to its quota, the rest goes to the members with the fewest.
    fn assign(&self) -> BTreeMap<String, BTreeSet<Task>> {
        let mut target: BTreeMap<String, BTreeSet<Task>> = self
            .members
            .keys()
            .map(|id| (id.clone(), BTreeSet::new()))
            .collect();
        let Some(Configured::Ready { tasks, .. }) = &self.configured else {
            return target;
        };
        if self.members.is_empty() {
            return target;
        }
        // Balanced per subtopology, as the broker's assignor spreads each
        // subtopology's tasks over the members (a member given all of one
        // subtopology and none of the next would skew the load); sticky
        // within each subtopology's quota.
        for (st, n) in tasks {
            let n = *n;
            let quota = (n.max(0) as usize).div_ceil(self.members.len());
            let mut held: BTreeMap<String, usize> =
                target.keys().map(|id| (id.clone(), 0)).collect();
            let mut free = Vec::new();
            for task in (0..n).map(|p| (st.clone(), p)) {
                let keeper = self
                    .members
                    .values()
                    .find(|m| m.assigned.contains(&task) || m.revoking.contains(&task))
                    .map(|m| m.id.clone());
                match keeper {
                    Some(id) if held.get(&id).is_some_and(|h| *h < quota) => {
                        *held.entry(id.clone()).or_default() += 1;
                        target.entry(id).or_default().insert(task);
                    }
                    _ => free.push(task),
                }
            }
            for task in free {
                // Fewest of this subtopology, then fewest overall.
                let Some(id) = held
                    .iter()
                    .min_by_key(|(id, h)| (**h, target.get(*id).map_or(0, BTreeSet::len)))
                    .map(|(id, _)| id.clone())
                else {
                    break;
                };
                *held.entry(id.clone()).or_default() += 1;
                target.entry(id).or_default().insert(task);
            }
        }
        target
    }

    fn reconcile(&mut self, member_id: &str, now_ms: i64) -> StreamsGroupHeartbeatResponse {
        let target = self.target.get(member_id).cloned().unwrap_or_default();
        let held_by_others: BTreeSet<Task> = self
            .members
            .values()
            .filter(|m| m.id != member_id)
            .flat_map(|m| m.assigned.iter().chain(m.revoking.iter()).cloned())
            .collect();
        let group_epoch = self.epoch;
        let Some(m) = self.members.get_mut(member_id) else {
            return error(Code::UnknownMemberId.value(), "");
        };
        let revoke: BTreeSet<Task> = m.assigned.difference(&target).cloned().collect();
        if !revoke.is_empty() {
            m.assigned.retain(|t| target.contains(t));
            m.revoking.extend(revoke);
        }
        if m.revoking.is_empty() {
            m.revoke_deadline_ms = None;
            let gained: Vec<Task> = target
                .iter()
                .filter(|t| !m.assigned.contains(*t) && !held_by_others.contains(*t))
                .cloned()
                .collect();
            m.assigned.extend(gained);
            m.epoch = group_epoch;
        } else if m.revoke_deadline_ms.is_none() {
            m.revoke_deadline_ms = Some(now_ms + m.rebalance_timeout_ms);
        }
        let mut response = StreamsGroupHeartbeatResponse::default()
            .with_member_id(s(member_id))
            .with_member_epoch(m.epoch)
            .with_heartbeat_interval_ms(HEARTBEAT_INTERVAL_MS)
            .with_task_offset_interval_ms(TASK_OFFSET_INTERVAL_MS)
            .with_acceptable_recovery_lag(ACCEPTABLE_RECOVERY_LAG);
        if m.sent.as_ref() != Some(&m.assigned) {
            m.sent = Some(m.assigned.clone());
            response = response
                .with_active_tasks(Some(task_ids(&m.assigned)))
                .with_standby_tasks(Some(Vec::new()))
                .with_warmup_tasks(Some(Vec::new()));
        }
        response
    }

    /// Whether `member_id` at `epoch` may commit offsets.
    pub fn check_commit(&self, member_id: &str, epoch: i32) -> Code {
        match self.members.get(member_id) {
            None if epoch < 0 && self.members.is_empty() => Code::None,
            None => Code::UnknownMemberId,
            Some(m) if epoch != m.epoch => Code::StaleMemberEpoch,
            Some(_) => Code::None,
        }
    }

    /// The group's state as StreamsGroupDescribe and ListGroups name it.
    pub fn state(&self) -> &'static str {
        if self.members.is_empty() {
            return "Empty";
        }
        if !matches!(self.configured, Some(Configured::Ready { .. })) {
            return "NotReady";
        }
        let settled = self.members.values().all(|m| {
            m.epoch == self.epoch
                && m.revoking.is_empty()
                && self.target.get(&m.id).is_none_or(|t| *t == m.assigned)
        });
        if settled {
            "Stable"
        } else {
            "Reconciling"
        }
    }

    /// The group as StreamsGroupDescribe answers it.
    pub fn describe(&self, group_id: &str) -> describe::DescribedGroup {
        let internal = match &self.configured {
            Some(Configured::Ready { internal, .. }) => Some(internal),
            _ => None,
        };
        let info = |t: &InternalTopic| {
            describe::TopicInfo::default()
                .with_name(s(&t.name))
                .with_partitions(
                    internal
                        .and_then(|i| i.get(&t.name).copied())
                        .unwrap_or(t.partitions),
                )
                .with_replication_factor(t.replication_factor)
                .with_topic_configs(
                    t.configs
                        .iter()
                        .map(|(k, v)| {
                            describe::KeyValue::default()
                                .with_key(s(k))
                                .with_value(s(v))
                        })
                        .collect(),
                )
        };
        let topology = self.topology.as_ref().map(|t| {
            describe::Topology::default()
                .with_epoch(t.epoch)
                .with_subtopologies(Some(
                    t.subtopologies
                        .values()
                        .map(|st| {
                            describe::Subtopology::default()
                                .with_subtopology_id(s(&st.id))
                                .with_source_topics(st.source_topics.iter().map(|n| s(n)).collect())
                                .with_repartition_sink_topics(
                                    st.repartition_sink_topics.iter().map(|n| s(n)).collect(),
                                )
                                .with_state_changelog_topics(
                                    st.changelogs.iter().map(info).collect(),
                                )
                                .with_repartition_source_topics(
                                    st.repartition_sources.iter().map(info).collect(),
                                )
                        })
                        .collect(),
                ))
        });
        let assignment = |tasks: &BTreeSet<Task>| {
            describe::Assignment::default().with_active_tasks(
                task_ids(tasks)
                    .into_iter()
                    .map(|t| {
                        describe::TaskIds::default()
                            .with_subtopology_id(t.subtopology_id)
                            .with_partitions(t.partitions)
                    })
                    .collect(),
            )
        };
        let members = self
            .members
            .values()
            .map(|m| {
                let owned: BTreeSet<Task> = m.assigned.union(&m.revoking).cloned().collect();
                describe::Member::default()
                    .with_member_id(s(&m.id))
                    .with_member_epoch(m.epoch)
                    .with_instance_id(m.instance_id.as_deref().map(s))
                    .with_rack_id(m.rack_id.as_deref().map(s))
                    .with_client_id(s(&m.client_id))
                    .with_topology_epoch(m.topology_epoch)
                    .with_process_id(s(&m.process_id))
                    .with_assignment(assignment(&owned))
                    .with_target_assignment(assignment(
                        self.target.get(&m.id).unwrap_or(&BTreeSet::new()),
                    ))
            })
            .collect();
        describe::DescribedGroup::default()
            .with_group_id(GroupId(s(group_id)))
            .with_group_state(StrBytes::from_static_str(self.state()))
            .with_group_epoch(self.epoch)
            .with_assignment_epoch(self.epoch)
            .with_topology(topology)
            .with_members(members)
    }
}

/// Fits `response` to `version`: v0 has the 32-bit recovery lag only.
pub fn for_version(
    mut response: StreamsGroupHeartbeatResponse,
    version: i16,
) -> StreamsGroupHeartbeatResponse {
    if version == 0 && response.acceptable_recovery_lag >= 0 {
        response.acceptable_recovery_lag_legacy =
            i32::try_from(response.acceptable_recovery_lag).unwrap_or(i32::MAX);
        response.acceptable_recovery_lag = -1;
    }
    response
}

fn task_counts(c: Option<&Configured>) -> Option<&BTreeMap<String, i32>> {
    match c {
        Some(Configured::Ready { tasks, .. }) => Some(tasks),
        _ => None,
    }
}

#[cfg(test)]
#[path = "streams_groups_tests.rs"]
mod tests;
