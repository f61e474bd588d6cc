//! The producer against the real broker: every codec round-trips, keyed
//! partitioning matches the Java client, idempotent batches carry our
//! producer id with contiguous sequences, errors name what they concern, and
//! the Java console consumer reads what we write.

use std::collections::BTreeMap;
use std::time::Duration;

use bytes::Bytes;
use purekafka::producer::partitioner::partition_for_key;
use purekafka::producer::{Acks, Producer, ProducerConfig, ProducerConfigBuilder, ProducerRecord};
use purekafka::protocol::compression::Compression;
use purekafka::{Cluster, Error};

use crate::support::{self, java, read::read_partition};

// metadata.max.idle.ms (KIP-526), seen through a proxy's Metadata log.
mod idle;

// Compressed batches filled to batch.max.size while a partition is backlogged.
mod backlog;

fn producer_config(bootstrap: &str) -> ProducerConfigBuilder {
    ProducerConfig::builder()
        .client(
            purekafka::ClientConfig::builder()
                .bootstrap_servers(bootstrap)
                .client_id("purekafka-it-producer")
                .request_timeout(Duration::from_secs(10))
                .default_api_timeout(Duration::from_secs(30)),
        )
        .delivery_timeout(Duration::from_secs(30))
}

async fn cluster(bootstrap: &str) -> Cluster {
    Cluster::connect(support::config(bootstrap))
        .await
        .expect("cluster")
}

/// Connects a producer with `config`.
async fn connect_producer(config: ProducerConfigBuilder) -> Producer {
    Producer::connect(config.build().unwrap()).await.unwrap()
}

/// Creates a topic of `partitions` named after `prefix` and returns its name.
async fn new_topic(cluster: &Cluster, prefix: &str, partitions: i32) -> String {
    let topic = support::unique_topic(prefix);
    support::create_topic(cluster, &topic, partitions).await;
    topic
}

/// The broker, a cluster handle and a new topic of `partitions` named after
/// `topic_prefix`; `None` when `test` is skipped for want of a broker.
async fn setup(
    test: &str,
    topic_prefix: &str,
    partitions: i32,
) -> Option<(String, Cluster, String)> {
    let bootstrap = support::bootstrap(test)?;
    let cluster = cluster(&bootstrap).await;
    let topic = new_topic(&cluster, topic_prefix, partitions).await;
    Some((bootstrap, cluster, topic))
}

#[tokio::test]
async fn every_codec_round_trips_with_keys_headers_and_timestamps() {
    let Some(bootstrap) = support::bootstrap("every_codec_round_trips") else {
        return;
    };
    let cluster = cluster(&bootstrap).await;
    for codec in Compression::ALL {
        let topic = new_topic(&cluster, &format!("p-codec-{codec}"), 3).await;
        let producer = connect_producer(producer_config(&bootstrap).compression(codec, None)).await;
        let mut deliveries = Vec::new();
        for i in 0..600i64 {
            let mut record = ProducerRecord::new(&topic)
                .value(format!("value-{i}-{}", "x".repeat((i % 50) as usize)))
                .timestamp(1_700_000_000_000 + i)
                .header("n", Some(Bytes::from(i.to_string())));
            if i % 3 != 0 {
                record = record.key(format!("key-{i}"));
            }
            deliveries.push((i, producer.send(record).await.expect("send")));
        }
        producer.flush().await;
        let mut expected: BTreeMap<(i32, i64), i64> = BTreeMap::new();
        for (i, d) in deliveries {
            let meta = d
                .await
                .unwrap_or_else(|e| panic!("{codec} record {i}: {e}"));
            assert!(meta.offset >= 0);
            assert_eq!(meta.timestamp, 1_700_000_000_000 + i);
            if i % 3 != 0 {
                assert_eq!(
                    meta.partition.partition,
                    partition_for_key(format!("key-{i}").as_bytes(), 3)
                );
            }
            expected.insert((meta.partition.partition, meta.offset), i);
        }
        let mut seen = 0;
        for p in 0..3 {
            for r in read_partition(&cluster, &topic, p).await {
                let i = expected[&(p, r.offset)];
                let want_value = format!("value-{i}-{}", "x".repeat((i % 50) as usize));
                assert_eq!(r.value.as_deref(), Some(want_value.as_bytes()), "{codec}");
                let want_key = (i % 3 != 0).then(|| format!("key-{i}"));
                assert_eq!(r.key.as_deref(), want_key.as_deref().map(str::as_bytes));
                assert_eq!(r.timestamp, 1_700_000_000_000 + i);
                assert_eq!(r.headers.len(), 1);
                assert_eq!(
                    r.headers[0].value.as_deref(),
                    Some(i.to_string().as_bytes())
                );
                seen += 1;
            }
        }
        assert_eq!(seen, 600, "{codec}: records read back");
        let m = producer.metrics();
        assert_eq!(m.records_sent, 600);
        assert!(m.batches_sent >= 3 && m.requests >= 1, "{m:?}");
        producer.close(Duration::from_secs(10)).await.unwrap();
    }
}

#[tokio::test]
async fn idempotent_batches_carry_our_producer_id_and_contiguous_sequences() {
    let Some((bootstrap, cluster, topic)) = setup("idempotent_sequences", "p-idem", 1).await else {
        return;
    };
    // Small batches, so several are in flight at once.
    let producer = connect_producer(producer_config(&bootstrap).batch_size(512)).await;
    let (pid, epoch) = producer
        .producer_id()
        .expect("idempotence is on by default");
    let mut deliveries = Vec::new();
    for i in 0..2_000u32 {
        let record = ProducerRecord::new(&topic).value(format!("{i:08}"));
        deliveries.push(producer.send(record).await.unwrap());
    }
    for (i, d) in deliveries.into_iter().enumerate() {
        assert_eq!(
            d.await.unwrap().offset,
            i as i64,
            "offsets follow send order"
        );
    }
    let leader = cluster.leader(&topic, 0).await.unwrap();
    let conn = cluster
        .connection(&leader, purekafka::cluster::Workload::Fetch)
        .await
        .unwrap();
    let batches = support::read::read_batches(&conn, &topic, 0).await;
    assert!(batches.len() > 10, "{} batches", batches.len());
    let mut next_seq = 0;
    for h in &batches {
        assert_eq!((h.producer_id, h.producer_epoch), (pid, epoch));
        assert_eq!(h.base_sequence, next_seq, "sequences are contiguous");
        next_seq += h.record_count;
    }
    assert_eq!(next_seq, 2_000);
    producer.close(Duration::from_secs(10)).await.unwrap();
}

#[tokio::test]
async fn acks_zero_and_one_deliver_without_idempotence() {
    let Some(bootstrap) = support::bootstrap("acks_zero_and_one") else {
        return;
    };
    let cluster = cluster(&bootstrap).await;
    for acks in [Acks::None, Acks::Leader] {
        let topic = new_topic(&cluster, "p-acks", 1).await;
        let producer = connect_producer(producer_config(&bootstrap).acks(acks)).await;
        assert_eq!(
            producer.producer_id(),
            None,
            "{acks:?} turns idempotence off"
        );
        let mut deliveries = Vec::new();
        for i in 0..500 {
            let d = producer
                .send(ProducerRecord::new(&topic).value(format!("{i}")))
                .await
                .unwrap();
            deliveries.push(d);
        }
        for d in deliveries {
            let meta = d.await.unwrap();
            if acks == Acks::None {
                assert_eq!(meta.offset, -1, "acks=0 has no offsets");
            }
        }
        producer.close(Duration::from_secs(10)).await.unwrap();
        // acks=0 gives no confirmation: wait until the broker has it all.
        let mut got = Vec::new();
        for _ in 0..50 {
            got = read_partition(&cluster, &topic, 0).await;
            if got.len() == 500 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let values: Vec<String> = got
            .iter()
            .map(|r| String::from_utf8_lossy(r.value.as_deref().unwrap()).into_owned())
            .collect();
        let want: Vec<String> = (0..500).map(|i| i.to_string()).collect();
        assert_eq!(values, want, "{acks:?}");
    }
}

#[tokio::test]
async fn bad_input_gives_typed_errors_naming_the_subject() {
    let Some((bootstrap, _cluster, topic)) = setup("producer_bad_input", "p-bad", 2).await else {
        return;
    };
    let producer =
        connect_producer(producer_config(&bootstrap).max_block(Duration::from_millis(1_500))).await;
    let good = producer
        .send(ProducerRecord::new(&topic).value("before"))
        .await
        .unwrap();
    // Larger than max.request.size (1 MiB): refused before it is queued.
    let err = producer
        .send(ProducerRecord::new(&topic).value(vec![0u8; 2 << 20]))
        .await
        .err()
        .expect("oversized record refused");
    assert!(
        matches!(err, Error::RecordTooLarge { .. }) && err.to_string().contains(&topic),
        "{err}"
    );
    assert!(!err.is_retriable());
    // Auto-creation is off: the topic never shows up within max.block.ms.
    let missing = support::unique_topic("p-missing");
    let started = std::time::Instant::now();
    let err = producer
        .send(ProducerRecord::new(&missing).value("x"))
        .await
        .err()
        .expect("unknown topic refused");
    assert!(err.to_string().contains(&missing), "{err}");
    assert!(err.to_string().contains("max.block.ms"), "{err}");
    assert!(started.elapsed() < Duration::from_secs(10));
    // An explicit partition the topic lacks.
    let err = producer
        .send(ProducerRecord::new(&topic).partition(7).value("x"))
        .await
        .err()
        .expect("bad partition refused");
    assert!(
        matches!(err, Error::UnknownPartition { partition: 7, .. }),
        "{err}"
    );
    // The first record is unaffected by its neighbours' failures.
    assert!(good.await.unwrap().offset >= 0);
    // After close, sends are refused.
    producer.close(Duration::from_secs(10)).await.unwrap();
    let err = producer
        .send(ProducerRecord::new(&topic).value("late"))
        .await
        .err()
        .expect("closed");
    assert!(matches!(err, Error::Closed), "{err}");
}

#[tokio::test]
async fn batches_the_broker_refuses_as_too_large_are_split_and_delivered_in_order() {
    let Some(bootstrap) = support::bootstrap("producer_batch_split") else {
        return;
    };
    let cluster = cluster(&bootstrap).await;
    // The topic takes batches of at most 2,000 bytes; ours grow to 64 KiB.
    // Idempotence (the default) keeps order across the split; without it,
    // batches behind the refused one may land first, as in the Java client.
    for codec in [Compression::None, Compression::Lz4] {
        let topic = support::unique_topic("p-split");
        support::create_topic_with(&cluster, &topic, 1, &[("max.message.bytes", "2000")]).await;
        // Each split's halves, and the batches behind them, are resent
        // after the retry backoff: 10-50 ms apart here, not 100 ms-1 s.
        let producer = connect_producer(
            producer_config(&bootstrap)
                .batch_size(64 << 10)
                .linger(Duration::from_millis(200))
                .compression(codec, None)
                .set("retry.backoff.ms", "10")
                .unwrap()
                .set("retry.backoff.max.ms", "50")
                .unwrap(),
        )
        .await;
        // Random-looking values, so lz4 cannot squeeze a batch under the limit.
        let noise = |i: u32, len: u32| -> Vec<u8> {
            // xorshift32, seeded by the record number.
            let mut x = i.wrapping_mul(2_654_435_761) | 1;
            (0..len)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 17;
                    x ^= x << 5;
                    (x >> 24) as u8
                })
                .collect()
        };
        let value = |i: u32| noise(i, 300);
        let mut deliveries = Vec::new();
        for i in 0..400u32 {
            let record = ProducerRecord::new(&topic)
                .key(format!("{i}"))
                .value(value(i));
            deliveries.push(producer.send(record).await.unwrap());
        }
        for (i, d) in deliveries.into_iter().enumerate() {
            let meta = d
                .await
                .unwrap_or_else(|e| panic!("{codec:?} record {i}: {e}"));
            assert_eq!(
                meta.offset, i as i64,
                "{codec:?}: offsets follow send order"
            );
        }
        let metrics = producer.metrics();
        assert!(metrics.batch_splits > 0, "{codec:?}: {metrics:?}");
        assert_eq!(metrics.record_errors, 0, "{codec:?}: {metrics:?}");
        let read = read_partition(&cluster, &topic, 0).await;
        assert_eq!(read.len(), 400, "{codec:?}");
        for (i, r) in read.iter().enumerate() {
            assert_eq!(
                r.value.as_deref(),
                Some(&value(i as u32)[..]),
                "{codec:?} #{i}"
            );
        }
        // One record above the topic's limit cannot be split: a typed,
        // non-retriable error that says which limit.
        let err = producer
            .send(ProducerRecord::new(&topic).value(noise(1, 3_000)))
            .await
            .unwrap()
            .await
            .expect_err(&format!("{codec:?}: a record above max.message.bytes"));
        assert_eq!(
            err.kafka_code(),
            Some(purekafka::KafkaCode::MESSAGE_TOO_LARGE),
            "{err}"
        );
        assert!(err.to_string().contains(&topic), "{err}");
        assert!(err.to_string().contains("max.message.bytes"), "{err}");
        assert!(!err.is_retriable());
        producer.close(Duration::from_secs(10)).await.unwrap();
    }
}

#[tokio::test]
async fn buffer_memory_applies_backpressure() {
    let Some((bootstrap, cluster, topic)) = setup("buffer_memory_backpressure", "p-mem", 1).await
    else {
        return;
    };
    let producer = connect_producer(
        producer_config(&bootstrap)
            .buffer_memory(64 * 1024)
            .linger(Duration::from_secs(5)),
    )
    .await;
    // Warm the route so try_send does not fail on metadata. `flush` sends
    // the lingering batch now: the 5 s linger is there to hold batches while
    // the buffer fills, not to be waited out.
    let warm = producer
        .send(ProducerRecord::new(&topic).value("warm"))
        .await
        .unwrap();
    producer.flush().await;
    warm.await.unwrap();
    let mut refused = None;
    let mut accepted = Vec::new();
    for i in 0..1_000 {
        match producer.try_send(ProducerRecord::new(&topic).value(vec![b'x'; 1_000])) {
            Ok(d) => accepted.push(d),
            Err(e) => {
                refused = Some((i, e));
                break;
            }
        }
    }
    let (at, err) = refused.expect("try_send refuses once buffer.memory is full");
    assert!(at < 70, "refused only after {at} KB");
    assert!(err.to_string().contains("buffer.memory"), "{err}");
    // `send` waits for memory instead, and everything is delivered.
    for _ in 0..200 {
        accepted.push(
            producer
                .send(ProducerRecord::new(&topic).value(vec![b'y'; 1_000]))
                .await
                .unwrap(),
        );
    }
    let n = accepted.len();
    producer.flush().await;
    for d in accepted {
        d.await.unwrap();
    }
    assert_eq!(read_partition(&cluster, &topic, 0).await.len(), n + 1);
    producer.close(Duration::from_secs(10)).await.unwrap();
}

#[tokio::test]
async fn java_producer_keys_land_where_our_partitioner_puts_them() {
    let Some((bootstrap, cluster, topic)) = setup("java_key_partitioning", "p-keys", 6).await
    else {
        return;
    };
    let keys: Vec<String> = (0..60)
        .map(|i| format!("user-{i}-{}", "k".repeat(i % 7)))
        .collect();
    let input: String = keys.iter().map(|k| format!("{k}\tv-{k}\n")).collect();
    java::run(
        "org.apache.kafka.tools.ConsoleProducer",
        &[
            "--bootstrap-server",
            &bootstrap,
            "--topic",
            &topic,
            "--reader-property",
            "parse.key=true",
            "--reader-property",
            "key.separator=\t",
        ],
        Some(&input),
    );
    let mut placed = 0;
    for p in 0..6 {
        for r in read_partition(&cluster, &topic, p).await {
            let key = String::from_utf8(r.key.unwrap().to_vec()).unwrap();
            assert_eq!(
                partition_for_key(key.as_bytes(), 6),
                p,
                "Java put {key} in partition {p}"
            );
            placed += 1;
        }
    }
    assert_eq!(placed, keys.len());
}

#[tokio::test]
async fn java_console_consumer_reads_what_we_write_in_every_codec() {
    let Some(bootstrap) = support::bootstrap("java_reads_our_codecs") else {
        return;
    };
    let cluster = cluster(&bootstrap).await;
    // One partition holding each codec's batches in turn (a producer per
    // codec, closed before the next starts), read by one Java consumer: one
    // JVM start instead of one per codec.
    let topic = new_topic(&cluster, "p-java-codecs", 1).await;
    let mut want = Vec::new();
    for codec in Compression::ALL {
        let producer = connect_producer(producer_config(&bootstrap).compression(codec, None)).await;
        let mut deliveries = Vec::new();
        for i in 0..200 {
            let key = format!("k{i}");
            let value = format!("{codec} value {i} {}", "abc".repeat(i % 40));
            want.push(format!("{key}\t{value}"));
            deliveries.push(
                producer
                    .send(ProducerRecord::new(&topic).key(key).value(value))
                    .await
                    .unwrap(),
            );
        }
        for d in deliveries {
            d.await.unwrap();
        }
        producer.close(Duration::from_secs(10)).await.unwrap();
    }
    let n = want.len().to_string();
    let out = java::run(
        "org.apache.kafka.tools.consumer.ConsoleConsumer",
        &[
            "--bootstrap-server",
            &bootstrap,
            "--topic",
            &topic,
            "--from-beginning",
            "--max-messages",
            &n,
            "--timeout-ms",
            "20000",
            "--formatter-property",
            "print.key=true",
        ],
        None,
    );
    let got: Vec<&str> = out.lines().collect();
    for (codec, (got, want)) in Compression::ALL
        .iter()
        .zip(got.chunks(200).zip(want.chunks(200)))
    {
        assert_eq!(got, want, "Java's reading of our {codec} batches");
    }
    assert_eq!(
        got.len(),
        want.len(),
        "Java read every record of every codec"
    );
}

#[tokio::test]
async fn we_decode_what_the_java_producer_writes_in_every_codec() {
    let Some(bootstrap) = support::bootstrap("we_read_java_codecs") else {
        return;
    };
    let cluster = cluster(&bootstrap).await;
    let mut topics = Vec::new();
    for codec in Compression::ALL {
        let topic = new_topic(&cluster, &format!("p-fromjava-{codec}"), 1).await;
        let lines: Vec<String> = (0..300)
            .map(|i| format!("java {codec} {i} {}", "zz".repeat(i % 30)))
            .collect();
        topics.push((codec, topic, lines));
    }
    // The Java producers run side by side: their time is mostly JVM start.
    std::thread::scope(|s| {
        for (codec, topic, lines) in &topics {
            let bootstrap = &bootstrap;
            s.spawn(move || {
                let input = lines.iter().map(|l| format!("{l}\n")).collect::<String>();
                java::run(
                    "org.apache.kafka.tools.ConsoleProducer",
                    &[
                        "--bootstrap-server",
                        bootstrap,
                        "--topic",
                        topic,
                        "--compression-codec",
                        codec.name(),
                    ],
                    Some(&input),
                );
            });
        }
    });
    for (codec, topic, lines) in &topics {
        let got: Vec<String> = read_partition(&cluster, topic, 0)
            .await
            .into_iter()
            .map(|r| String::from_utf8(r.value.unwrap().to_vec()).unwrap())
            .collect();
        assert_eq!(&got, lines, "our reading of Java's {codec} batches");
    }
}

#[tokio::test]
async fn broker_quota_throttling_is_reported_and_every_record_still_arrives() {
    if !support::real_broker_only(
        "broker_quota_throttling_is_reported_and_every_record_still_arrives",
        "client quotas (AlterClientQuotas)",
    ) {
        return;
    }
    use kafka_protocol::messages::alter_client_quotas_request::{EntityData, EntryData, OpData};
    use kafka_protocol::messages::AlterClientQuotasRequest;
    use kafka_protocol::protocol::StrBytes;
    use purekafka::protocol::versions::Versions;

    let Some((bootstrap, cluster, topic)) = setup("producer_quota_throttle", "p-quota", 1).await
    else {
        return;
    };
    // A 64 KB/s produce quota for this client id only (KIP-13 quotas; the
    // broker answers at once with a throttle time, KIP-219).
    let client_id = format!("purekafka-quota-{}", std::process::id());
    let quota = |remove: bool| {
        AlterClientQuotasRequest::default().with_entries(vec![EntryData::default()
            .with_entity(vec![EntityData::default()
                .with_entity_type(StrBytes::from_static_str("client-id"))
                .with_entity_name(Some(StrBytes::from_string(client_id.clone())))])
            .with_ops(vec![OpData::default()
                .with_key(StrBytes::from_static_str("producer_byte_rate"))
                .with_value(65_536.0)
                .with_remove(remove)])])
    };
    let admin_conn = cluster
        .any_connection(purekafka::cluster::Workload::Admin)
        .await
        .unwrap();
    let resp = admin_conn
        .send(&quota(false), Versions::new(0, 1))
        .await
        .unwrap();
    assert!(resp.entries.iter().all(|e| e.error_code == 0), "{resp:?}");
    let producer = connect_producer(
        producer_config(&bootstrap)
            .client(
                purekafka::ClientConfig::builder()
                    .bootstrap_servers(&bootstrap)
                    .client_id(&client_id)
                    .request_timeout(Duration::from_secs(10)),
            )
            .batch_size(64 << 10),
    )
    .await;
    // Rounds of 128 KiB, twice the per-second quota, until the broker has
    // throttled us at least once: it may take a moment to apply the quota.
    let mut next_offset = 0i64;
    for _round in 0..16 {
        let mut deliveries = Vec::new();
        for i in 0..256u32 {
            let record = ProducerRecord::new(&topic).value(vec![(i % 251) as u8; 512]);
            deliveries.push(producer.send(record).await.unwrap());
        }
        for d in deliveries {
            assert_eq!(d.await.unwrap().offset, next_offset);
            next_offset += 1;
        }
        if producer.metrics().throttled_responses > 0 {
            break;
        }
    }
    let m = producer.metrics();
    producer.close(Duration::from_secs(10)).await.unwrap();
    let _ = admin_conn.send(&quota(true), Versions::new(0, 1)).await;
    assert!(m.throttled_responses > 0, "{m:?}");
    assert!(m.throttle_time_max > Duration::ZERO, "{m:?}");
    assert_eq!(m.record_errors, 0, "{m:?}");
}

/// `flush` waits for the records sent before it and for no later ones, as
/// the Java client's does: it returns while another task keeps the
/// producer busy, and every record sent before the call has its outcome
/// when it returns. (Before, a flush waited until nothing at all was
/// outstanding, so a sender that never paused kept it from returning.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flush_returns_while_another_task_keeps_sending() {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::sync::Arc;

    let Some((bootstrap, _cluster, topic)) = setup("flush_while_sending", "p-flush-busy", 4).await
    else {
        return;
    };
    let producer = Arc::new(
        connect_producer(producer_config(&bootstrap).linger(Duration::from_millis(5))).await,
    );
    let stop = Arc::new(AtomicBool::new(false));
    let sent_by_other = Arc::new(AtomicUsize::new(0));
    let busy = Arc::new(tokio::sync::Notify::new());
    let other = tokio::spawn({
        let (producer, topic) = (producer.clone(), topic.clone());
        let (stop, sent, busy) = (stop.clone(), sent_by_other.clone(), busy.clone());
        async move {
            let mut i = 0u64;
            while !stop.load(Ordering::Acquire) {
                let record = ProducerRecord::new(&topic)
                    .key(format!("other-{}", i % 64))
                    .value(vec![b'o'; 200]);
                // Its outcome does not matter here: the future is dropped.
                drop(producer.send(record).await.expect("send"));
                i += 1;
                sent.store(i as usize, Ordering::Release);
                if i == 1_000 {
                    busy.notify_one();
                }
                if i.is_multiple_of(64) {
                    tokio::task::yield_now().await;
                }
            }
        }
    });
    tokio::time::timeout(Duration::from_secs(30), busy.notified())
        .await
        .expect("the other task sends");
    // A round: records sent with callbacks, then a flush. A flush that
    // returns before the other task sends again proves nothing (a flush
    // waiting for an idle producer would return then too), so rounds are
    // repeated, up to 5, until one overlaps the other task's sending.
    const BEFORE: usize = 2_000;
    let completed = Arc::new(AtomicUsize::new(0));
    let mut overlapped = false;
    for round in 1..=5 {
        for i in 0..BEFORE {
            let completed = completed.clone();
            producer
                .send_with_callback(
                    ProducerRecord::new(&topic)
                        .key(format!("before-{i}"))
                        .value(format!("{i}")),
                    move |r| {
                        r.expect("delivered");
                        completed.fetch_add(1, Ordering::AcqRel);
                    },
                )
                .await
                .expect("send");
        }
        let others_at_flush = sent_by_other.load(Ordering::Acquire);
        tokio::time::timeout(Duration::from_secs(30), producer.flush())
            .await
            .expect("flush returns while another task keeps sending");
        assert_eq!(
            completed.load(Ordering::Acquire),
            BEFORE * round,
            "every record sent before the flush has its outcome when it returns"
        );
        if sent_by_other.load(Ordering::Acquire) > others_at_flush {
            overlapped = true;
            break;
        }
    }
    assert!(
        overlapped,
        "in one of 5 rounds the other task went on sending during the flush"
    );
    stop.store(true, Ordering::Release);
    tokio::time::timeout(Duration::from_secs(30), other)
        .await
        .expect("the other task stops")
        .expect("no panic");
    tokio::time::timeout(Duration::from_secs(30), producer.flush())
        .await
        .expect("a flush with no other sender returns");
    producer
        .close(Duration::from_secs(30))
        .await
        .expect("close");
}
