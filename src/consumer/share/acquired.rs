//! The acquired-records bookkeeping of a share consumer (KIP-932), with no
//! I/O: which offsets this member holds, with which delivery count, which
//! of them the application has acknowledged, and the acknowledgement
//! batches still to send.
//!
//! A ShareFetch answer carries, per partition, record batches and the
//! ranges of offsets the broker acquired for this member (`AcquiredRecords`:
//! first, last, delivery count). Only records inside an acquired range are
//! the member's; batch alignment may bring others, which are dropped. An
//! acquired offset with no data record (a transaction marker, a compacted
//! record) is acknowledged as a *gap* at once, as the Java client does, so
//! the broker can move the share-partition start offset past it.
//!
//! Acknowledgements go out as batches of contiguous offsets: one type for
//! the whole range when all agree, else one type per offset
//! (<https://cwiki.apache.org/confluence/display/KAFKA/KIP-932%3A+Queues+for+Kafka>).

use std::collections::BTreeMap;

use super::{AcknowledgeType, ShareRecord};
use crate::consumer::ConsumerRecord;
use crate::TopicPartition;

/// Wire value of a gap acknowledgement (an acquired offset with no record).
const GAP: i8 = 0;

/// One acquired range of a ShareFetch answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct AcquiredRange {
    /// First acquired offset.
    pub first: i64,
    /// Last acquired offset (inclusive).
    pub last: i64,
    /// How many times the broker has delivered these offsets.
    pub delivery_count: i16,
}

/// A batch of contiguous offsets to acknowledge.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct AckBatch {
    /// First offset.
    pub first: i64,
    /// Last offset (inclusive).
    pub last: i64,
    /// One type for the whole range, or one per offset (wire values).
    pub types: Vec<i8>,
}

/// Most offsets one partition may hold acquired; a hostile answer claiming
/// more is cut there (the broker releases what is not acknowledged when
/// the acquisition lock lapses).
const MAX_ACQUIRED_PER_PARTITION: i64 = 1 << 20;

/// Acquired offsets per partition and their acknowledgement state.
#[derive(Debug, Default)]
pub(crate) struct Acquired {
    /// Records given to the application: offset -> (delivery count,
    /// acknowledgement so far).
    delivered: BTreeMap<TopicPartition, BTreeMap<i64, Option<i8>>>,
    /// Acknowledgements decided and not yet sent: offset -> wire type.
    pending: BTreeMap<TopicPartition, BTreeMap<i64, i8>>,
}

impl Acquired {
    /// Takes one partition of a ShareFetch answer: keeps the records inside
    /// `ranges`, stamps them with their delivery count, and queues gap
    /// acknowledgements for acquired offsets without a record. The returned
    /// records are not yet delivered: call [`delivered`](Self::delivered)
    /// when handing them to the application.
    pub(crate) fn on_fetched(
        &mut self,
        tp: &TopicPartition,
        ranges: &[AcquiredRange],
        records: Vec<ConsumerRecord>,
    ) -> Vec<ShareRecord> {
        let mut by_offset: BTreeMap<i64, ConsumerRecord> =
            records.into_iter().map(|r| (r.offset, r)).collect();
        let mut out = Vec::new();
        let mut budget = MAX_ACQUIRED_PER_PARTITION;
        for range in ranges {
            if range.last < range.first || range.first < 0 {
                continue;
            }
            let last = range.last.min(range.first.saturating_add(budget - 1));
            budget -= last - range.first + 1;
            for offset in range.first..=last {
                match by_offset.remove(&offset) {
                    Some(record) => out.push(ShareRecord {
                        record,
                        delivery_count: range.delivery_count,
                    }),
                    None => {
                        self.pending
                            .entry(tp.clone())
                            .or_default()
                            .insert(offset, GAP);
                    }
                }
            }
            if budget <= 0 {
                break;
            }
        }
        out.sort_by_key(|r| r.record.offset);
        out
    }

    /// Records that `records` went to the application unacknowledged.
    pub(crate) fn delivered<'a>(&mut self, records: impl IntoIterator<Item = &'a ShareRecord>) {
        for r in records {
            self.delivered
                .entry(r.record.partition.clone())
                .or_default()
                .insert(r.record.offset, None);
        }
    }

    /// Acknowledges one delivered record; a later call before the
    /// acknowledgement is sent replaces the earlier one. `false` when the
    /// record is not one this consumer delivered and has not yet sent.
    pub(crate) fn acknowledge(
        &mut self,
        tp: &TopicPartition,
        offset: i64,
        ty: AcknowledgeType,
    ) -> bool {
        match self.delivered.get_mut(tp).and_then(|p| p.get_mut(&offset)) {
            Some(slot) => {
                *slot = Some(ty.wire());
                true
            }
            None => false,
        }
    }

    /// Delivered records not yet acknowledged.
    pub(crate) fn unacknowledged(&self) -> usize {
        self.delivered
            .values()
            .map(|p| p.values().filter(|a| a.is_none()).count())
            .sum()
    }

    /// Acknowledges every delivered, unacknowledged record with `ty`
    /// (implicit mode accepts them; close releases them).
    pub(crate) fn acknowledge_rest(&mut self, ty: AcknowledgeType) {
        for slot in self.delivered.values_mut().flat_map(|p| p.values_mut()) {
            if slot.is_none() {
                *slot = Some(ty.wire());
            }
        }
    }

    /// Moves decided acknowledgements into the pending set (a record's
    /// acknowledgement is final once it is queued for sending).
    fn settle(&mut self) {
        for (tp, offsets) in &mut self.delivered {
            let decided: Vec<(i64, i8)> = offsets
                .iter()
                .filter_map(|(o, a)| a.map(|a| (*o, a)))
                .collect();
            if decided.is_empty() {
                continue;
            }
            let pending = self.pending.entry(tp.clone()).or_default();
            for (offset, ty) in decided {
                offsets.remove(&offset);
                pending.insert(offset, ty);
            }
        }
        self.delivered.retain(|_, p| !p.is_empty());
    }

    /// Whether anything is ready to send.
    pub(crate) fn has_pending(&mut self) -> bool {
        self.settle();
        !self.pending.is_empty()
    }

    /// Partitions with acknowledgements ready to send.
    pub(crate) fn pending_partitions(&mut self) -> Vec<TopicPartition> {
        self.settle();
        self.pending.keys().cloned().collect()
    }

    /// Takes the acknowledgements ready for `tp`, as wire batches.
    pub(crate) fn take(&mut self, tp: &TopicPartition) -> Vec<AckBatch> {
        self.settle();
        let Some(offsets) = self.pending.remove(tp) else {
            return Vec::new();
        };
        batches(&offsets)
    }
}

/// Contiguous runs of `offsets`, each with one type when all agree.
fn batches(offsets: &BTreeMap<i64, i8>) -> Vec<AckBatch> {
    let mut out: Vec<AckBatch> = Vec::new();
    for (&offset, &ty) in offsets {
        match out.last_mut() {
            Some(b) if b.last.checked_add(1) == Some(offset) => {
                b.last = offset;
                b.types.push(ty);
            }
            _ => out.push(AckBatch {
                first: offset,
                last: offset,
                types: vec![ty],
            }),
        }
    }
    for b in &mut out {
        if b.types.windows(2).all(|w| w[0] == w[1]) {
            b.types.truncate(1);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::records::TimestampType;

    fn tp() -> TopicPartition {
        TopicPartition::new("q", 0)
    }

    fn record(offset: i64) -> ConsumerRecord {
        ConsumerRecord {
            partition: tp(),
            offset,
            timestamp: 0,
            timestamp_type: TimestampType::CreateTime,
            key: None,
            value: None,
            headers: Vec::new(),
            leader_epoch: None,
        }
    }

    fn range(first: i64, last: i64, delivery_count: i16) -> AcquiredRange {
        AcquiredRange {
            first,
            last,
            delivery_count,
        }
    }

    #[test]
    fn only_acquired_records_are_kept_with_their_delivery_count() {
        let mut a = Acquired::default();
        let got = a.on_fetched(
            &tp(),
            &[range(2, 3, 1), range(5, 5, 3)],
            (0..8).map(record).collect(),
        );
        let seen: Vec<(i64, i16)> = got
            .iter()
            .map(|r| (r.record.offset, r.delivery_count))
            .collect();
        assert_eq!(seen, vec![(2, 1), (3, 1), (5, 3)]);
        assert!(
            !a.has_pending(),
            "no gap: every acquired offset had a record"
        );
    }

    #[test]
    fn acquired_offsets_without_records_are_acknowledged_as_gaps() {
        let mut a = Acquired::default();
        // Offset 11 is a transaction marker: acquired, no data record.
        let got = a.on_fetched(&tp(), &[range(10, 12, 1)], vec![record(10), record(12)]);
        assert_eq!(got.len(), 2);
        assert_eq!(
            a.take(&tp()),
            vec![AckBatch {
                first: 11,
                last: 11,
                types: vec![GAP]
            }]
        );
    }

    #[test]
    fn acknowledgements_become_batches_of_contiguous_offsets() {
        let mut a = Acquired::default();
        let got = a.on_fetched(&tp(), &[range(0, 5, 1)], (0..6).map(record).collect());
        a.delivered(&got);
        assert_eq!(a.unacknowledged(), 6);
        for o in [0, 1, 2] {
            assert!(a.acknowledge(&tp(), o, AcknowledgeType::Accept));
        }
        assert!(a.acknowledge(&tp(), 3, AcknowledgeType::Release));
        assert!(a.acknowledge(&tp(), 5, AcknowledgeType::Reject));
        assert_eq!(a.unacknowledged(), 1);
        let batches = a.take(&tp());
        assert_eq!(
            batches,
            vec![
                AckBatch {
                    first: 0,
                    last: 3,
                    types: vec![1, 1, 1, 2]
                },
                AckBatch {
                    first: 5,
                    last: 5,
                    types: vec![3]
                },
            ]
        );
        assert!(a.take(&tp()).is_empty(), "taken acknowledgements are gone");
        assert!(
            !a.acknowledge(&tp(), 0, AcknowledgeType::Release),
            "a sent acknowledgement cannot change"
        );
        a.acknowledge_rest(AcknowledgeType::Accept);
        assert_eq!(
            a.take(&tp()),
            vec![AckBatch {
                first: 4,
                last: 4,
                types: vec![1]
            }]
        );
        assert_eq!(a.unacknowledged(), 0);
    }

    #[test]
    fn a_uniform_batch_carries_one_type() {
        let mut a = Acquired::default();
        let got = a.on_fetched(&tp(), &[range(7, 9, 2)], (7..10).map(record).collect());
        a.delivered(&got);
        a.acknowledge_rest(AcknowledgeType::Release);
        assert_eq!(
            a.take(&tp()),
            vec![AckBatch {
                first: 7,
                last: 9,
                types: vec![2]
            }]
        );
    }

    #[test]
    fn unknown_records_cannot_be_acknowledged() {
        let mut a = Acquired::default();
        assert!(!a.acknowledge(&tp(), 1, AcknowledgeType::Accept));
        let got = a.on_fetched(&tp(), &[range(1, 1, 1)], vec![record(1)]);
        assert!(
            !a.acknowledge(&tp(), 1, AcknowledgeType::Accept),
            "fetched but not yet delivered"
        );
        a.delivered(&got);
        assert!(a.acknowledge(&tp(), 1, AcknowledgeType::Accept));
        assert!(
            a.acknowledge(&tp(), 1, AcknowledgeType::Reject),
            "last one wins"
        );
        assert_eq!(a.take(&tp())[0].types, vec![3]);
    }

    #[test]
    fn hostile_ranges_are_bounded() {
        let mut a = Acquired::default();
        let got = a.on_fetched(
            &tp(),
            &[range(0, i64::MAX, 1), range(5, 1, 1), range(-4, -1, 1)],
            Vec::new(),
        );
        assert!(got.is_empty());
        let gaps: i64 = a.take(&tp()).iter().map(|b| b.last - b.first + 1).sum();
        assert_eq!(gaps, MAX_ACQUIRED_PER_PARTITION);
    }
}
