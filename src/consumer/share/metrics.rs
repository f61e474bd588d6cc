//! The share consumer's counters, named after Java's share-consumer
//! metrics (KIP-932): `records-consumed-total` and `bytes-consumed-total`
//! of `consumer-share-fetch-manager-metrics`, `heartbeat-total` of
//! `consumer-share-coordinator-metrics`. One atomic add each, where the
//! events happen. A share consumer without `client.id` is named as Java
//! names it (a share consumer config is a consumer config there):
//! `consumer-<group.id>-N`.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use super::{ShareConsumerConfig, ShareRecord};
use crate::config::ClientKind;
use crate::net::ConnectionStats;

/// Counters the share consumer keeps as it runs.
#[derive(Debug, Default)]
pub(super) struct ShareCounters {
    records: AtomicU64,
    bytes: AtomicU64,
    heartbeats: AtomicU64,
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

    /// The counters, with `connections` (the consumer's cluster's).
    pub(super) fn snapshot(&self, connections: ConnectionStats) -> ShareConsumerMetrics {
        ShareConsumerMetrics {
            records_consumed: self.records.load(Relaxed),
            bytes_consumed: self.bytes.load(Relaxed),
            heartbeats: self.heartbeats.load(Relaxed),
            connections,
        }
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
