//! One partition's log: record batches as the producer sent them, with the
//! broker-assigned base offset and leader epoch written into their headers,
//! the idempotent producer state (KIP-98) and the transaction bookkeeping
//! that gives the last stable offset and the aborted-transaction index.
//!
//! Only bytes 0..8 (base offset) and 12..16 (partition leader epoch) of a
//! stored batch are rewritten; neither is covered by the CRC, so the
//! producer's CRC stays valid, as on a real broker.

use std::collections::{BTreeMap, HashMap, VecDeque};

use bytes::{Bytes, BytesMut};
use purekafka::protocol::records::{
    BatchIter, ControlRecord, ControlRecordKind, DecodeLimits, RecordBatchBuilder,
};

use super::errors::Code;

/// Batches whose sequence range a producer may retry (Kafka keeps five).
const DEDUP_WINDOW: usize = 5;

/// A batch in the log.
#[derive(Debug, Clone)]
pub struct StoredBatch {
    /// Offset of its first record.
    pub base_offset: i64,
    /// Offset of its last record.
    pub last_offset: i64,
    /// Leader epoch at append time.
    pub leader_epoch: i32,
    /// The batch as served to consumers.
    pub bytes: Bytes,
    /// Producer id (-1 when not idempotent).
    pub producer_id: i64,
    /// Whether it is part of a transaction.
    pub transactional: bool,
    /// Whether it holds a transaction marker.
    pub control: bool,
    /// The largest record timestamp.
    pub max_timestamp: i64,
}

/// Per producer, what a partition remembers (Kafka's ProducerStateEntry).
#[derive(Debug, Clone, Default)]
struct ProducerEntry {
    epoch: i16,
    /// `(first sequence, last sequence, base offset)` of the latest batches.
    recent: VecDeque<(i32, i32, i64)>,
}

/// What DescribeProducers reports of one producer on a partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProducerSnapshot {
    /// The producer id.
    pub producer_id: i64,
    /// Its latest epoch here.
    pub epoch: i16,
    /// Last sequence written (-1: none, a non-idempotent producer).
    pub last_sequence: i32,
    /// Max timestamp of its last batch here (-1: none left in the log).
    pub last_timestamp: i64,
    /// Offset of its open transaction's first batch here (-1: none).
    pub txn_start_offset: i64,
}

/// An aborted transaction's range, for read_committed fetches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AbortedRange {
    /// The producer.
    pub producer_id: i64,
    /// Offset of the transaction's first batch on this partition.
    pub first_offset: i64,
    /// Offset of its abort marker.
    pub last_offset: i64,
}

/// A partition's log and leadership.
#[derive(Debug, Clone)]
pub struct PartitionLog {
    batches: Vec<StoredBatch>,
    log_start: i64,
    next_offset: i64,
    /// Current leader epoch.
    pub leader_epoch: i32,
    /// Broker leading this partition.
    pub leader: i32,
    /// Replicas, leader first.
    pub replicas: Vec<i32>,
    /// `(epoch, start offset)` in increasing epoch order.
    epoch_starts: Vec<(i32, i64)>,
    producers: HashMap<i64, ProducerEntry>,
    /// Producer id -> offset of its open transaction's first batch here.
    open_txns: BTreeMap<i64, i64>,
    aborted: Vec<AbortedRange>,
}

/// What a successful append returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Appended {
    /// Offset of the first record of the first batch (or of the original
    /// append, for a duplicate).
    pub base_offset: i64,
}

impl PartitionLog {
    /// An empty log led by `replicas[0]` at epoch 0.
    pub fn new(replicas: Vec<i32>) -> PartitionLog {
        PartitionLog {
            batches: Vec::new(),
            log_start: 0,
            next_offset: 0,
            leader_epoch: 0,
            leader: replicas.first().copied().unwrap_or(-1),
            replicas,
            epoch_starts: vec![(0, 0)],
            producers: HashMap::new(),
            open_txns: BTreeMap::new(),
            aborted: Vec::new(),
        }
    }

    /// The producers that wrote here, by id.
    pub fn producer_states(&self) -> Vec<ProducerSnapshot> {
        let mut out: Vec<ProducerSnapshot> = self
            .producers
            .iter()
            .map(|(id, entry)| ProducerSnapshot {
                producer_id: *id,
                epoch: entry.epoch,
                last_sequence: entry.recent.back().map_or(-1, |r| r.1),
                last_timestamp: self
                    .batches
                    .iter()
                    .rev()
                    .find(|b| b.producer_id == *id && !b.control)
                    .map_or(-1, |b| b.max_timestamp),
                txn_start_offset: self.open_txns.get(id).copied().unwrap_or(-1),
            })
            .collect();
        out.sort_by_key(|s| s.producer_id);
        out
    }

    /// First offset still in the log.
    pub fn log_start(&self) -> i64 {
        self.log_start
    }

    /// The log end offset; every write is committed at once, so this is the
    /// high watermark too.
    pub fn high_watermark(&self) -> i64 {
        self.next_offset
    }

    /// The last stable offset: the first offset of the oldest open
    /// transaction, or the high watermark.
    pub fn last_stable_offset(&self) -> i64 {
        self.open_txns
            .values()
            .min()
            .copied()
            .unwrap_or(self.next_offset)
    }

    /// The batches, oldest first.
    pub fn batches(&self) -> &[StoredBatch] {
        &self.batches
    }

    /// Producer ids with an open transaction here.
    pub fn open_transactions(&self) -> impl Iterator<Item = i64> + '_ {
        self.open_txns.keys().copied()
    }

    /// Moves leadership to `leader` and bumps the epoch.
    pub fn set_leader(&mut self, leader: i32) {
        self.leader = leader;
        self.leader_epoch += 1;
        self.epoch_starts
            .push((self.leader_epoch, self.next_offset));
    }

    /// Appends the batches of one produce request's partition. All or
    /// nothing: a bad batch rejects the whole set, as Kafka does.
    pub fn append(&mut self, records: Bytes, now_ms: i64) -> Result<Appended, Code> {
        let mut parsed = Vec::new();
        let mut iter = BatchIter::new(records);
        for raw in iter.by_ref() {
            let raw = raw.map_err(|_| Code::CorruptMessage)?;
            raw.verify_crc().map_err(|_| Code::CorruptMessage)?;
            parsed.push(raw);
        }
        if iter.truncated_tail() || parsed.is_empty() {
            return Err(Code::CorruptMessage);
        }
        // Idempotence applies to the (single) batch a producer sends per
        // partition; check every batch before writing any.
        for raw in &parsed {
            let h = raw.header();
            if h.is_control {
                return Err(Code::InvalidRecord);
            }
            if h.producer_id >= 0 && h.base_sequence >= 0 {
                let seq = (h.base_sequence, h.last_offset_delta);
                if let Some(dup) = self.check_sequence(h.producer_id, h.producer_epoch, seq)? {
                    return Ok(Appended { base_offset: dup });
                }
            }
        }
        let first = self.next_offset;
        for raw in parsed {
            let h = raw.header().clone();
            let base = self.next_offset;
            let mut bytes = BytesMut::from(raw.as_bytes().as_ref());
            bytes[0..8].copy_from_slice(&base.to_be_bytes());
            bytes[12..16].copy_from_slice(&self.leader_epoch.to_be_bytes());
            let last = base + i64::from(h.last_offset_delta);
            if h.producer_id >= 0 {
                let entry = self.producers.entry(h.producer_id).or_default();
                if entry.epoch != h.producer_epoch {
                    entry.recent.clear();
                }
                entry.epoch = h.producer_epoch;
                if h.base_sequence >= 0 {
                    let last_seq = h.base_sequence.wrapping_add(h.last_offset_delta);
                    entry.recent.push_back((h.base_sequence, last_seq, base));
                    if entry.recent.len() > DEDUP_WINDOW {
                        entry.recent.pop_front();
                    }
                }
                if h.is_transactional {
                    self.open_txns.entry(h.producer_id).or_insert(base);
                }
            }
            self.batches.push(StoredBatch {
                base_offset: base,
                last_offset: last,
                leader_epoch: self.leader_epoch,
                bytes: bytes.freeze(),
                producer_id: h.producer_id,
                transactional: h.is_transactional,
                control: false,
                max_timestamp: if h.max_timestamp < 0 {
                    now_ms
                } else {
                    h.max_timestamp
                },
            });
            self.next_offset = last + 1;
        }
        Ok(Appended { base_offset: first })
    }

    /// Kafka's sequence rules: a duplicate of a recent batch answers its
    /// original offset; an older epoch is fenced; a new epoch must start at
    /// sequence 0; otherwise the sequence must follow the last one. A
    /// producer this partition knows nothing about is accepted at any
    /// sequence (its state may have been removed with its records).
    fn check_sequence(
        &self,
        producer_id: i64,
        epoch: i16,
        (first_seq, delta): (i32, i32),
    ) -> Result<Option<i64>, Code> {
        let Some(entry) = self.producers.get(&producer_id) else {
            return Ok(None);
        };
        if epoch < entry.epoch {
            return Err(Code::InvalidProducerEpoch);
        }
        if epoch > entry.epoch {
            return if first_seq == 0 {
                Ok(None)
            } else {
                Err(Code::OutOfOrderSequenceNumber)
            };
        }
        let last_seq = first_seq.wrapping_add(delta);
        if let Some((_, _, offset)) = entry
            .recent
            .iter()
            .find(|(f, l, _)| *f == first_seq && *l == last_seq)
        {
            return Ok(Some(*offset));
        }
        match entry.recent.back() {
            Some((_, last, _))
                if first_seq != last.wrapping_add(1) && !(*last == i32::MAX && first_seq == 0) =>
            {
                Err(Code::OutOfOrderSequenceNumber)
            }
            _ => Ok(None),
        }
    }

    /// Writes a transaction marker for `producer_id` if it has an open
    /// transaction here; returns whether one was written.
    pub fn write_marker(
        &mut self,
        producer_id: i64,
        producer_epoch: i16,
        commit: bool,
        coordinator_epoch: i32,
        now_ms: i64,
    ) -> bool {
        let Some(first) = self.open_txns.remove(&producer_id) else {
            return false;
        };
        let kind = if commit {
            ControlRecordKind::Commit
        } else {
            ControlRecordKind::Abort
        };
        let marker = ControlRecord {
            kind,
            coordinator_epoch,
        };
        let entry = self.producers.entry(producer_id).or_default();
        if producer_epoch > entry.epoch {
            entry.epoch = producer_epoch;
            entry.recent.clear();
        }
        let base = self.next_offset;
        let mut builder = RecordBatchBuilder::new()
            .base_offset(base)
            .partition_leader_epoch(self.leader_epoch)
            .producer(producer_id, producer_epoch, -1)
            .transactional(true)
            .control(true);
        if builder.append_control(now_ms, &marker).is_err() {
            return false;
        }
        let Ok(bytes) = builder.finish() else {
            return false;
        };
        if !commit {
            self.aborted.push(AbortedRange {
                producer_id,
                first_offset: first,
                last_offset: base,
            });
        }
        self.batches.push(StoredBatch {
            base_offset: base,
            last_offset: base,
            leader_epoch: self.leader_epoch,
            bytes: bytes.freeze(),
            producer_id,
            transactional: true,
            control: true,
            max_timestamp: now_ms,
        });
        self.next_offset = base + 1;
        true
    }

    /// Batches from the one holding `offset`, at least one batch and then up
    /// to `max_bytes`, below `limit` (the high watermark or the LSO).
    pub fn read(&self, offset: i64, max_bytes: usize, limit: i64) -> Bytes {
        let start = self.batches.partition_point(|b| b.last_offset < offset);
        let mut out = BytesMut::new();
        for b in self.batches.iter().skip(start) {
            if b.base_offset >= limit {
                break;
            }
            if !out.is_empty() && out.len() + b.bytes.len() > max_bytes {
                break;
            }
            out.extend_from_slice(&b.bytes);
        }
        out.freeze()
    }

    /// Aborted transactions overlapping `[from, to)`, for read_committed.
    pub fn aborted_between(&self, from: i64, to: i64) -> Vec<AbortedRange> {
        self.aborted
            .iter()
            .filter(|a| a.last_offset >= from && a.first_offset < to)
            .copied()
            .collect()
    }

    /// Whether `offset` is a valid fetch position.
    pub fn in_range(&self, offset: i64) -> bool {
        offset >= self.log_start && offset <= self.next_offset
    }

    /// `(epoch, end offset)` for OffsetsForLeaderEpoch: the largest epoch at
    /// or below `epoch` and the offset where the next epoch started (or the
    /// log end for the current one); `(-1, -1)` below the first epoch.
    pub fn epoch_end(&self, epoch: i32) -> (i32, i64) {
        let Some(idx) = self.epoch_starts.iter().rposition(|(e, _)| *e <= epoch) else {
            return (-1, -1);
        };
        let found = self.epoch_starts[idx].0;
        let end = self
            .epoch_starts
            .get(idx + 1)
            .map(|(_, start)| *start)
            .unwrap_or(self.next_offset);
        (found, end)
    }

    /// The offset ListOffsets answers for `timestamp` (-1 latest, -2 and -4
    /// earliest, -3 the record with the largest timestamp, else the first
    /// record whose timestamp is at or after it), with that record's
    /// timestamp and its batch's leader epoch; `(-1, -1, -1)` when none.
    pub fn offset_for_time(&self, timestamp: i64, limit: i64) -> (i64, i64, i32) {
        match timestamp {
            -1 => return (limit, -1, self.leader_epoch),
            -2 | -4 => return (self.log_start, -1, self.leader_epoch),
            t if t < -3 => return (-1, -1, -1),
            _ => {}
        }
        let mut best: Option<(i64, i64, i32)> = None;
        for b in self
            .batches
            .iter()
            .filter(|b| !b.control && b.base_offset < limit)
        {
            if timestamp >= 0 && b.max_timestamp < timestamp {
                continue;
            }
            let Some(Ok(raw)) = BatchIter::new(b.bytes.clone()).next() else {
                continue;
            };
            let Ok(batch) = raw.decode(&DecodeLimits::default()) else {
                continue;
            };
            let records = batch
                .records
                .iter()
                .filter(|r| r.offset >= self.log_start && r.offset < limit);
            for r in records {
                let candidate = (r.offset, r.timestamp, b.leader_epoch);
                if timestamp >= 0 {
                    if r.timestamp >= timestamp {
                        return candidate;
                    }
                } else if best.is_none_or(|(_, ts, _)| r.timestamp > ts) {
                    best = Some(candidate);
                }
            }
        }
        best.unwrap_or((-1, -1, -1))
    }

    /// DeleteRecords: moves the log start to `offset` (-1: the high
    /// watermark) and drops the batches wholly below it.
    pub fn delete_before(&mut self, offset: i64) -> Result<i64, Code> {
        let offset = if offset == -1 {
            self.next_offset
        } else {
            offset
        };
        if offset < 0 || offset > self.next_offset {
            return Err(Code::OffsetOutOfRange);
        }
        if offset > self.log_start {
            self.log_start = offset;
            self.batches.retain(|b| b.last_offset >= offset);
        }
        Ok(self.log_start)
    }
}
