//! The transaction coordinator, protocol v1 (KIP-98, KIP-447): transactional
//! InitProducerId with fencing by epoch, AddPartitionsToTxn,
//! AddOffsetsToTxn, TxnOffsetCommit, EndTxn writing commit or abort markers
//! into every partition of the transaction, and transaction timeouts that
//! abort and bump the epoch. Transactions v2 (KIP-890) is not advertised:
//! ApiVersions finalizes no `transaction.version`, so clients use v1.

use std::collections::{BTreeMap, BTreeSet};

use kafka_protocol::messages::add_partitions_to_txn_response::{
    AddPartitionsToTxnPartitionResult, AddPartitionsToTxnTopicResult,
};
use kafka_protocol::messages::txn_offset_commit_response::{
    TxnOffsetCommitResponsePartition, TxnOffsetCommitResponseTopic,
};
use kafka_protocol::messages::*;

use super::errors::Code;
use super::groups::Committed;
use super::shapes::per_partition;
use super::state::ClusterState;

/// Longest transaction timeout accepted (`transaction.max.timeout.ms`).
const MAX_TIMEOUT_MS: i32 = 900_000;

/// One transactional id's state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Txn {
    /// Its producer id.
    pub producer_id: i64,
    /// Its current epoch.
    pub producer_epoch: i16,
    /// `transaction.timeout.ms`.
    pub timeout_ms: i64,
    /// When the open transaction started (`None`: none open).
    pub started_ms: Option<i64>,
    /// Partitions in the open transaction.
    pub partitions: BTreeSet<(String, i32)>,
    /// Groups added with AddOffsetsToTxn.
    pub groups: BTreeSet<String>,
    /// Offsets committed in the transaction, applied on commit.
    pub offsets: Vec<(String, String, i32, Committed)>,
    /// How the last transaction ended (true: committed); `None` since
    /// InitProducerId.
    pub last_end: Option<bool>,
}

/// Every transactional id.
#[derive(Debug, Default)]
pub struct Transactions {
    /// By transactional id.
    pub by_id: BTreeMap<String, Txn>,
}

impl ClusterState {
    pub(super) fn init_transactional_producer(
        &mut self,
        broker: i32,
        id: &str,
        req: &InitProducerIdRequest,
        now_ms: i64,
    ) -> InitProducerIdResponse {
        let error = |code: Code| {
            InitProducerIdResponse::default()
                .with_error_code(code.value())
                .with_producer_id(ProducerId(-1))
                .with_producer_epoch(-1)
        };
        if self.coordinator_for(id).map(|b| b.id) != Some(broker) {
            return error(Code::NotCoordinator);
        }
        if req.transaction_timeout_ms < 1 || req.transaction_timeout_ms > MAX_TIMEOUT_MS {
            return error(Code::InvalidTransactionTimeout);
        }
        let existing = self.txns.by_id.get(id).cloned();
        let (pid, epoch) = match existing {
            None => (self.new_producer_id(), 0),
            Some(t) => {
                if req.producer_id.0 >= 0
                    && (req.producer_id.0 != t.producer_id
                        || req.producer_epoch != t.producer_epoch)
                {
                    return error(Code::ProducerFenced);
                }
                let next = match t.producer_epoch.checked_add(1).filter(|e| *e < i16::MAX) {
                    Some(e) => (t.producer_id, e),
                    None => (self.new_producer_id(), 0),
                };
                if t.started_ms.is_some() {
                    // A new incarnation aborts what the old one left open,
                    // with markers at the bumped epoch: the old producer's
                    // later writes are refused as fenced.
                    if let Some(open) = self.txns.by_id.get_mut(id) {
                        open.producer_epoch = t.producer_epoch.saturating_add(1);
                    }
                    self.finish_txn(id, false, now_ms);
                }
                next
            }
        };
        self.txns.by_id.insert(
            id.to_owned(),
            Txn {
                producer_id: pid,
                producer_epoch: epoch,
                timeout_ms: i64::from(req.transaction_timeout_ms),
                started_ms: None,
                partitions: BTreeSet::new(),
                groups: BTreeSet::new(),
                offsets: Vec::new(),
                last_end: None,
            },
        );
        InitProducerIdResponse::default()
            .with_producer_id(ProducerId(pid))
            .with_producer_epoch(epoch)
    }

    /// Checks that `(pid, epoch)` owns transactional id `id`.
    fn check_txn(&self, id: &str, pid: i64, epoch: i16) -> Result<(), Code> {
        let t = self
            .txns
            .by_id
            .get(id)
            .ok_or(Code::InvalidProducerIdMapping)?;
        if t.producer_id != pid {
            return Err(Code::InvalidProducerIdMapping);
        }
        if epoch < t.producer_epoch {
            return Err(Code::ProducerFenced);
        }
        if epoch > t.producer_epoch {
            return Err(Code::InvalidProducerEpoch);
        }
        Ok(())
    }

    pub(super) fn add_partitions_to_txn(
        &mut self,
        broker: i32,
        req: AddPartitionsToTxnRequest,
        now_ms: i64,
    ) -> AddPartitionsToTxnResponse {
        let id = req.v3_and_below_transactional_id.0.to_string();
        let pid = req.v3_and_below_producer_id.0;
        let epoch = req.v3_and_below_producer_epoch;
        let check = if self.coordinator_for(&id).map(|b| b.id) != Some(broker) {
            Err(Code::NotCoordinator)
        } else {
            self.check_txn(&id, pid, epoch)
        };
        let unknown: BTreeSet<(String, i32)> = req
            .v3_and_below_topics
            .iter()
            .flat_map(|t| t.partitions.iter().map(move |p| (t.name.0.to_string(), *p)))
            .filter(|(t, p)| self.partition(t, *p).is_none())
            .collect();
        let results = per_partition(
            req.v3_and_below_topics,
            |t| (t.name, t.partitions),
            |name, p| {
                let code = match check {
                    Err(code) => code,
                    Ok(()) if unknown.contains(&(name.to_string(), p)) => {
                        Code::UnknownTopicOrPartition
                    }
                    Ok(()) if !unknown.is_empty() => Code::OperationNotAttempted,
                    Ok(()) => {
                        if let Some(txn) = self.txns.by_id.get_mut(&id) {
                            txn.partitions.insert((name.to_string(), p));
                            txn.started_ms.get_or_insert(now_ms);
                        }
                        Code::None
                    }
                };
                AddPartitionsToTxnPartitionResult::default()
                    .with_partition_index(p)
                    .with_partition_error_code(code.value())
            },
            |name, results| {
                AddPartitionsToTxnTopicResult::default()
                    .with_name(name)
                    .with_results_by_partition(results)
            },
        );
        AddPartitionsToTxnResponse::default().with_results_by_topic_v3_and_below(results)
    }

    pub(super) fn add_offsets_to_txn(
        &mut self,
        broker: i32,
        req: AddOffsetsToTxnRequest,
        now_ms: i64,
    ) -> AddOffsetsToTxnResponse {
        let id = req.transactional_id.0.to_string();
        let result = if self.coordinator_for(&id).map(|b| b.id) != Some(broker) {
            Err(Code::NotCoordinator)
        } else {
            self.check_txn(&id, req.producer_id.0, req.producer_epoch)
        };
        if result.is_ok() {
            if let Some(txn) = self.txns.by_id.get_mut(&id) {
                txn.groups.insert(req.group_id.0.to_string());
                txn.started_ms.get_or_insert(now_ms);
            }
        }
        AddOffsetsToTxnResponse::default()
            .with_error_code(result.err().unwrap_or(Code::None).value())
    }

    pub(super) fn txn_offset_commit(
        &mut self,
        broker: i32,
        req: TxnOffsetCommitRequest,
        version: i16,
        now_ms: i64,
    ) -> TxnOffsetCommitResponse {
        let implicit_group = version >= 5 && self.config.transaction_version >= 2;
        let id = req.transactional_id.0.to_string();
        let group = req.group_id.0.to_string();
        let check = if self.coordinator_for(&group).map(|b| b.id) != Some(broker) {
            Err(Code::NotCoordinator)
        } else {
            self.check_txn(&id, req.producer_id.0, req.producer_epoch)
                .and_then(|()| {
                    // KIP-890: TxnOffsetCommit v5 adds the group itself.
                    let added = implicit_group
                        || self
                            .txns
                            .by_id
                            .get(&id)
                            .is_some_and(|t| t.groups.contains(&group));
                    if added {
                        Ok(())
                    } else {
                        Err(Code::InvalidTxnState)
                    }
                })
                .and_then(|()| {
                    if req.generation_id < 0 {
                        return Ok(());
                    }
                    match self.groups.check_commit(
                        &group,
                        req.member_id.as_str(),
                        req.generation_id,
                    ) {
                        Code::None => Ok(()),
                        code => Err(code),
                    }
                })
        };
        let topics = per_partition(
            req.topics,
            |t| (t.name, t.partitions),
            |name, p| {
                let code = match check {
                    Err(code) => code,
                    Ok(()) => {
                        if let Some(txn) = self.txns.by_id.get_mut(&id) {
                            txn.groups.insert(group.clone());
                            txn.started_ms.get_or_insert(now_ms);
                            txn.offsets.push((
                                group.clone(),
                                name.to_string(),
                                p.partition_index,
                                Committed {
                                    offset: p.committed_offset,
                                    leader_epoch: p.committed_leader_epoch,
                                    metadata: p.committed_metadata.map(|m| m.to_string()),
                                },
                            ));
                        }
                        Code::None
                    }
                };
                TxnOffsetCommitResponsePartition::default()
                    .with_partition_index(p.partition_index)
                    .with_error_code(code.value())
            },
            |name, partitions| {
                TxnOffsetCommitResponseTopic::default()
                    .with_name(name)
                    .with_partitions(partitions)
            },
        );
        TxnOffsetCommitResponse::default().with_topics(topics)
    }

    pub(super) fn end_txn(
        &mut self,
        broker: i32,
        req: EndTxnRequest,
        version: i16,
        now_ms: i64,
    ) -> EndTxnResponse {
        let id = req.transactional_id.0.to_string();
        let result = if self.coordinator_for(&id).map(|b| b.id) != Some(broker) {
            Err(Code::NotCoordinator)
        } else {
            self.check_txn(&id, req.producer_id.0, req.producer_epoch)
        };
        // KIP-890: with transactions v2 every transaction ends with an
        // epoch bump; its markers carry the new epoch, which EndTxn v5
        // returns for the next transaction.
        let bump = version >= 5 && self.config.transaction_version >= 2;
        let mut epoch = req.producer_epoch;
        if result.is_ok() {
            if bump {
                if let Some(t) = self.txns.by_id.get_mut(&id) {
                    t.producer_epoch = t.producer_epoch.saturating_add(1);
                    epoch = t.producer_epoch;
                }
            }
            self.finish_txn(&id, req.committed, now_ms);
        }
        EndTxnResponse::default()
            .with_error_code(result.err().unwrap_or(Code::None).value())
            .with_producer_id(req.producer_id)
            .with_producer_epoch(epoch)
    }

    /// Writes the markers of `id`'s open transaction and, on commit, its
    /// offsets; the transactional id is then ready for the next one.
    fn finish_txn(&mut self, id: &str, commit: bool, now_ms: i64) {
        let Some(txn) = self.txns.by_id.get_mut(id) else {
            return;
        };
        let partitions = std::mem::take(&mut txn.partitions);
        let offsets = std::mem::take(&mut txn.offsets);
        txn.groups.clear();
        txn.started_ms = None;
        txn.last_end = Some(commit);
        let (pid, epoch) = (txn.producer_id, txn.producer_epoch);
        for (topic, p) in partitions {
            if let Some(log) = self.partition_mut(&topic, p) {
                log.write_marker(pid, epoch, commit, 0, now_ms);
            }
        }
        if commit {
            for (group, topic, p, committed) in offsets {
                self.groups.commit(&group, &topic, p, committed);
            }
        }
    }

    /// Aborts transactions open longer than their timeout and bumps their
    /// epoch, fencing the producer that let them run out.
    pub(super) fn expire_transactions(&mut self, now_ms: i64) {
        let expired: Vec<String> = self
            .txns
            .by_id
            .iter()
            .filter(|(_, t)| t.started_ms.is_some_and(|s| now_ms - s > t.timeout_ms))
            .map(|(id, _)| id.clone())
            .collect();
        for id in expired {
            if let Some(t) = self.txns.by_id.get_mut(&id) {
                t.producer_epoch = t.producer_epoch.saturating_add(1);
            }
            self.finish_txn(&id, false, now_ms);
        }
    }

    /// For a transactional batch: a fenced epoch is refused first
    /// (INVALID_PRODUCER_EPOCH, which clients treat as fenced); then the
    /// partition must be in the producer's open transaction: v1 adds
    /// partitions before producing, v2 (`implicit_add`) adds it here.
    pub(super) fn admit_transactional_batch(
        &mut self,
        pid: i64,
        epoch: i16,
        (topic, partition): (&str, i32),
        implicit_add: bool,
        now_ms: i64,
    ) -> Result<(), Code> {
        let txn = self.txns.by_id.values_mut().find(|t| t.producer_id == pid);
        let tp = (topic.to_owned(), partition);
        match txn {
            Some(t) if epoch < t.producer_epoch => Err(Code::InvalidProducerEpoch),
            Some(t) if t.partitions.contains(&tp) => Ok(()),
            Some(t) if implicit_add && epoch == t.producer_epoch => {
                t.partitions.insert(tp);
                t.started_ms.get_or_insert(now_ms);
                Ok(())
            }
            _ => Err(Code::InvalidTxnState),
        }
    }
}
