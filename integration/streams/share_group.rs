//! The runtime on a share group (`source.group=share`, KIP-932) against
//! the real broker: two instances read one partition through one share
//! group and together process every record; a record failing its first
//! delivery is released and processed on its second (the processor sees
//! the delivery count); a record failing every attempt goes to the
//! dead-letter topic once and is not delivered again. One setup for all of
//! it: a share group's first assignment takes a heartbeat interval (~5 s).
//! (The refused configurations need no broker: unit tests in
//! `streams/source_group.rs`, and the stateful one below.)

use purekafka::admin::AlterConfigOp;
use purekafka::streams::{delivery_count, SourceGroup};
use purekafka::Admin;

use super::*;

/// Records are produced in rounds of this many until both instances did
/// work.
const ROUND: usize = 40;
/// Values `v % FLAKY_EVERY == 7` fail their first delivery.
const FLAKY_EVERY: i64 = 25;
/// The value that fails every delivery.
const POISON: i64 = 13;

/// Per value: (instance, delivery count, succeeded) of each attempt.
type Attempts = Arc<Mutex<HashMap<i64, Vec<(usize, i16, bool)>>>>;

async fn instance(
    bootstrap: &str,
    app: &str,
    topic: &str,
    dlq: &str,
    id: usize,
    attempts: Attempts,
) -> RunningStreams {
    let lane = RetryLane::new("unused", dlq, Backoff::fixed(Duration::from_millis(50), 2));
    Streams::topology(
        StreamsConfig::builder(app, bootstrap)
            .source_group(SourceGroup::Share)
            .ordering(OrderingMode::Unordered)
            // max.poll.records 16: one instance cannot take a whole round.
            .max_in_flight(16, 16)
            .failure_policy(FailurePolicy::RetryLane(lane))
            .build()
            .unwrap(),
    )
    .source(topic, StringDeserializer, StringDeserializer)
    .for_each_async(move |rec| {
        let attempts = attempts.clone();
        async move {
            let v: i64 = rec.value.parse().unwrap();
            let count = delivery_count().expect("a share source gives the delivery count");
            // Processing takes a moment, so both instances get records.
            tokio::time::sleep(Duration::from_millis(10)).await;
            let ok = v != POISON && (v % FLAKY_EVERY != 7 || count > 1);
            attempts
                .lock()
                .unwrap()
                .entry(v)
                .or_default()
                .push((id, count, ok));
            if ok {
                Ok(())
            } else {
                Err(ProcessingError::new(format!(
                    "{v} failed at delivery {count}"
                )))
            }
        }
    })
    .build()
    .start()
    .await
    .unwrap()
}

#[tokio::test]
async fn two_instances_share_one_partition_retry_by_release_and_dead_letter_once() {
    let Some((bootstrap, cluster, topic)) = setup("streams-share", 1).await else {
        return;
    };
    if !support::real_broker_only("streams-share", "share groups (KIP-932)") {
        return;
    }
    let dlq = format!("{topic}-dlq");
    support::create_topic(&cluster, &dlq, 1).await;
    let app = support::unique_topic("streams-share-app");
    // Share groups start at the latest offset unless the group says
    // otherwise; set before any member joins.
    Admin::connect(support::config(&bootstrap))
        .await
        .unwrap()
        .alter_group_configs(
            &app,
            &[AlterConfigOp::Set(
                "share.auto.offset.reset".into(),
                "earliest".into(),
            )],
        )
        .await
        .unwrap();
    let attempts: Attempts = Arc::default();
    let t0 = Instant::now();
    let a = instance(&bootstrap, &app, &topic, &dlq, 0, attempts.clone()).await;
    let b = instance(&bootstrap, &app, &topic, &dlq, 1, attempts.clone()).await;
    let producer = producer(&bootstrap).await;
    // Rounds of records until both instances processed some (each gets
    // its assignment a heartbeat after joining, in either order).
    let mut produced = 0usize;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let workers: BTreeSet<usize> = attempts
            .lock()
            .unwrap()
            .values()
            .flatten()
            .map(|(id, _, _)| *id)
            .collect();
        if workers.len() == 2 && produced >= 2 * ROUND {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "both instances did not get records within 60 s: {workers:?} of {produced}"
        );
        assert!(!a.is_finished() && !b.is_finished(), "an instance stopped");
        if produced < 10 * ROUND {
            for v in produced..produced + ROUND {
                let r = ProducerRecord::new(topic.as_str()).value(v.to_string());
                drop(producer.send(r).await.unwrap());
            }
            producer.flush().await;
            produced += ROUND;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    producer.close(Duration::from_secs(10)).await.unwrap();
    let both_working = t0.elapsed();
    let good = produced as u64 - 1;
    let processed = |a: &RunningStreams, b: &RunningStreams| {
        (
            a.metrics().processed + b.metrics().processed,
            a.metrics().dead_lettered + b.metrics().dead_lettered,
        )
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    while processed(&a, &b) < (good, 1) {
        assert!(
            Instant::now() < deadline,
            "not done within 60 s: {:?} {:?}",
            a.metrics(),
            b.metrics()
        );
        assert!(!a.is_finished() && !b.is_finished(), "an instance stopped");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // A dead-lettered (accepted) record is not delivered again: a release
    // would bring it back within milliseconds.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let (ma, mb) = (a.metrics(), b.metrics());
    let done = t0.elapsed();
    a.shutdown().await.unwrap();
    b.shutdown().await.unwrap();
    let shut = t0.elapsed();
    let attempts = attempts.lock().unwrap().clone();
    let flaky: Vec<i64> = (0..produced as i64)
        .filter(|v| v % FLAKY_EVERY == 7)
        .collect();
    for v in 0..produced as i64 {
        let tries = attempts
            .get(&v)
            .unwrap_or_else(|| panic!("{v} never processed"));
        if v == POISON {
            let counts: Vec<i16> = tries.iter().map(|t| t.1).collect();
            assert_eq!(counts, vec![1, 2], "the poison record's deliveries");
            assert!(tries.iter().all(|t| !t.2));
        } else if flaky.contains(&v) {
            assert!(!tries[0].2 && tries[0].1 == 1, "{v}: {tries:?}");
            assert!(
                tries.iter().any(|t| t.2 && t.1 == 2),
                "{v} not processed at its second delivery: {tries:?}"
            );
        } else {
            assert!(tries.iter().any(|t| t.2), "{v} never succeeded: {tries:?}");
        }
    }
    let by: Vec<usize> = (0..2)
        .map(|id| {
            attempts
                .values()
                .flatten()
                .filter(|t| t.0 == id && t.2)
                .count()
        })
        .collect();
    assert!(by.iter().all(|n| *n > 0), "work per instance: {by:?}");
    assert_eq!(ma.dead_lettered + mb.dead_lettered, 1, "{ma:?} {mb:?}");
    // Releases: each flaky record once, the poison record once.
    assert_eq!(
        ma.retried_in_place + mb.retried_in_place,
        flaky.len() as u64 + 1,
        "{ma:?} {mb:?}"
    );
    let dead = read::read_partition(&cluster, &dlq, 0).await;
    assert_eq!(dead.len(), 1, "one dead letter");
    assert_eq!(
        dead[0].value.as_deref(),
        Some(POISON.to_string().as_bytes())
    );
    let attempt = dead[0]
        .headers
        .iter()
        .find(|h| &h.key[..] == b"purekafka.retry.attempt")
        .and_then(|h| h.value.clone());
    assert_eq!(attempt.as_deref(), Some(&b"2"[..]));
    eprintln!(
        "streams-share: {produced} records, processed per instance {by:?}, {} flaky; \
         both working after {both_working:?}, done after {done:?}, shut down after {shut:?}",
        flaky.len()
    );
}

#[tokio::test]
async fn a_stateful_topology_is_refused_on_a_share_group() {
    // Refused before connecting: no broker needed.
    let config = StreamsConfig::builder("share-stateful", "127.0.0.1:1")
        .source_group(SourceGroup::Share)
        .ordering(OrderingMode::Unordered)
        .build()
        .unwrap();
    let err = Streams::topology(config)
        .source("in", StringDeserializer, StringDeserializer)
        .group_by_key()
        .count(
            purekafka::streams::state::StoreSpec::in_memory("counts"),
            StringSerializer,
        )
        .to_stream()
        .map(|r| {
            let v = r.value.to_string();
            Ok(r.with_value(v))
        })
        .to("out", StringSerializer, StringSerializer)
        .build()
        .start()
        .await
        .err()
        .expect("refused");
    let text = err.to_string();
    assert!(
        text.contains("source.group") && text.contains("stateful"),
        "{text}"
    );
}
