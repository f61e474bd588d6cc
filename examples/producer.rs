//! Sends a few keyed records with the idempotent producer (`acks=all`) and
//! prints where each landed.
//!
//! ```sh
//! cargo run --example producer -- 127.0.0.1:19092 orders
//! ```

use std::time::Duration;

use purekafka::{Producer, ProducerConfig, ProducerRecord};

#[tokio::main(flavor = "current_thread")]
async fn main() -> purekafka::Result<()> {
    let mut args = std::env::args().skip(1);
    let bootstrap = args.next().unwrap_or_else(|| "127.0.0.1:19092".into());
    let topic = args.next().unwrap_or_else(|| "orders".into());
    let config = ProducerConfig::builder()
        .bootstrap_servers(&bootstrap)
        .linger(Duration::from_millis(5))
        .set("compression.type", "lz4")?
        .build()?;
    let producer = Producer::connect(config).await?;
    let mut deliveries = Vec::new();
    for i in 0..10 {
        let record = ProducerRecord::new(&topic)
            .key(format!("customer-{}", i % 3))
            .value(format!("order {i}"));
        // Awaiting `send` waits for buffer space (backpressure); the future it
        // returns completes when the broker acknowledges the record.
        deliveries.push(producer.send(record).await?);
    }
    for delivery in deliveries {
        let meta = delivery.await?;
        println!("{} @ {}", meta.partition, meta.offset);
    }
    producer.close(Duration::from_secs(10)).await
}
