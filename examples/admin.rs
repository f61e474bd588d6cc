//! Creates a topic (if missing), lists topics and describes the cluster
//! with the admin client.
//!
//! ```sh
//! cargo run --example admin -- 127.0.0.1:19092 orders 3
//! ```

use purekafka::admin::NewTopic;
use purekafka::{Admin, ClientConfig, KafkaCode};

#[tokio::main(flavor = "current_thread")]
async fn main() -> purekafka::Result<()> {
    let mut args = std::env::args().skip(1);
    let bootstrap = args.next().unwrap_or_else(|| "127.0.0.1:19092".into());
    let topic = args.next().unwrap_or_else(|| "orders".into());
    let partitions: i32 = args.next().and_then(|p| p.parse().ok()).unwrap_or(3);
    let config = ClientConfig::builder()
        .bootstrap_servers(&bootstrap)
        .build()?;
    let admin = Admin::connect(config).await?;
    for (name, result) in admin
        .create_topics(&[NewTopic::new(&topic, partitions)], false)
        .await?
    {
        match result {
            Ok(id) => println!("created {name} (id {id})"),
            Err(e) if e.kafka_code() == Some(KafkaCode::TOPIC_ALREADY_EXISTS) => {
                println!("{name} exists already")
            }
            Err(e) => return Err(e),
        }
    }
    for t in admin.list_topics(false).await? {
        println!("topic {} ({} partitions)", t.name, t.partitions);
    }
    let cluster = admin.describe_cluster().await?;
    println!("{cluster:?}");
    Ok(())
}
