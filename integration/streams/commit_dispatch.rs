//! High-volume runs under at-least-once commits (issue #16, #22), input
//! arriving throughout (part of it buffered before the start, the rest
//! produced while the application runs), commits every 100 ms. With sync
//! and with async commits a pass-through gets through every record within
//! a bound, every input is in the output at least once, and the group's
//! committed offsets reach the end of every input partition. The cached
//! count (whose commit flushes the record cache, then the producer, while
//! the producer keeps sending) ends with each key's full count. Records
//! held back by a sync commit start as soon as it completes.

use purekafka::streams::state::StoreSpec;
use purekafka::streams::CommitCallback;

use super::*;

/// 7,500 per partition: several times the instance's in-flight cap (4,096)
/// and each task's buffer (2,048), so the 100 ms commits run while a backlog
/// waits, for about ten intervals.
const RECORDS: usize = 30_000;
const PARTITIONS: i32 = 4;
const KEYS: usize = 1_000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_high_volume_pass_through_with_sync_commits_gets_through_every_record() {
    pass_through_under("streams-hv-sync", CommitMode::Sync, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_high_volume_cached_count_with_sync_commits_gets_through_every_record() {
    pass_through_under("streams-hv-count", CommitMode::Sync, true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_high_volume_pass_through_with_async_commits_gets_through_every_record() {
    let callback: CommitCallback = Arc::new(|_| {});
    pass_through_under("streams-hv-async", CommitMode::Async(callback), false).await;
}

/// A sync commit holds starts back during its offset commit's round trip;
/// the records it held back start as soon as it completes, not at the next
/// interval. A backlog, one partition in offset order and a 500 ms
/// interval: every record gets through within a few commits. (When the
/// dispatcher started nothing after the commit, only the records begun
/// between one commit's start and its hold ran: a handful per interval, so
/// thousands of commits for this backlog.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_held_back_by_a_sync_commit_start_as_it_completes() {
    const BACKLOG: usize = 20_000;
    // 10 s of intervals. The backlog took 2-3 commits (a debug build, load
    // 4); with the dispatcher idle after each commit, 41 commits got 10,766
    // records through.
    const MAX_COMMITS: u64 = 20;
    let test = "streams-after-commit";
    let Some((bootstrap, cluster, input)) = setup(test, 1).await else {
        return;
    };
    let out = format!("{input}-out");
    support::create_topic(&cluster, &out, 1).await;
    let app = support::unique_topic(&format!("{test}-app"));
    let inputs = producer(&bootstrap).await;
    send_inputs(&inputs, &input, 0..BACKLOG).await;
    inputs.close(Duration::from_secs(10)).await.expect("close");
    let config = config(&bootstrap, &app)
        .ordering(OrderingMode::Partition)
        .commit_mode(CommitMode::Sync)
        .commit_interval(Duration::from_millis(500))
        .build()
        .unwrap();
    let running = Streams::topology(config)
        .source(input.as_str(), StringDeserializer, StringDeserializer)
        .to(out.as_str(), StringSerializer, StringSerializer)
        .build()
        .start()
        .await
        .expect("start");
    loop {
        let m = running.metrics();
        if m.processed >= BACKLOG as u64 {
            break;
        }
        assert!(!running.is_finished(), "the app stopped early: {m:?}");
        assert!(
            m.commits <= MAX_COMMITS,
            "{} of {BACKLOG} records done after {} commits: records wait for the next \
             interval after a commit: {m:?}",
            m.processed,
            m.commits
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::timeout(Duration::from_secs(60), running.shutdown())
        .await
        .expect("shutdown within a minute")
        .expect("shutdown");
    let outputs = read::read_partition(&cluster, &out, 0).await;
    assert!(
        outputs.len() >= BACKLOG,
        "{} outputs for {BACKLOG} inputs",
        outputs.len()
    );
}

/// Sends inputs `range` (value `i`, key `key-(i % KEYS)`) without waiting
/// for each, then for all of them.
async fn send_inputs(producer: &Producer, topic: &str, range: std::ops::Range<usize>) {
    let mut acks = Vec::with_capacity(range.len());
    for i in range {
        let r = ProducerRecord::new(topic)
            .key(format!("key-{}", i % KEYS))
            .value(i.to_string());
        acks.push(producer.send(r).await.expect("send"));
    }
    for a in acks {
        a.await.expect("input delivered");
    }
}

/// Runs the pass-through (or, `counting`, a cached count per key) under
/// commit `mode`.
async fn pass_through_under(test: &str, mode: CommitMode, counting: bool) {
    let Some((bootstrap, cluster, input)) = setup(test, PARTITIONS).await else {
        return;
    };
    let out = format!("{input}-out");
    support::create_topic(&cluster, &out, PARTITIONS).await;
    let app = support::unique_topic(&format!("{test}-app"));
    let inputs = producer(&bootstrap).await;
    // A backlog before the start, the rest while the application runs.
    send_inputs(&inputs, &input, 0..RECORDS / 4).await;
    let config = config(&bootstrap, &app)
        .ordering(OrderingMode::Key)
        .max_in_flight(1024, 4096)
        .max_buffered_per_task(2048)
        .commit_mode(mode)
        .commit_interval(Duration::from_millis(100))
        .build()
        .unwrap();
    let source =
        Streams::topology(config).source(input.as_str(), StringDeserializer, StringDeserializer);
    let topology = if counting {
        source
            .group_by_key()
            .count(StoreSpec::in_memory("counts"), StringSerializer)
            .to_stream()
            .map(|r| {
                let v = format!("{}={}", r.key.clone().unwrap_or_default(), r.value);
                Ok(r.with_value(v))
            })
            .to(out.as_str(), StringSerializer, StringSerializer)
    } else {
        source.to(out.as_str(), StringSerializer, StringSerializer)
    };
    let running = topology.build().start().await.expect("start");
    send_inputs(&inputs, &input, RECORDS / 4..RECORDS).await;
    inputs.close(Duration::from_secs(10)).await.expect("close");
    wait_for(&running, |r| r.metrics().processed >= RECORDS as u64).await;
    let tps: Vec<TopicPartition> = (0..PARTITIONS)
        .map(|p| TopicPartition::new(input.as_str(), p))
        .collect();
    let mut ends = HashMap::new();
    for tp in &tps {
        ends.insert(
            tp.clone(),
            read::read_partition(&cluster, &tp.topic, tp.partition)
                .await
                .len() as i64,
        );
    }
    // The interval's commits reach the end of every input partition.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let committed = group_committed(&bootstrap, &app, &tps).await;
        let at: HashMap<TopicPartition, i64> = tps
            .iter()
            .map(|tp| (tp.clone(), committed.get(tp).map_or(0, |o| o.offset)))
            .collect();
        if at == ends {
            break;
        }
        assert!(!running.is_finished(), "the app stopped early");
        assert!(
            Instant::now() < deadline,
            "committed {at:?}, input ends {ends:?}: {:?}",
            running.metrics()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::timeout(Duration::from_secs(60), running.shutdown())
        .await
        .expect("shutdown within a minute")
        .expect("shutdown");
    assert_eq!(ends.values().sum::<i64>(), RECORDS as i64);
    let outputs: Vec<String> = {
        let mut v = Vec::new();
        for p in 0..PARTITIONS {
            for r in read::read_partition(&cluster, &out, p).await {
                v.push(String::from_utf8(r.value.unwrap().to_vec()).unwrap());
            }
        }
        v
    };
    if counting {
        // A key's counts go to one partition in order: its last is its total.
        let mut last: HashMap<String, i64> = HashMap::new();
        for o in &outputs {
            let (key, n) = o.split_once('=').expect("key=count");
            last.insert(key.to_owned(), n.parse().unwrap());
        }
        assert_eq!(last.len(), KEYS, "every key counted");
        let short: Vec<_> = last
            .iter()
            .filter(|(_, n)| **n != (RECORDS / KEYS) as i64)
            .take(10)
            .collect();
        assert!(
            short.is_empty(),
            "keys whose final count is not {}: {short:?}",
            RECORDS / KEYS
        );
        return;
    }
    let mut seen = vec![false; RECORDS];
    for o in &outputs {
        seen[o.parse::<usize>().unwrap()] = true;
    }
    let missing: Vec<usize> = (0..RECORDS).filter(|&i| !seen[i]).take(10).collect();
    assert!(
        missing.is_empty(),
        "inputs missing from the output: {missing:?}"
    );
}
