//! Record batches: the open one records are appended to, the sealed ones a
//! partition queues, and the encoding they share (record batch v2, with the
//! producer id, epoch and base sequence of KIP-98 written in place).

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use bytes::{Bytes, BytesMut};
use tokio::sync::oneshot;
use tokio::time::Instant;

use super::flush::FlushMark;
use crate::error::{Error, Result};
use crate::producer::idempotence::ProducerId;
use crate::producer::record::{DeliveryReceiver, RecordMetadata};
use crate::protocol::compression::Compression;
use crate::protocol::records::{set_producer_fields, Record, RecordBatchBuilder};
use crate::protocol::ProtocolError;
use crate::TopicPartition;

/// Bytes a record may take beyond its key, value and headers in a batch:
/// length, attributes, timestamp and offset deltas, and the three counts,
/// all varints at their widest.
pub(crate) const RECORD_OVERHEAD: usize = 5 + 1 + 10 + 5 + 5 + 5 + 5;
/// The batch header.
pub(crate) const BATCH_OVERHEAD: usize = 61;
/// What the producer holds per pending record besides its bytes (the
/// completion channel or callback, the timestamp), counted against
/// `buffer.memory` so the bound covers the producer's whole backlog.
pub(crate) const PENDING_STATE: usize = 96;

/// Who learns a record's outcome.
pub(crate) enum Completion {
    /// A [`DeliveryFuture`](crate::producer::DeliveryFuture).
    Channel(oneshot::Sender<Result<RecordMetadata>>),
    /// A callback run by the sink that got the response.
    Callback(Box<dyn FnOnce(Result<RecordMetadata>) + Send>),
    /// A tag reported to a receiver, with the other tags of the batch
    /// that go to the same receiver (see `Producer::send_tagged`).
    Tagged(Arc<dyn DeliveryReceiver>, u64),
}

impl Completion {
    pub(super) fn complete(self, tp: &TopicPartition, result: Result<RecordMetadata>) {
        match self {
            Completion::Channel(tx) => {
                let _ = tx.send(result);
            }
            Completion::Callback(f) => f(result),
            Completion::Tagged(to, tag) => {
                to.delivered_through(tp, &[tag], result.as_ref().map(|m| m.offset))
            }
        }
    }
}

/// One record waiting for its acknowledgement.
pub(crate) struct Pending {
    pub done: Completion,
    pub timestamp: i64,
}

/// A sealed record batch.
pub(crate) struct Batch {
    pub id: u64,
    pub data: Bytes,
    pub pending: Vec<Pending>,
    pub mem: usize,
    pub created: Instant,
    pub attempts: u32,
    /// Base sequence under the partition's producer id, once assigned.
    pub sequence: Option<i32>,
    /// The last attempt's outcome is unknown (no response): the broker may
    /// have written it.
    pub unresolved: bool,
    /// Why the last attempt failed, when it is being retried: named by the
    /// `delivery.timeout.ms` error if the batch expires while it waits.
    pub last_error: Option<Error>,
    /// The flushes waiting for this batch (usually none).
    pub flush: Vec<FlushMark>,
}

impl Batch {
    pub fn count(&self) -> i32 {
        self.pending.len() as i32
    }

    /// Writes `producer` and base sequence `seq` into the batch's header.
    pub(super) fn assign_sequence(&mut self, producer: ProducerId, seq: i32) {
        let mut data = match std::mem::take(&mut self.data).try_into_mut() {
            Ok(unique) => unique,
            Err(shared) => bytes::BytesMut::from(&shared[..]),
        };
        // The batch was built by us, so its header is well formed.
        if set_producer_fields(&mut data, producer.id, producer.epoch, seq).is_ok() {
            self.sequence = Some(seq);
        }
        self.data = data.freeze();
    }
}

/// The batch records are appended to until it is full or lingered enough.
pub(super) struct OpenBatch {
    pub builder: RecordBatchBuilder,
    pub pending: Vec<Pending>,
    pub mem: usize,
    pub created: Instant,
    /// The flushes waiting for this batch (usually none).
    pub flush: Vec<FlushMark>,
}

/// Records of a batch that could not be encoded, to fail.
pub(super) struct Unencodable {
    pub pending: Vec<Pending>,
    pub mem: usize,
    pub error: Error,
    pub flush: Vec<FlushMark>,
}

/// Opens, seals and re-encodes batches with the producer's compression;
/// numbers them; keeps the buffers of finished batches for new ones.
pub(super) struct BatchFactory {
    pub compression: Compression,
    pub level: Option<i32>,
    pub transactional: bool,
    next_id: AtomicU64,
    spares: Mutex<Spares>,
    /// Records of the recently sealed batches, a decaying maximum like
    /// `recent_len`: a new batch's list of pending records is sized for as
    /// many, instead of growing by doubling, and a kept list more than
    /// twice as long is freed.
    recent_count: AtomicUsize,
    /// Bytes of the recently sealed batches, a decaying maximum: it rises
    /// to a larger batch at once and falls by a sixteenth per sealed
    /// batch. Spares more than twice this (and twice `batch_size`) are
    /// freed as they come back, so a backlog's large buffers do not stay
    /// once batches are small again (found by the fault soak, #17).
    recent_len: AtomicUsize,
    /// `batch.size`: the capacity batches are opened with.
    batch_size: usize,
}

/// Most buffers kept for reuse (and most lists of pending records).
const SPARE_BUFFERS: usize = 16;

/// Buffers of finished batches, kept for the next open batches (as the
/// Java client's `BufferPool` keeps `batch.size` buffers). A backlogged
/// partition's batches are hundreds of KiB: an allocation that large is a
/// fresh memory mapping that the kernel faults in page by page and unmaps
/// on free, once per batch. The lists of pending records of finished
/// batches are kept the same way: a list per batch grown by doubling was
/// the producer's largest allocation per record (issue #22). At most
/// `SPARE_BUFFERS` buffers, as many lists, and `limit` bytes for both are
/// kept.
struct Spares {
    bufs: Vec<BytesMut>,
    /// Empty lists, each with room for a batch's records.
    lists: Vec<Vec<Pending>>,
    /// A list of delivery tags, reused by `finish_records`.
    tags: Vec<u64>,
    bytes: usize,
    limit: usize,
}

/// The bytes a list of pending records holds.
fn list_bytes(list: &Vec<Pending>) -> usize {
    list.capacity() * std::mem::size_of::<Pending>()
}

/// A decaying maximum: rises to `value` at once, else falls by a
/// sixteenth of what it was.
fn decay_max(peak: &AtomicUsize, value: usize) {
    let recent = peak.load(Ordering::Relaxed);
    peak.store(value.max(recent - recent / 16), Ordering::Relaxed);
}

impl BatchFactory {
    /// A factory keeping at most `spare_limit` bytes of finished batches'
    /// buffers for reuse, for batches opened with `batch_size` bytes.
    pub fn new(
        compression: Compression,
        level: Option<i32>,
        transactional: bool,
        spare_limit: usize,
        batch_size: usize,
    ) -> Self {
        BatchFactory {
            compression,
            level,
            transactional,
            next_id: AtomicU64::new(0),
            recent_count: AtomicUsize::new(0),
            recent_len: AtomicUsize::new(0),
            batch_size,
            spares: Mutex::new(Spares {
                bufs: Vec::new(),
                lists: Vec::new(),
                tags: Vec::new(),
                bytes: 0,
                limit: spare_limit,
            }),
        }
    }

    fn spares(&self) -> std::sync::MutexGuard<'_, Spares> {
        self.spares.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// An empty buffer of at least `capacity` bytes: the largest spare if
    /// it is large enough (a smaller one is freed: batches are this large
    /// now), else a new one.
    fn buffer(&self, capacity: usize) -> BytesMut {
        let mut spares = self.spares();
        let largest = (0..spares.bufs.len()).max_by_key(|&i| spares.bufs[i].capacity());
        if let Some(i) = largest {
            let buf = spares.bufs.swap_remove(i);
            spares.bytes -= buf.capacity();
            if buf.capacity() >= capacity {
                return buf;
            }
        }
        drop(spares);
        BytesMut::with_capacity(capacity)
    }

    /// Keeps a finished batch's buffer for a later batch, when nothing else
    /// holds it and the spares have room.
    pub fn recycle(&self, data: Bytes) {
        if let Ok(buf) = data.try_into_mut() {
            self.keep(buf);
        }
    }

    fn keep(&self, mut buf: BytesMut) {
        buf.clear();
        let cap = buf.capacity();
        let wanted = self.recent_len.load(Ordering::Relaxed).max(self.batch_size);
        if cap > wanted.saturating_mul(2) {
            return;
        }
        let mut spares = self.spares();
        if spares.bufs.len() < SPARE_BUFFERS && spares.bytes + cap <= spares.limit {
            spares.bytes += cap;
            spares.bufs.push(buf);
        }
    }

    /// An empty list for a new batch's pending records, with room for
    /// as many as recent batches held: the largest spare list, else a new
    /// one.
    fn list(&self) -> Vec<Pending> {
        let wanted = self.recent_count.load(Ordering::Relaxed);
        let mut spares = self.spares();
        let largest = (0..spares.lists.len()).max_by_key(|&i| spares.lists[i].capacity());
        let mut list = match largest {
            Some(i) => {
                let list = spares.lists.swap_remove(i);
                spares.bytes -= list_bytes(&list);
                list
            }
            None => Vec::new(),
        };
        drop(spares);
        list.reserve_exact(wanted);
        list
    }

    /// Keeps a finished batch's emptied list of pending records for a
    /// later batch, unless it has room for more than twice the recent
    /// batches' records or the spares are full.
    pub fn keep_list(&self, mut list: Vec<Pending>) {
        list.clear();
        let wanted = self.recent_count.load(Ordering::Relaxed).max(1);
        if list.capacity() == 0 || list.capacity() > wanted.saturating_mul(2) {
            return;
        }
        let bytes = list_bytes(&list);
        let mut spares = self.spares();
        if spares.lists.len() < SPARE_BUFFERS && spares.bytes + bytes <= spares.limit {
            spares.bytes += bytes;
            spares.lists.push(list);
        }
    }

    /// The kept list of delivery tags (empty), or a new one.
    pub fn tags(&self) -> Vec<u64> {
        std::mem::take(&mut self.spares().tags)
    }

    /// Keeps `tags` (cleared) for the next batch's delivery reports,
    /// unless it has room for more than twice the recent batches' records.
    pub fn keep_tags(&self, mut tags: Vec<u64>) {
        tags.clear();
        let wanted = self.recent_count.load(Ordering::Relaxed).max(1);
        if tags.capacity() <= wanted.saturating_mul(2) {
            let mut spares = self.spares();
            if tags.capacity() > spares.tags.capacity() {
                spares.tags = tags;
            }
        }
    }

    pub fn next_id(&self) -> u64 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }

    fn builder(&self, capacity: usize) -> std::result::Result<RecordBatchBuilder, ProtocolError> {
        Ok(RecordBatchBuilder::with_buffer(self.buffer(capacity))
            .compression(self.compression, self.level)?
            .transactional(self.transactional))
    }

    /// A new, empty open batch created at `now`, its buffer sized for
    /// `capacity` bytes (it grows past them if the batch does).
    pub fn open(&self, now: Instant, capacity: usize) -> Result<OpenBatch> {
        let builder = self
            .builder(capacity)
            .map_err(|e| Error::config("compression.type", e.to_string()))?;
        Ok(OpenBatch {
            builder,
            pending: self.list(),
            mem: 0,
            created: now,
            flush: Vec::new(),
        })
    }

    /// Closes an open batch (compressing it).
    pub fn seal(
        &self,
        open: OpenBatch,
        tp: &TopicPartition,
    ) -> std::result::Result<Batch, Box<Unencodable>> {
        decay_max(&self.recent_count, open.pending.len());
        match open.builder.finish_with_spare() {
            Ok((data, spare)) => {
                // The uncompressed size: the spare holds the input of a
                // compressed batch.
                let written = spare.as_ref().map_or(data.len(), BytesMut::len);
                decay_max(&self.recent_len, written);
                if let Some(spare) = spare {
                    // Compressed into a new buffer: the input one is free.
                    self.keep(spare);
                }
                Ok(Batch {
                    id: self.next_id(),
                    data: data.freeze(),
                    pending: open.pending,
                    mem: open.mem,
                    created: open.created,
                    attempts: 0,
                    sequence: None,
                    unresolved: false,
                    last_error: None,
                    flush: open.flush,
                })
            }
            // Only an impossible size overflow gets here; the records fail
            // rather than get lost silently.
            Err(e) => Err(Box::new(Unencodable {
                pending: open.pending,
                mem: open.mem,
                flush: open.flush,
                error: Error::Serialization {
                    topic: tp.topic.to_string(),
                    part: "record batch",
                    reason: e.to_string(),
                },
            })),
        }
    }

    /// Encodes `records` as one batch (for a split).
    pub fn encode(&self, records: &[Record]) -> std::result::Result<Bytes, ProtocolError> {
        let mut builder = self.builder(0)?;
        for r in records {
            builder.append(
                r.timestamp,
                r.key.as_deref(),
                r.value.as_deref(),
                &r.headers,
            )?;
        }
        Ok(builder.finish()?.freeze())
    }
}

/// Sequence numbers wrap from `i32::MAX` to 0, as in the Java client.
pub(crate) fn add_seq(seq: i32, n: i32) -> i32 {
    ((seq as i64 + n as i64) % (1i64 << 31)) as i32
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A batch of one 100-byte record, opened with `capacity` bytes.
    fn sealed(factory: &BatchFactory, capacity: usize) -> Batch {
        let mut open = factory.open(Instant::now(), capacity).expect("open");
        open.builder
            .append(0, None, Some(&[7u8; 100]), &[])
            .expect("append");
        let Ok(batch) = factory.seal(open, &TopicPartition::new("t", 0)) else {
            panic!("sealing a one-record batch failed");
        };
        batch
    }

    #[test]
    fn a_finished_batch_buffer_becomes_the_next_batch_buffer() {
        let factory = BatchFactory::new(Compression::None, None, false, 1 << 20, 64 * 1024);
        let first = sealed(&factory, 64 * 1024);
        let at = first.data.as_ptr();
        factory.recycle(first.data);
        assert_eq!(factory.spares().bufs.len(), 1);
        assert!(factory.spares().bytes >= 64 * 1024);
        let second = sealed(&factory, 32 * 1024);
        assert_eq!(second.data.as_ptr(), at, "the spare buffer was reused");
        assert_eq!(factory.spares().bufs.len(), 0);
        assert_eq!(factory.spares().bytes, 0);
    }

    #[test]
    fn buffers_still_held_over_the_limit_or_too_small_are_not_reused() {
        let factory = BatchFactory::new(Compression::None, None, false, 100 * 1024, 256 * 1024);
        let a = sealed(&factory, 64 * 1024);
        let b = sealed(&factory, 64 * 1024);
        let held = a.data.clone();
        factory.recycle(a.data);
        assert_eq!(factory.spares().bufs.len(), 0, "a request still holds it");
        factory.recycle(held);
        factory.recycle(b.data);
        assert_eq!(factory.spares().bufs.len(), 1, "two would pass 100 KiB");
        let large = sealed(&factory, 256 * 1024);
        assert_eq!(factory.spares().bufs.len(), 0, "a too small spare is freed");
        factory.recycle(large.data);
        assert_eq!(factory.spares().bufs.len(), 0, "256 KiB passes the limit");
    }

    #[test]
    fn spares_sized_for_a_backlog_are_freed_once_batches_are_small_again() {
        let factory = BatchFactory::new(Compression::None, None, false, 4 << 20, 16 * 1024);
        // A backlog: batches opened with 16 KiB grew to 200 KiB.
        let grown: Vec<Batch> = (0..4)
            .map(|_| {
                let mut open = factory.open(Instant::now(), 16 * 1024).expect("open");
                for _ in 0..200 {
                    open.builder
                        .append(0, None, Some(&[7u8; 1024]), &[])
                        .expect("append");
                }
                let Ok(batch) = factory.seal(open, &TopicPartition::new("t", 0)) else {
                    panic!("sealing failed");
                };
                batch
            })
            .collect();
        for b in grown {
            factory.recycle(b.data);
        }
        assert_eq!(
            factory.spares().bufs.len(),
            4,
            "kept while batches are that large"
        );
        // Small batches again: each takes the largest spare and gives it
        // back.
        for _ in 0..200 {
            let b = sealed(&factory, 16 * 1024);
            factory.recycle(b.data);
        }
        let largest = factory.spares().bufs.iter().map(BytesMut::capacity).max();
        assert!(
            largest.is_some_and(|c| c < 64 * 1024),
            "a backlog's buffer is still kept: {largest:?} bytes"
        );
    }

    /// A sealed batch of `n` records (pending entries with no-op
    /// callbacks).
    fn sealed_with(factory: &BatchFactory, n: usize) -> Batch {
        let mut open = factory.open(Instant::now(), 1024).expect("open");
        for _ in 0..n {
            open.builder
                .append(0, None, Some(&[7u8; 10]), &[])
                .expect("append");
            open.pending.push(Pending {
                done: Completion::Callback(Box::new(|_| {})),
                timestamp: 0,
            });
        }
        let Ok(batch) = factory.seal(open, &TopicPartition::new("t", 0)) else {
            panic!("sealing failed");
        };
        batch
    }

    #[test]
    fn a_finished_batch_list_of_pending_records_becomes_the_next_batch_list() {
        let factory = BatchFactory::new(Compression::None, None, false, 1 << 20, 16 * 1024);
        let first = sealed_with(&factory, 100);
        let at = first.pending.as_ptr();
        factory.keep_list(first.pending);
        assert_eq!(factory.spares().lists.len(), 1);
        let open = factory.open(Instant::now(), 1024).expect("open");
        assert_eq!(open.pending.as_ptr(), at, "the spare list was reused");
        assert!(open.pending.is_empty() && open.pending.capacity() >= 100);
        assert_eq!(factory.spares().lists.len(), 0);
        assert_eq!(factory.spares().bytes, 0);
    }

    #[test]
    fn lists_sized_for_a_backlog_are_freed_once_batches_are_small_again() {
        let factory = BatchFactory::new(Compression::None, None, false, 4 << 20, 16 * 1024);
        // A backlog: batches of 5,000 records.
        let large: Vec<Batch> = (0..4).map(|_| sealed_with(&factory, 5_000)).collect();
        for b in large {
            factory.keep_list(b.pending);
        }
        assert_eq!(
            factory.spares().lists.len(),
            4,
            "kept while batches are large"
        );
        // Small batches again: each takes the largest list and gives it back.
        for _ in 0..200 {
            let b = sealed_with(&factory, 10);
            factory.keep_list(b.pending);
        }
        let largest = factory.spares().lists.iter().map(Vec::capacity).max();
        assert!(
            largest.is_some_and(|c| c <= 100),
            "a backlog's list is still kept: {largest:?} records"
        );
        // The spares' byte limit holds lists too.
        let factory = BatchFactory::new(Compression::None, None, false, 64 * 1024, 16 * 1024);
        let lists: Vec<Batch> = (0..4).map(|_| sealed_with(&factory, 1_000)).collect();
        for b in lists {
            factory.keep_list(b.pending);
        }
        assert!(factory.spares().bytes <= 64 * 1024);
        assert!(factory.spares().lists.len() < 4);
    }

    #[test]
    fn a_compressed_batch_gives_back_its_input_buffer() {
        let factory = BatchFactory::new(Compression::Lz4, None, false, 1 << 20, 64 * 1024);
        let batch = sealed(&factory, 64 * 1024);
        assert_eq!(factory.spares().bufs.len(), 1);
        assert!(factory.spares().bytes >= 64 * 1024);
        assert!(batch.data.len() < 1024);
    }
}
