//! How much room the consumer's record buffers keep between fills.
//!
//! A buffer that is shrunk as soon as it drains and grown again by the next
//! fetch response pays a reallocation (and a copy of its records) for
//! every response: measured on the pass-through benchmark (issue #22), this
//! grow-and-shrink cycle was the largest allocation site per record. A
//! buffer instead keeps room for twice what recent fills needed, a decaying
//! maximum that rises at once and falls by a sixteenth per fill, so a
//! backlog's peak is given back after a few dozen smaller fills (#17) while
//! steady traffic reuses one allocation.

/// A decaying maximum of the records a buffer held after a fill.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct RecentPeak(usize);

impl RecentPeak {
    /// Notes a fill that left `len` records: the peak rises to it at once,
    /// else falls by a sixteenth.
    pub(crate) fn fill(&mut self, len: usize) {
        self.0 = len.max(self.0 - self.0 / 16);
    }

    /// The room worth keeping: twice the recent peak, at least `floor`.
    pub(crate) fn room(&self, floor: usize) -> usize {
        self.0.saturating_mul(2).max(floor)
    }

    /// What a buffer of `capacity` should shrink to, if anything: only once
    /// it holds more than twice the room, and then to the room. Shrinking as
    /// soon as the capacity passed the room reallocated the buffer at nearly
    /// every fill while the peak decayed (a sixteenth per fill), which cost
    /// more than the grow-and-shrink cycle the room replaced.
    pub(crate) fn shrink_target(&self, capacity: usize, floor: usize) -> Option<usize> {
        let room = self.room(floor);
        (capacity > room.saturating_mul(2)).then_some(room)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rises_at_once_and_decays_by_fills() {
        let mut p = RecentPeak::default();
        assert_eq!(p.room(8), 8);
        p.fill(1000);
        assert_eq!(p.room(8), 2000);
        // Steady fills of the same size keep the room.
        p.fill(900);
        assert_eq!(p.room(8), 2 * 938);
        p.fill(1000);
        assert_eq!(p.room(8), 2000);
        // Empty fills give it back, a sixteenth at a time.
        for _ in 0..200 {
            p.fill(0);
        }
        // (A sixteenth of less than 16 is nothing: 15 records stay.)
        assert_eq!(p.room(8), 30, "{p:?}");
        assert_eq!(p.room(1024), 1024);
    }

    #[test]
    fn a_decaying_peak_shrinks_a_buffer_a_few_times_not_at_every_fill() {
        let mut p = RecentPeak::default();
        p.fill(1000);
        let mut capacity = p.room(0);
        let mut shrinks = 0;
        for _ in 0..200 {
            p.fill(0);
            if let Some(to) = p.shrink_target(capacity, 0) {
                capacity = to;
                shrinks += 1;
            }
        }
        // 2,000 down to a room of 30: each shrink at least halves it.
        assert!(shrinks <= 7, "{shrinks} shrinks over 200 fills");
        assert!(
            capacity <= 2 * p.room(0),
            "kept {capacity}, room {}",
            p.room(0)
        );
        // Steady fills never shrink.
        let mut q = RecentPeak::default();
        for _ in 0..100 {
            q.fill(500);
            assert_eq!(q.shrink_target(q.room(0), 0), None);
        }
    }
}
