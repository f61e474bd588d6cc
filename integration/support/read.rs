//! Reads a partition back with plain Fetch requests, independent of the
//! consumer, so producer tests check what the broker actually stored.

use std::time::Duration;

use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::{FetchRequest, TopicName};
use kafka_protocol::protocol::StrBytes;
use purekafka::cluster::Workload;
use purekafka::protocol::records::{decode_batches, DecodeLimits, Record};
use purekafka::protocol::versions::Versions;
use purekafka::Cluster;

/// Every data record of `topic`-`partition` from offset 0 to the high
/// watermark (read_uncommitted; control batches skipped).
pub async fn read_partition(cluster: &Cluster, topic: &str, partition: i32) -> Vec<Record> {
    // Leadership may have moved (fault tests): a follower would answer with
    // its own, lagging high watermark.
    cluster
        .refresh_metadata(Some(&[topic.to_owned()]))
        .await
        .expect("metadata");
    let leader = cluster.leader(topic, partition).await.expect("leader");
    let conn = cluster
        .connection(&leader, Workload::Fetch)
        .await
        .expect("fetch connection");
    let mut out = Vec::new();
    let mut offset = 0i64;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let req = FetchRequest::default()
            .with_max_wait_ms(100)
            .with_min_bytes(1)
            .with_max_bytes(8 << 20)
            .with_topics(vec![FetchTopic::default()
                .with_topic(TopicName(StrBytes::from_string(topic.to_owned())))
                .with_partitions(vec![FetchPartition::default()
                    .with_partition(partition)
                    .with_fetch_offset(offset)
                    .with_partition_max_bytes(4 << 20)])]);
        let resp = conn
            .send(&req, Versions::new(4, 12))
            .await
            .expect("Fetch round trip");
        let p = &resp.responses[0].partitions[0];
        assert_eq!(p.error_code, 0, "Fetch {topic}-{partition} at {offset}");
        if let Some(records) = p.records.clone() {
            let decoded = decode_batches(records, &DecodeLimits::default()).expect("decode");
            for batch in decoded.batches {
                if batch.header.is_control {
                    offset = batch.header.base_offset + batch.header.last_offset_delta as i64 + 1;
                    continue;
                }
                for r in batch.records {
                    if r.offset >= offset {
                        offset = r.offset + 1;
                        out.push(r);
                    }
                }
            }
        }
        if offset >= p.high_watermark {
            return out;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "reading {topic}-{partition} stalled at {offset} of {}",
            p.high_watermark
        );
    }
}

/// The headers of every batch of `topic`-`partition` up to the high
/// watermark, on `conn` (a connection to the leader).
pub async fn read_batches(
    conn: &purekafka::cluster::Connection,
    topic: &str,
    partition: i32,
) -> Vec<purekafka::protocol::records::BatchHeader> {
    let mut out = Vec::new();
    let mut offset = 0i64;
    loop {
        let req = FetchRequest::default()
            .with_max_wait_ms(100)
            .with_min_bytes(1)
            .with_max_bytes(8 << 20)
            .with_topics(vec![FetchTopic::default()
                .with_topic(TopicName(StrBytes::from_string(topic.to_owned())))
                .with_partitions(vec![FetchPartition::default()
                    .with_partition(partition)
                    .with_fetch_offset(offset)
                    .with_partition_max_bytes(4 << 20)])]);
        let resp = conn.send(&req, Versions::new(4, 12)).await.expect("Fetch");
        let p = &resp.responses[0].partitions[0];
        assert_eq!(p.error_code, 0);
        let before = offset;
        if let Some(records) = p.records.clone() {
            for batch in decode_batches(records, &DecodeLimits::default())
                .expect("decode")
                .batches
            {
                let h = batch.header;
                let next = h.base_offset + h.last_offset_delta as i64 + 1;
                if next > offset {
                    offset = next;
                    out.push(h);
                }
            }
        }
        if offset >= p.high_watermark || offset == before {
            return out;
        }
    }
}

/// Every record value of `topic` (partitions `0..partitions`) up to the end
/// offsets at call time, read by our consumer at `isolation`: one vector per
/// partition, in offset order.
pub async fn consume_values(
    bootstrap: &str,
    topic: &str,
    partitions: i32,
    isolation: purekafka::consumer::IsolationLevel,
) -> Vec<Vec<String>> {
    use purekafka::consumer::{AutoOffsetReset, Consumer, ConsumerConfig};
    use purekafka::TopicPartition;
    let consumer = Consumer::connect(
        ConsumerConfig::builder()
            .bootstrap_servers(bootstrap)
            .auto_offset_reset(AutoOffsetReset::Earliest)
            .isolation_level(isolation)
            .build()
            .expect("consumer config"),
    )
    .await
    .expect("consumer");
    let tps: Vec<TopicPartition> = (0..partitions)
        .map(|p| TopicPartition::new(topic, p))
        .collect();
    consumer.assign(tps.clone());
    let mut ends = consumer.end_offsets(&tps).await.expect("end offsets");
    if isolation == purekafka::consumer::IsolationLevel::ReadCommitted {
        // A committed transaction's markers are written after EndTxn
        // returns, so the last stable offset may still trail the high
        // watermark for a moment. Wait (bounded) until it catches up; a
        // transaction left open on purpose keeps it behind, and then the
        // read stops at the stable offset. The high watermark is read
        // again each time: the marker that ends a transaction (a killed
        // producer's, aborted by its timeout) moves it too.
        let uncommitted = Consumer::connect(
            ConsumerConfig::builder()
                .bootstrap_servers(bootstrap)
                .build()
                .expect("consumer config"),
        )
        .await
        .expect("consumer");
        let mut high = uncommitted.end_offsets(&tps).await.expect("end offsets");
        let settle = tokio::time::Instant::now() + Duration::from_secs(10);
        while ends != high && tokio::time::Instant::now() < settle {
            tokio::time::sleep(Duration::from_millis(100)).await;
            ends = consumer.end_offsets(&tps).await.expect("end offsets");
            high = uncommitted.end_offsets(&tps).await.expect("end offsets");
        }
        uncommitted.close().await.expect("close");
    }
    let mut out = vec![Vec::new(); partitions as usize];
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let mut done = true;
        for tp in &tps {
            if consumer.position(tp).await.expect("position") < ends[tp] {
                done = false;
            }
        }
        if done {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "reading {topic} stalled"
        );
        for r in consumer
            .poll(Duration::from_millis(200))
            .await
            .expect("poll")
        {
            let value = r.value.map(|v| String::from_utf8_lossy(&v).into_owned());
            out[r.partition.partition as usize].push(value.unwrap_or_default());
        }
    }
    consumer.close().await.expect("close");
    out
}
