//! Prints the cluster's brokers, topics and the API versions negotiated with
//! one broker.
//!
//! ```sh
//! cargo run --example cluster_info -- 127.0.0.1:19092
//! ```

use purekafka::cluster::Workload;
use purekafka::protocol::api_name;
use purekafka::{ClientConfig, Cluster};

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let bootstrap = std::env::args()
        .nth(1)
        .or_else(|| std::env::var("PUREKAFKA_BOOTSTRAP").ok())
        .unwrap_or_else(|| "127.0.0.1:19092".into());
    let config = ClientConfig::builder()
        .bootstrap_servers(&bootstrap)
        .client_id("purekafka-cluster-info")
        .build()?;
    let cluster = Cluster::connect(config).await?;
    let meta = cluster.metadata();
    println!(
        "cluster {} (controller {})",
        meta.cluster_id.as_deref().unwrap_or("?"),
        meta.controller_id
    );
    for b in meta.brokers.values() {
        println!("  broker {:>3}  {}:{}", b.id, b.host, b.port);
    }
    println!("topics:");
    for t in meta.topics.values() {
        let leaders: Vec<String> = t
            .partitions
            .iter()
            .map(|p| format!("{}→{}", p.partition, p.leader))
            .collect();
        println!(
            "  {}{}  [{}]",
            t.name,
            if t.internal { " (internal)" } else { "" },
            leaders.join(" ")
        );
    }
    let conn = cluster.any_connection(Workload::Admin).await?;
    println!("API versions advertised by {}:", conn.broker());
    for (key, range) in conn.api_versions().ranges() {
        println!(
            "  {:>3} {:<28} {}..={}",
            key,
            api_name(*key),
            range.min,
            range.max
        );
    }
    Ok(())
}
