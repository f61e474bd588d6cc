//! The acknowledgements of one store's changelog writes
//! ([`ChangelogAcks`]): each write is sent with
//! [`Producer::send_tagged`](crate::producer::Producer::send_tagged) under
//! a sequence number, and the producer reports a batch's writes in one
//! call, so a store keeps no future per write and a commit waits for one
//! watermark ("every write numbered below N settled") instead of a future
//! per write. At-least-once, a commit waits for it before it commits the
//! input offsets covering the writes (Kafka Streams flushes its record
//! collector at commit); exactly-once, after the transaction's commit,
//! which flushed them.
//!
//! Protocol: <https://kafka.apache.org/protocol#The_Messages_Produce>;
//! the changelog itself: Kafka Streams' `ChangeLoggingKeyValueBytesStore`.

use std::collections::BTreeSet;
use std::sync::Mutex;

use tokio::sync::Notify;

use super::lock;
use crate::error::Error;
use crate::producer::DeliveryReceiver;
use crate::TopicPartition;

/// Which changelog writes are settled, by sequence number: the pure state
/// of [`ChangelogAcks`].
#[derive(Debug, Default)]
struct Settled {
    /// The next write's number.
    next: u64,
    /// Every write numbered below this one is settled: acknowledged, or
    /// its send failed and its caller got the error.
    through: u64,
    /// Writes settled above `through` (a batch acknowledged before an
    /// earlier one, retried).
    ahead: BTreeSet<u64>,
    /// One past the highest changelog offset acknowledged.
    end: i64,
    /// The first write the producer failed (after its own retries): its
    /// partition and error. Every later wait reports it.
    failed: Option<String>,
}

impl Settled {
    fn begin(&mut self) -> u64 {
        let n = self.next;
        self.next += 1;
        n
    }

    /// Settles the writes numbered `tags`; a write settled twice (given
    /// up by a dropped send, then acknowledged) counts once.
    fn settle(&mut self, tags: &[u64]) {
        for &tag in tags {
            if tag == self.through {
                self.through += 1;
                while self.ahead.remove(&self.through) {
                    self.through += 1;
                }
            } else if tag > self.through && tag < self.next {
                self.ahead.insert(tag);
            }
        }
    }

    /// The producer's report of a run of writes.
    fn delivered(&mut self, partition: &TopicPartition, tags: &[u64], result: Result<i64, &Error>) {
        match result {
            Ok(offset) if offset >= 0 => self.end = self.end.max(offset + 1),
            Ok(_) => {}
            Err(e) => {
                self.failed
                    .get_or_insert_with(|| format!("a write to {partition} failed: {e}"));
            }
        }
        self.settle(tags);
    }

    /// Whether a wait for the writes numbered below `target` is over: the
    /// first failure, or the highest offset acknowledged (`end`).
    fn outcome(&self, target: u64) -> Option<Result<i64, String>> {
        if let Some(e) = &self.failed {
            return Some(Err(e.clone()));
        }
        (self.through >= target).then_some(Ok(self.end))
    }
}

/// The producer's receiver for one store's changelog writes: numbers them,
/// learns their outcomes a batch at a time, and wakes a commit waiting for
/// them.
#[derive(Debug, Default)]
pub(super) struct ChangelogAcks {
    settled: Mutex<Settled>,
    /// Woken at each report.
    progress: Notify,
}

impl ChangelogAcks {
    /// Numbers the next write; the caller settles the number if its send
    /// fails or is dropped (see [`Sending`]).
    pub(super) fn begin(&self) -> Sending<'_> {
        let tag = lock(&self.settled).begin();
        Sending {
            acks: self,
            tag,
            sent: false,
        }
    }

    /// Whether a write failed: no checkpoint may cover it.
    pub(super) fn failed(&self) -> bool {
        lock(&self.settled).failed.is_some()
    }

    /// Waits until every write numbered so far is settled. Returns one
    /// past the highest changelog offset acknowledged, or the first
    /// failure (this and every later call). Each write settles within the
    /// producer's `delivery.timeout.ms`, so this wait is bounded by it.
    pub(super) async fn wait(&self) -> Result<i64, String> {
        let target = lock(&self.settled).next;
        loop {
            let progress = self.progress.notified();
            tokio::pin!(progress);
            progress.as_mut().enable();
            if let Some(outcome) = lock(&self.settled).outcome(target) {
                return outcome;
            }
            progress.await;
        }
    }
}

impl DeliveryReceiver for ChangelogAcks {
    fn delivered(&self, partition: &TopicPartition, tags: &[u64], result: Result<(), &Error>) {
        self.delivered_through(partition, tags, result.map(|()| -1));
    }

    fn delivered_through(
        &self,
        partition: &TopicPartition,
        tags: &[u64],
        result: Result<i64, &Error>,
    ) {
        lock(&self.settled).delivered(partition, tags, result);
        self.progress.notify_waiters();
    }
}

/// A numbered write being sent: settled here unless [`sent`](Self::sent)
/// says the producer took it (and will report it). A send that failed
/// gave its caller the error; one dropped before the producer took it
/// must not hold a commit's wait forever. (One dropped after the append
/// is still flushed by the producer, and a failure still reported.)
pub(super) struct Sending<'a> {
    acks: &'a ChangelogAcks,
    /// The write's number, its tag.
    pub(super) tag: u64,
    sent: bool,
}

impl Sending<'_> {
    /// The producer took the write: its report settles it.
    pub(super) fn sent(mut self) {
        self.sent = true;
    }
}

impl Drop for Sending<'_> {
    fn drop(&mut self) {
        if !self.sent {
            lock(&self.acks.settled).settle(&[self.tag]);
            self.acks.progress.notify_waiters();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use super::*;

    fn tp() -> TopicPartition {
        TopicPartition::new("app-counts-changelog", 3)
    }

    #[test]
    fn writes_settle_in_runs_and_out_of_order() {
        let mut s = Settled::default();
        let tags: Vec<u64> = (0..5).map(|_| s.begin()).collect();
        assert_eq!(s.outcome(5), None);
        // A later batch first: nothing below it is settled yet.
        s.delivered(&tp(), &tags[3..], Ok(41));
        assert_eq!(s.outcome(5), None);
        assert_eq!(s.through, 0);
        s.delivered(&tp(), &tags[..3], Ok(38));
        assert_eq!(s.outcome(5), Some(Ok(42)));
        assert!(s.ahead.is_empty());
        // Settled twice (a dropped send, then its report): counted once.
        s.settle(&[2]);
        assert_eq!(s.through, 5);
    }

    #[test]
    fn a_wait_covers_the_writes_numbered_before_it() {
        let mut s = Settled::default();
        let first = s.begin();
        let target = s.next;
        let second = s.begin();
        s.delivered(&tp(), &[second], Ok(7));
        assert_eq!(s.outcome(target), None, "the earlier write is not settled");
        s.delivered(&tp(), &[first], Ok(6));
        assert_eq!(s.outcome(target), Some(Ok(8)));
    }

    #[test]
    fn a_failure_names_the_partition_and_stays() {
        let mut s = Settled::default();
        let tags = [s.begin(), s.begin()];
        s.delivered(&tp(), &tags[..1], Err(&Error::Closed));
        s.delivered(&tp(), &tags[1..], Ok(10));
        let e = s.outcome(2).unwrap().unwrap_err();
        assert!(e.contains("app-counts-changelog-3"), "{e}");
        assert!(s.outcome(0).unwrap().is_err(), "every later wait fails");
    }

    #[test]
    fn unknown_offsets_do_not_move_the_end() {
        let mut s = Settled::default();
        let t = s.begin();
        s.delivered(&tp(), &[t], Ok(-1));
        assert_eq!(s.outcome(1), Some(Ok(0)));
    }

    #[tokio::test]
    async fn a_wait_ends_at_the_report_and_a_dropped_send_settles() {
        let acks = Arc::new(ChangelogAcks::default());
        let reported = acks.begin();
        let tag = reported.tag;
        reported.sent();
        drop(acks.begin());
        let waiting = tokio::spawn({
            let acks = acks.clone();
            async move { acks.wait().await }
        });
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        assert!(!waiting.is_finished(), "a write is not settled");
        acks.delivered_through(&tp(), &[tag], Ok(99));
        let end = tokio::time::timeout(Duration::from_secs(5), waiting)
            .await
            .expect("the report ends the wait")
            .unwrap();
        assert_eq!(end, Ok(100));
        assert!(!acks.failed());
    }
}
