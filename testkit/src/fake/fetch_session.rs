//! Incremental fetch sessions (KIP-227): the broker remembers a consumer's
//! partitions so later requests send only what changed, and answers only
//! partitions with news.
//!
//! `session_id 0, epoch -1`: a full fetch outside any session. `0, 0`: a
//! full fetch that opens a session. `id, -1`: close `id`, then a full fetch
//! outside any session. `id, n > 0`: an incremental fetch, `n` must be the
//! session's next epoch.

use std::collections::{BTreeMap, HashMap};

use super::errors::Code;

/// Sessions a broker keeps at most (the oldest is evicted beyond).
const MAX_SESSIONS: usize = 1000;

/// What the session remembers of one partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SessionPartition {
    /// Where the consumer fetches from.
    pub fetch_offset: i64,
    /// Its per-partition byte limit.
    pub max_bytes: i32,
    /// Its current leader epoch (-1: unknown).
    pub current_leader_epoch: i32,
    /// Its last fetched epoch (-1: unknown).
    pub last_fetched_epoch: i32,
    /// High watermark last sent (-1: never sent).
    pub sent_hw: i64,
    /// Last stable offset last sent.
    pub sent_lso: i64,
    /// Log start offset last sent.
    pub sent_start: i64,
    /// The topic's id when fetched by id (Fetch v13+), else nil: a deleted
    /// or re-created topic then answers UNKNOWN_TOPIC_ID.
    pub topic_id: uuid::Uuid,
}

/// One session: its next expected epoch and partitions.
#[derive(Debug, Clone, Default)]
pub struct Session {
    /// The epoch the next request must carry.
    pub next_epoch: i32,
    /// Partitions in the session.
    pub partitions: BTreeMap<(String, i32), SessionPartition>,
    created: u64,
}

/// How a request relates to sessions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SessionUse {
    /// A full fetch outside any session.
    Sessionless,
    /// A full fetch that opens a new session.
    New,
    /// An incremental fetch in this session.
    Incremental(i32),
}

/// All brokers' sessions.
#[derive(Debug, Default)]
pub struct FetchSessions {
    sessions: HashMap<(i32, i32), Session>,
    next_id: i32,
    created: u64,
}

impl FetchSessions {
    /// Classifies a request; closes a session on epoch -1.
    pub fn classify(
        &mut self,
        broker: i32,
        session_id: i32,
        epoch: i32,
    ) -> Result<SessionUse, Code> {
        match (session_id, epoch) {
            (0, -1) => Ok(SessionUse::Sessionless),
            (0, 0) => Ok(SessionUse::New),
            (0, _) => Err(Code::InvalidFetchSessionEpoch),
            (id, -1) => {
                self.sessions.remove(&(broker, id));
                Ok(SessionUse::Sessionless)
            }
            (id, 0) => {
                self.sessions.remove(&(broker, id));
                Ok(SessionUse::New)
            }
            (id, e) => match self.sessions.get(&(broker, id)) {
                None => Err(Code::FetchSessionIdNotFound),
                Some(s) if s.next_epoch != e => Err(Code::InvalidFetchSessionEpoch),
                Some(_) => Ok(SessionUse::Incremental(id)),
            },
        }
    }

    /// A copy of a session, to update without committing.
    pub fn get(&self, broker: i32, id: i32) -> Option<Session> {
        self.sessions.get(&(broker, id)).cloned()
    }

    /// Stores `session` under `id` (or a new id when `None`) with its next
    /// epoch advanced; returns the id.
    pub fn commit(&mut self, broker: i32, id: Option<i32>, mut session: Session) -> i32 {
        let id = match id {
            Some(id) => id,
            None => {
                if self.sessions.len() >= MAX_SESSIONS {
                    let oldest = self
                        .sessions
                        .iter()
                        .min_by_key(|(_, s)| s.created)
                        .map(|(k, _)| *k);
                    if let Some(k) = oldest {
                        self.sessions.remove(&k);
                    }
                }
                self.next_id = self.next_id.checked_add(1).unwrap_or(1);
                self.created += 1;
                session.created = self.created;
                self.next_id
            }
        };
        session.next_epoch = session.next_epoch.checked_add(1).unwrap_or(1);
        self.sessions.insert((broker, id), session);
        id
    }

    /// Drops every session of `broker` (it restarted).
    pub fn forget_broker(&mut self, broker: i32) {
        self.sessions.retain(|(b, _), _| *b != broker);
    }

    /// Open sessions on `broker`.
    pub fn count(&self, broker: i32) -> usize {
        self.sessions.keys().filter(|(b, _)| *b == broker).count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn epochs_follow_kip_227() {
        let mut s = FetchSessions::default();
        assert_eq!(s.classify(1, 0, -1), Ok(SessionUse::Sessionless));
        assert_eq!(s.classify(1, 0, 0), Ok(SessionUse::New));
        let id = s.commit(1, None, Session::default());
        assert_eq!(s.classify(1, id, 2), Err(Code::InvalidFetchSessionEpoch));
        assert_eq!(s.classify(1, id, 1), Ok(SessionUse::Incremental(id)));
        assert_eq!(s.classify(2, id, 1), Err(Code::FetchSessionIdNotFound));
        let session = s.get(1, id).unwrap_or_default();
        s.commit(1, Some(id), session);
        assert_eq!(s.classify(1, id, 2), Ok(SessionUse::Incremental(id)));
        assert_eq!(s.classify(1, id, -1), Ok(SessionUse::Sessionless));
        assert_eq!(s.classify(1, id, 2), Err(Code::FetchSessionIdNotFound));
    }
}
