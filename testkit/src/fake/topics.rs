//! Metadata, CreateTopics, DeleteTopics and CreatePartitions (KIP-4):
//! topics, their ids (KIP-516), partition leaders and leader epochs.

use kafka_protocol::messages::create_partitions_response::CreatePartitionsTopicResult;
use kafka_protocol::messages::create_topics_response::CreatableTopicResult;
use kafka_protocol::messages::delete_topics_response::DeletableTopicResult;
use kafka_protocol::messages::metadata_response::{
    MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;

use std::collections::BTreeMap;

use super::errors::Code;
use super::log::PartitionLog;
use super::state::{ClusterState, Topic};

/// Longest topic name Kafka accepts.
const MAX_TOPIC_NAME: usize = 249;
/// Most partitions a fake topic may have: a request cannot make the fake
/// allocate without bound.
pub const MAX_PARTITIONS: i32 = 10_000;

impl ClusterState {
    /// Creates `name` with `partitions` partitions of `replication` replicas.
    pub fn create_topic(
        &mut self,
        name: &str,
        partitions: i32,
        replication: i16,
    ) -> Result<(), (Code, String)> {
        if !valid_topic_name(name) {
            return Err((Code::InvalidTopic, format!("invalid topic name {name:?}")));
        }
        if self.topics.contains_key(name) {
            return Err((
                Code::TopicAlreadyExists,
                format!("topic {name} already exists"),
            ));
        }
        if !(1..=MAX_PARTITIONS).contains(&partitions) {
            return Err((
                Code::InvalidPartitions,
                format!("{partitions} partitions for {name}"),
            ));
        }
        let alive: Vec<i32> = self.alive_brokers().map(|b| b.id).collect();
        let rf = usize::try_from(replication).unwrap_or(0);
        if rf < 1 || rf > alive.len() {
            return Err((
                Code::InvalidReplicationFactor,
                format!(
                    "replication factor {replication} with {} live brokers",
                    alive.len()
                ),
            ));
        }
        self.topic_ids += 1;
        let id = uuid::Uuid::from_u64_pair(0x7075_7265_6b61_666b, self.topic_ids);
        let offset = self.topics.len();
        let partitions = (0..partitions as usize)
            .map(|p| PartitionLog::new(replicas_for(&alive, p + offset, rf)))
            .collect();
        self.topics.insert(
            name.to_owned(),
            Topic {
                id,
                partitions,
                configs: BTreeMap::new(),
            },
        );
        Ok(())
    }

    pub(super) fn metadata(&mut self, req: MetadataRequest, version: i16) -> MetadataResponse {
        let requested: Option<Vec<(Option<String>, uuid::Uuid)>> = req.topics.map(|topics| {
            topics
                .into_iter()
                .map(|t| (t.name.map(|n| n.0.to_string()), t.topic_id))
                .collect()
        });
        // Version 0 reads an empty list as "all topics"; later ones as none.
        let requested = match requested {
            Some(list) if list.is_empty() && version == 0 => None,
            other => other,
        };
        let auto_create =
            self.config.auto_create_topics && (version < 4 || req.allow_auto_topic_creation);
        let names: Vec<(Option<String>, uuid::Uuid)> = match requested {
            None => self
                .topics
                .iter()
                .map(|(n, t)| (Some(n.clone()), t.id))
                .collect(),
            Some(list) => list,
        };
        let mut topics = Vec::with_capacity(names.len());
        for (name, id) in names {
            let name = name.or_else(|| {
                self.topics
                    .iter()
                    .find(|(_, t)| t.id == id && !id.is_nil())
                    .map(|(n, _)| n.clone())
            });
            let Some(name) = name else {
                topics.push(
                    MetadataResponseTopic::default()
                        .with_error_code(Code::UnknownTopicId.value())
                        .with_topic_id(id),
                );
                continue;
            };
            if !self.topics.contains_key(&name) && auto_create {
                let rf = self.alive_brokers().count().min(3) as i16;
                let _ = self.create_topic(&name, self.config.default_partitions, rf.max(1));
            }
            topics.push(self.topic_metadata(&name));
        }
        let brokers = self
            .alive_brokers()
            .map(|b| {
                MetadataResponseBroker::default()
                    .with_node_id(BrokerId(b.id))
                    .with_host(StrBytes::from_string(b.host.clone()))
                    .with_port(i32::from(b.port))
            })
            .collect();
        let controller = self.alive_brokers().next().map(|b| b.id).unwrap_or(-1);
        MetadataResponse::default()
            .with_brokers(brokers)
            .with_cluster_id(Some(StrBytes::from_string(self.config.cluster_id.clone())))
            .with_controller_id(BrokerId(controller))
            .with_topics(topics)
    }

    fn topic_metadata(&self, name: &str) -> MetadataResponseTopic {
        let topic_name = TopicName(StrBytes::from_string(name.to_owned()));
        let Some(topic) = self.topics.get(name) else {
            return MetadataResponseTopic::default()
                .with_name(Some(topic_name))
                .with_error_code(Code::UnknownTopicOrPartition.value());
        };
        let partitions = topic
            .partitions
            .iter()
            .enumerate()
            .map(|(i, p)| {
                let leader_up = self.brokers.iter().any(|b| b.id == p.leader && b.alive);
                let isr: Vec<BrokerId> = p
                    .replicas
                    .iter()
                    .filter(|r| self.brokers.iter().any(|b| b.id == **r && b.alive))
                    .map(|r| BrokerId(*r))
                    .collect();
                let offline = p
                    .replicas
                    .iter()
                    .filter(|r| !isr.contains(&BrokerId(**r)))
                    .map(|r| BrokerId(*r))
                    .collect();
                MetadataResponsePartition::default()
                    .with_error_code(if leader_up {
                        0
                    } else {
                        Code::LeaderNotAvailable.value()
                    })
                    .with_partition_index(i as i32)
                    .with_leader_id(BrokerId(if leader_up { p.leader } else { -1 }))
                    .with_leader_epoch(p.leader_epoch)
                    .with_replica_nodes(p.replicas.iter().map(|r| BrokerId(*r)).collect())
                    .with_isr_nodes(isr)
                    .with_offline_replicas(offline)
            })
            .collect();
        MetadataResponseTopic::default()
            .with_name(Some(topic_name))
            .with_topic_id(topic.id)
            .with_partitions(partitions)
    }

    pub(super) fn create_topics(&mut self, req: CreateTopicsRequest) -> CreateTopicsResponse {
        let default_rf = self.alive_brokers().count().min(3) as i16;
        let results = req
            .topics
            .into_iter()
            .map(|t| {
                let name = t.name.0.to_string();
                let partitions = if t.num_partitions == -1 {
                    self.config.default_partitions
                } else {
                    t.num_partitions
                };
                let rf = if t.replication_factor == -1 {
                    default_rf.max(1)
                } else {
                    t.replication_factor
                };
                let outcome = if req.validate_only {
                    self.validate_new_topic(&name, partitions, rf)
                } else {
                    self.create_topic(&name, partitions, rf)
                };
                let result = CreatableTopicResult::default()
                    .with_name(t.name)
                    .with_num_partitions(partitions)
                    .with_replication_factor(rf);
                match outcome {
                    Ok(()) => {
                        let topic = self.topics.get_mut(&name);
                        let id = topic.as_ref().map(|t| t.id).unwrap_or_default();
                        if let Some(topic) = topic {
                            topic.configs.extend(t.configs.iter().filter_map(|c| {
                                c.value
                                    .as_ref()
                                    .map(|v| (c.name.to_string(), v.to_string()))
                            }));
                        }
                        result.with_topic_id(id)
                    }
                    Err((code, msg)) => result
                        .with_error_code(code.value())
                        .with_error_message(Some(StrBytes::from_string(msg))),
                }
            })
            .collect();
        CreateTopicsResponse::default().with_topics(results)
    }

    fn validate_new_topic(
        &self,
        name: &str,
        partitions: i32,
        rf: i16,
    ) -> Result<(), (Code, String)> {
        if !valid_topic_name(name) {
            return Err((Code::InvalidTopic, format!("invalid topic name {name:?}")));
        }
        if self.topics.contains_key(name) {
            return Err((
                Code::TopicAlreadyExists,
                format!("topic {name} already exists"),
            ));
        }
        if !(1..=MAX_PARTITIONS).contains(&partitions) {
            return Err((Code::InvalidPartitions, format!("{partitions} partitions")));
        }
        if rf < 1 || rf as usize > self.alive_brokers().count() {
            return Err((
                Code::InvalidReplicationFactor,
                format!("replication factor {rf}"),
            ));
        }
        Ok(())
    }

    pub(super) fn delete_topics(&mut self, req: DeleteTopicsRequest) -> DeleteTopicsResponse {
        let by_name = req
            .topic_names
            .into_iter()
            .map(|n| (Some(n), uuid::Uuid::nil()));
        let by_state = req.topics.into_iter().map(|t| (t.name, t.topic_id));
        let responses = by_name
            .chain(by_state)
            .map(|(name, id)| {
                let found = match &name {
                    Some(n) => self
                        .topics
                        .get(n.0.as_str())
                        .map(|t| (n.0.to_string(), t.id)),
                    None => self
                        .topics
                        .iter()
                        .find(|(_, t)| t.id == id)
                        .map(|(n, t)| (n.clone(), t.id)),
                };
                match found {
                    Some((n, tid)) => {
                        // Sessions keep its partitions: their next fetch
                        // answers UNKNOWN_TOPIC_ID (or, by name,
                        // UNKNOWN_TOPIC_OR_PARTITION), as Kafka's do.
                        self.topics.remove(&n);
                        DeletableTopicResult::default()
                            .with_name(Some(TopicName(StrBytes::from_string(n))))
                            .with_topic_id(tid)
                    }
                    None => {
                        let code = if name.is_some() {
                            Code::UnknownTopicOrPartition
                        } else {
                            Code::UnknownTopicId
                        };
                        DeletableTopicResult::default()
                            .with_name(name)
                            .with_topic_id(id)
                            .with_error_code(code.value())
                    }
                }
            })
            .collect();
        DeleteTopicsResponse::default().with_responses(responses)
    }

    pub(super) fn create_partitions(
        &mut self,
        req: CreatePartitionsRequest,
    ) -> CreatePartitionsResponse {
        let alive: Vec<i32> = self.alive_brokers().map(|b| b.id).collect();
        let results = req
            .topics
            .into_iter()
            .map(|t| {
                let result = CreatePartitionsTopicResult::default().with_name(t.name.clone());
                let Some(topic) = self.topics.get_mut(t.name.0.as_str()) else {
                    return result.with_error_code(Code::UnknownTopicOrPartition.value());
                };
                let have = topic.partitions.len();
                let want = usize::try_from(t.count.min(MAX_PARTITIONS)).unwrap_or(0);
                if want <= have || t.count > MAX_PARTITIONS {
                    return result
                        .with_error_code(Code::InvalidPartitions.value())
                        .with_error_message(Some(StrBytes::from_string(format!(
                            "topic {} has {have} partitions, asked for {}",
                            t.name.0, t.count
                        ))));
                }
                if !req.validate_only {
                    let rf = topic
                        .partitions
                        .first()
                        .map(|p| p.replicas.len())
                        .unwrap_or(1);
                    for p in have..want {
                        topic
                            .partitions
                            .push(PartitionLog::new(replicas_for(&alive, p, rf)));
                    }
                }
                result
            })
            .collect();
        CreatePartitionsResponse::default().with_results(results)
    }
}

/// `rf` replicas from the live brokers, round-robin from `start`.
fn replicas_for(alive: &[i32], start: usize, rf: usize) -> Vec<i32> {
    if alive.is_empty() {
        return vec![-1];
    }
    (0..rf.min(alive.len()))
        .map(|i| alive[(start + i) % alive.len()])
        .collect()
}

/// Kafka's rule: 1 to 249 of `[a-zA-Z0-9._-]`, not `.` or `..`.
fn valid_topic_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_TOPIC_NAME
        && name != "."
        && name != ".."
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'_' || b == b'-')
}
