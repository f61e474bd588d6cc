//! `purekafka configs describe|alter`, as `kafka-configs.sh` for topics and
//! brokers (alter is incremental, KIP-339: only the keys named change).

use clap::{Args, Subcommand};
use purekafka::admin::{AlterConfigOp, ConfigResource};
use purekafka::{Admin, Error};
use serde_json::json;

use crate::output::{print_json, Failures, Format, Table};
use crate::{split_kv, Connect};

/// Which resource's configs.
#[derive(Args, Debug, Clone)]
#[group(required = true, multiple = false)]
pub struct Target {
    /// A topic.
    #[arg(long)]
    topic: Option<String>,
    /// A broker by node id.
    #[arg(long)]
    broker: Option<i32>,
    /// The cluster-wide default of every broker.
    #[arg(long)]
    broker_default: bool,
}

impl Target {
    fn resource(&self) -> ConfigResource {
        match (&self.topic, self.broker) {
            (Some(t), _) => ConfigResource::Topic(t.clone()),
            (None, Some(b)) => ConfigResource::Broker(b),
            (None, None) => ConfigResource::BrokerDefault,
        }
    }
}

/// Config commands.
#[derive(Subcommand, Debug)]
pub enum ConfigsCommand {
    /// Print a topic's or broker's configs.
    Describe {
        #[command(flatten)]
        connect: Connect,
        #[command(flatten)]
        target: Target,
        /// Only these keys (repeatable).
        #[arg(long = "key")]
        keys: Vec<String>,
        /// Include keys at their default value.
        #[arg(long)]
        all: bool,
        #[command(flatten)]
        format: Format,
    },
    /// Set or remove config keys.
    Alter {
        #[command(flatten)]
        connect: Connect,
        #[command(flatten)]
        target: Target,
        /// key=value to set (repeatable).
        #[arg(long = "set", value_name = "KEY=VALUE")]
        set: Vec<String>,
        /// Key to reset to its default (repeatable).
        #[arg(long = "delete", value_name = "KEY")]
        delete: Vec<String>,
        /// Let the broker validate only; change nothing.
        #[arg(long)]
        validate_only: bool,
    },
}

/// Runs a configs command.
pub async fn run(cmd: ConfigsCommand) -> purekafka::Result<()> {
    match cmd {
        ConfigsCommand::Describe {
            connect,
            target,
            keys,
            all,
            format,
        } => {
            let admin = Admin::connect(connect.client()?).await?;
            let resource = target.resource();
            let mut res = admin
                .describe_configs(std::slice::from_ref(&resource), &keys)
                .await?;
            let mut failures = Failures::default();
            let entries = res
                .swap_remove(&resource)
                .and_then(|r| failures.take(r))
                .unwrap_or_default();
            let shown: Vec<_> = entries
                .into_iter()
                .filter(|e| {
                    all || !keys.is_empty() || e.source != purekafka::admin::ConfigSource::Default
                })
                .collect();
            if format.json {
                print_json(&json!({
                    "resource": resource.to_string(),
                    "configs": shown.iter().map(|e| json!({
                        "name": e.name,
                        "value": e.value,
                        "source": e.source.name(),
                        "read_only": e.read_only,
                        "sensitive": e.sensitive,
                    })).collect::<Vec<_>>(),
                }));
            } else {
                let mut table = Table::new(&["KEY", "VALUE", "SOURCE", "READ-ONLY"]);
                for e in &shown {
                    let value = match (&e.value, e.sensitive) {
                        (_, true) => "(sensitive)".to_owned(),
                        (Some(v), _) => v.clone(),
                        (None, _) => "(unset)".to_owned(),
                    };
                    table.row(vec![
                        e.name.clone(),
                        value,
                        e.source.name().to_owned(),
                        e.read_only.to_string(),
                    ]);
                }
                table.print();
            }
            failures.finish()
        }
        ConfigsCommand::Alter {
            connect,
            target,
            set,
            delete,
            validate_only,
        } => {
            let mut ops = Vec::new();
            for kv in &set {
                let (k, v) = split_kv(kv, "--set")?;
                ops.push(AlterConfigOp::Set(k.to_owned(), v.to_owned()));
            }
            ops.extend(delete.iter().map(|k| AlterConfigOp::Delete(k.clone())));
            if ops.is_empty() {
                return Err(Error::config("--set/--delete", "nothing to change"));
            }
            let admin = Admin::connect(connect.client()?).await?;
            let resource = target.resource();
            let mut res = admin
                .incremental_alter_configs(&[(resource.clone(), ops)], validate_only)
                .await?;
            let mut failures = Failures::default();
            if res
                .swap_remove(&resource)
                .and_then(|r| failures.take(r))
                .is_some()
            {
                let verb = if validate_only {
                    "validated"
                } else {
                    "altered"
                };
                println!("{verb} configs of {resource}");
            }
            failures.finish()
        }
    }
}
