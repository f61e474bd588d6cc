//! Start-to-ready time of Kafka containers (docs/benchmarks.md, "Container
//! brokers"): from `KafkaContainer::builder().start()` to purekafka having
//! an answer to ApiVersions and Metadata from every node, for one node, three
//! nodes and a secure node. Rounds interleave the modes; each container is
//! removed before the next starts. Prints every round, then median, min and
//! max per mode.
//!
//! ```text
//! cargo run --release -p purekafka-testkit --example container_start_bench -- [ROUNDS]
//! ```

use std::time::{Duration, Instant};

use purekafka_testkit::{KafkaContainer, KafkaContainerBuilder};

fn modes() -> Vec<(&'static str, KafkaContainerBuilder)> {
    vec![
        ("1 node", KafkaContainer::builder()),
        ("3 nodes", KafkaContainer::builder().nodes(3)),
        ("secure", KafkaContainer::builder().secure()),
    ]
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let rounds: usize = match std::env::args().nth(1) {
        Some(r) => r
            .parse()
            .map_err(|_| format!("rounds: {r} is not a number"))?,
        None => 3,
    };
    let mut times: Vec<Vec<Duration>> = vec![Vec::new(); modes().len()];
    for round in 1..=rounds {
        for (i, (name, builder)) in modes().into_iter().enumerate() {
            let started = Instant::now();
            let kafka = builder.start().await?;
            let took = started.elapsed();
            println!(
                "round {round} {name}: ready in {:.1} s ({})",
                took.as_secs_f64(),
                kafka.image()
            );
            kafka.stop().await?;
            times[i].push(took);
        }
    }
    println!("\nmode      median   min     max    (rounds: {rounds})");
    for ((name, _), t) in modes().into_iter().zip(times.iter_mut()) {
        t.sort();
        let secs = |d: Duration| d.as_secs_f64();
        let median = t.get(t.len() / 2).copied().unwrap_or_default();
        let min = t.first().copied().unwrap_or_default();
        let max = t.last().copied().unwrap_or_default();
        println!(
            "{name:<9} {:>5.1} s {:>5.1} s {:>5.1} s",
            secs(median),
            secs(min),
            secs(max)
        );
    }
    Ok(())
}
