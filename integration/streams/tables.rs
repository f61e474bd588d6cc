//! Tables read from a topic and stream-table joins against the real broker
//! (issue #16): inner and left joins of an order stream with a customer
//! table equal a reference computed from the input, through table updates
//! and tombstones the running applications follow, and across a restart:
//! a persistent table restores only what was written past its checkpoint,
//! an in-memory one its whole topic. When a second instance joins, the
//! tables move with their partitions. A table whose topic is not
//! co-partitioned with the stream is an error at start.

use std::collections::BTreeMap;

use purekafka::consumer::IsolationLevel;
use purekafka::streams::state::StoreSpec;

use super::*;

/// Customers: 40 keys; orders are keyed by customer.
const CUSTOMERS: usize = 40;

/// Writes table records (`None`: a tombstone) in order.
async fn write_table(bootstrap: &str, topic: &str, writes: &[(String, Option<String>)]) {
    let p = producer(bootstrap).await;
    let mut acks = Vec::new();
    for (k, v) in writes {
        let mut r = ProducerRecord::new(topic).key(k.clone());
        if let Some(v) = v {
            r = r.value(v.clone());
        }
        acks.push(p.send(r).await.unwrap());
    }
    for a in acks {
        a.await.unwrap();
    }
    p.close(Duration::from_secs(10)).await.unwrap();
}

/// The customer of order `n`: `c{n % 40}`, none (a null key) for every
/// 25th.
fn customer_of(n: usize) -> Option<String> {
    (n % 25 != 24).then(|| format!("c{}", n % CUSTOMERS))
}

/// Writes orders `o{n}` for `range`, keyed by their customer.
async fn write_orders(bootstrap: &str, topic: &str, range: std::ops::Range<usize>) {
    let p = producer(bootstrap).await;
    let mut acks = Vec::new();
    for n in range {
        let mut r = ProducerRecord::new(topic).value(format!("o{n}"));
        if let Some(k) = customer_of(n) {
            r = r.key(k);
        }
        acks.push(p.send(r).await.unwrap());
    }
    for a in acks {
        a.await.unwrap();
    }
    p.close(Duration::from_secs(10)).await.unwrap();
}

/// A table's contents after `writes`.
fn apply(table: &mut BTreeMap<String, String>, writes: &[(String, Option<String>)]) {
    for (k, v) in writes {
        match v {
            Some(v) => table.insert(k.clone(), v.clone()),
            None => table.remove(k),
        };
    }
}

/// What the joins must write for the orders of `range`, joined with
/// `table`: the left join every order as `o{n}|customer` (`-` for none),
/// the inner join those with a customer.
fn expect(
    (left, inner): (&mut BTreeMap<String, String>, &mut BTreeMap<String, String>),
    table: &BTreeMap<String, String>,
    range: std::ops::Range<usize>,
) {
    for n in range {
        let order = format!("o{n}");
        let found = customer_of(n).and_then(|c| table.get(&c).cloned());
        left.insert(
            order.clone(),
            format!("{order}|{}", found.as_deref().unwrap_or("-")),
        );
        if let Some(c) = found {
            inner.insert(order.clone(), format!("{order}|{c}"));
        }
    }
}

/// The `o{n}|...` records of `topic`, by order; fails on an order written
/// twice.
async fn joined(
    bootstrap: &str,
    topic: &str,
    isolation: IsolationLevel,
) -> BTreeMap<String, String> {
    let mut m = BTreeMap::new();
    for v in support::read::consume_values(bootstrap, topic, 3, isolation)
        .await
        .into_iter()
        .flatten()
    {
        let (order, _) = v.split_once('|').expect("order|customer");
        let twice = m.insert(order.to_owned(), v.clone());
        assert!(twice.is_none(), "{order} written twice: {twice:?} and {v}");
    }
    m
}

/// Upserts for `keys` with `version`.
fn upserts(keys: std::ops::Range<usize>, version: &str) -> Vec<(String, Option<String>)> {
    keys.map(|i| (format!("c{i}"), Some(format!("c{i}-{version}"))))
        .collect()
}

/// Tombstones for `keys`.
fn tombstones(keys: std::ops::Range<usize>) -> Vec<(String, Option<String>)> {
    keys.map(|i| (format!("c{i}"), None)).collect()
}

/// Waits until `app`'s table store shows `table` for every key of
/// `c0..c{CUSTOMERS}` (its followers have read the writes).
async fn wait_for_table(app: &RunningStreams, table: &BTreeMap<String, String>) {
    let store = app.store::<String, String>("customers").unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let mut stale = Vec::new();
        for i in 0..CUSTOMERS {
            let k = format!("c{i}");
            if store.get(&k).unwrap() != table.get(&k).cloned() {
                stale.push(k);
            }
        }
        if stale.is_empty() {
            return;
        }
        assert!(!app.is_finished(), "the app stopped early");
        assert!(
            Instant::now() < deadline,
            "the table never showed the writes of {stale:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The two joining applications: `left` (at-least-once, persistent table
/// in `dir`) and `inner` (exactly-once, in-memory table).
struct Apps<'a> {
    bootstrap: &'a str,
    orders: &'a str,
    customers: &'a str,
    dir: &'a std::path::Path,
    ids: (String, String),
}

impl Apps<'_> {
    async fn left(&self) -> RunningStreams {
        self.left_in(self.dir).await
    }

    /// The left join with its state in `dir` (another machine's).
    async fn left_in(&self, dir: &std::path::Path) -> RunningStreams {
        let config = config(self.bootstrap, &self.ids.0)
            .ordering(OrderingMode::Key)
            .state_dir(dir)
            .build()
            .unwrap();
        let builder = Streams::topology(config);
        let table = builder.table(
            self.customers,
            StringSerializer,
            StringDeserializer,
            StoreSpec::persistent("customers"),
        );
        builder
            .source(self.orders, StringDeserializer, StringDeserializer)
            .left_join(&table, |order: String, c: Option<String>| {
                format!("{order}|{}", c.as_deref().unwrap_or("-"))
            })
            .to(
                format!("{}-left", self.orders),
                StringSerializer,
                StringSerializer,
            )
            .build()
            .start()
            .await
            .expect("start the left join")
    }

    async fn inner(&self) -> RunningStreams {
        let config = config(self.bootstrap, &self.ids.1)
            .ordering(OrderingMode::Key)
            .commit_mode(CommitMode::ExactlyOnce)
            .build()
            .unwrap();
        let builder = Streams::topology(config);
        let table = builder.table(
            self.customers,
            StringSerializer,
            StringDeserializer,
            StoreSpec::in_memory("customers"),
        );
        builder
            .source(self.orders, StringDeserializer, StringDeserializer)
            .join(&table, |order: String, c: String| format!("{order}|{c}"))
            .to(
                format!("{}-inner", self.orders),
                StringSerializer,
                StringSerializer,
            )
            .build()
            .start()
            .await
            .expect("start the inner join")
    }
}

/// 600 orders of 40 customers (every 25th without one) in 3 phases,
/// joined with a customer table (3 partitions, as the orders): phase 1
/// with 30 customers of which 5 deleted; phase 2 after 5 updates, 5
/// deletes and 5 new customers, which both running applications follow;
/// phase 3 after a restart, with an update and a delete written while
/// they were down. The left join (at-least-once, persistent table) writes
/// every order with its customer or none, the inner join (exactly-once,
/// read_committed, in-memory table) only orders with a customer: both
/// exactly the reference, no order twice. On restart the persistent
/// table restores only the 2 writes past its checkpoint, the in-memory
/// one all 52 table records.
#[tokio::test]
async fn stream_table_joins_match_the_reference_through_updates_tombstones_and_a_restart() {
    let Some((bootstrap, cluster, orders)) = setup("streams_table_join", 3).await else {
        return;
    };
    let customers = format!("{orders}-customers");
    support::create_topic(&cluster, &customers, 3).await;
    for out in ["left", "inner"] {
        support::create_topic(&cluster, &format!("{orders}-{out}"), 3).await;
    }
    let dir = std::env::temp_dir().join(support::unique_topic("streams_table_join"));
    let apps = Apps {
        bootstrap: &bootstrap,
        orders: &orders,
        customers: &customers,
        dir: &dir,
        ids: (
            support::unique_topic("streams-table-left"),
            support::unique_topic("streams-table-inner"),
        ),
    };
    let (mut table, mut left_ref, mut inner_ref) = Default::default();
    let mut table_records = 0;

    let v1 = [upserts(0..30, "v1"), tombstones(0..5)].concat();
    write_table(&bootstrap, &customers, &v1).await;
    apply(&mut table, &v1);
    table_records += v1.len();
    let (left, inner) = (apps.left().await, apps.inner().await);
    write_orders(&bootstrap, &orders, 0..240).await;
    expect((&mut left_ref, &mut inner_ref), &table, 0..240);
    wait_for(&left, |r| r.metrics().processed >= 240).await;
    wait_for(&inner, |r| r.metrics().processed >= 240).await;

    let v2 = [
        upserts(5..10, "v2"),
        tombstones(10..15),
        upserts(30..35, "v2"),
    ]
    .concat();
    write_table(&bootstrap, &customers, &v2).await;
    apply(&mut table, &v2);
    table_records += v2.len();
    wait_for_table(&left, &table).await;
    wait_for_table(&inner, &table).await;
    write_orders(&bootstrap, &orders, 240..480).await;
    expect((&mut left_ref, &mut inner_ref), &table, 240..480);
    wait_for(&left, |r| r.metrics().processed >= 480).await;
    wait_for(&inner, |r| r.metrics().processed >= 480).await;
    left.shutdown().await.expect("clean shutdown");
    inner.shutdown().await.expect("clean shutdown");

    let v3 = vec![
        ("c15".to_owned(), None),
        ("c16".to_owned(), Some("c16-v3".to_owned())),
    ];
    write_table(&bootstrap, &customers, &v3).await;
    apply(&mut table, &v3);
    table_records += v3.len();
    let (left, inner) = (apps.left().await, apps.inner().await);
    write_orders(&bootstrap, &orders, 480..600).await;
    expect((&mut left_ref, &mut inner_ref), &table, 480..600);
    wait_for(&left, |r| r.metrics().processed >= 120).await;
    wait_for(&inner, |r| r.metrics().processed >= 120).await;
    wait_for_table(&left, &table).await;
    let restored = (left.restored_records(), inner.restored_records());
    left.shutdown().await.expect("clean shutdown");
    inner.shutdown().await.expect("clean shutdown");
    let _ = std::fs::remove_dir_all(&dir);

    assert_eq!(restored, (v3.len() as u64, table_records as u64));
    let left_out = joined(
        &bootstrap,
        &format!("{orders}-left"),
        IsolationLevel::ReadUncommitted,
    )
    .await;
    assert_eq!(left_out, left_ref);
    let inner_out = joined(
        &bootstrap,
        &format!("{orders}-inner"),
        IsolationLevel::ReadCommitted,
    )
    .await;
    assert_eq!(inner_out, inner_ref);
    // The reference is not trivial: each phase joins misses and hits.
    assert!(inner_ref.len() < left_ref.len() && !inner_ref.is_empty());
}

/// A second instance of the left join (another state.dir) joins: the
/// partitions it takes move their tables with them (closed and no longer
/// followed on the first, restored from the topic on the second), and
/// table writes made after the move reach the instance owning each key's
/// partition. Orders in 3 phases (150 before the move, batches of 30
/// until the second instance has processed some, 150 after the table
/// writes): the output, each order once per processing (an
/// at-least-once rebalance may repeat one, always with the same join), is
/// the reference.
#[tokio::test]
async fn tables_move_with_their_partitions_when_a_second_instance_joins() {
    let Some((bootstrap, cluster, orders)) = setup("streams_table_rebalance", 3).await else {
        return;
    };
    let customers = format!("{orders}-customers");
    support::create_topic(&cluster, &customers, 3).await;
    support::create_topic(&cluster, &format!("{orders}-left"), 3).await;
    let dirs = [
        std::env::temp_dir().join(support::unique_topic("streams_table_rebalance")),
        std::env::temp_dir().join(support::unique_topic("streams_table_rebalance")),
    ];
    let apps = Apps {
        bootstrap: &bootstrap,
        orders: &orders,
        customers: &customers,
        dir: &dirs[0],
        ids: (support::unique_topic("streams-table-move"), String::new()),
    };
    let (mut table, mut left_ref, mut unused) = Default::default();
    let v1 = upserts(0..30, "v1");
    write_table(&bootstrap, &customers, &v1).await;
    apply(&mut table, &v1);
    let a = apps.left().await;
    write_orders(&bootstrap, &orders, 0..150).await;
    expect((&mut left_ref, &mut unused), &table, 0..150);
    wait_for(&a, |r| r.metrics().processed >= 150).await;

    let b = apps.left_in(&dirs[1]).await;
    let both =
        |a: &RunningStreams, b: &RunningStreams| a.metrics().processed + b.metrics().processed;
    // Orders in batches until the second instance has processed some (it
    // then holds partitions, and their tables).
    let mut next = 150;
    let deadline = Instant::now() + Duration::from_secs(60);
    while b.metrics().processed == 0 {
        assert!(
            Instant::now() < deadline,
            "the second instance processed nothing"
        );
        write_orders(&bootstrap, &orders, next..next + 30).await;
        expect((&mut left_ref, &mut unused), &table, next..next + 30);
        next += 30;
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    while both(&a, &b) < next as u64 {
        assert!(Instant::now() < deadline, "phase 2 not processed");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    let v2 = [
        upserts(0..5, "v2"),
        tombstones(5..10),
        upserts(30..35, "v2"),
    ]
    .concat();
    write_table(&bootstrap, &customers, &v2).await;
    apply(&mut table, &v2);
    let (qa, qb) = (
        a.store::<String, String>("customers").unwrap(),
        b.store::<String, String>("customers").unwrap(),
    );
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let stale: Vec<String> = (0..CUSTOMERS)
            .map(|i| format!("c{i}"))
            .filter(|k| {
                let seen = qa.get(k).unwrap().or(qb.get(k).unwrap());
                seen != table.get(k).cloned()
            })
            .collect();
        if stale.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the tables never showed the writes of {stale:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    write_orders(&bootstrap, &orders, next..next + 150).await;
    expect((&mut left_ref, &mut unused), &table, next..next + 150);
    next += 150;
    let deadline = Instant::now() + Duration::from_secs(60);
    while both(&a, &b) < next as u64 {
        assert!(Instant::now() < deadline, "phase 3 not processed");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (pa, pb) = (qa.partitions(), qb.partitions());
    b.shutdown().await.expect("clean shutdown");
    a.shutdown().await.expect("clean shutdown");
    for dir in &dirs {
        let _ = std::fs::remove_dir_all(dir);
    }
    assert!(
        !pa.is_empty() && !pb.is_empty(),
        "tables open: {pa:?} / {pb:?}"
    );
    assert!(pa.iter().all(|p| !pb.contains(p)), "{pa:?} / {pb:?}");
    let mut out: BTreeMap<String, String> = BTreeMap::new();
    for v in support::read::consume_values(
        &bootstrap,
        &format!("{orders}-left"),
        3,
        IsolationLevel::ReadUncommitted,
    )
    .await
    .into_iter()
    .flatten()
    {
        let (order, _) = v.split_once('|').expect("order|customer");
        if let Some(before) = out.insert(order.to_owned(), v.clone()) {
            assert_eq!(before, v, "{order} joined twice, differently");
        }
    }
    assert_eq!(out, left_ref);
}

#[tokio::test]
async fn a_table_not_co_partitioned_with_the_stream_is_an_error_at_start() {
    let Some((bootstrap, cluster, orders)) = setup("streams_table_copartition", 3).await else {
        return;
    };
    let customers = format!("{orders}-customers");
    support::create_topic(&cluster, &customers, 2).await;
    let builder = Streams::topology(
        config(
            &bootstrap,
            &support::unique_topic("streams-table-copartition"),
        )
        .build()
        .unwrap(),
    );
    let table = builder.table(
        customers.as_str(),
        StringSerializer,
        StringDeserializer,
        StoreSpec::in_memory("customers"),
    );
    let started = builder
        .source(orders.as_str(), StringDeserializer, StringDeserializer)
        .join(&table, |o: String, c: String| format!("{o}|{c}"))
        .to(format!("{orders}-out"), StringSerializer, StringSerializer)
        .build()
        .start()
        .await;
    let err = match started {
        Ok(_) => panic!("started with a 2-partition table for a 3-partition stream"),
        Err(e) => e.to_string(),
    };
    assert!(
        err.contains(&customers) && err.contains(&orders) && err.contains("2 partition"),
        "{err}"
    );
}

/// `to_stream` of a table read from a topic: every record of the topic,
/// in order per key, a tombstone as `None` (written here as `null`);
/// exactly-once, read_committed, so each update exactly once.
#[tokio::test]
async fn a_tables_to_stream_gives_every_update_and_tombstones_as_none() {
    let Some((bootstrap, cluster, table_topic)) = setup("streams_table_to_stream", 3).await else {
        return;
    };
    let out = format!("{table_topic}-out");
    support::create_topic(&cluster, &out, 3).await;
    let mut writes = upserts(0..CUSTOMERS, "v1");
    writes.extend(tombstones(0..10));
    writes.extend(upserts(5..15, "v2"));
    write_table(&bootstrap, &table_topic, &writes).await;
    let mut expected: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (k, v) in &writes {
        let v = v.clone().unwrap_or_else(|| "null".to_owned());
        expected.entry(k.clone()).or_default().push(v);
    }
    let app = support::unique_topic("streams_table_to_stream-app");
    let config = config(&bootstrap, &app)
        .ordering(OrderingMode::Key)
        .commit_mode(CommitMode::ExactlyOnce)
        .state_dir(std::env::temp_dir().join(format!("purekafka-{app}")))
        .build()
        .unwrap();
    let table = Streams::topology(config).table(
        &table_topic,
        StringSerializer,
        StringDeserializer,
        StoreSpec::in_memory("customers"),
    );
    let running = table
        .to_stream(StringDeserializer)
        .map(|r| {
            let v = format!(
                "{}={}",
                r.key.clone().unwrap_or_default(),
                r.value.clone().unwrap_or_else(|| "null".to_owned())
            );
            Ok(r.with_value(v))
        })
        .to(&out, StringSerializer, StringSerializer)
        .build()
        .start()
        .await
        .expect("start");
    wait_for(&running, |r| r.metrics().processed >= writes.len() as u64).await;
    running.shutdown().await.expect("clean shutdown");
    let _ = std::fs::remove_dir_all(std::env::temp_dir().join(format!("purekafka-{app}")));
    // The sink keys each update as the table did: a key's updates are in
    // one partition, in order.
    let mut got: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for v in support::read::consume_values(&bootstrap, &out, 3, IsolationLevel::ReadCommitted)
        .await
        .into_iter()
        .flatten()
    {
        let (k, v) = v.split_once('=').expect("key=value");
        got.entry(k.to_owned()).or_default().push(v.to_owned());
    }
    assert_eq!(got, expected);
}
