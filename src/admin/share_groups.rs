//! Share groups (KIP-932) for administrators: list them, describe them
//! (ShareGroupDescribe, API 77), and set their group configs
//! (IncrementalAlterConfigs on the GROUP resource, KIP-848/KIP-932:
//! `share.auto.offset.reset`, `share.record.lock.duration.ms`,
//! `share.isolation.level`, ...), and read where each partition's
//! share-partition start offset stands (DescribeShareGroupOffsets, API 90),
//! move it (AlterShareGroupOffsets, API 91) or forget it for whole topics
//! (DeleteShareGroupOffsets, API 92), and delete share groups (DeleteGroups,
//! API 42). The last three, as Java's `Admin`, need the group to be empty.
//! See <https://cwiki.apache.org/confluence/display/KAFKA/KIP-932%3A+Queues+for+Kafka>.

use std::collections::BTreeMap;

use indexmap::IndexMap;
use kafka_protocol::messages::alter_share_group_offsets_request::{
    AlterShareGroupOffsetsRequestPartition, AlterShareGroupOffsetsRequestTopic,
};
use kafka_protocol::messages::delete_share_group_offsets_request::DeleteShareGroupOffsetsRequestTopic;
use kafka_protocol::messages::describe_share_group_offsets_request::DescribeShareGroupOffsetsRequestGroup;
use kafka_protocol::messages::{
    AlterShareGroupOffsetsRequest, DeleteShareGroupOffsetsRequest,
    DescribeShareGroupOffsetsRequest, GroupId, ShareGroupDescribeRequest, TopicName,
};
use kafka_protocol::protocol::{Request, StrBytes};

use super::{
    by_topic, check, missing, partition_results, str_bytes, Admin, AlterConfigOp, ConfigResource,
    GroupListing, PerResource, ResetPlan, ResetSpec,
};
use crate::cluster::CoordinatorKind;
use crate::error::Result;
use crate::net::Workload;
use crate::protocol::versions::Versions;
use crate::TopicPartition;

const SHARE_GROUP_DESCRIBE_VERSIONS: Versions = Versions::new(1, 1);
const DESCRIBE_SHARE_OFFSETS_VERSIONS: Versions = Versions::new(0, 0);
const ALTER_SHARE_OFFSETS_VERSIONS: Versions = Versions::new(0, 0);
const DELETE_SHARE_OFFSETS_VERSIONS: Versions = Versions::new(0, 0);

/// One member of a described share group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShareMemberDescription {
    /// The member id (client-generated).
    pub member_id: String,
    /// The member's epoch.
    pub member_epoch: i32,
    /// `client.id` of the member's client.
    pub client_id: String,
    /// The client's host as the broker saw it.
    pub client_host: String,
    /// Topics the member subscribed to.
    pub subscribed_topics: Vec<String>,
    /// Partitions the broker assigned to it (others may share them).
    pub assignment: Vec<TopicPartition>,
}

/// A described share group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShareGroupDescription {
    /// The group id.
    pub group_id: String,
    /// `Empty`, `Stable`, `Dead`, ...
    pub state: String,
    /// The group epoch.
    pub group_epoch: i32,
    /// The assignment epoch.
    pub assignment_epoch: i32,
    /// The broker-side assignor.
    pub assignor: String,
    /// The members.
    pub members: Vec<ShareMemberDescription>,
}

impl Admin {
    /// The share groups of every broker.
    pub async fn list_share_groups(&self) -> Result<Vec<GroupListing>> {
        self.list_groups(&[], &["share".to_owned()]).await
    }

    /// Describes share groups through their coordinators, one result per
    /// group.
    pub async fn describe_share_groups(
        &self,
        groups: &[String],
    ) -> Result<PerResource<String, ShareGroupDescription>> {
        let mut out = IndexMap::new();
        for group in groups {
            out.insert(group.clone(), self.describe_share_group(group).await);
        }
        Ok(out)
    }

    async fn describe_share_group(&self, group: &str) -> Result<ShareGroupDescription> {
        let addr = self
            .cluster
            .coordinator(CoordinatorKind::Group, group)
            .await?;
        let req =
            ShareGroupDescribeRequest::default().with_group_ids(vec![GroupId(str_bytes(group))]);
        let resp = self
            .cluster
            .send(&addr, Workload::Admin, &req, SHARE_GROUP_DESCRIBE_VERSIONS)
            .await?;
        let resource = format!("share group {group} at {addr}");
        let g = answered_group(resp.groups, group, "ShareGroupDescribe", &resource, |g| {
            (g.group_id.as_str(), g.error_code, g.error_message.as_ref())
        })?;
        Ok(ShareGroupDescription {
            group_id: group.to_owned(),
            state: g.group_state.to_string(),
            group_epoch: g.group_epoch,
            assignment_epoch: g.assignment_epoch,
            assignor: g.assignor_name.to_string(),
            members: g
                .members
                .into_iter()
                .map(|m| ShareMemberDescription {
                    member_id: m.member_id.to_string(),
                    member_epoch: m.member_epoch,
                    client_id: m.client_id.to_string(),
                    client_host: m.client_host.to_string(),
                    subscribed_topics: m
                        .subscribed_topic_names
                        .iter()
                        .map(|t| t.0.to_string())
                        .collect(),
                    assignment: m
                        .assignment
                        .topic_partitions
                        .iter()
                        .flat_map(|t| {
                            t.partitions
                                .iter()
                                .map(|p| TopicPartition::new(t.topic_name.0.as_str(), *p))
                        })
                        .collect(),
                })
                .collect(),
        })
    }

    /// The share-partition start offset (SPSO: every record before it is
    /// done) of each partition the share group has state for; one result
    /// per partition.
    pub async fn describe_share_group_offsets(
        &self,
        group: &str,
    ) -> Result<BTreeMap<TopicPartition, Result<i64>>> {
        let addr = self
            .cluster
            .coordinator(CoordinatorKind::Group, group)
            .await?;
        let req = DescribeShareGroupOffsetsRequest::default().with_groups(vec![
            DescribeShareGroupOffsetsRequestGroup::default()
                .with_group_id(GroupId(str_bytes(group)))
                .with_topics(None),
        ]);
        let resp = self
            .cluster
            .send(
                &addr,
                Workload::Admin,
                &req,
                DESCRIBE_SHARE_OFFSETS_VERSIONS,
            )
            .await?;
        let resource = format!("share group {group} at {addr}");
        let g = answered_group(
            resp.groups,
            group,
            "DescribeShareGroupOffsets",
            &resource,
            |g| (g.group_id.as_str(), g.error_code, g.error_message.as_ref()),
        )?;
        let mut out = BTreeMap::new();
        for t in g.topics {
            for p in t.partitions {
                let tp = TopicPartition::new(t.topic_name.0.as_str(), p.partition_index);
                let r = check(
                    p.error_code,
                    p.error_message.as_ref(),
                    "DescribeShareGroupOffsets",
                    &format!("{tp} of {resource}"),
                )
                .map(|()| p.start_offset);
                out.insert(tp, r);
            }
        }
        Ok(out)
    }

    /// Moves the share-partition start offsets of `group` (Java's
    /// `Admin.alterShareGroupOffsets`): each partition's records from its
    /// new start offset on are delivered again, those before it never. The
    /// group must be empty (NON_EMPTY_GROUP otherwise) and must exist
    /// (GROUP_ID_NOT_FOUND); either fails the whole call. One result per
    /// partition.
    pub async fn alter_share_group_offsets(
        &self,
        group: &str,
        offsets: &[(TopicPartition, i64)],
    ) -> Result<BTreeMap<TopicPartition, Result<()>>> {
        let by_name = by_topic(offsets.iter().map(|(tp, o)| {
            let p = AlterShareGroupOffsetsRequestPartition::default()
                .with_partition_index(tp.partition)
                .with_start_offset(*o);
            (&*tp.topic, p)
        }));
        let req = AlterShareGroupOffsetsRequest::default()
            .with_group_id(GroupId(str_bytes(group)))
            .with_topics(
                by_name
                    .into_iter()
                    .map(|(t, ps)| {
                        AlterShareGroupOffsetsRequestTopic::default()
                            .with_topic_name(TopicName(str_bytes(t)))
                            .with_partitions(ps)
                    })
                    .collect(),
            );
        let (resource, resp) = self
            .share_offsets_call(
                group,
                &req,
                ALTER_SHARE_OFFSETS_VERSIONS,
                "AlterShareGroupOffsets",
                |r| (r.error_code, r.error_message.as_ref()),
            )
            .await?;
        Ok(partition_results(
            offsets.iter().map(|(tp, _)| tp),
            "AlterShareGroupOffsets",
            &resource,
            |tp| {
                resp.responses
                    .iter()
                    .filter(|t| t.topic_name.0.as_str() == &*tp.topic)
                    .flat_map(|t| t.partitions.iter())
                    .find(|p| p.partition_index == tp.partition)
                    .map(|p| (p.error_code, p.error_message.as_ref()))
            },
        ))
    }

    /// Deletes the share group's state for whole `topics` (Java's
    /// `Admin.deleteShareGroupOffsets`): the group forgets where it stood,
    /// and starts over by `share.auto.offset.reset` if it subscribes again.
    /// The group must be empty (NON_EMPTY_GROUP otherwise, failing the whole
    /// call). One result per topic.
    pub async fn delete_share_group_offsets(
        &self,
        group: &str,
        topics: &[String],
    ) -> Result<BTreeMap<String, Result<()>>> {
        let req = DeleteShareGroupOffsetsRequest::default()
            .with_group_id(GroupId(str_bytes(group)))
            .with_topics(
                topics
                    .iter()
                    .map(|t| {
                        DeleteShareGroupOffsetsRequestTopic::default()
                            .with_topic_name(TopicName(str_bytes(t)))
                    })
                    .collect(),
            );
        let (resource, resp) = self
            .share_offsets_call(
                group,
                &req,
                DELETE_SHARE_OFFSETS_VERSIONS,
                "DeleteShareGroupOffsets",
                |r| (r.error_code, r.error_message.as_ref()),
            )
            .await?;
        let mut out = BTreeMap::new();
        for topic in topics {
            let what = format!("topic {topic} of {resource}");
            let r = resp
                .responses
                .iter()
                .find(|t| t.topic_name.0.as_str() == topic)
                .ok_or_else(|| missing("DeleteShareGroupOffsets", &what))
                .and_then(|t| {
                    check(
                        t.error_code,
                        t.error_message.as_ref(),
                        "DeleteShareGroupOffsets",
                        &what,
                    )
                });
            out.insert(topic.clone(), r);
        }
        Ok(out)
    }

    /// Deletes share groups (Java's `Admin.deleteShareGroups`), one result
    /// per group: each must be a share group (else GROUP_ID_NOT_FOUND, from
    /// ShareGroupDescribe, and nothing is deleted) and empty (else
    /// NON_EMPTY_GROUP, from DeleteGroups). The broker drops the group's
    /// share-partition state with it.
    pub async fn delete_share_groups(&self, groups: &[String]) -> Result<PerResource<String, ()>> {
        let mut out = IndexMap::new();
        for group in groups {
            let r = match self.describe_share_group(group).await {
                Ok(_) => self
                    .delete_groups(std::slice::from_ref(group))
                    .await
                    .and_then(|mut d| {
                        d.shift_remove(group)
                            .unwrap_or_else(|| Err(missing("DeleteGroups", group)))
                    }),
                Err(e) => Err(e),
            };
            out.insert(group.clone(), r);
        }
        Ok(out)
    }

    /// Plans a reset of `group`'s share-partition start offsets on
    /// `partitions`, as `kafka-share-groups.sh --reset-offsets --dry-run`
    /// shows it: `current` is the start offset now (none where the group
    /// has no state), the target is computed by [`super::plan_reset`]
    /// ([`ResetSpec::ShiftBy`] counts from the start offset). Changes
    /// nothing; apply it with [`Admin::alter_share_group_offsets`].
    pub async fn plan_share_group_offset_reset(
        &self,
        group: &str,
        partitions: &[TopicPartition],
        spec: ResetSpec,
    ) -> Result<Vec<ResetPlan>> {
        let starts = self.describe_share_group_offsets(group).await?;
        self.plan_resets(partitions, spec, |tp| match starts.get(tp) {
            Some(Ok(o)) if *o >= 0 => Ok(Some(*o)),
            Some(Err(e)) => Err(e.clone()),
            _ => Ok(None),
        })
        .await
    }

    /// Sends a share-group offsets request to the group's coordinator and
    /// checks its top-level error; returns the resource name errors use
    /// ("share group G at broker") with the answer.
    async fn share_offsets_call<R: Request>(
        &self,
        group: &str,
        req: &R,
        versions: Versions,
        api: &str,
        top_error: impl Fn(&R::Response) -> (i16, Option<&StrBytes>),
    ) -> Result<(String, R::Response)> {
        let (addr, resp) = self
            .send_coordinator(CoordinatorKind::Group, group, req, versions, |r| {
                top_error(r).0
            })
            .await?;
        let resource = format!("share group {group} at {addr}");
        let (code, message) = top_error(&resp);
        check(code, message, api, &resource)?;
        Ok((resource, resp))
    }

    /// Changes a group's configs key by key (IncrementalAlterConfigs on
    /// the GROUP resource), e.g. `share.auto.offset.reset=earliest` or
    /// `share.record.lock.duration.ms`. The broker checks each key against
    /// its bounds (`group.share.min.record.lock.duration.ms`, ...).
    pub async fn alter_group_configs(&self, group: &str, ops: &[AlterConfigOp]) -> Result<()> {
        let resource = ConfigResource::Group(group.to_owned());
        let mut out = self
            .incremental_alter_configs(&[(resource.clone(), ops.to_vec())], false)
            .await?;
        out.shift_remove(&resource).unwrap_or_else(|| {
            Err(super::missing(
                "IncrementalAlterConfigs",
                &resource.to_string(),
            ))
        })
    }
}

/// `group`'s entry in an answer naming groups, its error code checked; an
/// answer without it is a protocol error naming `api` and `resource`.
pub(super) fn answered_group<G>(
    groups: Vec<G>,
    group: &str,
    api: &str,
    resource: &str,
    fields: impl Fn(&G) -> (&str, i16, Option<&StrBytes>),
) -> Result<G> {
    let g = groups
        .into_iter()
        .find(|g| fields(g).0 == group)
        .ok_or_else(|| super::missing(api, resource))?;
    let (_, code, message) = fields(&g);
    check(code, message, api, resource)?;
    Ok(g)
}
