//! Transactions (v1) against the fake with purekafka's transactional
//! producer: commit and abort markers, read_committed through the last
//! stable offset and aborted-transaction index, and fencing of a zombie by
//! a new incarnation; a KIP-360 epoch bump asked for by a sink inside a
//! transaction; each for transactions v1 and v2 (KIP-890).

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use kafka_protocol::messages::ApiKey;
use purekafka::producer::{Producer, ProducerConfig, ProducerRecord};
use purekafka::{ClientConfig, Consumer, ConsumerConfig, TopicPartition, TxnErrorKind};
use purekafka_testkit::fake::{Action, FakeCluster, Rule};

async fn txn_producer(bootstrap: &str, id: &str) -> Producer {
    let config = ProducerConfig::builder()
        .client(
            ClientConfig::builder()
                .bootstrap_servers(bootstrap)
                .request_timeout(Duration::from_secs(5))
                .default_api_timeout(Duration::from_secs(15)),
        )
        .transactional_id(id)
        .build()
        .expect("config");
    Producer::connect(config)
        .await
        .expect("transactional producer")
}

async fn send_values(producer: &Producer, topic: &str, prefix: &str, n: usize) {
    let mut pending = Vec::new();
    for i in 0..n {
        let record = ProducerRecord::new(topic)
            .key(format!("k{i}"))
            .value(format!("{prefix}-{i}"));
        pending.push(producer.send(record).await.expect("send"));
    }
    for p in pending {
        p.await.expect("delivered");
    }
}

/// Every value of `topic`'s partitions, read from the beginning until
/// `quiet` passes with nothing new.
async fn read_values(
    bootstrap: &str,
    topic: &str,
    partitions: i32,
    isolation: &str,
) -> BTreeSet<String> {
    let props = vec![
        ("bootstrap.servers", bootstrap),
        ("auto.offset.reset", "earliest"),
        ("fetch.max.wait.ms", "50"),
        ("isolation.level", isolation),
    ];
    let consumer = Consumer::connect(ConsumerConfig::from_properties(props).expect("config"))
        .await
        .expect("consumer");
    consumer.assign(
        (0..partitions)
            .map(|p| TopicPartition::new(topic, p))
            .collect(),
    );
    let mut seen = BTreeSet::new();
    let mut last_new = Instant::now();
    while last_new.elapsed() < Duration::from_millis(1500) {
        for r in consumer
            .poll(Duration::from_millis(100))
            .await
            .expect("poll")
        {
            seen.insert(String::from_utf8(r.value.expect("value").to_vec()).expect("utf8"));
            last_new = Instant::now();
        }
    }
    seen
}

fn values(prefix: &str, n: usize) -> BTreeSet<String> {
    (0..n).map(|i| format!("{prefix}-{i}")).collect()
}

async fn fake(brokers: usize, transaction_version: i16) -> FakeCluster {
    FakeCluster::builder()
        .brokers(brokers)
        .transaction_version(transaction_version)
        .start()
        .await
        .expect("fake")
}

#[tokio::test]
async fn v1_committed_and_aborted_transactions_read_back_by_isolation_level() {
    commit_and_abort(1).await;
}

#[tokio::test]
async fn v2_committed_and_aborted_transactions_read_back_by_isolation_level() {
    commit_and_abort(2).await;
}

#[tokio::test]
async fn v1_an_open_transaction_holds_back_read_committed_and_a_new_incarnation_fences_the_old() {
    fencing(1).await;
}

#[tokio::test]
async fn v2_an_open_transaction_holds_back_read_committed_and_a_new_incarnation_fences_the_old() {
    fencing(2).await;
}

#[tokio::test]
async fn v1_a_lost_producer_id_makes_the_transaction_abortable_and_the_abort_bumps_the_epoch() {
    epoch_bump_owed_to_the_abort(1).await;
}

#[tokio::test]
async fn v2_a_lost_producer_id_makes_the_transaction_abortable_and_the_abort_bumps_the_epoch() {
    epoch_bump_owed_to_the_abort(2).await;
}

async fn commit_and_abort(version: i16) {
    let fake = fake(3, version).await;
    fake.create_topic("tx", 2).expect("topic");
    // Counts AddPartitionsToTxn requests: v1 sends them, v2 adds partitions
    // through Produce v12.
    fake.intercept(Rule::new(Action::Pass).on_api(ApiKey::AddPartitionsToTxn));
    let producer = txn_producer(&fake.bootstrap(), "tx-1").await;
    producer.init_transactions().await.expect("init");
    let initial = fake.with_state(|s| s.txns.by_id["tx-1"].producer_epoch);

    producer.begin_transaction().expect("begin");
    send_values(&producer, "tx", "a", 30).await;
    producer.commit_transaction().await.expect("commit");

    producer.begin_transaction().expect("begin");
    send_values(&producer, "tx", "b", 30).await;
    assert!(
        fake.with_state(|s| s.txns.by_id["tx-1"].started_ms.is_some()),
        "the coordinator shows the open transaction"
    );
    producer.abort_transaction().await.expect("abort");

    producer.begin_transaction().expect("begin");
    send_values(&producer, "tx", "c", 10).await;
    producer.commit_transaction().await.expect("commit");

    let markers: usize = fake.with_state(|s| {
        s.topics["tx"]
            .partitions
            .iter()
            .map(|p| p.batches().iter().filter(|b| b.control).count())
            .sum()
    });
    assert!(
        markers >= 3,
        "one marker per partition per transaction: {markers}"
    );
    let adds = fake.rule_hits()[0];
    let epoch = fake.with_state(|s| s.txns.by_id["tx-1"].producer_epoch);
    if version == 1 {
        assert!(adds > 0, "v1 adds partitions explicitly");
        // Only purekafka's re-init after its abort (InitProducerId) moves it.
        assert_eq!(epoch, initial + 1, "v1 keeps the epoch across EndTxn");
    } else {
        assert_eq!(adds, 0, "v2 adds partitions through Produce");
        assert_eq!(
            epoch,
            initial + 3,
            "v2 bumps the epoch at every transaction's end"
        );
    }

    let mut committed = values("a", 30);
    committed.extend(values("c", 10));
    assert_eq!(
        read_values(&fake.bootstrap(), "tx", 2, "read_committed").await,
        committed
    );
    let mut everything = committed.clone();
    everything.extend(values("b", 30));
    assert_eq!(
        read_values(&fake.bootstrap(), "tx", 2, "read_uncommitted").await,
        everything
    );
}

async fn fencing(version: i16) {
    let fake = fake(1, version).await;
    fake.create_topic("fence", 1).expect("topic");
    let zombie = txn_producer(&fake.bootstrap(), "same-id").await;
    zombie.init_transactions().await.expect("init");
    zombie.begin_transaction().expect("begin");
    send_values(&zombie, "fence", "z", 5).await;
    let (hw, lso) = fake.with_state(|s| {
        let p = &s.topics["fence"].partitions[0];
        (p.high_watermark(), p.last_stable_offset())
    });
    assert_eq!((hw, lso), (5, 0), "the open transaction pins the LSO");
    assert!(read_values(&fake.bootstrap(), "fence", 1, "read_committed")
        .await
        .is_empty());

    let successor = txn_producer(&fake.bootstrap(), "same-id").await;
    successor.init_transactions().await.expect("init successor");
    let lso = fake.with_state(|s| s.topics["fence"].partitions[0].last_stable_offset());
    assert_eq!(
        lso, 6,
        "the successor's init aborted the zombie's transaction"
    );
    let err = zombie
        .commit_transaction()
        .await
        .expect_err("the zombie is fenced");
    assert!(err.txn_kind().is_some(), "a transactional error: {err}");

    successor.begin_transaction().expect("begin");
    send_values(&successor, "fence", "s", 5).await;
    successor.commit_transaction().await.expect("commit");
    assert_eq!(
        read_values(&fake.bootstrap(), "fence", 1, "read_committed").await,
        values("s", 5)
    );
}

/// Issue #18's bug: a Produce refused with UNKNOWN_PRODUCER_ID asks the
/// sink for a KIP-360 epoch bump. On a transactional producer that bump
/// went out as an InitProducerId without the transactional id (a fresh,
/// non-transactional producer id the coordinator then refused). It is now
/// owed to the abort: the commit is refused as abortable, the abort keeps
/// the producer id and moves the epoch on (v1: InitProducerId with the
/// transactional id; v2: the epoch EndTxn returns), and the coordinator
/// agrees with the producer, so the next transaction commits.
async fn epoch_bump_owed_to_the_abort(version: i16) {
    let fake = fake(1, version).await;
    fake.create_topic("bump", 1).expect("topic");
    let producer = txn_producer(&fake.bootstrap(), "bump-tx").await;
    producer.init_transactions().await.expect("init");
    let (id0, epoch0) = producer.producer_id().expect("producer id");

    producer.begin_transaction().expect("begin");
    // Counts InitProducerId requests from here on; UNKNOWN_PRODUCER_ID (59)
    // once on Produce.
    fake.intercept(Rule::new(Action::Pass).on_api(ApiKey::InitProducerId));
    fake.intercept(Rule::new(Action::Error(59)).on_api(ApiKey::Produce).once());
    let delivery = producer
        .send(ProducerRecord::new("bump").key("k").value("lost"))
        .await;
    if let Ok(pending) = delivery {
        // Delivered under the old epoch or failed: either way the
        // transaction can no longer commit.
        let _ = pending.await;
    }
    let err = producer
        .commit_transaction()
        .await
        .expect_err("the transaction is only abortable");
    assert_eq!(
        err.txn_kind(),
        Some(TxnErrorKind::Abortable),
        "commit refused as abortable: {err}"
    );
    assert_eq!(
        fake.rule_hits()[1],
        1,
        "UNKNOWN_PRODUCER_ID was answered once"
    );
    assert_eq!(
        fake.rule_hits()[0],
        0,
        "no bare InitProducerId before the abort"
    );

    producer
        .abort_transaction()
        .await
        .expect("the abort bumps the epoch");
    let (id1, epoch1) = producer.producer_id().expect("producer id");
    assert_eq!(
        id1, id0,
        "same producer id: the bump named the transactional id"
    );
    assert!(epoch1 > epoch0, "epoch {epoch0} -> {epoch1}");
    let coordinator = fake.with_state(|s| {
        let t = &s.txns.by_id["bump-tx"];
        (t.producer_id, t.producer_epoch)
    });
    assert_eq!(coordinator, (id1, epoch1), "the coordinator agrees");

    producer.begin_transaction().expect("begin");
    send_values(&producer, "bump", "ok", 3).await;
    producer
        .commit_transaction()
        .await
        .expect("commit after the bump");
    assert_eq!(
        read_values(&fake.bootstrap(), "bump", 1, "read_committed").await,
        values("ok", 3)
    );
}

/// ListTransactions and DescribeTransactions (KIP-664) follow a
/// transaction from Empty through Ongoing to CompleteCommit, and an abort;
/// an unknown id is TRANSACTIONAL_ID_NOT_FOUND.
#[tokio::test]
async fn admin_lists_and_describes_transactions_as_they_move() {
    let fake = FakeCluster::start(3).await.expect("fake");
    fake.create_topic("tx-admin", 2).expect("topic");
    let b = fake.bootstrap();
    let admin = purekafka::Admin::connect(
        ClientConfig::builder()
            .bootstrap_servers(&b)
            .request_timeout(Duration::from_secs(5))
            .build()
            .expect("config"),
    )
    .await
    .expect("admin");
    let id = "tx-admin-id".to_string();
    let describe = || async {
        let d = admin
            .describe_transactions(std::slice::from_ref(&id))
            .await
            .expect("describe");
        d[&id].as_ref().expect("described").clone()
    };
    let producer = txn_producer(&b, &id).await;
    producer.init_transactions().await.expect("init");
    let empty = describe().await;
    assert_eq!(empty.state, "Empty");
    assert_eq!(empty.start_time_ms, -1);

    producer.begin_transaction().expect("begin");
    send_values(&producer, "tx-admin", "a", 4).await;
    let ongoing = describe().await;
    assert_eq!(ongoing.state, "Ongoing");
    assert!(ongoing.start_time_ms >= 0);
    assert_eq!(ongoing.producer_id, empty.producer_id);
    assert!(!ongoing.partitions.is_empty(), "{ongoing:?}");
    assert!(ongoing.partitions.iter().all(|tp| &*tp.topic == "tx-admin"));
    let listed = admin
        .list_transactions(&["Ongoing".to_string()])
        .await
        .expect("list");
    assert_eq!(
        listed
            .iter()
            .map(|l| l.transactional_id.as_str())
            .collect::<Vec<_>>(),
        ["tx-admin-id"]
    );
    producer.commit_transaction().await.expect("commit");
    assert_eq!(describe().await.state, "CompleteCommit");
    assert!(admin
        .list_transactions(&["Ongoing".to_string()])
        .await
        .expect("list")
        .is_empty());

    producer.begin_transaction().expect("begin");
    send_values(&producer, "tx-admin", "b", 1).await;
    producer.abort_transaction().await.expect("abort");
    // A v1 client bumps its epoch with InitProducerId after an abort, which
    // moves the id back to Empty, as on Kafka; without the bump it stays
    // CompleteAbort.
    let aborted = describe().await;
    match aborted.state.as_str() {
        "Empty" => assert!(
            aborted.producer_epoch > ongoing.producer_epoch,
            "{aborted:?}"
        ),
        "CompleteAbort" => assert_eq!(aborted.producer_epoch, ongoing.producer_epoch),
        other => panic!("after abort: {other} ({aborted:?})"),
    }
    assert_eq!(aborted.start_time_ms, -1);

    let nope = "no-such-id".to_string();
    let missing = admin
        .describe_transactions(std::slice::from_ref(&nope))
        .await
        .expect("describe");
    let code = missing[&nope]
        .as_ref()
        .err()
        .and_then(|e| e.kafka_code())
        .map(purekafka::KafkaCode::code);
    assert_eq!(code, Some(105), "{:?}", missing[&nope]);
}
