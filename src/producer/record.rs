//! What the API takes and gives per record: [`ProducerRecord`], its
//! [`RecordMetadata`] once written, and the [`DeliveryFuture`] between.

use std::borrow::Cow;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use tokio::sync::oneshot;

use super::accumulator::RECORD_OVERHEAD;
use super::serializer::Serializer;
use crate::error::{Error, Result};
use crate::protocol::records::RecordHeader;
use crate::TopicPartition;

/// A record to send.
#[derive(Debug, Clone, Default)]
pub struct ProducerRecord {
    /// Topic. Shared, so a sender that keeps the name as an `Arc<str>`
    /// and passes a clone pays no allocation per record.
    pub topic: Arc<str>,
    /// Partition; `None` lets the partitioner choose.
    pub partition: Option<i32>,
    /// Key; `None` is a null key.
    pub key: Option<Bytes>,
    /// Value; `None` is a null value (a tombstone on compacted topics).
    pub value: Option<Bytes>,
    /// Headers, in order.
    pub headers: Vec<RecordHeader>,
    /// Create time in ms since the epoch; `None` means now.
    pub timestamp: Option<i64>,
}

impl ProducerRecord {
    /// A record for `topic` with no key and no value yet. `topic` is a
    /// `&str`, `String`, `&String` or (without copying it) an `Arc<str>`.
    pub fn new(topic: impl IntoTopic) -> ProducerRecord {
        ProducerRecord {
            topic: topic.into_topic(),
            ..ProducerRecord::default()
        }
    }

    /// Sets the key.
    pub fn key(mut self, key: impl Into<Bytes>) -> Self {
        self.key = Some(key.into());
        self
    }

    /// Sets the value.
    pub fn value(mut self, value: impl Into<Bytes>) -> Self {
        self.value = Some(value.into());
        self
    }

    /// Serializes `key` with `serializer`.
    pub fn key_with<T: ?Sized>(mut self, serializer: &impl Serializer<T>, key: &T) -> Result<Self> {
        self.key = Some(serializer.serialize(&self.topic, key)?);
        Ok(self)
    }

    /// Serializes `value` with `serializer`.
    pub fn value_with<T: ?Sized>(
        mut self,
        serializer: &impl Serializer<T>,
        value: &T,
    ) -> Result<Self> {
        self.value = Some(serializer.serialize(&self.topic, value)?);
        Ok(self)
    }

    /// Sends to this partition, bypassing the partitioner.
    pub fn partition(mut self, partition: i32) -> Self {
        self.partition = Some(partition);
        self
    }

    /// Adds a header.
    pub fn header(mut self, key: impl Into<Bytes>, value: Option<Bytes>) -> Self {
        self.headers.push(RecordHeader::new(key, value));
        self
    }

    /// Sets the create time (ms since the epoch).
    pub fn timestamp(mut self, ms: i64) -> Self {
        self.timestamp = Some(ms);
        self
    }

    /// Upper bound of the record's bytes inside a batch.
    pub(crate) fn size_estimate(&self) -> usize {
        let headers: usize = self
            .headers
            .iter()
            .map(|h| h.key.len() + h.value.as_ref().map_or(0, Bytes::len) + 10)
            .sum();
        RECORD_OVERHEAD
            + self.key.as_ref().map_or(0, Bytes::len)
            + self.value.as_ref().map_or(0, Bytes::len)
            + headers
    }
}

/// A topic name as [`ProducerRecord::new`] takes it. An `Arc<str>` (or a
/// reference to one) is shared as it is; the other forms are copied once.
pub trait IntoTopic {
    /// The name as the record holds it.
    fn into_topic(self) -> Arc<str>;
}

impl IntoTopic for Arc<str> {
    fn into_topic(self) -> Arc<str> {
        self
    }
}

impl IntoTopic for &Arc<str> {
    fn into_topic(self) -> Arc<str> {
        self.clone()
    }
}

impl IntoTopic for &str {
    fn into_topic(self) -> Arc<str> {
        shared_name(self)
    }
}

impl IntoTopic for String {
    fn into_topic(self) -> Arc<str> {
        shared_name(&self)
    }
}

impl IntoTopic for &String {
    fn into_topic(self) -> Arc<str> {
        shared_name(self)
    }
}

impl IntoTopic for Box<str> {
    fn into_topic(self) -> Arc<str> {
        Arc::from(self)
    }
}

impl IntoTopic for Cow<'_, str> {
    fn into_topic(self) -> Arc<str> {
        Arc::from(self)
    }
}

/// Where a record landed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordMetadata {
    /// Topic and partition.
    pub partition: TopicPartition,
    /// Offset, or -1 when unknown (`acks=0`, or a retry the broker
    /// recognised as a duplicate).
    pub offset: i64,
    /// The record's create time, or the broker's log-append time when the
    /// topic uses it.
    pub timestamp: i64,
}

/// Resolves when the broker acknowledged the record (or it failed).
///
/// Dropping it does not cancel the send.
#[must_use = "the record is sent either way; await this to learn its offset or error"]
pub struct DeliveryFuture {
    pub(super) rx: oneshot::Receiver<Result<RecordMetadata>>,
}

impl Future for DeliveryFuture {
    type Output = Result<RecordMetadata>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        Pin::new(&mut self.rx)
            .poll(cx)
            .map(|r| r.unwrap_or(Err(Error::Closed)))
    }
}

/// Learns the outcomes of records sent with
/// [`Producer::send_tagged`](super::Producer::send_tagged), a run of
/// records at a time: one call per batch (or per run of a batch's records
/// sent to the same receiver) instead of a future or a callback per record.
pub trait DeliveryReceiver: Send + Sync {
    /// The records sent with `tags` to `partition` were acknowledged
    /// (`Ok`), or failed with the error. A tag appears once per record sent
    /// with it. Runs on the task that handled the broker's response (or
    /// on the caller of the producer call that failed the records), so it
    /// must be short and must not block.
    fn delivered(&self, partition: &TopicPartition, tags: &[u64], result: Result<(), &Error>);

    /// Like [`delivered`](Self::delivered), with the offset the broker
    /// gave the run's last record (`-1` when unknown: `acks=0`, or a
    /// retry the broker recognised as a duplicate); the offsets of a run
    /// need not be contiguous. The producer calls this one; by default it
    /// calls `delivered`, so a receiver that wants offsets overrides it.
    fn delivered_through(
        &self,
        partition: &TopicPartition,
        tags: &[u64],
        result: Result<i64, &Error>,
    ) {
        self.delivered(partition, tags, result.map(|_| ()))
    }
}

thread_local! {
    /// The topic name this thread's last record was built with, shared by
    /// the next record naming the same topic: a loop sending to one topic
    /// allocates its name once, not once per record (issue #21).
    static LAST_TOPIC: std::cell::RefCell<Option<Arc<str>>> = const { std::cell::RefCell::new(None) };
}

/// `name` as an `Arc<str>`, the one made for the previous record when it
/// named the same topic on this thread.
fn shared_name(name: &str) -> Arc<str> {
    LAST_TOPIC
        .try_with(|last| {
            let mut last = last.borrow_mut();
            match &*last {
                Some(topic) if **topic == *name => topic.clone(),
                _ => {
                    let topic: Arc<str> = Arc::from(name);
                    *last = Some(topic.clone());
                    topic
                }
            }
        })
        .unwrap_or_else(|_| Arc::from(name))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every form a Java-minded caller passes compiles and names the same
    /// topic; an `Arc<str>` is shared, not copied.
    #[test]
    fn topic_forms() {
        let owned = String::from("orders");
        let shared: Arc<str> = Arc::from("orders");
        let records = [
            ProducerRecord::new("orders"),
            ProducerRecord::new(&owned),
            ProducerRecord::new(owned.clone()),
            ProducerRecord::new(Cow::Borrowed("orders")),
            ProducerRecord::new(Box::<str>::from("orders")),
            ProducerRecord::new(&shared),
            ProducerRecord::new(shared.clone()),
        ];
        assert!(records.iter().all(|r| &*r.topic == "orders"));
        assert!(Arc::ptr_eq(&records[5].topic, &shared));
        assert!(Arc::ptr_eq(&records[6].topic, &shared));
        assert!(!Arc::ptr_eq(&records[0].topic, &shared));
    }

    /// Records built one after the other for one topic share its name; a
    /// record for another topic gets its own.
    #[test]
    fn records_for_one_topic_share_its_name() {
        let a = ProducerRecord::new("payments");
        let b = ProducerRecord::new(String::from("payments"));
        assert!(Arc::ptr_eq(&a.topic, &b.topic));
        let other = ProducerRecord::new("refunds");
        assert_eq!(&*other.topic, "refunds");
        let name = String::from("payments");
        let c = ProducerRecord::new(&name);
        assert_eq!(*c.topic, *name);
        assert!(
            !Arc::ptr_eq(&a.topic, &c.topic),
            "the last name was another topic's"
        );
    }
}
