//! The queue workload's checker: the history the clients record, the
//! per-session monotonicity check, and the final comparison that sorts
//! anomalies into classes (see the parent module).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use purekafka::consumer::ConsumerRecord;
#[cfg(test)]
use purekafka::TopicPartition;

/// What happened, and the anomalies per class.
#[derive(Debug, Default)]
pub struct Report {
    pub elapsed: Duration,
    pub sends_acked: u64,
    pub sends_failed: u64,
    pub polls: u64,
    pub polled_records: u64,
    pub txns_committed: u64,
    pub txns_aborted: u64,
    pub txns_unknown: u64,
    /// Committed after the last fault healed.
    pub txns_committed_after_faults: u64,
    pub final_records: u64,
    pub faults: Vec<String>,
    pub lost: Vec<i64>,
    pub duplicates: Vec<i64>,
    pub aborted_reads: Vec<i64>,
    pub non_monotonic: Vec<String>,
    pub inconsistent_offsets: Vec<String>,
    pub unseen: Vec<i64>,
}

impl Report {
    /// Anomalies of every class together.
    pub fn anomalies(&self) -> usize {
        self.lost.len()
            + self.duplicates.len()
            + self.aborted_reads.len()
            + self.non_monotonic.len()
            + self.inconsistent_offsets.len()
            + self.unseen.len()
    }

    /// Up to ten examples of each anomaly class, for a failure message.
    pub fn examples(&self) -> String {
        fn first<T: fmt::Debug>(v: &[T]) -> &[T] {
            &v[..v.len().min(10)]
        }
        format!(
            "lost {:?}\nduplicates {:?}\naborted reads {:?}\nnon-monotonic {:?}\ninconsistent {:?}\nunseen {:?}",
            first(&self.lost),
            first(&self.duplicates),
            first(&self.aborted_reads),
            first(&self.non_monotonic),
            first(&self.inconsistent_offsets),
            first(&self.unseen),
        )
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "jepsen-queue: {:.0}s, ops: {} sends acked ({} failed), {} polls ({} records), \
             {} txns committed ({} after the faults) / {} aborted / {} unknown, final read {} records; \
             faults: {} [{}]; anomalies: lost {} duplicates {} aborted-reads {} \
             non-monotonic {} inconsistent-offsets {} unseen {}",
            self.elapsed.as_secs_f64(),
            self.sends_acked,
            self.sends_failed,
            self.polls,
            self.polled_records,
            self.txns_committed,
            self.txns_committed_after_faults,
            self.txns_aborted,
            self.txns_unknown,
            self.final_records,
            self.faults.len(),
            self.faults.join(", "),
            self.lost.len(),
            self.duplicates.len(),
            self.aborted_reads.len(),
            self.non_monotonic.len(),
            self.inconsistent_offsets.len(),
            self.unseen.len(),
        )
    }
}

/// Everything the clients observed.
#[derive(Default)]
pub(super) struct History {
    /// Plain sends acknowledged: value -> (partition, offset).
    pub(super) acked: HashMap<i64, (i32, i64)>,
    pub(super) sends_failed: u64,
    /// Values of committed transactions, with their acknowledged offsets.
    pub(super) committed: HashMap<i64, (i32, i64)>,
    pub(super) aborted: HashSet<i64>,
    pub(super) txns_committed: u64,
    pub(super) txns_aborted: u64,
    pub(super) txns_unknown: u64,
    /// Values any read_committed reader saw (pollers, txn clients, final).
    pub(super) read_any: HashSet<i64>,
    /// Values the group pollers saw.
    pub(super) read_by_pollers: HashSet<i64>,
    /// (partition, offset) -> value, from acks and reads.
    pub(super) at: HashMap<(i32, i64), i64>,
    pub(super) inconsistent: Vec<String>,
    pub(super) non_monotonic: Vec<String>,
    pub(super) polls: u64,
    pub(super) polled_records: u64,
}

impl History {
    pub(super) fn note_offset(&mut self, p: i32, off: i64, v: i64, who: &str) {
        if off < 0 {
            return;
        }
        if let Some(prev) = self.at.insert((p, off), v) {
            if prev != v {
                self.inconsistent
                    .push(format!("{who}: p{p}@{off} holds {v}, earlier {prev}"));
            }
        }
    }
}

pub(super) type Shared = Arc<Mutex<History>>;

pub(super) fn value_of(r: &ConsumerRecord) -> Option<i64> {
    std::str::from_utf8(r.value.as_deref()?).ok()?.parse().ok()
}

/// Per-partition last offset within one consumer session.
pub(super) struct Session {
    last: HashMap<i32, i64>,
}

impl Session {
    pub(super) fn new() -> Session {
        Session {
            last: HashMap::new(),
        }
    }

    /// Records a poll's records in the history.
    pub(super) fn observe(
        &mut self,
        h: &Shared,
        who: &str,
        records: &[ConsumerRecord],
        poller: bool,
    ) {
        let mut h = h.lock().unwrap();
        h.polls += 1;
        h.polled_records += records.len() as u64;
        for r in records {
            let p = r.partition.partition;
            if let Some(prev) = self.last.insert(p, r.offset) {
                if r.offset <= prev {
                    h.non_monotonic
                        .push(format!("{who}: p{p} offset {} after {prev}", r.offset));
                }
            }
            let Some(v) = value_of(r) else {
                h.inconsistent
                    .push(format!("{who}: p{p}@{} holds no integer", r.offset));
                continue;
            };
            h.note_offset(p, r.offset, v, who);
            h.read_any.insert(v);
            if poller {
                h.read_by_pollers.insert(v);
            }
        }
    }
}

/// The checker: compares what was acknowledged, aborted and read with the
/// final read (`counts`: value -> occurrences) and fills the anomaly lists.
pub(super) fn check(h: &History, counts: &BTreeMap<i64, u32>, report: &mut Report) {
    let must: HashSet<i64> = h.acked.keys().chain(h.committed.keys()).copied().collect();
    report.lost = must
        .iter()
        .filter(|v| !counts.contains_key(v))
        .copied()
        .collect();
    report.duplicates = counts
        .iter()
        .filter(|(_, c)| **c > 1)
        .map(|(v, _)| *v)
        .collect();
    report.aborted_reads = h
        .aborted
        .iter()
        .filter(|v| h.read_any.contains(v) || counts.contains_key(v))
        .copied()
        .collect();
    report.non_monotonic = h.non_monotonic.clone();
    report.inconsistent_offsets = h.inconsistent.clone();
    report.unseen = must
        .iter()
        .filter(|v| counts.contains_key(v) && !h.read_by_pollers.contains(v))
        .copied()
        .collect();
    for list in [
        &mut report.lost,
        &mut report.duplicates,
        &mut report.aborted_reads,
        &mut report.unseen,
    ] {
        list.sort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each anomaly class is detected (the checker can fail).
    #[test]
    fn checker_finds_each_anomaly_class() {
        let h: Shared = Arc::default();
        {
            let mut g = h.lock().unwrap();
            for v in 0..10 {
                g.acked.insert(v, ((v % 2) as i32, v / 2));
            }
            g.committed.insert(100, (0, 50));
            g.aborted.insert(200);
        }
        let rec = |p: i32, off: i64, v: i64| ConsumerRecord {
            partition: TopicPartition::new("q", p),
            offset: off,
            timestamp: 0,
            timestamp_type: purekafka::protocol::records::TimestampType::CreateTime,
            key: None,
            value: Some(v.to_string().into()),
            headers: Vec::new(),
            leader_epoch: None,
        };
        // A poller sees 0..8 except 4, and value 200 (aborted); then
        // partition 0 goes backwards within the session.
        let mut s = Session::new();
        let first: Vec<ConsumerRecord> = (0..8)
            .filter(|v| *v != 4)
            .map(|v| rec((v % 2) as i32, v / 2, v))
            .chain([rec(1, 60, 200)])
            .collect();
        s.observe(&h, "p", &first, true);
        s.observe(&h, "p", &[rec(0, 1, 2)], true);
        // Another reader sees a different value at p0@0.
        Session::new().observe(&h, "x", &[rec(0, 0, 99)], false);
        // Final read: 9 missing (lost), 3 twice (duplicate), 4 present but
        // never polled (unseen), 100 present.
        let counts: BTreeMap<i64, u32> = [
            (0, 1),
            (1, 1),
            (2, 1),
            (3, 2),
            (4, 1),
            (5, 1),
            (6, 1),
            (7, 1),
            (8, 1),
            (100, 1),
        ]
        .into_iter()
        .collect();
        let mut r = Report::default();
        check(&h.lock().unwrap(), &counts, &mut r);
        assert_eq!(r.lost, vec![9]);
        assert_eq!(r.duplicates, vec![3]);
        assert_eq!(r.aborted_reads, vec![200]);
        assert_eq!(r.non_monotonic.len(), 1, "{:?}", r.non_monotonic);
        assert_eq!(
            r.inconsistent_offsets.len(),
            1,
            "{:?}",
            r.inconsistent_offsets
        );
        assert_eq!(r.unseen, vec![4, 8, 100]);
        assert_eq!(r.anomalies(), 1 + 1 + 1 + 1 + 1 + 3);
    }
}
