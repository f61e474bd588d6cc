//! Consumer groups: list (ListGroups, KIP-518 state and KIP-848 type
//! filters), describe (ConsumerGroupDescribe for KIP-848 groups, falling
//! back to DescribeGroups for classic ones, whose member assignments are
//! decoded from the consumer protocol bytes), delete (DeleteGroups), and
//! committed offsets: OffsetFetch, OffsetCommit as an admin (empty member id,
//! generation -1: only accepted while the group has no active members) and
//! OffsetDelete (KIP-496).

use std::collections::BTreeMap;

use indexmap::IndexMap;
use kafka_protocol::messages::offset_commit_request::{
    OffsetCommitRequestPartition, OffsetCommitRequestTopic,
};
use kafka_protocol::messages::offset_delete_request::{
    OffsetDeleteRequestPartition, OffsetDeleteRequestTopic,
};
use kafka_protocol::messages::offset_fetch_request::OffsetFetchRequestTopic;
use kafka_protocol::messages::{
    ConsumerGroupDescribeRequest, DeleteGroupsRequest, DescribeGroupsRequest, GroupId,
    ListGroupsRequest, OffsetCommitRequest, OffsetDeleteRequest, OffsetFetchRequest, TopicName,
};
use tracing::warn;

use super::{by_topic, check, missing, partition_results, str_bytes, Admin, PerResource};
use crate::cluster::CoordinatorKind;
use crate::error::{Error, Result};
use crate::protocol::consumer_protocol::decode_assignment;
use crate::protocol::versions::Versions;
use crate::TopicPartition;

const LIST_GROUPS_VERSIONS: Versions = Versions::new(0, 5);
const DESCRIBE_GROUPS_VERSIONS: Versions = Versions::new(0, 5);
const CONSUMER_GROUP_DESCRIBE_VERSIONS: Versions = Versions::new(0, 1);
const DELETE_GROUPS_VERSIONS: Versions = Versions::new(0, 2);
/// v8+ batches groups; one group per request keeps v1-7's simpler shape.
const OFFSET_FETCH_VERSIONS: Versions = Versions::new(1, 7);
const OFFSET_COMMIT_VERSIONS: Versions = Versions::new(2, 9);
const OFFSET_DELETE_VERSIONS: Versions = Versions::new(0, 0);
const GROUP_ID_NOT_FOUND: i16 = 69;

/// A group as listed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupListing {
    /// Group id.
    pub group_id: String,
    /// Protocol type (`consumer` for consumer groups, empty for groups that
    /// only commit offsets).
    pub protocol_type: String,
    /// State (`Stable`, `Empty`, ...), empty on brokers before ListGroups v4.
    pub state: String,
    /// Type (`classic`, `consumer`, `share`, ...), empty before v5.
    pub group_type: String,
    /// The coordinator's node id.
    pub coordinator: i32,
}

/// Which group protocol a described group uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum GroupType {
    /// JoinGroup/SyncGroup (or offsets only).
    Classic,
    /// The KIP-848 consumer protocol.
    Consumer,
}

/// One member of a described group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberDescription {
    /// Member id.
    pub member_id: String,
    /// Static membership id (KIP-345), if any.
    pub instance_id: Option<String>,
    /// The member's `client.id`.
    pub client_id: String,
    /// The member's host as the broker saw it.
    pub host: String,
    /// Assigned partitions, sorted.
    pub assignment: Vec<TopicPartition>,
}

/// A described group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupDescription {
    /// Group id.
    pub group_id: String,
    /// Classic or consumer protocol.
    pub group_type: GroupType,
    /// State (`Stable`, `Empty`, `Dead`, ...).
    pub state: String,
    /// Protocol type (classic groups; `consumer` for KIP-848 groups).
    pub protocol_type: String,
    /// The assignor (classic: the chosen protocol; KIP-848: the server
    /// assignor).
    pub assignor: String,
    /// The coordinator's node id.
    pub coordinator: i32,
    /// Members.
    pub members: Vec<MemberDescription>,
}

/// A committed offset.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommittedOffset {
    /// The next offset the group consumes.
    pub offset: i64,
    /// The leader epoch committed with it (-1 if none).
    pub leader_epoch: i32,
    /// Commit metadata.
    pub metadata: String,
}

fn s(b: &kafka_protocol::protocol::StrBytes) -> String {
    b.as_str().to_owned()
}

impl Admin {
    /// Lists the groups of every broker (each coordinates a share of them).
    /// `states`/`types` filter on the broker (empty: all).
    pub async fn list_groups(
        &self,
        states: &[String],
        types: &[String],
    ) -> Result<Vec<GroupListing>> {
        let req = ListGroupsRequest::default()
            .with_states_filter(states.iter().map(|x| str_bytes(x)).collect())
            .with_types_filter(types.iter().map(|x| str_bytes(x)).collect());
        let mut out = Vec::new();
        let answers = self
            .every_broker(&req, LIST_GROUPS_VERSIONS, "ListGroups", |r| r.error_code)
            .await?;
        for (coordinator, resp) in answers {
            out.extend(resp.groups.iter().map(|g| GroupListing {
                group_id: s(&g.group_id.0),
                protocol_type: s(&g.protocol_type),
                state: s(&g.group_state),
                group_type: s(&g.group_type),
                coordinator,
            }));
        }
        out.sort_by(|a, b| a.group_id.cmp(&b.group_id));
        Ok(out)
    }

    /// Describes groups, one result per group.
    pub async fn describe_groups(
        &self,
        groups: &[String],
    ) -> Result<PerResource<String, GroupDescription>> {
        let mut out = IndexMap::new();
        for g in groups {
            let r = match self.describe_consumer_group(g).await {
                Ok(Some(d)) => Ok(d),
                Ok(None) => self.describe_classic_group(g).await,
                Err(e) => Err(e),
            };
            out.insert(g.clone(), r);
        }
        Ok(out)
    }

    /// ConsumerGroupDescribe; `None` when the group is not a KIP-848 group
    /// (or the broker predates it).
    async fn describe_consumer_group(&self, group: &str) -> Result<Option<GroupDescription>> {
        let req =
            ConsumerGroupDescribeRequest::default().with_group_ids(vec![GroupId(str_bytes(group))]);
        let sent = self
            .send_coordinator(
                CoordinatorKind::Group,
                group,
                &req,
                CONSUMER_GROUP_DESCRIBE_VERSIONS,
                |r| r.groups.first().map_or(0, |g| g.error_code),
            )
            .await;
        let (addr, resp) = match sent {
            Ok(x) => x,
            Err(Error::UnsupportedVersion { .. }) => return Ok(None),
            Err(e) => return Err(e),
        };
        let Some(d) = resp.groups.iter().find(|d| d.group_id.0.as_str() == group) else {
            return Err(missing("ConsumerGroupDescribe", group));
        };
        if d.error_code == GROUP_ID_NOT_FOUND {
            return Ok(None);
        }
        check(
            d.error_code,
            d.error_message.as_ref(),
            "ConsumerGroupDescribe",
            &format!("group {group}"),
        )?;
        Ok(Some(GroupDescription {
            group_id: group.to_owned(),
            group_type: GroupType::Consumer,
            state: s(&d.group_state),
            protocol_type: "consumer".into(),
            assignor: s(&d.assignor_name),
            coordinator: addr.id.unwrap_or(-1),
            members: d
                .members
                .iter()
                .map(|m| {
                    let mut assignment: Vec<TopicPartition> = m
                        .assignment
                        .topic_partitions
                        .iter()
                        .flat_map(|t| {
                            let topic: std::sync::Arc<str> = t.topic_name.0.as_str().into();
                            t.partitions
                                .iter()
                                .map(move |p| TopicPartition::new(topic.clone(), *p))
                        })
                        .collect();
                    assignment.sort();
                    MemberDescription {
                        member_id: s(&m.member_id),
                        instance_id: m.instance_id.as_ref().map(s),
                        client_id: s(&m.client_id),
                        host: s(&m.client_host),
                        assignment,
                    }
                })
                .collect(),
        }))
    }

    async fn describe_classic_group(&self, group: &str) -> Result<GroupDescription> {
        let req = DescribeGroupsRequest::default().with_groups(vec![GroupId(str_bytes(group))]);
        let (addr, resp) = self
            .send_coordinator(
                CoordinatorKind::Group,
                group,
                &req,
                DESCRIBE_GROUPS_VERSIONS,
                |r| r.groups.first().map_or(0, |g| g.error_code),
            )
            .await?;
        let d = resp
            .groups
            .iter()
            .find(|d| d.group_id.0.as_str() == group)
            .ok_or_else(|| missing("DescribeGroups", group))?;
        check(
            d.error_code,
            d.error_message.as_ref(),
            "DescribeGroups",
            &format!("group {group}"),
        )?;
        let is_consumer = d.protocol_type.as_str() == "consumer";
        Ok(GroupDescription {
            group_id: group.to_owned(),
            group_type: GroupType::Classic,
            state: s(&d.group_state),
            protocol_type: s(&d.protocol_type),
            assignor: s(&d.protocol_data),
            coordinator: addr.id.unwrap_or(-1),
            members: d
                .members
                .iter()
                .map(|m| MemberDescription {
                    member_id: s(&m.member_id),
                    instance_id: m.group_instance_id.as_ref().map(s),
                    client_id: s(&m.client_id),
                    host: s(&m.client_host),
                    assignment: if is_consumer {
                        decode_assignment(m.member_assignment.clone()).unwrap_or_else(|e| {
                            warn!(group, member = %m.member_id.as_str(), error = %e, "undecodable assignment");
                            Vec::new()
                        })
                    } else {
                        Vec::new()
                    },
                })
                .collect(),
        })
    }

    /// Deletes groups (they must be empty), one result per group.
    pub async fn delete_groups(&self, groups: &[String]) -> Result<PerResource<String, ()>> {
        let mut out = IndexMap::new();
        for g in groups {
            let req = DeleteGroupsRequest::default().with_groups_names(vec![GroupId(str_bytes(g))]);
            let r = self
                .send_coordinator(
                    CoordinatorKind::Group,
                    g,
                    &req,
                    DELETE_GROUPS_VERSIONS,
                    |r| r.results.first().map_or(0, |x| x.error_code),
                )
                .await
                .and_then(|(_, resp)| {
                    let x = resp
                        .results
                        .iter()
                        .find(|x| x.group_id.0.as_str() == g)
                        .ok_or_else(|| missing("DeleteGroups", g))?;
                    check(x.error_code, None, "DeleteGroups", &format!("group {g}"))
                });
            out.insert(g.clone(), r);
        }
        Ok(out)
    }

    /// The group's committed offsets: all of them with `None`, else those of
    /// `partitions` (`None` where nothing is committed).
    pub async fn list_group_offsets(
        &self,
        group: &str,
        partitions: Option<&[TopicPartition]>,
    ) -> Result<BTreeMap<TopicPartition, Option<CommittedOffset>>> {
        let topics = partitions.map(|ps| {
            by_topic(ps.iter().map(|tp| (&*tp.topic, tp.partition)))
                .into_iter()
                .map(|(t, ps)| {
                    OffsetFetchRequestTopic::default()
                        .with_name(TopicName(str_bytes(t)))
                        .with_partition_indexes(ps)
                })
                .collect()
        });
        let req = OffsetFetchRequest::default()
            .with_group_id(GroupId(str_bytes(group)))
            .with_topics(topics);
        let (_, resp) = self
            .send_coordinator(
                CoordinatorKind::Group,
                group,
                &req,
                OFFSET_FETCH_VERSIONS,
                |r| r.error_code,
            )
            .await?;
        check(
            resp.error_code,
            None,
            "OffsetFetch",
            &format!("group {group}"),
        )?;
        let mut out = BTreeMap::new();
        for t in &resp.topics {
            for p in &t.partitions {
                let tp = TopicPartition::new(t.name.0.as_str(), p.partition_index);
                check(
                    p.error_code,
                    None,
                    "OffsetFetch",
                    &format!("group {group} {tp}"),
                )?;
                let c = (p.committed_offset >= 0).then(|| CommittedOffset {
                    offset: p.committed_offset,
                    leader_epoch: p.committed_leader_epoch,
                    metadata: p.metadata.as_ref().map(s).unwrap_or_default(),
                });
                out.insert(tp, c);
            }
        }
        if let Some(ps) = partitions {
            for tp in ps {
                out.entry(tp.clone()).or_insert(None);
            }
        }
        Ok(out)
    }

    /// Commits offsets for `group` as an admin (no member id, generation
    /// -1). The coordinator accepts this only while the group has no active
    /// members; otherwise each partition fails with UNKNOWN_MEMBER_ID.
    pub async fn alter_group_offsets(
        &self,
        group: &str,
        offsets: &[(TopicPartition, i64)],
    ) -> Result<BTreeMap<TopicPartition, Result<()>>> {
        let partitions = by_topic(offsets.iter().map(|(tp, o)| {
            let p = OffsetCommitRequestPartition::default()
                .with_partition_index(tp.partition)
                .with_committed_offset(*o)
                .with_committed_leader_epoch(-1);
            (&*tp.topic, p)
        }));
        let req = OffsetCommitRequest::default()
            .with_group_id(GroupId(str_bytes(group)))
            .with_generation_id_or_member_epoch(-1)
            .with_retention_time_ms(-1)
            .with_topics(
                partitions
                    .into_iter()
                    .map(|(t, ps)| {
                        OffsetCommitRequestTopic::default()
                            .with_name(TopicName(str_bytes(t)))
                            .with_partitions(ps)
                    })
                    .collect(),
            );
        let (_, resp) = self
            .send_coordinator(
                CoordinatorKind::Group,
                group,
                &req,
                OFFSET_COMMIT_VERSIONS,
                |r| {
                    r.topics
                        .first()
                        .and_then(|t| t.partitions.first())
                        .map_or(0, |p| p.error_code)
                },
            )
            .await?;
        Ok(partition_results(
            offsets.iter().map(|(tp, _)| tp),
            "OffsetCommit",
            &format!("group {group}"),
            |tp| {
                resp.topics
                    .iter()
                    .filter(|t| t.name.0.as_str() == &*tp.topic)
                    .flat_map(|t| t.partitions.iter())
                    .find(|p| p.partition_index == tp.partition)
                    .map(|p| (p.error_code, None))
            },
        ))
    }

    /// Deletes the group's committed offsets of `partitions` (KIP-496). A
    /// partition of a topic the group is subscribed to fails with
    /// GROUP_SUBSCRIBED_TO_TOPIC.
    pub async fn delete_group_offsets(
        &self,
        group: &str,
        partitions: &[TopicPartition],
    ) -> Result<BTreeMap<TopicPartition, Result<()>>> {
        let by_name = by_topic(partitions.iter().map(|tp| {
            let p = OffsetDeleteRequestPartition::default().with_partition_index(tp.partition);
            (&*tp.topic, p)
        }));
        let req = OffsetDeleteRequest::default()
            .with_group_id(GroupId(str_bytes(group)))
            .with_topics(
                by_name
                    .into_iter()
                    .map(|(t, ps)| {
                        OffsetDeleteRequestTopic::default()
                            .with_name(TopicName(str_bytes(t)))
                            .with_partitions(ps)
                    })
                    .collect(),
            );
        let (_, resp) = self
            .send_coordinator(
                CoordinatorKind::Group,
                group,
                &req,
                OFFSET_DELETE_VERSIONS,
                |r| r.error_code,
            )
            .await?;
        check(
            resp.error_code,
            None,
            "OffsetDelete",
            &format!("group {group}"),
        )?;
        Ok(partition_results(
            partitions,
            "OffsetDelete",
            &format!("group {group}"),
            |tp| {
                resp.topics
                    .iter()
                    .filter(|t| t.name.0.as_str() == &*tp.topic)
                    .flat_map(|t| t.partitions.iter())
                    .find(|p| p.partition_index == tp.partition)
                    .map(|p| (p.error_code, None))
            },
        ))
    }
}
