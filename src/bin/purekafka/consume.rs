//! `purekafka consume`: print records one per line, like Kafka's console
//! consumer. With `--group`, the consumer subscribes to the topic in that
//! group (rebalances, committed offsets; positions of printed records are
//! committed, on close too). Without it, every partition of the topic (or
//! the one `--partition` names) is assigned manually; nothing is committed.
//! With `--share-group`, records are read through a share group (KIP-932):
//! each printed record is accepted, fetched ones not printed are released.

use std::io::{ErrorKind, Write};
use std::time::Duration;

use clap::Args;
use purekafka::{
    AcknowledgeType, Cluster, Consumer, ConsumerRecord, Error, ShareConsumer, ShareConsumerConfig,
    TopicPartition,
};

use crate::{split_kv, Connect};

/// Options of `purekafka consume`.
#[derive(Args, Debug)]
pub struct ConsumeArgs {
    #[command(flatten)]
    connect: Connect,
    #[cfg(feature = "metrics")]
    #[command(flatten)]
    metrics: crate::MetricsArgs,
    /// Topic to read.
    #[arg(long, short = 't')]
    topic: String,
    /// Consumer group to subscribe in (starts at its committed offsets;
    /// `--from-beginning` applies only where it has none).
    #[arg(long, short = 'g')]
    group: Option<String>,
    /// Share group to read through (KIP-932 queues; the group's
    /// `share.auto.offset.reset` decides where it starts). Each printed
    /// record is accepted; fetched ones not printed are released.
    #[arg(
        long,
        value_name = "G",
        conflicts_with_all = ["group", "partition", "from_beginning", "isolation_level"]
    )]
    share_group: Option<String>,
    /// Start at the log start offset (default: `auto.offset.reset`, which
    /// is `latest`: only records written from now on).
    #[arg(long)]
    from_beginning: bool,
    /// Exit after printing this many records.
    #[arg(long, value_name = "N")]
    max_messages: Option<u64>,
    /// read_uncommitted (default) or read_committed.
    #[arg(long, value_name = "LEVEL")]
    isolation_level: Option<String>,
    /// Print the key (or `null`) and a tab before the value.
    #[arg(long)]
    print_key: bool,
    /// Print the offset and a tab before the key and value.
    #[arg(long)]
    print_offset: bool,
    /// Read only this partition (default: all).
    #[arg(long, short = 'p')]
    partition: Option<i32>,
    /// Exit (with status 0) when this long passes without a record
    /// (default: wait forever; Ctrl-C stops).
    #[arg(long, value_name = "MS")]
    timeout_ms: Option<u64>,
    /// Any consumer setting, key=value (repeatable).
    #[arg(long, value_name = "K=V")]
    consumer_property: Vec<String>,
}

/// The partitions of `topic` (just `only`, when given) from fresh metadata;
/// an error names the topic when it does not exist or has no such partition.
pub async fn topic_partitions(
    cluster: &Cluster,
    topic: &str,
    only: Option<i32>,
) -> purekafka::Result<Vec<TopicPartition>> {
    let metadata = cluster.refresh_metadata(Some(&[topic.to_owned()])).await?;
    let info = match metadata.topics.get(topic) {
        Some(t) if t.error.is_none() && !t.partitions.is_empty() => t,
        Some(t) => {
            let why = t
                .error
                .map_or("no partitions".to_owned(), |c| c.name().to_owned());
            return Err(Error::config("--topic", format!("{topic}: {why}")));
        }
        None => return Err(Error::config("--topic", format!("{topic}: no such topic"))),
    };
    match only {
        None => Ok(info
            .partitions
            .iter()
            .map(|p| TopicPartition::new(topic, p.partition))
            .collect()),
        Some(p) if info.partitions.iter().any(|i| i.partition == p) => {
            Ok(vec![TopicPartition::new(topic, p)])
        }
        Some(p) => Err(Error::config(
            "--partition",
            format!(
                "{topic} has no partition {p} ({} partitions)",
                info.partitions.len()
            ),
        )),
    }
}

/// Prints records until `--max-messages`, `--timeout-ms` without a record,
/// or Ctrl-C; then reports the count on stderr, as the Java tool does.
pub async fn run(args: ConsumeArgs) -> purekafka::Result<()> {
    if let Some(group) = &args.share_group {
        return run_share(&args, group).await;
    }
    if args.group.is_some() && args.partition.is_some() {
        return Err(Error::config(
            "--partition",
            "cannot be combined with --group (the group assigns partitions)",
        ));
    }
    let mut props = args.consumer_property.clone();
    if let Some(g) = &args.group {
        props.push(format!("group.id={g}"));
    }
    if let Some(level) = &args.isolation_level {
        props.push(format!("isolation.level={level}"));
    }
    if args.from_beginning {
        props.push("auto.offset.reset=earliest".into());
    }
    let config = args.connect.consumer(&props)?.build()?;
    let cluster = Cluster::connect(config.client.clone()).await?;
    let partitions = topic_partitions(&cluster, &args.topic, args.partition).await?;
    let consumer = Consumer::with_cluster(cluster, config);
    #[cfg(feature = "metrics")]
    args.metrics.publish(|p| p.consumer(&consumer))?;
    if args.group.is_some() {
        consumer.subscribe([args.topic.as_str()])?;
    } else {
        consumer.assign(partitions.clone());
        if args.from_beginning {
            consumer.seek_to_beginning(&partitions)?;
        }
    }

    let limit = args.max_messages.unwrap_or(u64::MAX);
    // Without --timeout-ms, poll in slices so Ctrl-C is noticed promptly.
    let slice = args
        .timeout_ms
        .map_or(Duration::from_secs(1), Duration::from_millis);
    let mut printed = 0u64;
    let mut out = std::io::BufWriter::new(std::io::stdout());
    let ctrl_c = tokio::signal::ctrl_c();
    tokio::pin!(ctrl_c);
    while printed < limit {
        let records = tokio::select! {
            r = consumer.poll(slice) => r?,
            _ = &mut ctrl_c => break,
        };
        if records.is_empty() && args.timeout_ms.is_some() {
            break;
        }
        let take = usize::try_from(limit - printed).unwrap_or(usize::MAX);
        for (i, r) in records.iter().enumerate() {
            if i == take || !write_record(&mut out, r, &args)? {
                // Commit only what was printed.
                rewind(&consumer, &records[i..]);
                return finish(&consumer, printed).await;
            }
            printed += 1;
        }
        if !flush(&mut out)? {
            break;
        }
    }
    flush(&mut out)?;
    finish(&consumer, printed).await
}

/// `--share-group`: explicit acknowledgement, so only printed records are
/// accepted; `close` releases the rest.
async fn run_share(args: &ConsumeArgs, group: &str) -> purekafka::Result<()> {
    let mut b = ShareConsumerConfig::builder();
    for (k, v) in args.connect.properties()? {
        b = b.set(&k, &v)?;
    }
    for kv in &args.consumer_property {
        let (k, v) = split_kv(kv, "--consumer-property")?;
        b = b.set(k, v)?;
    }
    let config = b
        .set("group.id", group)?
        .set("share.acknowledgement.mode", "explicit")?
        .build()?;
    let consumer = ShareConsumer::connect(config).await?;
    consumer.subscribe([args.topic.as_str()])?;
    let limit = args.max_messages.unwrap_or(u64::MAX);
    let slice = args
        .timeout_ms
        .map_or(Duration::from_secs(1), Duration::from_millis);
    let mut printed = 0u64;
    let mut out = std::io::BufWriter::new(std::io::stdout());
    let ctrl_c = tokio::signal::ctrl_c();
    tokio::pin!(ctrl_c);
    'polling: while printed < limit {
        let records = tokio::select! {
            r = consumer.poll(slice) => r?,
            _ = &mut ctrl_c => break,
        };
        if records.is_empty() && args.timeout_ms.is_some() {
            break;
        }
        for r in &records {
            if printed == limit || !write_record(&mut out, r, args)? {
                break 'polling;
            }
            consumer.acknowledge(r, AcknowledgeType::Accept)?;
            printed += 1;
        }
        if !flush(&mut out)? {
            break;
        }
    }
    flush(&mut out)?;
    let closed = consumer.close().await;
    eprintln!("Processed a total of {printed} messages");
    closed
}

/// Moves each partition back to its first record in `unprinted`, so the
/// positions a group commits on close stop at the last printed record.
fn rewind(consumer: &Consumer, unprinted: &[ConsumerRecord]) {
    let mut seen = std::collections::HashSet::new();
    for r in unprinted {
        if seen.insert(r.partition.clone()) {
            let _ = consumer.seek(&r.partition, r.offset);
        }
    }
}

/// Closes (leaving the group and committing, with `--group`) and reports
/// the count on stderr.
async fn finish(consumer: &Consumer, printed: u64) -> purekafka::Result<()> {
    let closed = consumer.close().await;
    eprintln!("Processed a total of {printed} messages");
    closed
}

/// Writes one line; `false` when stdout is closed (`| head`).
fn write_record(
    out: &mut impl Write,
    r: &ConsumerRecord,
    args: &ConsumeArgs,
) -> purekafka::Result<bool> {
    let mut line = Vec::with_capacity(r.value.as_ref().map_or(4, |v| v.len()) + 32);
    if args.print_offset {
        line.extend_from_slice(r.offset.to_string().as_bytes());
        line.push(b'\t');
    }
    if args.print_key {
        line.extend_from_slice(r.key.as_deref().unwrap_or(b"null"));
        line.push(b'\t');
    }
    line.extend_from_slice(r.value.as_deref().unwrap_or(b"null"));
    line.push(b'\n');
    stdout_result(out.write_all(&line))
}

fn flush(out: &mut impl Write) -> purekafka::Result<bool> {
    stdout_result(out.flush())
}

fn stdout_result(r: std::io::Result<()>) -> purekafka::Result<bool> {
    match r {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == ErrorKind::BrokenPipe => Ok(false),
        Err(e) => Err(Error::config("stdout", e.to_string())),
    }
}
