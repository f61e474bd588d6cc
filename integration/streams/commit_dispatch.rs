//! High-volume pass-through under at-least-once commits (issue #16, #22):
//! the runtime goes on starting records while an interval's commit waits
//! for its flushes and acknowledgements, with input arriving throughout
//! (part of it buffered before the start, the rest produced while the
//! application runs). With sync and with async commits the application
//! gets through every record within a bound, every input is in the output
//! at least once, and the group's committed offsets reach the end of
//! every input partition.

use purekafka::streams::CommitCallback;

use super::*;

const RECORDS: usize = 60_000;
const PARTITIONS: i32 = 4;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_high_volume_pass_through_with_sync_commits_gets_through_every_record() {
    pass_through_under("streams-hv-sync", CommitMode::Sync).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_high_volume_pass_through_with_async_commits_gets_through_every_record() {
    let callback: CommitCallback = Arc::new(|_| {});
    pass_through_under("streams-hv-async", CommitMode::Async(callback)).await;
}

/// Sends inputs `range` (value `i`, key `key-(i % 1000)`) without waiting
/// for each, then for all of them.
async fn send_inputs(producer: &Producer, topic: &str, range: std::ops::Range<usize>) {
    let mut acks = Vec::with_capacity(range.len());
    for i in range {
        let r = ProducerRecord::new(topic)
            .key(format!("key-{}", i % 1000))
            .value(i.to_string());
        acks.push(producer.send(r).await.expect("send"));
    }
    for a in acks {
        a.await.expect("input delivered");
    }
}

async fn pass_through_under(test: &str, mode: CommitMode) {
    let Some((bootstrap, cluster, input)) = setup(test, PARTITIONS).await else {
        return;
    };
    let out = format!("{input}-out");
    support::create_topic(&cluster, &out, PARTITIONS).await;
    let app = support::unique_topic(&format!("{test}-app"));
    let inputs = producer(&bootstrap).await;
    // A backlog before the start, the rest while the application runs.
    send_inputs(&inputs, &input, 0..RECORDS / 4).await;
    let running = Streams::topology(
        config(&bootstrap, &app)
            .ordering(OrderingMode::Key)
            .max_in_flight(1024, 4096)
            .max_buffered_per_task(2048)
            .commit_mode(mode)
            .commit_interval(Duration::from_millis(100))
            .build()
            .unwrap(),
    )
    .source(input.as_str(), StringDeserializer, StringDeserializer)
    .to(out.as_str(), StringSerializer, StringSerializer)
    .build()
    .start()
    .await
    .expect("start");
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
    let mut seen = vec![false; RECORDS];
    for p in 0..PARTITIONS {
        for r in read::read_partition(&cluster, &out, p).await {
            let v: usize = std::str::from_utf8(r.value.as_deref().unwrap())
                .unwrap()
                .parse()
                .unwrap();
            seen[v] = true;
        }
    }
    let missing: Vec<usize> = (0..RECORDS).filter(|&i| !seen[i]).take(10).collect();
    assert!(
        missing.is_empty(),
        "inputs missing from the output: {missing:?}"
    );
}
