//! The idempotent producer's id and epoch: InitProducerId at start, and
//! epoch bumps (KIP-360) when sequence state is lost or unknown.
//!
//! An idempotent producer bumps at once, with a bare InitProducerId to any
//! broker. A transactional producer must not: without its transactional id
//! the broker hands out a fresh, non-transactional producer id, which the
//! transaction coordinator then refuses (INVALID_PRODUCER_ID_MAPPING). Its
//! bump request only waits here for the transaction manager's state
//! machine, which owes it to the abort: the abort runs it against the
//! transaction coordinator with the transactional id, producer id and
//! epoch, as Java's `TransactionManager` does (see `producer::transaction`).
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
    /// A transactional producer's id: bump requests wait for the
    /// transaction manager.
    transactional: bool,
}

#[derive(Debug, Clone, Copy)]
struct State {
    /// None while a bump is under way.
    current: Option<ProducerId>,
    /// The id a bump starts from.
    last: ProducerId,
    /// Transactional: a sink asked for a bump while sending with this id;
    /// the transaction manager has not taken the request yet.
    bump_asked: Option<ProducerId>,
}

impl Idempotence {
    pub fn new(initial: ProducerId) -> Idempotence {
        Idempotence {
            state: Mutex::new(State {
                current: Some(initial),
                last: initial,
                bump_asked: None,
            }),
            transactional: false,
        }
    }

    /// A transactional producer's id, none yet (before `init_transactions`).
    pub fn transactional() -> Idempotence {
        let none = ProducerId { id: -1, epoch: -1 };
        Idempotence {
            state: Mutex::new(State {
                current: None,
                last: none,
                bump_asked: None,
            }),
            transactional: true,
        }
    }

    /// Replaces the id (the transaction manager's InitProducerId, v2
    /// EndTxn or bump).
    pub fn set(&self, id: ProducerId) {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        s.current = Some(id);
        s.last = id;
    }

    /// Transactional: takes the bump a sink asked for, with the id it was
    /// sending with, for the transaction manager's machine.
    pub fn take_bump_request(&self) -> Option<ProducerId> {
        self.state
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .bump_asked
            .take()
    }

    /// The id to send with, or None during a bump.
    pub fn current(&self) -> Option<ProducerId> {
        self.state.lock().unwrap_or_else(|p| p.into_inner()).current
    }

    /// Starts a bump unless one is running; returns the id to bump from when
    /// the caller must run it. A transactional producer only leaves the
    /// request for the transaction manager (sends go on under the current
    /// epoch) and returns None: its abort runs the bump with the
    /// transactional id.
    pub fn begin_bump(&self) -> Option<ProducerId> {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if self.transactional {
            if let Some(current) = s.current {
                s.bump_asked = Some(current);
            }
            return None;
        }
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
    let version = conn.version_for::<InitProducerIdRequest>(Versions::new(0, 5))?;
    let req = init_request(bump_from.filter(|_| version >= 3));
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

/// InitProducerId for an idempotent producer, bumping `bump_from`'s epoch
/// when given (KIP-360; the fields exist from v3). A transactional
/// producer's request names its transactional id (`producer::transaction`).
pub(crate) fn init_request(bump_from: Option<ProducerId>) -> InitProducerIdRequest {
    let from = bump_from.unwrap_or(ProducerId { id: -1, epoch: -1 });
    InitProducerIdRequest::default()
        .with_transactional_id(None)
        .with_transaction_timeout_ms(i32::MAX)
        .with_producer_id(WireProducerId(from.id))
        .with_producer_epoch(from.epoch)
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

    /// The bug of issue #18: a transactional producer's bump went out as a
    /// bare InitProducerId, which gives a fresh non-transactional id. Its
    /// request waits, with the id it was made under, for the transaction
    /// manager to take it once; sends go on under the current epoch.
    #[test]
    fn a_transactional_producer_leaves_its_bump_to_the_transaction_manager() {
        let ids = Idempotence::transactional();
        assert_eq!(ids.begin_bump(), None, "no id yet, nothing to bump");
        assert_eq!(ids.take_bump_request(), None);
        ids.set(P);
        assert_eq!(ids.begin_bump(), None, "the caller runs no bare bump");
        assert_eq!(ids.current(), Some(P), "sends go on under the epoch");
        assert_eq!(ids.take_bump_request(), Some(P));
        assert_eq!(ids.take_bump_request(), None, "taken once");
    }

    #[test]
    fn an_idempotent_bump_request_carries_the_producer_id_and_epoch() {
        let idem = init_request(Some(P));
        assert_eq!(idem.transactional_id, None);
        assert_eq!(idem.transaction_timeout_ms, i32::MAX);
        assert_eq!((idem.producer_id.0, idem.producer_epoch), (4, 2));
        let first = init_request(None);
        assert_eq!((first.producer_id.0, first.producer_epoch), (-1, -1));
    }

    #[test]
    fn a_pending_producer_has_no_id_to_send_with_or_bump_from() {
        let ids = Idempotence::transactional();
        assert_eq!(ids.current(), None);
        assert_eq!(ids.begin_bump(), None);
        ids.set(P);
        assert_eq!(ids.current(), Some(P));
    }
}
