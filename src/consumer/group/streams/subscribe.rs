//! Joining a streams group from the consumer: [`Consumer::subscribe_streams`]
//! starts a [`GroupMember`] whose membership task is the streams driver
//! (see `driver`); its events reach the consumer's queue as any other
//! membership's, so `poll` applies assignments (starting at the committed
//! offsets) and revocations (the rebalance listener commits) the same way,
//! and commits carry the member epoch.

use std::collections::BTreeSet;
use std::sync::Arc;

use tokio::sync::watch;
use tracing::Instrument;

use super::client::new_member_id;
use super::driver;
use super::member::{StreamsTopology, TaskAssignment};
use crate::cluster::Cluster;
use crate::consumer::group::metrics::GroupMetrics;
use crate::consumer::group::{GroupConfig, GroupEvents, GroupMember};
use crate::consumer::Consumer;
use crate::error::{Error, Origin, Result};

/// The topics `topology` reads (source and repartition source topics), or
/// a config error naming what is wrong with it.
pub(crate) fn input_topics(topology: &StreamsTopology) -> Result<Vec<String>> {
    if topology.subtopologies.is_empty() {
        return Err(Error::config(
            "topology",
            "a streams group member needs at least one subtopology",
        ));
    }
    let mut ids = BTreeSet::new();
    let mut topics = BTreeSet::new();
    for st in &topology.subtopologies {
        if st.id.is_empty() || !ids.insert(st.id.as_str()) {
            return Err(Error::config(
                "topology",
                format!("subtopology ids must be unique and not empty (`{}`)", st.id),
            ));
        }
        if st.source_topics.is_empty() && st.repartition_source_topics.is_empty() {
            return Err(Error::config(
                "topology",
                format!("subtopology {} reads no topic", st.id),
            ));
        }
        topics.extend(st.source_topics.iter().cloned());
        topics.extend(st.repartition_source_topics.iter().map(|(t, _)| t.clone()));
    }
    Ok(topics.into_iter().collect())
}

impl GroupMember {
    /// Starts joining `config.group_id` as a streams group member with
    /// `topology`, for the application instance `process_id` in `rack`.
    pub(crate) fn join_streams(
        cluster: &Cluster,
        config: GroupConfig,
        topology: StreamsTopology,
        process_id: String,
        rack: Option<String>,
        metrics: Arc<GroupMetrics>,
        tasks: Option<watch::Sender<TaskAssignment>>,
    ) -> Result<(GroupMember, GroupEvents)> {
        config.validate()?;
        let topics = input_topics(&topology)?;
        let span = tracing::info_span!("streams_group", group = %config.group_id);
        Ok(GroupMember::launch(
            cluster,
            config,
            topics,
            metrics,
            false,
            |driver| {
                tokio::spawn(
                    driver::run(driver, topology, new_member_id(), process_id, rack, tasks)
                        .instrument(span),
                )
            },
        ))
    }
}

impl Consumer {
    /// Joins the streams group `group.id` (KIP-1071, Kafka Streams'
    /// `group.protocol=streams`) declaring `topology`: the coordinator
    /// assigns this member tasks, and the consumer fetches each active
    /// task's partition of its subtopology's input topics. Assignments,
    /// revocations (the rebalance listener runs, then the partitions go)
    /// and losses are applied by [`poll`](Self::poll) as for
    /// [`subscribe`](Self::subscribe); commits carry the member epoch;
    /// [`unsubscribe`](Self::unsubscribe) and [`close`](Self::close) revoke
    /// and leave (epoch -1). `process_id` names this application instance
    /// (Kafka Streams' process id; `None` generates one); `client.rack` is
    /// sent for rack-aware assignment. Fails without a
    /// `group.id`, after a manual [`assign`](Self::assign), or while
    /// already subscribed. The coordinator creates the changelog and
    /// repartition topics the topology declares; see the
    /// [`streams`](crate::consumer::group::streams) module for the statuses
    /// that stop membership.
    pub fn subscribe_streams(
        &self,
        topology: StreamsTopology,
        process_id: Option<String>,
    ) -> Result<()> {
        self.join_streams_group(topology, process_id, None)
    }

    /// [`subscribe_streams`](Self::subscribe_streams), publishing the
    /// member's target tasks (active, standby, warm-up; see
    /// `StreamsMemberState::target`) on `tasks` after each heartbeat that
    /// changes them: the streams runtime runs the standby tasks.
    pub(crate) fn join_streams_group(
        &self,
        topology: StreamsTopology,
        process_id: Option<String>,
        tasks: Option<watch::Sender<TaskAssignment>>,
    ) -> Result<()> {
        if self.shared.config.group_id.is_none() {
            return Err(Error::config(
                "group.id",
                "required to join a streams group",
            ));
        }
        let topics = input_topics(&topology)?;
        let mut slot = self.shared.group();
        if slot.subscribed {
            return Err(Error::invalid_state(
                Origin::Consumer,
                "already subscribed; unsubscribe before joining a streams group",
            ));
        }
        if !self.shared.lock().partitions.is_empty() {
            return Err(Error::invalid_state(
                Origin::Consumer,
                "partitions were assigned manually; assign(vec![]) before subscribing",
            ));
        }
        let (member, events) = GroupMember::join_streams(
            &self.shared.cluster,
            self.shared.config.group.clone(),
            topology,
            process_id.unwrap_or_else(new_member_id),
            self.shared.config.client_rack.clone(),
            self.shared.group_metrics.clone(),
            tasks,
        )?;
        slot.member = Some(Arc::new(member));
        slot.failed = None;
        slot.subscribed = true;
        slot.topics = topics;
        tokio::spawn(crate::consumer::membership::forward_events(
            Arc::downgrade(&self.shared),
            events,
        ));
        Ok(())
    }
}
