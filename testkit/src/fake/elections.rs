//! ElectLeaders (KIP-183 preferred, KIP-460 unclean): moves a partition's
//! leadership back to its preferred replica (the first one) when that broker
//! is up, or, unclean, to any live replica when the leader is down. The fake
//! keeps every live replica in sync, so any live replica is eligible.
//! Asked for no partitions (null), it elects wherever an election is needed
//! and answers only for those, as Kafka's controller does.

use kafka_protocol::messages::elect_leaders_response::{PartitionResult, ReplicaElectionResult};
use kafka_protocol::messages::{ElectLeadersRequest, ElectLeadersResponse, TopicName};
use kafka_protocol::protocol::StrBytes;

use super::errors::Code;
use super::state::ClusterState;

const PREFERRED: i8 = 0;
const UNCLEAN: i8 = 1;

impl ClusterState {
    pub(super) fn elect_leaders(
        &mut self,
        req: ElectLeadersRequest,
        version: i16,
    ) -> ElectLeadersResponse {
        // v0 has no election type: preferred.
        let election = if version == 0 {
            PREFERRED
        } else {
            req.election_type
        };
        if election != PREFERRED && election != UNCLEAN {
            return ElectLeadersResponse::default().with_error_code(Code::InvalidRequest.value());
        }
        let elect_all = req.topic_partitions.is_none();
        let wanted: Vec<(String, Vec<i32>)> = match req.topic_partitions {
            Some(tps) => tps
                .into_iter()
                .map(|t| (t.topic.0.to_string(), t.partitions))
                .collect(),
            None => self
                .topics
                .iter()
                .map(|(n, t)| (n.clone(), (0..t.partitions.len() as i32).collect()))
                .collect(),
        };
        let mut results: Vec<ReplicaElectionResult> = Vec::new();
        for (topic, partitions) in wanted {
            let mut out = Vec::new();
            for p in partitions {
                let (code, message) = self.elect_one(&topic, p, election);
                if elect_all && code == Code::ElectionNotNeeded {
                    continue;
                }
                out.push(
                    PartitionResult::default()
                        .with_partition_id(p)
                        .with_error_code(code.value())
                        .with_error_message(message.map(StrBytes::from_string)),
                );
            }
            if out.is_empty() && elect_all {
                continue;
            }
            match results.iter_mut().find(|r| r.topic.0.as_str() == topic) {
                Some(r) => r.partition_result.extend(out),
                None => results.push(
                    ReplicaElectionResult::default()
                        .with_topic(TopicName(StrBytes::from_string(topic)))
                        .with_partition_result(out),
                ),
            }
        }
        ElectLeadersResponse::default().with_replica_election_results(results)
    }

    fn elect_one(&mut self, topic: &str, partition: i32, election: i8) -> (Code, Option<String>) {
        let alive: Vec<i32> = self.alive_brokers().map(|b| b.id).collect();
        let Some(log) = self.partition_mut(topic, partition) else {
            return (
                Code::UnknownTopicOrPartition,
                Some(format!("partition {topic}-{partition} does not exist")),
            );
        };
        let preferred = log.replicas.first().copied();
        let leader_up = alive.contains(&log.leader);
        let to = if election == PREFERRED {
            match preferred {
                Some(p) if p == log.leader && leader_up => {
                    return (
                        Code::ElectionNotNeeded,
                        Some("Leader election not needed for topic partition.".into()),
                    )
                }
                Some(p) if alive.contains(&p) => p,
                _ => {
                    return (
                        Code::PreferredLeaderNotAvailable,
                        Some(format!(
                            "the preferred replica {} of {topic}-{partition} is not available",
                            preferred.unwrap_or(-1)
                        )),
                    )
                }
            }
        } else {
            if leader_up {
                return (
                    Code::ElectionNotNeeded,
                    Some("Leader election not needed for topic partition.".into()),
                );
            }
            match log.replicas.iter().find(|r| alive.contains(r)) {
                Some(r) => *r,
                None => {
                    return (
                        Code::EligibleLeadersNotAvailable,
                        Some(format!("no replica of {topic}-{partition} is alive")),
                    )
                }
            }
        };
        log.set_leader(to);
        (Code::None, None)
    }
}
