//! Client side of incremental fetch sessions (KIP-227), with no I/O.
//! See <https://cwiki.apache.org/confluence/display/KAFKA/KIP-227%3A+Introduce+Incremental+FetchRequests+to+Increase+Partition+Scalability>.
//!
//! A full fetch (epoch 0) lists every partition and asks the broker to
//! create a session; the broker answers with a session id (0: no session).
//! Later fetches carry that id and the next epoch (1, 2, ..., wrapping to 1)
//! and list only partitions that are new or whose fetch parameters changed,
//! plus the partitions to forget; the broker answers only for partitions
//! with news. Any session error (FETCH_SESSION_ID_NOT_FOUND,
//! INVALID_FETCH_SESSION_EPOCH, ...) or a failed request falls back to a
//! full fetch, as the Java client's `FetchSessionHandler` does.

use std::collections::BTreeMap;

use crate::error::KafkaCode;
use crate::TopicPartition;

/// `FETCH_SESSION_ID_NOT_FOUND`.
const SESSION_ID_NOT_FOUND: i16 = 70;
/// Epoch of a full fetch that (re)creates a session.
const INITIAL_EPOCH: i32 = 0;

/// What one partition is fetched with; a change means it is re-sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PartitionFetch {
    /// Topic id (KIP-516), nil when fetching by name.
    pub(crate) topic_id: [u8; 16],
    /// Offset to fetch from.
    pub(crate) fetch_offset: i64,
    /// Current leader epoch (KIP-320), -1 if unknown.
    pub(crate) leader_epoch: i32,
    /// Epoch of the record before `fetch_offset`, -1 if unknown.
    pub(crate) last_fetched_epoch: i32,
    /// `max.partition.fetch.bytes`.
    pub(crate) max_bytes: i32,
}

/// The parts of the next Fetch request that the session decides.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SessionRequest {
    /// Session id to send (0: none).
    pub(crate) session_id: i32,
    /// Session epoch to send.
    pub(crate) epoch: i32,
    /// Partitions to list in the request.
    pub(crate) partitions: Vec<(TopicPartition, PartitionFetch)>,
    /// Partitions to drop from the session, with their topic id.
    pub(crate) forgotten: Vec<(TopicPartition, [u8; 16])>,
}

/// One broker's fetch session.
#[derive(Debug, Default)]
pub(crate) struct FetchSession {
    id: i32,
    /// Epoch of the next request.
    epoch: i32,
    /// What the broker's session holds, as of the last request built.
    partitions: BTreeMap<TopicPartition, PartitionFetch>,
}

impl FetchSession {
    /// Whether the next request is a full fetch.
    pub(crate) fn is_full(&self) -> bool {
        self.epoch == INITIAL_EPOCH
    }

    /// Builds the next request for `wanted` and records it as the session
    /// state.
    pub(crate) fn build(
        &mut self,
        wanted: BTreeMap<TopicPartition, PartitionFetch>,
    ) -> SessionRequest {
        let full = self.is_full();
        let (partitions, forgotten) = if full {
            (
                wanted.iter().map(|(tp, p)| (tp.clone(), *p)).collect(),
                Vec::new(),
            )
        } else {
            let changed = wanted
                .iter()
                .filter(|(tp, p)| self.partitions.get(*tp) != Some(*p))
                .map(|(tp, p)| (tp.clone(), *p))
                .collect();
            let forgotten = self
                .partitions
                .iter()
                .filter(|(tp, _)| !wanted.contains_key(*tp))
                .map(|(tp, p)| (tp.clone(), p.topic_id))
                .collect();
            (changed, forgotten)
        };
        self.partitions = wanted;
        SessionRequest {
            session_id: self.id,
            epoch: self.epoch,
            partitions,
            forgotten,
        }
    }

    /// Applies a response's top-level error and session id. Returns false
    /// when the response is a session error (its partitions carry nothing)
    /// and the next fetch is a full one.
    pub(crate) fn on_response(&mut self, error_code: i16, session_id: i32) -> bool {
        if let Some(code) = KafkaCode::from_code(error_code) {
            if code.code() == SESSION_ID_NOT_FOUND {
                self.id = 0;
            }
            self.epoch = INITIAL_EPOCH;
            return false;
        }
        if self.is_full() {
            self.id = session_id;
            // Without a session (id 0), every fetch is a full one.
            self.epoch = if session_id == 0 { INITIAL_EPOCH } else { 1 };
        } else {
            self.epoch = if self.epoch == i32::MAX {
                1
            } else {
                self.epoch + 1
            };
        }
        true
    }

    /// The request failed (timeout, disconnect): close the session and
    /// start a new one with the next (full) fetch.
    pub(crate) fn on_failure(&mut self) {
        self.epoch = INITIAL_EPOCH;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(offset: i64) -> PartitionFetch {
        PartitionFetch {
            topic_id: [1; 16],
            fetch_offset: offset,
            leader_epoch: 0,
            last_fetched_epoch: -1,
            max_bytes: 100,
        }
    }

    fn wanted(list: &[(i32, i64)]) -> BTreeMap<TopicPartition, PartitionFetch> {
        list.iter()
            .map(|(part, off)| (TopicPartition::new("t", *part), p(*off)))
            .collect()
    }

    #[test]
    fn full_then_incremental_with_changes_and_forgotten() {
        let mut s = FetchSession::default();
        let r = s.build(wanted(&[(0, 10), (1, 20)]));
        assert_eq!((r.session_id, r.epoch, r.partitions.len()), (0, 0, 2));
        assert!(s.on_response(0, 77));
        let r = s.build(wanted(&[(0, 10), (1, 25), (2, 0)]));
        assert_eq!((r.session_id, r.epoch), (77, 1));
        let sent: Vec<i32> = r.partitions.iter().map(|(tp, _)| tp.partition).collect();
        assert_eq!(sent, [1, 2], "only changed and new partitions");
        assert!(r.forgotten.is_empty());
        assert!(s.on_response(0, 77));
        let r = s.build(wanted(&[(2, 0)]));
        assert_eq!(r.epoch, 2);
        assert!(r.partitions.is_empty());
        let forgotten: Vec<i32> = r.forgotten.iter().map(|(tp, _)| tp.partition).collect();
        assert_eq!(forgotten, [0, 1]);
    }

    #[test]
    fn session_errors_fall_back_to_full_fetch() {
        let mut s = FetchSession::default();
        s.build(wanted(&[(0, 1)]));
        s.on_response(0, 5);
        s.build(wanted(&[(0, 1)]));
        // INVALID_FETCH_SESSION_EPOCH: close this session (id kept, epoch 0).
        assert!(!s.on_response(71, 0));
        let r = s.build(wanted(&[(0, 1)]));
        assert_eq!((r.session_id, r.epoch, r.partitions.len()), (5, 0, 1));
        s.on_response(0, 6);
        s.build(wanted(&[(0, 1)]));
        // FETCH_SESSION_ID_NOT_FOUND: start over without an id.
        assert!(!s.on_response(70, 0));
        let r = s.build(wanted(&[(0, 1)]));
        assert_eq!((r.session_id, r.epoch, r.partitions.len()), (0, 0, 1));
        // A failed request also forces a full fetch.
        s.on_response(0, 8);
        s.on_failure();
        assert!(s.is_full());
    }

    #[test]
    fn broker_without_sessions_gets_full_fetches() {
        let mut s = FetchSession::default();
        s.build(wanted(&[(0, 1)]));
        s.on_response(0, 0);
        assert!(s.is_full());
    }

    #[test]
    fn epoch_wraps_to_one() {
        let mut s = FetchSession {
            id: 3,
            epoch: i32::MAX,
            partitions: BTreeMap::new(),
        };
        s.on_response(0, 3);
        assert_eq!(s.epoch, 1);
    }
}
