//! Windowed counts against the real broker (issue #16): a reference
//! computed from the input by Kafka Streams' window rules, shared by the
//! window tests and the side-by-side test with Kafka Streams
//! (`stateful_java.rs`).
//!
//! The rules: a record at `ts` belongs to every window `[start, start +
//! size)` with `start` a multiple of `advance` (tumbling: `advance = size`)
//! and `start <= ts < start + size`; per input partition, in offset order,
//! stream time is the highest timestamp seen so far (this record
//! included), and a window whose `end + grace <= stream time` is closed:
//! the record is dropped from it and counted as late.

use std::collections::BTreeMap;

use purekafka::consumer::IsolationLevel;

use super::*;

/// Window size, advance and grace, in ms.
#[derive(Debug, Clone, Copy)]
pub(super) struct Shape {
    pub size: i64,
    pub advance: i64,
    pub grace: i64,
}

impl Shape {
    /// The starts of the windows holding `ts`, oldest first.
    fn starts(&self, ts: i64) -> Vec<i64> {
        let first = (ts - self.size + self.advance).max(0) / self.advance * self.advance;
        (0..)
            .map(|i| first + i * self.advance)
            .take_while(|s| *s <= ts)
            .filter(|s| ts < s + self.size)
            .collect()
    }
}

/// One input record: partition, key, timestamp.
pub(super) type Timed = (i32, String, i64);

/// `n` records over `keys` keys (a key always in the same of 3
/// partitions), 50 ms apart from `base`, one in ten moved back by up to
/// 20 s: some land in open windows, some past grace. Deterministic.
/// A base timestamp for test input: the start of the hour before the
/// current one (a multiple of every window size the tests use). Recent, so
/// the broker's time retention (7 days by default, checked every 5 minutes)
/// never deletes a test's records mid-run, as it did with a fixed base in
/// 2023.
pub(super) fn recent_base() -> i64 {
    const HOUR: i64 = 3_600_000;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("the clock is after 1970")
        .as_millis() as i64;
    (now / HOUR - 1) * HOUR
}

pub(super) fn timed_input(n: usize, keys: u64, base: i64) -> Vec<Timed> {
    let mut seed: u64 = 0x9E37_79B9_7F4A_7C15;
    (0..n)
        .map(|i| {
            seed = seed
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            let r = seed >> 33;
            let k = r % keys;
            let back = if r.is_multiple_of(10) {
                (r >> 8) as i64 % 20_000
            } else {
                0
            };
            (
                (k % 3) as i32,
                format!("key-{k}"),
                base + i as i64 * 50 - back,
            )
        })
        .collect()
}

/// Writes `input` in order, each record to its partition with its
/// timestamp; values are the record's index.
pub(super) async fn produce_timed(bootstrap: &str, topic: &str, input: &[Timed]) {
    let p = super::producer(bootstrap).await;
    let mut acks = Vec::new();
    for (i, (partition, key, ts)) in input.iter().enumerate() {
        let r = ProducerRecord::new(topic)
            .partition(*partition)
            .key(key.clone())
            .value(i.to_string())
            .timestamp(*ts);
        acks.push(p.send(r).await.unwrap());
    }
    for a in acks {
        a.await.unwrap();
    }
    p.close(Duration::from_secs(10)).await.unwrap();
}

/// What a windowed count emits for `input`: per `key@start` its updates in
/// order (1, 2, ...), and how many (record, window) pairs were late.
pub(super) fn reference(input: &[Timed], shape: Shape) -> (BTreeMap<String, Vec<i64>>, u64) {
    let mut stream_time: BTreeMap<i32, i64> = BTreeMap::new();
    let mut updates: BTreeMap<String, Vec<i64>> = BTreeMap::new();
    let mut late = 0;
    for (partition, key, ts) in input {
        let st = stream_time.entry(*partition).or_insert(i64::MIN);
        *st = (*st).max(*ts);
        for start in shape.starts(*ts) {
            if start + shape.size + shape.grace <= *st {
                late += 1;
                continue;
            }
            let u = updates.entry(format!("{key}@{start}")).or_default();
            u.push(u.len() as i64 + 1);
        }
    }
    (updates, late)
}

/// The `key@start=count` records of `topic` (3 partitions), per
/// `key@start` in output order.
pub(super) async fn written(bootstrap: &str, topic: &str) -> BTreeMap<String, Vec<i64>> {
    let mut m: BTreeMap<String, Vec<i64>> = BTreeMap::new();
    for partition in
        support::read::consume_values(bootstrap, topic, 3, IsolationLevel::ReadUncommitted).await
    {
        for v in partition {
            let (k, n) = v.rsplit_once('=').expect("key@start=count");
            m.entry(k.to_owned()).or_default().push(n.parse().unwrap());
        }
    }
    m
}

/// The last update of each window: its final count.
pub(super) fn finals(updates: &BTreeMap<String, Vec<i64>>) -> BTreeMap<String, i64> {
    updates
        .iter()
        .map(|(k, u)| (k.clone(), *u.last().expect("an update")))
        .collect()
}

#[test]
fn the_reference_follows_the_window_rules() {
    let hop = Shape {
        size: 10,
        advance: 5,
        grace: 0,
    };
    assert_eq!(hop.starts(0), vec![0]);
    assert_eq!(hop.starts(7), vec![0, 5]);
    assert_eq!(hop.starts(10), vec![5, 10]);
    let tumbling = Shape {
        size: 10,
        advance: 10,
        grace: 5,
    };
    assert_eq!(tumbling.starts(19), vec![10]);
    let input: Vec<Timed> = [("a", 0), ("a", 21), ("a", 9), ("b", 12), ("a", 14)]
        .iter()
        .map(|(k, ts)| (0, k.to_string(), *ts))
        .collect();
    let (updates, late) = reference(&input, tumbling);
    // 9 is late (window 0 closed at 15 <= 21); 12 and 14 are in window 10,
    // which closes at 25.
    assert_eq!(late, 1);
    assert_eq!(updates["a@0"], vec![1]);
    assert_eq!(updates["a@10"], vec![1]);
    assert_eq!(updates["a@20"], vec![1]);
    assert_eq!(updates["b@10"], vec![1]);
}

/// A windowed test's set-up: its input (3 partitions) holding
/// `timed_input(n, keys, ..)`, an output topic, an application id, two
/// state dirs (two machines, removed when the test ends), the window shape
/// and the reference computed from the input.
pub(super) struct WindowFixture {
    pub bootstrap: String,
    pub cluster: Cluster,
    pub input: String,
    pub out: String,
    pub app: String,
    pub dirs: [std::path::PathBuf; 2],
    pub shape: Shape,
    pub records: Vec<Timed>,
    /// Per `key@start`, its updates; and the late (record, window) pairs.
    pub expected: BTreeMap<String, Vec<i64>>,
    pub late: u64,
}

impl WindowFixture {
    pub(super) async fn new(
        test: &str,
        shape: Shape,
        n: usize,
        keys: u64,
    ) -> Option<WindowFixture> {
        let (bootstrap, cluster, input) = setup(test, 3).await?;
        let out = format!("{input}-out");
        support::create_topic(&cluster, &out, 3).await;
        let records = timed_input(n, keys, recent_base());
        produce_timed(&bootstrap, &input, &records).await;
        let (expected, late) = reference(&records, shape);
        Some(WindowFixture {
            bootstrap,
            cluster,
            input,
            out,
            app: support::unique_topic(&format!("{test}-app")),
            dirs: [0, 1].map(|_| std::env::temp_dir().join(support::unique_topic(test))),
            shape,
            records,
            expected,
            late,
        })
    }

    /// The shape's windows.
    pub(super) fn windows(&self) -> purekafka::streams::TimeWindows {
        let ms = |v: i64| Duration::from_millis(v as u64);
        purekafka::streams::TimeWindows::of_size_and_grace(
            ms(self.shape.size),
            ms(self.shape.grace),
        )
        .advance_by(ms(self.shape.advance))
    }

    /// The windowed count application on machine `m`: `key@start=count`
    /// updates to `out`, Partition ordering.
    pub(super) fn counting(
        &self,
        m: usize,
        app: &str,
        out: &str,
        (store, on_close): (purekafka::streams::state::StoreSpec, bool),
    ) -> purekafka::streams::Topology {
        let config = config(&self.bootstrap, app)
            .ordering(OrderingMode::Partition)
            .state_dir(&self.dirs[m])
            .build()
            .unwrap();
        let windowed = Streams::topology(config)
            .source(self.input.as_str(), StringDeserializer, StringDeserializer)
            .group_by_key()
            .windowed_by(self.windows());
        let windowed = if on_close {
            windowed.emit_on_window_close(StringDeserializer)
        } else {
            windowed
        };
        windowed
            .count(store, StringSerializer)
            .to_stream()
            .map(|r| {
                let w = r.key.clone().unwrap();
                let k = format!("{}@{}", w.key, w.start);
                let v = format!("{k}={}", r.value);
                Ok(purekafka::streams::Record {
                    key: Some(k),
                    value: v,
                    timestamp: r.timestamp,
                    headers: r.headers,
                    partition: r.partition,
                    offset: r.offset,
                })
            })
            .to(out, StringSerializer, StringSerializer)
    }

    /// Per partition its final stream time, and each key's partition.
    fn stream_times(&self) -> (BTreeMap<i32, i64>, BTreeMap<String, i32>) {
        let mut stream_time = BTreeMap::<i32, i64>::new();
        let mut partition_of = BTreeMap::<String, i32>::new();
        for (p, k, ts) in &self.records {
            let st = stream_time.entry(*p).or_insert(i64::MIN);
            *st = (*st).max(*ts);
            partition_of.insert(k.clone(), *p);
        }
        (stream_time, partition_of)
    }
}

impl Drop for WindowFixture {
    fn drop(&mut self) {
        for dir in &self.dirs {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

/// Hopping windows (10 s every 5 s, 2 s grace) over an input with late
/// records: every window a record falls in counts it, every update equals
/// the reference's, late (record, window) pairs are dropped and counted.
/// Retention (the default, size + grace): the store holds exactly the
/// windows that started less than 12 s of stream time ago, with their
/// final counts, and a second instance restoring the changelog (expired
/// windows were deleted there by tombstones) holds the same.
#[tokio::test]
async fn hopping_windows_count_every_window_and_expire_after_retention() {
    use purekafka::streams::state::StoreSpec;
    use purekafka::streams::Windowed;
    let shape = Shape {
        size: 10_000,
        advance: 5_000,
        grace: 2_000,
    };
    let Some(f) = WindowFixture::new("streams_hopping", shape, 600, 9).await else {
        return;
    };
    let (bootstrap, out, records, expected, late) =
        (&f.bootstrap, &f.out, &f.records, &f.expected, f.late);
    let retention = shape.size + shape.grace;
    assert!(late > 10, "the input has late records ({late})");
    let topology = |m: usize| f.counting(m, &f.app, out, (StoreSpec::persistent("hops"), false));
    // Per partition, the final stream time; a window of key k is kept iff
    // start + retention > the stream time of k's partition.
    let (stream_time, partition_of) = f.stream_times();
    let check = |running: &RunningStreams| {
        let store = running.store::<Windowed<String>, i64>("hops").unwrap();
        let (mut kept, mut expired) = (0, 0);
        for (window, n) in finals(expected) {
            let (key, start) = window.rsplit_once('@').unwrap();
            let start: i64 = start.parse().unwrap();
            let w = Windowed {
                key: key.to_owned(),
                start,
                end: start + shape.size,
            };
            let got = store.get(&w).unwrap();
            if start + retention > stream_time[&partition_of[key]] {
                assert_eq!(got, Some(n), "{window} is within retention");
                kept += 1;
            } else {
                assert_eq!(got, None, "{window} is past retention");
                expired += 1;
            }
        }
        assert!(kept > 0 && expired > 0, "kept {kept}, expired {expired}");
    };
    let running = topology(0).build().start().await.expect("start");
    wait_for(&running, |r| r.metrics().processed >= records.len() as u64).await;
    assert_eq!(running.dropped_late_records(), late);
    check(&running);
    running.shutdown().await.expect("clean shutdown");
    assert_eq!(&written(bootstrap, out).await, expected);

    // Another machine: the store restores from the changelog once a record
    // reaches it. One record per partition at its stream time (a new key,
    // so the expected windows do not change).
    let probes: Vec<Timed> = (0..3)
        .map(|p| (p, "probe".to_owned(), stream_time[&p]))
        .collect();
    produce_timed(bootstrap, &f.input, &probes).await;
    let running = topology(1).build().start().await.expect("start");
    wait_for(&running, |r| r.metrics().processed >= 3).await;
    assert!(running.restored_records() > 0);
    check(&running);
    running.shutdown().await.expect("clean shutdown");
}

/// Emit on window close (suppress until the window closes): tumbling 10 s
/// windows, 5 s grace. Each window is written once, with its final count
/// (the reference's), when stream time reaches its end + grace; windows
/// still open at the end of the input are not written. A second instance
/// (another state.dir) restores the store, emit markers included, and a
/// record per partition an hour later closes the remaining windows: every
/// window of the reference is then written exactly once.
#[tokio::test]
async fn emit_on_window_close_writes_each_window_once_with_its_final_count() {
    use purekafka::streams::state::StoreSpec;
    let shape = Shape {
        size: 10_000,
        advance: 10_000,
        grace: 5_000,
    };
    let Some(f) = WindowFixture::new("streams_on_close", shape, 600, 9).await else {
        return;
    };
    let (bootstrap, out, records, expected, late) =
        (&f.bootstrap, &f.out, &f.records, &f.expected, f.late);
    let topology = |m: usize| f.counting(m, &f.app, out, (StoreSpec::persistent("closed"), true));
    let (stream_time, partition_of) = f.stream_times();
    let once = |finals: &BTreeMap<String, i64>| -> BTreeMap<String, Vec<i64>> {
        finals.iter().map(|(k, n)| (k.clone(), vec![*n])).collect()
    };
    let all = finals(expected);
    let closed: BTreeMap<String, i64> = all
        .iter()
        .filter(|(window, _)| {
            let (key, start) = window.rsplit_once('@').unwrap();
            let start: i64 = start.parse().unwrap();
            start + shape.size + shape.grace <= stream_time[&partition_of[key]]
        })
        .map(|(k, n)| (k.clone(), *n))
        .collect();
    assert!(!closed.is_empty() && closed.len() < all.len());

    let running = topology(0).build().start().await.expect("start");
    wait_for(&running, |r| r.metrics().processed >= records.len() as u64).await;
    assert_eq!(running.dropped_late_records(), late);
    running.shutdown().await.expect("clean shutdown");
    assert_eq!(
        written(bootstrap, out).await,
        once(&closed),
        "the closed windows, once each, with their final counts"
    );

    let flush: Vec<Timed> = (0..3)
        .map(|p| (p, "flush".to_owned(), stream_time[&p] + 3_600_000))
        .collect();
    produce_timed(bootstrap, &f.input, &flush).await;
    let running = topology(1).build().start().await.expect("start");
    wait_for(&running, |r| r.metrics().processed >= 3).await;
    assert!(running.restored_records() > 0);
    running.shutdown().await.expect("clean shutdown");
    assert_eq!(
        written(bootstrap, out).await,
        once(&all),
        "every window once, none twice after the restore"
    );
}
