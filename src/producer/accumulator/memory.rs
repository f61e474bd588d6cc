//! The `buffer.memory` pool: what the producer's backlog may hold, records
//! and their pending state together.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use tokio::sync::Notify;
use tokio::time::Instant;

/// The `buffer.memory` budget. A record larger than the whole budget is
/// refused before it gets here.
pub(crate) struct MemoryPool {
    limit: usize,
    used: Mutex<usize>,
    freed: Notify,
    /// Senders waiting for memory: sinks then treat every batch as ready.
    pub waiters: AtomicUsize,
}

impl MemoryPool {
    pub(super) fn new(limit: usize) -> MemoryPool {
        MemoryPool {
            limit,
            used: Mutex::new(0),
            freed: Notify::new(),
            waiters: AtomicUsize::new(0),
        }
    }

    pub fn limit(&self) -> usize {
        self.limit
    }

    /// Takes `n` bytes if they are free now.
    pub fn try_acquire(&self, n: usize) -> bool {
        let mut used = self.used.lock().unwrap_or_else(|p| p.into_inner());
        if *used + n <= self.limit {
            *used += n;
            true
        } else {
            false
        }
    }

    /// Takes `n` bytes, waiting until `deadline` for them to be freed.
    pub async fn acquire(&self, n: usize, deadline: Instant, on_wait: impl Fn()) -> bool {
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
        let mut used = self.used.lock().unwrap_or_else(|p| p.into_inner());
        *used = used.saturating_sub(n);
        drop(used);
        self.freed.notify_waiters();
    }
}
