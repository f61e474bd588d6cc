//! ConsumerGroupDescribe (API key 69, KIP-848): the state, epochs, assignor
//! and members (subscriptions, current and target assignments) of a
//! consumer-protocol group. A classic or streams group, or none, gets
//! GROUP_ID_NOT_FOUND, as Kafka answers.

use std::collections::BTreeSet;

use kafka_protocol::messages::consumer_group_describe_response::{
    Assignment, DescribedGroup, Member, TopicPartitions,
};
use kafka_protocol::messages::{
    ConsumerGroupDescribeRequest, ConsumerGroupDescribeResponse, TopicName,
};
use kafka_protocol::protocol::StrBytes;

use super::consumer_groups::{ConsumerGroup, TopicView};
use super::errors::Code;
use super::state::ClusterState;

/// The member type ConsumerGroupDescribe v1 reports for a member that
/// joined with ConsumerGroupHeartbeat.
const CONSUMER_MEMBER: i8 = 1;

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_owned())
}

fn assignment(tps: &BTreeSet<(String, i32)>, topics: &TopicView) -> Assignment {
    let mut out: Vec<TopicPartitions> = Vec::new();
    for (topic, p) in tps {
        match out.iter_mut().find(|t| t.topic_name.0.as_str() == topic) {
            Some(t) => t.partitions.push(*p),
            None => out.push(
                TopicPartitions::default()
                    .with_topic_id(topics.get(topic).map(|(id, _)| *id).unwrap_or_default())
                    .with_topic_name(TopicName(s(topic)))
                    .with_partitions(vec![*p]),
            ),
        }
    }
    Assignment::default().with_topic_partitions(out)
}

fn state(g: &ConsumerGroup) -> &'static str {
    if g.members.is_empty() {
        return "Empty";
    }
    let settled = g.members.values().all(|m| {
        m.epoch == g.epoch
            && m.revoking.is_empty()
            && g.target.get(&m.id).is_none_or(|t| *t == m.assigned)
    });
    if settled {
        "Stable"
    } else {
        "Reconciling"
    }
}

impl ClusterState {
    pub(super) fn consumer_group_describe(
        &self,
        broker: i32,
        req: ConsumerGroupDescribeRequest,
    ) -> ConsumerGroupDescribeResponse {
        let topics = self.topic_view();
        let groups = req
            .group_ids
            .into_iter()
            .map(|gid| {
                let id = gid.0.to_string();
                let refuse = |code: Code, message: String| {
                    DescribedGroup::default()
                        .with_group_id(gid.clone())
                        .with_error_code(code.value())
                        .with_error_message(Some(StrBytes::from_string(message)))
                };
                if !self.is_coordinator(broker, &id) {
                    return refuse(
                        Code::NotCoordinator,
                        format!("broker {broker} does not coordinate group {id}"),
                    );
                }
                let Some(g) = self.groups.consumer.get(&id) else {
                    let other = self.groups.streams.contains_key(&id)
                        || self
                            .groups
                            .groups
                            .get(&id)
                            .is_some_and(|g| !g.members.is_empty());
                    let message = if other {
                        format!("Group {id} is not a consumer group.")
                    } else {
                        format!("Group {id} not found.")
                    };
                    return refuse(Code::GroupIdNotFound, message);
                };
                let members = g
                    .members
                    .values()
                    .map(|m| {
                        let owned = m.assigned.union(&m.revoking).cloned().collect();
                        Member::default()
                            .with_member_id(s(&m.id))
                            .with_instance_id(m.instance_id.as_deref().map(s))
                            .with_member_epoch(m.epoch)
                            .with_subscribed_topic_names(
                                m.names.iter().map(|n| TopicName(s(n))).collect(),
                            )
                            .with_subscribed_topic_regex(m.regex.as_ref().map(|r| {
                                let anchored = r.as_str();
                                // Stored as ^(?:...)$; answered as sent.
                                s(anchored
                                    .strip_prefix("^(?:")
                                    .and_then(|x| x.strip_suffix(")$"))
                                    .unwrap_or(anchored))
                            }))
                            .with_assignment(assignment(&owned, &topics))
                            .with_target_assignment(assignment(
                                g.target.get(&m.id).unwrap_or(&BTreeSet::new()),
                                &topics,
                            ))
                            .with_member_type(CONSUMER_MEMBER)
                    })
                    .collect();
                DescribedGroup::default()
                    .with_group_id(gid)
                    .with_group_state(StrBytes::from_static_str(state(g)))
                    .with_group_epoch(g.epoch)
                    .with_assignment_epoch(g.epoch)
                    .with_assignor_name(StrBytes::from_static_str("uniform"))
                    .with_members(members)
            })
            .collect();
        ConsumerGroupDescribeResponse::default().with_groups(groups)
    }
}
