//! Admin APIs on groups and producers: DeleteGroups (KIP-229),
//! OffsetDelete (KIP-496) and DescribeProducers (KIP-664), with the
//! broker's error codes: `NON_EMPTY_GROUP`, `GROUP_ID_NOT_FOUND`,
//! `GROUP_SUBSCRIBED_TO_TOPIC`, `NOT_COORDINATOR`,
//! `NOT_LEADER_OR_FOLLOWER`, `UNKNOWN_TOPIC_OR_PARTITION`.

use std::collections::BTreeSet;

use kafka_protocol::messages::delete_groups_response::DeletableGroupResult;
use kafka_protocol::messages::describe_producers_response::{
    PartitionResponse, ProducerState, TopicResponse,
};
use kafka_protocol::messages::offset_delete_response::{
    OffsetDeleteResponsePartition, OffsetDeleteResponseTopic,
};
use kafka_protocol::messages::*;
use purekafka::protocol::consumer_protocol::decode_subscription;

use super::errors::Code;
use super::shapes::per_partition;
use super::state::ClusterState;

impl ClusterState {
    /// Whether `group` exists: members, or committed offsets.
    fn group_exists(&self, group: &str) -> bool {
        self.groups.groups.contains_key(group)
            || self.groups.consumer.contains_key(group)
            || self.groups.streams.contains_key(group)
    }

    /// Whether `group` has members now (classic or KIP-848).
    fn group_has_members(&self, group: &str) -> bool {
        self.groups
            .groups
            .get(group)
            .is_some_and(|g| !g.members.is_empty())
            || self
                .groups
                .consumer
                .get(group)
                .is_some_and(|g| !g.members.is_empty())
            || self
                .groups
                .streams
                .get(group)
                .is_some_and(|g| !g.members.is_empty())
    }

    /// Topics the live members of `group` subscribe to: KIP-848 members'
    /// subscriptions, and classic members' consumer-protocol metadata.
    fn subscribed_topics(&self, group: &str) -> BTreeSet<String> {
        let mut out = BTreeSet::new();
        if let Some(g) = self.groups.consumer.get(group) {
            for m in g.members.values() {
                out.extend(m.subscribed.iter().cloned());
            }
        }
        if let Some(g) = self.groups.groups.get(group) {
            if g.protocol_type.as_deref() == Some("consumer") {
                for m in g.members.values() {
                    for (_, meta) in &m.protocols {
                        if let Ok(sub) = decode_subscription(meta.clone()) {
                            out.extend(sub.topics);
                        }
                    }
                }
            }
        }
        out
    }

    pub(super) fn delete_groups(
        &mut self,
        broker: i32,
        req: DeleteGroupsRequest,
    ) -> DeleteGroupsResponse {
        let results = req
            .groups_names
            .into_iter()
            .map(|gid| {
                let id = gid.0.to_string();
                let code = if !self.is_coordinator(broker, &id) {
                    Code::NotCoordinator
                } else if !self.group_exists(&id) {
                    Code::GroupIdNotFound
                } else if self.group_has_members(&id) {
                    Code::NonEmptyGroup
                } else {
                    self.groups.groups.remove(&id);
                    self.groups.consumer.remove(&id);
                    self.groups.streams.remove(&id);
                    Code::None
                };
                DeletableGroupResult::default()
                    .with_group_id(gid)
                    .with_error_code(code.value())
            })
            .collect();
        DeleteGroupsResponse::default().with_results(results)
    }

    pub(super) fn offset_delete(
        &mut self,
        broker: i32,
        req: OffsetDeleteRequest,
    ) -> OffsetDeleteResponse {
        let group = req.group_id.0.to_string();
        let refused = if !self.is_coordinator(broker, &group) {
            Some(Code::NotCoordinator)
        } else if !self.group_exists(&group) {
            Some(Code::GroupIdNotFound)
        } else {
            None
        };
        if let Some(code) = refused {
            return OffsetDeleteResponse::default().with_error_code(code.value());
        }
        let subscribed = self.subscribed_topics(&group);
        let mut offsets = self.groups.groups.get_mut(&group).map(|g| &mut g.offsets);
        let topics = per_partition(
            req.topics,
            |t| (t.name, t.partitions),
            |topic, p| {
                let code = if subscribed.contains(topic) {
                    Code::GroupSubscribedToTopic
                } else {
                    if let Some(o) = offsets.as_deref_mut() {
                        o.remove(&(topic.to_string(), p.partition_index));
                    }
                    Code::None
                };
                OffsetDeleteResponsePartition::default()
                    .with_partition_index(p.partition_index)
                    .with_error_code(code.value())
            },
            |name, partitions| {
                OffsetDeleteResponseTopic::default()
                    .with_name(name)
                    .with_partitions(partitions)
            },
        );
        OffsetDeleteResponse::default().with_topics(topics)
    }

    pub(super) fn describe_producers(
        &self,
        broker: i32,
        req: DescribeProducersRequest,
    ) -> DescribeProducersResponse {
        let topics = per_partition(
            req.topics,
            |t| (t.name, t.partition_indexes),
            |topic, index| {
                let r = PartitionResponse::default().with_partition_index(index);
                let Some(log) = self.partition(topic, index) else {
                    return r.with_error_code(Code::UnknownTopicOrPartition.value());
                };
                if log.leader != broker {
                    return r.with_error_code(Code::NotLeaderOrFollower.value());
                }
                let producers = log
                    .producer_states()
                    .into_iter()
                    .map(|s| {
                        ProducerState::default()
                            .with_producer_id(ProducerId(s.producer_id))
                            .with_producer_epoch(i32::from(s.epoch))
                            .with_last_sequence(s.last_sequence)
                            .with_last_timestamp(s.last_timestamp)
                            .with_coordinator_epoch(-1)
                            .with_current_txn_start_offset(s.txn_start_offset)
                    })
                    .collect();
                r.with_active_producers(producers)
            },
            |name, partitions| {
                TopicResponse::default()
                    .with_name(name)
                    .with_partitions(partitions)
            },
        );
        DescribeProducersResponse::default().with_topics(topics)
    }
}
