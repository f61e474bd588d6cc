//! The transaction coordinator's admin side (KIP-664): ListTransactions
//! (state, producer id and duration filters) and DescribeTransactions, with
//! `NOT_COORDINATOR` and `TRANSACTIONAL_ID_NOT_FOUND` as Kafka answers them.

use std::collections::BTreeMap;

use kafka_protocol::messages::describe_transactions_response::{
    TopicData, TransactionState as Described,
};
use kafka_protocol::messages::list_transactions_response::TransactionState as Listed;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;

use super::errors::Code;
use super::state::ClusterState;
use super::txn::Txn;

/// Every state name Kafka's coordinator reports.
const STATES: [&str; 8] = [
    "Empty",
    "Ongoing",
    "PrepareCommit",
    "PrepareAbort",
    "CompleteCommit",
    "CompleteAbort",
    "Dead",
    "PrepareEpochFence",
];

/// The state Kafka would report: markers are written at once here, so a
/// transaction is never seen half-ended.
fn state(t: &Txn) -> &'static str {
    match (t.started_ms, t.last_end) {
        (Some(_), _) => "Ongoing",
        (None, Some(true)) => "CompleteCommit",
        (None, Some(false)) => "CompleteAbort",
        (None, None) => "Empty",
    }
}

impl ClusterState {
    pub(super) fn list_transactions(
        &self,
        broker: i32,
        req: ListTransactionsRequest,
        now_ms: i64,
    ) -> ListTransactionsResponse {
        let unknown: Vec<StrBytes> = req
            .state_filters
            .iter()
            .filter(|s| !STATES.contains(&s.as_str()))
            .cloned()
            .collect();
        let listed = self
            .txns
            .by_id
            .iter()
            .filter(|(id, _)| self.is_coordinator(broker, id))
            .filter(|(_, t)| {
                req.state_filters.is_empty()
                    || req.state_filters.iter().any(|s| s.as_str() == state(t))
            })
            .filter(|(_, t)| {
                req.producer_id_filters.is_empty()
                    || req.producer_id_filters.iter().any(|p| p.0 == t.producer_id)
            })
            .filter(|(_, t)| {
                req.duration_filter < 0
                    || t.started_ms
                        .is_some_and(|s| now_ms - s > req.duration_filter)
            })
            .map(|(id, t)| {
                Listed::default()
                    .with_transactional_id(TransactionalId(StrBytes::from_string(id.clone())))
                    .with_producer_id(ProducerId(t.producer_id))
                    .with_transaction_state(StrBytes::from_static_str(state(t)))
            })
            .collect();
        ListTransactionsResponse::default()
            .with_unknown_state_filters(unknown)
            .with_transaction_states(listed)
    }

    pub(super) fn describe_transactions(
        &self,
        broker: i32,
        req: DescribeTransactionsRequest,
    ) -> DescribeTransactionsResponse {
        let states = req
            .transactional_ids
            .into_iter()
            .map(|id| {
                let r = Described::default()
                    .with_transactional_id(id.clone())
                    .with_transaction_start_time_ms(-1)
                    .with_producer_id(ProducerId(-1))
                    .with_producer_epoch(-1);
                if !self.is_coordinator(broker, &id) {
                    return r.with_error_code(Code::NotCoordinator.value());
                }
                let Some(t) = self.txns.by_id.get(id.0.as_str()) else {
                    return r.with_error_code(Code::TransactionalIdNotFound.value());
                };
                let mut topics: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
                for (topic, p) in &t.partitions {
                    topics.entry(topic).or_default().push(*p);
                }
                r.with_transaction_state(StrBytes::from_static_str(state(t)))
                    .with_transaction_timeout_ms(i32::try_from(t.timeout_ms).unwrap_or(i32::MAX))
                    .with_transaction_start_time_ms(t.started_ms.unwrap_or(-1))
                    .with_producer_id(ProducerId(t.producer_id))
                    .with_producer_epoch(t.producer_epoch)
                    .with_topics(
                        topics
                            .into_iter()
                            .map(|(name, partitions)| {
                                TopicData::default()
                                    .with_topic(TopicName(StrBytes::from_string(name.to_string())))
                                    .with_partitions(partitions)
                            })
                            .collect(),
                    )
            })
            .collect();
        DescribeTransactionsResponse::default().with_transaction_states(states)
    }
}
