//! The share consumer's counters, named after Java's share-consumer
//! metrics (KIP-932): `records-consumed-total`, `bytes-consumed-total`,
//! `records-fetched-total`, `fetch-request-total`, `fetch-latency-avg` /
//! `-max`, `acknowledgements-send-total` and `acknowledgements-error-total`
//! of `consumer-share-fetch-manager-metrics`; `heartbeat-total` and
//! `rebalance-total` of `consumer-share-coordinator-metrics`. One atomic
//! add each, where the events happen. A share consumer without
//! `client.id` is named as Java names it (a share consumer config is a
//! consumer config there): `consumer-<group.id>-N`.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use super::acquired::AckBatch;
use super::{AcknowledgeType, ShareConsumerConfig, ShareRecord};
use crate::config::ClientKind;
use crate::net::ConnectionStats;

/// Record acknowledgements per type, as atomics.
#[derive(Debug, Default)]
struct AckTally([AtomicU64; 3]);

impl AckTally {
    fn add(&self, counts: &AcknowledgementCounts) {
        for (slot, n) in self
            .0
            .iter()
            .zip([counts.accept, counts.release, counts.reject])
        {
            slot.fetch_add(n, Relaxed);
        }
    }

    fn load(&self) -> AcknowledgementCounts {
        let [a, r, j] = &self.0;
        AcknowledgementCounts {
            accept: a.load(Relaxed),
            release: r.load(Relaxed),
            reject: j.load(Relaxed),
        }
    }
}

/// Counters the share consumer keeps as it runs.
#[derive(Debug, Default)]
pub(super) struct ShareCounters {
    records: AtomicU64,
    bytes: AtomicU64,
    heartbeats: AtomicU64,
    rebalances: AtomicU64,
    records_fetched: AtomicU64,
    fetch_requests: AtomicU64,
    fetch_latency_total_us: AtomicU64,
    fetch_latency_max_us: AtomicU64,
    acks_sent: AckTally,
    acks_failed: AckTally,
}

impl ShareCounters {
    /// `records` are about to be returned by `poll`.
    pub(super) fn handed_out(&self, records: &[ShareRecord]) {
        let bytes: usize = records
            .iter()
            .map(|r| {
                let r = &r.record;
                r.key.as_ref().map_or(0, |k| k.len()) + r.value.as_ref().map_or(0, |v| v.len())
            })
            .sum();
        self.records.fetch_add(records.len() as u64, Relaxed);
        self.bytes.fetch_add(bytes as u64, Relaxed);
    }

    /// A ShareGroupHeartbeat got its answer.
    pub(super) fn heartbeat(&self) {
        self.heartbeats.fetch_add(1, Relaxed);
    }

    /// The member took an assignment that differs from the one it had.
    pub(super) fn rebalance(&self) {
        self.rebalances.fetch_add(1, Relaxed);
    }

    /// A ShareFetch answer brought `n` acquired records.
    pub(super) fn fetched(&self, n: usize) {
        self.records_fetched.fetch_add(n as u64, Relaxed);
    }

    /// A ShareFetch request was answered `took` after it was queued.
    pub(super) fn fetch_answered(&self, took: Duration) {
        let us = u64::try_from(took.as_micros()).unwrap_or(u64::MAX);
        self.fetch_requests.fetch_add(1, Relaxed);
        self.fetch_latency_total_us.fetch_add(us, Relaxed);
        self.fetch_latency_max_us.fetch_max(us, Relaxed);
    }

    /// Acknowledgements put into a ShareFetch or ShareAcknowledge request.
    pub(super) fn acknowledgements_sent(&self, counts: &AcknowledgementCounts) {
        self.acks_sent.add(counts);
    }

    /// Acknowledgements that failed (the broker's error, a failed request,
    /// or no share session to send them on).
    pub(super) fn acknowledgements_failed(&self, counts: &AcknowledgementCounts) {
        self.acks_failed.add(counts);
    }

    /// The counters, with `connections` (the consumer's cluster's).
    pub(super) fn snapshot(&self, connections: ConnectionStats) -> ShareConsumerMetrics {
        let fetch_requests = self.fetch_requests.load(Relaxed);
        let total_us = self.fetch_latency_total_us.load(Relaxed);
        ShareConsumerMetrics {
            records_consumed: self.records.load(Relaxed),
            bytes_consumed: self.bytes.load(Relaxed),
            heartbeats: self.heartbeats.load(Relaxed),
            rebalances: self.rebalances.load(Relaxed),
            records_fetched: self.records_fetched.load(Relaxed),
            fetch_requests,
            fetch_latency_avg: Duration::from_micros(
                total_us.checked_div(fetch_requests).unwrap_or(0),
            ),
            fetch_latency_max: Duration::from_micros(self.fetch_latency_max_us.load(Relaxed)),
            acknowledgements_sent: self.acks_sent.load(),
            acknowledgement_errors: self.acks_failed.load(),
            connections,
        }
    }
}

/// Record acknowledgements by type. Gap acknowledgements (acquired offsets
/// with no record, settled by the client itself) are not counted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct AcknowledgementCounts {
    /// [`AcknowledgeType::Accept`].
    pub accept: u64,
    /// [`AcknowledgeType::Release`].
    pub release: u64,
    /// [`AcknowledgeType::Reject`].
    pub reject: u64,
}

impl AcknowledgementCounts {
    /// Every type together (Java's `acknowledgements-send-total` /
    /// `acknowledgements-error-total`).
    pub fn total(&self) -> u64 {
        self.accept + self.release + self.reject
    }

    /// The count of `ty`.
    pub fn of(&self, ty: AcknowledgeType) -> u64 {
        match ty {
            AcknowledgeType::Accept => self.accept,
            AcknowledgeType::Release => self.release,
            AcknowledgeType::Reject => self.reject,
        }
    }

    /// The records `batches` acknowledge, by type.
    pub(super) fn of_batches(batches: &[AckBatch]) -> AcknowledgementCounts {
        let mut c = AcknowledgementCounts::default();
        for b in batches {
            let mut add = |ty: i8, n: u64| match ty {
                1 => c.accept += n,
                2 => c.release += n,
                3 => c.reject += n,
                _ => {}
            };
            match b.types.as_slice() {
                [ty] => add(*ty, b.last.abs_diff(b.first).saturating_add(1)),
                types => types.iter().for_each(|ty| add(*ty, 1)),
            }
        }
        c
    }

    /// Adds `other` in.
    pub(super) fn merge(&mut self, other: &AcknowledgementCounts) {
        self.accept += other.accept;
        self.release += other.release;
        self.reject += other.reject;
    }
}

/// A snapshot of a share consumer's counters since it was created (see
/// [`ShareConsumer::metrics`](super::ShareConsumer::metrics)); Java's
/// names in brackets.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ShareConsumerMetrics {
    /// Records handed out by `poll` (`records-consumed-total`).
    pub records_consumed: u64,
    /// Key and value bytes of those records (`bytes-consumed-total`; Java
    /// counts fetched bytes).
    pub bytes_consumed: u64,
    /// ShareGroupHeartbeat requests answered (`heartbeat-total`).
    pub heartbeats: u64,
    /// Assignments taken that differ from the one before, the first
    /// included (`rebalance-total` of `consumer-share-coordinator-metrics`).
    pub rebalances: u64,
    /// Records the brokers delivered to this member, before `poll` hands
    /// them out (`records-fetched-total`).
    pub records_fetched: u64,
    /// ShareFetch requests answered (`fetch-request-total`).
    pub fetch_requests: u64,
    /// Mean ShareFetch round trip, its `fetch.max.wait.ms` wait included
    /// (`fetch-latency-avg`; Java over a window, ours since the start).
    pub fetch_latency_avg: Duration,
    /// The longest of those (`fetch-latency-max`).
    pub fetch_latency_max: Duration,
    /// Record acknowledgements sent, in ShareFetch or ShareAcknowledge
    /// requests (`acknowledgements-send-total` is their total).
    pub acknowledgements_sent: AcknowledgementCounts,
    /// Record acknowledgements that failed: the broker answered an error
    /// for their partition, their request failed, or no share session was
    /// open to send them on (`acknowledgements-error-total` is their
    /// total).
    pub acknowledgement_errors: AcknowledgementCounts,
    /// The consumer's connections (those of its
    /// [`Cluster`](crate::Cluster), shared with any client built on the
    /// same handle).
    pub connections: ConnectionStats,
}

/// `config`'s `client.id`, or the one Java generates for a consumer.
pub(super) fn client_id(config: &ShareConsumerConfig) -> String {
    let group = Some(config.group_id.as_str()).filter(|g| !g.is_empty());
    config.client.client_id_for(ClientKind::Consumer {
        group_id: group,
        group_instance_id: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batches_count_each_record_by_type_and_skip_gaps() {
        let batches = [
            // One type for a range of three.
            AckBatch {
                first: 10,
                last: 12,
                types: vec![1],
            },
            // One type per offset: release, reject, gap, accept.
            AckBatch {
                first: 20,
                last: 23,
                types: vec![2, 3, 0, 1],
            },
        ];
        let c = AcknowledgementCounts::of_batches(&batches);
        assert_eq!((c.accept, c.release, c.reject), (4, 1, 1));
        assert_eq!(c.total(), 6);
        let counters = ShareCounters::default();
        counters.acknowledgements_sent(&c);
        counters.acknowledgements_sent(&c);
        counters.acknowledgements_failed(&AcknowledgementCounts {
            release: 1,
            ..Default::default()
        });
        let m = counters.snapshot(ConnectionStats::default());
        assert_eq!(m.acknowledgements_sent.of(AcknowledgeType::Accept), 8);
        assert_eq!(m.acknowledgements_sent.total(), 12);
        assert_eq!(m.acknowledgement_errors.total(), 1);
    }

    #[test]
    fn fetch_latency_is_the_mean_and_max_of_answered_requests() {
        let c = ShareCounters::default();
        assert_eq!(
            c.snapshot(ConnectionStats::default()).fetch_latency_avg,
            Duration::ZERO
        );
        c.fetch_answered(Duration::from_millis(2));
        c.fetch_answered(Duration::from_millis(6));
        let m = c.snapshot(ConnectionStats::default());
        assert_eq!(m.fetch_requests, 2);
        assert_eq!(m.fetch_latency_avg, Duration::from_millis(4));
        assert_eq!(m.fetch_latency_max, Duration::from_millis(6));
    }
}
