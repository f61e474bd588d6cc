//! `purekafka produce`: one record per stdin line, like Kafka's console
//! producer.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use clap::Args;
use purekafka::producer::{Producer, ProducerRecord};
use purekafka::Error;
use tokio::io::{AsyncBufReadExt, BufReader};

use crate::{split_kv, Connect};

/// Options of `purekafka produce`.
#[derive(Args, Debug)]
pub struct ProduceArgs {
    #[command(flatten)]
    connect: Connect,
    #[cfg(feature = "metrics")]
    #[command(flatten)]
    metrics: crate::MetricsArgs,
    /// Topic to write to.
    #[arg(long, short = 't')]
    topic: String,
    /// Partition (default: the partitioner chooses).
    #[arg(long, short = 'p')]
    partition: Option<i32>,
    /// compression.type: none, gzip, snappy, lz4 or zstd.
    #[arg(long)]
    compression: Option<String>,
    /// acks: 0, 1 or all.
    #[arg(long)]
    acks: Option<String>,
    /// Split each line at the first SEP: the text before it is the key.
    #[arg(long, value_name = "SEP")]
    key_separator: Option<String>,
    /// A header added to every record, key=value (repeatable).
    #[arg(long, value_name = "K=V")]
    header: Vec<String>,
    /// Any producer setting, key=value (repeatable).
    #[arg(long, value_name = "K=V")]
    producer_property: Vec<String>,
}

/// Sends stdin's lines; fails if any record failed, naming the first error.
pub async fn run(args: ProduceArgs) -> purekafka::Result<()> {
    let mut props = args.producer_property.clone();
    if let Some(c) = &args.compression {
        props.push(format!("compression.type={c}"));
    }
    if let Some(a) = &args.acks {
        props.push(format!("acks={a}"));
    }
    let config = args.connect.producer(&props)?.build()?;
    let headers = args
        .header
        .iter()
        .map(|kv| {
            split_kv(kv, "--header").map(|(k, v)| {
                (
                    Bytes::copy_from_slice(k.as_bytes()),
                    Bytes::copy_from_slice(v.as_bytes()),
                )
            })
        })
        .collect::<purekafka::Result<Vec<_>>>()?;
    let producer = Producer::connect(config).await?;
    #[cfg(feature = "metrics")]
    args.metrics.publish(|p| p.producer(&producer))?;
    let failed = Arc::new(AtomicU64::new(0));
    let first_error: Arc<Mutex<Option<Error>>> = Arc::default();
    let mut lines = BufReader::new(tokio::io::stdin()).lines();
    let mut sent = 0u64;
    while let Some(line) = lines
        .next_line()
        .await
        .map_err(|e| Error::config("stdin", e.to_string()))?
    {
        let mut record = ProducerRecord::new(&args.topic);
        match args
            .key_separator
            .as_deref()
            .and_then(|sep| line.split_once(sep))
        {
            Some((key, value)) => {
                record = record.key(key.to_owned()).value(value.to_owned());
            }
            None => record = record.value(line),
        }
        if let Some(p) = args.partition {
            record = record.partition(p);
        }
        for (k, v) in &headers {
            record = record.header(k.clone(), Some(v.clone()));
        }
        let failed = failed.clone();
        let first_error = first_error.clone();
        producer
            .send_with_callback(record, move |result| {
                if let Err(e) = result {
                    failed.fetch_add(1, Ordering::Relaxed);
                    first_error
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .get_or_insert(e);
                }
            })
            .await?;
        sent += 1;
    }
    producer.close(Duration::from_secs(300)).await?;
    let failed = failed.load(Ordering::Relaxed);
    if failed > 0 {
        eprintln!("purekafka: {failed} of {sent} records failed");
        let first = first_error.lock().unwrap_or_else(|p| p.into_inner()).take();
        return Err(first.unwrap_or(Error::Closed));
    }
    Ok(())
}
