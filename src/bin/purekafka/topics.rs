//! `purekafka topics create|delete|list|describe`, as `kafka-topics.sh`.

use clap::Subcommand;
use purekafka::admin::{ConfigResource, NewTopic, TopicDescription};
use purekafka::Admin;
use serde_json::json;

use crate::output::{list, print_json, Failures, Format, Table};
use crate::{split_kv, Connect};

/// Topic commands.
#[derive(Subcommand, Debug)]
pub enum TopicsCommand {
    /// Create topics.
    Create {
        #[command(flatten)]
        connect: Connect,
        /// Topic names.
        #[arg(required = true)]
        topics: Vec<String>,
        /// Partitions (default: the broker's num.partitions).
        #[arg(long)]
        partitions: Option<i32>,
        /// Replication factor (default: the broker's default.replication.factor).
        #[arg(long)]
        replication_factor: Option<i16>,
        /// A topic config, key=value (repeatable).
        #[arg(long = "config", value_name = "KEY=VALUE")]
        configs: Vec<String>,
        /// Let the broker validate only; create nothing.
        #[arg(long)]
        validate_only: bool,
    },
    /// Delete topics.
    Delete {
        #[command(flatten)]
        connect: Connect,
        /// Topic names.
        #[arg(required = true)]
        topics: Vec<String>,
    },
    /// List topics.
    List {
        #[command(flatten)]
        connect: Connect,
        /// Include internal topics (__consumer_offsets, ...).
        #[arg(long)]
        internal: bool,
        #[command(flatten)]
        format: Format,
    },
    /// Describe topics: partitions, leaders, replicas, ISR.
    Describe {
        #[command(flatten)]
        connect: Connect,
        /// Topic names.
        #[arg(required = true)]
        topics: Vec<String>,
        /// Also print the topics' configs that are not defaults.
        #[arg(long)]
        configs: bool,
        #[command(flatten)]
        format: Format,
    },
}

/// Runs a topics command.
pub async fn run(cmd: TopicsCommand) -> purekafka::Result<()> {
    match cmd {
        TopicsCommand::Create {
            connect,
            topics,
            partitions,
            replication_factor,
            configs,
            validate_only,
        } => {
            let admin = Admin::connect(connect.client()?).await?;
            let mut cfg = Vec::new();
            for kv in &configs {
                let (k, v) = split_kv(kv, "--config")?;
                cfg.push((k.to_owned(), v.to_owned()));
            }
            let new: Vec<NewTopic> = topics
                .iter()
                .map(|t| NewTopic {
                    name: t.clone(),
                    partitions,
                    replication_factor,
                    configs: cfg.clone(),
                })
                .collect();
            let res = admin.create_topics(&new, validate_only).await?;
            let mut failures = Failures::default();
            let mut created = Vec::new();
            for (name, r) in res {
                if failures.take(r).is_some() {
                    created.push(name);
                }
            }
            if !validate_only {
                await_leaders(&admin, &created).await;
            }
            for name in created {
                let verb = if validate_only { "valid" } else { "created" };
                println!("{verb} topic {name}");
            }
            failures.finish()
        }
        TopicsCommand::Delete { connect, topics } => {
            let admin = Admin::connect(connect.client()?).await?;
            let mut failures = Failures::default();
            for (name, r) in admin.delete_topics(&topics).await? {
                if failures.take(r).is_some() {
                    println!("deleted topic {name}");
                }
            }
            failures.finish()
        }
        TopicsCommand::List {
            connect,
            internal,
            format,
        } => {
            let admin = Admin::connect(connect.client()?).await?;
            let topics = admin.list_topics(internal).await?;
            if format.json {
                print_json(&json!(topics
                    .iter()
                    .map(|t| json!({
                        "name": t.name,
                        "id": t.id,
                        "internal": t.internal,
                        "partitions": t.partitions,
                    }))
                    .collect::<Vec<_>>()));
            } else {
                let mut table = Table::new(&["TOPIC", "PARTITIONS", "INTERNAL"]);
                for t in &topics {
                    table.row(vec![
                        t.name.clone(),
                        t.partitions.to_string(),
                        t.internal.to_string(),
                    ]);
                }
                table.print();
            }
            Ok(())
        }
        TopicsCommand::Describe {
            connect,
            topics,
            configs,
            format,
        } => {
            let admin = Admin::connect(connect.client()?).await?;
            describe(&admin, &topics, configs, format).await
        }
    }
}

/// New topics get leaders a moment after CreateTopics returns; waiting
/// (bounded) means a `describe` right after `create` shows them.
async fn await_leaders(admin: &Admin, topics: &[String]) {
    if topics.is_empty() {
        return;
    }
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
    while tokio::time::Instant::now() < deadline {
        let Ok(d) = admin.describe_topics(topics).await else {
            return;
        };
        let ready = d.values().all(|r| {
            r.as_ref()
                .is_ok_and(|t| t.partitions.iter().all(|p| p.leader >= 0))
        });
        if ready {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

async fn describe(
    admin: &Admin,
    topics: &[String],
    with_configs: bool,
    format: Format,
) -> purekafka::Result<()> {
    let described = admin.describe_topics(topics).await?;
    let mut failures = Failures::default();
    let mut found: Vec<TopicDescription> = Vec::new();
    for (_, r) in described {
        if let Some(t) = failures.take(r) {
            found.push(t);
        }
    }
    let mut configs = Vec::new();
    if with_configs {
        let res: Vec<ConfigResource> = found
            .iter()
            .map(|t| ConfigResource::Topic(t.name.clone()))
            .collect();
        for (_, r) in admin.describe_configs(&res, &[]).await? {
            let entries = failures.take(r).unwrap_or_default();
            configs.push(
                entries
                    .into_iter()
                    .filter(|e| e.source == purekafka::admin::ConfigSource::DynamicTopic)
                    .map(|e| (e.name, e.value.unwrap_or_default()))
                    .collect::<Vec<_>>(),
            );
        }
    }
    if format.json {
        let docs: Vec<_> = found
            .iter()
            .enumerate()
            .map(|(i, t)| {
                let mut doc = json!({
                    "name": t.name,
                    "id": t.id,
                    "internal": t.internal,
                    "partitions": t.partitions.iter().map(|p| json!({
                        "partition": p.partition,
                        "leader": p.leader,
                        "leader_epoch": p.leader_epoch,
                        "replicas": p.replicas,
                        "isr": p.isr,
                        "error": p.error.map(|e| e.name()),
                    })).collect::<Vec<_>>(),
                });
                if let Some(c) = configs.get(i) {
                    doc["configs"] = c.iter().map(|(k, v)| (k.clone(), json!(v))).collect();
                }
                doc
            })
            .collect();
        print_json(&json!(docs));
    } else {
        for (i, t) in found.iter().enumerate() {
            println!(
                "Topic: {}  Id: {}  Partitions: {}  Internal: {}",
                t.name,
                t.id,
                t.partitions.len(),
                t.internal
            );
            if let Some(c) = configs.get(i) {
                let text: Vec<String> = c.iter().map(|(k, v)| format!("{k}={v}")).collect();
                if text.is_empty() {
                    println!("Configs: (none)");
                } else {
                    println!("Configs: {}", text.join(","));
                }
            }
            let mut table =
                Table::new(&["PARTITION", "LEADER", "EPOCH", "REPLICAS", "ISR", "ERROR"]);
            for p in &t.partitions {
                table.row(vec![
                    p.partition.to_string(),
                    p.leader.to_string(),
                    p.leader_epoch.to_string(),
                    list(&p.replicas),
                    list(&p.isr),
                    p.error.map(|e| e.name().to_owned()).unwrap_or_default(),
                ]);
            }
            table.print();
        }
    }
    failures.finish()
}
