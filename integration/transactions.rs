//! Transactions against the real broker, through both protocols: v1
//! (AddPartitionsToTxn, forced with `purekafka.transaction.version.max=1`)
//! and v2 (KIP-890, which the 4.x broker finalizes). read_committed readers
//! (ours and Java's console consumer) see committed data only; an older
//! producer with the same transactional.id is fenced.

use std::collections::HashMap;
use std::time::Duration;

use purekafka::consumer::group::{
    ConsumerGroupMetadata, GroupConfig, GroupMember, OffsetAndMetadata,
};
use purekafka::consumer::IsolationLevel;
use purekafka::producer::{Producer, ProducerConfig, ProducerRecord};
use purekafka::{Cluster, TopicPartition, TxnErrorKind};

use crate::support::{self, java, read::consume_values};

async fn txn_producer(bootstrap: &str, id: &str, version: i16) -> Producer {
    support::trace();
    let config = ProducerConfig::builder()
        .client(
            purekafka::ClientConfig::builder()
                .bootstrap_servers(bootstrap)
                .request_timeout(Duration::from_secs(10))
                .default_api_timeout(Duration::from_secs(30)),
        )
        .transactional_id(id)
        .set("purekafka.transaction.version.max", &version.to_string())
        .unwrap()
        .build()
        .unwrap();
    Producer::connect(config)
        .await
        .expect("transactional producer")
}

/// Every record of `topic` (all `partitions`) visible at `isolation`, sorted.
async fn read_all(
    bootstrap: &str,
    topic: &str,
    partitions: i32,
    isolation: IsolationLevel,
) -> Vec<String> {
    let mut values: Vec<String> = consume_values(bootstrap, topic, partitions, isolation)
        .await
        .into_iter()
        .flatten()
        .collect();
    values.sort();
    values
}

async fn send_values(producer: &Producer, topic: &str, prefix: &str, n: usize) {
    let mut deliveries = Vec::new();
    for i in 0..n {
        let record = ProducerRecord::new(topic)
            .key(format!("k{i}"))
            .value(format!("{prefix}-{i:04}"));
        deliveries.push(producer.send(record).await.unwrap());
    }
    for d in deliveries {
        d.await.unwrap();
    }
}

async fn commit_and_abort(version: i16) {
    let Some(bootstrap) = support::bootstrap("transactions_commit_and_abort") else {
        return;
    };
    let cluster = Cluster::connect(support::config(&bootstrap)).await.unwrap();
    let topic = support::unique_topic(&format!("t-txn-v{version}"));
    support::create_topic(&cluster, &topic, 2).await;
    let producer = txn_producer(&bootstrap, &support::unique_topic("txn-id"), version).await;
    // Sends before init_transactions / begin_transaction are refused.
    let err = producer
        .send(ProducerRecord::new(&topic).value("early"))
        .await
        .err()
        .expect("send outside a transaction");
    assert_eq!(err.txn_kind(), Some(TxnErrorKind::InvalidState), "{err}");
    producer.init_transactions().await.unwrap();

    producer.begin_transaction().unwrap();
    send_values(&producer, &topic, "a-committed", 100).await;
    producer.commit_transaction().await.unwrap();

    producer.begin_transaction().unwrap();
    send_values(&producer, &topic, "b-aborted", 100).await;
    producer.abort_transaction().await.unwrap();

    producer.begin_transaction().unwrap();
    send_values(&producer, &topic, "c-committed", 50).await;
    producer.commit_transaction().await.unwrap();
    producer.close(Duration::from_secs(10)).await.unwrap();

    let committed = read_all(&bootstrap, &topic, 2, IsolationLevel::ReadCommitted).await;
    let mut want: Vec<String> = (0..100).map(|i| format!("a-committed-{i:04}")).collect();
    want.extend((0..50).map(|i| format!("c-committed-{i:04}")));
    want.sort();
    assert_eq!(
        committed, want,
        "read_committed sees exactly the committed records"
    );
    let everything = read_all(&bootstrap, &topic, 2, IsolationLevel::ReadUncommitted).await;
    assert_eq!(
        everything.len(),
        250,
        "read_uncommitted also sees the aborted ones"
    );

    // Java's consumer, read_committed, agrees. On the fake this half is the
    // testkit's `fake_java` transactional tests (v1 and v2: Java's
    // read_committed consumer skips our aborted transaction): the fake pass
    // leaves the JVM out, as it does every Java interop test.
    if support::broker_provider() == support::BrokerProvider::Fake {
        return;
    }
    let out = java::run(
        "org.apache.kafka.tools.consumer.ConsoleConsumer",
        &[
            "--bootstrap-server",
            &bootstrap,
            "--topic",
            &topic,
            "--from-beginning",
            "--isolation-level",
            "read_committed",
            "--max-messages",
            "150",
            "--timeout-ms",
            "20000",
        ],
        None,
    );
    let mut java_values: Vec<String> = out.lines().map(str::to_owned).collect();
    java_values.sort();
    assert_eq!(java_values, want, "Java read_committed");
}

#[tokio::test]
async fn v1_commit_and_abort_show_only_committed_data() {
    commit_and_abort(1).await;
}

#[tokio::test]
async fn v2_commit_and_abort_show_only_committed_data() {
    commit_and_abort(2).await;
}

async fn zombie_fencing(version: i16) {
    let Some(bootstrap) = support::bootstrap("transactions_zombie_fencing") else {
        return;
    };
    let cluster = Cluster::connect(support::config(&bootstrap)).await.unwrap();
    let topic = support::unique_topic(&format!("t-fence-v{version}"));
    support::create_topic(&cluster, &topic, 1).await;
    let id = support::unique_topic("txn-fence");
    let old = txn_producer(&bootstrap, &id, version).await;
    old.init_transactions().await.unwrap();
    old.begin_transaction().unwrap();
    send_values(&old, &topic, "old-before-fence", 10).await;

    // A new instance with the same id fences the old one (and aborts its
    // open transaction).
    let new = txn_producer(&bootstrap, &id, version).await;
    new.init_transactions().await.unwrap();

    // Whatever the old producer does now fails fatally or never shows.
    let mut fenced = None;
    for i in 0..5 {
        match old
            .send(ProducerRecord::new(&topic).value(format!("old-after-fence-{i}")))
            .await
        {
            Ok(d) => {
                if let Err(e) = d.await {
                    fenced = Some(e);
                }
            }
            Err(e) => fenced = Some(e),
        }
    }
    let commit = old.commit_transaction().await;
    let err = commit.err().or(fenced).expect("the old producer is fenced");
    assert_eq!(err.txn_kind(), Some(TxnErrorKind::Fatal), "{err}");
    assert!(
        err.to_string().contains("ProducerFenced")
            || err.to_string().contains("InvalidProducerEpoch"),
        "{err}"
    );

    new.begin_transaction().unwrap();
    send_values(&new, &topic, "new", 20).await;
    new.commit_transaction().await.unwrap();
    new.close(Duration::from_secs(10)).await.unwrap();

    let committed = read_all(&bootstrap, &topic, 1, IsolationLevel::ReadCommitted).await;
    let want: Vec<String> = (0..20).map(|i| format!("new-{i:04}")).collect();
    assert_eq!(committed, want, "nothing of the fenced producer is visible");
}

#[tokio::test]
async fn v1_older_producer_is_fenced_and_invisible() {
    zombie_fencing(1).await;
}

#[tokio::test]
async fn v2_older_producer_is_fenced_and_invisible() {
    zombie_fencing(2).await;
}

async fn offsets_in_transactions(version: i16) {
    let Some(bootstrap) = support::bootstrap("transactions_offsets") else {
        return;
    };
    let cluster = Cluster::connect(support::config(&bootstrap)).await.unwrap();
    let topic = support::unique_topic(&format!("t-offsets-v{version}"));
    support::create_topic(&cluster, &topic, 1).await;
    let group_id = support::unique_topic("txn-group");
    let tp = TopicPartition::new(topic.as_str(), 0);
    let group = ConsumerGroupMetadata {
        group_id: group_id.clone(),
        generation_id: -1,
        member_id: String::new(),
        group_instance_id: None,
    };
    let producer = txn_producer(&bootstrap, &support::unique_topic("txn-offsets"), version).await;
    producer.init_transactions().await.unwrap();
    let offsets = |o: i64| {
        HashMap::from([(
            tp.clone(),
            OffsetAndMetadata {
                offset: o,
                leader_epoch: None,
                metadata: format!("at {o}"),
            },
        )])
    };

    producer.begin_transaction().unwrap();
    send_values(&producer, &topic, "x", 5).await;
    producer
        .send_offsets_to_transaction(&offsets(42), &group)
        .await
        .unwrap();
    producer.commit_transaction().await.unwrap();

    producer.begin_transaction().unwrap();
    producer
        .send_offsets_to_transaction(&offsets(99), &group)
        .await
        .unwrap();
    producer.abort_transaction().await.unwrap();
    producer.close(Duration::from_secs(10)).await.unwrap();

    let reader = GroupMember::without_membership(&cluster, GroupConfig::new(group_id)).unwrap();
    let committed = reader
        .fetch_committed(std::slice::from_ref(&tp))
        .await
        .unwrap();
    let got = &committed[&tp];
    assert_eq!(
        got.offset, 42,
        "the committed transaction's offsets, not the aborted one's"
    );
    assert_eq!(got.metadata, "at 42");
}

#[tokio::test]
async fn v1_offsets_commit_with_the_transaction_only() {
    offsets_in_transactions(1).await;
}

#[tokio::test]
async fn v2_offsets_commit_with_the_transaction_only() {
    offsets_in_transactions(2).await;
}

/// The transaction manager's phases and epochs as the real coordinator
/// answers them: a v2 EndTxn hands out the next epoch on every commit and
/// abort (KIP-890); v1 keeps the epoch across a commit and bumps it with
/// InitProducerId after an abort that sent records (KIP-360/KIP-588); an
/// empty transaction ends without the coordinator; the producer id never
/// changes. Calls out of turn are refused as invalid state.
async fn phases_and_epochs(version: i16) {
    let Some(bootstrap) = support::bootstrap("transactions_phases_and_epochs") else {
        return;
    };
    let cluster = Cluster::connect(support::config(&bootstrap)).await.unwrap();
    let topic = support::unique_topic(&format!("t-txn-epochs-v{version}"));
    support::create_topic(&cluster, &topic, 1).await;
    let producer = txn_producer(&bootstrap, &support::unique_topic("txn-id"), version).await;
    let invalid = Some(TxnErrorKind::InvalidState);
    assert_eq!(
        producer.begin_transaction().unwrap_err().txn_kind(),
        invalid
    );
    producer.init_transactions().await.unwrap();
    let (id, e0) = producer.producer_id().expect("producer id");

    assert_eq!(
        producer.commit_transaction().await.unwrap_err().txn_kind(),
        invalid,
        "no open transaction to commit"
    );
    producer.begin_transaction().unwrap();
    assert_eq!(
        producer.begin_transaction().unwrap_err().txn_kind(),
        invalid
    );
    send_values(&producer, &topic, "a", 5).await;
    producer.commit_transaction().await.unwrap();
    let after_commit = producer.producer_id().expect("producer id");
    let want = if version >= 2 { e0 + 1 } else { e0 };
    assert_eq!(after_commit, (id, want), "epoch after a commit");

    producer.begin_transaction().unwrap();
    send_values(&producer, &topic, "b", 5).await;
    producer.abort_transaction().await.unwrap();
    let after_abort = producer.producer_id().expect("producer id");
    assert_eq!(after_abort, (id, want + 1), "the abort moves the epoch on");
    assert_eq!(
        producer.abort_transaction().await.unwrap_err().txn_kind(),
        invalid,
        "nothing left to abort"
    );

    producer.begin_transaction().unwrap();
    producer.commit_transaction().await.unwrap();
    assert_eq!(
        producer.producer_id(),
        Some(after_abort),
        "an empty transaction ends without EndTxn"
    );

    producer.begin_transaction().unwrap();
    send_values(&producer, &topic, "c", 5).await;
    producer.commit_transaction().await.unwrap();
    producer.close(Duration::from_secs(10)).await.unwrap();
    let mut want: Vec<String> = (0..5).map(|i| format!("a-{i:04}")).collect();
    want.extend((0..5).map(|i| format!("c-{i:04}")));
    assert_eq!(
        read_all(&bootstrap, &topic, 1, IsolationLevel::ReadCommitted).await,
        want
    );
}

#[tokio::test]
async fn v1_phases_and_epochs_follow_the_coordinator() {
    phases_and_epochs(1).await;
}

#[tokio::test]
async fn v2_phases_and_epochs_follow_the_coordinator() {
    phases_and_epochs(2).await;
}
