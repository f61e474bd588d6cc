//! An exactly-once copier, the equivalent of Kafka's
//! TransactionalMessageCopier: reads an input topic with read_committed,
//! transforms each record, and writes the results inside transactions that
//! also commit the consumed offsets (KIP-98, KIP-447). Killed at any moment
//! and restarted, it neither loses nor duplicates a record.
//!
//! ```sh
//! cargo run --example eos_copy -- --bootstrap 127.0.0.1:19092 \
//!     --input in --output out --group copier --transactional-id copier-1 \
//!     [--transaction-size 200] [--abort-probability 0.33] \
//!     [--max-records N] [--idle-exit-ms 5000] [--pause-ms 0]
//! ```
//!
//! Every input record `v` from input partition `p` becomes output record
//! `v` with key `p`, so each input partition's records land, in order, in
//! one output partition. A transaction is aborted at random with the given
//! probability; its input is then read again and copied by a later one.
//! The copier stops after `--max-records` committed copies, or when the
//! input has been idle for `--idle-exit-ms`. `--pause-ms` sleeps after each
//! committed transaction, which slows the copy down so that fault tests
//! can hit it mid-way several times.

use std::collections::HashMap;
use std::time::Duration;

use purekafka::consumer::group::{
    ConsumerGroupMetadata, GroupConfig, GroupMember, OffsetAndMetadata,
};
use purekafka::consumer::{
    AutoOffsetReset, Consumer, ConsumerConfig, ConsumerRecord, IsolationLevel,
};
use purekafka::producer::{Producer, ProducerConfig, ProducerRecord};
use purekafka::{ClientConfig, TopicPartition, TxnErrorKind};

struct Options {
    bootstrap: String,
    input: String,
    output: String,
    group: String,
    transactional_id: String,
    transaction_size: usize,
    abort_probability: f64,
    max_records: u64,
    idle_exit: Duration,
    pause: Duration,
}

/// Copies `batch` inside one transaction with its offsets; commits it, or
/// aborts it when `abort` (returning false).
async fn copy_in_transaction(
    producer: &Producer,
    output: &str,
    batch: &[ConsumerRecord],
    group: &ConsumerGroupMetadata,
    abort: bool,
) -> purekafka::Result<bool> {
    producer.begin_transaction()?;
    let mut next: HashMap<TopicPartition, OffsetAndMetadata> = HashMap::new();
    for r in batch {
        let record = ProducerRecord::new(output)
            .key(format!("p{}", r.partition.partition))
            .value(r.value.clone().unwrap_or_default());
        // Awaiting each delivery is not needed: commit flushes, and a failed
        // record makes the commit fail as abortable.
        drop(producer.send(record).await?);
        next.insert(r.partition.clone(), OffsetAndMetadata::new(r.offset + 1));
    }
    producer.send_offsets_to_transaction(&next, group).await?;
    if abort {
        producer.abort_transaction().await?;
        return Ok(false);
    }
    producer.commit_transaction().await?;
    Ok(true)
}

fn options() -> Result<Options, String> {
    let mut args: HashMap<String, String> = HashMap::new();
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let name = flag
            .strip_prefix("--")
            .ok_or_else(|| format!("unexpected argument {flag:?}"))?;
        let value = it.next().ok_or_else(|| format!("{flag} needs a value"))?;
        args.insert(name.to_owned(), value);
    }
    let get = |k: &str| {
        args.get(k)
            .cloned()
            .ok_or_else(|| format!("--{k} is required"))
    };
    let num = |k: &str, default: &str| -> Result<String, String> {
        Ok(args.get(k).cloned().unwrap_or_else(|| default.to_owned()))
    };
    Ok(Options {
        bootstrap: args
            .get("bootstrap")
            .cloned()
            .unwrap_or_else(|| "127.0.0.1:19092".into()),
        input: get("input")?,
        output: get("output")?,
        group: get("group")?,
        transactional_id: get("transactional-id")?,
        transaction_size: num("transaction-size", "200")?
            .parse()
            .map_err(|e| format!("--transaction-size: {e}"))?,
        abort_probability: num("abort-probability", "0")?
            .parse()
            .map_err(|e| format!("--abort-probability: {e}"))?,
        max_records: num("max-records", &u64::MAX.to_string())?
            .parse()
            .map_err(|e| format!("--max-records: {e}"))?,
        idle_exit: Duration::from_millis(
            num("idle-exit-ms", "5000")?
                .parse()
                .map_err(|e| format!("--idle-exit-ms: {e}"))?,
        ),
        pause: Duration::from_millis(
            num("pause-ms", "0")?
                .parse()
                .map_err(|e| format!("--pause-ms: {e}"))?,
        ),
    })
}

#[tokio::main]
async fn main() {
    let opts = match options() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("eos_copy: {e}");
            std::process::exit(2);
        }
    };
    if let Err(e) = run(opts).await {
        eprintln!("eos_copy: {e}");
        std::process::exit(1);
    }
}

async fn run(o: Options) -> purekafka::Result<()> {
    let client = ClientConfig::builder()
        .bootstrap_servers(&o.bootstrap)
        .client_id("eos-copy")
        .request_timeout(Duration::from_secs(10))
        .default_api_timeout(Duration::from_secs(60));
    let producer = Producer::connect(
        ProducerConfig::builder()
            .client(client.clone())
            .transactional_id(&o.transactional_id)
            .build()?,
    )
    .await?;
    // Fences an earlier incarnation and ends its open transaction, so the
    // committed offsets read next are final.
    producer.init_transactions().await?;

    let consumer = Consumer::connect(
        ConsumerConfig::builder()
            .client(|_| client.clone())
            .isolation_level(IsolationLevel::ReadCommitted)
            .auto_offset_reset(AutoOffsetReset::Earliest)
            .build()?,
    )
    .await?;
    let group = GroupMember::without_membership(consumer.cluster(), GroupConfig::new(&o.group))?;
    let group_meta = ConsumerGroupMetadata {
        group_id: o.group.clone(),
        generation_id: -1,
        member_id: String::new(),
        group_instance_id: None,
    };
    let meta = consumer
        .cluster()
        .refresh_metadata(Some(std::slice::from_ref(&o.input)))
        .await?;
    let partitions: Vec<TopicPartition> = meta
        .topics
        .get(&o.input)
        .map(|t| {
            t.partitions
                .iter()
                .map(|p| TopicPartition::new(o.input.as_str(), p.partition))
                .collect()
        })
        .unwrap_or_default();
    consumer.assign(partitions.clone());

    let mut copied = 0u64;
    let mut transactions = 0u64;
    let mut aborted = 0u64;
    'outer: loop {
        // Start (again) from the committed offsets: after a restart, and
        // after an abort, whose records must be copied again.
        let committed = group.fetch_committed(&partitions).await?;
        for tp in &partitions {
            match committed.get(tp) {
                Some(om) => consumer.seek(tp, om.offset)?,
                None => consumer.seek_to_beginning(std::slice::from_ref(tp))?,
            }
        }
        loop {
            let mut batch = Vec::new();
            let idle_since = tokio::time::Instant::now();
            while batch.len() < o.transaction_size {
                let records = consumer.poll(Duration::from_millis(200)).await?;
                if records.is_empty() {
                    if !batch.is_empty() || idle_since.elapsed() >= o.idle_exit {
                        break;
                    }
                    continue;
                }
                batch.extend(records);
            }
            if batch.is_empty() {
                break 'outer;
            }
            let abort = fastrand::f64() < o.abort_probability;
            match copy_in_transaction(&producer, &o.output, &batch, &group_meta, abort).await {
                Ok(true) => {}
                Ok(false) => {
                    aborted += 1;
                    continue 'outer;
                }
                // Abortable: abort, and copy the same input again.
                Err(e) if e.txn_kind() == Some(TxnErrorKind::Abortable) => {
                    eprintln!("eos_copy: aborting after: {e}");
                    producer.abort_transaction().await?;
                    aborted += 1;
                    continue 'outer;
                }
                // Unknown outcome: initialise again (which settles it), then
                // restart from whatever offsets were committed.
                Err(e) if e.txn_kind() == Some(TxnErrorKind::Indefinite) => {
                    eprintln!("eos_copy: re-initialising after: {e}");
                    producer.init_transactions().await?;
                    continue 'outer;
                }
                Err(e) => return Err(e),
            }
            transactions += 1;
            copied += batch.len() as u64;
            tokio::time::sleep(o.pause).await;
            if copied >= o.max_records {
                break 'outer;
            }
        }
    }
    producer.close(Duration::from_secs(30)).await?;
    consumer.close().await?;
    println!("copied {copied} records in {transactions} transactions ({aborted} aborted)");
    Ok(())
}
