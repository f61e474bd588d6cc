//! The records of the parallel retry lane: the headers a failed record
//! carries to the retry topic (attempt count, due time, origin, error), and
//! the dead-letter record written after the last attempt, with KIP-1034-style
//! headers
//! (<https://cwiki.apache.org/confluence/display/KAFKA/KIP-1034%3A+Dead+letter+queue+in+Kafka+Streams>).
//! Pure conversions between records; the lane worker that moves them lives
//! in the runtime.

use bytes::Bytes;

use super::error::ProcessingError;
use super::RetryLane;
use crate::consumer::ConsumerRecord;
use crate::producer::ProducerRecord;
use crate::protocol::records::RecordHeader;
use crate::TopicPartition;

/// Header: attempts made so far (decimal).
pub const ATTEMPT: &str = "purekafka.retry.attempt";
/// Header: when the next attempt is due (ms since the epoch, decimal).
pub const DUE: &str = "purekafka.retry.due";
/// Header: the input topic.
pub const ORIGIN_TOPIC: &str = "purekafka.origin.topic";
/// Header: the input partition.
pub const ORIGIN_PARTITION: &str = "purekafka.origin.partition";
/// Header: the input offset.
pub const ORIGIN_OFFSET: &str = "purekafka.origin.offset";
/// Header: the last error.
pub const ERROR: &str = "purekafka.error";
/// Dead-letter headers in the style of KIP-1034.
pub const DLQ_TOPIC: &str = "__streams.errors.topic";
/// KIP-1034: input partition.
pub const DLQ_PARTITION: &str = "__streams.errors.partition";
/// KIP-1034: input offset.
pub const DLQ_OFFSET: &str = "__streams.errors.offset";
/// KIP-1034: the exception message.
pub const DLQ_MESSAGE: &str = "__streams.errors.message";

fn header(key: &str, value: impl ToString) -> RecordHeader {
    RecordHeader::new(
        Bytes::copy_from_slice(key.as_bytes()),
        Some(Bytes::from(value.to_string())),
    )
}

/// The last value of header `key`, if it is UTF-8.
pub(crate) fn header_value(r: &ConsumerRecord, key: &str) -> Option<String> {
    let h = r
        .headers
        .iter()
        .rev()
        .find(|h| &h.key[..] == key.as_bytes())?;
    String::from_utf8(h.value.as_ref()?.to_vec()).ok()
}

fn user_headers(headers: &[RecordHeader]) -> Vec<RecordHeader> {
    headers
        .iter()
        .filter(|h| !h.key.starts_with(b"purekafka."))
        .cloned()
        .collect()
}

/// The retry-topic record for `record` (as read from its origin) after
/// `attempts` failed attempts, due at `due_ms`.
pub(crate) fn to_retry_topic(
    lane: &RetryLane,
    record: &ConsumerRecord,
    attempts: u32,
    due_ms: i64,
    error: &ProcessingError,
) -> ProducerRecord {
    let mut p = ProducerRecord::new(&lane.retry_topic).timestamp(record.timestamp);
    p.key = record.key.clone();
    p.value = record.value.clone();
    p.headers = user_headers(&record.headers);
    p.headers.extend([
        header(ATTEMPT, attempts),
        header(DUE, due_ms),
        header(ORIGIN_TOPIC, record.topic()),
        header(ORIGIN_PARTITION, record.partition.partition),
        header(ORIGIN_OFFSET, record.offset),
        header(ERROR, error),
    ]);
    p
}

/// The input record a retry-topic record stands for, and its attempts.
pub(crate) fn origin(r: &ConsumerRecord) -> Option<(ConsumerRecord, u32)> {
    let topic = header_value(r, ORIGIN_TOPIC)?;
    let partition = header_value(r, ORIGIN_PARTITION)?.parse().ok()?;
    let offset = header_value(r, ORIGIN_OFFSET)?.parse().ok()?;
    let attempts = header_value(r, ATTEMPT)?.parse().ok()?;
    let mut input = r.clone();
    input.partition = TopicPartition::new(topic, partition);
    input.offset = offset;
    input.headers = user_headers(&r.headers);
    Some((input, attempts))
}

/// The dead-letter record for `input` after `attempts` failed attempts.
pub(crate) fn dead_letter(
    lane: &RetryLane,
    input: &ConsumerRecord,
    attempts: u32,
    e: &str,
) -> ProducerRecord {
    let mut p = ProducerRecord::new(&lane.dead_letter_topic).timestamp(input.timestamp);
    p.key = input.key.clone();
    p.value = input.value.clone();
    p.headers = input.headers.clone();
    p.headers.extend([
        header(DLQ_TOPIC, input.topic()),
        header(DLQ_PARTITION, input.partition.partition),
        header(DLQ_OFFSET, input.offset),
        header(DLQ_MESSAGE, e),
        header(ORIGIN_TOPIC, input.topic()),
        header(ORIGIN_PARTITION, input.partition.partition),
        header(ORIGIN_OFFSET, input.offset),
        header(ATTEMPT, attempts),
        header(ERROR, e),
    ]);
    p
}
