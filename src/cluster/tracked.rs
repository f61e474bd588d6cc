//! The topics the periodic metadata refresh asks for, and for how long.
//!
//! A topic is tracked for one of two reasons, or both:
//!
//! - **pinned**: for as long as the client lives (a consumer's subscription
//!   or assignment, an admin lookup, anything that calls
//!   [`Cluster::track_topics`](super::Cluster::track_topics));
//! - **while used**: a producer's topic, dropped once no send used it for
//!   `metadata.max.idle.ms` (KIP-526,
//!   <https://cwiki.apache.org/confluence/display/KAFKA/KIP-526%3A+Reduce+Producer+Metadata+Lookups+for+Large+Number+of+Topics>;
//!   the Java producer's `ProducerMetadata` drops such a topic when a
//!   metadata response arrives after its expiry). A later send tracks it
//!   again.
//!
//! A use is marked through a [`TopicUse`], one relaxed atomic store, so a
//! send never takes a lock or reads the clock. [`TrackedTopics::sweep`]
//! reads the marks: a marked topic counts as used at the sweep, an
//! unmarked one whose last use is `max_idle` old is dropped. A lease is
//! looked at every quarter of its `max_idle` and when it expires
//! ([`TrackedTopics::next_sweep`]), so a use is counted at most a quarter
//! of `max_idle` late, and a topic is dropped between `max_idle` and
//! 1.25 times that after the last send to it.
//!
//! Plain state with the time passed in: no clock, no I/O.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

/// Marks a topic tracked while used as used since the last sweep.
#[derive(Debug, Clone, Default)]
pub struct TopicUse(Arc<AtomicBool>);

impl TopicUse {
    /// Marks the topic used now. The load first keeps the cache line
    /// shared while the mark is already set (the common case on a busy
    /// topic).
    pub fn touch(&self) {
        if !self.0.load(Ordering::Relaxed) {
            self.0.store(true, Ordering::Relaxed);
        }
    }

    /// Whether the topic was used since the last call, clearing the mark.
    fn take(&self) -> bool {
        self.0.swap(false, Ordering::Relaxed)
    }
}

/// Why one topic is tracked.
#[derive(Debug)]
struct Tracked {
    /// Tracked for the client's life.
    pinned: bool,
    /// Tracked while used.
    lease: Option<Lease>,
}

/// A topic tracked while used.
#[derive(Debug)]
struct Lease {
    mark: TopicUse,
    /// The last use counted: when the lease began, or the last sweep that
    /// found the mark set.
    used: Instant,
    /// When a sweep last read the mark (or the lease began).
    checked: Instant,
    /// `metadata.max.idle.ms`: the largest any user asked for.
    max_idle: Duration,
}

impl Lease {
    fn expires(&self) -> Instant {
        self.used + self.max_idle
    }

    /// When a sweep should next look at this lease: its expiry, or a
    /// quarter of `max_idle` after the last look, whichever comes first.
    fn due(&self) -> Instant {
        self.expires()
            .min(self.checked + self.max_idle / CHECKS_PER_IDLE)
    }
}

/// How often a lease's mark is read within its `max_idle`: a use is counted
/// at most `max_idle / CHECKS_PER_IDLE` late.
const CHECKS_PER_IDLE: u32 = 4;

/// The tracked topics (see the module docs).
#[derive(Debug, Default)]
pub(crate) struct TrackedTopics {
    topics: BTreeMap<String, Tracked>,
}

impl TrackedTopics {
    /// Tracks `topic` for the client's life.
    pub(crate) fn pin(&mut self, topic: String) {
        self.topics
            .entry(topic)
            .and_modify(|t| t.pinned = true)
            .or_insert(Tracked {
                pinned: true,
                lease: None,
            });
    }

    /// Tracks `topic` while used, counting a use `now`, and returns the
    /// mark that records later uses, and whether the lease is new (the
    /// next sweep may then be due sooner). A topic already tracked while
    /// used keeps its mark; `max_idle` raises its idle bound if larger.
    pub(crate) fn lease(
        &mut self,
        topic: &str,
        max_idle: Duration,
        now: Instant,
    ) -> (TopicUse, bool) {
        let tracked = match self.topics.get_mut(topic) {
            Some(t) => t,
            None => self.topics.entry(topic.to_owned()).or_insert(Tracked {
                pinned: false,
                lease: None,
            }),
        };
        match &mut tracked.lease {
            Some(lease) => {
                lease.max_idle = lease.max_idle.max(max_idle);
                lease.mark.touch();
                (lease.mark.clone(), false)
            }
            None => {
                let mark = TopicUse::default();
                tracked.lease = Some(Lease {
                    mark: mark.clone(),
                    used: now,
                    checked: now,
                    max_idle,
                });
                (mark, true)
            }
        }
    }

    /// Counts the uses marked since the last sweep as uses `now` and drops
    /// the leases unused for their `max_idle`. Returns the topics no
    /// longer tracked at all (a pinned topic stays, lease or not).
    pub(crate) fn sweep(&mut self, now: Instant) -> Vec<String> {
        let mut dropped = Vec::new();
        self.topics.retain(|name, t| {
            if let Some(lease) = &mut t.lease {
                lease.checked = now;
                if lease.mark.take() {
                    lease.used = now;
                } else if lease.expires() <= now {
                    t.lease = None;
                    if !t.pinned {
                        dropped.push(name.clone());
                        return false;
                    }
                }
            }
            true
        });
        dropped
    }

    /// When the next sweep can drop or renew a lease.
    pub(crate) fn next_sweep(&self) -> Option<Instant> {
        self.topics
            .values()
            .filter_map(|t| t.lease.as_ref().map(Lease::due))
            .min()
    }

    /// Every tracked topic, in name order.
    pub(crate) fn names(&self) -> impl Iterator<Item = &String> {
        self.topics.keys()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const IDLE: Duration = Duration::from_secs(5);

    fn names(t: &TrackedTopics) -> Vec<&str> {
        t.names().map(String::as_str).collect()
    }

    #[test]
    fn an_unused_lease_is_dropped_after_max_idle_and_a_used_one_renewed() {
        const Q: Duration = Duration::from_millis(1_250); // IDLE / 4
        let t0 = Instant::now();
        let mut t = TrackedTopics::default();
        let (a, new) = t.lease("a", IDLE, t0);
        assert!(new);
        let (b, _) = t.lease("b", IDLE, t0);
        assert_eq!(
            t.next_sweep(),
            Some(t0 + Q),
            "a quarter of IDLE after the lease"
        );
        a.touch();
        b.touch();
        assert!(t.sweep(t0 + Q).is_empty(), "both were used");
        assert_eq!(t.next_sweep(), Some(t0 + Q * 2));
        // From here only `b` is used.
        for k in 2..=4 {
            b.touch();
            assert!(
                t.sweep(t0 + Q * k).is_empty(),
                "`a` idle for {k} quarters only"
            );
        }
        assert_eq!(
            t.next_sweep(),
            Some(t0 + Q * 5),
            "`a` expires: IDLE after its last counted use"
        );
        assert_eq!(t.sweep(t0 + Q * 5), vec!["a".to_owned()]);
        assert_eq!(names(&t), ["b"]);
        assert_eq!(t.next_sweep(), Some(t0 + Q * 6));
        for k in 6..8 {
            assert!(
                t.sweep(t0 + Q * k).is_empty(),
                "`b` idle for {} quarters only",
                k - 4
            );
        }
        assert_eq!(t.sweep(t0 + Q * 8), vec!["b".to_owned()]);
        assert_eq!(t.next_sweep(), None);
        assert!(names(&t).is_empty());
    }

    /// The drop's bound: a use just after a sweep is counted at the next
    /// one, a quarter of IDLE later, and the topic is dropped IDLE after
    /// that: no later than 1.25 IDLE after the use, and never sooner than
    /// IDLE, whenever the sweeps fall due.
    #[test]
    fn a_topic_is_dropped_between_max_idle_and_a_quarter_more_after_its_last_use() {
        let t0 = Instant::now();
        let mut t = TrackedTopics::default();
        let (a, _) = t.lease("a", IDLE, t0);
        let used = t0 + Duration::from_millis(1);
        a.touch();
        let mut dropped_at = None;
        while let Some(at) = t.next_sweep() {
            if !t.sweep(at).is_empty() {
                dropped_at = Some(at);
                break;
            }
        }
        let idle = dropped_at.expect("dropped") - used;
        assert!(
            idle >= IDLE && idle <= IDLE + IDLE / 4,
            "dropped {idle:?} after its use"
        );
    }

    #[test]
    fn a_dropped_topic_is_tracked_again_by_its_next_use() {
        let t0 = Instant::now();
        let mut t = TrackedTopics::default();
        let (old, _) = t.lease("a", IDLE, t0);
        assert_eq!(t.sweep(t0 + IDLE), vec!["a".to_owned()]);
        // The old mark no longer counts.
        old.touch();
        assert!(t.sweep(t0 + IDLE * 3).is_empty());
        assert!(names(&t).is_empty());
        let (new, is_new) = t.lease("a", IDLE, t0 + IDLE * 4);
        assert!(is_new, "a new lease");
        assert_eq!(names(&t), ["a"]);
        new.touch();
        assert!(t.sweep(t0 + IDLE * 5).is_empty());
        assert_eq!(names(&t), ["a"]);
    }

    #[test]
    fn pinned_topics_are_never_dropped() {
        let t0 = Instant::now();
        let mut t = TrackedTopics::default();
        t.pin("subscribed".into());
        t.lease("both", IDLE, t0);
        t.pin("both".into());
        t.lease("produced", IDLE, t0);
        assert_eq!(t.sweep(t0 + IDLE), vec!["produced".to_owned()]);
        assert_eq!(names(&t), ["both", "subscribed"]);
        assert_eq!(t.next_sweep(), None, "`both` lost only its lease");
        assert!(t.sweep(t0 + IDLE * 10).is_empty());
    }

    #[test]
    fn a_lease_taken_again_counts_as_a_use_and_keeps_the_longest_idle() {
        let t0 = Instant::now();
        let mut t = TrackedTopics::default();
        let (first, _) = t.lease("a", IDLE, t0);
        let (again, new) = t.lease("a", IDLE * 2, t0 + IDLE / 2);
        assert!(!new);
        assert!(t.sweep(t0 + IDLE).is_empty(), "taking it again is a use");
        assert_eq!(
            t.next_sweep(),
            Some(t0 + IDLE + IDLE / 2),
            "a quarter of the larger bound after the sweep"
        );
        again.touch();
        assert!(
            first.take(),
            "both handles share one mark, whoever touches it"
        );
        assert_eq!(t.sweep(t0 + IDLE * 3), vec!["a".to_owned()]);
    }
}
