//! What `poll` returns: records with their partition, and positions.

use bytes::Bytes;

use crate::protocol::records::{RecordHeader, TimestampType};
use crate::TopicPartition;

/// One consumed record. Key, value and header values are zero-copy slices of
/// the fetch response (or of the decompressed batch).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsumerRecord {
    /// The partition the record was read from.
    pub partition: TopicPartition,
    /// The record's offset.
    pub offset: i64,
    /// Timestamp in ms since the epoch.
    pub timestamp: i64,
    /// Whether the producer or the broker set the timestamp.
    pub timestamp_type: TimestampType,
    /// Key; `None` is null.
    pub key: Option<Bytes>,
    /// Value; `None` is null (a tombstone on compacted topics).
    pub value: Option<Bytes>,
    /// Headers, in wire order.
    pub headers: Vec<RecordHeader>,
    /// Leader epoch of the batch (KIP-320), if the broker stamped one.
    pub leader_epoch: Option<i32>,
}

impl ConsumerRecord {
    /// The topic name.
    pub fn topic(&self) -> &str {
        &self.partition.topic
    }

    /// Bytes the record holds on to (key, value and headers), for the
    /// buffer bound.
    pub(crate) fn size(&self) -> usize {
        let field = |b: &Option<Bytes>| b.as_ref().map_or(0, Bytes::len);
        let headers: usize = self
            .headers
            .iter()
            .map(|h| h.key.len() + field(&h.value))
            .sum();
        // Offsets, timestamps and lengths: a fixed per-record overhead.
        32 + field(&self.key) + field(&self.value) + headers
    }
}

/// A consumer's position in one partition: the offset of the next record
/// `poll` returns, with the leader epoch of the last record returned (KIP-320;
/// committed together with the offset by the group layer).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Position {
    /// Next offset to return.
    pub offset: i64,
    /// Leader epoch of the record before `offset`, if known.
    pub leader_epoch: Option<i32>,
}

/// An offset found by [`Consumer::offsets_for_times`](super::Consumer::offsets_for_times).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct OffsetAndTimestamp {
    /// The earliest offset whose timestamp is at least the one asked for.
    pub offset: i64,
    /// That record's timestamp.
    pub timestamp: i64,
    /// Its leader epoch, if the broker returned one.
    pub leader_epoch: Option<i32>,
}
