//! The consumer fetch path against the real broker: reading everything once
//! in order, seeks and offset lookups, pause/resume, offset reset errors,
//! read_committed over transactions written by the Java client, and a topic
//! deleted while being consumed.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use purekafka::{
    AutoOffsetReset, Cluster, Consumer, ConsumerConfig, ConsumerRecord, Error, IsolationLevel,
    TopicPartition,
};
use tokio::time::Instant;

use crate::support::{self, records};

fn config(bootstrap: &str) -> purekafka::ConsumerConfigBuilder {
    ConsumerConfig::builder()
        .bootstrap_servers(bootstrap)
        .client(|c| {
            c.client_id("purekafka-it-consumer")
                .request_timeout(Duration::from_secs(10))
                .default_api_timeout(Duration::from_secs(30))
        })
        .fetch_max_wait(Duration::from_millis(200))
}

/// Connects a consumer with `config`.
async fn connect(config: purekafka::ConsumerConfigBuilder) -> Consumer {
    Consumer::connect(config.build().expect("config"))
        .await
        .expect("consumer")
}

/// Connects a consumer with `config` and assigns it partition 0 of `topic`.
async fn assigned_partition_0(
    config: purekafka::ConsumerConfigBuilder,
    topic: &str,
) -> (Consumer, TopicPartition) {
    let consumer = connect(config).await;
    let tp = TopicPartition::new(topic, 0);
    consumer.assign(vec![tp.clone()]);
    (consumer, tp)
}

/// Polls until `n` records arrived (or 30 s passed) and returns them.
async fn poll_n(consumer: &Consumer, n: usize) -> Vec<ConsumerRecord> {
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut out = Vec::new();
    while out.len() < n {
        assert!(
            Instant::now() < deadline,
            "only {} of {n} records within 30 s",
            out.len()
        );
        out.extend(
            consumer
                .poll(Duration::from_millis(500))
                .await
                .expect("poll"),
        );
    }
    out
}

fn value(r: &ConsumerRecord) -> String {
    String::from_utf8(r.value.clone().unwrap_or_default().to_vec()).expect("utf-8 value")
}

async fn setup(test: &str, partitions: i32) -> Option<(String, Cluster, String)> {
    let bootstrap = support::bootstrap(test)?;
    let cluster = Cluster::connect(support::config(&bootstrap))
        .await
        .expect("connect");
    let topic = support::unique_topic(test);
    support::create_topic(&cluster, &topic, partitions).await;
    Some((bootstrap, cluster, topic))
}

#[tokio::test]
async fn assign_and_poll_read_everything_once_in_order() {
    let Some((bootstrap, cluster, topic)) = setup("consumer-once", 2).await else {
        return;
    };
    let counts = [(0, 300usize), (1, 120)];
    for (p, n) in counts {
        // Several batches per partition, so fetches span batch boundaries.
        for chunk in records::values(&format!("p{p}-"), n).chunks(50) {
            records::produce(&cluster, &topic, p, chunk).await;
        }
    }
    let consumer = connect(
        config(&bootstrap)
            .auto_offset_reset(AutoOffsetReset::Earliest)
            .max_poll_records(37),
    )
    .await;
    let tps: Vec<TopicPartition> = (0..2)
        .map(|p| TopicPartition::new(topic.as_str(), p))
        .collect();
    consumer.assign(tps.clone());
    let mut seen: BTreeMap<i32, Vec<ConsumerRecord>> = BTreeMap::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut total = 0;
    while total < 420 {
        assert!(Instant::now() < deadline, "only {total} records");
        let batch = consumer
            .poll(Duration::from_millis(500))
            .await
            .expect("poll");
        assert!(
            batch.len() <= 37,
            "max.poll.records exceeded: {}",
            batch.len()
        );
        total += batch.len();
        for r in batch {
            seen.entry(r.partition.partition).or_default().push(r);
        }
    }
    for (p, n) in counts {
        let got = &seen[&p];
        assert_eq!(got.len(), n, "partition {p}");
        for (i, r) in got.iter().enumerate() {
            assert_eq!(r.offset, i as i64, "partition {p} in order, no gaps");
            assert_eq!(value(r), format!("p{p}-{i}"));
            assert_eq!(r.key.as_deref(), Some(format!("k{p}").as_bytes()));
            assert_eq!(r.topic(), topic);
            assert!(r.leader_epoch.is_some());
        }
        let tp = &tps[p as usize];
        assert_eq!(consumer.position(tp).await.expect("position"), n as i64);
        assert_eq!(consumer.lag(tp), Some(0));
    }
    let more = consumer
        .poll(Duration::from_millis(700))
        .await
        .expect("poll");
    assert!(more.is_empty(), "nothing is read twice: {more:?}");
    // New data after the consumer caught up arrives through the session,
    // here read as a Stream.
    records::produce(&cluster, &topic, 1, &records::values("late-", 3)).await;
    let mut stream = consumer.stream();
    let mut late = Vec::new();
    for _ in 0..3 {
        let next = std::future::poll_fn(|cx| {
            futures_core::Stream::poll_next(std::pin::Pin::new(&mut stream), cx)
        });
        let r = tokio::time::timeout(Duration::from_secs(30), next)
            .await
            .expect("a record within 30 s")
            .expect("stream open")
            .expect("record");
        late.push(r.offset);
    }
    assert_eq!(late, [120, 121, 122]);
    assert_eq!(consumer.position(&tps[1]).await.expect("position"), 123);
}

#[tokio::test]
async fn small_fetch_sizes_prefetch_in_bounded_steps_without_loss() {
    let Some((bootstrap, cluster, topic)) = setup("consumer-small-fetch", 1).await else {
        return;
    };
    for chunk in records::values("payload-with-some-length-", 400).chunks(40) {
        records::produce(&cluster, &topic, 0, chunk).await;
    }
    // 1 KiB per partition and fetch: every response ends inside a batch
    // (or holds exactly one oversized batch, KIP-74), and the buffer bound
    // stops prefetching while the application is slow.
    let (consumer, tp) = assigned_partition_0(
        config(&bootstrap)
            .auto_offset_reset(AutoOffsetReset::Earliest)
            .max_partition_fetch_bytes(1024)
            .fetch_max_bytes(1024)
            .max_poll_records(7),
        &topic,
    )
    .await;
    let first = poll_n(&consumer, 1).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let rest = poll_n(&consumer, 400 - first.len()).await;
    let offsets: Vec<i64> = first.iter().chain(&rest).map(|r| r.offset).collect();
    assert_eq!(offsets, (0..400).collect::<Vec<i64>>());
    assert_eq!(consumer.position(&tp).await.expect("position"), 400);
}

#[tokio::test]
async fn seeks_and_offset_lookups_are_exact() {
    let Some((bootstrap, cluster, topic)) = setup("consumer-seek", 1).await else {
        return;
    };
    let base = records::now_ms() - 60_000;
    let data: Vec<(i64, String)> = (0..10)
        .map(|i| (base + i * 1000, format!("v{i}")))
        .collect();
    records::produce(&cluster, &topic, 0, &data[..4]).await;
    records::produce(&cluster, &topic, 0, &data[4..]).await;
    let (consumer, tp) = assigned_partition_0(config(&bootstrap), &topic).await;

    // auto.offset.reset=latest (the default): the position is the end.
    assert_eq!(consumer.position(&tp).await.expect("position"), 10);
    let begin = consumer
        .beginning_offsets(std::slice::from_ref(&tp))
        .await
        .expect("begin");
    let end = consumer
        .end_offsets(std::slice::from_ref(&tp))
        .await
        .expect("end");
    assert_eq!((begin[&tp], end[&tp]), (0, 10));

    let found = consumer
        .offsets_for_times(HashMap::from([(tp.clone(), base + 3_500)]))
        .await
        .expect("offsets_for_times");
    let hit = found[&tp].expect("a record at or after the time");
    assert_eq!((hit.offset, hit.timestamp), (4, base + 4_000));
    let exact = consumer
        .offsets_for_times(HashMap::from([(tp.clone(), base + 7_000)]))
        .await
        .expect("offsets_for_times");
    assert_eq!(exact[&tp].map(|o| o.offset), Some(7));
    let none = consumer
        .offsets_for_times(HashMap::from([(tp.clone(), base + 3_600_000)]))
        .await
        .expect("offsets_for_times");
    assert_eq!(none[&tp], None);

    consumer.seek(&tp, 7).expect("seek");
    let got = poll_n(&consumer, 3).await;
    assert_eq!(got.iter().map(|r| r.offset).collect::<Vec<_>>(), [7, 8, 9]);
    assert_eq!(got[0].timestamp, base + 7_000);

    consumer
        .seek_to_beginning(std::slice::from_ref(&tp))
        .expect("seek_to_beginning");
    assert_eq!(consumer.position(&tp).await.expect("position"), 0);
    let got = poll_n(&consumer, 10).await;
    assert_eq!(value(&got[0]), "v0");
    assert_eq!(got.len(), 10);

    consumer.seek(&tp, 2).expect("seek");
    consumer
        .seek_to_end(std::slice::from_ref(&tp))
        .expect("seek_to_end");
    assert_eq!(consumer.position(&tp).await.expect("position"), 10);
    assert!(consumer
        .poll(Duration::from_millis(500))
        .await
        .expect("poll")
        .is_empty());
    records::produce(&cluster, &topic, 0, &records::values("after-end-", 1)).await;
    let got = poll_n(&consumer, 1).await;
    assert_eq!((got[0].offset, value(&got[0])), (10, "after-end-0".into()));

    let other = TopicPartition::new(topic.as_str(), 5);
    assert!(matches!(
        consumer.seek(&other, 0),
        Err(Error::NotAssigned { .. })
    ));
}

#[tokio::test]
async fn paused_partitions_are_not_returned_until_resumed() {
    let Some((bootstrap, cluster, topic)) = setup("consumer-pause", 2).await else {
        return;
    };
    for p in 0..2 {
        records::produce(&cluster, &topic, p, &records::values(&format!("p{p}-"), 20)).await;
    }
    let consumer = connect(config(&bootstrap).auto_offset_reset(AutoOffsetReset::Earliest)).await;
    let (p0, p1) = (
        TopicPartition::new(topic.as_str(), 0),
        TopicPartition::new(topic.as_str(), 1),
    );
    consumer.assign(vec![p0.clone(), p1.clone()]);
    consumer.pause(std::slice::from_ref(&p0)).expect("pause");
    assert_eq!(consumer.paused(), vec![p0.clone()]);
    let got = poll_n(&consumer, 20).await;
    assert!(
        got.iter().all(|r| r.partition == p1),
        "only p1 while p0 is paused"
    );
    // More polls: still nothing from p0.
    for _ in 0..2 {
        let more = consumer
            .poll(Duration::from_millis(400))
            .await
            .expect("poll");
        assert!(more.is_empty(), "{more:?}");
    }
    consumer.resume(std::slice::from_ref(&p0)).expect("resume");
    assert!(consumer.paused().is_empty());
    let got = poll_n(&consumer, 20).await;
    assert!(got.iter().all(|r| r.partition == p0));
    assert_eq!(got.last().map(|r| r.offset), Some(19));
}

#[tokio::test]
async fn offset_reset_none_is_a_typed_error_naming_the_partition() {
    let Some((bootstrap, cluster, topic)) = setup("consumer-reset-none", 1).await else {
        return;
    };
    records::produce(&cluster, &topic, 0, &records::values("v", 5)).await;
    let (consumer, tp) = assigned_partition_0(
        config(&bootstrap).auto_offset_reset(AutoOffsetReset::None),
        &topic,
    )
    .await;
    match consumer.poll(Duration::from_secs(5)).await {
        Err(Error::NoOffset { partition }) => assert_eq!(partition, tp),
        other => panic!("expected NoOffset, got {other:?}"),
    }
    consumer.seek(&tp, 1_000).expect("seek");
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        assert!(Instant::now() < deadline, "no OffsetOutOfRange within 20 s");
        match consumer.poll(Duration::from_millis(500)).await {
            Ok(records) => assert!(records.is_empty()),
            Err(e @ Error::OffsetOutOfRange { .. }) => {
                assert!(
                    e.to_string().contains(&format!("{tp}")) && e.to_string().contains("1000"),
                    "{e}"
                );
                break;
            }
            Err(e) => panic!("expected OffsetOutOfRange, got {e}"),
        }
    }
    // Seeking to a valid offset recovers.
    consumer.seek(&tp, 3).expect("seek");
    let got = poll_n(&consumer, 2).await;
    assert_eq!(got[0].offset, 3);
}

/// Runs the Java TransactionalMessageCopier: copies `input` to `output` in
/// transactions of 10 records, aborting about one in three at random.
async fn java_transactional_copy(bootstrap: &str, input: &str, output: &str, n: usize) {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/kafka");
    let mut child = tokio::process::Command::new(script)
        .args([
            "tool",
            "org.apache.kafka.tools.TransactionalMessageCopier",
            "--broker-list",
            bootstrap,
            "--input-topic",
            input,
            "--input-partition",
            "0",
            "--output-topic",
            output,
            "--transactional-id",
            &format!("{output}-txn"),
            "--consumer-group",
            &format!("{output}-group"),
            "--transaction-size",
            "10",
            "--max-messages",
            &n.to_string(),
            "--enable-random-aborts",
        ])
        .env(support::java::QUICK_JIT.0, support::java::QUICK_JIT.1)
        .kill_on_drop(true)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn scripts/kafka tool");
    let status = tokio::time::timeout(Duration::from_secs(120), child.wait())
        .await
        .expect("TransactionalMessageCopier finished within 120 s")
        .expect("wait");
    assert!(status.success(), "TransactionalMessageCopier: {status}");
}

async fn read_to_end(bootstrap: &str, topic: &str, isolation: IsolationLevel) -> Vec<String> {
    let (consumer, tp) = assigned_partition_0(
        config(bootstrap)
            .auto_offset_reset(AutoOffsetReset::Earliest)
            .isolation_level(isolation),
        topic,
    )
    .await;
    let end = consumer
        .end_offsets(std::slice::from_ref(&tp))
        .await
        .expect("end")[&tp];
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut values = Vec::new();
    while consumer.position(&tp).await.expect("position") < end {
        assert!(Instant::now() < deadline, "did not reach offset {end}");
        for r in consumer
            .poll(Duration::from_millis(500))
            .await
            .expect("poll")
        {
            values.push(value(&r));
        }
    }
    values
}

#[tokio::test]
async fn read_committed_hides_transactions_aborted_by_the_java_client() {
    if !support::real_broker_only(
        "read_committed_hides_transactions_aborted_by_the_java_client",
        "the timing this test needs: the Java copier's aborted batches reach the log only \
         when sent before the abort, and the fake answers the transaction calls so fast \
         that Java often aborts them unsent, leaving nothing for read_committed to hide",
    ) {
        return;
    }
    let Some((bootstrap, cluster, input)) = setup("consumer-txn-in", 1).await else {
        return;
    };
    let output = support::unique_topic("consumer-txn-out");
    support::create_topic(&cluster, &output, 1).await;
    let n = 300;
    for chunk in records::values("m", n).chunks(100) {
        records::produce(&cluster, &input, 0, chunk).await;
    }
    java_transactional_copy(&bootstrap, &input, &output, n).await;

    let committed = read_to_end(&bootstrap, &output, IsolationLevel::ReadCommitted).await;
    let mut sorted = committed.clone();
    sorted.sort();
    let mut expected: Vec<String> = (0..n).map(|i| format!("m{i}")).collect();
    expected.sort();
    assert_eq!(
        sorted, expected,
        "read_committed: every input record exactly once, nothing aborted"
    );

    let uncommitted = read_to_end(&bootstrap, &output, IsolationLevel::ReadUncommitted).await;
    assert!(
        uncommitted.len() > n,
        "read_uncommitted also returns aborted copies ({} records)",
        uncommitted.len()
    );
    for v in &expected {
        assert!(uncommitted.contains(v));
    }
}

#[tokio::test]
async fn deleted_topic_is_a_typed_error_not_a_hang() {
    let Some((bootstrap, cluster, topic)) = setup("consumer-deleted", 1).await else {
        return;
    };
    records::produce(&cluster, &topic, 0, &records::values("v", 5)).await;
    let (consumer, _) = assigned_partition_0(
        config(&bootstrap).auto_offset_reset(AutoOffsetReset::Earliest),
        &topic,
    )
    .await;
    assert_eq!(poll_n(&consumer, 5).await.len(), 5);
    records::delete_topic(&cluster, &topic).await;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        assert!(
            Instant::now() < deadline,
            "no error within 30 s of deleting {topic}"
        );
        match consumer.poll(Duration::from_millis(500)).await {
            Ok(records) => assert!(records.is_empty(), "{records:?}"),
            Err(Error::UnknownPartition {
                topic: t,
                partition,
            }) => {
                assert_eq!((t.as_str(), partition), (topic.as_str(), 0));
                break;
            }
            Err(e) => panic!("expected UnknownPartition, got {e}"),
        }
    }
}

/// A poll that fails at once (here: the consumer is closed; likewise a
/// membership ended for good) still lets the runtime run other tasks, so
/// an application loop that retries it cannot hold its thread: on a
/// one-thread runtime, a timer task fires while the loop polls.
#[tokio::test]
async fn a_loop_retrying_a_poll_that_fails_at_once_lets_other_tasks_run() {
    let Some(bootstrap) = support::bootstrap("consumer-closed-poll-loop") else {
        return;
    };
    let consumer = connect(config(&bootstrap)).await;
    consumer.close().await.expect("close");
    let fired = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let timer = {
        let fired = fired.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(20)).await;
            fired.store(true, std::sync::atomic::Ordering::SeqCst);
        })
    };
    let mut failed_polls = 0u64;
    while !fired.load(std::sync::atomic::Ordering::SeqCst) {
        match consumer.poll(Duration::from_secs(1)).await {
            Err(Error::Closed) => failed_polls += 1,
            other => panic!("a closed consumer's poll: {other:?}"),
        }
        assert!(
            failed_polls < 10_000_000,
            "{failed_polls} failed polls and the timer task never ran: poll never yields"
        );
    }
    timer.await.expect("timer task");
}
