//! The consumer's membership in a streams group (KIP-1071; Kafka Streams'
//! `group.protocol=streams`): one task per member drives
//! [`StreamsMemberState`] against the group coordinator, as `kip848` drives
//! the consumer protocol, and turns the member's active tasks into the
//! partitions the consumer fetches. Task `<subtopology>_<p>` is partition
//! `p` of each topic the subtopology reads (its source topics and the
//! repartition topics it reads).
//!
//! Revoked tasks go through the consumer's `Revoked` event (its listener
//! commits) before new ones are added, and the member heartbeats at once
//! after each change so the coordinator learns it; FENCED_MEMBER_EPOCH and
//! UNKNOWN_MEMBER_ID lose the partitions (`Lost`) and rejoin with epoch 0
//! and the topology. Closing revokes what is owned, then leaves with epoch
//! -1 (-2 for a static member). A member whose application stops polling
//! for `max.poll.interval.ms` leaves, loses its partitions, and rejoins at
//! the next poll. Standby and warm-up tasks are reported back as owned;
//! the member's target tasks are published on a watch channel when the
//! caller asked for them (the streams runtime runs the standby and warm-up
//! tasks from it: state kept current from the changelogs).
//!
//! The statuses the coordinator reports
//! (<https://cwiki.apache.org/confluence/display/KAFKA/KIP-1071%3A+Streams+Rebalance+Protocol>):
//! INCORRECTLY_PARTITIONED_TOPICS and SHUTDOWN_APPLICATION stop membership
//! with an error, as they stop a Kafka Streams thread. MISSING_SOURCE_TOPICS,
//! MISSING_INTERNAL_TOPICS (the coordinator creates the internal topics
//! itself and reports this until they exist) and STALE_TOPOLOGY are waited
//! out, and stop membership once one has lasted `max.poll.interval.ms`
//! (Kafka Streams' bound for missing source topics). ASSIGNMENT_DELAYED
//! (a new group's first assignment waits for
//! `group.streams.initial.rebalance.delay.ms`) is only logged.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use kafka_protocol::messages::{StreamsGroupHeartbeatRequest, StreamsGroupHeartbeatResponse};
use tokio::sync::watch;
use tokio::time::Instant;
use tracing::{debug, info, warn};

use super::member::{StreamsMemberState, StreamsTopology, TaskAssignment, TaskChange, TaskId};
use crate::cluster::CoordinatorKind;
use crate::consumer::group::member::{coordinator, needs_rediscovery, Driver};
use crate::consumer::group::GroupEvent;
use crate::error::{Error, Origin, Result};
use crate::protocol::versions::Versions;
use crate::TopicPartition;

const HEARTBEAT_VERSIONS: Versions = Versions::new(0, 1);

/// Whether the group coordinator of `group` serves StreamsGroupHeartbeat
/// at a version this client speaks, asked of its ApiVersions answer before
/// anything is sent: `Err(Error::UnsupportedVersion)` naming the API and
/// the coordinator otherwise (Kafka 3.9 and 4.0 have no API 88; retrying
/// will not help), so an application started with `group.protocol=streams`
/// against such a broker is refused at start instead of failing later.
pub(crate) async fn check_coordinator(
    cluster: &crate::cluster::Cluster,
    group: &str,
) -> Result<()> {
    let addr = cluster.coordinator(CoordinatorKind::Group, group).await?;
    let conn = cluster
        .connection(&addr, crate::net::Workload::Group)
        .await?;
    conn.version_for::<StreamsGroupHeartbeatRequest>(HEARTBEAT_VERSIONS)
        .map(drop)
}

/// StreamsGroupHeartbeat status codes (KIP-1071).
const STALE_TOPOLOGY: i8 = 0;
const MISSING_SOURCE_TOPICS: i8 = 1;
const INCORRECTLY_PARTITIONED_TOPICS: i8 = 2;
const MISSING_INTERNAL_TOPICS: i8 = 3;
const SHUTDOWN_APPLICATION: i8 = 4;
const ASSIGNMENT_DELAYED: i8 = 5;

fn status_name(code: i8) -> String {
    match code {
        STALE_TOPOLOGY => "STALE_TOPOLOGY".into(),
        MISSING_SOURCE_TOPICS => "MISSING_SOURCE_TOPICS".into(),
        INCORRECTLY_PARTITIONED_TOPICS => "INCORRECTLY_PARTITIONED_TOPICS".into(),
        MISSING_INTERNAL_TOPICS => "MISSING_INTERNAL_TOPICS".into(),
        SHUTDOWN_APPLICATION => "SHUTDOWN_APPLICATION".into(),
        ASSIGNMENT_DELAYED => "ASSIGNMENT_DELAYED".into(),
        other => format!("status {other}"),
    }
}

/// The partitions the consumer fetches for `tasks`: for each task, its
/// partition of every topic its subtopology reads. Tasks of a subtopology
/// the topology does not have, and negative partitions, are left out.
pub(crate) fn task_partitions(
    topology: &StreamsTopology,
    tasks: &BTreeSet<TaskId>,
) -> BTreeSet<TopicPartition> {
    let mut out = BTreeSet::new();
    for t in tasks {
        let Some(st) = topology
            .subtopologies
            .iter()
            .find(|s| s.id == t.subtopology)
        else {
            warn!(task = %t, "assigned a task of a subtopology this member did not declare; ignored");
            continue;
        };
        if t.partition < 0 {
            warn!(task = %t, "assigned a task with a negative partition; ignored");
            continue;
        }
        let inputs = st
            .source_topics
            .iter()
            .chain(st.repartition_source_topics.iter().map(|(name, _)| name));
        for topic in inputs {
            out.insert(TopicPartition::new(topic.as_str(), t.partition));
        }
    }
    out
}

/// Judges the statuses that come with heartbeat answers: which stop
/// membership at once, and how long the others may last.
#[derive(Debug)]
pub(crate) struct StatusWatch {
    group_id: String,
    /// How long a waitable status may last (`max.poll.interval.ms`).
    bound: Duration,
    /// When each status now reported was first seen.
    since: BTreeMap<i8, Instant>,
}

impl StatusWatch {
    pub fn new(group_id: &str, bound: Duration) -> StatusWatch {
        StatusWatch {
            group_id: group_id.to_owned(),
            bound,
            since: BTreeMap::new(),
        }
    }

    /// `Err` when membership must stop: a fatal status, or a waitable one
    /// reported for longer than the bound. Neither is retriable: the
    /// topology or the topics must change first.
    pub fn check(&mut self, statuses: &[(i8, String)], now: Instant) -> Result<()> {
        self.since
            .retain(|code, _| statuses.iter().any(|(c, _)| c == code));
        for (code, detail) in statuses {
            let name = status_name(*code);
            match *code {
                INCORRECTLY_PARTITIONED_TOPICS | SHUTDOWN_APPLICATION => {
                    return Err(self.stop(&name, detail, None));
                }
                // The first assignment of a new group waits for the
                // group's initial rebalance delay: expected, and bounded
                // by the coordinator.
                ASSIGNMENT_DELAYED => {
                    debug!(group = %self.group_id, detail = %detail, "streams group assignment delayed");
                }
                _ => {
                    let first = *self.since.entry(*code).or_insert_with(|| {
                        warn!(group = %self.group_id, status = %name, detail = %detail, "the streams group coordinator reports a status; waiting for it to clear");
                        now
                    });
                    if now.saturating_duration_since(first) >= self.bound {
                        return Err(self.stop(&name, detail, Some(self.bound)));
                    }
                }
            }
        }
        Ok(())
    }

    fn stop(&self, name: &str, detail: &str, lasted: Option<Duration>) -> Error {
        let how_long = match lasted {
            Some(d) => format!(" for {} ms (max.poll.interval.ms)", d.as_millis()),
            None => String::new(),
        };
        Error::invalid_state(
            Origin::Consumer,
            format!(
                "streams group {}: the coordinator reports {name}{how_long}: {detail}; not \
                 retriable until the topology or its topics are fixed",
                self.group_id
            ),
        )
    }
}

/// Runs membership until close or a fatal error, on a thread of its own
/// as the other protocols' members do (see
/// [`on_own_thread`](super::super::classic::on_own_thread)).
pub(crate) async fn run(
    d: Driver,
    topology: StreamsTopology,
    member_id: String,
    process_id: String,
    rack: Option<String>,
    tasks: Option<watch::Sender<TaskAssignment>>,
) {
    let group = d.shared.group_id.clone();
    super::super::classic::on_own_thread(&group, d, move |d| {
        drive(d, topology, member_id, process_id, rack, tasks)
    })
    .await;
}

/// Heartbeats and applies assignments until close or a fatal error.
async fn drive(
    d: Driver,
    topology: StreamsTopology,
    member_id: String,
    process_id: String,
    rack: Option<String>,
    tasks: Option<watch::Sender<TaskAssignment>>,
) {
    let m = StreamsMemberState::new(
        &d.shared.group_id,
        &member_id,
        &process_id,
        d.shared.instance_id.clone(),
        d.config.rebalance_timeout(),
        topology.clone(),
    )
    .with_rack(rack);
    let watch = StatusWatch::new(&d.shared.group_id, d.config.max_poll_interval);
    let mut s = Membership {
        d,
        m,
        topology,
        watch,
        standby_seen: (0, 0),
        tasks,
    };
    let mut attempt = 0u32;
    loop {
        if s.d.closing() {
            s.close().await;
            return;
        }
        if s.d.poll_expired() && s.m.epoch() > 0 {
            s.poll_expired().await;
            continue;
        }
        let req = s.m.heartbeat_request();
        let closed = s.d.close_signal();
        let answer = tokio::select! {
            r = s.send(&req) => r,
            _ = closed => continue,
        };
        let changes = match s.m.on_heartbeat(answer) {
            Ok(changes) => changes,
            Err(e) if e.is_retriable() => {
                debug!(group = %s.d.shared.group_id, error = %e, "streams group heartbeat failed; retrying");
                if needs_rediscovery(&e) {
                    s.d.cluster
                        .invalidate_coordinator(CoordinatorKind::Group, &s.d.shared.group_id);
                }
                s.d.backoff(&mut attempt).await;
                continue;
            }
            Err(e) => return s.fail(e).await,
        };
        attempt = 0;
        s.publish();
        s.note_standby();
        if let Err(e) = s.watch.check(s.m.statuses(), Instant::now()) {
            return s.fail(e).await;
        }
        if changes.is_empty() {
            s.wait().await;
        } else {
            // Report what we own now at once (the coordinator waits for it
            // to hand revoked tasks on).
            s.apply(changes).await;
        }
    }
}

/// The I/O half of a streams group member.
struct Membership {
    d: Driver,
    m: StreamsMemberState,
    topology: StreamsTopology,
    watch: StatusWatch,
    /// Standby and warm-up task counts last logged.
    standby_seen: (usize, usize),
    /// Where the target tasks are published (the streams runtime's
    /// standby tasks), if anyone asked.
    tasks: Option<watch::Sender<TaskAssignment>>,
}

impl Membership {
    fn partitions(&self, tasks: &BTreeSet<TaskId>) -> BTreeSet<TopicPartition> {
        task_partitions(&self.topology, tasks)
    }

    /// Makes the member id, epoch and owned partitions what commits and
    /// the consumer see.
    fn publish(&self) {
        let owned = self.partitions(&self.m.owned().active);
        self.d.publish(self.m.member_id(), self.m.epoch(), &owned);
    }

    async fn send(
        &self,
        req: &StreamsGroupHeartbeatRequest,
    ) -> Result<StreamsGroupHeartbeatResponse> {
        let (_, conn) = coordinator(&self.d.cluster, &self.d.shared).await?;
        let version = conn.version_for::<StreamsGroupHeartbeatRequest>(HEARTBEAT_VERSIONS)?;
        let resp = conn.send_at(req, version).await?;
        self.d.shared.metrics.heartbeat();
        Ok(resp)
    }

    /// Publishes the target tasks (when asked for) and logs, once per
    /// change, the standby and warm-up tasks the coordinator assigned
    /// (with the group's `streams.num.standby.replicas` above 0). Without
    /// a watcher they are acknowledged as owned but not run.
    fn note_standby(&mut self) {
        let target = self.m.target();
        if let Some(tx) = &self.tasks {
            tx.send_if_modified(|t| {
                let changed = t != target;
                if changed {
                    *t = target.clone();
                }
                changed
            });
        }
        let now = (target.standby.len(), target.warmup.len());
        if now != self.standby_seen {
            self.standby_seen = now;
            if now == (0, 0) {
                return;
            }
            let tasks =
                |set: &BTreeSet<TaskId>| set.iter().map(ToString::to_string).collect::<Vec<_>>();
            if self.tasks.is_some() {
                info!(group = %self.d.shared.group_id, standby = ?tasks(&target.standby), warmup = ?tasks(&target.warmup), "standby and warm-up tasks assigned");
            } else {
                warn!(group = %self.d.shared.group_id, standby = now.0, warmup = now.1, "standby and warm-up tasks assigned; not run: this consumer keeps no state (the streams runtime does)");
            }
        }
    }

    /// Waits the coordinator's interval, for the poll deadline or close.
    async fn wait(&self) {
        let closed = self.d.close_signal();
        tokio::select! {
            _ = tokio::time::sleep(self.m.heartbeat_interval()) => {}
            _ = tokio::time::sleep_until(self.d.poll_deadline()) => {}
            _ = closed => {}
        }
    }

    async fn apply(&mut self, changes: Vec<TaskChange>) {
        let mut queue: std::collections::VecDeque<TaskChange> = changes.into();
        while let Some(change) = queue.pop_front() {
            match change {
                TaskChange::Revoke(tasks) => {
                    let next = self.revoke(tasks).await;
                    queue.extend(next);
                }
                TaskChange::Assign(tasks) => {
                    self.d.shared.metrics.rebalance_completed();
                    self.publish();
                    let added = self.partitions(&tasks).into_iter().collect();
                    info!(group = %self.d.shared.group_id, epoch = self.m.epoch(), tasks = ?tasks.iter().map(ToString::to_string).collect::<Vec<_>>(), "streams tasks assigned");
                    self.d.emit(GroupEvent::Assigned(added)).await;
                }
                TaskChange::Lose(tasks) => {
                    self.d.shared.metrics.rebalance_failed(false);
                    let mut lost = self.partitions(&tasks);
                    self.d.lose(&mut lost).await;
                    self.publish();
                }
            }
        }
    }

    /// Revokes `tasks` through the consumer (which commits them), then
    /// gives them up; returns what follows (the tasks to add). Heartbeats
    /// meanwhile so the member stays in the group; a newer target that
    /// takes more tasks away revokes those too before anything is added.
    /// Each wait for the consumer is bounded by the rebalance timeout.
    async fn revoke(&mut self, mut tasks: BTreeSet<TaskId>) -> Vec<TaskChange> {
        self.d.shared.metrics.rebalance_started();
        loop {
            let parts = self.partitions(&tasks);
            let (more, lost) = self.revoke_once(&parts).await;
            if let Some(lost) = lost {
                // Fenced meanwhile: the rest is lost, nothing to add.
                let rest: BTreeSet<TaskId> = lost.difference(&tasks).cloned().collect();
                let mut rest = self.partitions(&rest);
                self.d.lose(&mut rest).await;
                self.publish();
                return Vec::new();
            }
            if more.is_empty() {
                let next = self.m.revoke_done();
                self.publish();
                return next;
            }
            tasks = more;
        }
    }

    /// One `Revoked` event and its ack; returns further revocations and
    /// the tasks lost if the member was fenced while waiting.
    async fn revoke_once(
        &mut self,
        parts: &BTreeSet<TopicPartition>,
    ) -> (BTreeSet<TaskId>, Option<BTreeSet<TaskId>>) {
        let mut more = BTreeSet::new();
        let mut lost = None;
        let Some(mut rx) = self.d.start_revoke(parts).await else {
            return (more, lost);
        };
        let deadline = Instant::now() + self.d.config.rebalance_timeout();
        loop {
            let beat = lost.is_none();
            tokio::select! {
                _ = &mut rx => break,
                _ = tokio::time::sleep_until(deadline) => {
                    warn!(group = %self.d.shared.group_id, "revocation not acknowledged within the rebalance timeout");
                    break;
                }
                _ = tokio::time::sleep(self.m.heartbeat_interval()), if beat => {
                    let req = self.m.heartbeat_request();
                    let answer = self.send(&req).await;
                    match self.m.on_heartbeat(answer) {
                        Ok(changes) => {
                            for c in changes {
                                match c {
                                    TaskChange::Revoke(t) => more.extend(t),
                                    TaskChange::Lose(t) => lost = Some(t),
                                    TaskChange::Assign(_) => {}
                                }
                            }
                            self.publish();
                            self.note_standby();
                        }
                        Err(e) => debug!(group = %self.d.shared.group_id, error = %e, "heartbeat during a revocation failed"),
                    }
                }
            }
        }
        (more, lost)
    }

    /// The application stopped polling: nobody would ack a revocation, so
    /// leave without one, lose the partitions, and rejoin at the next poll.
    async fn poll_expired(&mut self) {
        warn!(group = %self.d.shared.group_id, member = %self.m.member_id(), "max.poll.interval.ms expired without a poll; leaving the streams group");
        let owned = self.m.leave();
        let req = self.m.heartbeat_request();
        let answer = self.send(&req).await;
        if let Err(e) = self.m.on_heartbeat(answer) {
            debug!(group = %self.d.shared.group_id, error = %e, "leave heartbeat failed");
        }
        let mut lost = self.partitions(&owned);
        self.d.lose(&mut lost).await;
        self.d.publish(self.m.member_id(), -1, &BTreeSet::new());
        self.d.wait_for_poll().await;
        self.m.rejoin();
    }

    /// Revokes what is owned (so the consumer commits it), then leaves
    /// with epoch -1 (-2 for a static member); best effort.
    async fn close(&mut self) {
        let owned = self.partitions(&self.m.owned().active);
        if self.m.epoch() > 0 {
            if let Some(rx) = self.d.start_revoke(&owned).await {
                let bound = self.d.config.rebalance_timeout();
                if tokio::time::timeout(bound, rx).await.is_err() {
                    warn!(group = %self.d.shared.group_id, "revocation on close not acknowledged within the rebalance timeout");
                }
            }
            self.m.leave();
            let req = self.m.heartbeat_request();
            let answer = self.send(&req).await;
            if let Err(e) = self.m.on_heartbeat(answer) {
                debug!(group = %self.d.shared.group_id, error = %e, "leave heartbeat failed");
            }
        }
        self.d.publish(self.m.member_id(), -1, &BTreeSet::new());
    }

    async fn fail(self, e: Error) {
        warn!(group = %self.d.shared.group_id, error = %e, "streams group membership failed");
        self.d.shared.metrics.rebalance_failed(false);
        self.d.fail(e).await;
    }
}

#[cfg(test)]
#[path = "driver_tests.rs"]
mod tests;
