//! `purekafka offsets TOPIC`: earliest and latest offset per partition
//! (as `kafka-get-offsets.sh`).

use clap::Args;
use purekafka::admin::OffsetSpec;
use purekafka::{Admin, Error, TopicPartition};
use serde_json::json;

use crate::output::{print_json, Failures, Format, Table};
use crate::Connect;

/// `offsets` arguments.
#[derive(Args, Debug)]
pub struct OffsetsArgs {
    #[command(flatten)]
    connect: Connect,
    /// Topic.
    topic: String,
    #[command(flatten)]
    format: Format,
}

/// Prints each partition's earliest and latest offsets.
pub async fn run(args: OffsetsArgs) -> purekafka::Result<()> {
    let admin = Admin::connect(args.connect.client()?).await?;
    let topic = args.topic;
    let mut d = admin.describe_topics(std::slice::from_ref(&topic)).await?;
    let t = d
        .swap_remove(&topic)
        .unwrap_or_else(|| Err(Error::config("topic", "no result")))?;
    let tps: Vec<TopicPartition> = t
        .partitions
        .iter()
        .map(|p| TopicPartition::new(topic.as_str(), p.partition))
        .collect();
    let ask = |s: OffsetSpec| -> Vec<(TopicPartition, OffsetSpec)> {
        tps.iter().map(|tp| (tp.clone(), s)).collect()
    };
    let earliest = admin.list_offsets(&ask(OffsetSpec::Earliest)).await?;
    let latest = admin.list_offsets(&ask(OffsetSpec::Latest)).await?;
    let mut failures = Failures::default();
    let mut rows = Vec::new();
    for tp in &tps {
        let e = earliest.get(tp).cloned().and_then(|r| failures.take(r));
        let l = latest.get(tp).cloned().and_then(|r| failures.take(r));
        if let (Some(e), Some(l)) = (e, l) {
            rows.push((tp.partition, e.offset, l.offset));
        }
    }
    if args.format.json {
        print_json(&json!({
            "topic": topic,
            "partitions": rows.iter().map(|(p, e, l)| json!({
                "partition": p, "earliest": e, "latest": l,
            })).collect::<Vec<_>>(),
        }));
    } else {
        let mut table = Table::new(&["TOPIC", "PARTITION", "EARLIEST", "LATEST"]);
        for (p, e, l) in &rows {
            table.row(vec![
                topic.clone(),
                p.to_string(),
                e.to_string(),
                l.to_string(),
            ]);
        }
        table.print();
    }
    failures.finish()
}
