//! Memory held by a consumer whose application keeps some of the records it
//! reads (issue #21, item 5): every kept record pins the buffer it was
//! sliced from (a whole fetch response, or a decompressed batch) unless it
//! is [`ConsumerRecord::detach`]ed.
//!
//! Reads RECORDS records from the beginning of every partition of TOPIC
//! (manual assignment), keeps every KEEP_EVERY-th one (as it is, or
//! detached), and prints one JSON line: records read and kept, the kept
//! key + value bytes, and the process's resident set (VmRSS) and peak
//! (VmHWM) from /proc/self/status at the end, in MiB.
//!
//! ```sh
//! cargo run --release --example consumer_retention -- 127.0.0.1:19092 TOPIC 1000000 1000 keep
//! cargo run --release --example consumer_retention -- 127.0.0.1:19092 TOPIC 1000000 1000 detach
//! ```

use std::time::{Duration, Instant};

use purekafka::{AutoOffsetReset, Consumer, ConsumerConfig, ConsumerRecord, TopicPartition};

/// A field of /proc/self/status, in MiB (0 where there is no such file).
fn status_mib(field: &str) -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|rest| {
            rest.trim()
                .trim_end_matches("kB")
                .trim()
                .parse::<f64>()
                .ok()
        })
        .map_or(0.0, |kb| kb / 1024.0)
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> purekafka::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [bootstrap, topic, records, keep_every, mode] = &args[..] else {
        eprintln!("usage: consumer_retention BOOTSTRAP TOPIC RECORDS KEEP_EVERY keep|detach");
        std::process::exit(2);
    };
    let wanted: usize = records.parse().expect("RECORDS is a number");
    let keep_every: usize = keep_every.parse().expect("KEEP_EVERY is a number");
    let detach = match mode.as_str() {
        "keep" => false,
        "detach" => true,
        other => panic!("mode {other:?}: keep or detach"),
    };
    let config = ConsumerConfig::builder()
        .bootstrap_servers(bootstrap)
        .auto_offset_reset(AutoOffsetReset::Earliest)
        .build()?;
    let consumer = Consumer::connect(config).await?;
    let metadata = consumer
        .cluster()
        .refresh_metadata(Some(std::slice::from_ref(topic)))
        .await?;
    let partitions: Vec<TopicPartition> = metadata
        .topics
        .get(topic.as_str())
        .map(|t| {
            t.partitions
                .iter()
                .map(|p| TopicPartition::new(topic.as_str(), p.partition))
                .collect()
        })
        .unwrap_or_default();
    consumer.assign(partitions);
    let started = Instant::now();
    let mut kept: Vec<ConsumerRecord> = Vec::new();
    let mut read = 0usize;
    let mut idle = 0;
    while read < wanted && idle < 50 {
        let batch = consumer.poll(Duration::from_millis(100)).await?;
        idle = if batch.is_empty() { idle + 1 } else { 0 };
        for r in batch {
            if read.is_multiple_of(keep_every) {
                kept.push(if detach { r.detach() } else { r });
            }
            read += 1;
        }
    }
    let elapsed = started.elapsed();
    consumer.close().await?;
    let kept_bytes: usize = kept
        .iter()
        .map(|r| r.key.as_ref().map_or(0, |k| k.len()) + r.value.as_ref().map_or(0, |v| v.len()))
        .sum();
    println!(
        "{{\"mode\":\"{mode}\",\"records\":{read},\"kept\":{},\"kept_bytes\":{kept_bytes},\
         \"rss_mib\":{:.1},\"peak_rss_mib\":{:.1},\"elapsed_s\":{:.3}}}",
        kept.len(),
        status_mib("VmRSS:"),
        status_mib("VmHWM:"),
        elapsed.as_secs_f64()
    );
    Ok(())
}
