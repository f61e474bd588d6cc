//! Connections per (broker, workload), dialled lazily and re-dialled with
//! exponential backoff (`reconnect.backoff.ms` .. `reconnect.backoff.max.ms`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use super::connection::{BrokerAddr, Connection, ConnectionConfig};
use crate::error::Result;

/// What a connection is used for. Each workload gets its own socket per broker.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Workload {
    /// Produce requests.
    Produce,
    /// Fetch requests (long polls).
    Fetch,
    /// Group coordination: join, sync, heartbeat, commits.
    Group,
    /// Metadata, admin and transaction-coordinator requests.
    Admin,
}

#[derive(Default)]
struct SlotState {
    conn: Option<Connection>,
    failures: u32,
    retry_at: Option<Instant>,
}

/// One slot per (broker, workload); its async mutex serialises dialling.
type Slot = Arc<tokio::sync::Mutex<SlotState>>;

/// Lazily dialled connections, one per (broker address, workload).
pub struct ConnectionPool {
    cfg: ConnectionConfig,
    backoff: Duration,
    backoff_max: Duration,
    /// Keyed by host and port, not node id: a bootstrap address and the
    /// metadata entry for the same listener share one socket per workload.
    slots: Mutex<HashMap<(String, u16, Workload), Slot>>,
    /// The owning client's connection counters (see [`super::metrics`]),
    /// handed to every connection dialled, across reconnects.
    metrics: Arc<super::metrics::ConnectionMetrics>,
}

impl std::fmt::Debug for ConnectionPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConnectionPool").finish_non_exhaustive()
    }
}

impl ConnectionPool {
    /// A pool using `cfg` for every connection.
    pub fn new(cfg: ConnectionConfig, backoff: Duration, backoff_max: Duration) -> ConnectionPool {
        ConnectionPool {
            metrics: Arc::default(),
            cfg,
            backoff,
            backoff_max,
            slots: Mutex::new(HashMap::new()),
        }
    }

    /// A live connection to `addr` for `workload`, dialling if needed. After
    /// a failed dial, waits out the backoff before dialling again.
    pub async fn get(&self, addr: &BrokerAddr, workload: Workload) -> Result<Connection> {
        let slot = {
            let mut slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
            slots
                .entry((addr.host.clone(), addr.port, workload))
                .or_default()
                .clone()
        };
        // One dialler per slot: concurrent callers wait for its outcome.
        let mut state = slot.lock().await;
        if let Some(conn) = &state.conn {
            if !conn.is_closed() {
                return Ok(conn.clone());
            }
            // Lost since last use: wait reconnect.backoff.ms before dialling,
            // as the Java client does after any disconnect.
            state.conn = None;
            state.retry_at = Some(Instant::now() + self.backoff_for(state.failures.max(1)));
        }
        if let Some(at) = state.retry_at {
            tokio::time::sleep_until(at).await;
        }
        match Connection::connect_counted(addr, &self.cfg, self.metrics.clone()).await {
            Ok(conn) => {
                state.failures = 0;
                state.retry_at = None;
                state.conn = Some(conn.clone());
                Ok(conn)
            }
            Err(e) => {
                state.failures = state.failures.saturating_add(1);
                state.retry_at = Some(Instant::now() + self.backoff_for(state.failures));
                Err(e)
            }
        }
    }

    /// Exponential backoff after `failures` consecutive failed dials.
    fn backoff_for(&self, failures: u32) -> Duration {
        let shift = failures.saturating_sub(1).min(16);
        self.backoff
            .saturating_mul(1 << shift)
            .min(self.backoff_max)
    }

    /// The counters of the connections this pool dials.
    pub(crate) fn metrics(&self) -> &Arc<super::metrics::ConnectionMetrics> {
        &self.metrics
    }

    /// Drops every connection (their tasks end once in-flight requests finish).
    pub fn clear(&self) {
        self.slots.lock().unwrap_or_else(|p| p.into_inner()).clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_and_caps() {
        let cfg = ConnectionConfig {
            client_id: "t".into(),
            request_timeout: Duration::from_secs(1),
            setup_timeout: Duration::from_secs(1),
            max_response_size: 1 << 20,
            security: Default::default(),
        };
        let pool = ConnectionPool::new(cfg, Duration::from_millis(50), Duration::from_millis(1000));
        assert_eq!(pool.backoff_for(1), Duration::from_millis(50));
        assert_eq!(pool.backoff_for(2), Duration::from_millis(100));
        assert_eq!(pool.backoff_for(5), Duration::from_millis(800));
        assert_eq!(pool.backoff_for(6), Duration::from_millis(1000));
        assert_eq!(pool.backoff_for(60), Duration::from_millis(1000));
    }
}
