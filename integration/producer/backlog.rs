//! A compressed partition with a backlog: batches a sender fills to
//! `batch.max.size` (KIP-782) are closed there and compressed by a sealer
//! task, off the sender's thread, while the partition's one request is in
//! flight. Every record still arrives once, in send order, and a flush
//! covers the closed batches too.

use std::time::Duration;

use purekafka::producer::{Producer, ProducerRecord};
use purekafka::protocol::compression::Compression;

use super::{cluster, connect_producer, new_topic, producer_config};
use crate::support::{self, read::read_partition};

/// 80 bytes that do not compress to nothing (xorshift32 from `i`), after
/// the record's number.
fn value(i: u32) -> Vec<u8> {
    let mut x = i.wrapping_mul(2_654_435_761) | 1;
    let mut v = format!("{i:06} ").into_bytes();
    v.extend((0..80).map(|_| {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        b'a' + (x >> 27) as u8
    }));
    v
}

/// A flush, bounded: the records are all in memory on a local broker.
async fn flush(producer: &Producer, codec: Compression) {
    tokio::time::timeout(Duration::from_secs(30), producer.flush())
        .await
        .unwrap_or_else(|_| panic!("{codec}: the flush did not end in 30 s"));
}

#[tokio::test]
async fn compressed_batches_filled_to_the_cap_in_a_backlog_arrive_once_in_order() {
    let Some(bootstrap) = support::bootstrap("compressed_backlog") else {
        return;
    };
    let cluster = cluster(&bootstrap).await;
    const N: u32 = 4_000;
    for codec in [Compression::Zstd, Compression::Lz4] {
        let topic = new_topic(&cluster, &format!("p-backlog-{codec}"), 1).await;
        // batch.size 1 KiB, grown to at most 4 KiB while the one request
        // allowed is in flight: about 40 records a batch at the cap.
        let producer = connect_producer(
            producer_config(&bootstrap)
                .batch_size(1 << 10)
                .batch_max_size(4 << 10)
                .compression(codec, None)
                .set("max.in.flight.requests.per.connection", "1")
                .unwrap(),
        )
        .await;
        let mut deliveries = Vec::new();
        for i in 0..N {
            let record = ProducerRecord::new(&topic).value(value(i));
            deliveries.push(producer.send(record).await.expect("send"));
            if i == N / 2 {
                flush(&producer, codec).await;
                for (j, d) in deliveries.drain(..).enumerate() {
                    // A zero timeout still polls the delivery once.
                    let done = tokio::time::timeout(Duration::ZERO, d).await;
                    let meta = done
                        .unwrap_or_else(|_| {
                            panic!("{codec}: record {j} has no outcome after the flush")
                        })
                        .unwrap_or_else(|e| panic!("{codec}: record {j}: {e}"));
                    assert_eq!(meta.offset, j as i64, "{codec}: offsets follow send order");
                }
            }
        }
        flush(&producer, codec).await;
        for (k, d) in deliveries.into_iter().enumerate() {
            let i = N / 2 + 1 + k as u32;
            let meta = tokio::time::timeout(Duration::from_secs(30), d)
                .await
                .unwrap_or_else(|_| panic!("{codec}: record {i} has no outcome"))
                .unwrap_or_else(|e| panic!("{codec}: record {i}: {e}"));
            assert_eq!(
                meta.offset,
                i64::from(i),
                "{codec}: offsets follow send order"
            );
        }
        let metrics = producer.metrics();
        assert_eq!(metrics.record_errors, 0, "{codec}: {metrics:?}");
        let per_batch = metrics.records_per_batch();
        assert!(
            (12.0..=45.0).contains(&per_batch),
            "{codec}: batches should grow past batch.size and stop at the cap: \
             {per_batch:.1} records per batch"
        );
        let read = read_partition(&cluster, &topic, 0).await;
        assert_eq!(read.len(), N as usize, "{codec}: every record once");
        for (i, r) in read.iter().enumerate() {
            assert_eq!(
                r.value.as_deref(),
                Some(&value(i as u32)[..]),
                "{codec} #{i}"
            );
        }
        producer
            .close(Duration::from_secs(10))
            .await
            .expect("close");
    }
}
