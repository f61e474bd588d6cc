//! Record batch v2 codec (magic 2, KIP-98), the only record format of
//! modern Kafka. See <https://kafka.apache.org/documentation/#recordbatch>.
//!
//! A batch on the wire, big-endian, offsets in bytes:
//!
//! ```text
//!  0 baseOffset i64         27 baseTimestamp i64     57 recordsCount i32
//!  8 batchLength i32        35 maxTimestamp i64      61 records...
//! 12 partitionLeaderEpoch   43 producerId i64
//! 16 magic i8 (= 2)         51 producerEpoch i16
//! 17 crc u32                53 baseSequence i32
//! 21 attributes i16         (crc = CRC-32C of bytes 21..end)
//! 23 lastOffsetDelta i32
//! ```
//!
//! `batchLength` counts the bytes after itself. Attributes: bits 0-2 codec
//! (see [`Compression`]), bit 3 timestamp type, bit 4 transactional, bit 5
//! control, bit 6 delete horizon (KIP-534). The records section is compressed
//! as a whole; each record is
//!
//! ```text
//! length varint, attributes i8, timestampDelta varlong, offsetDelta varint,
//! keyLength varint (-1 = null), key, valueLength varint (-1 = null), value,
//! headerCount varint, headers: keyLength varint, key, valueLength varint (-1 = null), value
//! ```
//!
//! Decoding is zero-copy: keys, values and header values are [`Bytes`]
//! slices of the input (uncompressed batches) or of the decompressed buffer.
//! Input is hostile: every length is checked against the bytes present,
//! counts never size an allocation beyond what the bytes could hold, and a
//! truncated final batch (normal at the end of a fetch response) is reported
//! by [`DecodedBatches::truncated_tail`], not as an error.

use bytes::Bytes;

use super::compression::Compression;

mod control;
mod decode;
mod encode;
mod varint;

#[cfg(test)]
mod tests;

pub use control::{ControlRecord, ControlRecordKind};
pub use decode::{decode_batches, BatchIter, DecodedBatches, RawBatch};
pub use encode::{set_producer_fields, RecordBatchBuilder};

/// The only record batch format this crate reads and writes.
pub const MAGIC: i8 = 2;
/// Bytes of a batch before its records: the fixed header.
pub const BATCH_HEADER_LEN: usize = 61;
/// Bytes before `batchLength` starts counting (baseOffset + batchLength).
pub const LOG_OVERHEAD: usize = 12;

const TIMESTAMP_TYPE_BIT: i16 = 1 << 3;
const TRANSACTIONAL_BIT: i16 = 1 << 4;
const CONTROL_BIT: i16 = 1 << 5;
const DELETE_HORIZON_BIT: i16 = 1 << 6;

/// How record timestamps of a batch were assigned.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum TimestampType {
    /// Set by the producer (attribute bit 3 clear).
    #[default]
    CreateTime,
    /// Set by the broker on append (bit 3 set); every record's timestamp is
    /// the batch's `max_timestamp`.
    LogAppendTime,
}

/// Limits applied while decoding untrusted batches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodeLimits {
    /// Verify each batch's CRC-32C (default true).
    pub check_crc: bool,
    /// Bound on decompressed bytes: per batch for [`RawBatch::decode`], and
    /// in total over one [`decode_batches`] call (default 64 MiB).
    pub max_decompressed_size: usize,
}

impl Default for DecodeLimits {
    fn default() -> Self {
        DecodeLimits {
            check_crc: true,
            max_decompressed_size: 64 << 20,
        }
    }
}

/// The fixed header of a record batch (everything before the records).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchHeader {
    /// Offset of the first record.
    pub base_offset: i64,
    /// Bytes after the `batchLength` field.
    pub batch_length: i32,
    /// Leader epoch stamped by the broker (-1 when written by a producer).
    pub partition_leader_epoch: i32,
    /// Stored CRC-32C of bytes 21..end.
    pub crc: u32,
    /// Raw attributes; the fields below decode them.
    pub attributes: i16,
    /// Codec of the records section.
    pub compression: Compression,
    /// How timestamps were assigned.
    pub timestamp_type: TimestampType,
    /// Part of a transaction.
    pub is_transactional: bool,
    /// Holds control records (transaction markers) instead of data.
    pub is_control: bool,
    /// `base_timestamp` is a delete horizon set by compaction (KIP-534).
    pub has_delete_horizon: bool,
    /// Offset of the last record minus `base_offset`.
    pub last_offset_delta: i32,
    /// Timestamp the record deltas are relative to.
    pub base_timestamp: i64,
    /// Largest record timestamp (the append time for log-append-time batches).
    pub max_timestamp: i64,
    /// Producer id (-1 if not idempotent).
    pub producer_id: i64,
    /// Producer epoch (-1 if not idempotent).
    pub producer_epoch: i16,
    /// Sequence number of the first record (-1 if not idempotent).
    pub base_sequence: i32,
    /// Declared number of records.
    pub record_count: i32,
}

impl BatchHeader {
    /// Offset of the last record the batch covers (compaction may have
    /// removed records, but never this offset range).
    pub fn last_offset(&self) -> i64 {
        self.base_offset
            .saturating_add(i64::from(self.last_offset_delta))
    }

    /// Offset following this batch: where the next fetch should start.
    pub fn next_offset(&self) -> i64 {
        self.last_offset().saturating_add(1)
    }

    /// The delete horizon (ms) if compaction set one.
    pub fn delete_horizon_ms(&self) -> Option<i64> {
        self.has_delete_horizon.then_some(self.base_timestamp)
    }

    /// Builds the attributes field from its parts.
    fn encode_attributes(
        compression: Compression,
        timestamp_type: TimestampType,
        transactional: bool,
        control: bool,
    ) -> i16 {
        let mut attributes = compression.code();
        if timestamp_type == TimestampType::LogAppendTime {
            attributes |= TIMESTAMP_TYPE_BIT;
        }
        if transactional {
            attributes |= TRANSACTIONAL_BIT;
        }
        if control {
            attributes |= CONTROL_BIT;
        }
        attributes
    }
}

/// A decoded record batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordBatch {
    /// The batch header.
    pub header: BatchHeader,
    /// The records, with absolute offsets and timestamps.
    pub records: Vec<Record>,
}

impl RecordBatch {
    /// Whether this batch holds control records (see [`ControlRecord`]).
    pub fn is_control(&self) -> bool {
        self.header.is_control
    }

    /// Whether this batch is part of a transaction.
    pub fn is_transactional(&self) -> bool {
        self.header.is_transactional
    }
}

/// One record, with its absolute offset and timestamp.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Record {
    /// Absolute offset (`base_offset + offsetDelta`).
    pub offset: i64,
    /// Absolute timestamp in ms (`base_timestamp + timestampDelta`, or the
    /// batch's `max_timestamp` for log-append-time batches).
    pub timestamp: i64,
    /// Key; `None` is a null key.
    pub key: Option<Bytes>,
    /// Value; `None` is a null value (a tombstone on compacted topics).
    pub value: Option<Bytes>,
    /// Headers, in wire order.
    pub headers: Vec<RecordHeader>,
}

/// A record header. Keys are strings in Kafka's Java API; they are kept as
/// bytes here and checked only on demand with [`RecordHeader::key_str`].
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RecordHeader {
    /// Header key.
    pub key: Bytes,
    /// Header value; `None` is null.
    pub value: Option<Bytes>,
}

impl RecordHeader {
    /// A header from a key and an optional value.
    pub fn new(key: impl Into<Bytes>, value: Option<Bytes>) -> Self {
        RecordHeader {
            key: key.into(),
            value,
        }
    }

    /// The key as UTF-8.
    pub fn key_str(&self) -> Result<&str, std::str::Utf8Error> {
        std::str::from_utf8(&self.key)
    }
}
