//! Connection counters: the Java client's selector metrics
//! (`connection-count`, `connection-creation-total`,
//! `connection-close-total`, `request-total`, `outgoing-byte-total`,
//! `incoming-byte-total`, `successful-authentication-total`,
//! `failed-authentication-total`; KIP-78 and the Java `Selector`'s
//! sensors) and the request latency of its per-node metrics, summed over
//! the nodes.
//!
//! Counted where the events happen (connection setup, the connection task's
//! writer and reader) with one atomic operation each. Each client owns its
//! counters: a [`ConnectionPool`](super::ConnectionPool) holds one
//! [`ConnectionMetrics`] and hands it to every connection it dials (and the
//! group member's coordinator connection gets the same one), so two clients
//! never count into each other's, whatever their `client.id`.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

/// Counters of one client's connections, updated by the connections.
#[derive(Debug, Default)]
pub(crate) struct ConnectionMetrics {
    created: AtomicU64,
    closed: AtomicU64,
    requests: AtomicU64,
    responses: AtomicU64,
    latency_sum_us: AtomicU64,
    latency_max_us: AtomicU64,
    bytes_out: AtomicU64,
    bytes_in: AtomicU64,
    auth_ok: AtomicU64,
    auth_failed: AtomicU64,
}

impl ConnectionMetrics {
    /// A connection is set up (TCP, TLS, ApiVersions) and its task runs.
    pub(crate) fn opened(&self) {
        self.created.fetch_add(1, Relaxed);
    }

    /// A connection's task ended.
    pub(crate) fn closed(&self) {
        self.closed.fetch_add(1, Relaxed);
    }

    /// Authentication finished on a new connection. As in the Java client,
    /// a connection without SASL counts as authenticated once it is ready.
    pub(crate) fn authenticated(&self, ok: bool) {
        let c = if ok { &self.auth_ok } else { &self.auth_failed };
        c.fetch_add(1, Relaxed);
    }

    /// A request frame of `bytes` was written.
    pub(crate) fn sent(&self, bytes: usize) {
        self.requests.fetch_add(1, Relaxed);
        self.bytes_out.fetch_add(bytes as u64, Relaxed);
    }

    /// A response frame of `bytes` answered a request written `latency`
    /// ago.
    pub(crate) fn received(&self, bytes: usize, latency: Duration) {
        let us = u64::try_from(latency.as_micros()).unwrap_or(u64::MAX);
        self.responses.fetch_add(1, Relaxed);
        self.bytes_in.fetch_add(bytes as u64, Relaxed);
        self.latency_sum_us.fetch_add(us, Relaxed);
        self.latency_max_us.fetch_max(us, Relaxed);
    }

    /// A snapshot of the counters.
    pub(crate) fn snapshot(&self) -> ConnectionStats {
        let created = self.created.load(Relaxed);
        let closed = self.closed.load(Relaxed);
        let responses = self.responses.load(Relaxed);
        let sum = self.latency_sum_us.load(Relaxed);
        ConnectionStats {
            connections: created.saturating_sub(closed),
            created,
            closed,
            requests: self.requests.load(Relaxed),
            responses,
            request_latency_avg: Duration::from_micros(sum.checked_div(responses).unwrap_or(0)),
            request_latency_max: Duration::from_micros(self.latency_max_us.load(Relaxed)),
            bytes_out: self.bytes_out.load(Relaxed),
            bytes_in: self.bytes_in.load(Relaxed),
            successful_authentications: self.auth_ok.load(Relaxed),
            failed_authentications: self.auth_failed.load(Relaxed),
        }
    }
}

/// The counters of one client's connections since it was created
/// ([`Cluster::connection_stats`](crate::Cluster::connection_stats);
/// carried by `ProducerMetrics`, `ConsumerMetrics` and
/// `ShareConsumerMetrics`). Clients sharing one `Cluster` (`with_cluster`)
/// share its connections and so these counters. Java's names in brackets.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ConnectionStats {
    /// Connections open now (`connection-count`).
    pub connections: u64,
    /// Connections set up (`connection-creation-total`).
    pub created: u64,
    /// Connections closed, for any reason (`connection-close-total`).
    pub closed: u64,
    /// Requests written (`request-total`).
    pub requests: u64,
    /// Responses read (`response-total`).
    pub responses: u64,
    /// Mean time from writing a request to reading its response, over
    /// every API and broker (`request-latency-avg` of the per-node
    /// metrics); a Fetch counts its `fetch.max.wait.ms`.
    pub request_latency_avg: Duration,
    /// The longest of those (`request-latency-max`).
    pub request_latency_max: Duration,
    /// Request bytes written, size prefixes included (`outgoing-byte-total`).
    pub bytes_out: u64,
    /// Response bytes read, size prefixes included (`incoming-byte-total`).
    pub bytes_in: u64,
    /// Connections authenticated; without SASL, every connection set up
    /// (`successful-authentication-total`).
    pub successful_authentications: u64,
    /// SASL exchanges that failed (`failed-authentication-total`).
    pub failed_authentications: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_add_up_per_owner() {
        let a = ConnectionMetrics::default();
        let b = ConnectionMetrics::default();
        a.opened();
        a.opened();
        a.authenticated(true);
        a.authenticated(false);
        a.sent(100);
        a.received(40, Duration::from_millis(2));
        a.sent(10);
        a.received(20, Duration::from_millis(6));
        a.closed();
        b.opened();
        let s = a.snapshot();
        assert_eq!((s.created, s.closed, s.connections), (2, 1, 1));
        assert_eq!((s.requests, s.responses), (2, 2));
        assert_eq!((s.bytes_out, s.bytes_in), (110, 60));
        assert_eq!(s.request_latency_avg, Duration::from_millis(4));
        assert_eq!(s.request_latency_max, Duration::from_millis(6));
        assert_eq!(
            (s.successful_authentications, s.failed_authentications),
            (1, 1)
        );
        let s = b.snapshot();
        assert_eq!((s.created, s.requests, s.connections), (1, 0, 1));
    }
}
