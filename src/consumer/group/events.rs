//! What membership tells the consumer: rebalance events and the ack a
//! revocation waits for. The values it hands back (committed offsets, the
//! group metadata a transactional producer needs) live in the neutral
//! `group_metadata` module, so the producer and admin need no consumer.

use std::time::Duration;

use tokio::sync::{mpsc, oneshot};

use crate::error::Error;
use crate::TopicPartition;

pub use crate::group_metadata::{ConsumerGroupMetadata, OffsetAndMetadata};

/// A change of this member's partitions, in the order the consumer must
/// apply them.
#[derive(Debug)]
#[non_exhaustive]
pub enum GroupEvent {
    /// These partitions are now ours (added to what we already own; under
    /// eager protocols, the whole assignment). Sent after every completed
    /// rebalance, possibly empty.
    Assigned(Vec<TopicPartition>),
    /// These partitions are being taken away. Membership waits for the ack
    /// (or for it to be dropped), bounded by the rebalance timeout, so the
    /// consumer can stop fetching and commit their offsets first.
    Revoked(Vec<TopicPartition>, RevokeAck),
    /// These partitions were lost without a clean hand-over (the member was
    /// fenced, expired or left after `max.poll.interval.ms`): another member
    /// may already own them, so do not commit their offsets.
    Lost(Vec<TopicPartition>),
    /// Membership stopped for good (e.g. FENCED_INSTANCE_ID, group
    /// authorization failure, unsupported assignor).
    Fatal(Error),
}

/// Acknowledges a [`GroupEvent::Revoked`]. Dropping it acknowledges too.
#[derive(Debug)]
pub struct RevokeAck(Option<oneshot::Sender<()>>);

impl RevokeAck {
    pub(crate) fn new() -> (RevokeAck, oneshot::Receiver<()>) {
        let (tx, rx) = oneshot::channel();
        (RevokeAck(Some(tx)), rx)
    }

    /// The consumer is done with the revoked partitions.
    pub fn ack(mut self) {
        if let Some(tx) = self.0.take() {
            let _ = tx.send(());
        }
    }
}

/// The receiving end of membership events.
#[derive(Debug)]
pub struct GroupEvents {
    pub(crate) rx: mpsc::Receiver<GroupEvent>,
}

impl GroupEvents {
    /// The next event; `None` once membership has ended.
    pub async fn recv(&mut self) -> Option<GroupEvent> {
        self.rx.recv().await
    }

    /// The next event if one is ready.
    pub fn try_recv(&mut self) -> Option<GroupEvent> {
        self.rx.try_recv().ok()
    }

    /// The next event within `timeout`; `None` on timeout or end.
    pub async fn recv_timeout(&mut self, timeout: Duration) -> Option<GroupEvent> {
        tokio::time::timeout(timeout, self.rx.recv())
            .await
            .ok()
            .flatten()
    }
}
