//! Topics: create, delete, list, describe, adding partitions, and leader
//! elections.
//!
//! CreateTopics and DeleteTopics are KIP-4, CreatePartitions is KIP-195,
//! ElectLeaders is KIP-183 and KIP-460 (unclean); describe and list read
//! Metadata
//! (<https://kafka.apache.org/protocol#The_Messages_CreateTopics>).

use std::collections::{BTreeMap, BTreeSet};

use indexmap::IndexMap;
use kafka_protocol::messages::create_partitions_request::CreatePartitionsTopic;
use kafka_protocol::messages::create_topics_request::{CreatableTopic, CreatableTopicConfig};
use kafka_protocol::messages::delete_topics_request::DeleteTopicState;
use kafka_protocol::messages::elect_leaders_request::TopicPartitions;
use kafka_protocol::messages::{
    CreatePartitionsRequest, CreateTopicsRequest, DeleteTopicsRequest, ElectLeadersRequest,
    TopicName,
};

use super::{check, missing, str_bytes, Admin, PerResource};
use crate::error::{KafkaCode, Result};
use crate::protocol::versions::Versions;
use crate::TopicPartition;

const CREATE_TOPICS_VERSIONS: Versions = Versions::new(2, 7);
const DELETE_TOPICS_VERSIONS: Versions = Versions::new(1, 6);
const CREATE_PARTITIONS_VERSIONS: Versions = Versions::new(0, 3);
/// v1 adds the election type (KIP-460).
const ELECT_LEADERS_VERSIONS: Versions = Versions::new(1, 2);

/// Which replica a leader election picks (KIP-460).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ElectionType {
    /// The first replica of the assignment, if it is in sync.
    Preferred,
    /// Any live replica, even one that is not in sync: records only the
    /// old leader had are lost, and consumers see the log truncated.
    Unclean,
}

/// A topic to create.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewTopic {
    /// Name.
    pub name: String,
    /// Partition count; `None` uses the broker's `num.partitions`.
    pub partitions: Option<i32>,
    /// Replication factor; `None` uses `default.replication.factor`.
    pub replication_factor: Option<i16>,
    /// Topic configs (`cleanup.policy`, `retention.ms`, ...).
    pub configs: Vec<(String, String)>,
}

impl NewTopic {
    /// A topic with `partitions` partitions and the broker's default
    /// replication factor.
    pub fn new(name: impl Into<String>, partitions: i32) -> NewTopic {
        NewTopic {
            name: name.into(),
            partitions: Some(partitions),
            replication_factor: None,
            configs: Vec::new(),
        }
    }

    /// Sets the replication factor.
    pub fn replication_factor(mut self, rf: i16) -> NewTopic {
        self.replication_factor = Some(rf);
        self
    }

    /// Adds a topic config.
    pub fn config(mut self, key: impl Into<String>, value: impl Into<String>) -> NewTopic {
        self.configs.push((key.into(), value.into()));
        self
    }
}

/// A topic as listed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicListing {
    /// Name.
    pub name: String,
    /// Topic id (KIP-516) in Kafka's text form.
    pub id: String,
    /// Whether it is internal (`__consumer_offsets`, ...).
    pub internal: bool,
    /// Partition count.
    pub partitions: usize,
}

/// One partition of a described topic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionDescription {
    /// Partition index.
    pub partition: i32,
    /// Leader node id (-1: none).
    pub leader: i32,
    /// Leader epoch.
    pub leader_epoch: i32,
    /// Replica node ids.
    pub replicas: Vec<i32>,
    /// In-sync replica node ids.
    pub isr: Vec<i32>,
    /// A partition-level error, such as LEADER_NOT_AVAILABLE.
    pub error: Option<KafkaCode>,
}

/// A described topic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicDescription {
    /// Name.
    pub name: String,
    /// Topic id (KIP-516) in Kafka's text form.
    pub id: String,
    /// Whether it is internal.
    pub internal: bool,
    /// Partitions by index.
    pub partitions: Vec<PartitionDescription>,
}

/// Kafka's text form of a topic id: URL-safe base64 without padding.
pub(crate) fn uuid_text(bytes: &[u8; 16]) -> String {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut out = String::with_capacity(22);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        let chars = chunk.len() + 1;
        for i in 0..chars {
            out.push(char::from(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize]));
        }
    }
    out
}

impl Admin {
    /// Creates topics (`validate_only`: the broker checks and creates
    /// nothing). One result per topic: the topic id (all zeros when only
    /// validated).
    pub async fn create_topics(
        &self,
        topics: &[NewTopic],
        validate_only: bool,
    ) -> Result<PerResource<String, String>> {
        let req = CreateTopicsRequest::default()
            .with_timeout_ms(self.timeout_ms())
            .with_validate_only(validate_only)
            .with_topics(
                topics
                    .iter()
                    .map(|t| {
                        CreatableTopic::default()
                            .with_name(TopicName(str_bytes(&t.name)))
                            .with_num_partitions(t.partitions.unwrap_or(-1))
                            .with_replication_factor(t.replication_factor.unwrap_or(-1))
                            .with_configs(
                                t.configs
                                    .iter()
                                    .map(|(k, v)| {
                                        CreatableTopicConfig::default()
                                            .with_name(str_bytes(k))
                                            .with_value(Some(str_bytes(v)))
                                    })
                                    .collect(),
                            )
                    })
                    .collect(),
            );
        let resp = self.send_controller(&req, CREATE_TOPICS_VERSIONS).await?;
        let mut out = IndexMap::new();
        for t in topics {
            let r = match resp.topics.iter().find(|r| r.name.0.as_str() == t.name) {
                None => Err(missing("CreateTopics", &t.name)),
                Some(r) => check(
                    r.error_code,
                    r.error_message.as_ref(),
                    "CreateTopics",
                    &format!("topic {}", t.name),
                )
                .map(|()| uuid_text(r.topic_id.as_bytes())),
            };
            out.insert(t.name.clone(), r);
        }
        Ok(out)
    }

    /// Deletes topics by name; one result per topic.
    pub async fn delete_topics(&self, names: &[String]) -> Result<PerResource<String, ()>> {
        let conn_version = {
            let conn = self
                .cluster
                .any_connection(crate::net::Workload::Admin)
                .await?;
            conn.version_for::<DeleteTopicsRequest>(DELETE_TOPICS_VERSIONS)?
        };
        let mut req = DeleteTopicsRequest::default().with_timeout_ms(self.timeout_ms());
        if conn_version >= 6 {
            req.topics = names
                .iter()
                .map(|n| DeleteTopicState::default().with_name(Some(TopicName(str_bytes(n)))))
                .collect();
        } else {
            req.topic_names = names.iter().map(|n| TopicName(str_bytes(n))).collect();
        }
        let resp = self
            .send_controller(&req, Versions::new(conn_version, conn_version))
            .await?;
        let mut out = IndexMap::new();
        for n in names {
            let r = match resp
                .responses
                .iter()
                .find(|r| r.name.as_ref().is_some_and(|x| x.0.as_str() == n))
            {
                None => Err(missing("DeleteTopics", n)),
                Some(r) => check(
                    r.error_code,
                    r.error_message.as_ref(),
                    "DeleteTopics",
                    &format!("topic {n}"),
                ),
            };
            out.insert(n.clone(), r);
        }
        Ok(out)
    }

    /// Lists topics, sorted by name; internal topics only with
    /// `include_internal`.
    pub async fn list_topics(&self, include_internal: bool) -> Result<Vec<TopicListing>> {
        let m = self.cluster.refresh_metadata(None).await?;
        Ok(m.topics
            .values()
            .filter(|t| t.error.is_none() && (include_internal || !t.internal))
            .map(|t| TopicListing {
                name: t.name.clone(),
                id: uuid_text(&t.id),
                internal: t.internal,
                partitions: t.partitions.len(),
            })
            .collect())
    }

    /// Describes topics from fresh metadata: partitions, leaders, replicas,
    /// ISR. A topic that does not exist gets UNKNOWN_TOPIC_OR_PARTITION.
    pub async fn describe_topics(
        &self,
        names: &[String],
    ) -> Result<PerResource<String, TopicDescription>> {
        let m = self.cluster.refresh_metadata(Some(names)).await?;
        let mut out = IndexMap::new();
        for n in names {
            let r = match m.topics.get(n) {
                None => Err(crate::Error::Kafka {
                    code: KafkaCode::UNKNOWN_TOPIC_OR_PARTITION,
                    context: format!("Metadata topic {n}"),
                }),
                Some(t) => match t.error {
                    Some(code) => Err(crate::Error::Kafka {
                        code,
                        context: format!("Metadata topic {n}"),
                    }),
                    None => Ok(TopicDescription {
                        name: t.name.clone(),
                        id: uuid_text(&t.id),
                        internal: t.internal,
                        partitions: t
                            .partitions
                            .iter()
                            .map(|p| PartitionDescription {
                                partition: p.partition,
                                leader: p.leader,
                                leader_epoch: p.leader_epoch,
                                replicas: p.replicas.clone(),
                                isr: p.isr.clone(),
                                error: p.error,
                            })
                            .collect(),
                    }),
                },
            };
            out.insert(n.clone(), r);
        }
        Ok(out)
    }

    /// Raises topics' partition counts to the given totals (KIP-195).
    pub async fn create_partitions(
        &self,
        totals: &[(String, i32)],
        validate_only: bool,
    ) -> Result<PerResource<String, ()>> {
        let req = CreatePartitionsRequest::default()
            .with_timeout_ms(self.timeout_ms())
            .with_validate_only(validate_only)
            .with_topics(
                totals
                    .iter()
                    .map(|(n, c)| {
                        CreatePartitionsTopic::default()
                            .with_name(TopicName(str_bytes(n)))
                            .with_count(*c)
                            .with_assignments(None)
                    })
                    .collect(),
            );
        let resp = self
            .send_controller(&req, CREATE_PARTITIONS_VERSIONS)
            .await?;
        let mut out = IndexMap::new();
        for (n, _) in totals {
            let r = match resp.results.iter().find(|r| r.name.0.as_str() == n) {
                None => Err(missing("CreatePartitions", n)),
                Some(r) => check(
                    r.error_code,
                    r.error_message.as_ref(),
                    "CreatePartitions",
                    &format!("topic {n}"),
                ),
            };
            out.insert(n.clone(), r);
        }
        Ok(out)
    }
}

impl Admin {
    /// Elects leaders for `partitions`, or for every partition that needs
    /// one with `None` (Java's `Admin.electLeaders`). Each partition gets
    /// its own result; one whose leader already is the replica the election
    /// would pick gets ELECTION_NOT_NEEDED.
    pub async fn elect_leaders(
        &self,
        election: ElectionType,
        partitions: Option<&[TopicPartition]>,
    ) -> Result<PerResource<TopicPartition, ()>> {
        let wanted = partitions.map(|ps| {
            let mut topics: BTreeMap<&str, BTreeSet<i32>> = BTreeMap::new();
            for tp in ps {
                topics.entry(&tp.topic).or_default().insert(tp.partition);
            }
            topics
                .into_iter()
                .map(|(t, ps)| {
                    TopicPartitions::default()
                        .with_topic(TopicName(str_bytes(t)))
                        .with_partitions(ps.into_iter().collect())
                })
                .collect()
        });
        let req = ElectLeadersRequest::default()
            .with_election_type(match election {
                ElectionType::Preferred => 0,
                ElectionType::Unclean => 1,
            })
            .with_timeout_ms(self.timeout_ms())
            .with_topic_partitions(wanted);
        let resp = self.send_controller(&req, ELECT_LEADERS_VERSIONS).await?;
        check(resp.error_code, None, "ElectLeaders", "request")?;
        let mut answered: IndexMap<TopicPartition, Result<()>> = IndexMap::new();
        for t in &resp.replica_election_results {
            for p in &t.partition_result {
                let tp = TopicPartition::new(t.topic.0.as_str(), p.partition_id);
                let r = check(
                    p.error_code,
                    p.error_message.as_ref(),
                    "ElectLeaders",
                    &format!("partition {tp}"),
                );
                answered.insert(tp, r);
            }
        }
        let Some(partitions) = partitions else {
            return Ok(answered);
        };
        let mut out = IndexMap::new();
        for tp in partitions {
            let r = answered
                .shift_remove(tp)
                .unwrap_or_else(|| Err(missing("ElectLeaders", &tp.to_string())));
            out.entry(tp.clone()).or_insert(r);
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topic_ids_print_as_kafka_does() {
        assert_eq!(uuid_text(&[0; 16]), "AAAAAAAAAAAAAAAAAAAAAA");
        let mut b = [0u8; 16];
        b[15] = 1;
        assert_eq!(uuid_text(&b), "AAAAAAAAAAAAAAAAAAAAAQ");
        assert_eq!(uuid_text(&[0xff; 16]), "_____________________w");
    }
}
