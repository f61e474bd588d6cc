//! The idempotent producer's id and epoch: InitProducerId at start, and
//! epoch bumps (KIP-360) when sequence state is lost or unknown.
//!
//! <https://kafka.apache.org/protocol#The_Messages_InitProducerId>

use std::sync::Mutex;

use kafka_protocol::messages::{InitProducerIdRequest, ProducerId as WireProducerId};
use tokio::time::Instant;

use crate::cluster::Cluster;
use crate::error::{Error, KafkaCode, Result};
use crate::net::Workload;
use crate::protocol::versions::Versions;

/// The idempotent producer's identity.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ProducerId {
    pub id: i64,
    pub epoch: i16,
}

/// Where the producer id stands.
#[derive(Debug)]
pub(crate) struct Idempotence {
    state: Mutex<State>,
}

#[derive(Debug, Clone, Copy)]
struct State {
    /// None while a bump is under way.
    current: Option<ProducerId>,
    /// The id a bump starts from.
    last: ProducerId,
}

impl Idempotence {
    pub fn new(initial: ProducerId) -> Idempotence {
        Idempotence {
            state: Mutex::new(State {
                current: Some(initial),
                last: initial,
            }),
        }
    }

    /// No id yet (a transactional producer before `init_transactions`).
    pub fn pending() -> Idempotence {
        let none = ProducerId { id: -1, epoch: -1 };
        Idempotence {
            state: Mutex::new(State {
                current: None,
                last: none,
            }),
        }
    }

    /// Replaces the id (after InitProducerId or a v2 EndTxn).
    pub fn set(&self, id: ProducerId) {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        s.current = Some(id);
        s.last = id;
    }

    /// The id to send with, or None during a bump.
    pub fn current(&self) -> Option<ProducerId> {
        self.state.lock().unwrap_or_else(|p| p.into_inner()).current
    }

    /// Starts a bump unless one is running; returns the id to bump from when
    /// the caller must run it.
    pub fn begin_bump(&self) -> Option<ProducerId> {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let from = s.current.take()?;
        s.last = from;
        Some(from)
    }

    /// Ends a bump with the new id (or the old one when the bump failed, so
    /// that sends go on and fail or retry on their own).
    pub fn end_bump(&self, next: Option<ProducerId>) {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        s.current = Some(next.unwrap_or(s.last));
    }
}

/// InitProducerId for a non-transactional producer, retried within
/// `default.api.timeout.ms`. With `bump_from`, asks the broker to bump that
/// id's epoch (v3+, KIP-360); a broker that cannot bump gives a fresh id.
pub(crate) async fn init_producer_id(
    cluster: &Cluster,
    bump_from: Option<ProducerId>,
) -> Result<ProducerId> {
    let cfg = cluster.config();
    let deadline = Instant::now() + cfg.default_api_timeout;
    let mut attempt = 0u32;
    loop {
        let result = try_init(cluster, bump_from).await;
        match result {
            Ok(id) => return Ok(id),
            Err(e) if e.is_retriable() && Instant::now() < deadline => {
                attempt += 1;
                let backoff = cfg
                    .retry_backoff
                    .saturating_mul(1 << attempt.min(10))
                    .min(cfg.retry_backoff_max);
                tracing::debug!(error = %e, attempt, "InitProducerId failed; retrying");
                tokio::time::sleep_until((Instant::now() + backoff).min(deadline)).await;
            }
            Err(e) => return Err(e),
        }
    }
}

async fn try_init(cluster: &Cluster, bump_from: Option<ProducerId>) -> Result<ProducerId> {
    let conn = cluster.any_connection(Workload::Produce).await?;
    let mut req = InitProducerIdRequest::default()
        .with_transactional_id(None)
        .with_transaction_timeout_ms(i32::MAX)
        .with_producer_id(WireProducerId(-1))
        .with_producer_epoch(-1);
    let version = conn.version_for::<InitProducerIdRequest>(Versions::new(0, 5))?;
    if let (Some(from), true) = (bump_from, version >= 3) {
        req = req
            .with_producer_id(WireProducerId(from.id))
            .with_producer_epoch(from.epoch);
    }
    let resp = conn.send_at(&req, version).await?;
    Error::check(resp.error_code, || {
        format!("InitProducerId on {}", conn.broker())
    })?;
    if resp.producer_id.0 < 0 || resp.producer_epoch < 0 {
        return Err(Error::Kafka {
            code: KafkaCode::from_code(-1).unwrap_or(KafkaCode::UNKNOWN_PRODUCER_ID),
            context: format!(
                "InitProducerId on {}: invalid id {} epoch {}",
                conn.broker(),
                resp.producer_id.0,
                resp.producer_epoch
            ),
        });
    }
    Ok(ProducerId {
        id: resp.producer_id.0,
        epoch: resp.producer_epoch,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const P: ProducerId = ProducerId { id: 4, epoch: 2 };

    /// KIP-360: one bump at a time; sends wait (no current id) while it
    /// runs; it ends with the new epoch, or with the old one when it
    /// failed, so that sends go on and fail or retry on their own.
    #[test]
    fn one_epoch_bump_at_a_time_and_a_failed_one_keeps_the_old_epoch() {
        let ids = Idempotence::new(P);
        assert_eq!(ids.begin_bump(), Some(P));
        assert_eq!(ids.current(), None, "sends wait during the bump");
        assert_eq!(ids.begin_bump(), None, "a second bump does not start");
        let next = ProducerId { id: 4, epoch: 3 };
        ids.end_bump(Some(next));
        assert_eq!(ids.current(), Some(next));

        assert_eq!(ids.begin_bump(), Some(next));
        ids.end_bump(None);
        assert_eq!(ids.current(), Some(next), "a failed bump keeps the id");
    }

    #[test]
    fn a_pending_producer_has_no_id_to_send_with_or_bump_from() {
        let ids = Idempotence::pending();
        assert_eq!(ids.current(), None);
        assert_eq!(ids.begin_bump(), None);
        ids.set(P);
        assert_eq!(ids.current(), Some(P));
    }
}
