//! Produce (acks 0, 1 and all: every write is committed on append, the
//! fake having no followers to wait for) and InitProducerId for idempotent
//! producers, with the epoch bump of KIP-360.

use kafka_protocol::messages::produce_response::{
    LeaderIdAndEpoch, PartitionProduceResponse, TopicProduceResponse,
};
use kafka_protocol::messages::*;

use purekafka::protocol::records::BatchIter;

use super::errors::Code;
use super::state::{ClusterState, Reply};
use super::wire::FakeResponse;

impl ClusterState {
    pub(super) fn produce(
        &mut self,
        broker: i32,
        req: ProduceRequest,
        version: i16,
        now_ms: i64,
    ) -> Reply {
        // KIP-890: with transactions v2, Produce v12 adds partitions itself.
        let implicit_add = version >= 12 && self.config.transaction_version >= 2;
        let mut responses = Vec::with_capacity(req.topic_data.len());
        for topic in req.topic_data {
            let name = topic.name.0.to_string();
            // KIP-516: Produce v13 names topics by id; an unknown id appends nothing.
            let unknown_id = version >= 13 && name.is_empty();
            let partition_responses = topic
                .partition_data
                .into_iter()
                .map(|p| {
                    let result = if unknown_id {
                        Err(Code::UnknownTopicId)
                    } else {
                        self.produce_partition(
                            broker,
                            (&name, p.index),
                            p.records,
                            implicit_add,
                            now_ms,
                        )
                    };
                    let response = PartitionProduceResponse::default()
                        .with_index(p.index)
                        .with_log_append_time_ms(-1);
                    match result {
                        Ok((base, start)) => {
                            response.with_base_offset(base).with_log_start_offset(start)
                        }
                        Err(code) => {
                            let leader = self
                                .partition(&name, p.index)
                                .map(|l| (l.leader, l.leader_epoch));
                            let response = response
                                .with_error_code(code.value())
                                .with_base_offset(-1)
                                .with_log_start_offset(-1);
                            match (code, leader) {
                                (Code::NotLeaderOrFollower, Some((id, epoch))) => response
                                    .with_current_leader(
                                        LeaderIdAndEpoch::default()
                                            .with_leader_id(BrokerId(id))
                                            .with_leader_epoch(epoch),
                                    ),
                                _ => response,
                            }
                        }
                    }
                })
                .collect();
            responses.push(
                TopicProduceResponse::default()
                    .with_name(topic.name)
                    .with_topic_id(topic.topic_id)
                    .with_partition_responses(partition_responses),
            );
        }
        if req.acks == 0 {
            return Reply::Nothing;
        }
        Reply::Respond(FakeResponse::Produce(
            ProduceResponse::default().with_responses(responses),
        ))
    }

    fn produce_partition(
        &mut self,
        broker: i32,
        (topic, partition): (&str, i32),
        records: Option<bytes::Bytes>,
        implicit_add: bool,
        now_ms: i64,
    ) -> Result<(i64, i64), Code> {
        let records = records.ok_or(Code::CorruptMessage)?;
        let first = BatchIter::new(records.clone()).next();
        if let Some(Ok(batch)) = first {
            let h = batch.header();
            if h.is_transactional {
                let (pid, epoch) = (h.producer_id, h.producer_epoch);
                self.admit_transactional_batch(
                    pid,
                    epoch,
                    (topic, partition),
                    implicit_add,
                    now_ms,
                )?;
            }
        }
        let max = self
            .topics
            .get(topic)
            .map(|t| t.max_message_bytes())
            .ok_or(Code::UnknownTopicOrPartition)?;
        let log = self
            .partition_mut(topic, partition)
            .ok_or(Code::UnknownTopicOrPartition)?;
        if log.leader != broker {
            return Err(Code::NotLeaderOrFollower);
        }
        let too_large = BatchIter::new(records.clone())
            .filter_map(Result::ok)
            .any(|b| b.as_bytes().len() > max);
        if too_large {
            return Err(Code::MessageTooLarge);
        }
        let appended = log.append(records, now_ms)?;
        Ok((appended.base_offset, log.log_start()))
    }

    pub(super) fn init_producer_id(
        &mut self,
        broker: i32,
        req: InitProducerIdRequest,
        now_ms: i64,
    ) -> InitProducerIdResponse {
        if let Some(id) = req.transactional_id.as_ref().filter(|t| !t.0.is_empty()) {
            let id = id.0.to_string();
            return self.init_transactional_producer(broker, &id, &req, now_ms);
        }
        let (id, epoch) = if req.producer_id.0 >= 0 && req.producer_epoch >= 0 {
            // KIP-360: an idempotent producer bumps its own epoch.
            match req.producer_epoch.checked_add(1) {
                Some(e) => (req.producer_id.0, e),
                None => (self.new_producer_id(), 0),
            }
        } else {
            (self.new_producer_id(), 0)
        };
        InitProducerIdResponse::default()
            .with_producer_id(ProducerId(id))
            .with_producer_epoch(epoch)
    }

    /// A fresh producer id.
    pub(super) fn new_producer_id(&mut self) -> i64 {
        let id = self.next_producer_id;
        self.next_producer_id += 1;
        id
    }
}
