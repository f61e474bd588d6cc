//! Decoding record batches from untrusted bytes, zero-copy.

use bytes::Bytes;

use super::varint::{read_varint, read_varlong};
use super::{
    BatchHeader, DecodeLimits, Record, RecordBatch, RecordHeader, TimestampType, BATCH_HEADER_LEN,
    CONTROL_BIT, DELETE_HORIZON_BIT, LOG_OVERHEAD, MAGIC, TIMESTAMP_TYPE_BIT, TRANSACTIONAL_BIT,
};
use crate::protocol::compression::{decompress, Compression};
use crate::protocol::ProtocolError;

/// Bytes up to and including the magic byte, enough to tell formats apart.
const HEADER_UP_TO_MAGIC: usize = 17;
/// Offset of the first byte covered by the CRC (the attributes).
const CRC_START: usize = 21;
/// Smallest possible encoded record: seven one-byte fields.
const MIN_RECORD_LEN: usize = 7;
/// Smallest possible encoded header: two one-byte lengths.
const MIN_HEADER_LEN: usize = 2;

/// Every complete batch of a records field, plus whether it ended with a
/// partial batch.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DecodedBatches {
    /// The complete batches, in order.
    pub batches: Vec<RecordBatch>,
    /// The input ended inside a batch. Brokers cut fetch responses at the
    /// size limit, so this is normal; fetch again from the next offset (if
    /// `batches` is empty, the first batch is larger than the fetch size).
    pub truncated_tail: bool,
}

/// Decodes every complete batch in `buf` (a fetch response's records field
/// or a log segment: concatenated batches).
///
/// Fails on the first malformed batch, on a CRC mismatch (if checked), on a
/// legacy message set (magic 0 or 1: [`ProtocolError::Unsupported`]), or when
/// decompression would exceed `limits.max_decompressed_size` in total.
pub fn decode_batches(buf: Bytes, limits: &DecodeLimits) -> Result<DecodedBatches, ProtocolError> {
    let mut iter = BatchIter::new(buf);
    let mut batches = Vec::new();
    let mut budget = limits.max_decompressed_size;
    for raw in iter.by_ref() {
        let raw = raw?;
        let batch = raw.decode_within(limits.check_crc, &mut budget)?;
        batches.push(batch);
    }
    Ok(DecodedBatches {
        batches,
        truncated_tail: iter.truncated_tail(),
    })
}

/// Lazy iterator over the batches of a records field: splits batches and
/// parses headers only, so callers can skip batches (aborted transactions,
/// offsets already consumed) without decoding their records.
///
/// Stops after the first error. A partial final batch ends the iteration and
/// sets [`BatchIter::truncated_tail`].
#[derive(Debug, Clone)]
pub struct BatchIter {
    buf: Bytes,
    pos: usize,
    truncated_tail: bool,
    failed: bool,
}

impl BatchIter {
    /// Iterates over the batches in `buf`.
    pub fn new(buf: Bytes) -> Self {
        BatchIter {
            buf,
            pos: 0,
            truncated_tail: false,
            failed: false,
        }
    }

    /// Whether the input ended inside a batch (meaningful once exhausted).
    pub fn truncated_tail(&self) -> bool {
        self.truncated_tail
    }

    fn next_batch(&mut self) -> Result<Option<RawBatch>, ProtocolError> {
        let rest = self.buf.get(self.pos..).unwrap_or_default();
        if rest.is_empty() {
            return Ok(None);
        }
        let Some(head) = rest.first_chunk::<HEADER_UP_TO_MAGIC>() else {
            self.truncated_tail = true;
            return Ok(None);
        };
        let batch_length = i32::from_be_bytes([head[8], head[9], head[10], head[11]]);
        let magic = head[16] as i8;
        // Checked before the length so a legacy message set gets a clear error.
        if magic != MAGIC {
            return Err(ProtocolError::Unsupported {
                what: "record batch magic (only v2 batches are supported; 0 and 1 are legacy message sets)",
                value: i64::from(magic),
            });
        }
        let min = (BATCH_HEADER_LEN - LOG_OVERHEAD) as i32;
        if batch_length < min {
            return Err(ProtocolError::Invalid {
                what: "record batch length",
                reason: format!("{batch_length} is below the minimum of {min}"),
            });
        }
        let total = LOG_OVERHEAD + batch_length as usize;
        if total > rest.len() {
            self.truncated_tail = true;
            return Ok(None);
        }
        let bytes = self.buf.slice(self.pos..self.pos + total);
        self.pos += total;
        let header = parse_header(&bytes)?;
        Ok(Some(RawBatch { header, bytes }))
    }
}

impl Iterator for BatchIter {
    type Item = Result<RawBatch, ProtocolError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed {
            return None;
        }
        match self.next_batch() {
            Ok(batch) => batch.map(Ok),
            Err(e) => {
                self.failed = true;
                Some(Err(e))
            }
        }
    }
}

/// One complete batch whose header is parsed and whose records are not.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawBatch {
    header: BatchHeader,
    bytes: Bytes,
}

impl RawBatch {
    /// The parsed header.
    pub fn header(&self) -> &BatchHeader {
        &self.header
    }

    /// The whole batch as received, header included.
    pub fn as_bytes(&self) -> &Bytes {
        &self.bytes
    }

    /// Checks the stored CRC-32C against the batch bytes.
    pub fn verify_crc(&self) -> Result<(), ProtocolError> {
        let computed = crc32c::crc32c(self.bytes.get(CRC_START..).unwrap_or_default());
        if computed == self.header.crc {
            Ok(())
        } else {
            Err(ProtocolError::CrcMismatch {
                base_offset: self.header.base_offset,
                stored: self.header.crc,
                computed,
            })
        }
    }

    /// Decodes the records, checking the CRC if `limits.check_crc` and
    /// bounding decompression by `limits.max_decompressed_size`.
    pub fn decode(&self, limits: &DecodeLimits) -> Result<RecordBatch, ProtocolError> {
        let mut budget = limits.max_decompressed_size;
        self.decode_within(limits.check_crc, &mut budget)
    }

    /// Decodes the records, charging decompressed bytes to `budget`.
    fn decode_within(
        &self,
        check_crc: bool,
        budget: &mut usize,
    ) -> Result<RecordBatch, ProtocolError> {
        let mut records = Vec::new();
        self.records_within(check_crc, budget, &mut |r, count| {
            if records.is_empty() {
                records.reserve_exact(count);
            }
            records.push(r);
            Ok(())
        })?;
        Ok(RecordBatch {
            header: self.header.clone(),
            records,
        })
    }

    /// Decodes the records one at a time into `each`, with the checks of
    /// [`decode`](Self::decode) but no vector of the batch's records, for
    /// callers that move them into a type of their own. An error from
    /// `each` stops the decoding and is returned; so is a decode error
    /// found after some records were already passed on (the caller drops
    /// those, as the whole batch failed).
    pub fn decode_each(
        &self,
        limits: &DecodeLimits,
        mut each: impl FnMut(Record) -> Result<(), ProtocolError>,
    ) -> Result<(), ProtocolError> {
        let mut budget = limits.max_decompressed_size;
        self.records_within(limits.check_crc, &mut budget, &mut |r, _| each(r))
    }

    /// Checks, decompresses within `budget`, then reads each record into
    /// `each`, with the number of records the batch can hold (its count,
    /// bounded by its bytes).
    fn records_within(
        &self,
        check_crc: bool,
        budget: &mut usize,
        each: &mut dyn FnMut(Record, usize) -> Result<(), ProtocolError>,
    ) -> Result<(), ProtocolError> {
        if check_crc {
            self.verify_crc()?;
        }
        let header = &self.header;
        let payload = self.bytes.slice(BATCH_HEADER_LEN..);
        let data = match header.compression {
            Compression::None => payload,
            codec => {
                let data = decompress(codec, &payload, *budget)?;
                *budget -= data.len();
                data
            }
        };
        let count = usize::try_from(header.record_count).map_err(|_| ProtocolError::Invalid {
            what: "record count",
            reason: format!("negative count {}", header.record_count),
        })?;
        let log_append_time =
            (header.timestamp_type == TimestampType::LogAppendTime).then_some(header.max_timestamp);
        let bound = count.min(data.len() / MIN_RECORD_LEN);
        let mut reader = RecordReader {
            data: &data,
            pos: 0,
            base_offset: header.base_offset,
            base_timestamp: header.base_timestamp,
            log_append_time,
        };
        for _ in 0..count {
            each(reader.record()?, bound)?;
        }
        if reader.pos != data.len() {
            return Err(ProtocolError::Invalid {
                what: "record batch",
                reason: format!(
                    "{} bytes left after the declared {count} records",
                    data.len() - reader.pos
                ),
            });
        }
        Ok(())
    }
}

/// Parses the fixed header of a complete batch (`bytes.len() >= 61`).
fn parse_header(bytes: &[u8]) -> Result<BatchHeader, ProtocolError> {
    let h = bytes
        .first_chunk::<BATCH_HEADER_LEN>()
        .ok_or(ProtocolError::Truncated {
            what: "record batch header",
            needed: BATCH_HEADER_LEN,
            available: bytes.len(),
        })?;
    let i16_at = |at: usize| i16::from_be_bytes([h[at], h[at + 1]]);
    let i32_at = |at: usize| i32::from_be_bytes([h[at], h[at + 1], h[at + 2], h[at + 3]]);
    let i64_at = |at: usize| (i64::from(i32_at(at)) << 32) | i64::from(i32_at(at + 4) as u32);
    let attributes = i16_at(21);
    Ok(BatchHeader {
        base_offset: i64_at(0),
        batch_length: i32_at(8),
        partition_leader_epoch: i32_at(12),
        crc: i32_at(17) as u32,
        attributes,
        compression: Compression::from_attributes(attributes)?,
        timestamp_type: if attributes & TIMESTAMP_TYPE_BIT != 0 {
            TimestampType::LogAppendTime
        } else {
            TimestampType::CreateTime
        },
        is_transactional: attributes & TRANSACTIONAL_BIT != 0,
        is_control: attributes & CONTROL_BIT != 0,
        has_delete_horizon: attributes & DELETE_HORIZON_BIT != 0,
        last_offset_delta: i32_at(23),
        base_timestamp: i64_at(27),
        max_timestamp: i64_at(35),
        producer_id: i64_at(43),
        producer_epoch: i16_at(51),
        base_sequence: i32_at(53),
        record_count: i32_at(57),
    })
}

/// Reads records from a (decompressed) records section.
struct RecordReader<'a> {
    data: &'a Bytes,
    pos: usize,
    base_offset: i64,
    base_timestamp: i64,
    log_append_time: Option<i64>,
}

impl RecordReader<'_> {
    fn record(&mut self) -> Result<Record, ProtocolError> {
        let length = self.length("record length")?;
        let start = self.pos;
        let end = self.require(start, length, "record")?;
        // Record attributes are unused in v2.
        self.require(self.pos, 1, "record attributes")?;
        self.pos += 1;
        let timestamp_delta = read_varlong(self.data, &mut self.pos, "record timestamp delta")?;
        let offset_delta = read_varint(self.data, &mut self.pos, "record offset delta")?;
        let key = self.nullable_bytes("record key")?;
        let value = self.nullable_bytes("record value")?;
        let header_count = self.length("record header count")?;
        let headers = if header_count == 0 {
            Vec::new()
        } else {
            let room = end.saturating_sub(self.pos) / MIN_HEADER_LEN;
            let mut headers = Vec::with_capacity(header_count.min(room));
            for _ in 0..header_count {
                let key_len = self.length("record header key length")?;
                let key = self.slice(key_len, "record header key")?;
                let value = self.nullable_bytes("record header value")?;
                headers.push(RecordHeader { key, value });
            }
            headers
        };
        if self.pos != end {
            return Err(ProtocolError::Invalid {
                what: "record length",
                reason: format!("declared {length} bytes, fields span {}", self.pos - start),
            });
        }
        let offset = self
            .base_offset
            .checked_add(i64::from(offset_delta))
            .ok_or_else(|| ProtocolError::Invalid {
                what: "record offset delta",
                reason: format!("{offset_delta} overflows base offset {}", self.base_offset),
            })?;
        let timestamp = self
            .log_append_time
            .unwrap_or_else(|| self.base_timestamp.wrapping_add(timestamp_delta));
        Ok(Record {
            offset,
            timestamp,
            key,
            value,
            headers,
        })
    }

    /// Reads a non-negative varint length.
    #[inline(always)]
    fn length(&mut self, what: &'static str) -> Result<usize, ProtocolError> {
        let len = read_varint(self.data, &mut self.pos, what)?;
        usize::try_from(len).map_err(|_| ProtocolError::Invalid {
            what,
            reason: format!("negative length {len}"),
        })
    }

    /// Reads a varint length (-1 = null) and the bytes it covers.
    #[inline(always)]
    fn nullable_bytes(&mut self, what: &'static str) -> Result<Option<Bytes>, ProtocolError> {
        match read_varint(self.data, &mut self.pos, what)? {
            -1 => Ok(None),
            len if len < 0 => Err(ProtocolError::Invalid {
                what,
                reason: format!("length {len} (only -1 means null)"),
            }),
            len => self.slice(len as usize, what).map(Some),
        }
    }

    /// Takes the next `len` bytes as a zero-copy slice.
    #[inline(always)]
    fn slice(&mut self, len: usize, what: &'static str) -> Result<Bytes, ProtocolError> {
        let end = self.require(self.pos, len, what)?;
        let bytes = self.data.slice(self.pos..end);
        self.pos = end;
        Ok(bytes)
    }

    /// Checks that `len` bytes exist from `start`; returns the end position.
    #[inline(always)]
    fn require(
        &self,
        start: usize,
        len: usize,
        what: &'static str,
    ) -> Result<usize, ProtocolError> {
        match start.checked_add(len) {
            Some(end) if end <= self.data.len() => Ok(end),
            _ => Err(ProtocolError::Truncated {
                what,
                needed: len,
                available: self.data.len().saturating_sub(start),
            }),
        }
    }
}
