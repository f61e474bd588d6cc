//! The consumer's own counters as one snapshot
//! ([`Consumer::metrics`](super::Consumer::metrics)): records and bytes
//! handed out (the Java consumer's `consumer-fetch-manager-metrics`), its
//! connections (the network metrics of KIP-78's `consumer-metrics`) and
//! its group membership (`consumer-coordinator-metrics`). Each consumer
//! owns its counters; none are shared through `client.id`.

use super::group::metrics::GroupStats;
use super::{Consumer, ConsumerConfig};
use crate::config::ClientKind;
use crate::net::ConnectionStats;

/// A snapshot of a consumer's counters since it was created; Java's names
/// in brackets.
#[derive(Debug, Clone, Default, PartialEq)]
#[non_exhaustive]
pub struct ConsumerMetrics {
    /// Records handed out by `poll` and `stream` (`records-consumed-total`).
    pub records_consumed: u64,
    /// Key and value bytes of those records (`bytes-consumed-total`; Java
    /// counts fetched bytes).
    pub bytes_consumed: u64,
    /// The consumer's connections: those of its [`Cluster`](crate::Cluster)
    /// (shared with any client built on the same handle) and its group
    /// coordinator connections.
    pub connections: ConnectionStats,
    /// Rebalances, heartbeats and commits of its group memberships (zeros
    /// before it joins or commits).
    pub group: GroupStats,
}

impl Consumer {
    /// The counters kept since this consumer was created.
    pub fn metrics(&self) -> ConsumerMetrics {
        let s = &self.shared;
        let (records_consumed, bytes_consumed) = s.consumed.totals();
        ConsumerMetrics {
            records_consumed,
            bytes_consumed,
            connections: s.cluster.connection_stats(),
            group: s.group_metrics.stats(),
        }
    }
}

/// `config`'s `client.id`, or the one Java generates for a consumer.
pub(super) fn client_id(config: &ConsumerConfig) -> String {
    config.client.client_id_for(ClientKind::Consumer {
        group_id: config.group_id.as_deref(),
        group_instance_id: config.group.group_instance_id.as_deref(),
    })
}
