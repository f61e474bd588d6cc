//! `group_by` through a repartition topic against the real broker (issue
//! #16): a count by a key computed from the value, over a 4-partition
//! input whose record keys spread every new key over all partitions,
//! equals the reference exactly under exactly-once (read_committed: each
//! key's updates are 1, 2, ... n) and at least the reference under
//! at-least-once; the runtime created the repartition topic
//! `<application.id>-<name>-repartition` with the input's partition count.

use std::collections::BTreeMap;

use purekafka::consumer::IsolationLevel;
use purekafka::streams::state::StoreSpec;
use purekafka::streams::{repartition_topic, Topology};

use super::*;

pub(super) const PARTITIONS: i32 = 4;
const CITIES: usize = 5;
const RECORDS: usize = 400;

/// Counts records per city, the city being the value's part before the
/// comma; each update goes to `out` as `city=count`.
fn count_by_city(bootstrap: &str, app: &str, input: &str, out: &str, mode: CommitMode) -> Topology {
    counting_by_city(
        city_config(bootstrap, app, mode).build().unwrap(),
        input,
        out,
    )
}

/// The counting application's config: Key ordering, the record cache off
/// (one update per record), its state in a directory of its own.
pub(super) fn city_config(
    bootstrap: &str,
    app: &str,
    mode: CommitMode,
) -> purekafka::streams::StreamsConfigBuilder {
    let dir = std::env::temp_dir().join(format!("purekafka-{app}"));
    config(bootstrap, app)
        .ordering(OrderingMode::Key)
        .max_in_flight(32, 64)
        .commit_mode(mode)
        .state_dir(dir)
        .cache_max_bytes(0)
}

/// [`count_by_city`] on `config`.
pub(super) fn counting_by_city(
    config: purekafka::streams::StreamsConfig,
    input: &str,
    out: &str,
) -> Topology {
    Streams::topology(config)
        .source(input, StringDeserializer, StringDeserializer)
        .group_by(
            "by-city",
            |r| r.value.split(',').next().unwrap_or_default().to_owned(),
            (StringSerializer, StringDeserializer),
            (StringSerializer, StringDeserializer),
        )
        .count(StoreSpec::in_memory("city-counts"), StringSerializer)
        .to_stream()
        .map(|r| {
            let v = format!("{}={}", r.key.clone().unwrap_or_default(), r.value);
            Ok(r.with_value(v))
        })
        .to(out, StringSerializer, StringSerializer)
}

/// `RECORDS` records keyed `key-(i % 13)` (13 input keys: each city's
/// records sit in every input partition), value `city-(i % CITIES),i`.
async fn produce_orders(bootstrap: &str, topic: &str) -> BTreeMap<String, i64> {
    produce_orders_in(bootstrap, topic, 0..RECORDS).await
}

/// The records `range` of [`produce_orders`]; returns the count per city
/// among them.
pub(super) async fn produce_orders_in(
    bootstrap: &str,
    topic: &str,
    range: std::ops::Range<usize>,
) -> BTreeMap<String, i64> {
    let p = producer(bootstrap).await;
    let mut acks = Vec::new();
    let mut reference = BTreeMap::new();
    for i in range {
        let city = format!("city-{}", i % CITIES);
        *reference.entry(city.clone()).or_insert(0) += 1;
        let r = ProducerRecord::new(topic)
            .key(format!("key-{}", i % 13))
            .value(format!("{city},{i}"));
        acks.push(p.send(r).await.unwrap());
    }
    for a in acks {
        a.await.unwrap();
    }
    p.close(Duration::from_secs(10)).await.unwrap();
    reference
}

/// Every `city=count` update of `out`, per city in output order.
pub(super) async fn updates(
    bootstrap: &str,
    out: &str,
    isolation: IsolationLevel,
) -> BTreeMap<String, Vec<i64>> {
    let mut m: BTreeMap<String, Vec<i64>> = BTreeMap::new();
    for partition in read::consume_values(bootstrap, out, PARTITIONS, isolation).await {
        for v in partition {
            let (k, n) = v.split_once('=').expect("city=count");
            m.entry(k.to_owned()).or_default().push(n.parse().unwrap());
        }
    }
    m
}

pub(super) async fn partition_count(cluster: &Cluster, topic: &str) -> usize {
    let m = cluster
        .refresh_metadata(Some(&[topic.to_owned()]))
        .await
        .unwrap();
    m.topics.get(topic).map_or(0, |t| t.partitions.len())
}

/// Runs the count over `RECORDS` records; returns the reference, the
/// updates read at `isolation`, and the repartition topic's partitions.
async fn run(
    test: &str,
    mode: CommitMode,
    isolation: IsolationLevel,
) -> Option<(BTreeMap<String, i64>, BTreeMap<String, Vec<i64>>, usize)> {
    let (bootstrap, cluster, input) = setup(test, PARTITIONS).await?;
    let out = format!("{input}-out");
    support::create_topic(&cluster, &out, PARTITIONS).await;
    let app = support::unique_topic(&format!("{test}-app"));
    let reference = produce_orders(&bootstrap, &input).await;
    let running = count_by_city(&bootstrap, &app, &input, &out, mode)
        .build()
        .start()
        .await
        .expect("start");
    // Each record is processed twice: read from the input (and written to
    // the repartition topic), then read from there and counted.
    wait_for(&running, |r| r.metrics().processed >= 2 * RECORDS as u64).await;
    running.shutdown().await.expect("clean shutdown");
    let _ = std::fs::remove_dir_all(std::env::temp_dir().join(format!("purekafka-{app}")));
    let updates = updates(&bootstrap, &out, isolation).await;
    let repartition = partition_count(&cluster, &repartition_topic(&app, "by-city")).await;
    Some((reference, updates, repartition))
}

#[tokio::test]
async fn exactly_once_count_by_a_computed_key_is_exact_through_the_repartition_topic() {
    let Some((reference, updates, repartition)) = run(
        "streams_group_by_eos",
        CommitMode::ExactlyOnce,
        IsolationLevel::ReadCommitted,
    )
    .await
    else {
        return;
    };
    assert_eq!(
        repartition, PARTITIONS as usize,
        "repartition topic's partitions"
    );
    assert_eq!(
        updates.keys().collect::<Vec<_>>(),
        reference.keys().collect::<Vec<_>>()
    );
    for (city, n) in &reference {
        let want: Vec<i64> = (1..=*n).collect();
        assert_eq!(updates[city], want, "updates of {city}");
    }
}

#[tokio::test]
async fn at_least_once_count_by_a_computed_key_reaches_the_reference() {
    let Some((reference, updates, repartition)) = run(
        "streams_group_by_alos",
        CommitMode::Sync,
        IsolationLevel::ReadUncommitted,
    )
    .await
    else {
        return;
    };
    assert_eq!(
        repartition, PARTITIONS as usize,
        "repartition topic's partitions"
    );
    assert_eq!(
        updates.keys().collect::<Vec<_>>(),
        reference.keys().collect::<Vec<_>>()
    );
    for (city, n) in &reference {
        let u = &updates[city];
        // At least once: every count 1..=n was reached (a replayed record
        // may count twice, so the promise is only ">=").
        for k in 1..=*n {
            assert!(u.contains(&k), "{city}: count {k} missing in {u:?}");
        }
        assert!(u.iter().max() >= Some(n), "{city}: {u:?}");
    }
}
