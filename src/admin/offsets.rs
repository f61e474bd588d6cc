//! Log offsets: ListOffsets (earliest, latest, by timestamp, KIP-734 max
//! timestamp) and DeleteRecords (KIP-107), fanned out per partition leader;
//! and the offset-reset planner behind `groups reset-offsets`.
//!
//! A partition whose leader moved (NOT_LEADER_OR_FOLLOWER, stale epoch,
//! unknown leader) is retried after a metadata refresh, at most twice.

use std::collections::{BTreeMap, HashMap};

use kafka_protocol::messages::delete_records_request::{
    DeleteRecordsPartition, DeleteRecordsTopic,
};
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::{
    BrokerId, DeleteRecordsRequest, ListOffsetsRequest, ListOffsetsResponse, TopicName,
};

use super::{check, str_bytes, Admin};
use crate::error::{Error, Result};
use crate::net::{BrokerAddr, Workload};
use crate::protocol::versions::Versions;
use crate::TopicPartition;

const LIST_OFFSETS_VERSIONS: Versions = Versions::new(1, 10);
const DELETE_RECORDS_VERSIONS: Versions = Versions::new(0, 2);
/// Leadership retries after a metadata refresh.
const LEADER_RETRIES: usize = 2;

/// Which offset ListOffsets looks up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum OffsetSpec {
    /// The log start offset.
    Earliest,
    /// The log end offset (next offset to be written).
    Latest,
    /// The offset of the record with the highest timestamp (KIP-734).
    MaxTimestamp,
    /// The first offset whose timestamp is at or after this many ms since
    /// the epoch; `offset` -1 when there is none.
    Timestamp(i64),
}

impl OffsetSpec {
    fn wire(self) -> i64 {
        match self {
            OffsetSpec::Earliest => -2,
            OffsetSpec::Latest => -1,
            OffsetSpec::MaxTimestamp => -3,
            OffsetSpec::Timestamp(t) => t,
        }
    }
}

/// A ListOffsets answer for one partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ListedOffset {
    /// The offset, or -1 when no record matches a timestamp.
    pub offset: i64,
    /// The record's timestamp (-1 for earliest/latest).
    pub timestamp: i64,
    /// The leader epoch of that offset (-1 if unknown).
    pub leader_epoch: i32,
}

/// How `groups reset-offsets` moves a group's committed offsets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ResetSpec {
    /// To the log start.
    Earliest,
    /// To the log end.
    Latest,
    /// To this offset (clamped into the log).
    ToOffset(i64),
    /// By this many offsets from the committed one (or from the log end
    /// when nothing is committed), clamped into the log.
    ShiftBy(i64),
    /// To the first offset at or after this timestamp (ms since the epoch),
    /// or the log end when no record is that recent.
    ToTimestamp(i64),
}

/// One partition of an offset reset: where the group is and where it goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResetPlan {
    /// The partition.
    pub partition: TopicPartition,
    /// The committed offset now, if any.
    pub current: Option<i64>,
    /// The offset to commit.
    pub target: i64,
}

/// The target offset of one partition, as Kafka's
/// `kafka-consumer-groups.sh --reset-offsets` computes it: out-of-range
/// targets are clamped to `[earliest, latest]`. `at_time` is the
/// ListOffsets answer for [`ResetSpec::ToTimestamp`].
pub fn plan_reset(
    spec: ResetSpec,
    current: Option<i64>,
    earliest: i64,
    latest: i64,
    at_time: Option<i64>,
) -> i64 {
    let clamp = |o: i64| o.clamp(earliest, latest.max(earliest));
    match spec {
        ResetSpec::Earliest => earliest,
        ResetSpec::Latest => latest,
        ResetSpec::ToOffset(o) => clamp(o),
        ResetSpec::ShiftBy(n) => clamp(current.unwrap_or(latest).saturating_add(n)),
        ResetSpec::ToTimestamp(_) => match at_time {
            Some(o) if o >= 0 => clamp(o),
            _ => latest,
        },
    }
}

impl Admin {
    /// Groups partitions by leader; partitions without a leader fail.
    pub(super) async fn by_leader(
        &self,
        partitions: impl IntoIterator<Item = TopicPartition>,
        errors: &mut Vec<(TopicPartition, Error)>,
    ) -> HashMap<BrokerAddr, Vec<TopicPartition>> {
        let mut out: HashMap<BrokerAddr, Vec<TopicPartition>> = HashMap::new();
        for tp in partitions {
            match self.cluster.leader(&tp.topic, tp.partition).await {
                Ok(addr) => out.entry(addr).or_default().push(tp),
                Err(e) => {
                    errors.push((tp, e));
                }
            }
        }
        out
    }

    /// Looks up offsets, one result per partition, fanned out per leader.
    pub async fn list_offsets(
        &self,
        specs: &[(TopicPartition, OffsetSpec)],
    ) -> Result<BTreeMap<TopicPartition, Result<ListedOffset>>> {
        let spec_of: HashMap<&TopicPartition, OffsetSpec> =
            specs.iter().map(|(tp, s)| (tp, *s)).collect();
        let mut out = BTreeMap::new();
        let mut todo: Vec<TopicPartition> = specs.iter().map(|(tp, _)| tp.clone()).collect();
        for attempt in 0..=LEADER_RETRIES {
            if attempt > 0 {
                let topics: Vec<String> = todo.iter().map(|tp| tp.topic.to_string()).collect();
                let _ = self.cluster.refresh_metadata(Some(&topics)).await;
            }
            let mut failed = Vec::new();
            let by_leader = self.by_leader(std::mem::take(&mut todo), &mut failed).await;
            for (tp, e) in failed {
                out.insert(tp, Err(e));
            }
            for (addr, tps) in by_leader {
                let (req, versions) = self.list_offsets_request(&tps, &spec_of);
                let resp = match self
                    .cluster
                    .send(&addr, Workload::Admin, &req, versions)
                    .await
                {
                    Ok(r) => r,
                    Err(e) => {
                        for tp in tps {
                            if e.is_retriable() && attempt < LEADER_RETRIES {
                                todo.push(tp);
                            } else {
                                out.insert(tp, Err(e.clone()));
                            }
                        }
                        continue;
                    }
                };
                for tp in tps {
                    match listed(&resp, &tp, &addr) {
                        Err(e) if e.invalidates_metadata() && attempt < LEADER_RETRIES => {
                            todo.push(tp)
                        }
                        r => {
                            out.insert(tp, r);
                        }
                    }
                }
            }
            if todo.is_empty() {
                break;
            }
        }
        Ok(out)
    }

    /// The ListOffsets request for `tps` (one leader's partitions), and the
    /// versions it needs: v7 and up when one asks for the max timestamp
    /// (KIP-734).
    fn list_offsets_request(
        &self,
        tps: &[TopicPartition],
        spec_of: &HashMap<&TopicPartition, OffsetSpec>,
    ) -> (ListOffsetsRequest, Versions) {
        let mut topics: BTreeMap<&str, Vec<ListOffsetsPartition>> = BTreeMap::new();
        let mut needs_v7 = false;
        let metadata = self.cluster.metadata();
        for tp in tps {
            let spec = spec_of.get(tp).copied().unwrap_or(OffsetSpec::Latest);
            needs_v7 |= spec == OffsetSpec::MaxTimestamp;
            let epoch = metadata
                .partition(&tp.topic, tp.partition)
                .map_or(-1, |p| p.leader_epoch);
            topics.entry(&tp.topic).or_default().push(
                ListOffsetsPartition::default()
                    .with_partition_index(tp.partition)
                    .with_current_leader_epoch(epoch)
                    .with_timestamp(spec.wire()),
            );
        }
        let req = ListOffsetsRequest::default()
            .with_replica_id(BrokerId(-1))
            .with_timeout_ms(self.timeout_ms())
            .with_topics(
                topics
                    .into_iter()
                    .map(|(t, ps)| {
                        ListOffsetsTopic::default()
                            .with_name(TopicName(str_bytes(t)))
                            .with_partitions(ps)
                    })
                    .collect(),
            );
        let versions = if needs_v7 {
            Versions::new(7, LIST_OFFSETS_VERSIONS.max)
        } else {
            LIST_OFFSETS_VERSIONS
        };
        (req, versions)
    }

    /// Deletes records before the given offsets (-1: the high watermark);
    /// one result per partition: the new log start offset.
    pub async fn delete_records(
        &self,
        before: &[(TopicPartition, i64)],
    ) -> Result<BTreeMap<TopicPartition, Result<i64>>> {
        let offset_of: HashMap<&TopicPartition, i64> =
            before.iter().map(|(tp, o)| (tp, *o)).collect();
        let mut failed = Vec::new();
        // Collected first: a lazy iterator held across the await would keep
        // the future from being Send for every lifetime (spawnable).
        let partitions: Vec<TopicPartition> = before.iter().map(|(tp, _)| tp.clone()).collect();
        let by_leader = self.by_leader(partitions, &mut failed).await;
        let mut out: BTreeMap<TopicPartition, Result<i64>> =
            failed.into_iter().map(|(tp, e)| (tp, Err(e))).collect();
        for (addr, tps) in by_leader {
            let mut topics: BTreeMap<&str, Vec<DeleteRecordsPartition>> = BTreeMap::new();
            for tp in &tps {
                topics.entry(&tp.topic).or_default().push(
                    DeleteRecordsPartition::default()
                        .with_partition_index(tp.partition)
                        .with_offset(offset_of.get(tp).copied().unwrap_or(-1)),
                );
            }
            let req = DeleteRecordsRequest::default()
                .with_timeout_ms(self.timeout_ms())
                .with_topics(
                    topics
                        .into_iter()
                        .map(|(t, ps)| {
                            DeleteRecordsTopic::default()
                                .with_name(TopicName(str_bytes(t)))
                                .with_partitions(ps)
                        })
                        .collect(),
                );
            let resp = self
                .cluster
                .send(&addr, Workload::Admin, &req, DELETE_RECORDS_VERSIONS)
                .await;
            for tp in tps {
                let r = match &resp {
                    Err(e) => Err(e.clone()),
                    Ok(resp) => match resp
                        .topics
                        .iter()
                        .filter(|t| t.name.0.as_str() == &*tp.topic)
                        .flat_map(|t| t.partitions.iter())
                        .find(|p| p.partition_index == tp.partition)
                    {
                        None => Err(super::missing("DeleteRecords", &tp.to_string())),
                        Some(p) => check(
                            p.error_code,
                            None,
                            "DeleteRecords",
                            &format!("{tp} on {addr}"),
                        )
                        .map(|()| p.low_watermark),
                    },
                };
                out.insert(tp, r);
            }
        }
        Ok(out)
    }

    /// Plans an offset reset of `group` on `partitions`: reads the committed
    /// offsets and the log bounds, and computes each target with
    /// [`plan_reset`]. Changes nothing; commit the plan with
    /// [`Admin::alter_group_offsets`].
    pub async fn plan_offset_reset(
        &self,
        group: &str,
        partitions: &[TopicPartition],
        spec: ResetSpec,
    ) -> Result<Vec<ResetPlan>> {
        let committed = self.list_group_offsets(group, Some(partitions)).await?;
        self.plan_resets(partitions, spec, |tp| {
            Ok(committed.get(tp).and_then(|c| c.as_ref()).map(|c| c.offset))
        })
        .await
    }

    /// Reads the log bounds of `partitions` (and the offsets at the time a
    /// [`ResetSpec::ToTimestamp`] names) and computes each target with
    /// [`plan_reset`] from the position `current` gives: the plan behind
    /// both the consumer-group and the share-group reset.
    pub(super) async fn plan_resets(
        &self,
        partitions: &[TopicPartition],
        spec: ResetSpec,
        current: impl Fn(&TopicPartition) -> Result<Option<i64>>,
    ) -> Result<Vec<ResetPlan>> {
        let bound = |s: OffsetSpec| -> Vec<(TopicPartition, OffsetSpec)> {
            partitions.iter().map(|tp| (tp.clone(), s)).collect()
        };
        let earliest = self.list_offsets(&bound(OffsetSpec::Earliest)).await?;
        let latest = self.list_offsets(&bound(OffsetSpec::Latest)).await?;
        let at_time = match spec {
            ResetSpec::ToTimestamp(t) => {
                Some(self.list_offsets(&bound(OffsetSpec::Timestamp(t))).await?)
            }
            _ => None,
        };
        let get = |m: &BTreeMap<TopicPartition, Result<ListedOffset>>, tp: &TopicPartition| match m
            .get(tp)
        {
            Some(Ok(o)) => Ok(o.offset),
            Some(Err(e)) => Err(e.clone()),
            None => Err(super::missing("ListOffsets", &tp.to_string())),
        };
        let mut plans = Vec::with_capacity(partitions.len());
        for tp in partitions {
            let current = current(tp)?;
            let lo = get(&earliest, tp)?;
            let hi = get(&latest, tp)?;
            let t = match &at_time {
                Some(m) => Some(get(m, tp)?),
                None => None,
            };
            plans.push(ResetPlan {
                partition: tp.clone(),
                current,
                target: plan_reset(spec, current, lo, hi, t),
            });
        }
        Ok(plans)
    }
}

/// `tp`'s offset in `resp`, from the leader at `addr`.
fn listed(
    resp: &ListOffsetsResponse,
    tp: &TopicPartition,
    addr: &BrokerAddr,
) -> Result<ListedOffset> {
    let found = resp
        .topics
        .iter()
        .filter(|t| t.name.0.as_str() == &*tp.topic)
        .flat_map(|t| t.partitions.iter())
        .find(|p| p.partition_index == tp.partition);
    let Some(p) = found else {
        return Err(super::missing("ListOffsets", &tp.to_string()));
    };
    check(
        p.error_code,
        None,
        "ListOffsets",
        &format!("{tp} on {addr}"),
    )?;
    Ok(ListedOffset {
        offset: p.offset,
        timestamp: p.timestamp,
        leader_epoch: p.leader_epoch,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reset_targets_are_clamped_into_the_log() {
        assert_eq!(plan_reset(ResetSpec::Earliest, Some(5), 2, 10, None), 2);
        assert_eq!(plan_reset(ResetSpec::Latest, Some(5), 2, 10, None), 10);
        assert_eq!(plan_reset(ResetSpec::ToOffset(7), Some(5), 2, 10, None), 7);
        assert_eq!(plan_reset(ResetSpec::ToOffset(70), None, 2, 10, None), 10);
        assert_eq!(plan_reset(ResetSpec::ToOffset(0), None, 2, 10, None), 2);
        assert_eq!(plan_reset(ResetSpec::ShiftBy(-2), Some(5), 2, 10, None), 3);
        assert_eq!(plan_reset(ResetSpec::ShiftBy(-9), Some(5), 2, 10, None), 2);
        assert_eq!(plan_reset(ResetSpec::ShiftBy(3), Some(9), 2, 10, None), 10);
        assert_eq!(plan_reset(ResetSpec::ShiftBy(-1), None, 2, 10, None), 9);
        assert_eq!(
            plan_reset(ResetSpec::ToTimestamp(1), Some(5), 2, 10, Some(4)),
            4
        );
        assert_eq!(
            plan_reset(ResetSpec::ToTimestamp(1), Some(5), 2, 10, Some(-1)),
            10
        );
    }
}
