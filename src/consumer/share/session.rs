//! The share session with one broker (KIP-932), with no I/O: its epoch and
//! the partitions the broker already fetches for it.
//!
//! - Epoch 0 opens a session. Only a ShareFetch may open one, and it may
//!   carry no acknowledgements.
//! - Epochs 1 to `i32::MAX` continue it; each request sent advances the
//!   epoch by one, wrapping from `i32::MAX` to 1. Requests on one
//!   connection are answered in order, so the epoch advances when a
//!   request is queued, and a failed answer resets the session.
//! - Epoch -1 closes it: the broker applies that request's
//!   acknowledgements, then releases every record the member still holds.
//!
//! After the first request, a ShareFetch names only the partitions to add
//! (and those carrying acknowledgements) in `Topics`, and the ones to drop
//! in `ForgottenTopicsData`, as KIP-227 fetch sessions do.
//! See <https://cwiki.apache.org/confluence/display/KAFKA/KIP-932%3A+Queues+for+Kafka>.

use std::collections::BTreeSet;

/// Epoch that opens a share session.
pub(crate) const INITIAL_EPOCH: i32 = 0;
/// Epoch that closes a share session.
pub(crate) const FINAL_EPOCH: i32 = -1;

/// A partition as the share APIs name it: (topic id, partition).
pub(crate) type SessionPartition = ([u8; 16], i32);

/// The client's view of its share session on one broker.
#[derive(Debug, Default)]
pub(crate) struct ShareSession {
    epoch: i32,
    partitions: BTreeSet<SessionPartition>,
}

/// What the next ShareFetch carries.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct FetchPlan {
    /// The request's epoch.
    pub epoch: i32,
    /// Partitions to name in `Topics` (all of them when opening).
    pub add: BTreeSet<SessionPartition>,
    /// Partitions to name in `ForgottenTopicsData`.
    pub forget: BTreeSet<SessionPartition>,
    /// Whether acknowledgements may ride on this request.
    pub may_acknowledge: bool,
}

impl ShareSession {
    /// The current epoch (0: no session yet).
    #[cfg(test)]
    pub(crate) fn epoch(&self) -> i32 {
        self.epoch
    }

    /// Whether a session is open (acknowledgements may be sent).
    pub(crate) fn is_open(&self) -> bool {
        self.epoch > INITIAL_EPOCH
    }

    /// Plans a ShareFetch for `wanted` and advances the session as if it
    /// were sent (call [`reset`](Self::reset) if it fails).
    pub(crate) fn plan_fetch(&mut self, wanted: &BTreeSet<SessionPartition>) -> FetchPlan {
        let opening = self.epoch == INITIAL_EPOCH;
        let plan = if opening {
            FetchPlan {
                epoch: INITIAL_EPOCH,
                add: wanted.clone(),
                forget: BTreeSet::new(),
                may_acknowledge: false,
            }
        } else {
            FetchPlan {
                epoch: self.epoch,
                add: wanted.difference(&self.partitions).copied().collect(),
                forget: self.partitions.difference(wanted).copied().collect(),
                may_acknowledge: true,
            }
        };
        self.partitions = wanted.clone();
        self.advance();
        plan
    }

    /// The epoch for a ShareAcknowledge, advancing the session; `None`
    /// when no session is open (acknowledgements cannot open one).
    pub(crate) fn next_acknowledge(&mut self) -> Option<i32> {
        if !self.is_open() {
            return None;
        }
        let epoch = self.epoch;
        self.advance();
        Some(epoch)
    }

    /// The epoch for the closing request (-1), when a session is open;
    /// the session is then gone.
    pub(crate) fn close(&mut self) -> Option<i32> {
        let open = self.is_open();
        self.reset();
        open.then_some(FINAL_EPOCH)
    }

    /// Forgets the session: the next fetch opens a new one.
    pub(crate) fn reset(&mut self) {
        self.epoch = INITIAL_EPOCH;
        self.partitions.clear();
    }

    fn advance(&mut self) {
        self.epoch = if self.epoch == i32::MAX {
            1
        } else {
            self.epoch + 1
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(ps: &[i32]) -> BTreeSet<SessionPartition> {
        ps.iter().map(|p| ([7; 16], *p)).collect()
    }

    #[test]
    fn opening_fetch_names_everything_and_carries_no_acknowledgements() {
        let mut s = ShareSession::default();
        assert_eq!(s.next_acknowledge(), None, "no session to acknowledge in");
        let plan = s.plan_fetch(&set(&[0, 1]));
        assert_eq!(
            plan,
            FetchPlan {
                epoch: 0,
                add: set(&[0, 1]),
                forget: set(&[]),
                may_acknowledge: false
            }
        );
        assert_eq!(s.epoch(), 1);
    }

    #[test]
    fn later_fetches_name_only_changes_and_epochs_advance() {
        let mut s = ShareSession::default();
        s.plan_fetch(&set(&[0, 1]));
        let plan = s.plan_fetch(&set(&[1, 2]));
        assert_eq!(plan.epoch, 1);
        assert_eq!(plan.add, set(&[2]));
        assert_eq!(plan.forget, set(&[0]));
        assert!(plan.may_acknowledge);
        assert_eq!(s.next_acknowledge(), Some(2));
        let plan = s.plan_fetch(&set(&[1, 2]));
        assert_eq!((plan.epoch, plan.add.len(), plan.forget.len()), (3, 0, 0));
    }

    #[test]
    fn the_epoch_wraps_to_one() {
        let mut s = ShareSession {
            epoch: i32::MAX,
            partitions: set(&[0]),
        };
        assert_eq!(s.next_acknowledge(), Some(i32::MAX));
        assert_eq!(s.epoch(), 1);
    }

    #[test]
    fn reset_reopens_and_close_sends_the_final_epoch_once() {
        let mut s = ShareSession::default();
        assert_eq!(s.close(), None, "nothing to close");
        s.plan_fetch(&set(&[0]));
        s.reset();
        let plan = s.plan_fetch(&set(&[0]));
        assert_eq!(
            (plan.epoch, plan.add, plan.may_acknowledge),
            (0, set(&[0]), false)
        );
        assert_eq!(s.close(), Some(FINAL_EPOCH));
        assert_eq!(s.close(), None);
        assert_eq!(s.epoch(), 0);
    }
}
