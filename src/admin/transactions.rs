//! Producers and transactions (KIP-664): DescribeProducers per partition
//! leader, ListTransactions from every broker (each coordinates a share of
//! the transactional ids), DescribeTransactions per transaction
//! coordinator.

use std::collections::BTreeMap;

use indexmap::IndexMap;
use kafka_protocol::messages::describe_producers_request::TopicRequest;
use kafka_protocol::messages::{
    DescribeProducersRequest, DescribeTransactionsRequest, ListTransactionsRequest, TopicName,
    TransactionalId,
};

use super::{check, missing, str_bytes, Admin, PerResource};
use crate::cluster::CoordinatorKind;
use crate::error::Result;
use crate::net::Workload;
use crate::protocol::versions::Versions;
use crate::TopicPartition;

const DESCRIBE_PRODUCERS_VERSIONS: Versions = Versions::new(0, 0);
const LIST_TRANSACTIONS_VERSIONS: Versions = Versions::new(0, 1);
const DESCRIBE_TRANSACTIONS_VERSIONS: Versions = Versions::new(0, 0);

/// An active producer on a partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProducerState {
    /// Producer id.
    pub producer_id: i64,
    /// Producer epoch.
    pub producer_epoch: i32,
    /// Last sequence number written.
    pub last_sequence: i32,
    /// Timestamp of its last write (ms).
    pub last_timestamp: i64,
    /// Coordinator epoch of its last transaction marker.
    pub coordinator_epoch: i32,
    /// First offset of its open transaction, if one is open.
    pub current_txn_start_offset: Option<i64>,
}

/// A transaction as listed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransactionListing {
    /// Transactional id.
    pub transactional_id: String,
    /// Producer id.
    pub producer_id: i64,
    /// State (`Ongoing`, `CompleteCommit`, ...).
    pub state: String,
    /// The coordinator's node id.
    pub coordinator: i32,
}

/// A described transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransactionDescription {
    /// State.
    pub state: String,
    /// Timeout (ms).
    pub timeout_ms: i32,
    /// Start time of the open transaction (ms), -1 if none.
    pub start_time_ms: i64,
    /// Producer id.
    pub producer_id: i64,
    /// Producer epoch.
    pub producer_epoch: i16,
    /// Partitions in the open transaction.
    pub partitions: Vec<TopicPartition>,
    /// The coordinator's node id.
    pub coordinator: i32,
}

impl Admin {
    /// Active producers of each partition, from its leader.
    pub async fn describe_producers(
        &self,
        partitions: &[TopicPartition],
    ) -> Result<BTreeMap<TopicPartition, Result<Vec<ProducerState>>>> {
        let mut failed = Vec::new();
        let by_leader = self
            .by_leader(partitions.iter().cloned(), &mut failed)
            .await;
        let mut out: BTreeMap<TopicPartition, Result<Vec<ProducerState>>> =
            failed.into_iter().map(|(tp, e)| (tp, Err(e))).collect();
        for (addr, tps) in by_leader {
            let mut topics: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
            for tp in &tps {
                topics.entry(&tp.topic).or_default().push(tp.partition);
            }
            let req = DescribeProducersRequest::default().with_topics(
                topics
                    .into_iter()
                    .map(|(t, ps)| {
                        TopicRequest::default()
                            .with_name(TopicName(str_bytes(t)))
                            .with_partition_indexes(ps)
                    })
                    .collect(),
            );
            let resp = self
                .cluster
                .send(&addr, Workload::Admin, &req, DESCRIBE_PRODUCERS_VERSIONS)
                .await;
            for tp in tps {
                let r = match &resp {
                    Err(e) => Err(e.clone()),
                    Ok(resp) => resp
                        .topics
                        .iter()
                        .filter(|t| t.name.0.as_str() == &*tp.topic)
                        .flat_map(|t| t.partitions.iter())
                        .find(|p| p.partition_index == tp.partition)
                        .ok_or_else(|| missing("DescribeProducers", &tp.to_string()))
                        .and_then(|p| {
                            check(
                                p.error_code,
                                p.error_message.as_ref(),
                                "DescribeProducers",
                                &format!("{tp} on {addr}"),
                            )?;
                            Ok(p.active_producers
                                .iter()
                                .map(|s| ProducerState {
                                    producer_id: s.producer_id.0,
                                    producer_epoch: s.producer_epoch,
                                    last_sequence: s.last_sequence,
                                    last_timestamp: s.last_timestamp,
                                    coordinator_epoch: s.coordinator_epoch,
                                    current_txn_start_offset: (s.current_txn_start_offset >= 0)
                                        .then_some(s.current_txn_start_offset),
                                })
                                .collect())
                        }),
                };
                out.insert(tp, r);
            }
        }
        Ok(out)
    }

    /// Lists transactions on every broker, optionally only in `states`.
    pub async fn list_transactions(&self, states: &[String]) -> Result<Vec<TransactionListing>> {
        let req = ListTransactionsRequest::default()
            .with_state_filters(states.iter().map(|x| str_bytes(x)).collect());
        let mut out = Vec::new();
        let answers = self
            .every_broker(&req, LIST_TRANSACTIONS_VERSIONS, "ListTransactions", |r| {
                r.error_code
            })
            .await?;
        for (coordinator, resp) in answers {
            out.extend(resp.transaction_states.iter().map(|t| TransactionListing {
                transactional_id: t.transactional_id.0.as_str().to_owned(),
                producer_id: t.producer_id.0,
                state: t.transaction_state.as_str().to_owned(),
                coordinator,
            }));
        }
        out.sort_by(|a, b| a.transactional_id.cmp(&b.transactional_id));
        Ok(out)
    }

    /// Describes transactions, one result per transactional id.
    pub async fn describe_transactions(
        &self,
        ids: &[String],
    ) -> Result<PerResource<String, TransactionDescription>> {
        let mut out = IndexMap::new();
        for id in ids {
            let req = DescribeTransactionsRequest::default()
                .with_transactional_ids(vec![TransactionalId(str_bytes(id))]);
            let r = self
                .send_coordinator(
                    CoordinatorKind::Transaction,
                    id,
                    &req,
                    DESCRIBE_TRANSACTIONS_VERSIONS,
                    |r| r.transaction_states.first().map_or(0, |t| t.error_code),
                )
                .await
                .and_then(|(addr, resp)| {
                    let t = resp
                        .transaction_states
                        .iter()
                        .find(|t| t.transactional_id.0.as_str() == id)
                        .ok_or_else(|| missing("DescribeTransactions", id))?;
                    check(
                        t.error_code,
                        None,
                        "DescribeTransactions",
                        &format!("transactional id {id}"),
                    )?;
                    let mut partitions: Vec<TopicPartition> = t
                        .topics
                        .iter()
                        .flat_map(|d| {
                            d.partitions
                                .iter()
                                .map(|p| TopicPartition::new(d.topic.0.as_str(), *p))
                        })
                        .collect();
                    partitions.sort();
                    Ok(TransactionDescription {
                        state: t.transaction_state.as_str().to_owned(),
                        timeout_ms: t.transaction_timeout_ms,
                        start_time_ms: t.transaction_start_time_ms,
                        producer_id: t.producer_id.0,
                        producer_epoch: t.producer_epoch,
                        partitions,
                        coordinator: addr.id.unwrap_or(-1),
                    })
                });
            out.insert(id.clone(), r);
        }
        Ok(out)
    }
}
