//! Session windows against the real broker (issue #16): the updates a
//! session count writes, its late-record count and its store, compared
//! with a reference computed from the input by Kafka Streams' session
//! rules.
//!
//! The rules, per input partition in offset order: stream time is the
//! highest timestamp seen so far (this record included); a record at `ts`
//! merges with every session of its key with `end >= ts - gap` and `start
//! <= ts + gap`; if the merged session ends before `stream time - grace -
//! gap` the record is late (dropped, counted); else, when the merge
//! changes a window, each merged session is removed and emitted as a
//! tombstone, then the merged session is emitted with the sum of the
//! merged counts plus one. After each record, sessions with `end +
//! retention <= stream time` (retention `gap + grace`) are deleted.

use std::collections::BTreeMap;

use purekafka::consumer::IsolationLevel;
use purekafka::streams::state::StoreSpec;
use purekafka::streams::{SessionWindows, Windowed};

use super::windows::{produce_timed, recent_base, timed_input, Timed};
use super::*;

/// Per `key@start-end`, its updates in order (`None`: a tombstone); the
/// late records; per partition its sessions left at the end (key, start,
/// end) with their counts.
type Reference = (
    BTreeMap<String, Vec<Option<i64>>>,
    u64,
    BTreeMap<(String, i64, i64), i64>,
);

fn reference(input: &[Timed], gap: i64, grace: i64) -> Reference {
    let mut stream_time: BTreeMap<i32, i64> = BTreeMap::new();
    // Per partition: (key, start, end) -> count.
    let mut sessions: BTreeMap<i32, BTreeMap<(String, i64, i64), i64>> = BTreeMap::new();
    let mut updates: BTreeMap<String, Vec<Option<i64>>> = BTreeMap::new();
    let mut late = 0;
    for (partition, key, ts) in input {
        let st = stream_time.entry(*partition).or_insert(i64::MIN);
        *st = (*st).max(*ts);
        let close = *st - grace - gap;
        let store = sessions.entry(*partition).or_default();
        // The store scans a key's sessions by end: emit tombstones in that
        // order.
        let mut found: Vec<(i64, i64, i64)> = store
            .iter()
            .filter(|((k, s, e), _)| k == key && *e >= ts - gap && *s <= ts + gap)
            .map(|((_, s, e), n)| (*s, *e, *n))
            .collect();
        found.sort_by_key(|(s, e, _)| (*e, *s));
        let start = found.iter().map(|f| f.0).fold(*ts, i64::min);
        let end = found.iter().map(|f| f.1).fold(*ts, i64::max);
        if end < close {
            late += 1;
        } else {
            if (start, end) != (*ts, *ts) {
                for (s, e, _) in &found {
                    store.remove(&(key.clone(), *s, *e));
                    updates
                        .entry(format!("{key}@{s}-{e}"))
                        .or_default()
                        .push(None);
                }
            }
            let n = found.iter().map(|f| f.2).sum::<i64>() + 1;
            store.insert((key.clone(), start, end), n);
            updates
                .entry(format!("{key}@{start}-{end}"))
                .or_default()
                .push(Some(n));
        }
        store.retain(|(_, _, e), _| *e + gap + grace > *st);
    }
    let left = sessions.into_values().flatten().collect();
    (updates, late, left)
}

#[test]
fn the_session_reference_follows_the_rules() {
    let timed = |v: &[(&str, i64)]| -> Vec<Timed> {
        v.iter().map(|(k, ts)| (0, k.to_string(), *ts)).collect()
    };
    let input = timed(&[
        ("a", 0),
        ("a", 5),
        ("a", 22),
        ("a", 14),
        ("a", 2),
        ("b", 60),
    ]);
    // gap 10, grace 20 (retention 30): 0 and 5 merge; 22 is alone (5 <
    // 22 - 10); 14 bridges [0,5] and [22,22]; 2 lands inside [0,22],
    // which is rewritten; b@60 moves stream time to 60, where [0,22]
    // expires (22 + 30 <= 60).
    let (updates, late, left) = reference(&input, 10, 20);
    assert_eq!(late, 0);
    assert_eq!(updates["a@0-0"], vec![Some(1), None]);
    assert_eq!(updates["a@0-5"], vec![Some(2), None]);
    assert_eq!(updates["a@22-22"], vec![Some(1), None]);
    assert_eq!(updates["a@0-22"], vec![Some(4), None, Some(5)]);
    assert_eq!(updates["b@60-60"], vec![Some(1)]);
    assert_eq!(
        left.into_keys().collect::<Vec<_>>(),
        [("b".to_owned(), 60, 60)]
    );
    // a@20 then: alone (the session it would touch expired), ending
    // before close (60 - 20 - 10 = 30): late.
    let more = timed(&[("a", 0), ("b", 60), ("a", 20), ("a", 31)]);
    let (updates, late, _) = reference(&more, 10, 20);
    assert_eq!(late, 1);
    assert_eq!(updates["a@31-31"], vec![Some(1)]);
}

/// The `key@start-end=count|null` records of `topic` (3 partitions), per
/// `key@start-end` in output order.
async fn written(bootstrap: &str, topic: &str) -> BTreeMap<String, Vec<Option<i64>>> {
    let mut m: BTreeMap<String, Vec<Option<i64>>> = BTreeMap::new();
    for partition in
        support::read::consume_values(bootstrap, topic, 3, IsolationLevel::ReadUncommitted).await
    {
        for v in partition {
            let (k, n) = v.rsplit_once('=').expect("key@start-end=count");
            m.entry(k.to_owned()).or_default().push(n.parse().ok());
        }
    }
    m
}

/// 900 records over 40 keys in 3 partitions, 50 ms apart, one in ten up
/// to 20 s late; sessions with a 1 s gap and 2 s grace, counted into a
/// persistent store. Every update and tombstone the application writes is
/// the reference's, in order per session window; the late count is the
/// reference's; the store holds exactly the sessions the reference has
/// left, with their counts, and none of the removed or expired ones.
#[tokio::test]
async fn session_counts_merge_emit_tombstones_and_drop_late_records_as_kafka_streams() {
    let (gap, grace) = (1_000, 2_000);
    let Some((bootstrap, cluster, input)) = setup("streams_sessions", 3).await else {
        return;
    };
    let out = format!("{input}-out");
    support::create_topic(&cluster, &out, 3).await;
    let records = timed_input(900, 40, recent_base());
    produce_timed(&bootstrap, &input, &records).await;
    let (expected, late, left) = reference(&records, gap, grace);
    let merges = expected
        .values()
        .filter(|u| u.iter().any(Option::is_none))
        .count();
    assert!(late > 10, "the input has late records ({late})");
    assert!(merges > 10, "the input merges sessions ({merges})");

    let dir = std::env::temp_dir().join(support::unique_topic("streams_sessions_state"));
    let config = config(&bootstrap, &support::unique_topic("streams_sessions_app"))
        .ordering(OrderingMode::Partition)
        .state_dir(&dir)
        .build()
        .unwrap();
    let ms = |v: i64| Duration::from_millis(v as u64);
    let running = Streams::topology(config)
        .source(input.as_str(), StringDeserializer, StringDeserializer)
        .group_by_key()
        .session_windowed_by(SessionWindows::with_inactivity_gap(ms(gap)).grace(ms(grace)))
        .count(StoreSpec::persistent("sessions"), StringSerializer)
        .to_stream()
        .map(|r| {
            let w = r.key.clone().unwrap();
            let k = format!("{}@{}-{}", w.key, w.start, w.end);
            let n = r.value.map_or("null".to_owned(), |n| n.to_string());
            Ok(purekafka::streams::Record {
                key: Some(k.clone()),
                value: format!("{k}={n}"),
                timestamp: r.timestamp,
                headers: r.headers,
                partition: r.partition,
                offset: r.offset,
            })
        })
        .to(out.as_str(), StringSerializer, StringSerializer)
        .build()
        .start()
        .await
        .expect("start");
    wait_for(&running, |r| r.metrics().processed >= records.len() as u64).await;
    assert_eq!(running.dropped_late_records(), late);
    let store = running
        .store::<Windowed<String>, i64>("sessions")
        .expect("the store");
    for ((key, start, end), n) in &left {
        let w = Windowed {
            key: key.clone(),
            start: *start,
            end: *end,
        };
        assert_eq!(store.get(&w).unwrap(), Some(*n), "{key}@{start}-{end}");
    }
    let mut gone = 0;
    for window in expected.keys() {
        let (key, span) = window.rsplit_once('@').unwrap();
        let (start, end) = span.split_once('-').unwrap();
        let (start, end): (i64, i64) = (start.parse().unwrap(), end.parse().unwrap());
        if !left.contains_key(&(key.to_owned(), start, end)) {
            let w = Windowed {
                key: key.to_owned(),
                start,
                end,
            };
            assert_eq!(
                store.get(&w).unwrap(),
                None,
                "{window} was merged or expired"
            );
            gone += 1;
        }
    }
    assert!(gone > 0 && !left.is_empty());
    running.shutdown().await.expect("clean shutdown");
    assert_eq!(written(&bootstrap, &out).await, expected);
    let _ = std::fs::remove_dir_all(dir);
}
