//! `purekafka perf consume`: read `--messages` records from the beginning of
//! every partition and report throughput as Kafka's ConsumerPerformance
//! does (MB = key + value bytes / 2^20; CRC checks on, the default).
//!
//! ConsumerPerformance always joins a group and reports the join as
//! "rebalance time", excluded from its "fetch" figures. Without `--group`
//! the matching span here is the setup: bootstrap, topic metadata and
//! assignment. With `--group` the consumer subscribes (starting at the
//! group's committed offsets, else the beginning) and the join happens in
//! the first polls, so it counts in the fetch time. With `--share-group`
//! a share consumer (KIP-932, implicit acknowledgement) reads instead, as
//! Kafka's ShareConsumerPerformance does; the group's
//! `share.auto.offset.reset` decides where it starts.

use std::future::Future;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use clap::Args;
use purekafka::{Cluster, Consumer, ShareConsumer, ShareConsumerConfig};

use crate::consume::topic_partitions;
use crate::{split_kv, Connect};

/// Options of `purekafka perf consume`.
#[derive(Args, Debug)]
pub struct ConsumePerfArgs {
    #[command(flatten)]
    connect: Connect,
    #[cfg(feature = "metrics")]
    #[command(flatten)]
    metrics: crate::MetricsArgs,
    /// Topic to read.
    #[arg(long, short = 't')]
    topic: String,
    /// Records to read (all partitions together).
    #[arg(long, visible_alias = "num-records")]
    messages: u64,
    /// Consumer group to subscribe in (default: manual assignment of every
    /// partition from the beginning, nothing committed).
    #[arg(long, short = 'g')]
    group: Option<String>,
    /// Share group to read through (KIP-932; implicit acknowledgement).
    #[arg(long, value_name = "G", conflicts_with = "group")]
    share_group: Option<String>,
    /// Give up when this long passes without a record (as the Java tool's
    /// --timeout).
    #[arg(long, value_name = "MS", default_value_t = 10_000)]
    timeout_ms: u64,
    /// Any consumer setting, key=value (repeatable).
    #[arg(long, value_name = "K=V")]
    consumer_property: Vec<String>,
    /// Print one JSON object instead of a line of text.
    #[arg(long)]
    json: bool,
}

/// What one run measured.
struct Figures {
    start: SystemTime,
    end: SystemTime,
    records: u64,
    bytes: u64,
    elapsed: Duration,
    setup: Duration,
}

/// Runs `perf consume`; fails when fewer than `--messages` records arrive
/// before the timeout (after printing what was read).
pub async fn run(args: ConsumePerfArgs) -> purekafka::Result<()> {
    if let Some(group) = &args.share_group {
        return run_share(&args, group).await;
    }
    let mut props = vec!["auto.offset.reset=earliest".to_owned()];
    if let Some(g) = &args.group {
        props.push(format!("group.id={g}"));
    }
    props.extend(args.consumer_property.iter().cloned());
    let config = args.connect.consumer(&props)?.build()?;

    let start = SystemTime::now();
    let started = Instant::now();
    let cluster = Cluster::connect(config.client.clone()).await?;
    let partitions = topic_partitions(&cluster, &args.topic, None).await?;
    let consumer = Consumer::with_cluster(cluster, config);
    #[cfg(feature = "metrics")]
    args.metrics.publish(|p| p.consumer(&consumer))?;
    if args.group.is_some() {
        consumer.subscribe([args.topic.as_str()])?;
    } else {
        consumer.assign(partitions.clone());
        consumer.seek_to_beginning(&partitions)?;
    }
    let setup = started.elapsed();

    let c = &consumer;
    let figures = read(&args, (start, started, setup), move || async move {
        Ok(tally(&c.poll(POLL).await?, |r| (&r.key, &r.value)))
    })
    .await?;
    let closed = consumer.close().await;
    report(&figures, args.json);
    closed?;
    check_count(&args, &figures)
}

/// Short polls, as ConsumerPerformance's 100 ms, so the timeout is checked
/// between them.
const POLL: Duration = Duration::from_millis(100);

/// The read loop of both consumers: `poll` until `--messages` records
/// arrived or `--timeout-ms` passed without one. `poll` answers how many
/// records one poll returned and their key + value bytes. `clock` is when
/// the run started (wall and monotonic) and how long its setup took.
async fn read<F, Fut>(
    args: &ConsumePerfArgs,
    (start, started, setup): (SystemTime, Instant, Duration),
    mut poll: F,
) -> purekafka::Result<Figures>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = purekafka::Result<(u64, u64)>>,
{
    let timeout = Duration::from_millis(args.timeout_ms);
    let (mut records, mut bytes) = (0u64, 0u64);
    let mut last_record = Instant::now();
    while records < args.messages && last_record.elapsed() <= timeout {
        let (n, b) = poll().await?;
        if n > 0 {
            last_record = Instant::now();
            records += n;
            bytes += b;
        }
    }
    Ok(Figures {
        start,
        end: SystemTime::now(),
        records,
        bytes,
        elapsed: started.elapsed(),
        setup,
    })
}

/// How many records a poll returned, and their key + value bytes.
fn tally<R>(
    batch: &[R],
    parts: impl Fn(&R) -> (&Option<bytes::Bytes>, &Option<bytes::Bytes>),
) -> (u64, u64) {
    let bytes = batch.iter().map(|r| {
        let (k, v) = parts(r);
        (k.as_ref().map_or(0, |k| k.len()) + v.as_ref().map_or(0, |v| v.len())) as u64
    });
    (batch.len() as u64, bytes.sum())
}

/// The error when fewer than `--messages` records arrived.
fn check_count(args: &ConsumePerfArgs, figures: &Figures) -> purekafka::Result<()> {
    if figures.records < args.messages {
        return Err(purekafka::Error::Timeout {
            broker: purekafka::Origin::Cluster,
            api: format!(
                "perf consume: read {} of {} records of {}",
                figures.records, args.messages, args.topic
            ),
            after: Duration::from_millis(args.timeout_ms),
            config_key: "--timeout-ms",
        });
    }
    Ok(())
}

/// `--share-group`: the same loop over a [`ShareConsumer`]; setup is the
/// connection (the join happens in the first polls).
async fn run_share(args: &ConsumePerfArgs, group: &str) -> purekafka::Result<()> {
    let mut b = ShareConsumerConfig::builder();
    for (k, v) in args.connect.properties()? {
        b = b.set(&k, &v)?;
    }
    for kv in &args.consumer_property {
        let (k, v) = split_kv(kv, "--consumer-property")?;
        b = b.set(k, v)?;
    }
    let config = b.set("group.id", group)?.build()?;
    let start = SystemTime::now();
    let started = Instant::now();
    let consumer = ShareConsumer::connect(config).await?;
    consumer.subscribe([args.topic.as_str()])?;
    let setup = started.elapsed();
    let c = &consumer;
    let figures = read(args, (start, started, setup), move || async move {
        Ok(tally(&c.poll(POLL).await?, |r| (&r.key, &r.value)))
    })
    .await?;
    let closed = consumer.close().await;
    report(&figures, args.json);
    closed?;
    check_count(args, &figures)
}

fn report(f: &Figures, json: bool) {
    let mb = f.bytes as f64 / (1024.0 * 1024.0);
    let secs = f.elapsed.as_secs_f64().max(1e-9);
    let fetch = f.elapsed.saturating_sub(f.setup);
    let fetch_secs = fetch.as_secs_f64().max(1e-9);
    let (start, end) = (utc(f.start), utc(f.end));
    if json {
        let v = serde_json::json!({
            "start_time": start,
            "end_time": end,
            "records": f.records,
            "mb": mb,
            "elapsed_s": secs,
            "mb_per_sec": mb / secs,
            "records_per_sec": f.records as f64 / secs,
            "setup_time_ms": f.setup.as_millis() as u64,
            "fetch_time_ms": fetch.as_millis() as u64,
            "fetch_mb_per_sec": mb / fetch_secs,
            "fetch_records_per_sec": f.records as f64 / fetch_secs,
        });
        println!("{v}");
    } else {
        println!(
            "{start} to {end}: {mb:.4} MB, {:.4} MB/sec, {} records, {:.1} records/sec; \
             {} ms setup, {} ms fetch, {:.4} fetch MB/sec, {:.1} fetch records/sec",
            mb / secs,
            f.records,
            f.records as f64 / secs,
            f.setup.as_millis(),
            fetch.as_millis(),
            mb / fetch_secs,
            f.records as f64 / fetch_secs,
        );
    }
}

/// `YYYY-MM-DDTHH:MM:SS.mmmZ`.
fn utc(t: SystemTime) -> String {
    let ms = t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis());
    let (days, ms_of_day) = ((ms / 86_400_000) as i64, ms % 86_400_000);
    let (y, m, d) = civil_from_days(days);
    let s = ms_of_day / 1000;
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{:03}Z",
        s / 3600,
        s / 60 % 60,
        s % 60,
        ms_of_day % 1000
    )
}

/// Days since 1970-01-01 to a proleptic Gregorian date (H. Hinnant's
/// algorithm).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utc_formats_known_instants() {
        assert_eq!(utc(UNIX_EPOCH), "1970-01-01T00:00:00.000Z");
        let t = UNIX_EPOCH + Duration::from_millis(1_709_210_096_789);
        assert_eq!(utc(t), "2024-02-29T12:34:56.789Z");
    }
}
