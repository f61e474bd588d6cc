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
}
