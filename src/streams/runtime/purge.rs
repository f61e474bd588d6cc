//! Purging repartition topics (`repartition.purge.interval.ms`, as Kafka
//! Streams does since KIP-204 / KAFKA-6150): records of a `group_by`'s
//! repartition topic below the group's committed offset have been
//! consumed for good, so every interval the runtime deletes them
//! (DeleteRecords, <https://kafka.apache.org/protocol#The_Messages_DeleteRecords>)
//! on the partitions whose tasks it owns, up to the committed offset and
//! never past it.
//!
//! The offsets come from the group coordinator (OffsetFetch), not from
//! the runtime's own bookkeeping: an async commit not yet acknowledged,
//! or a transaction not yet committed, is not counted, so what is deleted
//! was committed whatever the commit mode and group protocol. A partition
//! is asked for again only when its committed offset moved. A failed
//! purge is logged at warn with the topic-partition and tried again at
//! the next interval (the records stay; nothing else depends on it), as
//! in Kafka Streams.
//!
//! [`PurgePlan`] decides what to delete (pure); [`run`] is the timer task
//! around it.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use tracing::{debug, info, warn};

use super::task::Shared;
use crate::admin::Admin;
use crate::consumer::OffsetAndMetadata;
use crate::error::Result;
use crate::TopicPartition;

/// What has been purged, per owned repartition partition, and what to
/// purge next.
#[derive(Debug, Default)]
pub(super) struct PurgePlan {
    /// The offset each partition was last purged up to (records below it
    /// deleted). Only owned partitions are kept.
    purged: HashMap<TopicPartition, i64>,
}

impl PurgePlan {
    /// Forgets the partitions not in `owned` (a revoked partition's next
    /// owner purges it; memory stays bounded by the assignment).
    pub(super) fn retain(&mut self, owned: &BTreeSet<TopicPartition>) {
        self.purged.retain(|tp, _| owned.contains(tp));
    }

    /// The DeleteRecords request: each partition of `committed` (the
    /// group's committed offsets of owned repartition partitions) whose
    /// committed offset is above what was purged, up to that offset. A
    /// negative offset (none committed) is never sent: DeleteRecords reads
    /// -1 as "up to the high watermark".
    pub(super) fn next(
        &self,
        committed: &HashMap<TopicPartition, OffsetAndMetadata>,
    ) -> Vec<(TopicPartition, i64)> {
        let mut out: Vec<(TopicPartition, i64)> = committed
            .iter()
            .filter(|(tp, o)| o.offset > self.purged.get(*tp).copied().unwrap_or(0))
            .map(|(tp, o)| (tp.clone(), o.offset))
            .collect();
        out.sort();
        out
    }

    /// Takes the answers to `asked`: a purged partition remembers its
    /// offset; a failed one is logged (naming it) and asked again next
    /// time.
    pub(super) fn record(
        &mut self,
        asked: &[(TopicPartition, i64)],
        answers: &BTreeMap<TopicPartition, Result<i64>>,
    ) {
        for (tp, offset) in asked {
            match answers.get(tp) {
                Some(Ok(low)) => {
                    debug!(partition = %tp, before = offset, log_start = low, "purged repartition records");
                    self.purged.insert(tp.clone(), *offset);
                }
                Some(Err(e)) => warn!(
                    partition = %tp,
                    before = offset,
                    error = %e,
                    retriable = e.is_retriable(),
                    "purging repartition records (DeleteRecords) failed; trying again after \
                     repartition.purge.interval.ms"
                ),
                None => warn!(
                    partition = %tp,
                    "purging repartition records: no DeleteRecords answer for the partition; \
                     trying again after repartition.purge.interval.ms"
                ),
            }
        }
    }
}

/// Every `interval`, deletes the records of the owned partitions of
/// `topics` (the repartition topics) below the group's committed offsets.
/// Runs until aborted (the dispatcher does at shutdown); each round is
/// bounded by `default.api.timeout.ms`.
pub(super) async fn run(
    shared: Arc<Shared>,
    admin: Admin,
    topics: BTreeSet<String>,
    interval: Duration,
) {
    info!(
        interval_ms = interval.as_millis() as u64,
        topics = ?topics,
        "purging consumed records of the repartition topics"
    );
    let bound = admin.cluster().config().default_api_timeout;
    let mut plan = PurgePlan::default();
    loop {
        tokio::time::sleep(interval).await;
        let owned = shared.owned_partitions(&topics);
        plan.retain(&owned);
        if owned.is_empty() {
            continue;
        }
        let owned: Vec<TopicPartition> = owned.into_iter().collect();
        let round = async {
            let committed = match shared.consumer.committed(&owned).await {
                Ok(c) => c,
                Err(e) => {
                    warn!(
                        partitions = owned.len(),
                        error = %e,
                        "purging repartition records: reading the committed offsets \
                         (OffsetFetch) failed; trying again after repartition.purge.interval.ms"
                    );
                    return;
                }
            };
            let asked = plan.next(&committed);
            if asked.is_empty() {
                return;
            }
            match admin.delete_records(&asked).await {
                Ok(answers) => plan.record(&asked, &answers),
                Err(e) => warn!(
                    partitions = %partition_list(&asked),
                    error = %e,
                    "purging repartition records (DeleteRecords) failed; trying again after \
                     repartition.purge.interval.ms"
                ),
            }
        };
        if tokio::time::timeout(bound, round).await.is_err() {
            warn!(
                timeout_ms = bound.as_millis() as u64,
                "purging repartition records took longer than default.api.timeout.ms; trying \
                 again after repartition.purge.interval.ms"
            );
        }
    }
}

/// `t-0, t-1`: the partitions of a request, for a log line.
fn partition_list(asked: &[(TopicPartition, i64)]) -> String {
    let mut out = String::new();
    for (tp, _) in asked {
        if !out.is_empty() {
            out.push_str(", ");
        }
        out.push_str(&tp.to_string());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Error;

    fn tp(p: i32) -> TopicPartition {
        TopicPartition::new("app-by-city-repartition", p)
    }

    fn committed(offsets: &[(i32, i64)]) -> HashMap<TopicPartition, OffsetAndMetadata> {
        offsets
            .iter()
            .map(|(p, o)| (tp(*p), OffsetAndMetadata::new(*o)))
            .collect()
    }

    #[test]
    fn purges_up_to_the_committed_offset_once_per_move_and_retries_failures() {
        let mut plan = PurgePlan::default();
        // Nothing committed yet at 0: nothing to delete.
        assert!(plan.next(&committed(&[(0, 0)])).is_empty());
        let asked = plan.next(&committed(&[(0, 40), (1, 7)]));
        assert_eq!(asked, vec![(tp(0), 40), (tp(1), 7)]);
        let answers: BTreeMap<TopicPartition, Result<i64>> = [
            (tp(0), Ok(40)),
            (
                tp(1),
                Err(Error::invalid_state(crate::error::Origin::Streams, "no")),
            ),
        ]
        .into();
        plan.record(&asked, &answers);
        // Partition 0 is not asked again at the same offset; the failed
        // partition 1 is.
        assert_eq!(plan.next(&committed(&[(0, 40), (1, 7)])), vec![(tp(1), 7)]);
        // Never past the committed offset, and never backwards.
        assert_eq!(
            plan.next(&committed(&[(0, 55), (1, 7)])),
            vec![(tp(0), 55), (tp(1), 7)]
        );
        assert!(plan.next(&committed(&[(0, 30)])).is_empty());
        // A negative offset (none committed) is never sent.
        assert!(plan.next(&committed(&[(2, -1)])).is_empty());
        // A revoked partition is forgotten: when it comes back, it is
        // purged from its committed offset again.
        plan.retain(&[tp(1)].into());
        assert_eq!(plan.next(&committed(&[(0, 40)])), vec![(tp(0), 40)]);
    }
}
