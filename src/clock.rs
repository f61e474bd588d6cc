//! The wall clock in Kafka's unit: milliseconds since the Unix epoch, as
//! record timestamps and retry due times carry it.

use std::time::{SystemTime, UNIX_EPOCH};

/// Milliseconds since the Unix epoch; 0 if the clock reads before it.
pub(crate) fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn now_is_after_2020() {
        // 2020-01-01T00:00:00Z; a clock before it is a broken clock.
        assert!(now_ms() > 1_577_836_800_000);
    }
}
