//! The group APIs on the wire: FindCoordinator (KIP-699 batches), JoinGroup,
//! SyncGroup, Heartbeat, LeaveGroup (KIP-345 batches), OffsetCommit,
//! OffsetFetch (KIP-709 batches), DescribeGroups and ListGroups. The rules
//! live in [`super::groups`]; this file maps requests and responses.

use kafka_protocol::messages::describe_groups_response::{DescribedGroup, DescribedGroupMember};
use kafka_protocol::messages::find_coordinator_response::Coordinator;
use kafka_protocol::messages::leave_group_response::MemberResponse;
use kafka_protocol::messages::list_groups_response::ListedGroup;
use kafka_protocol::messages::offset_commit_response::{
    OffsetCommitResponsePartition, OffsetCommitResponseTopic,
};
use kafka_protocol::messages::offset_fetch_response::{
    OffsetFetchResponseGroup, OffsetFetchResponsePartition, OffsetFetchResponsePartitions,
    OffsetFetchResponseTopic, OffsetFetchResponseTopics,
};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;

use super::consumer_groups::TopicView;
use super::errors::Code;
use super::groups::{Committed, JoinArgs, JoinOutcome};
use super::shapes::per_partition;
use super::state::{BrokerInfo, ClusterState, Reply};
use super::wire::{FakeResponse, Header};

impl ClusterState {
    /// The broker coordinating `key` (a group or transactional id): a
    /// stable hash over the live brokers, so failing a broker moves it.
    pub fn coordinator_for(&self, key: &str) -> Option<&BrokerInfo> {
        let alive: Vec<&BrokerInfo> = self.alive_brokers().collect();
        if alive.is_empty() {
            return None;
        }
        let hash = key.bytes().fold(0x811c_9dc5_u32, |h, b| {
            (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
        });
        alive.get(hash as usize % alive.len()).copied()
    }

    pub(super) fn is_coordinator(&self, broker: i32, key: &str) -> bool {
        self.coordinator_for(key).is_some_and(|b| b.id == broker)
    }

    /// Topic name -> (id, partitions), for the KIP-848 assignor.
    pub(super) fn topic_view(&self) -> TopicView {
        self.topics
            .iter()
            .map(|(n, t)| (n.clone(), (t.id, t.partitions.len() as i32)))
            .collect()
    }

    pub(super) fn consumer_group_heartbeat(
        &mut self,
        broker: i32,
        req: ConsumerGroupHeartbeatRequest,
        now_ms: i64,
    ) -> ConsumerGroupHeartbeatResponse {
        let group = req.group_id.0.to_string();
        if !self.is_coordinator(broker, &group) {
            return ConsumerGroupHeartbeatResponse::default()
                .with_error_code(Code::NotCoordinator.value())
                .with_member_epoch(-1);
        }
        let classic_members = self
            .groups
            .groups
            .get(&group)
            .is_some_and(|g| !g.members.is_empty());
        let streams = self
            .groups
            .streams
            .get(&group)
            .is_some_and(|g| !g.members.is_empty());
        if classic_members || streams {
            return ConsumerGroupHeartbeatResponse::default()
                .with_error_code(Code::GroupIdNotFound.value())
                .with_member_epoch(-1);
        }
        let view = self.topic_view();
        self.next_member_id += 1;
        let fresh = format!("fake-member-{}", self.next_member_id);
        self.groups
            .consumer
            .entry(group)
            .or_default()
            .heartbeat(&req, &view, fresh, now_ms)
    }

    pub(super) fn find_coordinator(
        &self,
        req: FindCoordinatorRequest,
        version: i16,
    ) -> FindCoordinatorResponse {
        let keys = if version >= 4 {
            req.coordinator_keys
        } else {
            vec![req.key]
        };
        let coordinators: Vec<Coordinator> = keys
            .into_iter()
            .map(|key| match self.coordinator_for(key.as_str()) {
                Some(b) => Coordinator::default()
                    .with_key(key)
                    .with_node_id(BrokerId(b.id))
                    .with_host(StrBytes::from_string(b.host.clone()))
                    .with_port(i32::from(b.port)),
                None => Coordinator::default()
                    .with_key(key)
                    .with_node_id(BrokerId(-1))
                    .with_error_code(Code::CoordinatorNotAvailable.value()),
            })
            .collect();
        if version >= 4 {
            return FindCoordinatorResponse::default().with_coordinators(coordinators);
        }
        let c = coordinators.into_iter().next().unwrap_or_default();
        FindCoordinatorResponse::default()
            .with_error_code(c.error_code)
            .with_node_id(c.node_id)
            .with_host(c.host)
            .with_port(c.port)
    }

    pub(super) fn join_group(
        &mut self,
        broker: i32,
        header: &Header,
        req: JoinGroupRequest,
        now_ms: i64,
    ) -> Reply {
        let group = req.group_id.0.to_string();
        if !self.is_coordinator(broker, &group) {
            return Reply::Respond(FakeResponse::JoinGroup(
                JoinGroupResponse::default()
                    .with_error_code(Code::NotCoordinator.value())
                    .with_generation_id(-1),
            ));
        }
        let args = JoinArgs {
            group,
            member_id: req.member_id.to_string(),
            instance_id: req.group_instance_id.map(|i| i.to_string()),
            client_id: header.client_id.clone().unwrap_or_default(),
            protocol_type: req.protocol_type.to_string(),
            session_timeout_ms: i64::from(req.session_timeout_ms),
            rebalance_timeout_ms: if header.version >= 1 {
                i64::from(req.rebalance_timeout_ms)
            } else {
                i64::from(req.session_timeout_ms)
            },
            protocols: req
                .protocols
                .into_iter()
                .map(|p| (p.name.to_string(), p.metadata))
                .collect(),
            version: header.version,
        };
        self.groups.initial_delay_ms = self.config.initial_rebalance_delay_ms;
        match self.groups.join(args, now_ms) {
            JoinOutcome::Now(r) => Reply::Respond(FakeResponse::JoinGroup(r)),
            JoinOutcome::Later(t) => Reply::Deferred(t),
        }
    }

    pub(super) fn sync_group(&mut self, broker: i32, req: SyncGroupRequest, now_ms: i64) -> Reply {
        let group = req.group_id.0.to_string();
        let error = |code: Code| {
            Reply::Respond(FakeResponse::SyncGroup(
                SyncGroupResponse::default().with_error_code(code.value()),
            ))
        };
        if !self.is_coordinator(broker, &group) {
            return error(Code::NotCoordinator);
        }
        let assignments = req
            .assignments
            .into_iter()
            .map(|a| (a.member_id.to_string(), a.assignment))
            .collect();
        match self.groups.sync(
            &group,
            req.member_id.as_str(),
            req.generation_id,
            assignments,
            now_ms,
        ) {
            Ok(Some(t)) => Reply::Deferred(t),
            Ok(None) => error(Code::None),
            Err(code) => error(code),
        }
    }

    pub(super) fn heartbeat(
        &mut self,
        broker: i32,
        req: HeartbeatRequest,
        now_ms: i64,
    ) -> HeartbeatResponse {
        let group = req.group_id.0.to_string();
        let code = if self.is_coordinator(broker, &group) {
            self.groups
                .heartbeat(&group, req.member_id.as_str(), req.generation_id, now_ms)
        } else {
            Code::NotCoordinator
        };
        HeartbeatResponse::default().with_error_code(code.value())
    }

    pub(super) fn leave_group(
        &mut self,
        broker: i32,
        req: LeaveGroupRequest,
        version: i16,
        now_ms: i64,
    ) -> LeaveGroupResponse {
        let group = req.group_id.0.to_string();
        if !self.is_coordinator(broker, &group) {
            return LeaveGroupResponse::default().with_error_code(Code::NotCoordinator.value());
        }
        if version < 3 {
            let code = self
                .groups
                .leave(&group, req.member_id.as_str(), None, now_ms);
            return LeaveGroupResponse::default().with_error_code(code.value());
        }
        let members = req
            .members
            .into_iter()
            .map(|m| {
                let code = self.groups.leave(
                    &group,
                    m.member_id.as_str(),
                    m.group_instance_id.as_ref().map(|i| i.as_str()),
                    now_ms,
                );
                MemberResponse::default()
                    .with_member_id(m.member_id)
                    .with_group_instance_id(m.group_instance_id)
                    .with_error_code(code.value())
            })
            .collect();
        LeaveGroupResponse::default().with_members(members)
    }

    pub(super) fn offset_commit(
        &mut self,
        broker: i32,
        req: OffsetCommitRequest,
    ) -> OffsetCommitResponse {
        let group = req.group_id.0.to_string();
        let code = if self.is_coordinator(broker, &group) {
            self.groups.check_commit(
                &group,
                req.member_id.as_str(),
                req.generation_id_or_member_epoch,
            )
        } else {
            Code::NotCoordinator
        };
        let topics = per_partition(
            req.topics,
            |t| (t.name, t.partitions),
            |name, p| {
                let code = if code != Code::None {
                    code
                } else if self.partition(name, p.partition_index).is_none() {
                    Code::UnknownTopicOrPartition
                } else {
                    self.groups.commit(
                        &group,
                        name,
                        p.partition_index,
                        Committed {
                            offset: p.committed_offset,
                            leader_epoch: p.committed_leader_epoch,
                            metadata: p.committed_metadata.map(|m| m.to_string()),
                        },
                    );
                    Code::None
                };
                OffsetCommitResponsePartition::default()
                    .with_partition_index(p.partition_index)
                    .with_error_code(code.value())
            },
            |name, partitions| {
                OffsetCommitResponseTopic::default()
                    .with_name(name)
                    .with_partitions(partitions)
            },
        );
        OffsetCommitResponse::default().with_topics(topics)
    }

    pub(super) fn offset_fetch(
        &self,
        broker: i32,
        req: OffsetFetchRequest,
        version: i16,
    ) -> OffsetFetchResponse {
        if version < 8 {
            let group = req.group_id.0.to_string();
            if !self.is_coordinator(broker, &group) {
                return OffsetFetchResponse::default()
                    .with_error_code(Code::NotCoordinator.value());
            }
            let wanted: Option<Vec<(String, Vec<i32>)>> = req.topics.map(|ts| {
                ts.into_iter()
                    .map(|t| (t.name.0.to_string(), t.partition_indexes))
                    .collect()
            });
            let topics = committed_topics(
                self.committed_offsets(&group, wanted),
                |p, c| {
                    OffsetFetchResponsePartition::default()
                        .with_partition_index(p)
                        .with_committed_offset(c.offset)
                        .with_committed_leader_epoch(c.leader_epoch)
                        .with_metadata(c.metadata.map(StrBytes::from_string))
                },
                |name, partitions| {
                    OffsetFetchResponseTopic::default()
                        .with_name(name)
                        .with_partitions(partitions)
                },
            );
            return OffsetFetchResponse::default().with_topics(topics);
        }
        let groups = req
            .groups
            .into_iter()
            .map(|g| {
                let group = g.group_id.0.to_string();
                if !self.is_coordinator(broker, &group) {
                    return OffsetFetchResponseGroup::default()
                        .with_group_id(g.group_id)
                        .with_error_code(Code::NotCoordinator.value());
                }
                let wanted = g.topics.map(|ts| {
                    ts.into_iter()
                        .map(|t| (t.name.0.to_string(), t.partition_indexes))
                        .collect()
                });
                let topics = committed_topics(
                    self.committed_offsets(&group, wanted),
                    |p, c| {
                        OffsetFetchResponsePartitions::default()
                            .with_partition_index(p)
                            .with_committed_offset(c.offset)
                            .with_committed_leader_epoch(c.leader_epoch)
                            .with_metadata(c.metadata.map(StrBytes::from_string))
                    },
                    |name, partitions| {
                        OffsetFetchResponseTopics::default()
                            .with_name(name)
                            .with_partitions(partitions)
                    },
                );
                OffsetFetchResponseGroup::default()
                    .with_group_id(g.group_id)
                    .with_topics(topics)
            })
            .collect();
        OffsetFetchResponse::default().with_groups(groups)
    }

    /// Committed offsets of `wanted` partitions (all committed ones when
    /// `None`); -1 where nothing was committed.
    fn committed_offsets(
        &self,
        group: &str,
        wanted: Option<Vec<(String, Vec<i32>)>>,
    ) -> Vec<(String, Vec<(i32, Committed)>)> {
        let none = Committed {
            offset: -1,
            leader_epoch: -1,
            metadata: None,
        };
        match wanted {
            Some(list) => list
                .into_iter()
                .map(|(topic, parts)| {
                    let parts = parts
                        .into_iter()
                        .map(|p| {
                            let c = self.groups.committed(group, &topic, p).cloned();
                            (p, c.unwrap_or_else(|| none.clone()))
                        })
                        .collect();
                    (topic, parts)
                })
                .collect(),
            None => {
                let mut out: Vec<(String, Vec<(i32, Committed)>)> = Vec::new();
                if let Some(g) = self.groups.groups.get(group) {
                    for ((topic, p), c) in &g.offsets {
                        match out.iter_mut().find(|(t, _)| t == topic) {
                            Some((_, parts)) => parts.push((*p, c.clone())),
                            None => out.push((topic.clone(), vec![(*p, c.clone())])),
                        }
                    }
                }
                out
            }
        }
    }

    pub(super) fn describe_groups(
        &self,
        broker: i32,
        req: DescribeGroupsRequest,
    ) -> DescribeGroupsResponse {
        let groups = req
            .groups
            .into_iter()
            .map(|gid| {
                let id = gid.0.to_string();
                if !self.is_coordinator(broker, &id) {
                    return DescribedGroup::default()
                        .with_group_id(gid)
                        .with_error_code(Code::NotCoordinator.value());
                }
                let Some(g) = self.groups.groups.get(&id) else {
                    return DescribedGroup::default()
                        .with_group_id(gid)
                        .with_group_state(StrBytes::from_static_str("Dead"));
                };
                let members = g
                    .members
                    .values()
                    .map(|m| {
                        let meta = m
                            .protocols
                            .iter()
                            .find(|(n, _)| Some(n) == g.protocol.as_ref())
                            .map(|(_, b)| b.clone())
                            .unwrap_or_default();
                        DescribedGroupMember::default()
                            .with_member_id(StrBytes::from_string(m.id.clone()))
                            .with_group_instance_id(
                                m.instance_id.clone().map(StrBytes::from_string),
                            )
                            .with_client_id(StrBytes::from_string(m.client_id.clone()))
                            .with_client_host(StrBytes::from_static_str("/127.0.0.1"))
                            .with_member_metadata(meta)
                            .with_member_assignment(m.assignment.clone())
                    })
                    .collect();
                DescribedGroup::default()
                    .with_group_id(gid)
                    .with_group_state(StrBytes::from_static_str(g.phase.name()))
                    .with_protocol_type(StrBytes::from_string(
                        g.protocol_type.clone().unwrap_or_default(),
                    ))
                    .with_protocol_data(StrBytes::from_string(
                        g.protocol.clone().unwrap_or_default(),
                    ))
                    .with_members(members)
            })
            .collect();
        DescribeGroupsResponse::default().with_groups(groups)
    }

    pub(super) fn list_groups(&self, broker: i32, req: ListGroupsRequest) -> ListGroupsResponse {
        let wanted = |state: &str, kind: &str| {
            (req.states_filter.is_empty()
                || req
                    .states_filter
                    .iter()
                    .any(|s| s.as_str().eq_ignore_ascii_case(state)))
                && (req.types_filter.is_empty()
                    || req
                        .types_filter
                        .iter()
                        .any(|t| t.as_str().eq_ignore_ascii_case(kind)))
        };
        let streams = self
            .groups
            .streams
            .iter()
            .filter(|(id, _)| self.is_coordinator(broker, id))
            .filter(|(_, g)| wanted(g.state(), "streams"))
            .map(|(id, g)| {
                ListedGroup::default()
                    .with_group_id(GroupId(StrBytes::from_string(id.clone())))
                    .with_protocol_type(StrBytes::from_static_str("streams"))
                    .with_group_state(StrBytes::from_static_str(g.state()))
                    .with_group_type(StrBytes::from_static_str("streams"))
            });
        let groups = self
            .groups
            .groups
            .iter()
            .filter(|(id, _)| self.is_coordinator(broker, id))
            .filter(|(id, _)| !self.groups.streams.contains_key(*id))
            .filter(|(_, g)| {
                req.states_filter.is_empty()
                    || req
                        .states_filter
                        .iter()
                        .any(|s| s.as_str().eq_ignore_ascii_case(g.phase.name()))
            })
            .filter(|_| {
                req.types_filter.is_empty()
                    || req
                        .types_filter
                        .iter()
                        .any(|t| t.as_str().eq_ignore_ascii_case("classic"))
            })
            .map(|(id, g)| {
                ListedGroup::default()
                    .with_group_id(GroupId(StrBytes::from_string(id.clone())))
                    .with_protocol_type(StrBytes::from_string(
                        g.protocol_type.clone().unwrap_or_default(),
                    ))
                    .with_group_state(StrBytes::from_static_str(g.phase.name()))
                    .with_group_type(StrBytes::from_static_str("classic"))
            })
            .chain(streams)
            .collect();
        ListGroupsResponse::default().with_groups(groups)
    }
}

/// Builds OffsetFetch's topics (whose types differ before and after v8)
/// from committed offsets.
fn committed_topics<T, P>(
    committed: Vec<(String, Vec<(i32, Committed)>)>,
    partition: impl Fn(i32, Committed) -> P,
    topic: impl Fn(TopicName, Vec<P>) -> T,
) -> Vec<T> {
    committed
        .into_iter()
        .map(|(name, parts)| {
            let partitions = parts.into_iter().map(|(p, c)| partition(p, c)).collect();
            topic(TopicName(StrBytes::from_string(name)), partitions)
        })
        .collect()
}
