//! `purekafka metadata`: brokers, controller, topics and leaders.

use purekafka::{ClientConfig, Cluster, ClusterMetadata};

/// Prints the cluster's metadata, as tables or one JSON object.
pub async fn run(client: ClientConfig, topic: Vec<String>, json: bool) -> purekafka::Result<()> {
    let cluster = Cluster::connect(client).await?;
    let meta = if topic.is_empty() {
        cluster.metadata()
    } else {
        cluster.refresh_metadata(Some(&topic)).await?
    };
    if json {
        println!("{}", metadata_json(&meta, &topic));
    } else {
        print_metadata(&meta, &topic);
    }
    Ok(())
}

fn selected<'a>(
    meta: &'a ClusterMetadata,
    only: &'a [String],
) -> impl Iterator<Item = &'a purekafka::TopicInfo> + 'a {
    meta.topics
        .values()
        .filter(move |t| only.is_empty() || only.contains(&t.name))
}

fn print_metadata(meta: &ClusterMetadata, only: &[String]) {
    println!("cluster id: {}", meta.cluster_id.as_deref().unwrap_or("-"));
    println!("controller: {}", meta.controller_id);
    println!("{} broker(s):", meta.brokers.len());
    println!("  {:>6}  {:<30} RACK", "ID", "ADDRESS");
    for b in meta.brokers.values() {
        let addr = format!("{}:{}", b.host, b.port);
        println!(
            "  {:>6}  {:<30} {}",
            b.id,
            addr,
            b.rack.as_deref().unwrap_or("-")
        );
    }
    let topics: Vec<_> = selected(meta, only).collect();
    println!("{} topic(s):", topics.len());
    for t in topics {
        let err = t.error.map(|e| format!("  error: {e}")).unwrap_or_default();
        println!(
            "  {} ({} partitions){}{}",
            t.name,
            t.partitions.len(),
            if t.internal { " internal" } else { "" },
            err
        );
        for p in &t.partitions {
            let list = |v: &[i32]| v.iter().map(i32::to_string).collect::<Vec<_>>().join(",");
            println!(
                "    partition {:>4}  leader {:>4}  epoch {:>4}  replicas [{}]  isr [{}]{}",
                p.partition,
                p.leader,
                p.leader_epoch,
                list(&p.replicas),
                list(&p.isr),
                p.error.map(|e| format!("  error: {e}")).unwrap_or_default()
            );
        }
    }
}

fn metadata_json(meta: &ClusterMetadata, only: &[String]) -> serde_json::Value {
    use serde_json::json;
    let brokers: Vec<_> = meta
        .brokers
        .values()
        .map(|b| json!({"id": b.id, "host": b.host, "port": b.port, "rack": b.rack}))
        .collect();
    let topics: Vec<_> = selected(meta, only)
        .map(|t| {
            let partitions: Vec<_> = t
                .partitions
                .iter()
                .map(|p| {
                    json!({
                        "partition": p.partition,
                        "leader": p.leader,
                        "leader_epoch": p.leader_epoch,
                        "replicas": p.replicas,
                        "isr": p.isr,
                        "error": p.error.map(|e| e.name()),
                    })
                })
                .collect();
            json!({
                "name": t.name,
                "internal": t.internal,
                "error": t.error.map(|e| e.name()),
                "partitions": partitions,
            })
        })
        .collect();
    json!({
        "cluster_id": meta.cluster_id,
        "controller": meta.controller_id,
        "brokers": brokers,
        "topics": topics,
    })
}
