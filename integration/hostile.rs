//! The real client APIs against a hostile broker (issue #9 part 3): every
//! fault must end in a typed error (or, for the fetch loop, an empty poll)
//! within its configured timeout, with no panic and bounded allocation.
//! These tests need no real broker.

use std::future::Future;
use std::time::Duration;

use kafka_protocol::messages::ApiKey;
use purekafka::admin::NewTopic;
use purekafka::config::{SaslMechanism, SecurityProtocol};
use purekafka::consumer::ConsumerGroupMetadata;
use purekafka::producer::{Producer, ProducerConfig, ProducerRecord};
use purekafka::protocol::compression::Compression;
use purekafka::protocol::ProtocolError;
use purekafka::{
    Admin, ClientConfig, Cluster, Consumer, ConsumerConfig, Error, TopicPartition, TxnErrorKind,
};

use crate::support::hostile::{Fault, HostileBroker, BOMB_INFLATED, BOMB_LIMIT};

pub(crate) const REQUEST_TIMEOUT: Duration = Duration::from_secs(1);
pub(crate) const API_TIMEOUT: Duration = Duration::from_secs(3);
pub(crate) const MAX_RESPONSE: usize = 1 << 20;
/// A little above the longest configured wait.
const BOUND: Duration = Duration::from_secs(6);

pub(crate) fn client(b: &HostileBroker) -> purekafka::ClientConfigBuilder {
    ClientConfig::builder()
        .bootstrap_servers(b.bootstrap())
        .client_id("purekafka-hostile")
        .request_timeout(REQUEST_TIMEOUT)
        .connection_setup_timeout(REQUEST_TIMEOUT)
        .default_api_timeout(API_TIMEOUT)
        .max_response_size(MAX_RESPONSE)
}

/// Runs `f` and fails the test if it outlives [`BOUND`].
pub(crate) async fn bounded<T>(what: &str, f: impl Future<Output = T>) -> T {
    match tokio::time::timeout(BOUND, f).await {
        Ok(v) => v,
        Err(_) => panic!("{what}: still running after {BOUND:?} (hang)"),
    }
}

/// The faults that break one response frame.
pub(crate) fn frame_faults() -> Vec<Fault> {
    vec![
        Fault::Malformed,
        Fault::Truncated,
        Fault::Oversized(MAX_RESPONSE as i32 + 1),
        Fault::WrongCorrelation,
        Fault::NegativeLength,
        Fault::HugeLength,
        Fault::Silent,
    ]
}

/// The typed error each frame fault must produce on a single request.
pub(crate) fn assert_frame_error(fault: &Fault, err: &Error, api: &str) {
    // Metadata tries every known broker and reports the last failure.
    let err = match err {
        Error::NoBrokerAvailable { last, .. } => last.as_ref(),
        other => other,
    };
    let text = err.to_string();
    match fault {
        Fault::Malformed => {
            assert!(matches!(err, Error::Protocol { .. }), "{fault:?}: {err:?}");
            assert!(text.contains(api), "{fault:?}: names {api}: {text}");
        }
        Fault::WrongCorrelation => assert!(
            matches!(err, Error::Protocol { source: ProtocolError::Invalid { what, .. }, .. } if *what == "correlation id"),
            "{fault:?}: {err:?}"
        ),
        Fault::Oversized(_) | Fault::HugeLength => assert!(
            matches!(err, Error::Protocol { source: ProtocolError::TooLarge { limit, .. }, .. } if *limit == MAX_RESPONSE as u64),
            "{fault:?}: {err:?}"
        ),
        Fault::NegativeLength => assert!(
            matches!(
                err,
                Error::Protocol {
                    source: ProtocolError::Invalid { .. },
                    ..
                }
            ),
            "{fault:?}: {err:?}"
        ),
        Fault::Truncated => {
            assert!(
                matches!(err, Error::Disconnected { .. } | Error::Io { .. }),
                "{fault:?}: {err:?}"
            );
            assert!(err.is_retriable(), "{fault:?}: {err}");
        }
        Fault::Silent => {
            assert!(matches!(err, Error::Timeout { .. }), "{fault:?}: {err:?}");
            assert!(err.is_retriable(), "{fault:?}: {err}");
        }
        other => unreachable!("{other:?} is not a frame fault"),
    }
    assert!(
        text.contains("127.0.0.1"),
        "{fault:?}: names the broker: {text}"
    );
}

#[tokio::test]
async fn cluster_metadata_refresh_fails_typed_on_every_frame_fault() {
    for fault in frame_faults() {
        let b = HostileBroker::start().await;
        let cluster = bounded("connect", Cluster::connect(client(&b).build().unwrap()))
            .await
            .expect("honest bootstrap");
        b.script(ApiKey::Metadata, fault.clone());
        let topics = ["hostile".to_owned()];
        let err = bounded("refresh", cluster.refresh_metadata(Some(&topics)))
            .await
            .expect_err("a hostile Metadata answer must fail");
        assert_frame_error(&fault, &err, "Metadata");
    }
}

#[tokio::test]
async fn cluster_connect_fails_typed_when_bootstrap_metadata_is_hostile() {
    for fault in frame_faults() {
        let b = HostileBroker::with(ApiKey::Metadata, fault.clone()).await;
        let res = bounded("connect", Cluster::connect(client(&b).build().unwrap())).await;
        if let Err(err) = res {
            assert!(
                !matches!(err, Error::Config { .. }),
                "{fault:?}: typed network/protocol error, got {err:?}"
            );
        }
    }
}

pub(crate) async fn producer(b: &HostileBroker, idempotent: bool) -> purekafka::Result<Producer> {
    Producer::connect(
        ProducerConfig::builder()
            .client(client(b))
            .idempotence(idempotent)
            .linger(Duration::ZERO)
            .delivery_timeout(API_TIMEOUT)
            .max_block(API_TIMEOUT)
            .build()
            .unwrap(),
    )
    .await
}

/// Sends one record to `hostile-0` and waits for its delivery.
pub(crate) async fn send_one(
    p: &Producer,
) -> purekafka::Result<purekafka::producer::RecordMetadata> {
    p.send(ProducerRecord::new("hostile").partition(0).value("v"))
        .await?
        .await
}

#[tokio::test]
async fn producer_send_fails_typed_on_every_produce_fault() {
    let mut faults = frame_faults();
    faults.push(Fault::ErrorCode(87)); // INVALID_RECORD: fatal
    faults.push(Fault::ErrorCode(6)); // NOT_LEADER_OR_FOLLOWER: retried until delivery.timeout
    for fault in faults {
        let b = HostileBroker::with(ApiKey::Produce, fault.clone()).await;
        let p = bounded("producer", producer(&b, false))
            .await
            .expect("producer");
        let res = bounded("send", send_one(&p)).await;
        let err = res.expect_err(&format!("{fault:?}: delivery must fail"));
        let text = err.to_string();
        match fault {
            Fault::ErrorCode(87) => {
                assert!(
                    matches!(&err, Error::Kafka { code, .. } if code.code() == 87),
                    "{fault:?}: {err:?}"
                );
                assert!(!err.is_retriable(), "{fault:?}: {err}");
                assert!(
                    text.contains("hostile-0"),
                    "{fault:?}: names the partition: {text}"
                );
            }
            // Retried until delivery.timeout.ms. Whichever path expired the
            // batch (a late answer, or a wait before the next retry), the
            // error names the last failure and the broker it came from.
            Fault::Truncated | Fault::Silent | Fault::ErrorCode(_) => {
                assert!(matches!(&err, Error::Timeout { .. }), "{fault:?}: {err:?}");
                assert!(
                    text.contains("delivery.timeout.ms") && text.contains("hostile-0"),
                    "{fault:?}: names the bound and the partition: {text}"
                );
                let last = text
                    .split_once("last error: ")
                    .map(|(_, last)| last)
                    .unwrap_or_else(|| panic!("{fault:?}: names the last error: {text}"));
                assert!(
                    last.contains("127.0.0.1"),
                    "{fault:?}: names the broker: {text}"
                );
                match fault {
                    Fault::Silent => {
                        assert!(last.contains("request.timeout.ms"), "{fault:?}: {text}")
                    }
                    Fault::ErrorCode(_) => assert!(
                        last.contains("NotLeaderOrFollower (6)"),
                        "{fault:?}: names the code: {text}"
                    ),
                    _ => {}
                }
            }
            _ => assert_frame_error(&fault, &err, "Produce v"),
        }
        let _ = bounded("close", p.close(Duration::from_millis(500))).await;
    }
}

#[tokio::test]
async fn idempotent_producer_fails_typed_when_init_producer_id_is_hostile() {
    for fault in [Fault::Malformed, Fault::Silent, Fault::ErrorCode(87)] {
        let b = HostileBroker::with(ApiKey::InitProducerId, fault.clone()).await;
        let res = bounded("producer+send", async {
            let p = producer(&b, true).await?;
            send_one(&p).await
        })
        .await;
        let err = res.expect_err(&format!("{fault:?}: must fail"));
        match fault {
            Fault::ErrorCode(87) => {
                assert!(
                    matches!(&err, Error::Kafka { code, .. } if code.code() == 87),
                    "{fault:?}: {err:?}"
                );
                assert!(err.to_string().contains("InitProducerId"), "{err}");
            }
            _ => assert_frame_error(&fault, &err, "InitProducerId"),
        }
        assert!(
            err.to_string().contains("InitProducerId"),
            "{fault:?}: names the API: {err}"
        );
    }
}

/// KIP-360: a batch refused with UNKNOWN_PRODUCER_ID (the broker lost the
/// producer's state) makes the idempotent producer bump its epoch with
/// InitProducerId and send the batch again, which is then delivered.
#[tokio::test]
async fn unknown_producer_id_bumps_the_epoch_and_the_batch_is_delivered() {
    let b = HostileBroker::start().await;
    b.script_once(ApiKey::Produce, Fault::ErrorCode(59)); // UNKNOWN_PRODUCER_ID
    let p = bounded("producer", producer(&b, true))
        .await
        .expect("producer");
    let delivered = bounded("send", send_one(&p)).await;
    let meta = delivered.expect("delivered after the epoch bump");
    assert_eq!(meta.partition, TopicPartition::new("hostile", 0));
    assert_eq!(
        b.count(ApiKey::InitProducerId),
        2,
        "the first id, then the bump"
    );
    assert_eq!(b.count(ApiKey::Produce), 2, "refused once, then written");
    assert_eq!(p.metrics().epoch_bumps, 1);
    let _ = bounded("close", p.close(Duration::from_millis(500))).await;
}

/// Connects a consumer with `config` to `b`, with this file's client
/// settings and fetches capped at half of [`MAX_RESPONSE`].
pub(crate) async fn connect_consumer(
    b: &HostileBroker,
    config: purekafka::ConsumerConfigBuilder,
) -> Consumer {
    Consumer::connect(
        config
            .client(|_| client(b))
            .fetch_max_bytes(MAX_RESPONSE as i32 / 2)
            .build()
            .unwrap(),
    )
    .await
    .expect("consumer")
}

async fn assigned_consumer(b: &HostileBroker) -> Consumer {
    let c = connect_consumer(
        b,
        ConsumerConfig::builder()
            .fetch_max_wait(Duration::from_millis(100))
            .max_decompressed_size(BOMB_LIMIT),
    )
    .await;
    let tp = TopicPartition::new("hostile", 0);
    c.assign(vec![tp.clone()]);
    c.seek(&tp, 0).unwrap();
    c
}

/// Polls until an error or [`API_TIMEOUT`]; returns the first error. Every
/// single `poll` returns within its own timeout.
async fn poll_error(c: &Consumer) -> Option<Error> {
    let deadline = tokio::time::Instant::now() + API_TIMEOUT;
    while tokio::time::Instant::now() < deadline {
        match c.poll(Duration::from_millis(500)).await {
            Err(e) => return Some(e),
            Ok(records) => assert!(records.is_empty(), "hostile fetch produced records"),
        }
    }
    None
}

#[tokio::test]
async fn consumer_poll_reports_a_bad_crc_as_record_decode() {
    let b = HostileBroker::with(ApiKey::Fetch, Fault::BadCrc).await;
    let c = bounded("consumer", assigned_consumer(&b)).await;
    let err = bounded("poll", poll_error(&c)).await.expect("a CRC error");
    assert!(
        matches!(&err, Error::RecordDecode { partition, offset: 0, .. } if partition.topic.as_ref() == "hostile"),
        "{err:?}"
    );
    assert!(err.to_string().to_lowercase().contains("crc"), "{err}");
}

#[tokio::test]
async fn consumer_poll_refuses_decompression_bombs() {
    for codec in [
        Compression::Gzip,
        Compression::Snappy,
        Compression::Lz4,
        Compression::Zstd,
    ] {
        let wire = crate::support::hostile::bomb(codec).len();
        // A sixteenth of 5 MiB also fits the fetch size (MAX_RESPONSE / 2).
        assert!(
            wire < BOMB_INFLATED / 16,
            "{codec}: a small payload ({wire} bytes) that inflates {}x",
            BOMB_INFLATED / wire
        );
        let b = HostileBroker::with(ApiKey::Fetch, Fault::Bomb(codec)).await;
        let c = bounded("consumer", assigned_consumer(&b)).await;
        let err = bounded("poll", poll_error(&c))
            .await
            .unwrap_or_else(|| panic!("{codec}: a bomb must be an error"));
        assert!(
            matches!(
                &err,
                Error::RecordDecode {
                    source: ProtocolError::TooLarge { limit, .. },
                    ..
                } if *limit == BOMB_LIMIT as u64
            ),
            "{codec}: {err:?}"
        );
        let _ = bounded("close", c.close()).await;
    }
}

#[tokio::test]
async fn consumer_poll_stays_bounded_on_every_fetch_frame_fault() {
    for fault in frame_faults() {
        let b = HostileBroker::with(ApiKey::Fetch, fault.clone()).await;
        let c = bounded("consumer", assigned_consumer(&b)).await;
        // The fetcher retries broken fetches in the background; poll must
        // return (empty or a typed error) within its timeout, never records.
        let res = bounded("poll", poll_error(&c)).await;
        match (&fault, res) {
            // Retried in the background: polls stay empty.
            (Fault::Truncated | Fault::Silent, res) => {
                assert!(res.is_none(), "{fault:?}: {res:?}")
            }
            (_, Some(err)) => assert_frame_error(&fault, &err, "Fetch v"),
            (_, None) => panic!("{fault:?}: poll must report the broken answer"),
        }
        let _ = bounded("close", c.close()).await;
    }
}

/// Connects a consumer of group `hostile-group` (auto-commit off), assigns
/// it `hostile-0` and commits offset 5 there, bounded by [`BOUND`].
async fn commit_as_group_member(b: &HostileBroker) -> purekafka::Result<()> {
    let c = connect_consumer(
        b,
        ConsumerConfig::builder()
            .group_id("hostile-group")
            .enable_auto_commit(false),
    )
    .await;
    let tp = TopicPartition::new("hostile", 0);
    c.assign(vec![tp.clone()]);
    let offsets = [(tp, purekafka::consumer::OffsetAndMetadata::new(5))]
        .into_iter()
        .collect();
    bounded("commit", c.commit_sync_offsets(offsets)).await
}

#[tokio::test]
async fn group_commit_fails_typed_on_hostile_offset_commit() {
    let mut faults = frame_faults();
    faults.push(Fault::ErrorCode(25)); // UNKNOWN_MEMBER_ID
                                       // None first: the control, where the fake's honest answer commits.
    for fault in std::iter::once(None).chain(faults.into_iter().map(Some)) {
        let b = HostileBroker::start().await;
        if let Some(f) = &fault {
            b.script(ApiKey::OffsetCommit, f.clone());
        }
        let res = commit_as_group_member(&b).await;
        if fault.is_none() {
            res.expect("honest commit");
            continue;
        }
        let err = res.expect_err(&format!("{fault:?}: commit must fail"));
        let text = err.to_string();
        assert!(
            text.contains("OffsetCommit"),
            "{fault:?}: names the API: {text}"
        );
        match fault {
            Some(Fault::ErrorCode(25)) => {
                assert!(
                    matches!(&err, Error::CommitFailed { code, .. } if code.code() == 25),
                    "{fault:?}: {err:?}"
                );
                assert!(!err.is_retriable(), "{fault:?}: rejoin, not retry: {err}");
                assert!(
                    text.contains("hostile-group") && text.contains("hostile-0"),
                    "{fault:?}: names the group and partition: {text}"
                );
            }
            Some(f) => assert_frame_error(&f, &err, "OffsetCommit"),
            None => unreachable!(),
        }
    }
}

#[tokio::test]
async fn group_commit_fails_typed_on_hostile_find_coordinator() {
    for fault in [Fault::Malformed, Fault::Silent, Fault::ErrorCode(15)] {
        let b = HostileBroker::with(ApiKey::FindCoordinator, fault.clone()).await;
        let err = commit_as_group_member(&b)
            .await
            .expect_err(&format!("{fault:?}: commit must fail"));
        let text = err.to_string();
        assert!(
            text.contains("FindCoordinator"),
            "{fault:?}: names the API: {text}"
        );
        match fault {
            // Retried (a coordinator may be loading) until the API timeout.
            Fault::Silent | Fault::ErrorCode(_) => {
                assert!(matches!(&err, Error::Timeout { .. }), "{fault:?}: {err:?}");
                assert!(
                    text.contains("hostile-group") && text.contains("default.api.timeout.ms"),
                    "{fault:?}: names the group and the bound: {text}"
                );
                assert!(err.is_retriable(), "{fault:?}: {err}");
                if let Fault::ErrorCode(_) = fault {
                    assert!(
                        text.contains("last error")
                            && text.contains("CoordinatorNotAvailable (15)")
                            && text.contains("127.0.0.1"),
                        "{fault:?}: names the last code and the broker that said it: {text}"
                    );
                }
            }
            _ => assert_frame_error(&fault, &err, "FindCoordinator"),
        }
    }
}

#[tokio::test]
async fn admin_calls_fail_typed_on_every_frame_fault() {
    for fault in frame_faults() {
        let b = HostileBroker::start().await;
        let admin = bounded("admin", Admin::connect(client(&b).build().unwrap()))
            .await
            .expect("admin");
        b.script(ApiKey::CreateTopics, fault.clone());
        b.script(ApiKey::DescribeCluster, fault.clone());
        let err = bounded(
            "create_topics",
            admin.create_topics(&[NewTopic::new("hostile-new", 1)], false),
        )
        .await
        .expect_err(&format!("{fault:?}: create_topics must fail"));
        assert_frame_error(&fault, &err, "CreateTopics");
        let err = bounded("describe_cluster", admin.describe_cluster())
            .await
            .expect_err(&format!("{fault:?}: describe_cluster must fail"));
        assert_frame_error(&fault, &err, "DescribeCluster");
    }
}

#[tokio::test]
async fn admin_surfaces_broker_error_codes_typed() {
    let b = HostileBroker::with(ApiKey::CreateTopics, Fault::ErrorCode(36)).await; // TOPIC_ALREADY_EXISTS
    let admin = Admin::connect(client(&b).build().unwrap()).await.unwrap();
    let res = bounded(
        "create_topics",
        admin.create_topics(&[NewTopic::new("hostile-new", 1)], false),
    )
    .await;
    let per_topic_err = res
        .expect("a per-topic error, not a failed call")
        .into_iter()
        .find_map(|(_, r)| r.err())
        .expect("the topic's error code surfaces");
    assert!(
        matches!(&per_topic_err, Error::Kafka { code, .. } if code.code() == 36),
        "{per_topic_err:?}"
    );
    assert!(
        per_topic_err.to_string().contains("hostile-new"),
        "names the topic: {per_topic_err}"
    );
}

fn sasl_client(b: &HostileBroker) -> purekafka::ClientConfig {
    client(b)
        .security_protocol(SecurityProtocol::SaslPlaintext)
        .sasl_mechanism(SaslMechanism::Plain)
        .sasl_credentials("hostile-user", "hostile-password")
        .build()
        .unwrap()
}

#[tokio::test]
async fn sasl_faults_fail_connect_typed() {
    // Control: the fake accepts PLAIN when nothing is scripted.
    let b = HostileBroker::start().await;
    bounded("connect", Cluster::connect(sasl_client(&b)))
        .await
        .expect("honest SASL PLAIN authenticates");
    for (api, refusal) in [
        (ApiKey::SaslHandshake, 33),    // UNSUPPORTED_SASL_MECHANISM
        (ApiKey::SaslAuthenticate, 58), // SASL_AUTHENTICATION_FAILED
    ] {
        let mut faults = frame_faults();
        faults.push(Fault::ErrorCode(refusal));
        for fault in faults {
            let b = HostileBroker::with(api, fault.clone()).await;
            let err = bounded("connect", Cluster::connect(sasl_client(&b)))
                .await
                .expect_err(&format!("{api:?} {fault:?}: connect must fail"));
            eprintln!("{api:?} {fault:?}: {err}");
            let inner = match &err {
                Error::NoBrokerAvailable { last, .. } => last.as_ref(),
                other => other,
            };
            assert!(!matches!(inner, Error::Config { .. }), "{fault:?}: {err:?}");
            assert!(
                err.to_string().contains("127.0.0.1"),
                "{api:?} {fault:?}: names the broker: {err}"
            );
            if let Fault::ErrorCode(_) = fault {
                assert!(
                    matches!(inner, Error::Authentication { mechanism, .. } if mechanism == "PLAIN"),
                    "{api:?} {fault:?}: {err:?}"
                );
                assert!(!err.is_retriable(), "{api:?} {fault:?}: {err}");
            } else {
                assert_frame_error(&fault, inner, &format!("{api:?}"));
            }
        }
    }
}

async fn transactional_producer(b: &HostileBroker) -> purekafka::Result<Producer> {
    Producer::connect(
        ProducerConfig::builder()
            .client(client(b))
            .transactional_id("hostile-txn")
            .linger(Duration::ZERO)
            .delivery_timeout(API_TIMEOUT)
            .max_block(API_TIMEOUT)
            .build()
            .unwrap(),
    )
    .await
}

/// One transaction: a record, consumed offsets for a group, commit.
async fn one_transaction(p: &Producer) -> purekafka::Result<()> {
    p.begin_transaction()?;
    let delivery = p
        .send(ProducerRecord::new("hostile").partition(0).value("v"))
        .await?;
    let offsets = [(
        TopicPartition::new("hostile", 0),
        purekafka::consumer::OffsetAndMetadata::new(1),
    )]
    .into_iter()
    .collect();
    let group = ConsumerGroupMetadata {
        group_id: "hostile-group".into(),
        generation_id: 1,
        member_id: "hostile-member".into(),
        group_instance_id: None,
    };
    p.send_offsets_to_transaction(&offsets, &group).await?;
    p.commit_transaction().await?;
    delivery.await.map(drop)
}

#[tokio::test]
async fn transactions_fail_typed_on_hostile_transaction_apis() {
    // Control: the fake's honest answers commit a transaction.
    let b = HostileBroker::start().await;
    let p = bounded("producer", transactional_producer(&b))
        .await
        .expect("producer");
    bounded("init", p.init_transactions()).await.expect("init");
    bounded("transaction", one_transaction(&p))
        .await
        .expect("honest transaction commits");
    let _ = bounded("close", p.close(Duration::from_millis(500))).await;
    for api in [
        ApiKey::AddPartitionsToTxn,
        ApiKey::TxnOffsetCommit,
        ApiKey::EndTxn,
    ] {
        let mut faults = frame_faults();
        faults.push(Fault::ErrorCode(48)); // INVALID_TXN_STATE
        for fault in faults {
            let b = HostileBroker::start().await;
            let p = bounded("producer", transactional_producer(&b))
                .await
                .expect("producer");
            bounded("init", p.init_transactions()).await.expect("init");
            b.script(api, fault.clone());
            let err = bounded("transaction", one_transaction(&p))
                .await
                .expect_err(&format!("{api:?} {fault:?}: the transaction must fail"));
            // A lost or unanswered request, or any broken EndTxn answer,
            // leaves the outcome unknown; EndTxn refused as
            // INVALID_TXN_STATE is fatal (as in Java); a refused or broken
            // answer to the other APIs means the transaction cannot commit.
            let want = match (&fault, api) {
                (Fault::ErrorCode(48), ApiKey::EndTxn) => TxnErrorKind::Fatal,
                (Fault::ErrorCode(48), _) => TxnErrorKind::Abortable,
                (Fault::Truncated | Fault::Silent, _) | (_, ApiKey::EndTxn) => {
                    TxnErrorKind::Indefinite
                }
                _ => TxnErrorKind::Abortable,
            };
            let Error::Transaction {
                transactional_id,
                kind,
                cause,
            } = &err
            else {
                panic!("{api:?} {fault:?}: a transaction error saying what to do: {err:?}");
            };
            assert_eq!(*kind, want, "{api:?} {fault:?}: {err}");
            assert_eq!(transactional_id, "hostile-txn");
            assert!(
                err.to_string().contains(&format!("{api:?}")),
                "{api:?} {fault:?}: names the API: {err}"
            );
            match &fault {
                Fault::ErrorCode(48) => assert!(
                    matches!(cause.as_ref(), Error::Kafka { code, .. } if code.code() == 48),
                    "{api:?}: {cause:?}"
                ),
                f => assert_frame_error(f, cause, &format!("{api:?}")),
            }
            let _ = bounded("close", p.close(Duration::from_millis(500))).await;
        }
    }
}

async fn group_consumer(b: &HostileBroker) -> Consumer {
    let c = connect_consumer(
        b,
        ConsumerConfig::builder()
            .group_id("hostile-group")
            .enable_auto_commit(false)
            .heartbeat_interval(Duration::from_millis(200))
            .fetch_max_wait(Duration::from_millis(100)),
    )
    .await;
    c.subscribe(["hostile"]).expect("subscribe");
    c
}

/// Polls for `within`; returns the first error, and whether the consumer
/// was assigned `hostile-0` at any point.
async fn poll_group(c: &Consumer, within: Duration) -> (Option<Error>, bool) {
    let deadline = tokio::time::Instant::now() + within;
    let mut assigned = false;
    while tokio::time::Instant::now() < deadline {
        let res = bounded("poll", c.poll(Duration::from_millis(300))).await;
        assigned |= !c.assignment().is_empty();
        match res {
            Err(e) => return (Some(e), assigned),
            Ok(records) => assert!(records.is_empty(), "hostile fetch produced records"),
        }
    }
    (None, assigned)
}

#[tokio::test]
async fn subscribe_stays_bounded_on_hostile_group_apis() {
    // Control: the fake's one-member group assigns hostile-0.
    let b = HostileBroker::start().await;
    let c = bounded("consumer", group_consumer(&b)).await;
    let (err, assigned) = poll_group(&c, API_TIMEOUT).await;
    assert!(
        err.is_none() && assigned,
        "honest group: {err:?}, assigned {assigned}"
    );
    let _ = bounded("close", c.close()).await;
    for api in [ApiKey::JoinGroup, ApiKey::SyncGroup, ApiKey::Heartbeat] {
        let mut faults = frame_faults();
        faults.push(Fault::ErrorCode(30)); // GROUP_AUTHORIZATION_FAILED: fatal
        for fault in faults {
            let b = HostileBroker::with(api, fault.clone()).await;
            let c = bounded("consumer", group_consumer(&b)).await;
            let (err, assigned) = poll_group(&c, API_TIMEOUT).await;
            // A broken join or sync never yields an assignment; a broken
            // heartbeat comes after the honest one.
            assert_eq!(assigned, api == ApiKey::Heartbeat, "{api:?} {fault:?}");
            match (&fault, &err) {
                (Fault::ErrorCode(_), Some(e)) => {
                    assert!(
                        matches!(e, Error::Kafka { code, .. } if code.code() == 30),
                        "{api:?} {fault:?}: {e:?}"
                    );
                    let text = e.to_string();
                    for part in [
                        format!("{api:?}"),
                        "hostile-group".into(),
                        "generation".into(),
                        "coordinator".into(),
                    ] {
                        assert!(
                            text.contains(&part),
                            "{api:?} {fault:?}: names {part}: {text}"
                        );
                    }
                }
                // Retried in the background: polls stay empty.
                (Fault::Truncated | Fault::Silent, e) => {
                    assert!(e.is_none(), "{api:?} {fault:?}: {e:?}")
                }
                (f, Some(e)) => assert_frame_error(f, e, &format!("{api:?} v")),
                (f, None) => panic!("{api:?} {f:?}: poll must report the broken answer"),
            }
            let _ = bounded("close", c.close()).await;
        }
    }
}

/// A leader that answers every ListOffsets with NOT_LEADER_OR_FOLLOWER is
/// retried until `default.api.timeout.ms`, and the timeout names the last
/// error: the code, the partition and the broker that said it.
#[tokio::test]
async fn list_offsets_timeout_names_the_last_error() {
    let b = HostileBroker::with(ApiKey::ListOffsets, Fault::ErrorCode(6)).await;
    let consumer = connect_consumer(&b, ConsumerConfig::builder()).await;
    let tp = TopicPartition::new("hostile", 0);
    let err = bounded(
        "end_offsets",
        consumer.end_offsets(std::slice::from_ref(&tp)),
    )
    .await
    .expect_err("a leader that always refuses cannot answer");
    let text = err.to_string();
    assert!(matches!(&err, Error::Timeout { .. }), "{err:?}");
    assert!(err.is_retriable(), "{err}");
    assert!(
        text.contains("ListOffsets") && text.contains("default.api.timeout.ms"),
        "names the API and the bound: {text}"
    );
    assert!(
        text.contains("last error")
            && text.contains("NotLeaderOrFollower (6)")
            && text.contains("hostile-0")
            && text.contains("127.0.0.1"),
        "names the last code, the partition and the broker: {text}"
    );
}
