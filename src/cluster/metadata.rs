//! The metadata cache: brokers, controller and topic partitions with their
//! leaders, from Metadata responses
//! (<https://kafka.apache.org/protocol#The_Messages_Metadata>).
//!
//! Snapshots are immutable and generation-stamped: a refresh builds a new
//! snapshot and swaps it in, so readers never see a half-applied update and
//! can tell whether what they routed by is still current.

use std::collections::BTreeMap;

use kafka_protocol::messages::MetadataResponse;

use crate::error::{BrokerRef, Error, KafkaCode};
use crate::net::BrokerAddr;

/// A broker as listed in metadata.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrokerInfo {
    /// Node id.
    pub id: i32,
    /// Advertised host.
    pub host: String,
    /// Advertised port.
    pub port: u16,
    /// Rack, if configured.
    pub rack: Option<String>,
}

impl BrokerInfo {
    /// The address to dial.
    pub fn addr(&self) -> BrokerAddr {
        BrokerAddr {
            id: Some(self.id),
            host: self.host.clone(),
            port: self.port,
        }
    }
}

/// One partition's replica state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionInfo {
    /// Partition index.
    pub partition: i32,
    /// Leader node id, or -1 while no leader is elected.
    pub leader: i32,
    /// Leader epoch (KIP-320).
    pub leader_epoch: i32,
    /// Replica node ids.
    pub replicas: Vec<i32>,
    /// In-sync replica node ids.
    pub isr: Vec<i32>,
    /// Partition-level error, such as LEADER_NOT_AVAILABLE.
    pub error: Option<KafkaCode>,
}

/// One topic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicInfo {
    /// Name.
    pub name: String,
    /// Topic id (KIP-516), as 16 bytes.
    pub id: [u8; 16],
    /// Whether it is internal (`__consumer_offsets`, ...).
    pub internal: bool,
    /// Partitions, sorted by index.
    pub partitions: Vec<PartitionInfo>,
    /// Topic-level error, such as UNKNOWN_TOPIC_OR_PARTITION.
    pub error: Option<KafkaCode>,
}

/// An immutable view of the cluster at one point in time.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClusterMetadata {
    /// Increases by one with every applied refresh.
    pub generation: u64,
    /// Cluster id.
    pub cluster_id: Option<String>,
    /// The active controller's node id (-1 if unknown).
    pub controller_id: i32,
    /// Brokers by node id.
    pub brokers: BTreeMap<i32, BrokerInfo>,
    /// Topics by name.
    pub topics: BTreeMap<String, TopicInfo>,
}

impl ClusterMetadata {
    /// The first of `topics` whose metadata is not usable yet: absent, with
    /// a retriable topic error (UNKNOWN_TOPIC_OR_PARTITION just after
    /// creation, on a broker that has not caught up), or with a partition
    /// that has no leader or a retriable error. The Java client asks again
    /// after `retry.backoff.ms` for such a topic rather than waiting for
    /// `metadata.max.age.ms` (its `Metadata.handleMetadataResponse`
    /// requests an update on an `InvalidMetadataException`).
    pub fn first_unsettled<'a>(
        &self,
        topics: impl IntoIterator<Item = &'a String>,
    ) -> Option<&'a String> {
        let retriable = |e: &Option<KafkaCode>| e.is_some_and(KafkaCode::is_retriable);
        topics
            .into_iter()
            .find(|t| match self.topics.get(t.as_str()) {
                None => true,
                Some(info) => {
                    retriable(&info.error)
                        || (info.error.is_none()
                            && info
                                .partitions
                                .iter()
                                .any(|p| p.leader < 0 || retriable(&p.error)))
                }
            })
    }

    /// The leader of `topic`-`partition`, if known and elected.
    pub fn leader(&self, topic: &str, partition: i32) -> Option<&BrokerInfo> {
        let p = self.partition(topic, partition)?;
        self.brokers.get(&p.leader)
    }

    /// A partition's state.
    pub fn partition(&self, topic: &str, partition: i32) -> Option<&PartitionInfo> {
        let t = self.topics.get(topic)?;
        t.partitions
            .binary_search_by_key(&partition, |p| p.partition)
            .ok()
            .map(|i| &t.partitions[i])
    }

    /// Applies a Metadata response. With `full`, topics absent from the
    /// response are dropped (it listed all topics); otherwise the response's
    /// topics replace only their own entries.
    pub fn apply(&self, resp: &MetadataResponse, full: bool) -> Result<ClusterMetadata, Error> {
        Error::check(resp.error_code, || "Metadata".into())?;
        let mut next = ClusterMetadata {
            generation: self.generation + 1,
            cluster_id: resp.cluster_id.as_ref().map(|s| s.as_str().to_owned()),
            controller_id: resp.controller_id.0,
            brokers: BTreeMap::new(),
            topics: if full {
                BTreeMap::new()
            } else {
                self.topics.clone()
            },
        };
        for b in &resp.brokers {
            let port = u16::try_from(b.port).map_err(|_| Error::Protocol {
                broker: BrokerRef::node(b.node_id.0).into(),
                api: "Metadata".into(),
                source: crate::protocol::ProtocolError::Invalid {
                    what: "broker port",
                    reason: format!("{} is not a TCP port", b.port),
                },
            })?;
            next.brokers.insert(
                b.node_id.0,
                BrokerInfo {
                    id: b.node_id.0,
                    host: b.host.as_str().to_owned(),
                    port,
                    rack: b.rack.as_ref().map(|r| r.as_str().to_owned()),
                },
            );
        }
        for t in &resp.topics {
            let Some(name) = t.name.as_ref().map(|n| n.0.as_str().to_owned()) else {
                continue;
            };
            let mut partitions: Vec<PartitionInfo> = t
                .partitions
                .iter()
                .map(|p| PartitionInfo {
                    partition: p.partition_index,
                    leader: p.leader_id.0,
                    leader_epoch: p.leader_epoch,
                    replicas: p.replica_nodes.iter().map(|n| n.0).collect(),
                    isr: p.isr_nodes.iter().map(|n| n.0).collect(),
                    error: KafkaCode::from_code(p.error_code),
                })
                .collect();
            partitions.sort_by_key(|p| p.partition);
            // KIP-320: a lagging broker may answer with older leadership;
            // never move a partition back to a lower leader epoch of the
            // same topic.
            if let Some(old) = self
                .topics
                .get(&name)
                .filter(|o| o.id == *t.topic_id.as_bytes())
            {
                for p in &mut partitions {
                    if let Ok(i) = old
                        .partitions
                        .binary_search_by_key(&p.partition, |o| o.partition)
                    {
                        if old.partitions[i].leader_epoch > p.leader_epoch {
                            *p = old.partitions[i].clone();
                        }
                    }
                }
            }
            next.topics.insert(
                name.clone(),
                TopicInfo {
                    name,
                    id: *t.topic_id.as_bytes(),
                    internal: t.is_internal,
                    partitions,
                    error: KafkaCode::from_code(t.error_code),
                },
            );
        }
        Ok(next)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::messages::metadata_response::{
        MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
    };
    use kafka_protocol::messages::{BrokerId, TopicName};
    use kafka_protocol::protocol::StrBytes;

    fn response(topics: &[(&str, &[(i32, i32)])]) -> MetadataResponse {
        MetadataResponse::default()
            .with_controller_id(BrokerId(1))
            .with_brokers(vec![MetadataResponseBroker::default()
                .with_node_id(BrokerId(1))
                .with_host(StrBytes::from_static_str("h"))
                .with_port(9092)])
            .with_topics(
                topics
                    .iter()
                    .map(|(name, parts)| {
                        MetadataResponseTopic::default()
                            .with_name(Some(TopicName(StrBytes::from_string((*name).into()))))
                            .with_partitions(
                                parts
                                    .iter()
                                    .map(|(p, l)| {
                                        MetadataResponsePartition::default()
                                            .with_partition_index(*p)
                                            .with_leader_id(BrokerId(*l))
                                    })
                                    .collect(),
                            )
                    })
                    .collect(),
            )
    }

    #[test]
    fn apply_routes_leaders_and_bumps_generation() {
        let m0 = ClusterMetadata::default();
        let m1 = m0
            .apply(&response(&[("a", &[(1, 1), (0, 1)])]), true)
            .unwrap();
        assert_eq!(m1.generation, 1);
        assert_eq!(m1.leader("a", 0).unwrap().port, 9092);
        assert_eq!(m1.topics["a"].partitions[0].partition, 0);
        assert!(m1.leader("a", 2).is_none());
        let m2 = m1.apply(&response(&[("b", &[(0, 7)])]), false).unwrap();
        assert_eq!(m2.generation, 2);
        assert!(
            m2.topics.contains_key("a"),
            "partial refresh keeps other topics"
        );
        assert!(
            m2.leader("b", 0).is_none(),
            "leader 7 is not a known broker"
        );
        let m3 = m2.apply(&response(&[("b", &[(0, 1)])]), true).unwrap();
        assert!(
            !m3.topics.contains_key("a"),
            "full refresh drops missing topics"
        );
    }

    #[test]
    fn stale_leader_epochs_are_ignored() {
        let mut newer = response(&[("a", &[(0, 1)])]);
        newer.topics[0].partitions[0].leader_epoch = 5;
        let m1 = ClusterMetadata::default().apply(&newer, true).unwrap();
        let mut older = response(&[("a", &[(0, 2)])]);
        older.topics[0].partitions[0].leader_epoch = 4;
        let m2 = m1.apply(&older, true).unwrap();
        assert_eq!(
            m2.partition("a", 0).unwrap().leader,
            1,
            "epoch 4 must not replace epoch 5"
        );
        let mut newest = response(&[("a", &[(0, 2)])]);
        newest.topics[0].partitions[0].leader_epoch = 6;
        let m3 = m2.apply(&newest, true).unwrap();
        assert_eq!(m3.partition("a", 0).unwrap().leader, 2);
    }

    #[test]
    fn unknown_leaderless_or_missing_topics_are_unsettled() {
        let names = |ns: &[&str]| ns.iter().map(|n| (*n).to_owned()).collect::<Vec<_>>();
        let mut r = response(&[("ok", &[(0, 1)]), ("new", &[]), ("nol", &[(0, -1)])]);
        r.topics[1].error_code = KafkaCode::UNKNOWN_TOPIC_OR_PARTITION.code();
        let mut denied = response(&[("denied", &[])]);
        denied.topics[0].error_code = 29; // TOPIC_AUTHORIZATION_FAILED
        let m = ClusterMetadata::default()
            .apply(&r, true)
            .unwrap()
            .apply(&denied, false)
            .unwrap();
        assert_eq!(m.first_unsettled(&names(&["ok"])), None);
        assert_eq!(
            m.first_unsettled(&names(&["ok", "new"]))
                .map(String::as_str),
            Some("new")
        );
        assert_eq!(
            m.first_unsettled(&names(&["nol"])).map(String::as_str),
            Some("nol"),
            "a partition without a leader"
        );
        assert_eq!(
            m.first_unsettled(&names(&["absent"])).map(String::as_str),
            Some("absent")
        );
        assert_eq!(
            m.first_unsettled(&names(&["denied"])),
            None,
            "asking again cannot help a refusal"
        );
    }

    #[test]
    fn bad_port_is_an_error() {
        let mut r = response(&[]);
        r.brokers[0].port = 70000;
        assert!(ClusterMetadata::default().apply(&r, true).is_err());
    }
}
