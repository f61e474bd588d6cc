//! [`RebalanceListener`]: the application's hook into rebalances, as the
//! Java client's `ConsumerRebalanceListener`.
//!
//! The methods return boxed futures instead of being `async fn`s so the trait
//! stays object-safe (the consumer keeps an `Arc<dyn RebalanceListener>`)
//! without the `async_trait` crate. They run inside [`Consumer::poll`] (and
//! [`Consumer::close`]), on the application's task, between two polls: the
//! records of earlier polls have been handled, so a listener may commit
//! through the [`Consumer`] handle it is given.

use std::future::Future;
use std::pin::Pin;

use super::Consumer;
use crate::TopicPartition;

/// A boxed, sendable future borrowing for `'a`, what listener methods return.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Called by the consumer when its subscription's partitions change.
///
/// Every method has a default that does nothing. Implement with
/// `Box::pin(async move { ... })`:
///
/// ```no_run
/// use purekafka::consumer::{BoxFuture, Consumer, RebalanceListener};
/// use purekafka::TopicPartition;
///
/// struct CommitOnRevoke;
///
/// impl RebalanceListener for CommitOnRevoke {
///     fn on_revoked<'a>(
///         &'a self,
///         consumer: &'a Consumer,
///         partitions: &'a [TopicPartition],
///     ) -> BoxFuture<'a, ()> {
///         Box::pin(async move {
///             if let Err(e) = consumer.commit_sync().await {
///                 eprintln!("commit before losing {partitions:?} failed: {e}");
///             }
///         })
///     }
/// }
/// ```
pub trait RebalanceListener: Send + Sync + 'static {
    /// `partitions` were added to the assignment (under eager protocols, the
    /// whole new assignment; possibly empty). Their positions are already
    /// set from committed offsets (or `auto.offset.reset`), so the listener
    /// may [`seek`](Consumer::seek) them elsewhere.
    fn on_assigned<'a>(
        &'a self,
        consumer: &'a Consumer,
        partitions: &'a [TopicPartition],
    ) -> BoxFuture<'a, ()> {
        let _ = (consumer, partitions);
        Box::pin(std::future::ready(()))
    }

    /// `partitions` are being taken away; they are still assigned and their
    /// positions readable, so this is the place to commit (the consumer then
    /// commits them itself under `enable.auto.commit`). The group waits for
    /// this to return, bounded by `max.poll.interval.ms`.
    fn on_revoked<'a>(
        &'a self,
        consumer: &'a Consumer,
        partitions: &'a [TopicPartition],
    ) -> BoxFuture<'a, ()> {
        let _ = (consumer, partitions);
        Box::pin(std::future::ready(()))
    }

    /// `partitions` were lost without a hand-over (this member was fenced,
    /// its session expired, or it left after `max.poll.interval.ms`):
    /// another member may already own them, so do not commit. Unlike the
    /// Java client, the default does nothing rather than calling
    /// [`on_revoked`](Self::on_revoked).
    fn on_lost<'a>(
        &'a self,
        consumer: &'a Consumer,
        partitions: &'a [TopicPartition],
    ) -> BoxFuture<'a, ()> {
        let _ = (consumer, partitions);
        Box::pin(std::future::ready(()))
    }
}
