//! `purekafka cluster`: cluster id, controller, brokers (DescribeCluster)
//! and finalized features (ApiVersions).

use clap::Args;
use purekafka::Admin;
use serde_json::json;

use crate::output::{print_json, Format, Table};
use crate::Connect;

/// `cluster` arguments.
#[derive(Args, Debug)]
pub struct ClusterArgs {
    #[command(flatten)]
    connect: Connect,
    #[command(flatten)]
    format: Format,
}

/// Describes the cluster.
pub async fn run(args: ClusterArgs) -> purekafka::Result<()> {
    let admin = Admin::connect(args.connect.client()?).await?;
    let c = admin.describe_cluster().await?;
    let f = admin.features().await?;
    if args.format.json {
        print_json(&json!({
            "cluster_id": c.cluster_id,
            "controller": c.controller_id,
            "brokers": c.brokers.iter().map(|b| json!({
                "id": b.id, "host": b.host, "port": b.port, "rack": b.rack, "fenced": b.fenced,
            })).collect::<Vec<_>>(),
            "features": f.finalized.iter().map(|x| json!({
                "name": x.name, "min": x.min, "max": x.max,
            })).collect::<Vec<_>>(),
        }));
        return Ok(());
    }
    println!(
        "Cluster id: {}  Controller: {}",
        c.cluster_id, c.controller_id
    );
    let mut brokers = Table::new(&["ID", "ADDRESS", "RACK", "FENCED"]);
    for b in &c.brokers {
        brokers.row(vec![
            b.id.to_string(),
            format!("{}:{}", b.host, b.port),
            b.rack.clone().unwrap_or_else(|| "-".into()),
            b.fenced.to_string(),
        ]);
    }
    brokers.print();
    let mut features = Table::new(&["FEATURE", "FINALIZED-LEVEL"]);
    for x in &f.finalized {
        features.row(vec![x.name.clone(), x.max.to_string()]);
    }
    features.print();
    Ok(())
}
