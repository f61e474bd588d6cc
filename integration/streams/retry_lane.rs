//! The parallel retry lane against the real broker: it retries when due and
//! dead-letters exactly the exhausted records without blocking the main
//! lane, and the dead-letter rate guard stops the application. (That the
//! lane is refused with exactly-once needs no broker: a unit test in
//! `streams/config.rs` checks it.)

use super::*;

#[tokio::test]
async fn retry_lane_retries_when_due_and_dead_letters_the_exhausted() {
    let Some((bootstrap, cluster, topic)) = setup("streams-retry-lane", 2).await else {
        return;
    };
    let retry_topic = format!("{topic}-retry");
    let dlq = format!("{topic}-dlq");
    support::create_topic(&cluster, &retry_topic, 2).await;
    support::create_topic(&cluster, &dlq, 1).await;
    const N: usize = 200;
    produce(&bootstrap, &topic, N, 40).await;
    // v % 20 == 0: always fails (dead-lettered); v % 20 == 1: fails twice.
    let attempts: Arc<Mutex<HashMap<i64, Vec<Instant>>>> = Arc::default();
    let good_done: Arc<Mutex<Vec<Instant>>> = Arc::default();
    let (a, g) = (attempts.clone(), good_done.clone());
    let app = support::unique_topic("streams-retry-lane-app");
    let lane = RetryLane::new(
        retry_topic.as_str(),
        dlq.as_str(),
        Backoff::fixed(Duration::from_millis(600), 3),
    );
    let running = Streams::topology(
        config(&bootstrap, &app)
            .ordering(OrderingMode::Key)
            .max_in_flight(64, 128)
            .failure_policy(FailurePolicy::RetryLane(lane))
            .build()
            .unwrap(),
    )
    .source(topic.as_str(), StringDeserializer, StringDeserializer)
    .for_each_async(move |rec| {
        let (a, g) = (a.clone(), g.clone());
        async move {
            let v: i64 = rec.value.parse().unwrap();
            let n = {
                let mut a = a.lock().unwrap();
                let e = a.entry(v).or_default();
                e.push(Instant::now());
                e.len()
            };
            tokio::time::sleep(Duration::from_millis(2)).await;
            match v % 20 {
                0 => Err(ProcessingError::new(format!("{v} always fails"))),
                1 if n <= 2 => Err(ProcessingError::new(format!("{v} fails twice"))),
                1 => Ok(()),
                _ => {
                    g.lock().unwrap().push(Instant::now());
                    Ok(())
                }
            }
        }
    })
    .build()
    .start()
    .await
    .unwrap();
    let failing_always = N as u64 / 20;
    wait_for(&running, |r| {
        let m = r.metrics();
        m.dead_lettered >= failing_always && m.retry_lane_succeeded >= failing_always
    })
    .await;
    let m = running.metrics();
    running.shutdown().await.unwrap();
    assert_eq!(m.processed, N as u64, "{m:?}");
    assert_eq!(m.handed_to_retry_lane, 2 * failing_always, "{m:?}");
    assert_eq!(m.dead_lettered, failing_always, "{m:?}");
    let attempts = attempts.lock().unwrap().clone();
    let first_retry = attempts
        .values()
        .filter(|t| t.len() > 1)
        .map(|t| t[1])
        .min()
        .unwrap();
    let last_good = *good_done.lock().unwrap().iter().max().unwrap();
    assert!(last_good < first_retry, "the main lane waited for a retry");
    for (v, times) in attempts.iter() {
        let expected = match v % 20 {
            0 | 1 => 3,
            _ => 1,
        };
        assert_eq!(times.len(), expected, "attempts of {v}");
        for w in times.windows(2) {
            assert!(
                w[1] - w[0] >= Duration::from_millis(570),
                "{v} retried before due"
            );
        }
    }
    let dead = read::read_partition(&cluster, &dlq, 0).await;
    let mut values: Vec<i64> = dead
        .iter()
        .map(|r| {
            std::str::from_utf8(r.value.as_ref().unwrap())
                .unwrap()
                .parse()
                .unwrap()
        })
        .collect();
    values.sort();
    let expected: Vec<i64> = (0..N as i64).filter(|v| v % 20 == 0).collect();
    assert_eq!(values, expected);
    for r in &dead {
        let h = |k: &str| {
            r.headers
                .iter()
                .find(|h| &h.key[..] == k.as_bytes())
                .and_then(|h| h.value.clone())
                .map(|v| String::from_utf8(v.to_vec()).unwrap())
                .unwrap_or_else(|| panic!("header {k} missing"))
        };
        assert_eq!(h("purekafka.retry.attempt"), "3");
        assert_eq!(h("purekafka.origin.topic"), topic);
        assert_eq!(h("__streams.errors.topic"), topic);
        assert!(h("purekafka.error").contains("always fails"));
        h("purekafka.origin.offset").parse::<i64>().unwrap();
    }
}

#[tokio::test]
async fn dead_letter_rate_guard_stops_the_app() {
    let Some((bootstrap, cluster, topic)) = setup("streams-dlq-guard", 1).await else {
        return;
    };
    let (retry_topic, dlq) = (format!("{topic}-retry"), format!("{topic}-dlq"));
    support::create_topic(&cluster, &retry_topic, 1).await;
    support::create_topic(&cluster, &dlq, 1).await;
    produce(&bootstrap, &topic, 200, 20).await;
    let lane = RetryLane::new(
        retry_topic.as_str(),
        dlq.as_str(),
        Backoff::fixed(Duration::from_millis(50), 2),
    )
    .dead_letter_guard(DeadLetterGuard {
        max_share: 0.5,
        window: Duration::from_secs(30),
        min_records: 20,
    });
    let app = support::unique_topic("streams-dlq-guard-app");
    let running = Streams::topology(
        config(&bootstrap, &app)
            .ordering(OrderingMode::Unordered)
            .failure_policy(FailurePolicy::RetryLane(lane))
            .build()
            .unwrap(),
    )
    .source(topic.as_str(), StringDeserializer, StringDeserializer)
    .for_each(|_| Err(ProcessingError::new("the dependency is down")))
    .build()
    .start()
    .await
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while !running.is_finished() {
        assert!(
            Instant::now() < deadline,
            "the guard did not stop the app: {:?}",
            running.metrics()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let stopped = running.wait().await;
    match stopped {
        Err(StreamsError::DeadLetterRate {
            dead_lettered,
            processed,
            ..
        }) => assert!(dead_lettered * 2 > processed, "{dead_lettered}/{processed}"),
        other => panic!("expected the dead-letter guard, got {other:?}"),
    }
}
