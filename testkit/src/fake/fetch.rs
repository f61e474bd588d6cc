//! Fetch (with KIP-227 sessions, KIP-320 leader epochs and read_committed
//! through the last stable offset and aborted-transaction index of KIP-98),
//! ListOffsets, OffsetsForLeaderEpoch and DeleteRecords.

use kafka_protocol::messages::delete_records_response::{
    DeleteRecordsPartitionResult, DeleteRecordsTopicResult,
};
use kafka_protocol::messages::fetch_response::{
    AbortedTransaction, EpochEndOffset as Diverging, FetchableTopicResponse, LeaderIdAndEpoch,
    NodeEndpoint, PartitionData,
};
use kafka_protocol::messages::list_offsets_response::{
    ListOffsetsPartitionResponse, ListOffsetsTopicResponse,
};
use kafka_protocol::messages::offset_for_leader_epoch_response::{
    EpochEndOffset, OffsetForLeaderTopicResult,
};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;

use super::errors::Code;
use super::fetch_session::{Session, SessionPartition, SessionUse};
use super::log::PartitionLog;
use super::shapes::per_partition;
use super::state::{ClusterState, Reply};
use super::wire::FakeResponse;

/// The longest a fetch may wait, whatever it asks.
const MAX_WAIT_CAP_MS: i64 = 30_000;

impl ClusterState {
    pub(super) fn fetch(
        &mut self,
        broker: i32,
        req: FetchRequest,
        version: i16,
        now_ms: i64,
        final_try: bool,
    ) -> Reply {
        let use_ = if version >= 7 {
            match self
                .sessions
                .classify(broker, req.session_id, req.session_epoch)
            {
                Ok(u) => u,
                Err(code) => {
                    return Reply::Respond(FakeResponse::Fetch(
                        FetchResponse::default().with_error_code(code.value()),
                    ))
                }
            }
        } else {
            SessionUse::Sessionless
        };
        let mut session = match &use_ {
            SessionUse::Incremental(id) => self.sessions.get(broker, *id).unwrap_or_default(),
            _ => Session::default(),
        };
        let full = !matches!(use_, SessionUse::Incremental(_));
        // KIP-516: an id no topic has is answered, never kept in the session.
        let mut unknown_ids: Vec<FetchableTopicResponse> = Vec::new();
        for topic in &req.topics {
            if version >= 13 && topic.topic.0.is_empty() {
                unknown_ids.push(unknown_topic_id(topic));
                continue;
            }
            for p in &topic.partitions {
                session.partitions.insert(
                    (topic.topic.0.to_string(), p.partition),
                    SessionPartition {
                        fetch_offset: p.fetch_offset,
                        max_bytes: p.partition_max_bytes,
                        current_leader_epoch: p.current_leader_epoch,
                        last_fetched_epoch: p.last_fetched_epoch,
                        sent_hw: -1,
                        sent_lso: -1,
                        sent_start: -1,
                        topic_id: if version >= 13 {
                            topic.topic_id
                        } else {
                            uuid::Uuid::nil()
                        },
                    },
                );
            }
        }
        for forgotten in &req.forgotten_topics_data {
            for p in &forgotten.partitions {
                session
                    .partitions
                    .remove(&(forgotten.topic.0.to_string(), *p));
            }
        }
        let read_committed = req.isolation_level == 1;
        let mut budget = usize::try_from(req.max_bytes).unwrap_or(0).max(1);
        let mut total = 0usize;
        let mut any_error = false;
        let mut topics: Vec<FetchableTopicResponse> = Vec::new();
        let requested: Vec<(String, i32)> = req
            .topics
            .iter()
            .flat_map(|t| {
                t.partitions
                    .iter()
                    .map(move |p| (t.topic.0.to_string(), p.partition))
            })
            .collect();
        let keys: Vec<(String, i32)> = session.partitions.keys().cloned().collect();
        for key in keys {
            let Some(sp) = session.partitions.get_mut(&key) else {
                continue;
            };
            let data = self.fetch_partition(broker, &key.0, key.1, sp, read_committed, &mut budget);
            let has_news = data.error_code != 0
                || data.records.as_ref().is_some_and(|r| !r.is_empty())
                || data.high_watermark != sp.sent_hw
                || data.last_stable_offset != sp.sent_lso
                || data.log_start_offset != sp.sent_start;
            any_error |= data.error_code != 0;
            total += data.records.as_ref().map_or(0, |r| r.len());
            sp.sent_hw = data.high_watermark;
            sp.sent_lso = data.last_stable_offset;
            sp.sent_start = data.log_start_offset;
            let topic_id = if sp.topic_id.is_nil() {
                self.topic_id(&key.0)
            } else {
                sp.topic_id
            };
            let wanted = full && requested.contains(&key);
            if !(wanted || (!full && has_news)) {
                continue;
            }
            match topics.iter_mut().find(|t| t.topic.0.as_str() == key.0) {
                Some(t) => t.partitions.push(data),
                None => topics.push(
                    FetchableTopicResponse::default()
                        .with_topic(TopicName(StrBytes::from_string(key.0.clone())))
                        .with_topic_id(topic_id)
                        .with_partitions(vec![data]),
                ),
            }
        }
        any_error |= !unknown_ids.is_empty();
        topics.extend(unknown_ids);
        let min_bytes = usize::try_from(req.min_bytes).unwrap_or(0);
        if !final_try && !any_error && total < min_bytes.max(1) && req.max_wait_ms > 0 {
            return Reply::WaitForData {
                until_ms: now_ms + i64::from(req.max_wait_ms).min(MAX_WAIT_CAP_MS),
            };
        }
        let session_id = match use_ {
            SessionUse::Sessionless => 0,
            SessionUse::New => self.sessions.commit(broker, None, session),
            SessionUse::Incremental(id) => self.sessions.commit(broker, Some(id), session),
        };
        let endpoints = self.leader_endpoints(&topics);
        Reply::Respond(FakeResponse::Fetch(
            FetchResponse::default()
                .with_session_id(session_id)
                .with_responses(topics)
                .with_node_endpoints(endpoints),
        ))
    }

    /// KIP-951 (Fetch v16+): the addresses of the leaders a refused
    /// partition names, so the client can go there without a Metadata round.
    fn leader_endpoints(&self, topics: &[FetchableTopicResponse]) -> Vec<NodeEndpoint> {
        let leaders: std::collections::BTreeSet<i32> = topics
            .iter()
            .flat_map(|t| &t.partitions)
            .filter(|p| p.error_code != 0 && p.current_leader.leader_id.0 >= 0)
            .map(|p| p.current_leader.leader_id.0)
            .collect();
        self.brokers
            .iter()
            .filter(|b| b.alive && leaders.contains(&b.id))
            .map(|b| {
                NodeEndpoint::default()
                    .with_node_id(BrokerId(b.id))
                    .with_host(StrBytes::from_string(b.host.clone()))
                    .with_port(i32::from(b.port))
            })
            .collect()
    }

    fn fetch_partition(
        &self,
        broker: i32,
        topic: &str,
        partition: i32,
        sp: &mut SessionPartition,
        read_committed: bool,
        budget: &mut usize,
    ) -> PartitionData {
        let data = PartitionData::default()
            .with_partition_index(partition)
            .with_high_watermark(-1)
            .with_last_stable_offset(-1)
            .with_log_start_offset(-1);
        if !sp.topic_id.is_nil() && self.topic_id(topic) != sp.topic_id {
            return data.with_error_code(Code::UnknownTopicId.value());
        }
        let Some(log) = self.partition(topic, partition) else {
            return data.with_error_code(Code::UnknownTopicOrPartition.value());
        };
        if let Err(code) = check_leader(log, broker, sp.current_leader_epoch) {
            return data.with_error_code(code.value()).with_current_leader(
                LeaderIdAndEpoch::default()
                    .with_leader_id(BrokerId(log.leader))
                    .with_leader_epoch(log.leader_epoch),
            );
        }
        let data = data
            .with_high_watermark(log.high_watermark())
            .with_last_stable_offset(log.last_stable_offset())
            .with_log_start_offset(log.log_start());
        if sp.last_fetched_epoch >= 0 {
            let (epoch, end) = log.epoch_end(sp.last_fetched_epoch);
            if epoch != sp.last_fetched_epoch || end < sp.fetch_offset {
                return data.with_diverging_epoch(
                    Diverging::default().with_epoch(epoch).with_end_offset(end),
                );
            }
        }
        if !log.in_range(sp.fetch_offset) {
            return data.with_error_code(Code::OffsetOutOfRange.value());
        }
        let limit = if read_committed {
            log.last_stable_offset()
        } else {
            log.high_watermark()
        };
        let max = usize::try_from(sp.max_bytes).unwrap_or(0).min(*budget);
        let records = if *budget == 0 {
            bytes::Bytes::new()
        } else {
            log.read(sp.fetch_offset, max, limit)
        };
        *budget = budget.saturating_sub(records.len());
        let aborted = read_committed.then(|| {
            log.aborted_between(sp.fetch_offset, limit)
                .into_iter()
                .map(|a| {
                    AbortedTransaction::default()
                        .with_producer_id(ProducerId(a.producer_id))
                        .with_first_offset(a.first_offset)
                })
                .collect()
        });
        data.with_records(Some(records))
            .with_aborted_transactions(aborted)
    }

    pub(super) fn list_offsets(&self, broker: i32, req: ListOffsetsRequest) -> ListOffsetsResponse {
        let read_committed = req.isolation_level == 1;
        let topics = per_partition(
            req.topics,
            |t| (t.name, t.partitions),
            |name, p| {
                let r = ListOffsetsPartitionResponse::default()
                    .with_partition_index(p.partition_index)
                    .with_timestamp(-1)
                    .with_offset(-1)
                    .with_leader_epoch(-1);
                let Some(log) = self.partition(name, p.partition_index) else {
                    return r.with_error_code(Code::UnknownTopicOrPartition.value());
                };
                if let Err(code) = check_leader(log, broker, p.current_leader_epoch) {
                    return r.with_error_code(code.value());
                }
                let limit = if read_committed {
                    log.last_stable_offset()
                } else {
                    log.high_watermark()
                };
                let (offset, timestamp, epoch) = log.offset_for_time(p.timestamp, limit);
                r.with_offset(offset)
                    .with_timestamp(timestamp)
                    .with_leader_epoch(epoch)
            },
            |name, partitions| {
                ListOffsetsTopicResponse::default()
                    .with_name(name)
                    .with_partitions(partitions)
            },
        );
        ListOffsetsResponse::default().with_topics(topics)
    }

    pub(super) fn offset_for_leader_epoch(
        &self,
        broker: i32,
        req: OffsetForLeaderEpochRequest,
    ) -> OffsetForLeaderEpochResponse {
        let topics = per_partition(
            req.topics,
            |t| (t.topic, t.partitions),
            |name, p| {
                let r = EpochEndOffset::default()
                    .with_partition(p.partition)
                    .with_leader_epoch(-1)
                    .with_end_offset(-1);
                let Some(log) = self.partition(name, p.partition) else {
                    return r.with_error_code(Code::UnknownTopicOrPartition.value());
                };
                if let Err(code) = check_leader(log, broker, p.current_leader_epoch) {
                    return r.with_error_code(code.value());
                }
                let (epoch, end) = log.epoch_end(p.leader_epoch);
                r.with_leader_epoch(epoch).with_end_offset(end)
            },
            |name, partitions| {
                OffsetForLeaderTopicResult::default()
                    .with_topic(name)
                    .with_partitions(partitions)
            },
        );
        OffsetForLeaderEpochResponse::default().with_topics(topics)
    }

    pub(super) fn delete_records(
        &mut self,
        broker: i32,
        req: DeleteRecordsRequest,
    ) -> DeleteRecordsResponse {
        let topics = per_partition(
            req.topics,
            |t| (t.name, t.partitions),
            |name, p| {
                let r = DeleteRecordsPartitionResult::default()
                    .with_partition_index(p.partition_index)
                    .with_low_watermark(-1);
                let Some(log) = self.partition_mut(name, p.partition_index) else {
                    return r.with_error_code(Code::UnknownTopicOrPartition.value());
                };
                if log.leader != broker {
                    return r.with_error_code(Code::NotLeaderOrFollower.value());
                }
                match log.delete_before(p.offset) {
                    Ok(low) => r.with_low_watermark(low),
                    Err(code) => r.with_error_code(code.value()),
                }
            },
            |name, partitions| {
                DeleteRecordsTopicResult::default()
                    .with_name(name)
                    .with_partitions(partitions)
            },
        );
        DeleteRecordsResponse::default().with_topics(topics)
    }
}

/// The answer for a topic addressed by an id no topic has: every
/// partition `UNKNOWN_TOPIC_ID`.
fn unknown_topic_id(
    topic: &kafka_protocol::messages::fetch_request::FetchTopic,
) -> FetchableTopicResponse {
    let partitions = topic
        .partitions
        .iter()
        .map(|p| {
            PartitionData::default()
                .with_partition_index(p.partition)
                .with_error_code(Code::UnknownTopicId.value())
                .with_high_watermark(-1)
                .with_last_stable_offset(-1)
                .with_log_start_offset(-1)
        })
        .collect();
    FetchableTopicResponse::default()
        .with_topic_id(topic.topic_id)
        .with_partitions(partitions)
}

/// KIP-320: the request must reach the leader, at the leader's epoch when
/// the client names one.
fn check_leader(log: &PartitionLog, broker: i32, current_epoch: i32) -> Result<(), Code> {
    if log.leader != broker {
        return Err(Code::NotLeaderOrFollower);
    }
    match current_epoch {
        -1 => Ok(()),
        e if e < log.leader_epoch => Err(Code::FencedLeaderEpoch),
        e if e > log.leader_epoch => Err(Code::UnknownLeaderEpoch),
        _ => Ok(()),
    }
}
