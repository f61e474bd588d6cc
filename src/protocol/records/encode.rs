//! Building record batches for produce requests (and control batches for
//! tests).

use bytes::{BufMut, BytesMut};

use super::control::ControlRecord;
use super::varint::{put_varint, put_varlong, varint_len, varlong_len};
use super::{BatchHeader, RecordHeader, TimestampType, BATCH_HEADER_LEN, LOG_OVERHEAD, MAGIC};
use crate::protocol::compression::{compress, Compression};
use crate::protocol::ProtocolError;

/// Builds one record batch v2.
///
/// Records are encoded as they are appended, straight into the buffer that
/// becomes the batch (after a reserved 61-byte header), so an uncompressed
/// batch is finished without copying. Offset deltas are 0, 1, 2, ... in append
/// order; the first record's timestamp is the base timestamp.
///
/// ```
/// use purekafka::protocol::compression::Compression;
/// use purekafka::protocol::records::RecordBatchBuilder;
///
/// let mut builder = RecordBatchBuilder::new()
///     .compression(Compression::Lz4, None)?
///     .producer(4000, 0, 17);
/// builder.append(1_700_000_000_000, Some(b"key"), Some(b"value"), &[])?;
/// let batch = builder.finish()?;
/// # Ok::<(), purekafka::protocol::ProtocolError>(())
/// ```
#[derive(Debug, Clone)]
pub struct RecordBatchBuilder {
    buf: BytesMut,
    base_offset: i64,
    partition_leader_epoch: i32,
    producer_id: i64,
    producer_epoch: i16,
    base_sequence: i32,
    transactional: bool,
    control: bool,
    compression: Compression,
    level: Option<i32>,
    timestamp_type: TimestampType,
    count: i32,
    base_timestamp: i64,
    max_timestamp: i64,
}

impl Default for RecordBatchBuilder {
    fn default() -> Self {
        Self::new()
    }
}

impl RecordBatchBuilder {
    /// An empty builder: base offset 0, no producer id (-1/-1/-1), not
    /// transactional, uncompressed, create-time timestamps, leader epoch -1.
    pub fn new() -> Self {
        Self::with_buffer(BytesMut::new())
    }

    /// Like [`new`](Self::new), reusing `buf`'s allocation (its contents are
    /// cleared).
    pub fn with_buffer(mut buf: BytesMut) -> Self {
        buf.clear();
        buf.resize(BATCH_HEADER_LEN, 0);
        RecordBatchBuilder {
            buf,
            base_offset: 0,
            partition_leader_epoch: -1,
            producer_id: -1,
            producer_epoch: -1,
            base_sequence: -1,
            transactional: false,
            control: false,
            compression: Compression::None,
            level: None,
            timestamp_type: TimestampType::CreateTime,
            count: 0,
            base_timestamp: -1,
            max_timestamp: -1,
        }
    }

    /// Sets the codec and level, validated now (see
    /// [`Compression::validate_level`]).
    pub fn compression(
        mut self,
        codec: Compression,
        level: Option<i32>,
    ) -> Result<Self, ProtocolError> {
        codec.validate_level(level)?;
        self.compression = codec;
        self.level = level;
        Ok(self)
    }

    /// Sets the base offset (producers send 0; the broker assigns offsets).
    pub fn base_offset(mut self, base_offset: i64) -> Self {
        self.base_offset = base_offset;
        self
    }

    /// Sets the partition leader epoch (brokers set it; producers leave -1).
    pub fn partition_leader_epoch(mut self, epoch: i32) -> Self {
        self.partition_leader_epoch = epoch;
        self
    }

    /// Sets the idempotent producer id, epoch and first sequence number.
    pub fn producer(mut self, producer_id: i64, producer_epoch: i16, base_sequence: i32) -> Self {
        self.producer_id = producer_id;
        self.producer_epoch = producer_epoch;
        self.base_sequence = base_sequence;
        self
    }

    /// Marks the batch as part of a transaction.
    pub fn transactional(mut self, transactional: bool) -> Self {
        self.transactional = transactional;
        self
    }

    /// Marks the batch as a control batch (see [`append_control`](Self::append_control)).
    pub fn control(mut self, control: bool) -> Self {
        self.control = control;
        self
    }

    /// Sets the timestamp type. With log-append time, readers take every
    /// record's timestamp from `max_timestamp` (the largest appended here).
    pub fn timestamp_type(mut self, timestamp_type: TimestampType) -> Self {
        self.timestamp_type = timestamp_type;
        self
    }

    /// Number of records appended.
    pub fn len(&self) -> usize {
        self.count as usize
    }

    /// Whether no record has been appended.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Bytes of the batch so far, uncompressed (header included).
    pub fn uncompressed_size(&self) -> usize {
        self.buf.len()
    }

    /// Appends a record; `timestamp` is in ms since the epoch.
    pub fn append(
        &mut self,
        timestamp: i64,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        headers: &[RecordHeader],
    ) -> Result<(), ProtocolError> {
        let offset_delta = self.count;
        if offset_delta == i32::MAX {
            return Err(encode_error("record count", "more than i32::MAX records"));
        }
        if self.count == 0 {
            self.base_timestamp = timestamp;
            self.max_timestamp = timestamp;
        }
        let timestamp_delta = timestamp.wrapping_sub(self.base_timestamp);
        let mut body = 1
            + varlong_len(timestamp_delta)
            + varint_len(offset_delta)
            + nullable_len(key, "record key")?
            + nullable_len(value, "record value")?
            + varint_len(wire_len(headers.len(), "record header count")?);
        for header in headers {
            body += varint_len(wire_len(header.key.len(), "record header key")?) + header.key.len();
            body += nullable_len(header.value.as_deref(), "record header value")?;
        }
        let body_len = wire_len(body, "record")?;

        let buf = &mut self.buf;
        buf.reserve(varint_len(body_len) + body);
        put_varint(buf, body_len);
        buf.put_u8(0);
        put_varlong(buf, timestamp_delta);
        put_varint(buf, offset_delta);
        put_nullable(buf, key);
        put_nullable(buf, value);
        put_varint(buf, headers.len() as i32);
        for header in headers {
            put_varint(buf, header.key.len() as i32);
            buf.put_slice(&header.key);
            put_nullable(buf, header.value.as_deref());
        }
        self.count += 1;
        self.max_timestamp = self.max_timestamp.max(timestamp);
        Ok(())
    }

    /// Appends a control record (a transaction marker when `kind` is
    /// commit or abort). Use on a builder marked [`control`](Self::control)
    /// and, for markers, [`transactional`](Self::transactional).
    pub fn append_control(
        &mut self,
        timestamp: i64,
        record: &ControlRecord,
    ) -> Result<(), ProtocolError> {
        self.append(
            timestamp,
            Some(&record.encode_key()),
            Some(&record.encode_value()),
            &[],
        )
    }

    /// Finishes the batch: compresses the records if asked, fills in the
    /// header (lengths, offsets, timestamps) and the CRC-32C.
    ///
    /// Fails on an empty batch: Kafka producers never send one.
    pub fn finish(self) -> Result<BytesMut, ProtocolError> {
        self.finish_with_spare().map(|(batch, _)| batch)
    }

    /// Like [`finish`](Self::finish), and gives back the buffer the records
    /// were encoded into when compression wrote the batch into a new one, so
    /// a caller can reuse its allocation for the next batch.
    pub fn finish_with_spare(self) -> Result<(BytesMut, Option<BytesMut>), ProtocolError> {
        if self.count == 0 {
            return Err(encode_error("record batch", "no records"));
        }
        let attributes = BatchHeader::encode_attributes(
            self.compression,
            self.timestamp_type,
            self.transactional,
            self.control,
        );
        let (mut batch, spare) = match self.compression {
            Compression::None => (self.buf, None),
            codec => {
                let records = &self.buf[BATCH_HEADER_LEN..];
                let mut out = BytesMut::with_capacity(BATCH_HEADER_LEN + records.len() / 2 + 64);
                out.resize(BATCH_HEADER_LEN, 0);
                compress(codec, self.level, records, &mut out)?;
                (out, Some(self.buf))
            }
        };
        let batch_length = wire_len(batch.len() - LOG_OVERHEAD, "record batch")?;
        let mut header = &mut batch[..BATCH_HEADER_LEN];
        header.put_i64(self.base_offset);
        header.put_i32(batch_length);
        header.put_i32(self.partition_leader_epoch);
        header.put_i8(MAGIC);
        header.put_u32(0); // CRC, filled in below.
        header.put_i16(attributes);
        header.put_i32(self.count - 1);
        header.put_i64(self.base_timestamp);
        header.put_i64(self.max_timestamp);
        header.put_i64(self.producer_id);
        header.put_i16(self.producer_epoch);
        header.put_i32(self.base_sequence);
        header.put_i32(self.count);
        let crc = crc32c::crc32c(&batch[21..]);
        batch[17..21].copy_from_slice(&crc.to_be_bytes());
        Ok((batch, spare))
    }

    /// Finishes the batch and appends it to `out` (without copying when `out`
    /// is empty).
    pub fn finish_into(self, out: &mut BytesMut) -> Result<(), ProtocolError> {
        out.unsplit(self.finish()?);
        Ok(())
    }
}

/// Rewrites the producer id, epoch and base sequence of a finished batch
/// and recomputes its CRC, as an idempotent producer does when it assigns or
/// resets sequence numbers after the batch was built.
pub fn set_producer_fields(
    batch: &mut [u8],
    producer_id: i64,
    producer_epoch: i16,
    base_sequence: i32,
) -> Result<(), ProtocolError> {
    if batch.len() < BATCH_HEADER_LEN || batch[16] as i8 != MAGIC {
        return Err(encode_error("record batch", "not a finished v2 batch"));
    }
    batch[43..51].copy_from_slice(&producer_id.to_be_bytes());
    batch[51..53].copy_from_slice(&producer_epoch.to_be_bytes());
    batch[53..57].copy_from_slice(&base_sequence.to_be_bytes());
    let crc = crc32c::crc32c(&batch[21..]);
    batch[17..21].copy_from_slice(&crc.to_be_bytes());
    Ok(())
}

fn encode_error(what: &'static str, reason: impl Into<String>) -> ProtocolError {
    ProtocolError::Encode {
        what,
        reason: reason.into(),
    }
}

/// A length as the i32 the wire format holds.
#[inline]
fn wire_len(len: usize, what: &'static str) -> Result<i32, ProtocolError> {
    i32::try_from(len).map_err(|_| encode_error(what, format!("{len} bytes exceed i32::MAX")))
}

/// Encoded size of a nullable byte string (length varint + bytes).
#[inline]
fn nullable_len(bytes: Option<&[u8]>, what: &'static str) -> Result<usize, ProtocolError> {
    match bytes {
        None => Ok(1),
        Some(b) => Ok(varint_len(wire_len(b.len(), what)?) + b.len()),
    }
}

#[inline]
fn put_nullable(buf: &mut BytesMut, bytes: Option<&[u8]>) {
    match bytes {
        None => put_varint(buf, -1),
        Some(b) => {
            put_varint(buf, b.len() as i32);
            buf.put_slice(b);
        }
    }
}
