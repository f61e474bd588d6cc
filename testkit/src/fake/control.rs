//! Fault injection: rules that match requests by API key, broker, topic or
//! group, and replace the honest answer with an error code, a delay (before
//! serving, or of the answer after serving), a dropped connection or
//! silence, once, N times or always.
//!
//! A matched error is answered without touching the cluster state: a
//! Produce refused with `NOT_LEADER_OR_FOLLOWER` appends nothing, as on a
//! real broker.

use std::time::Duration;

use kafka_protocol::messages::*;

use super::wire::{FakeRequest, FakeResponse};

/// What a matching rule does to the request.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Action {
    /// Answer with this error code wherever the API has one (the state is
    /// not touched). APIs without an error shape drop the connection instead.
    Error(i16),
    /// Wait this long, then serve honestly.
    Delay(Duration),
    /// Serve honestly at once (the cluster state changes now), then hold
    /// the answer this long before writing it: a client that learns late
    /// what the broker already did (a slow network, a descheduled client).
    DelayAnswer(Duration),
    /// Close the connection without answering.
    Drop,
    /// Never answer; the connection stays open but serves nothing more.
    Silence,
    /// Serve honestly (a rule that only counts).
    Pass,
}

/// A fault-injection rule. Build with [`Rule::new`] and the `on_*`/`times`
/// methods.
#[derive(Debug, Clone, PartialEq)]
pub struct Rule {
    api: Option<ApiKey>,
    broker: Option<i32>,
    topic: Option<String>,
    group: Option<String>,
    action: Action,
    remaining: Option<usize>,
    probability: Option<f64>,
    hits: usize,
}

impl Rule {
    /// A rule applying `action` to every request, forever.
    pub fn new(action: Action) -> Rule {
        Rule {
            api: None,
            broker: None,
            topic: None,
            group: None,
            action,
            remaining: None,
            probability: None,
            hits: 0,
        }
    }

    /// Only requests of this API.
    pub fn on_api(mut self, api: ApiKey) -> Rule {
        self.api = Some(api);
        self
    }

    /// Only requests to this broker.
    pub fn on_broker(mut self, broker: i32) -> Rule {
        self.broker = Some(broker);
        self
    }

    /// Only requests naming this topic.
    pub fn on_topic(mut self, topic: impl Into<String>) -> Rule {
        self.topic = Some(topic.into());
        self
    }

    /// Only requests naming this group.
    pub fn on_group(mut self, group: impl Into<String>) -> Rule {
        self.group = Some(group.into());
        self
    }

    /// Applies to the next `n` matching requests, then retires.
    pub fn times(mut self, n: usize) -> Rule {
        self.remaining = Some(n);
        self
    }

    /// Applies to the next matching request only.
    pub fn once(self) -> Rule {
        self.times(1)
    }

    /// Applies to each matching request with probability `p` (0..=1), drawn
    /// from the cluster's seeded generator: the same seed and the same
    /// request sequence give the same faults.
    pub fn with_probability(mut self, p: f64) -> Rule {
        self.probability = Some(p.clamp(0.0, 1.0));
        self
    }

    fn matches(&self, broker: i32, req: &FakeRequest) -> bool {
        if self.remaining == Some(0) {
            return false;
        }
        if self.api.is_some_and(|a| a != req.api_key()) || self.broker.is_some_and(|b| b != broker)
        {
            return false;
        }
        if let Some(t) = &self.topic {
            if !request_topics(req).iter().any(|n| n == t) {
                return false;
            }
        }
        if let Some(g) = &self.group {
            if request_group(req).as_deref() != Some(g.as_str()) {
                return false;
            }
        }
        true
    }
}

/// The ordered rule list; the first live match wins.
#[derive(Debug)]
pub struct Rules {
    rules: Vec<Rule>,
    rng: fastrand::Rng,
}

impl Rules {
    /// No rules; probabilities drawn from a generator seeded with `seed`.
    pub fn seeded(seed: u64) -> Rules {
        Rules {
            rules: Vec::new(),
            rng: fastrand::Rng::with_seed(seed),
        }
    }

    /// How many requests each rule has acted on, in the order added.
    pub fn hits(&self) -> Vec<usize> {
        self.rules.iter().map(|r| r.hits).collect()
    }

    /// Adds a rule after the existing ones.
    pub fn push(&mut self, rule: Rule) {
        self.rules.push(rule);
    }

    /// Removes every rule.
    pub fn clear(&mut self) {
        self.rules.clear();
    }

    /// The action for this request, counting the hit.
    pub fn action_for(&mut self, broker: i32, req: &FakeRequest) -> Action {
        for rule in &mut self.rules {
            if rule.matches(broker, req) {
                if let Some(p) = rule.probability {
                    if self.rng.f64() >= p {
                        continue;
                    }
                }
                rule.hits += 1;
                if let Some(n) = rule.remaining.as_mut() {
                    *n -= 1;
                }
                return rule.action.clone();
            }
        }
        Action::Pass
    }
}

fn request_topics(req: &FakeRequest) -> Vec<String> {
    match req {
        FakeRequest::Produce(r) => r.topic_data.iter().map(|t| t.name.0.to_string()).collect(),
        FakeRequest::Fetch(r) => r.topics.iter().map(|t| t.topic.0.to_string()).collect(),
        FakeRequest::ListOffsets(r) => r.topics.iter().map(|t| t.name.0.to_string()).collect(),
        FakeRequest::Metadata(r) => r
            .topics
            .iter()
            .flatten()
            .filter_map(|t| t.name.as_ref().map(|n| n.0.to_string()))
            .collect(),
        FakeRequest::OffsetCommit(r) => r.topics.iter().map(|t| t.name.0.to_string()).collect(),
        FakeRequest::CreateTopics(r) => r.topics.iter().map(|t| t.name.0.to_string()).collect(),
        FakeRequest::DeleteRecords(r) => r.topics.iter().map(|t| t.name.0.to_string()).collect(),
        _ => Vec::new(),
    }
}

fn request_group(req: &FakeRequest) -> Option<String> {
    match req {
        FakeRequest::JoinGroup(r) => Some(r.group_id.0.to_string()),
        FakeRequest::SyncGroup(r) => Some(r.group_id.0.to_string()),
        FakeRequest::Heartbeat(r) => Some(r.group_id.0.to_string()),
        FakeRequest::ConsumerGroupHeartbeat(r) => Some(r.group_id.0.to_string()),
        FakeRequest::StreamsGroupHeartbeat(r) => Some(r.group_id.0.to_string()),
        FakeRequest::LeaveGroup(r) => Some(r.group_id.0.to_string()),
        FakeRequest::OffsetCommit(r) => Some(r.group_id.0.to_string()),
        FakeRequest::OffsetFetch(r) => Some(
            r.groups
                .first()
                .map(|g| g.group_id.0.to_string())
                .unwrap_or_else(|| r.group_id.0.to_string()),
        ),
        FakeRequest::FindCoordinator(r) => Some(
            r.coordinator_keys
                .first()
                .map(|k| k.to_string())
                .unwrap_or_else(|| r.key.to_string()),
        ),
        _ => None,
    }
}

/// The response to `req` carrying `code` everywhere it has an error code,
/// or `None` for APIs this does not cover.
pub fn error_response(req: &FakeRequest, code: i16) -> Option<FakeResponse> {
    use kafka_protocol::messages::fetch_response::{FetchableTopicResponse, PartitionData};
    use kafka_protocol::messages::list_offsets_response::{
        ListOffsetsPartitionResponse, ListOffsetsTopicResponse,
    };
    use kafka_protocol::messages::offset_commit_response::{
        OffsetCommitResponsePartition, OffsetCommitResponseTopic,
    };
    use kafka_protocol::messages::produce_response::{
        PartitionProduceResponse, TopicProduceResponse,
    };
    Some(match req {
        FakeRequest::Produce(r) => FakeResponse::Produce(
            ProduceResponse::default().with_responses(
                r.topic_data
                    .iter()
                    .map(|t| {
                        TopicProduceResponse::default()
                            .with_name(t.name.clone())
                            .with_topic_id(t.topic_id)
                            .with_partition_responses(
                                t.partition_data
                                    .iter()
                                    .map(|p| {
                                        PartitionProduceResponse::default()
                                            .with_index(p.index)
                                            .with_error_code(code)
                                            .with_base_offset(-1)
                                            .with_log_append_time_ms(-1)
                                            .with_log_start_offset(-1)
                                    })
                                    .collect(),
                            )
                    })
                    .collect(),
            ),
        ),
        FakeRequest::Fetch(r) => FakeResponse::Fetch(
            FetchResponse::default()
                .with_session_id(r.session_id)
                .with_responses(
                    r.topics
                        .iter()
                        .map(|t| {
                            FetchableTopicResponse::default()
                                .with_topic(t.topic.clone())
                                .with_topic_id(t.topic_id)
                                .with_partitions(
                                    t.partitions
                                        .iter()
                                        .map(|p| {
                                            PartitionData::default()
                                                .with_partition_index(p.partition)
                                                .with_error_code(code)
                                                .with_high_watermark(-1)
                                                .with_last_stable_offset(-1)
                                                .with_log_start_offset(-1)
                                        })
                                        .collect(),
                                )
                        })
                        .collect(),
                ),
        ),
        FakeRequest::ListOffsets(r) => FakeResponse::ListOffsets(
            ListOffsetsResponse::default().with_topics(
                r.topics
                    .iter()
                    .map(|t| {
                        ListOffsetsTopicResponse::default()
                            .with_name(t.name.clone())
                            .with_partitions(
                                t.partitions
                                    .iter()
                                    .map(|p| {
                                        ListOffsetsPartitionResponse::default()
                                            .with_partition_index(p.partition_index)
                                            .with_error_code(code)
                                            .with_offset(-1)
                                            .with_timestamp(-1)
                                    })
                                    .collect(),
                            )
                    })
                    .collect(),
            ),
        ),
        FakeRequest::OffsetCommit(r) => FakeResponse::OffsetCommit(
            OffsetCommitResponse::default().with_topics(
                r.topics
                    .iter()
                    .map(|t| {
                        OffsetCommitResponseTopic::default()
                            .with_name(t.name.clone())
                            .with_partitions(
                                t.partitions
                                    .iter()
                                    .map(|p| {
                                        OffsetCommitResponsePartition::default()
                                            .with_partition_index(p.partition_index)
                                            .with_error_code(code)
                                    })
                                    .collect(),
                            )
                    })
                    .collect(),
            ),
        ),
        FakeRequest::InitProducerId(_) => FakeResponse::InitProducerId(
            InitProducerIdResponse::default()
                .with_error_code(code)
                .with_producer_id(ProducerId(-1))
                .with_producer_epoch(-1),
        ),
        FakeRequest::FindCoordinator(r) => {
            use kafka_protocol::messages::find_coordinator_response::Coordinator;
            // v4+ asks for keys and answers per key: its response has no
            // top-level error code or node id, and setting them would make
            // the answer unencodable (the connection would just close).
            let single_key = r.coordinator_keys.is_empty();
            FakeResponse::FindCoordinator(
                FindCoordinatorResponse::default()
                    .with_error_code(if single_key { code } else { 0 })
                    .with_node_id(BrokerId(if single_key { -1 } else { 0 }))
                    .with_coordinators(
                        r.coordinator_keys
                            .iter()
                            .map(|k| {
                                Coordinator::default()
                                    .with_key(k.clone())
                                    .with_node_id(BrokerId(-1))
                                    .with_error_code(code)
                            })
                            .collect(),
                    ),
            )
        }
        FakeRequest::JoinGroup(r) => FakeResponse::JoinGroup(
            JoinGroupResponse::default()
                .with_error_code(code)
                .with_generation_id(-1)
                .with_member_id(r.member_id.clone()),
        ),
        FakeRequest::ConsumerGroupHeartbeat(r) => FakeResponse::ConsumerGroupHeartbeat(
            ConsumerGroupHeartbeatResponse::default()
                .with_error_code(code)
                .with_member_id(Some(r.member_id.clone()))
                .with_member_epoch(r.member_epoch),
        ),
        FakeRequest::StreamsGroupHeartbeat(r) => FakeResponse::StreamsGroupHeartbeat(
            StreamsGroupHeartbeatResponse::default()
                .with_error_code(code)
                .with_member_id(r.member_id.clone())
                .with_member_epoch(r.member_epoch),
        ),
        FakeRequest::SyncGroup(_) => {
            FakeResponse::SyncGroup(SyncGroupResponse::default().with_error_code(code))
        }
        FakeRequest::Heartbeat(_) => {
            FakeResponse::Heartbeat(HeartbeatResponse::default().with_error_code(code))
        }
        FakeRequest::LeaveGroup(_) => {
            FakeResponse::LeaveGroup(LeaveGroupResponse::default().with_error_code(code))
        }
        FakeRequest::OffsetFetch(r) => {
            use kafka_protocol::messages::offset_fetch_response::OffsetFetchResponseGroup;
            FakeResponse::OffsetFetch(
                OffsetFetchResponse::default()
                    .with_error_code(code)
                    .with_groups(
                        r.groups
                            .iter()
                            .map(|g| {
                                OffsetFetchResponseGroup::default()
                                    .with_group_id(g.group_id.clone())
                                    .with_error_code(code)
                            })
                            .collect(),
                    ),
            )
        }
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pattern(seed: u64) -> Vec<bool> {
        let mut rules = Rules::seeded(seed);
        rules.push(
            Rule::new(Action::Drop)
                .on_api(ApiKey::Metadata)
                .with_probability(0.5),
        );
        let req = FakeRequest::Metadata(MetadataRequest::default());
        (0..64)
            .map(|_| rules.action_for(0, &req) == Action::Drop)
            .collect()
    }

    #[test]
    fn probabilistic_faults_replay_from_their_seed() {
        assert_eq!(pattern(7), pattern(7));
        assert_ne!(pattern(7), pattern(8));
        let hits = pattern(7).iter().filter(|h| **h).count();
        assert!((10..=54).contains(&hits), "about half of 64: {hits}");
    }

    #[test]
    fn counted_rules_retire_and_filters_apply() {
        let mut rules = Rules::seeded(0);
        rules.push(
            Rule::new(Action::Error(6))
                .on_api(ApiKey::Metadata)
                .on_broker(1)
                .times(2),
        );
        let req = FakeRequest::Metadata(MetadataRequest::default());
        assert_eq!(rules.action_for(0, &req), Action::Pass, "other broker");
        assert_eq!(rules.action_for(1, &req), Action::Error(6));
        assert_eq!(rules.action_for(1, &req), Action::Error(6));
        assert_eq!(rules.action_for(1, &req), Action::Pass, "retired after two");
        assert_eq!(rules.hits(), vec![2]);
    }
}
