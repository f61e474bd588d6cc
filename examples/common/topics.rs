//! Topic set-up shared by the examples (not an example itself).

use std::time::Duration;

use purekafka::admin::NewTopic;
use purekafka::{Admin, Cluster, Error, Result};

/// Creates `names` with `partitions` each and waits (up to 20 s) until
/// metadata shows a leader for every partition.
pub async fn create_topics(cluster: &Cluster, names: &[&str], partitions: i32) -> Result<()> {
    let admin = Admin::with_cluster(cluster.clone());
    let topics: Vec<NewTopic> = names
        .iter()
        .map(|n| NewTopic::new(*n, partitions))
        .collect();
    for (name, result) in admin.create_topics(&topics, false).await? {
        result.map_err(|e| Error::config("topics", format!("{name}: {e}")))?;
    }
    let wanted: Vec<String> = names.iter().map(|n| (*n).to_owned()).collect();
    for _ in 0..200 {
        let m = cluster.refresh_metadata(Some(&wanted)).await?;
        let ready = wanted.iter().all(|n| {
            m.topics.get(n).is_some_and(|t| {
                t.partitions.len() == partitions as usize
                    && t.partitions.iter().all(|p| p.leader >= 0)
            })
        });
        if ready {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Err(Error::config("topics", "topics got no leaders within 20 s"))
}
