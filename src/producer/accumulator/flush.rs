//! What a flush waits for: the batches that held records when it was
//! called, and no later ones, as the Java client's `flush()` waits for the
//! accumulator's incomplete batches as of the call
//! (`RecordAccumulator.awaitFlushCompletion`).
//!
//! A flush marks each such batch (open or sealed, in every partition) with
//! a [`FlushMark`]; a batch's marks are dropped once its records are
//! completed, and the last mark dropped wakes the flush. Records appended
//! later to a marked open batch share its mark (the batch is sent at once,
//! as flushing makes open batches ready); records of batches opened after
//! the call are not waited for, so a sender that never stops cannot keep a
//! flush from returning. The send path pays nothing: a batch carries an
//! empty list unless a flush marked it.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::sync::Notify;

/// One flush's count of marked batches not yet completed.
pub(crate) struct FlushWait {
    remaining: AtomicUsize,
    done: Notify,
}

impl FlushWait {
    /// A wait and the flush's own mark, held while it marks batches so
    /// that it cannot end before the marking does.
    pub fn start() -> (Arc<FlushWait>, FlushMark) {
        let wait = Arc::new(FlushWait {
            remaining: AtomicUsize::new(0),
            done: Notify::new(),
        });
        let own = FlushMark::new(&wait);
        (wait, own)
    }

    /// Waits until every mark is dropped.
    pub async fn wait(&self) {
        // `notify_one` keeps a permit, so a drop between the check and the
        // wait is not missed.
        while self.remaining.load(Ordering::Acquire) > 0 {
            self.done.notified().await;
        }
    }

    #[cfg(test)]
    pub fn remaining(&self) -> usize {
        self.remaining.load(Ordering::Acquire)
    }
}

/// A batch's share of a flush: dropped once the batch's records are
/// completed (acknowledged or failed), or with the batch.
pub(crate) struct FlushMark(Arc<FlushWait>);

impl FlushMark {
    pub fn new(wait: &Arc<FlushWait>) -> FlushMark {
        wait.remaining.fetch_add(1, Ordering::AcqRel);
        FlushMark(wait.clone())
    }
}

impl Clone for FlushMark {
    /// A split batch's halves each hold the marks of the batch.
    fn clone(&self) -> FlushMark {
        FlushMark::new(&self.0)
    }
}

impl Drop for FlushMark {
    fn drop(&mut self) {
        if self.0.remaining.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.done.notify_one();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_flush_ends_when_its_last_mark_is_dropped() {
        let (wait, own) = FlushWait::start();
        let a = FlushMark::new(&wait);
        let b = a.clone();
        drop(own);
        assert_eq!(wait.remaining(), 2);
        let waiter = tokio::spawn({
            let wait = wait.clone();
            async move { wait.wait().await }
        });
        drop(a);
        tokio::task::yield_now().await;
        assert!(
            !waiter.is_finished(),
            "one marked batch is still incomplete"
        );
        drop(b);
        tokio::time::timeout(std::time::Duration::from_secs(10), waiter)
            .await
            .expect("the flush ends")
            .expect("no panic");
    }

    #[tokio::test]
    async fn a_flush_with_nothing_marked_ends_at_once() {
        let (wait, own) = FlushWait::start();
        drop(own);
        wait.wait().await;
    }
}
