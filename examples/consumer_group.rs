//! Joins a consumer group, prints what it reads, and commits after each
//! batch; Ctrl-C or `max` records end it.
//!
//! ```sh
//! cargo run --example consumer_group -- 127.0.0.1:19092 orders my-group 100
//! ```

use std::time::Duration;

use purekafka::{AutoOffsetReset, Consumer, ConsumerConfig};

#[tokio::main(flavor = "current_thread")]
async fn main() -> purekafka::Result<()> {
    let mut args = std::env::args().skip(1);
    let bootstrap = args.next().unwrap_or_else(|| "127.0.0.1:19092".into());
    let topic = args.next().unwrap_or_else(|| "orders".into());
    let group = args.next().unwrap_or_else(|| "purekafka-example".into());
    let max: usize = args.next().and_then(|m| m.parse().ok()).unwrap_or(100);
    let config = ConsumerConfig::builder()
        .bootstrap_servers(&bootstrap)
        .group_id(&group)
        .auto_offset_reset(AutoOffsetReset::Earliest)
        .enable_auto_commit(false)
        .build()?;
    let consumer = Consumer::connect(config).await?;
    consumer.subscribe([topic.as_str()])?;
    let mut seen = 0;
    let mut idle_polls = 0;
    while seen < max && idle_polls < 20 {
        let records = consumer.poll(Duration::from_millis(500)).await?;
        if records.is_empty() {
            idle_polls += 1;
            continue;
        }
        idle_polls = 0;
        for r in &records {
            let value = r.value.as_deref().map(String::from_utf8_lossy);
            println!("{} @ {}: {:?}", r.partition, r.offset, value);
        }
        seen += records.len();
        match consumer.commit_sync().await {
            Ok(()) => {}
            // The group rebalanced: the partitions may have moved; polling
            // on rejoins and re-reads the committed offsets.
            Err(e) if e.is_commit_failed() => eprintln!("commit skipped: {e}"),
            Err(e) => return Err(e),
        }
    }
    println!("read {seen} records in group {group}");
    consumer.close().await
}
