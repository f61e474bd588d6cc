//! The `purekafka` command-line tool: human tables by default, `--json` for
//! scripts, exit code 0 on success and 1 with a one-line reason on failure
//! (2 for usage errors, from clap).

mod acls;
mod cluster;
mod configs;
mod consume;
mod groups;
mod metadata;
mod offsets;
mod output;
mod perf;
mod produce;
mod share_groups;
mod streams_groups;
mod topics;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};
use purekafka::producer::{ProducerConfig, ProducerConfigBuilder};
use purekafka::{ClientConfig, ConsumerConfig, ConsumerConfigBuilder, Error};

#[derive(Parser)]
#[command(
    name = "purekafka",
    version,
    about = "A pure-Rust Kafka command-line client"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Print brokers, the controller, and topics with partitions and leaders.
    Metadata {
        #[command(flatten)]
        connect: Connect,
        /// Only these topics (default: all).
        #[arg(long, short = 't')]
        topic: Vec<String>,
        /// Print one JSON object instead of tables.
        #[arg(long)]
        json: bool,
    },
    /// Send one record per stdin line.
    Produce(produce::ProduceArgs),
    /// Print records, one value per line.
    Consume(consume::ConsumeArgs),
    /// Measure throughput and latency, like Kafka's perf tools.
    Perf {
        #[command(subcommand)]
        command: perf::PerfCommand,
    },
    /// Create, delete, list and describe topics.
    Topics {
        #[command(subcommand)]
        command: topics::TopicsCommand,
    },
    /// Describe and alter topic and broker configs.
    Configs {
        #[command(subcommand)]
        command: configs::ConfigsCommand,
    },
    /// List, describe and delete consumer and share groups; reset their
    /// offsets.
    Groups {
        #[command(subcommand)]
        command: groups::GroupsCommand,
    },
    /// Earliest and latest offsets of a topic's partitions.
    Offsets(offsets::OffsetsArgs),
    /// Create, list and delete ACLs.
    Acls {
        #[command(subcommand)]
        command: acls::AclsCommand,
    },
    /// Cluster id, controller, brokers and features.
    Cluster(cluster::ClusterArgs),
}

/// How to reach the cluster; shared by every command.
#[derive(Args, Debug, Clone)]
pub struct Connect {
    /// Bootstrap servers, host:port[,host:port...].
    #[arg(long, short = 'b', env = "PUREKAFKA_BOOTSTRAP")]
    pub bootstrap_server: String,
    /// A Kafka properties file with client settings (as the Java tools'
    /// --command-config).
    #[arg(long, value_name = "FILE")]
    pub command_config: Option<PathBuf>,
}

impl Connect {
    /// Properties from --command-config, then bootstrap.servers.
    fn properties(&self) -> purekafka::Result<Vec<(String, String)>> {
        let mut props = match &self.command_config {
            Some(path) => {
                let text = std::fs::read_to_string(path).map_err(|e| {
                    Error::config("--command-config", format!("{}: {e}", path.display()))
                })?;
                purekafka::config::parse_properties(&text)?
            }
            None => Vec::new(),
        };
        props.push(("bootstrap.servers".into(), self.bootstrap_server.clone()));
        Ok(props)
    }

    /// A client config.
    pub fn client(&self) -> purekafka::Result<ClientConfig> {
        ClientConfig::from_properties(self.properties()?)
    }

    /// A producer config builder with the file's and then `extra` settings
    /// (`key=value` strings) applied.
    pub fn producer(&self, extra: &[String]) -> purekafka::Result<ProducerConfigBuilder> {
        let mut b = ProducerConfig::builder();
        for (k, v) in self.properties()? {
            b = b.set(&k, &v)?;
        }
        for kv in extra {
            let (k, v) = split_kv(kv, "--producer-property")?;
            b = b.set(k, v)?;
        }
        Ok(b)
    }

    /// A consumer config builder with the file's and then `extra` settings
    /// (`key=value` strings) applied.
    pub fn consumer(&self, extra: &[String]) -> purekafka::Result<ConsumerConfigBuilder> {
        let mut b = ConsumerConfig::builder();
        for (k, v) in self.properties()? {
            b = b.set(&k, &v)?;
        }
        for kv in extra {
            let (k, v) = split_kv(kv, "--consumer-property")?;
            b = b.set(k, v)?;
        }
        Ok(b)
    }
}

/// `--metrics-addr` of the long-running commands (feature `metrics`).
#[cfg(feature = "metrics")]
#[derive(Args, Debug, Clone)]
pub struct MetricsArgs {
    /// Serve the clients' metrics in the Prometheus text format on this
    /// address (host:port) while the command runs, refreshed every second.
    #[arg(long, value_name = "ADDR")]
    pub metrics_addr: Option<std::net::SocketAddr>,
}

#[cfg(feature = "metrics")]
impl MetricsArgs {
    /// With `--metrics-addr`: serves the endpoint and publishes the clients
    /// `add` registers every second.
    pub fn publish(
        &self,
        add: impl FnOnce(
            purekafka::telemetry::MetricsPublisher,
        ) -> purekafka::telemetry::MetricsPublisher,
    ) -> purekafka::Result<()> {
        if let Some(addr) = self.metrics_addr {
            purekafka::telemetry::serve_prometheus(addr)?;
            let publisher = purekafka::telemetry::MetricsPublisher::new()
                .interval(std::time::Duration::from_secs(1));
            // Ends by itself once the clients are gone.
            drop(add(publisher).spawn());
        }
        Ok(())
    }
}

/// Splits `key=value`.
pub fn split_kv<'a>(kv: &'a str, flag: &str) -> purekafka::Result<(&'a str, &'a str)> {
    kv.split_once('=')
        .ok_or_else(|| Error::config(flag, format!("{kv:?}: expected key=value")))
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("purekafka: cannot start the runtime: {e}");
            return ExitCode::from(2);
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("purekafka: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run(cli: Cli) -> purekafka::Result<()> {
    match cli.command {
        Command::Metadata {
            connect,
            topic,
            json,
        } => metadata::run(connect.client()?, topic, json).await,
        Command::Produce(args) => produce::run(args).await,
        Command::Consume(args) => consume::run(args).await,
        Command::Perf { command } => perf::run(command).await,
        Command::Topics { command } => topics::run(command).await,
        Command::Configs { command } => configs::run(command).await,
        Command::Groups { command } => groups::run(command).await,
        Command::Offsets(args) => offsets::run(args).await,
        Command::Acls { command } => acls::run(command).await,
        Command::Cluster(args) => cluster::run(args).await,
    }
}
