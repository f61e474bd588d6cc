//! Outputs that the broker refuses after the producer's own retries
//! (a record above the output topic's `max.message.bytes`): with records
//! pipelined (done once sent, committable once acknowledged), no offset is
//! committed past such a record. Under `FailurePolicy::Fail` the
//! application fails naming its input partition and offset, and a restart
//! resumes from there; under the retry lane the record is handed to the
//! retry topic and, failing again, dead-lettered, while the rest flows.
//! A state store's changelog write refused the same way (sent without
//! waiting, awaited at commit) stops the application with the store, the
//! changelog partition and the input partition, and no offset is
//! committed past its record: a restart processes it again. Outputs that
//! wait for the producer's buffer memory all arrive, once, in key order.

use super::*;

/// The output topic's `max.message.bytes`; an output above it is refused
/// by the broker (MESSAGE_TOO_LARGE, not retriable).
const LIMIT: usize = 2_000;

/// [`config`] with the producer's retries 10-50 ms apart: a refused
/// batch is split and resent, and the batches pipelined behind it are
/// retried (OUT_OF_ORDER_SEQUENCE_NUMBER) until it fails; at the default
/// 100 ms-1 s backoff each refused record costs about a second of waiting
/// that the tests do not assert on.
fn quick_retries(bootstrap: &str, app: &str) -> purekafka::streams::StreamsConfigBuilder {
    config(bootstrap, app)
        .producer_property("retry.backoff.ms", "10")
        .producer_property("retry.backoff.max.ms", "50")
}

/// Input `i`'s output value: `i`, padded past [`LIMIT`] when `big`.
fn output(i: i64, big: bool) -> String {
    let pad = if big { LIMIT * 2 } else { 0 };
    format!("{i}{}", " ".repeat(pad))
}

/// The input numbers in `topic`-0 (values `i`, maybe padded).
async fn numbers(cluster: &Cluster, topic: &str) -> BTreeSet<i64> {
    read::read_partition(cluster, topic, 0)
        .await
        .iter()
        .map(|r| {
            let v = std::str::from_utf8(r.value.as_deref().unwrap()).unwrap();
            v.trim_end().parse::<i64>().unwrap()
        })
        .collect()
}

/// Waits until some input partition's committed offset is `offset`.
async fn wait_committed(running: &RunningStreams, offset: i64) {
    wait_for(running, |r| {
        r.metrics()
            .partitions
            .iter()
            .any(|p| p.committed == Some(offset))
    })
    .await;
}

/// Produces inputs `from..to` (value `i`, key `key-(i % 5)`) to `topic`.
async fn inputs(bootstrap: &str, topic: &str, from: i64, to: i64) {
    let p = producer(bootstrap).await;
    let mut acks = Vec::new();
    for i in from..to {
        let r = ProducerRecord::new(topic)
            .key(format!("key-{}", i % 5))
            .value(i.to_string());
        acks.push(p.send(r).await.unwrap());
    }
    for a in acks {
        a.await.unwrap();
    }
    p.close(Duration::from_secs(10)).await.unwrap();
}

/// A pass-through from `input` to `out`, its output for input `i` too big
/// when `big(i)`.
async fn pass_through(
    config: StreamsConfig,
    input: &str,
    out: &str,
    big: impl Fn(i64) -> bool + Send + Sync + 'static,
) -> RunningStreams {
    Streams::topology(config)
        .source(input, StringDeserializer, StringDeserializer)
        .map(move |r| {
            let i: i64 = r.value.parse().unwrap();
            Ok(r.with_value(output(i, big(i))))
        })
        .to(out, StringSerializer, StringSerializer)
        .build()
        .start()
        .await
        .unwrap()
}

#[tokio::test]
async fn a_refused_output_fails_the_app_at_its_record_and_a_restart_loses_nothing() {
    refused_output_fails_the_app_at_its_record("streams-refused-output", true).await;
}

/// Without idempotence and with 5 requests in flight, the producer may
/// reorder retried batches, so each record waits for its outputs'
/// acknowledgements (not pipelined): the same promise holds.
#[tokio::test]
async fn without_idempotence_a_refused_output_fails_the_app_at_its_record_too() {
    refused_output_fails_the_app_at_its_record("streams-refused-output-noidem", false).await;
}

async fn refused_output_fails_the_app_at_its_record(test: &str, idempotent: bool) {
    let Some((bootstrap, cluster, input)) = setup(test, 1).await else {
        return;
    };
    let out = format!("{input}-out");
    let limit = LIMIT.to_string();
    support::create_topic_with(&cluster, &out, 1, &[("max.message.bytes", &limit)]).await;
    let app = support::unique_topic(&format!("{test}-app"));
    const BAD: i64 = 100;
    const N: i64 = 150;
    let tp = TopicPartition::new(input.as_str(), 0);
    // Partition ordering: the records after the refused one are sent while
    // its output is still unacknowledged (pipelined).
    let cfg = || {
        let c = quick_retries(&bootstrap, &app).ordering(OrderingMode::Partition);
        let c = if idempotent {
            c
        } else {
            c.producer_property("enable.idempotence", "false")
                .producer_property("max.in.flight.requests.per.connection", "5")
        };
        c.build().unwrap()
    };
    inputs(&bootstrap, &input, 0, BAD).await;
    let running = pass_through(cfg(), &input, &out, |i| i == BAD).await;
    // A commit past the good records first, so the one after the failure
    // has something to stay below.
    wait_committed(&running, BAD).await;
    inputs(&bootstrap, &input, BAD, N).await;
    let stopped = tokio::time::timeout(Duration::from_secs(60), running.wait())
        .await
        .expect("the refused output stops the app");
    match stopped {
        Err(StreamsError::Processing {
            partition,
            offset,
            error,
            ..
        }) => {
            assert_eq!((&partition, offset), (&tp, BAD), "{error}");
            assert!(error.message().contains(&out), "{error}");
        }
        other => panic!("expected the refused output's record, got {other:?}"),
    }
    let committed = group_committed(&bootstrap, &app, std::slice::from_ref(&tp))
        .await
        .get(&tp)
        .map(|o| o.offset);
    assert_eq!(committed, Some(BAD), "committed up to the refused record");
    let written = numbers(&cluster, &out).await;
    assert!(!written.contains(&BAD));
    assert!((0..BAD).all(|i| written.contains(&i)), "{written:?}");
    // A restart (its outputs fit now) resumes at the refused record:
    // every input reaches the output.
    let running = pass_through(cfg(), &input, &out, |_| false).await;
    wait_for(&running, |r| r.metrics().processed >= (N - BAD) as u64).await;
    running.shutdown().await.unwrap();
    let written = numbers(&cluster, &out).await;
    let missing: Vec<i64> = (0..N).filter(|i| !written.contains(i)).collect();
    assert!(missing.is_empty(), "lost: {missing:?}");
}

#[tokio::test]
async fn under_the_retry_lane_a_refused_output_hands_its_record_off_and_nothing_is_lost() {
    let Some((bootstrap, cluster, input)) = setup("streams-refused-output-lane", 1).await else {
        return;
    };
    let out = format!("{input}-out");
    let retry_topic = format!("{input}-retry");
    let dlq = format!("{input}-dlq");
    let limit = LIMIT.to_string();
    support::create_topic_with(&cluster, &out, 1, &[("max.message.bytes", &limit)]).await;
    support::create_topic(&cluster, &retry_topic, 1).await;
    support::create_topic(&cluster, &dlq, 1).await;
    const N: i64 = 200;
    let big = |i: i64| i % 25 == 7;
    let bad = (0..N).filter(|i| big(*i)).count() as u64;
    inputs(&bootstrap, &input, 0, N).await;
    let app = support::unique_topic("streams-refused-output-lane-app");
    let lane = RetryLane::new(
        retry_topic.as_str(),
        dlq.as_str(),
        Backoff::fixed(Duration::from_millis(100), 2),
    );
    let config = quick_retries(&bootstrap, &app)
        .ordering(OrderingMode::Key)
        .failure_policy(FailurePolicy::RetryLane(lane))
        .build()
        .unwrap();
    let running = pass_through(config, &input, &out, big).await;
    let tp = TopicPartition::new(input.as_str(), 0);
    wait_for(&running, |r| {
        let m = r.metrics();
        m.dead_lettered >= bad && m.partitions.iter().any(|p| p.committed == Some(N))
    })
    .await;
    let m = running.metrics();
    running.shutdown().await.unwrap();
    assert_eq!(m.processed, N as u64, "{m:?}");
    assert_eq!(m.handed_to_retry_lane, bad, "{m:?}");
    assert_eq!(m.dead_lettered, bad, "{m:?}");
    let committed = group_committed(&bootstrap, &app, std::slice::from_ref(&tp)).await;
    assert_eq!(committed.get(&tp).map(|o| o.offset), Some(N));
    // Every input is in the output or, refused there, dead-lettered.
    let written = numbers(&cluster, &out).await;
    let dead = numbers(&cluster, &dlq).await;
    for i in 0..N {
        assert_eq!(written.contains(&i), !big(i), "output of {i}");
        assert_eq!(dead.contains(&i), big(i), "dead letter of {i}");
    }
}

/// Latest value per key (a `reduce` into store `latest`, record cache
/// off): input `i`'s value is [`output`]`(i, big(i))`, so the changelog
/// write of a `big` one is refused.
async fn latest_per_key(
    config: StreamsConfig,
    input: &str,
    out: &str,
    big: impl Fn(i64) -> bool + Send + Sync + 'static,
) -> RunningStreams {
    Streams::topology(config)
        .source(input, StringDeserializer, StringDeserializer)
        .map(move |r| {
            let i: i64 = r.value.parse().unwrap();
            Ok(r.with_value(output(i, big(i))))
        })
        .group_by_key()
        .reduce(
            purekafka::streams::state::StoreSpec::in_memory("latest"),
            StringSerializer,
            StringSerializer,
            StringDeserializer,
            |_, v| v,
        )
        .to_stream()
        .to(out, StringSerializer, StringSerializer)
        .build()
        .start()
        .await
        .unwrap()
}

/// The input record whose changelog write is refused first, and the
/// input's end.
const BAD: i64 = 100;
const N: i64 = 150;

/// A run of [`latest_per_key`] whose changelog (made first, with
/// [`LIMIT`]) refuses the writes of the inputs `big` picks from [`BAD`]
/// on: inputs `0..BAD` are processed and committed, then `BAD..N` arrive
/// and the refused write must stop the application. Returns the run's
/// topics and the error it stopped with, after checking that no offset
/// was committed past `BAD`.
struct RefusedRun {
    bootstrap: String,
    cluster: Cluster,
    input: String,
    out: String,
    app: String,
    changelog: String,
    /// The record cache is on (`cache.max.bytes` default) or off.
    cached: bool,
    stopped: StreamsResult,
}

type StreamsResult = Result<(), StreamsError>;

impl RefusedRun {
    async fn start(
        test: &str,
        cached: bool,
        big: impl Fn(i64) -> bool + Send + Sync + 'static,
    ) -> Option<RefusedRun> {
        let (bootstrap, cluster, input) = setup(test, 1).await?;
        let out = format!("{input}-out");
        support::create_topic(&cluster, &out, 1).await;
        let app = support::unique_topic(&format!("{test}-app"));
        // The changelog made before the application: its limit refuses the
        // big records' writes while the input and output topics take them.
        let changelog = purekafka::streams::state::changelog_topic(&app, "latest");
        let limit = LIMIT.to_string();
        support::create_topic_with(&cluster, &changelog, 1, &[("max.message.bytes", &limit)]).await;
        let mut run = RefusedRun {
            bootstrap,
            cluster,
            input,
            out,
            app,
            changelog,
            cached,
            stopped: Ok(()),
        };
        inputs(&run.bootstrap, &run.input, 0, BAD).await;
        let running = latest_per_key(run.config(), &run.input, &run.out, big).await;
        wait_committed(&running, BAD).await;
        inputs(&run.bootstrap, &run.input, BAD, N).await;
        run.stopped = tokio::time::timeout(Duration::from_secs(60), running.wait())
            .await
            .expect("the refused changelog write stops the app");
        let tp = run.input_partition();
        let committed = group_committed(&run.bootstrap, &run.app, std::slice::from_ref(&tp))
            .await
            .get(&tp)
            .map(|o| o.offset);
        assert_eq!(committed, Some(BAD), "no commit past the refused write");
        Some(run)
    }

    fn config(&self) -> StreamsConfig {
        let builder = quick_retries(&self.bootstrap, &self.app).ordering(OrderingMode::Partition);
        let builder = if self.cached {
            builder
        } else {
            builder.cache_max_bytes(0)
        };
        builder.build().unwrap()
    }

    fn input_partition(&self) -> TopicPartition {
        TopicPartition::new(self.input.as_str(), 0)
    }

    /// Checks the error names the store, the changelog partition and the
    /// input partition.
    fn expect_changelog_error(&self) -> &StreamsError {
        match &self.stopped {
            Err(
                e @ StreamsError::Changelog {
                    store,
                    changelog,
                    partition,
                    ..
                },
            ) => {
                assert_eq!(store, "latest", "{e}");
                assert_eq!(
                    changelog,
                    &TopicPartition::new(self.changelog.as_str(), 0),
                    "{e}"
                );
                assert_eq!(partition, &self.input_partition(), "{e}");
                e
            }
            other => panic!("expected the changelog's error, got {other:?}"),
        }
    }
}

#[tokio::test]
async fn a_refused_changelog_write_stops_the_app_and_its_record_runs_again() {
    let Some(run) = RefusedRun::start("streams-refused-changelog", false, |i| i == BAD).await
    else {
        return;
    };
    run.expect_changelog_error();
    assert!(!numbers(&run.cluster, &run.changelog).await.contains(&BAD));
    // A new instance (its values fit now) starts at the refused record:
    // its changelog write is there this time, and every later one.
    let running = latest_per_key(run.config(), &run.input, &run.out, |_| false).await;
    wait_for(&running, |r| r.metrics().processed >= (N - BAD) as u64).await;
    running.shutdown().await.unwrap();
    let written = numbers(&run.cluster, &run.changelog).await;
    let missing: Vec<i64> = (0..N).filter(|i| !written.contains(i)).collect();
    assert!(missing.is_empty(), "not in the changelog: {missing:?}");
}

/// The same through the record cache: the refused write is a flush's, at
/// the commit (the changelog's writes are acknowledged a batch at a time,
/// not one future each), and it still stops the application naming the
/// changelog partition, with no offset committed past it.
#[tokio::test]
async fn a_refused_changelog_write_of_a_cache_flush_stops_the_app_naming_its_partition() {
    // From BAD on every value is too big for the changelog, so whatever a
    // flush merged, its writes are refused.
    let Some(run) = RefusedRun::start("streams-refused-changelog-flush", true, |i| i >= BAD).await
    else {
        return;
    };
    let e = run.expect_changelog_error();
    assert!(
        e.to_string().contains(&format!("{}-0", run.changelog)),
        "{e}"
    );
    assert!(numbers(&run.cluster, &run.changelog)
        .await
        .iter()
        .all(|i| *i < BAD));
    // A new instance (its values fit now) starts at the first refused
    // record: each key's last changelog value is its last input.
    let running = latest_per_key(run.config(), &run.input, &run.out, |_| false).await;
    wait_committed(&running, N).await;
    running.shutdown().await.unwrap();
    let written = numbers(&run.cluster, &run.changelog).await;
    for last in N - 5..N {
        assert!(written.contains(&last), "{last} not in the changelog");
    }
}

/// Outputs that must wait for the producer's `buffer.memory` (the sends a
/// worker cannot append at once): three 8 KB outputs per record through
/// 64 KiB of buffer memory, so most records' outputs wait for room, some
/// after the record's first output went in. Every output arrives once, in
/// its key's order, and the offsets are committed through the last record.
#[tokio::test]
async fn outputs_that_wait_for_buffer_memory_all_arrive_in_key_order() {
    let Some((bootstrap, cluster, input)) = setup("streams-buffer-wait", 1).await else {
        return;
    };
    let out = format!("{input}-out");
    support::create_topic(&cluster, &out, 1).await;
    const N: i64 = 200;
    const OUTPUTS: i64 = 3;
    inputs(&bootstrap, &input, 0, N).await;
    let app = support::unique_topic("streams-buffer-wait-app");
    let running = Streams::topology(
        config(&bootstrap, &app)
            .ordering(OrderingMode::Key)
            .max_in_flight(64, 64)
            .producer_property("buffer.memory", "65536")
            .build()
            .unwrap(),
    )
    .source(input.as_str(), StringDeserializer, StringDeserializer)
    .flat_map(|r| {
        let i: i64 = r.value.parse().unwrap();
        Ok((0..OUTPUTS)
            .map(|j| {
                r.clone()
                    .with_value(format!("{i} {j}{}", " ".repeat(8_000)))
            })
            .collect())
    })
    .to(out.as_str(), StringSerializer, StringSerializer)
    .build()
    .start()
    .await
    .unwrap();
    wait_committed(&running, N).await;
    running.shutdown().await.unwrap();
    // Each key's outputs, as the broker stored them.
    let mut by_key: HashMap<String, Vec<(i64, i64)>> = HashMap::new();
    for r in read::read_partition(&cluster, &out, 0).await {
        let key = String::from_utf8(r.key.unwrap().to_vec()).unwrap();
        let value = std::str::from_utf8(r.value.as_deref().unwrap()).unwrap();
        let mut fields = value.split_whitespace().map(|f| f.parse::<i64>().unwrap());
        let (i, j) = (fields.next().unwrap(), fields.next().unwrap());
        by_key.entry(key).or_default().push((i, j));
    }
    for k in 0..5 {
        let expected: Vec<(i64, i64)> = (0..N)
            .filter(|i| i % 5 == k)
            .flat_map(|i| (0..OUTPUTS).map(move |j| (i, j)))
            .collect();
        assert_eq!(
            by_key.remove(&format!("key-{k}")),
            Some(expected),
            "key-{k}"
        );
    }
    assert!(by_key.is_empty(), "outputs of unknown keys: {by_key:?}");
}
