//! Writing test data with raw requests (Produce, DeleteTopics) built from
//! our own record batch encoder, independent of the producer.

use std::time::Duration;

use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{DeleteTopicsRequest, ProduceRequest, TopicName};
use kafka_protocol::protocol::StrBytes;
use purekafka::cluster::Workload;
use purekafka::protocol::records::RecordBatchBuilder;
use purekafka::protocol::versions::Versions;
use purekafka::{Cluster, KafkaCode};

/// Appends one batch of `(timestamp ms, value)` records with acks=all and
/// returns the base offset the broker assigned.
pub async fn produce(
    cluster: &Cluster,
    topic: &str,
    partition: i32,
    records: &[(i64, String)],
) -> i64 {
    let mut batch = RecordBatchBuilder::new();
    for (ts, value) in records {
        let key = format!("k{partition}");
        batch
            .append(*ts, Some(key.as_bytes()), Some(value.as_bytes()), &[])
            .expect("append");
    }
    let bytes = batch.finish().expect("finish").freeze();
    let req = ProduceRequest::default()
        .with_acks(-1)
        .with_timeout_ms(10_000)
        .with_topic_data(vec![TopicProduceData::default()
            .with_name(TopicName(StrBytes::from_string(topic.to_owned())))
            .with_partition_data(vec![PartitionProduceData::default()
                .with_index(partition)
                .with_records(Some(bytes))])]);
    // Right after CreateTopics the leader may not know it leads yet
    // (NOT_LEADER_OR_FOLLOWER): retry retriable codes for a while.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    loop {
        let leader = cluster.leader(topic, partition).await.expect("leader");
        let resp = cluster
            .send(&leader, Workload::Produce, &req, Versions::new(3, 12))
            .await
            .expect("Produce round trip");
        let p = &resp.responses[0].partition_responses[0];
        let retriable = KafkaCode::from_code(p.error_code).is_some_and(|c| c.is_retriable());
        if !retriable || tokio::time::Instant::now() > deadline {
            assert_eq!(p.error_code, 0, "Produce to {topic}-{partition}: {p:?}");
            return p.base_offset;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        let _ = cluster.refresh_metadata(Some(&[topic.to_owned()])).await;
    }
}

/// `n` values `"{prefix}{i}"` stamped now.
pub fn values(prefix: &str, n: usize) -> Vec<(i64, String)> {
    let now = now_ms();
    (0..n).map(|i| (now, format!("{prefix}{i}"))).collect()
}

/// Milliseconds since the epoch.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// Deletes a topic and waits until the broker no longer lists it.
pub async fn delete_topic(cluster: &Cluster, name: &str) {
    let conn = cluster
        .any_connection(Workload::Admin)
        .await
        .expect("connection");
    let req = DeleteTopicsRequest::default()
        .with_timeout_ms(15_000)
        .with_topic_names(vec![TopicName(StrBytes::from_string(name.to_owned()))]);
    let resp = conn
        .send(&req, Versions::new(1, 5))
        .await
        .expect("DeleteTopics round trip");
    let code = resp.responses.first().map(|t| t.error_code).unwrap_or(-1);
    assert_eq!(code, 0, "DeleteTopics {name}: {resp:?}");
    tokio::time::sleep(Duration::from_millis(200)).await;
}
