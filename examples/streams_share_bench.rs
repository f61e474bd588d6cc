//! Streams on a share group (issue #19 item 2) against the consumer-group
//! runtime, in the streams benchmark's 10 ms setting: one input partition,
//! a simulated 10 ms async call per record, 512 records in flight per
//! instance, no output topic, `OrderingMode::Unordered` for both (the only
//! mode a share group allows). Three runs per round, interleaved, for
//! `--rounds` rounds (default 3):
//!
//! - `group`: the consumer-group runtime, one instance (a second instance
//!   of a consumer group on one partition would sit idle);
//! - `share x1`: `source.group=share`, one instance;
//! - `share x2`: `source.group=share`, two instances on the one partition.
//!
//! Each run gets fresh topics and a fresh group. Records are produced in
//! small warm-up rounds until every instance has processed one (a share
//! group's first assignment comes a heartbeat after joining), then the
//! measured records are produced at once; throughput counts from the
//! first measured record done to the last (producing overlaps with it, in
//! every run alike). Prints each run, then medians and ranges.
//!
//! ```sh
//! cargo run --release --example streams_share_bench -- [bootstrap] [--records N] [--rounds R]
//! ```

#[path = "common/topics.rs"]
mod topics;

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use purekafka::admin::AlterConfigOp;
use purekafka::producer::{Producer, ProducerConfig, ProducerRecord};
use purekafka::streams::{
    OrderingMode, ProcessingError, RunningStreams, SourceGroup, Streams, StreamsConfig,
    StringDeserializer,
};
use purekafka::{Admin, ClientConfig, Cluster, Result};

const CALL: Duration = Duration::from_millis(10);
const IN_FLIGHT: usize = 512;
/// Ids below this are warm-up records (not measured).
const WARM_UP_BASE: u64 = 1 << 40;

#[derive(Default)]
struct Done {
    first: Option<Instant>,
    last: Option<Instant>,
    ids: HashSet<u64>,
    /// Instances that processed a record.
    instances: HashSet<usize>,
}

struct Figures {
    rate: f64,
    /// Records processed by each instance (measured ones).
    per_instance: Vec<u64>,
}

async fn start(
    bootstrap: &str,
    app: &str,
    input: &str,
    share: bool,
    instance: usize,
    done: Arc<Mutex<Done>>,
) -> Result<RunningStreams> {
    let mut config = StreamsConfig::builder(app, bootstrap)
        .ordering(OrderingMode::Unordered)
        .max_in_flight(IN_FLIGHT, IN_FLIGHT);
    if share {
        config = config.source_group(SourceGroup::Share);
    }
    Streams::topology(config.build()?)
        .source(input, StringDeserializer, StringDeserializer)
        .for_each_async(move |rec| {
            let done = done.clone();
            async move {
                let id: u64 = rec
                    .value
                    .parse()
                    .map_err(|_| ProcessingError::new("bad id"))?;
                tokio::time::sleep(CALL).await;
                let now = Instant::now();
                let mut d = done.lock().unwrap();
                d.instances.insert(instance);
                if id < WARM_UP_BASE {
                    d.first.get_or_insert(now);
                    d.last = Some(now);
                    d.ids.insert(id);
                }
                Ok(())
            }
        })
        .build()
        .start()
        .await
        .map_err(|e| purekafka::Error::config("streams", e.to_string()))
}

async fn run(
    bootstrap: &str,
    cluster: &Cluster,
    records: u64,
    share: bool,
    instances: usize,
) -> Result<Figures> {
    let tag = format!("share-bench-{}", fastrand::u32(..));
    let input = format!("{tag}-in");
    topics::create_topics(cluster, &[&input], 1).await?;
    if share {
        Admin::with_cluster(cluster.clone())
            .alter_group_configs(
                &tag,
                &[AlterConfigOp::Set(
                    "share.auto.offset.reset".into(),
                    "earliest".into(),
                )],
            )
            .await?;
    }
    let dones: Vec<Arc<Mutex<Done>>> = (0..instances).map(|_| Arc::default()).collect();
    let mut running = Vec::new();
    for (i, d) in dones.iter().enumerate() {
        running.push(start(bootstrap, &tag, &input, share, i, d.clone()).await?);
    }
    let producer = Producer::connect(
        ProducerConfig::builder()
            .bootstrap_servers(bootstrap)
            .build()?,
    )
    .await?;
    let send = |id: u64| {
        ProducerRecord::new(input.as_str())
            .key(format!("customer-{}", id % 10_000))
            .value(id.to_string())
    };
    // Warm up until every instance has processed a record.
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut warm = WARM_UP_BASE;
    while dones.iter().any(|d| d.lock().unwrap().instances.is_empty()) {
        if Instant::now() > deadline {
            return Err(purekafka::Error::config(
                "bench",
                "an instance got no record within 60 s",
            ));
        }
        for _ in 0..20 {
            drop(producer.send(send(warm)).await?);
            warm += 1;
        }
        producer.flush().await;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for id in 0..records {
        drop(producer.send(send(id)).await?);
    }
    producer.flush().await;
    let count = || -> usize {
        let all: HashSet<u64> = dones
            .iter()
            .flat_map(|d| d.lock().unwrap().ids.iter().copied().collect::<Vec<_>>())
            .collect();
        all.len()
    };
    let deadline = Instant::now() + Duration::from_secs(300);
    while count() < records as usize && Instant::now() < deadline {
        if running.iter().any(RunningStreams::is_finished) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    producer.close(Duration::from_secs(10)).await?;
    for r in running {
        r.shutdown()
            .await
            .map_err(|e| purekafka::Error::config("streams", e.to_string()))?;
    }
    let got = count();
    if got != records as usize {
        eprintln!("  warning: only {got} of {records} records done");
    }
    let first = dones
        .iter()
        .filter_map(|d| d.lock().unwrap().first)
        .min()
        .expect("records done");
    let last = dones
        .iter()
        .filter_map(|d| d.lock().unwrap().last)
        .max()
        .expect("records done");
    Ok(Figures {
        rate: (got as f64 - 1.0) / last.duration_since(first).as_secs_f64(),
        per_instance: dones
            .iter()
            .map(|d| d.lock().unwrap().ids.len() as u64)
            .collect(),
    })
}

fn arg(name: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
}

#[tokio::main]
async fn main() -> Result<()> {
    let bootstrap = std::env::args()
        .nth(1)
        .filter(|a| !a.starts_with("--"))
        .unwrap_or_else(|| "127.0.0.1:19092".into());
    let records: u64 = arg("--records").map_or(100_000, |v| v.parse().expect("--records N"));
    let rounds: usize = arg("--rounds").map_or(3, |v| v.parse().expect("--rounds R"));
    let cluster = Cluster::connect(
        ClientConfig::builder()
            .bootstrap_servers(&bootstrap)
            .build()?,
    )
    .await?;
    println!(
        "## streams on a share group vs a consumer group: 1 partition, {records} records, \
         10 ms call, Unordered, {IN_FLIGHT} in flight per instance, {rounds} interleaved rounds"
    );
    let runs: [(&str, bool, usize); 3] = [
        ("group    ", false, 1),
        ("share x1 ", true, 1),
        ("share x2 ", true, 2),
    ];
    let mut rates: Vec<Vec<f64>> = vec![Vec::new(); runs.len()];
    for round in 1..=rounds {
        for (i, (name, share, instances)) in runs.iter().enumerate() {
            let f = run(&bootstrap, &cluster, records, *share, *instances).await?;
            println!(
                "round {round} {name} {:>9.0} rec/s  (per instance {:?})",
                f.rate, f.per_instance
            );
            rates[i].push(f.rate);
        }
    }
    let ideal = IN_FLIGHT as f64 / CALL.as_secs_f64();
    println!(
        "\nmedian (min-max) over {rounds} rounds; 512 / 10 ms = {ideal:.0} rec/s per instance"
    );
    let median_of = |v: &[f64]| {
        let mut v = v.to_vec();
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let group = median_of(&rates[0]);
    for (i, (name, _, _)) in runs.iter().enumerate() {
        let v = &rates[i];
        let min = v.iter().copied().fold(f64::INFINITY, f64::min);
        let max = v.iter().copied().fold(0.0, f64::max);
        let m = median_of(v);
        println!(
            "{name} {m:>9.0} rec/s ({min:.0}-{max:.0})  {:.2}x group",
            m / group
        );
    }
    Ok(())
}
