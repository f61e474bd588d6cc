//! What `poll` returns: records with their partition, and positions.

use bytes::{Bytes, BytesMut};

use crate::protocol::records::{RecordHeader, TimestampType};
use crate::TopicPartition;

/// One consumed record. Key, value and header values are zero-copy slices of
/// the fetch response (or of the decompressed batch).
///
/// A record keeps the whole buffer it was sliced from alive: a fetch
/// response of up to `fetch.max.bytes` (every partition of one broker), or a
/// decompressed batch. Records dropped after processing cost nothing more;
/// a record kept for long (a cache, a window of samples) should be
/// [`detach`](Self::detach)ed, which copies its bytes so the response can
/// be freed. (rust-rdkafka's `BorrowedMessage::detach` is the same trade;
/// the Java client copies every record instead.)
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

    /// A copy of this record whose key, value and headers share one new
    /// allocation of their total size, so it no longer keeps the fetch
    /// response (or decompressed batch) it came from in memory.
    pub fn detach(&self) -> ConsumerRecord {
        let fields = || {
            let headers = self
                .headers
                .iter()
                .flat_map(|h| [Some(&h.key), h.value.as_ref()]);
            [self.key.as_ref(), self.value.as_ref()]
                .into_iter()
                .chain(headers)
                .flatten()
        };
        let mut buf = BytesMut::with_capacity(fields().map(Bytes::len).sum());
        for field in fields() {
            buf.extend_from_slice(field);
        }
        let mut owned = buf.freeze();
        let mut take = |b: &Bytes| owned.split_to(b.len());
        let key = self.key.as_ref().map(&mut take);
        let value = self.value.as_ref().map(&mut take);
        let headers = self
            .headers
            .iter()
            .map(|h| RecordHeader {
                key: take(&h.key),
                value: h.value.as_ref().map(&mut take),
            })
            .collect();
        ConsumerRecord {
            partition: self.partition.clone(),
            offset: self.offset,
            timestamp: self.timestamp,
            timestamp_type: self.timestamp_type,
            key,
            value,
            headers,
            leader_epoch: self.leader_epoch,
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn detach_copies_every_field_out_of_the_frame() {
        let frame = Bytes::from(vec![b'x'; 4096]);
        let record = ConsumerRecord {
            partition: TopicPartition::new("t", 3),
            offset: 42,
            timestamp: 7,
            timestamp_type: TimestampType::CreateTime,
            key: Some(frame.slice(10..14)),
            value: Some(frame.slice(100..200)),
            headers: vec![
                RecordHeader {
                    key: frame.slice(300..303),
                    value: None,
                },
                RecordHeader {
                    key: Bytes::from_static(b"h"),
                    value: Some(frame.slice(400..410)),
                },
            ],
            leader_epoch: Some(2),
        };
        let detached = record.detach();
        assert_eq!(detached, record);
        let inside = |b: &Bytes| frame.as_ptr_range().contains(&b.as_ptr());
        let copied = [
            detached.key.as_ref().unwrap(),
            detached.value.as_ref().unwrap(),
            &detached.headers[0].key,
            detached.headers[1].value.as_ref().unwrap(),
        ];
        assert!(
            copied.iter().all(|b| !inside(b)),
            "nothing points into the frame"
        );
        let tombstone = ConsumerRecord {
            key: None,
            value: None,
            headers: Vec::new(),
            ..record
        };
        assert_eq!(tombstone.detach(), tombstone);
    }
}
