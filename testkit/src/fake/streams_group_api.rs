//! Streams groups on the wire (KIP-1071): StreamsGroupHeartbeat (API key
//! 88), which also creates the group's missing internal topics as a Kafka
//! 4.4 coordinator does, and StreamsGroupDescribe (89). The rules live in
//! [`super::streams_groups`].

use kafka_protocol::messages::streams_group_describe_response::DescribedGroup;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;

use super::errors::Code;
use super::state::ClusterState;
use super::streams_groups::{for_version, Beat};

impl ClusterState {
    /// Whether `group` is a classic group with members or a KIP-848 group:
    /// then it is not a streams group.
    fn is_other_group(&self, group: &str) -> bool {
        self.groups
            .groups
            .get(group)
            .is_some_and(|g| !g.members.is_empty())
            || self
                .groups
                .consumer
                .get(group)
                .is_some_and(|g| !g.members.is_empty())
    }

    pub(super) fn streams_group_heartbeat(
        &mut self,
        broker: i32,
        client_id: &str,
        version: i16,
        req: StreamsGroupHeartbeatRequest,
        now_ms: i64,
    ) -> StreamsGroupHeartbeatResponse {
        let group = req.group_id.0.to_string();
        let refuse = |code: Code, message: String| {
            StreamsGroupHeartbeatResponse::default()
                .with_error_code(code.value())
                .with_error_message(Some(StrBytes::from_string(message)))
        };
        if !self.is_coordinator(broker, &group) {
            return refuse(
                Code::NotCoordinator,
                format!("broker {broker} does not coordinate group {group}"),
            );
        }
        if self.is_other_group(&group) {
            return refuse(
                Code::GroupIdNotFound,
                format!("Group {group} is not a streams group."),
            );
        }
        if req.member_epoch != 0 && !self.groups.streams.contains_key(&group) {
            return refuse(
                Code::GroupIdNotFound,
                format!("Streams group {group} not found."),
            );
        }
        let view = self.topic_view();
        let Beat { response, create } = self
            .groups
            .streams
            .entry(group)
            .or_default()
            .heartbeat(&req, &view, client_id, now_ms);
        let default_rf = self.alive_brokers().count().min(3) as i16;
        for (topic, partitions) in create {
            let rf = if topic.replication_factor > 0 {
                topic.replication_factor
            } else {
                default_rf
            };
            // A failure leaves the status MISSING_INTERNAL_TOPICS in place:
            // the next heartbeat tries again, as Kafka's does.
            if self.create_topic(&topic.name, partitions, rf).is_ok() {
                if let Some(t) = self.topics.get_mut(&topic.name) {
                    t.configs = topic.configs;
                }
            }
        }
        for_version(response, version)
    }

    pub(super) fn streams_group_describe(
        &self,
        broker: i32,
        req: StreamsGroupDescribeRequest,
    ) -> StreamsGroupDescribeResponse {
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
                match self.groups.streams.get(&id) {
                    Some(g) => g.describe(&id),
                    None if self.is_other_group(&id) => refuse(
                        Code::GroupIdNotFound,
                        format!("Group {id} is not a streams group."),
                    ),
                    None => refuse(Code::GroupIdNotFound, format!("Group {id} not found.")),
                }
            })
            .collect();
        StreamsGroupDescribeResponse::default().with_groups(groups)
    }
}
