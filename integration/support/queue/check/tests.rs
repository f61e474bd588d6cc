//! Crafted histories: a clean one the checker passes, and for each anomaly
//! class the clean one with that anomaly added, which the checker must
//! report in that class and no other.

use super::*;

const WRITER: &str = "writer-0";
const TXN: &str = "txn-0";

/// The final log's rows of partition `p` from index `from` to `to`.
fn rows(log: &FinalLog, p: i32, from: usize, to: usize) -> Vec<(i32, i64, Option<i64>)> {
    log[&p][from..to]
        .iter()
        .map(|(off, v)| (p, *off, Some(*v)))
        .collect()
}

/// A writer's 6 acknowledged sends (p0: 0, 2, 4; p1: 1, 3, 5), a committed
/// transaction (10 at p0@3, 11 at p1@3), an aborted one (20 at p0@5), an
/// unknown-outcome one found committed (30 at p0@7, 31 at p1@5) and one
/// found aborted (32, never read); the input those transactions consumed;
/// a poller that reads everything in two polls, and the final read.
fn clean() -> (History, FinalLog) {
    let mut h = History::default();
    let mut log = FinalLog::new();
    let w: Arc<str> = WRITER.into();
    for v in 0..6 {
        let (p, off) = ((v % 2) as i32, v / 2);
        h.sent(&w, None, p, v);
        h.acked.insert(v, (p, off));
        h.note_offset(p, off, v, "ack");
        log.entry(p).or_default().push((off, v));
    }
    let t: Arc<str> = TXN.into();
    let txn = h.begin_txn();
    for (v, p) in [(10, 0), (11, 1)] {
        h.sent(&t, Some(txn), p, v);
        h.committed.insert(v, (p, 3));
        h.note_offset(p, 3, v, "txn-ack");
        log.entry(p).or_default().push((3, v));
    }
    h.txns_committed += 1;
    // Markers at offset 4 of both partitions.
    let txn = h.begin_txn();
    h.sent(&t, Some(txn), 0, 20);
    h.aborted.insert(20);
    h.txns_aborted += 1;
    // Marker at p0@6.
    let txn = h.begin_txn();
    h.sent(&t, Some(txn), 0, 30);
    h.sent(&t, Some(txn), 1, 31);
    h.info.push(vec![30, 31]);
    h.txns_unknown += 1;
    log.entry(0).or_default().push((7, 30));
    log.entry(1).or_default().push((5, 31));
    let txn = h.begin_txn();
    h.sent(&t, Some(txn), 1, 32);
    h.info.push(vec![32]);
    h.txns_unknown += 1;

    // The transactional group consumed p0@0, p0@1 and p1@0 in the
    // committed transaction and p1@1 in the unknown one found committed
    // (p1@2 in the other, not counted), and ended at offset 2 of both.
    h.consumed_committed.push(vec![(0, 0), (0, 1), (1, 0)]);
    h.consumed_info.push((vec![30, 31], vec![(1, 1)]));
    h.consumed_info.push((vec![32], vec![(1, 2)]));
    h.txn_group_committed = [(0, 2), (1, 2)].into_iter().collect();

    // Poll 2 crosses the markers and the aborted batch of p0 (3 -> 7).
    let mut s = Session::new();
    let first = [rows(&log, 0, 0, 2), rows(&log, 1, 0, 2)].concat();
    s.observe_rows(&mut h, "poller-0", &first, true);
    let second = [rows(&log, 0, 2, 5), rows(&log, 1, 2, 5)].concat();
    s.observe_rows(&mut h, "poller-0", &second, true);
    let all = [rows(&log, 0, 0, 5), rows(&log, 1, 0, 5)].concat();
    Session::new().observe_rows(&mut h, "final", &all, false);
    (h, log)
}

fn run(h: &History, log: &FinalLog) -> Report {
    let mut r = Report::default();
    check(h, log, &mut r);
    r
}

/// `class` fired `n` times, and no other class fired.
fn only(r: &Report, class: &str, n: usize) {
    for (name, count) in r.classes() {
        if name == class {
            assert_eq!(count, n, "{class}:\n{}", r.examples());
        } else {
            assert_eq!(count, 0, "{name} fired besides {class}:\n{}", r.examples());
        }
    }
}

/// A poller in a session of its own reads `rows`, one poll per slice.
fn poll_fresh(h: &mut History, polls: &[&[(i32, i64, Option<i64>)]]) {
    let mut s = Session::new();
    for rows in polls {
        s.observe_rows(h, "poller-1", rows, true);
    }
}

#[test]
fn a_clean_history_has_no_anomaly() {
    let (h, log) = clean();
    let r = run(&h, &log);
    assert_eq!(r.anomalies(), 0, "{}", r.examples());
    assert_eq!(r.final_records, 10);
    assert_eq!(r.txns_unknown_visible, 1, "30 and 31 visible, 32 not");
    assert_eq!(r.ctp_checked, 4, "p0@0, p0@1, p1@0, p1@1");
}

#[test]
fn poll_skip_fires_when_successive_polls_jump_over_a_value() {
    let (mut h, log) = clean();
    poll_fresh(&mut h, &[&[(0, 0, Some(0))], &[(0, 2, Some(4))]]);
    let r = run(&h, &log);
    only(&r, "poll-skip", 1);
    assert!(
        r.poll_skips[0].contains("skipping [2]"),
        "{:?}",
        r.poll_skips
    );
}

#[test]
fn int_poll_skip_fires_when_one_poll_jumps_over_a_value() {
    let (mut h, log) = clean();
    poll_fresh(&mut h, &[&[(1, 0, Some(1)), (1, 3, Some(11))]]);
    let r = run(&h, &log);
    only(&r, "int-poll-skip", 1);
    assert!(r.int_poll_skips[0].contains("skipping [3, 5]"));
}

#[test]
fn nonmonotonic_poll_fires_when_a_later_poll_goes_back() {
    let (mut h, log) = clean();
    poll_fresh(&mut h, &[&[(0, 1, Some(2))], &[(0, 1, Some(2))]]);
    let r = run(&h, &log);
    only(&r, "nonmonotonic-poll", 1);
}

#[test]
fn int_nonmonotonic_poll_fires_when_one_poll_goes_back() {
    let (mut h, log) = clean();
    poll_fresh(&mut h, &[&[(0, 1, Some(2)), (0, 0, Some(0))]]);
    let r = run(&h, &log);
    only(&r, "int-nonmonotonic-poll", 1);
}

#[test]
fn nonmonotonic_send_fires_when_a_later_send_sits_earlier() {
    let (mut h, mut log) = clean();
    let w: Arc<str> = "writer-1".into();
    h.sent(&w, None, 1, 40);
    h.sent(&w, None, 1, 41);
    h.acked.insert(40, (1, 7));
    h.acked.insert(41, (1, 6));
    log.entry(1).or_default().extend([(6, 41), (7, 40)]);
    poll_fresh(&mut h, &[&[(1, 6, Some(41)), (1, 7, Some(40))]]);
    let r = run(&h, &log);
    only(&r, "nonmonotonic-send", 1);
}

#[test]
fn int_nonmonotonic_send_fires_within_one_transaction() {
    let (mut h, mut log) = clean();
    let t: Arc<str> = TXN.into();
    let txn = h.begin_txn();
    h.sent(&t, Some(txn), 1, 50);
    h.sent(&t, Some(txn), 1, 51);
    h.committed.insert(50, (1, 7));
    h.committed.insert(51, (1, 6));
    log.entry(1).or_default().extend([(6, 51), (7, 50)]);
    poll_fresh(&mut h, &[&[(1, 6, Some(51)), (1, 7, Some(50))]]);
    let r = run(&h, &log);
    only(&r, "int-nonmonotonic-send", 1);
}

#[test]
fn duplicate_fires_when_a_value_sits_at_two_offsets() {
    let (mut h, mut log) = clean();
    log.entry(1).or_default().push((6, 3));
    poll_fresh(&mut h, &[&[(1, 6, Some(3))]]);
    let r = run(&h, &log);
    only(&r, "duplicate", 1);
    assert_eq!(r.duplicates, vec![3]);
}

#[test]
fn lost_fires_for_an_acked_or_read_value_missing_at_the_end() {
    let (mut h, log) = clean();
    let w: Arc<str> = WRITER.into();
    h.sent(&w, None, 0, 6);
    h.acked.insert(6, (0, 8));
    poll_fresh(&mut h, &[&[(1, 9, Some(70))]]);
    let r = run(&h, &log);
    only(&r, "lost", 2);
    assert_eq!(r.lost, vec![6, 70]);
}

#[test]
fn aborted_read_fires_when_a_reader_sees_an_aborted_value() {
    let (mut h, log) = clean();
    poll_fresh(&mut h, &[&[(0, 5, Some(20))]]);
    let r = run(&h, &log);
    only(&r, "aborted-read", 1);
    assert_eq!(r.aborted_reads, vec![20]);
}

#[test]
fn unseen_fires_for_a_value_the_pollers_never_got() {
    let (mut h, mut log) = clean();
    let w: Arc<str> = WRITER.into();
    h.sent(&w, None, 0, 6);
    h.acked.insert(6, (0, 8));
    log.entry(0).or_default().push((8, 6));
    let r = run(&h, &log);
    only(&r, "unseen", 1);
    assert_eq!(r.unseen, vec![6]);
}

#[test]
fn info_both_ways_fires_for_a_half_visible_or_vanished_unknown_transaction() {
    let (mut h, mut log) = clean();
    let t: Arc<str> = TXN.into();
    // Half visible: 60 in the final read, 61 not.
    let txn = h.begin_txn();
    h.sent(&t, Some(txn), 0, 60);
    h.sent(&t, Some(txn), 1, 61);
    h.info.push(vec![60, 61]);
    log.entry(0).or_default().push((8, 60));
    // Read by a poller, absent at the end.
    let txn = h.begin_txn();
    h.sent(&t, Some(txn), 1, 62);
    h.info.push(vec![62]);
    poll_fresh(&mut h, &[&[(0, 8, Some(60))], &[(1, 7, Some(62))]]);
    let r = run(&h, &log);
    only(&r, "info-both-ways", 2);
}

#[test]
fn inconsistent_offsets_fire_when_one_offset_holds_two_values() {
    let (mut h, mut log) = clean();
    // Another reader sees 4 at p0@1, where 2 sits; 4 is then also at two
    // offsets, a duplicate.
    poll_fresh(&mut h, &[&[(0, 1, Some(4))]]);
    let r = run(&h, &log);
    assert_eq!(r.inconsistent_offsets.len(), 1, "{}", r.examples());
    assert_eq!(r.duplicates, vec![4]);
    assert_eq!(r.anomalies(), 2, "{}", r.examples());
    // A value found in another partition than the one it was sent to.
    let (mut h, _) = clean();
    let w: Arc<str> = "writer-1".into();
    h.sent(&w, None, 0, 42);
    log.entry(1).or_default().push((6, 42));
    poll_fresh(&mut h, &[&[(1, 6, Some(42))]]);
    let r = run(&h, &log);
    only(&r, "inconsistent-offsets", 1);
}

#[test]
fn ctp_skip_fires_for_input_below_the_group_offset_in_no_committed_transaction() {
    let (mut h, log) = clean();
    h.txn_group_committed.insert(0, 3);
    let r = run(&h, &log);
    only(&r, "ctp-skip", 1);
    assert!(r.ctp_skips[0].contains("p0@2"), "{:?}", r.ctp_skips);
    // An unknown-outcome transaction whose values are not visible did not
    // commit: what it consumed (p1@2) is not covered.
    let (mut h, log) = clean();
    h.txn_group_committed.insert(1, 3);
    only(&run(&h, &log), "ctp-skip", 1);
    // A committed transaction consumed past the group's final offset.
    let (mut h, log) = clean();
    h.consumed_committed.push(vec![(1, 2)]);
    only(&run(&h, &log), "ctp-skip", 1);
}

#[test]
fn ctp_duplicate_fires_for_input_in_two_committed_transactions() {
    let (mut h, log) = clean();
    h.consumed_committed.push(vec![(0, 1)]);
    let r = run(&h, &log);
    only(&r, "ctp-duplicate", 1);
    assert!(
        r.ctp_duplicates[0].contains("p0@1"),
        "{:?}",
        r.ctp_duplicates
    );
}
