//! Tagged sends: outcomes reported to a [`DeliveryReceiver`] a batch at a
//! time, for callers with many records in flight (the streams runtime).
//! Besides the async [`Producer::send_tagged`], the crate's own callers
//! get its two halves: an append that never waits, and the wait, so that
//! a send that need not wait (nearly all) keeps no future at all.

use std::sync::Arc;

use super::accumulator::Completion;
use super::{DeliveryReceiver, Producer, ProducerRecord};
use crate::error::Result;

/// What an append that may not wait did.
pub(crate) enum Enqueued {
    /// Appended; whether a sink should run now (the caller yields, as
    /// `send` does, so that it may).
    Appended { wake: bool },
    /// The topic's route is not cached or buffer memory is short: finish
    /// with [`Producer::send_waiting`].
    MustWait(Waiting),
}

/// A send that must wait for metadata or buffer memory: the record and
/// its completion.
pub(crate) struct Waiting(pub(super) ProducerRecord, pub(super) Completion);

impl Producer {
    /// Like [`send`](Self::send), but the outcome goes to `receiver` with
    /// `tag`, batched: one [`DeliveryReceiver::delivered`] call carries
    /// the tags of a whole batch, so a caller with many records in flight
    /// pays no future, wake-up or allocation per record. Awaiting this
    /// waits for buffer memory and metadata, as `send` does; when it
    /// returns an error the receiver is not called for this record.
    pub async fn send_tagged(
        &self,
        record: ProducerRecord,
        receiver: &Arc<dyn DeliveryReceiver>,
        tag: u64,
    ) -> Result<()> {
        self.enqueue(record, Completion::Tagged(receiver.clone(), tag))
            .await
    }

    /// [`send_tagged`](Self::send_tagged) up to where it would wait: the
    /// record is appended, or given back to finish with
    /// [`send_waiting`](Self::send_waiting). On an error the receiver is
    /// not called for this record.
    pub(crate) fn try_send_tagged(
        &self,
        record: ProducerRecord,
        receiver: &Arc<dyn DeliveryReceiver>,
        tag: u64,
    ) -> Result<Enqueued> {
        self.try_enqueue(record, Completion::Tagged(receiver.clone(), tag))
    }

    /// Finishes a send [`try_send_tagged`](Self::try_send_tagged) could
    /// not: waits (up to `max.block.ms`) for metadata and buffer memory,
    /// appends, and yields if a sink should run.
    pub(crate) async fn send_waiting(&self, waiting: Waiting) -> Result<()> {
        let Waiting(record, done) = waiting;
        if self.append_waiting(record, done).await? {
            tokio::task::yield_now().await;
        }
        Ok(())
    }
}
