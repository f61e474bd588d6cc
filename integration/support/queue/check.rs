//! The queue workload's checker: the history the clients record and the
//! final comparison that sorts anomalies into the classes of the Jepsen
//! Kafka workload (`jepsen.tests.kafka`: poll-skip, int-poll-skip,
//! nonmonotonic-poll, int-nonmonotonic-poll, nonmonotonic-send,
//! int-nonmonotonic-send, duplicate, lost, aborted-read, unseen), plus
//! inconsistent offsets and "info" transactions seen both ways.
//!
//! The version order of a partition is the final read_committed read: its
//! records in offset order. A value's index there says where it sits among
//! the committed values, so the offsets taken by transaction markers and
//! aborted batches never count as a skip.
//!
//! "Info" transactions are those whose outcome the client could not learn
//! (the commit or abort call failed without saying which). Their values may
//! be visible or not, but never both ways: all of them or none in the final
//! read, and none read by anyone if the final read lacks them.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use purekafka::consumer::ConsumerRecord;

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
    /// Unknown-outcome transactions found committed (all values visible).
    pub txns_unknown_visible: u64,
    /// Committed after the last fault healed.
    pub txns_committed_after_faults: u64,
    pub final_records: u64,
    /// Faults the plan fired; each must appear in `faults`.
    pub faults_planned: usize,
    /// The faults injected.
    pub faults: Vec<String>,
    /// Through the proxy: frames relayed and frames dropped by faults.
    pub proxy_frames: Option<(u64, u64)>,
    /// What each transactional client did, and the transactional group's
    /// committed offsets at the end: the context of a thin run.
    pub txn_clients: Vec<String>,
    /// The group pollers' failed polls: each distinct error, how often.
    pub poll_errors: Vec<String>,
    /// Acknowledged, committed or read by someone, yet absent from the final
    /// read.
    pub lost: Vec<i64>,
    /// Values at more than one (partition, offset).
    pub duplicates: Vec<i64>,
    /// Values of aborted transactions seen by a read_committed reader.
    pub aborted_reads: Vec<i64>,
    /// Successive polls of one session jumped over committed values.
    pub poll_skips: Vec<String>,
    /// One poll jumped over committed values.
    pub int_poll_skips: Vec<String>,
    /// Successive polls of one session went back or repeated an offset.
    pub nonmonotonic_polls: Vec<String>,
    /// One poll went back or repeated an offset.
    pub int_nonmonotonic_polls: Vec<String>,
    /// A producer's later send sits before its earlier send in the log.
    pub nonmonotonic_sends: Vec<String>,
    /// The same, within one transaction.
    pub int_nonmonotonic_sends: Vec<String>,
    /// One offset, two values.
    pub inconsistent_offsets: Vec<String>,
    /// In the final read, never delivered to the group pollers.
    pub unseen: Vec<i64>,
    /// Unknown-outcome transactions visible in part, or read by someone and
    /// absent from the final read.
    pub info_both_ways: Vec<String>,
    /// Input offsets the consume-transform-produce check covered (below the
    /// transactional group's final committed offsets).
    pub ctp_checked: u64,
    /// Consume-transform-produce: an input offset below the transactional
    /// group's committed offset that no committed transaction consumed, or
    /// one a committed transaction consumed at or past it.
    pub ctp_skips: Vec<String>,
    /// Consume-transform-produce: an input offset consumed by two committed
    /// transactions.
    pub ctp_duplicates: Vec<String>,
}

impl Report {
    /// Anomalies of every class together.
    pub fn anomalies(&self) -> usize {
        self.classes().iter().map(|(_, n)| n).sum()
    }

    /// Each class's name and count, in the order the report prints them.
    pub fn classes(&self) -> [(&'static str, usize); 14] {
        [
            ("lost", self.lost.len()),
            ("duplicate", self.duplicates.len()),
            ("aborted-read", self.aborted_reads.len()),
            ("poll-skip", self.poll_skips.len()),
            ("int-poll-skip", self.int_poll_skips.len()),
            ("nonmonotonic-poll", self.nonmonotonic_polls.len()),
            ("int-nonmonotonic-poll", self.int_nonmonotonic_polls.len()),
            ("nonmonotonic-send", self.nonmonotonic_sends.len()),
            ("int-nonmonotonic-send", self.int_nonmonotonic_sends.len()),
            ("inconsistent-offsets", self.inconsistent_offsets.len()),
            ("unseen", self.unseen.len()),
            ("info-both-ways", self.info_both_ways.len()),
            ("ctp-skip", self.ctp_skips.len()),
            ("ctp-duplicate", self.ctp_duplicates.len()),
        ]
    }

    /// Up to ten examples of each anomaly class, for a failure message.
    pub fn examples(&self) -> String {
        fn first<T: fmt::Debug>(v: &[T]) -> &[T] {
            &v[..v.len().min(10)]
        }
        format!(
            "lost {:?}\nduplicate {:?}\naborted-read {:?}\npoll-skip {:?}\nint-poll-skip {:?}\n\
             nonmonotonic-poll {:?}\nint-nonmonotonic-poll {:?}\nnonmonotonic-send {:?}\n\
             int-nonmonotonic-send {:?}\ninconsistent-offsets {:?}\nunseen {:?}\ninfo-both-ways {:?}\n\
             ctp-skip {:?}\nctp-duplicate {:?}",
            first(&self.lost),
            first(&self.duplicates),
            first(&self.aborted_reads),
            first(&self.poll_skips),
            first(&self.int_poll_skips),
            first(&self.nonmonotonic_polls),
            first(&self.int_nonmonotonic_polls),
            first(&self.nonmonotonic_sends),
            first(&self.int_nonmonotonic_sends),
            first(&self.inconsistent_offsets),
            first(&self.unseen),
            first(&self.info_both_ways),
            first(&self.ctp_skips),
            first(&self.ctp_duplicates),
        )
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "jepsen-queue: {:.0}s, ops: {} sends acked ({} failed), {} polls ({} records), \
             {} txns committed ({} after the faults) / {} aborted / {} unknown ({} found visible), \
             final read {} records ({} input offsets in the consume-transform-produce check); \
             faults: {} of {} planned [{}]; anomalies:",
            self.elapsed.as_secs_f64(),
            self.sends_acked,
            self.sends_failed,
            self.polls,
            self.polled_records,
            self.txns_committed,
            self.txns_committed_after_faults,
            self.txns_aborted,
            self.txns_unknown,
            self.txns_unknown_visible,
            self.final_records,
            self.ctp_checked,
            self.faults.len(),
            self.faults_planned,
            self.faults.join(", "),
        )?;
        for (name, n) in self.classes() {
            write!(f, " {name} {n}")?;
        }
        if let Some((relayed, dropped)) = self.proxy_frames {
            write!(f, "; proxy: {relayed} frames relayed, {dropped} dropped")?;
        }
        if !self.poll_errors.is_empty() {
            write!(f, "; failed polls: {}", self.poll_errors.join("; "))?;
        }
        if !self.txn_clients.is_empty() {
            write!(
                f,
                "; transactional clients: {}",
                self.txn_clients.join("; ")
            )?;
        }
        Ok(())
    }
}

/// One record a consumer session returned.
#[derive(Clone, Debug)]
pub(super) struct Read {
    pub(super) who: Arc<str>,
    pub(super) session: u64,
    pub(super) poll: u64,
    pub(super) partition: i32,
    pub(super) offset: i64,
    pub(super) value: i64,
}

/// One send, in the order its producer made it.
#[derive(Clone, Debug)]
pub(super) struct Sent {
    pub(super) producer: Arc<str>,
    /// The transaction it belongs to (a history-wide number), if any.
    pub(super) txn: Option<u64>,
    pub(super) partition: i32,
    pub(super) value: i64,
}

/// The input records one transaction consumed: (partition, offset).
pub(super) type Consumed = Vec<(i32, i64)>;

/// Everything the clients observed.
#[derive(Default)]
pub(super) struct History {
    /// Plain sends acknowledged: value -> (partition, offset).
    pub(super) acked: HashMap<i64, (i32, i64)>,
    pub(super) sends_failed: u64,
    /// Values of committed transactions, with their acknowledged offsets.
    pub(super) committed: HashMap<i64, (i32, i64)>,
    pub(super) aborted: HashSet<i64>,
    /// The values of each transaction whose outcome is unknown.
    pub(super) info: Vec<Vec<i64>>,
    pub(super) txns_committed: u64,
    pub(super) txns_aborted: u64,
    pub(super) txns_unknown: u64,
    /// Transactions begun, to number them.
    pub(super) txns: u64,
    /// Values any read_committed reader saw (pollers, txn clients, final).
    pub(super) read_any: HashSet<i64>,
    /// Values the group pollers saw.
    pub(super) read_by_pollers: HashSet<i64>,
    /// (partition, offset) -> value, from acks and reads.
    pub(super) at: HashMap<(i32, i64), i64>,
    pub(super) inconsistent: Vec<String>,
    /// Every record read, in the order each session read them.
    pub(super) reads: Vec<Read>,
    /// Every send, in each producer's order.
    pub(super) sends: Vec<Sent>,
    /// The input each committed transaction consumed.
    pub(super) consumed_committed: Vec<Consumed>,
    /// Each unknown-outcome transaction's values and consumed input.
    pub(super) consumed_info: Vec<(Vec<i64>, Consumed)>,
    /// The transactional group's committed offsets at the end.
    pub(super) txn_group_committed: HashMap<i32, i64>,
    /// Each transactional client's own account, as it stopped.
    pub(super) txn_clients: Vec<String>,
    pub(super) sessions: u64,
    pub(super) polls: u64,
    pub(super) polled_records: u64,
    /// The group pollers' failed polls, by poller and error (see
    /// [`History::poll_failed`]).
    pub(super) poll_errors: BTreeMap<String, u64>,
}

/// Distinct poll errors kept; later new ones are only counted under one
/// entry, so a run of varied errors cannot grow the history without bound.
const POLL_ERRORS_KEPT: usize = 20;

impl History {
    /// A group poller's poll failed with `e`.
    pub(super) fn poll_failed(&mut self, who: &str, e: &purekafka::Error) {
        let mut text = format!("{who}: {e}");
        if self.poll_errors.len() >= POLL_ERRORS_KEPT && !self.poll_errors.contains_key(&text) {
            text = "(other errors)".to_owned();
        }
        *self.poll_errors.entry(text).or_default() += 1;
    }

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

    /// A new transaction's number.
    pub(super) fn begin_txn(&mut self) -> u64 {
        self.txns += 1;
        self.txns
    }

    /// Records a send in its producer's order.
    pub(super) fn sent(&mut self, producer: &Arc<str>, txn: Option<u64>, p: i32, v: i64) {
        self.sends.push(Sent {
            producer: producer.clone(),
            txn,
            partition: p,
            value: v,
        });
    }
}

pub(super) type Shared = Arc<Mutex<History>>;

pub(super) fn value_of(r: &ConsumerRecord) -> Option<i64> {
    std::str::from_utf8(r.value.as_deref()?).ok()?.parse().ok()
}

/// One consumer session: a run of polls with no rebalance or seek between.
/// Its number is taken at its first poll.
pub(super) struct Session {
    id: Option<u64>,
}

impl Session {
    pub(super) fn new() -> Session {
        Session { id: None }
    }

    /// Records a poll's records in the history.
    pub(super) fn observe(
        &mut self,
        h: &Shared,
        who: &str,
        records: &[ConsumerRecord],
        poller: bool,
    ) {
        let rows: Vec<(i32, i64, Option<i64>)> = records
            .iter()
            .map(|r| (r.partition.partition, r.offset, value_of(r)))
            .collect();
        self.observe_rows(&mut h.lock().unwrap(), who, &rows, poller);
    }

    /// [`observe`](Self::observe) on `(partition, offset, value)` rows.
    pub(super) fn observe_rows(
        &mut self,
        h: &mut History,
        who: &str,
        rows: &[(i32, i64, Option<i64>)],
        poller: bool,
    ) {
        let session = *self.id.get_or_insert_with(|| {
            h.sessions += 1;
            h.sessions
        });
        h.polls += 1;
        h.polled_records += rows.len() as u64;
        let poll = h.polls;
        let who: Arc<str> = who.into();
        for &(p, off, v) in rows {
            let Some(v) = v else {
                h.inconsistent
                    .push(format!("{who}: p{p}@{off} holds no integer"));
                continue;
            };
            h.note_offset(p, off, v, &who);
            h.read_any.insert(v);
            if poller {
                h.read_by_pollers.insert(v);
            }
            h.reads.push(Read {
                who: who.clone(),
                session,
                poll,
                partition: p,
                offset: off,
                value: v,
            });
        }
    }
}

/// The final read: partition -> (offset, value) in offset order.
pub(super) type FinalLog = BTreeMap<i32, Vec<(i64, i64)>>;

/// Where each value of the final read sits: value -> (partition, index).
fn positions(log: &FinalLog) -> HashMap<i64, (i32, usize)> {
    let mut at = HashMap::new();
    for (p, records) in log {
        for (i, (_, v)) in records.iter().enumerate() {
            at.entry(*v).or_insert((*p, i));
        }
    }
    at
}

/// The checker: compares what was acknowledged, sent, aborted and read with
/// the final read, and fills the anomaly lists.
pub(super) fn check(h: &History, log: &FinalLog, report: &mut Report) {
    let pos = positions(log);
    let mut counts: HashMap<i64, u32> = HashMap::new();
    for (_, v) in log.values().flatten() {
        *counts.entry(*v).or_insert(0) += 1;
    }
    report.final_records = counts.values().map(|c| u64::from(*c)).sum();

    let info: HashSet<i64> = h.info.iter().flatten().copied().collect();
    // Read by a read_committed reader: committed, unless it was aborted
    // (an aborted read, its own class).
    let must: HashSet<i64> = h
        .acked
        .keys()
        .chain(h.committed.keys())
        .chain(h.read_any.iter().filter(|v| !info.contains(v)))
        .filter(|v| !h.aborted.contains(v))
        .copied()
        .collect();
    report.lost = must
        .iter()
        .filter(|v| !counts.contains_key(v))
        .copied()
        .collect();

    let mut places: HashMap<i64, HashSet<(i32, i64)>> = HashMap::new();
    for ((p, off), v) in &h.at {
        places.entry(*v).or_default().insert((*p, *off));
    }
    for (p, records) in log {
        for (off, v) in records {
            places.entry(*v).or_default().insert((*p, *off));
        }
    }
    report.duplicates = places
        .iter()
        .filter(|(v, at)| at.len() > 1 || counts.get(v).is_some_and(|c| *c > 1))
        .map(|(v, _)| *v)
        .collect();

    report.aborted_reads = h
        .aborted
        .iter()
        .filter(|v| h.read_any.contains(v) || counts.contains_key(v))
        .copied()
        .collect();
    report.inconsistent_offsets = h.inconsistent.clone();
    report.unseen = counts
        .keys()
        .filter(|v| !h.read_by_pollers.contains(v))
        .copied()
        .collect();

    check_polls(h, log, &pos, report);
    check_sends(h, &pos, report);
    check_info(h, &counts, report);
    check_consumed(h, log, &counts, report);

    for list in [
        &mut report.lost,
        &mut report.duplicates,
        &mut report.aborted_reads,
        &mut report.unseen,
    ] {
        list.sort();
    }
}

/// poll-skip and nonmonotonic-poll, across polls of a session and within
/// one poll (the `int-` classes).
fn check_polls(h: &History, log: &FinalLog, pos: &HashMap<i64, (i32, usize)>, r: &mut Report) {
    // (session, partition) -> the previous read.
    let mut last: HashMap<(u64, i32), &Read> = HashMap::new();
    for read in &h.reads {
        let Some(prev) = last.insert((read.session, read.partition), read) else {
            continue;
        };
        let same_poll = prev.poll == read.poll;
        let p = read.partition;
        if read.offset <= prev.offset {
            let list = if same_poll {
                &mut r.int_nonmonotonic_polls
            } else {
                &mut r.nonmonotonic_polls
            };
            list.push(format!(
                "{}: p{p} offset {} (value {}) after {} (value {})",
                read.who, read.offset, read.value, prev.offset, prev.value
            ));
            continue;
        }
        let (Some(&(pp, i)), Some(&(np, j))) = (pos.get(&prev.value), pos.get(&read.value)) else {
            continue;
        };
        if pp != p || np != p || j <= i + 1 {
            continue;
        }
        let skipped: Vec<i64> = log
            .get(&p)
            .map(|records| records[i + 1..j].iter().map(|(_, v)| *v).collect())
            .unwrap_or_default();
        let list = if same_poll {
            &mut r.int_poll_skips
        } else {
            &mut r.poll_skips
        };
        list.push(format!(
            "{}: p{p} read {} then {}, skipping {skipped:?}",
            read.who, prev.value, read.value
        ));
    }
}

/// nonmonotonic-send: a producer's sends to one partition must sit in the
/// log in the order it made them (`int-` when both are in one transaction).
fn check_sends(h: &History, pos: &HashMap<i64, (i32, usize)>, r: &mut Report) {
    // (producer, partition) -> (index, value, txn) of the previous send.
    let mut last: HashMap<(&str, i32), (usize, i64, Option<u64>)> = HashMap::new();
    for s in &h.sends {
        let Some(&(p, i)) = pos.get(&s.value) else {
            continue;
        };
        if p != s.partition {
            r.inconsistent_offsets.push(format!(
                "{}: {} sent to p{} found in p{p}",
                s.producer, s.value, s.partition
            ));
            continue;
        }
        if let Some((pi, pv, ptxn)) = last.insert((&s.producer, p), (i, s.value, s.txn)) {
            if i <= pi {
                let list = if s.txn.is_some() && s.txn == ptxn {
                    &mut r.int_nonmonotonic_sends
                } else {
                    &mut r.nonmonotonic_sends
                };
                list.push(format!(
                    "{}: p{p} sent {pv} then {}, found at indexes {pi} then {i}",
                    s.producer, s.value
                ));
            }
        }
    }
}

/// Unknown-outcome transactions: all values visible or none, and none read
/// by anyone when the final read lacks them.
fn check_info(h: &History, counts: &HashMap<i64, u32>, r: &mut Report) {
    for values in &h.info {
        let visible: Vec<i64> = values
            .iter()
            .filter(|v| counts.contains_key(v))
            .copied()
            .collect();
        if visible.len() == values.len() && !values.is_empty() {
            r.txns_unknown_visible += 1;
            continue;
        }
        let read: Vec<i64> = values
            .iter()
            .filter(|v| h.read_any.contains(v) && !counts.contains_key(v))
            .copied()
            .collect();
        if !visible.is_empty() || !read.is_empty() {
            r.info_both_ways.push(format!(
                "txn {values:?}: in the final read {visible:?}, read but not in it {read:?}"
            ));
        }
    }
}

/// Consume-transform-produce: every input offset below the transactional
/// group's final committed offset was consumed by exactly one committed
/// transaction (an unknown-outcome one counts when its values are
/// visible), and none at or past it.
fn check_consumed(h: &History, log: &FinalLog, counts: &HashMap<i64, u32>, r: &mut Report) {
    let mut times: HashMap<(i32, i64), u32> = HashMap::new();
    let committed_info = h
        .consumed_info
        .iter()
        .filter(|(values, _)| !values.is_empty() && values.iter().all(|v| counts.contains_key(v)));
    for consumed in h
        .consumed_committed
        .iter()
        .chain(committed_info.map(|(_, c)| c))
    {
        for at in consumed {
            *times.entry(*at).or_insert(0) += 1;
        }
    }
    for (p, records) in log {
        let end = h.txn_group_committed.get(p).copied().unwrap_or(0);
        for (off, v) in records.iter().filter(|(off, _)| *off < end) {
            r.ctp_checked += 1;
            match times.get(&(*p, *off)).copied().unwrap_or(0) {
                0 => r.ctp_skips.push(format!(
                    "p{p}@{off} (value {v}) is below the group's offset {end} \
                     and in no committed transaction"
                )),
                1 => {}
                n => r.ctp_duplicates.push(format!(
                    "p{p}@{off} (value {v}) consumed by {n} committed transactions"
                )),
            }
        }
    }
    let mut beyond: Vec<&(i32, i64)> = times
        .keys()
        .filter(|(p, off)| *off >= h.txn_group_committed.get(p).copied().unwrap_or(0))
        .collect();
    beyond.sort();
    for (p, off) in beyond {
        r.ctp_skips.push(format!(
            "p{p}@{off} consumed by a committed transaction, yet the group's offset is below it"
        ));
    }
}

#[cfg(test)]
mod tests;
