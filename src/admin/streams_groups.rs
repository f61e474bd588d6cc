//! Streams groups (KIP-1071) for administrators: list them and describe them
//! (StreamsGroupDescribe, API 89) as Java's `Admin.describeStreamsGroups` and
//! `kafka-streams-groups.sh --describe`: the group's state and epochs, the
//! topology the coordinator initialized, and each member's current and
//! target tasks.
//! See <https://cwiki.apache.org/confluence/display/KAFKA/KIP-1071%3A+Streams+Rebalance+Protocol>.

use std::collections::BTreeMap;

use indexmap::IndexMap;
use kafka_protocol::messages::streams_group_describe_response::{Assignment, TaskIds, TopicInfo};
use kafka_protocol::messages::{GroupId, StreamsGroupDescribeRequest};

use super::share_groups::answered_group;
use super::{str_bytes, Admin, GroupListing, PerResource};
use crate::cluster::CoordinatorKind;
use crate::error::Result;
use crate::net::Workload;
use crate::protocol::versions::Versions;

const STREAMS_GROUP_DESCRIBE_VERSIONS: Versions = Versions::new(0, 1);

/// Tasks by subtopology id: the partitions of each.
pub type TasksBySubtopology = BTreeMap<String, Vec<i32>>;

/// A member's tasks.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StreamsTasks {
    /// Active tasks.
    pub active: TasksBySubtopology,
    /// Standby tasks.
    pub standby: TasksBySubtopology,
    /// Warm-up tasks.
    pub warmup: TasksBySubtopology,
}

/// One member of a described streams group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamsMemberDescription {
    /// The member id (client-generated).
    pub member_id: String,
    /// The member's epoch.
    pub member_epoch: i32,
    /// `group.instance.id` of a static member.
    pub instance_id: Option<String>,
    /// `client.id` of the member's client.
    pub client_id: String,
    /// The client's host as the broker saw it.
    pub client_host: String,
    /// The application instance the member belongs to.
    pub process_id: String,
    /// The topology epoch the member runs.
    pub topology_epoch: i32,
    /// A member still on the classic protocol (upgrade in progress).
    pub is_classic: bool,
    /// The tasks it owns.
    pub assignment: StreamsTasks,
    /// The tasks the coordinator wants it to own.
    pub target_assignment: StreamsTasks,
}

/// A subtopology as the coordinator initialized it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamsSubtopologyDescription {
    /// Its id.
    pub id: String,
    /// The topics it reads (regular expressions resolved).
    pub source_topics: Vec<String>,
    /// Repartition topics it writes to.
    pub repartition_sink_topics: Vec<String>,
    /// Changelog topics, with their partition counts.
    pub state_changelog_topics: Vec<(String, i32)>,
    /// Repartition topics it reads, with their partition counts.
    pub repartition_source_topics: Vec<(String, i32)>,
}

/// A described streams group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamsGroupDescription {
    /// The group id.
    pub group_id: String,
    /// `Empty`, `NotReady`, `Assigning`, `Reconciling`, `Stable`, `Dead`.
    pub state: String,
    /// The group epoch.
    pub group_epoch: i32,
    /// The assignment epoch.
    pub assignment_epoch: i32,
    /// The topology epoch; `None` before a member initialized it.
    pub topology_epoch: Option<i32>,
    /// The subtopologies; empty until the topology is initialized (e.g.
    /// while source topics are missing).
    pub subtopologies: Vec<StreamsSubtopologyDescription>,
    /// The members.
    pub members: Vec<StreamsMemberDescription>,
}

fn tasks(ids: &[TaskIds]) -> TasksBySubtopology {
    let mut out = TasksBySubtopology::new();
    for t in ids {
        let e = out.entry(t.subtopology_id.to_string()).or_default();
        e.extend(t.partitions.iter().copied());
        e.sort_unstable();
    }
    out
}

fn assignment(a: &Assignment) -> StreamsTasks {
    StreamsTasks {
        active: tasks(&a.active_tasks),
        standby: tasks(&a.standby_tasks),
        warmup: tasks(&a.warmup_tasks),
    }
}

fn topics(infos: &[TopicInfo]) -> Vec<(String, i32)> {
    infos
        .iter()
        .map(|t| (t.name.to_string(), t.partitions))
        .collect()
}

impl Admin {
    /// The streams groups of every broker.
    pub async fn list_streams_groups(&self) -> Result<Vec<GroupListing>> {
        self.list_groups(&[], &["streams".to_owned()]).await
    }

    /// Describes streams groups through their coordinators, one result per
    /// group. A group that is no streams group (or none at all) gives
    /// GROUP_ID_NOT_FOUND; a broker before Kafka 4.2's streams protocol,
    /// `Error::UnsupportedVersion` naming StreamsGroupDescribe.
    pub async fn describe_streams_groups(
        &self,
        groups: &[String],
    ) -> Result<PerResource<String, StreamsGroupDescription>> {
        let mut out = IndexMap::new();
        for group in groups {
            out.insert(group.clone(), self.describe_streams_group(group).await);
        }
        Ok(out)
    }

    async fn describe_streams_group(&self, group: &str) -> Result<StreamsGroupDescription> {
        let addr = self
            .cluster
            .coordinator(CoordinatorKind::Group, group)
            .await?;
        let req =
            StreamsGroupDescribeRequest::default().with_group_ids(vec![GroupId(str_bytes(group))]);
        let resp = self
            .cluster
            .send(
                &addr,
                Workload::Admin,
                &req,
                STREAMS_GROUP_DESCRIBE_VERSIONS,
            )
            .await;
        if resp
            .as_ref()
            .err()
            .and_then(|e| e.kafka_code())
            .is_some_and(|c| c.code() == 16 || c.code() == 15)
        {
            self.cluster
                .invalidate_coordinator(CoordinatorKind::Group, group);
        }
        let resource = format!("streams group {group} at {addr}");
        let g = answered_group(
            resp?.groups,
            group,
            "StreamsGroupDescribe",
            &resource,
            |g| (g.group_id.as_str(), g.error_code, g.error_message.as_ref()),
        )?;
        let subtopologies = g
            .topology
            .as_ref()
            .and_then(|t| t.subtopologies.as_ref())
            .map(|sts| {
                sts.iter()
                    .map(|st| StreamsSubtopologyDescription {
                        id: st.subtopology_id.to_string(),
                        source_topics: st.source_topics.iter().map(|t| t.to_string()).collect(),
                        repartition_sink_topics: st
                            .repartition_sink_topics
                            .iter()
                            .map(|t| t.to_string())
                            .collect(),
                        state_changelog_topics: topics(&st.state_changelog_topics),
                        repartition_source_topics: topics(&st.repartition_source_topics),
                    })
                    .collect()
            })
            .unwrap_or_default();
        Ok(StreamsGroupDescription {
            group_id: group.to_owned(),
            state: g.group_state.to_string(),
            group_epoch: g.group_epoch,
            assignment_epoch: g.assignment_epoch,
            topology_epoch: g.topology.as_ref().map(|t| t.epoch),
            subtopologies,
            members: g
                .members
                .iter()
                .map(|m| StreamsMemberDescription {
                    member_id: m.member_id.to_string(),
                    member_epoch: m.member_epoch,
                    instance_id: m.instance_id.as_ref().map(|s| s.to_string()),
                    client_id: m.client_id.to_string(),
                    client_host: m.client_host.to_string(),
                    process_id: m.process_id.to_string(),
                    topology_epoch: m.topology_epoch,
                    is_classic: m.is_classic,
                    assignment: assignment(&m.assignment),
                    target_assignment: assignment(&m.target_assignment),
                })
                .collect(),
        })
    }
}

#[cfg(test)]
mod tests {
    use kafka_protocol::messages::streams_group_describe_response::TaskIds;
    use kafka_protocol::protocol::StrBytes;

    use super::tasks;

    #[test]
    fn tasks_are_grouped_by_subtopology_and_sorted() {
        let ids = [
            TaskIds::default()
                .with_subtopology_id(StrBytes::from_static_str("1"))
                .with_partitions(vec![3, 0]),
            TaskIds::default()
                .with_subtopology_id(StrBytes::from_static_str("0"))
                .with_partitions(vec![2]),
            TaskIds::default()
                .with_subtopology_id(StrBytes::from_static_str("1"))
                .with_partitions(vec![1]),
        ];
        let t = tasks(&ids);
        assert_eq!(t.len(), 2);
        assert_eq!(t["0"], vec![2]);
        assert_eq!(t["1"], vec![0, 1, 3]);
    }
}
