//! The `buffer.memory` pool: what the producer's backlog may hold, records
//! and their pending state together.

use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::sync::Notify;
use tokio::time::Instant;

/// The `buffer.memory` budget. A record larger than the whole budget is
/// refused before it gets here.
pub(crate) struct MemoryPool {
    limit: usize,
    used: AtomicUsize,
    freed: Notify,
    /// Senders waiting for memory: sinks then treat every batch as ready.
    pub waiters: AtomicUsize,
}

impl MemoryPool {
    pub(super) fn new(limit: usize) -> MemoryPool {
        MemoryPool {
            limit,
            used: AtomicUsize::new(0),
            freed: Notify::new(),
            waiters: AtomicUsize::new(0),
        }
    }

    pub fn limit(&self) -> usize {
        self.limit
    }

    /// Takes `n` bytes if they are free now.
    pub fn try_acquire(&self, n: usize) -> bool {
        self.used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                used.checked_add(n).filter(|total| *total <= self.limit)
            })
            .is_ok()
    }

    /// Takes `n` bytes, waiting until `deadline` for them to be freed.
    pub async fn acquire(&self, n: usize, deadline: Instant, on_wait: impl Fn()) -> bool {
        // The common case takes no place in the waiters' list (a lock of
        // its own, per record).
        if self.try_acquire(n) {
            return true;
        }
        loop {
            let freed = self.freed.notified();
            tokio::pin!(freed);
            freed.as_mut().enable();
            if self.try_acquire(n) {
                return true;
            }
            self.waiters.fetch_add(1, Ordering::AcqRel);
            on_wait();
            let woke = tokio::time::timeout_at(deadline, freed).await;
            self.waiters.fetch_sub(1, Ordering::AcqRel);
            if woke.is_err() {
                return self.try_acquire(n);
            }
        }
    }

    pub(super) fn release(&self, n: usize) {
        // Saturating: never below zero, whatever a caller returns.
        let _ = self
            .used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                Some(used.saturating_sub(n))
            });
        self.freed.notify_waiters();
    }

    /// Bytes taken now.
    #[cfg(test)]
    pub fn used(&self) -> usize {
        self.used.load(Ordering::Acquire)
    }
}
