//! A sink's own state, as a state machine: its request slots
//! (`max.in.flight.requests.per.connection`), the quota throttle its broker
//! asked for (KIP-219), and where the next drain starts, so partitions take
//! turns at the head of a request. No I/O and no clock: the sink's task
//! passes the time in and does what [`SinkState::on_wake`] answers.

use std::time::Duration;

use tokio::time::Instant;

/// Longest pause honoured after one throttled response; a longer throttle
/// is met by the next response asking again.
pub(super) const MAX_THROTTLE: Duration = Duration::from_secs(5);
/// While closing, an idle sink looks again this often, to notice when the
/// last record (maybe another broker's) is done.
const CLOSING_POLL: Duration = Duration::from_millis(100);

/// One broker's sink.
#[derive(Debug)]
pub(super) struct SinkState {
    max_in_flight: usize,
    in_flight: usize,
    /// Until when the broker asked us not to send.
    throttled_until: Option<Instant>,
    /// Where the next drain starts in the broker's partition list.
    rotation: usize,
}

/// What the sink's task does next.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Step {
    /// The broker mutes our connection until then anyway; waiting here
    /// keeps requests from timing out in its queue.
    Throttled(Instant),
    /// Every request slot is busy; a response frees one and wakes the task.
    Full,
    /// Drain a request's worth of batches starting at partition `start`;
    /// a slot is taken for it.
    Drain { start: usize },
}

impl SinkState {
    pub fn new(max_in_flight: usize) -> SinkState {
        SinkState {
            max_in_flight,
            in_flight: 0,
            throttled_until: None,
            rotation: 0,
        }
    }

    /// The task woke (new batches, a response, a timer).
    pub fn on_wake(&mut self, now: Instant) -> Step {
        if let Some(until) = self.throttled_until.filter(|t| *t > now) {
            return Step::Throttled(until);
        }
        if self.in_flight >= self.max_in_flight {
            return Step::Full;
        }
        self.in_flight += 1;
        let start = self.rotation;
        self.rotation = self.rotation.wrapping_add(1);
        Step::Drain { start }
    }

    /// A request's slot is free again: its answer was handled, or the drain
    /// found nothing to send.
    pub fn on_done(&mut self) {
        self.in_flight = self.in_flight.saturating_sub(1);
    }

    /// A response asked for `time` without requests (quota throttling).
    pub fn on_throttle(&mut self, now: Instant, time: Duration) {
        let until = now + time.min(MAX_THROTTLE);
        self.throttled_until = Some(self.throttled_until.map_or(until, |old| old.max(until)));
    }

    /// Until when an idle task may sleep (unless woken): the next linger,
    /// backoff or expiry deadline, and while closing at most a short poll.
    pub fn idle_until(
        &self,
        now: Instant,
        next_wake: Option<Instant>,
        closing: bool,
    ) -> Option<Instant> {
        let poll = closing.then(|| now + CLOSING_POLL);
        match (next_wake, poll) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_take_slots_up_to_max_in_flight_and_rotate_their_start() {
        let now = Instant::now();
        let mut s = SinkState::new(2);
        assert_eq!(s.on_wake(now), Step::Drain { start: 0 });
        assert_eq!(s.on_wake(now), Step::Drain { start: 1 });
        assert_eq!(s.on_wake(now), Step::Full);
        s.on_done();
        assert_eq!(s.on_wake(now), Step::Drain { start: 2 });
    }

    /// KIP-219: the sink waits out the longest throttle asked for, each
    /// capped at five seconds.
    #[test]
    fn a_throttle_mutes_the_sink_for_the_longest_time_asked_capped() {
        let now = Instant::now();
        let mut s = SinkState::new(5);
        s.on_throttle(now, Duration::from_millis(300));
        s.on_throttle(now, Duration::from_millis(100));
        let until = now + Duration::from_millis(300);
        assert_eq!(s.on_wake(now), Step::Throttled(until));
        assert_eq!(s.on_wake(until), Step::Drain { start: 0 });
        s.on_throttle(until, Duration::from_secs(60));
        assert_eq!(s.on_wake(until), Step::Throttled(until + MAX_THROTTLE));
    }

    #[test]
    fn an_idle_sink_sleeps_until_its_next_deadline_and_polls_while_closing() {
        let now = Instant::now();
        let s = SinkState::new(5);
        let later = now + Duration::from_secs(3);
        assert_eq!(s.idle_until(now, None, false), None);
        assert_eq!(s.idle_until(now, Some(later), false), Some(later));
        assert_eq!(
            s.idle_until(now, Some(later), true),
            Some(now + CLOSING_POLL)
        );
        assert_eq!(s.idle_until(now, None, true), Some(now + CLOSING_POLL));
    }
}
