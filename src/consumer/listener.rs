//! [`RebalanceListener`]: the application's hook into rebalances, as the
//! Java client's `ConsumerRebalanceListener`.
//!
//! The trait is written with [`async_trait`], so implementations are plain
//! `async fn`s and the trait stays object-safe (the consumer keeps an
//! `Arc<dyn RebalanceListener>`). That costs one box per call, and calls are
//! rare (one per rebalance), so it is irrelevant next to the rebalance itself.
//! The methods run inside [`Consumer::poll`] (and [`Consumer::close`]), on the
//! application's task, between two polls: the records of earlier polls have
//! been handled, so a listener may commit through the [`Consumer`] handle it
//! is given.

use std::future::Future;
use std::pin::Pin;

use async_trait::async_trait;

use super::Consumer;
use crate::TopicPartition;

/// A boxed, sendable future borrowing for `'a`: the shape of the streams
/// runtime's stage and sink functions.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Called by the consumer when its subscription's partitions change.
///
/// Every method has a default that does nothing, so a listener implements
/// only what it needs. Implementations use `#[async_trait]`:
///
/// ```no_run
/// use purekafka::consumer::{Consumer, RebalanceListener};
/// use purekafka::TopicPartition;
///
/// struct CommitOnRevoke;
///
/// #[purekafka::async_trait]
/// impl RebalanceListener for CommitOnRevoke {
///     async fn on_revoked(&self, consumer: &Consumer, partitions: &[TopicPartition]) {
///         if let Err(e) = consumer.commit_sync().await {
///             eprintln!("commit before losing {partitions:?} failed: {e}");
///         }
///     }
/// }
/// ```
#[async_trait]
pub trait RebalanceListener: Send + Sync + 'static {
    /// `partitions` were added to the assignment (under eager protocols, the
    /// whole new assignment; possibly empty). Their positions are already
    /// set from committed offsets (or `auto.offset.reset`), so the listener
    /// may [`seek`](Consumer::seek) them elsewhere.
    ///
    /// Written as `async fn on_assigned(&self, consumer: &Consumer, partitions: &[TopicPartition])`
    /// (rustdoc shows the boxed form `#[async_trait]` expands it to).
    async fn on_assigned(&self, consumer: &Consumer, partitions: &[TopicPartition]) {
        let _ = (consumer, partitions);
    }

    /// `partitions` are being taken away; they are still assigned and their
    /// positions readable, so this is the place to commit (the consumer then
    /// commits them itself under `enable.auto.commit`). The group waits for
    /// this to return, bounded by `max.poll.interval.ms`.
    ///
    /// Written as `async fn on_revoked(&self, consumer: &Consumer, partitions: &[TopicPartition])`
    /// (rustdoc shows the boxed form `#[async_trait]` expands it to).
    async fn on_revoked(&self, consumer: &Consumer, partitions: &[TopicPartition]) {
        let _ = (consumer, partitions);
    }

    /// `partitions` were lost without a hand-over (this member was fenced,
    /// its session expired, or it left after `max.poll.interval.ms`):
    /// another member may already own them, so do not commit. Unlike the
    /// Java client, the default does nothing rather than calling
    /// [`on_revoked`](Self::on_revoked).
    ///
    /// Written as `async fn on_lost(&self, consumer: &Consumer, partitions: &[TopicPartition])`
    /// (rustdoc shows the boxed form `#[async_trait]` expands it to).
    async fn on_lost(&self, consumer: &Consumer, partitions: &[TopicPartition]) {
        let _ = (consumer, partitions);
    }
}
