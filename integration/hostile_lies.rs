//! The hostile broker's lies (issue #17): answers that are well framed
//! and decode, but say something false or arrive in a hostile way. Fetch
//! answers that rewind or repeat offsets, a slow-drip answer, pipelined
//! answers swapped, and ApiVersions ranges that do not hold. The frame and
//! error-code faults are in `hostile.rs`, whose client settings and bounds
//! these tests share. No real broker needed.

use std::time::Duration;

use kafka_protocol::messages::ApiKey;
use purekafka::protocol::ProtocolError;
use purekafka::{Cluster, ConsumerConfig, Error, TopicPartition};

use crate::hostile::{
    bounded, client, connect_consumer, producer, send_one, API_TIMEOUT, MAX_RESPONSE,
    REQUEST_TIMEOUT,
};
use crate::support::hostile::{Fault, HostileBroker, LEADER_EPOCH, LIE_RECORDS, STALE_EPOCH};

/// Semantic lies in a Fetch answer: a batch that starts below the fetch
/// offset (records already delivered), and the same batch twice. The
/// consumer must hand out each offset once, in order, from its position.
#[tokio::test]
async fn consumer_returns_each_offset_once_from_its_position_when_fetch_answers_lie() {
    for fault in [Fault::Rewound, Fault::Duplicated] {
        let b = HostileBroker::with(ApiKey::Fetch, fault.clone()).await;
        let c = connect_consumer(
            &b,
            ConsumerConfig::builder().fetch_max_wait(Duration::from_millis(100)),
        )
        .await;
        let tp = TopicPartition::new("hostile", 0);
        c.assign(vec![tp.clone()]);
        c.seek(&tp, 5).unwrap();
        let want = 3 * LIE_RECORDS as usize;
        let mut got: Vec<(i64, String)> = Vec::new();
        let deadline = tokio::time::Instant::now() + API_TIMEOUT;
        while got.len() < want && tokio::time::Instant::now() < deadline {
            let records = bounded("poll", c.poll(Duration::from_millis(500)))
                .await
                .unwrap_or_else(|e| panic!("{fault:?}: {e}"));
            for r in records {
                let v =
                    String::from_utf8_lossy(r.value.as_deref().unwrap_or_default()).into_owned();
                got.push((r.offset, v));
            }
        }
        assert!(got.len() >= want, "{fault:?}: only {got:?}");
        for (i, (offset, value)) in got.iter().enumerate() {
            assert_eq!(*offset, 5 + i as i64, "{fault:?}: {got:?}");
            assert_eq!(*value, offset.to_string(), "{fault:?}: {got:?}");
        }
        let _ = bounded("close", c.close()).await;
    }
}

/// A slow-drip broker (one byte per 100 ms) cannot stretch a request past
/// `request.timeout.ms`: the whole answer is bounded, not each read. A
/// drip fast enough to finish in time is reassembled and accepted.
#[tokio::test]
async fn a_slow_drip_answer_times_out_at_the_request_timeout() {
    let b = HostileBroker::start().await;
    let cluster = bounded("connect", Cluster::connect(client(&b).build().unwrap()))
        .await
        .expect("honest bootstrap");
    let topics = ["hostile".to_owned()];
    b.script(ApiKey::Metadata, Fault::SlowDrip(Duration::from_millis(1)));
    let m = bounded("refresh", cluster.refresh_metadata(Some(&topics)))
        .await
        .expect("a drip that ends within the request timeout is an answer");
    assert!(m.topics.contains_key("hostile"), "{m:?}");
    b.script(
        ApiKey::Metadata,
        Fault::SlowDrip(Duration::from_millis(100)),
    );
    let started = tokio::time::Instant::now();
    let err = bounded("refresh", cluster.refresh_metadata(Some(&topics)))
        .await
        .expect_err("a 100 ms drip must time out");
    let err = match err {
        Error::NoBrokerAvailable { last, .. } => *last,
        other => other,
    };
    assert!(
        matches!(&err, Error::Timeout { config_key, .. } if *config_key == "request.timeout.ms")
            || matches!(&err, Error::Timeout { config_key, .. } if *config_key == "default.api.timeout.ms"),
        "{err:?}"
    );
    assert!(err.to_string().contains("Metadata"), "names the API: {err}");
    assert!(
        started.elapsed() <= API_TIMEOUT + REQUEST_TIMEOUT,
        "bounded by the configured timeouts, took {:?}",
        started.elapsed()
    );
}

/// Two pipelined requests whose answers come back swapped: the first
/// answer read carries the second request's correlation id. Both pending
/// requests fail typed (a mismatched answer is never given to the wrong
/// caller) and the connection is closed.
#[tokio::test]
async fn swapped_pipelined_answers_fail_both_requests_typed() {
    use kafka_protocol::messages::MetadataRequest;
    use purekafka::cluster::{BrokerAddr, Connection, ConnectionConfig};
    use purekafka::protocol::versions::Versions;
    let b = HostileBroker::start().await;
    b.script_once(ApiKey::Metadata, Fault::Swapped);
    let conn = Connection::connect(
        &BrokerAddr::bootstrap("127.0.0.1", b.port),
        &ConnectionConfig {
            client_id: "purekafka-hostile".into(),
            request_timeout: REQUEST_TIMEOUT,
            setup_timeout: REQUEST_TIMEOUT,
            max_response_size: MAX_RESPONSE,
            security: Default::default(),
        },
    )
    .await
    .expect("handshake");
    let versions = Versions::new(1, 12);
    let (c1, c2) = (conn.clone(), conn.clone());
    let first = tokio::spawn(async move { c1.send(&MetadataRequest::default(), versions).await });
    // The first request is on the wire before the second.
    while b.count(ApiKey::Metadata) < 1 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let second = tokio::spawn(async move { c2.send(&MetadataRequest::default(), versions).await });
    for (which, task) in [("first", first), ("second", second)] {
        let err = bounded(which, task)
            .await
            .expect("no panic")
            .expect_err("a swapped answer must not be accepted");
        // The first caller sees the mismatch; the second, the connection
        // closed under it (or the same mismatch).
        let mismatch = matches!(
            &err,
            Error::Protocol { source: ProtocolError::Invalid { what, .. }, .. } if *what == "correlation id"
        );
        assert!(
            mismatch || (which == "second" && matches!(&err, Error::Disconnected { .. })),
            "{which}: {err:?}"
        );
        assert!(
            err.to_string().contains("127.0.0.1"),
            "{which}: names the broker: {err}"
        );
    }
    assert!(conn.is_closed(), "the connection is torn down");
}

/// ApiVersions lies: a range past every version that exists, a range the
/// client cannot use, an API left out, and an inverted range.
#[tokio::test]
async fn api_versions_lies_are_negotiated_or_refused_typed() {
    let claim = |api, range| Fault::Claims(vec![(api, range)]);
    // Past what exists: the client picks its own highest version, which
    // the broker serves.
    let b = HostileBroker::with(
        ApiKey::ApiVersions,
        claim(ApiKey::Metadata, Some((0, i16::MAX))),
    )
    .await;
    let cluster = bounded("connect", Cluster::connect(client(&b).build().unwrap()))
        .await
        .expect("a wider claim still negotiates");
    let topics = ["hostile".to_owned()];
    bounded("refresh", cluster.refresh_metadata(Some(&topics)))
        .await
        .expect("metadata at the client's version");
    for (what, range) in [
        ("below the client's range", Some((0, 2))),
        ("left out", None),
        ("inverted", Some((12, 3))),
    ] {
        let b = HostileBroker::with(ApiKey::ApiVersions, claim(ApiKey::Produce, range)).await;
        let res = bounded("producer+send", async {
            let p = producer(&b, false).await?;
            send_one(&p).await
        })
        .await;
        let err = res.expect_err(&format!("Produce {what}: must fail"));
        let (want_min, want_max) = range.unwrap_or((-1, -1));
        assert!(
            matches!(
                &err,
                Error::UnsupportedVersion { api, broker_min, broker_max, .. }
                    if *api == "Produce" && *broker_min == want_min && *broker_max == want_max
            ),
            "Produce {what}: {err:?}"
        );
        let text = err.to_string();
        assert!(text.contains("127.0.0.1"), "names the broker: {text}");
        assert!(!err.is_retriable(), "Produce {what}: {err}");
        assert!(
            text.contains("retrying will not help"),
            "Produce {what}: says a retry cannot help: {text}"
        );
        if range.is_none() {
            assert!(
                text.contains("does not support Produce at all") && !text.contains("-1"),
                "Produce {what}: says the API is missing, not a range: {text}"
            );
        }
        assert_eq!(
            b.count(ApiKey::Produce),
            0,
            "Produce {what}: no request at a version the broker refused"
        );
    }
}

/// A lagging broker's Metadata answer: the partition led by another node
/// at an older leader epoch (KIP-320). The consumer is told its leader's
/// epoch is fenced (FENCED_LEADER_EPOCH, then UNKNOWN_LEADER_EPOCH), so it
/// refreshes metadata and gets the stale answer: it must keep the newer
/// leadership (node 0, epoch 7) and go on fetching from node 0 with epoch
/// 7, without surfacing an error (both codes are retriable).
#[tokio::test]
async fn a_stale_leader_epoch_in_metadata_is_ignored() {
    for fenced in [74, 75] {
        let b = HostileBroker::start().await;
        let c = connect_consumer(
            &b,
            ConsumerConfig::builder().fetch_max_wait(Duration::from_millis(100)),
        )
        .await;
        let tp = TopicPartition::new("hostile", 0);
        c.assign(vec![tp.clone()]);
        c.seek(&tp, 0).unwrap();
        let polls = |c: &purekafka::Consumer, within: Duration| {
            let c = c.clone();
            async move {
                let deadline = tokio::time::Instant::now() + within;
                while tokio::time::Instant::now() < deadline {
                    let r = bounded("poll", c.poll(Duration::from_millis(200))).await;
                    let records = r.unwrap_or_else(|e| panic!("{fenced}: {e:?}"));
                    assert!(records.is_empty(), "{fenced}: the honest fetch is empty");
                }
            }
        };
        polls(&c, Duration::from_millis(600)).await;
        let fetched = b.epochs(ApiKey::Fetch).len();
        assert!(fetched > 0, "{fenced}: the consumer fetches");
        let refreshed = b.count(ApiKey::Metadata);
        b.script(ApiKey::Metadata, Fault::StaleEpoch);
        b.script_once(ApiKey::Fetch, Fault::ErrorCode(fenced));
        polls(&c, Duration::from_millis(1500)).await;
        assert!(
            b.count(ApiKey::Metadata) > refreshed,
            "{fenced}: the fenced epoch made the consumer ask for metadata"
        );
        let epochs = b.epochs(ApiKey::Fetch);
        assert!(
            epochs.len() > fetched + 1,
            "{fenced}: fetching from node 0 goes on after the stale answer: {epochs:?}"
        );
        assert!(
            epochs.iter().all(|e| *e == LEADER_EPOCH),
            "{fenced}: every fetch carries the newest leader epoch, never {STALE_EPOCH}: {epochs:?}"
        );
        let meta = c.cluster().metadata();
        let p = &meta.topics["hostile"].partitions[0];
        assert_eq!(
            (p.leader, p.leader_epoch),
            (0, LEADER_EPOCH),
            "{fenced}: the stale leadership was not taken"
        );
        let _ = bounded("close", c.close()).await;
    }
}

/// A record batch whose records' offsets disagree with its header: the
/// header covers offsets 5..=9, the records claim deltas 0, 0, 3, 1, 9
/// (a repeat, a step back, one past the batch). The CRC is correct, so
/// only the offsets lie. The consumer must refuse the batch as
/// `RecordDecode` naming the partition and the fetch offset, within the
/// bound, and never hand out a repeated or backward offset.
#[tokio::test]
async fn a_batch_whose_records_disagree_with_its_base_offset_is_refused() {
    let b = HostileBroker::with(ApiKey::Fetch, Fault::Misnumbered).await;
    let c = connect_consumer(
        &b,
        ConsumerConfig::builder().fetch_max_wait(Duration::from_millis(100)),
    )
    .await;
    let tp = TopicPartition::new("hostile", 0);
    c.assign(vec![tp.clone()]);
    c.seek(&tp, 5).unwrap();
    let started = tokio::time::Instant::now();
    let mut delivered: Vec<i64> = Vec::new();
    let err = loop {
        assert!(
            started.elapsed() < API_TIMEOUT,
            "no error within {API_TIMEOUT:?}; delivered {} records from {:?}",
            delivered.len(),
            &delivered[..delivered.len().min(12)]
        );
        match bounded("poll", c.poll(Duration::from_millis(300))).await {
            Ok(records) => delivered.extend(records.iter().map(|r| r.offset)),
            Err(e) => break e,
        }
    };
    assert!(
        delivered.is_empty(),
        "no record of a lying batch is handed out: {:?}",
        &delivered[..delivered.len().min(12)]
    );
    assert!(
        matches!(&err, Error::RecordDecode { partition, offset: 5, .. } if *partition == tp),
        "{err:?}"
    );
    assert!(!err.is_retriable(), "{err}");
    let text = err.to_string();
    assert!(
        text.contains("hostile-0") && text.contains("offset"),
        "{text}"
    );
    let _ = bounded("close", c.close()).await;
}

/// ApiVersions that lies the other way: it advertises every version, and
/// the broker then refuses a request at the version the client picked,
/// with UNSUPPORTED_VERSION (35) or by closing the connection on it.
/// - Produce answered with 35: the delivery fails with `Kafka{code: 35}`,
///   not retriable, naming `hostile-0`, within `delivery.timeout.ms`;
/// - Produce closed on: retried as a lost connection until
///   `delivery.timeout.ms`, then `Timeout` naming the bound, the partition
///   and the last error (the broker);
/// - Fetch answered with 35: `poll` reports `Kafka{code: 35}` naming
///   `hostile-0`, not retriable, and never a record;
/// - Metadata closed on: the refresh fails retriable, naming the broker,
///   within `default.api.timeout.ms` + `request.timeout.ms`.
#[tokio::test]
async fn an_api_advertised_then_refused_fails_typed() {
    for fault in [Fault::ErrorCode(35), Fault::Close] {
        let b = HostileBroker::with(ApiKey::Produce, fault.clone()).await;
        let started = tokio::time::Instant::now();
        let res = bounded("producer+send", async {
            let p = producer(&b, false).await?;
            send_one(&p).await
        })
        .await;
        let err = res.expect_err(&format!("Produce {fault:?}: delivery must fail"));
        let text = err.to_string();
        eprintln!("Produce {fault:?}: {err:?}");
        assert!(
            text.contains("hostile-0"),
            "Produce {fault:?}: names the partition: {text}"
        );
        assert!(
            b.count(ApiKey::Produce) >= 1,
            "Produce {fault:?}: the request was sent"
        );
        match fault {
            Fault::ErrorCode(_) => {
                assert!(
                    matches!(&err, Error::Kafka { code, .. } if code.code() == 35),
                    "Produce {fault:?}: {err:?}"
                );
                assert!(!err.is_retriable(), "Produce {fault:?}: {err}");
                assert!(
                    started.elapsed() < API_TIMEOUT,
                    "Produce {fault:?}: refused at once, took {:?}",
                    started.elapsed()
                );
            }
            _ => {
                assert!(
                    matches!(&err, Error::Timeout { .. }),
                    "Produce {fault:?}: {err:?}"
                );
                let last = text
                    .split_once("last error: ")
                    .map(|(_, last)| last)
                    .unwrap_or_else(|| panic!("Produce {fault:?}: names the last error: {text}"));
                assert!(
                    text.contains("delivery.timeout.ms") && last.contains("127.0.0.1"),
                    "Produce {fault:?}: names the bound and the broker: {text}"
                );
            }
        }
    }

    let b = HostileBroker::with(ApiKey::Fetch, Fault::ErrorCode(35)).await;
    let c = connect_consumer(
        &b,
        ConsumerConfig::builder().fetch_max_wait(Duration::from_millis(100)),
    )
    .await;
    let tp = TopicPartition::new("hostile", 0);
    c.assign(vec![tp.clone()]);
    c.seek(&tp, 0).unwrap();
    let started = tokio::time::Instant::now();
    let err = loop {
        assert!(
            started.elapsed() < API_TIMEOUT,
            "Fetch 35: no error within {API_TIMEOUT:?}"
        );
        match bounded("poll", c.poll(Duration::from_millis(200))).await {
            Ok(records) => assert!(records.is_empty(), "Fetch 35: records {records:?}"),
            Err(e) => break e,
        }
    };
    eprintln!("Fetch 35: {err:?}");
    assert!(
        matches!(&err, Error::Kafka { code, .. } if code.code() == 35),
        "Fetch 35: {err:?}"
    );
    assert!(!err.is_retriable(), "Fetch 35: {err}");
    assert!(
        err.to_string().contains("hostile-0"),
        "Fetch 35: names the partition: {err}"
    );
    let _ = bounded("close", c.close()).await;

    let b = HostileBroker::start().await;
    let cluster = bounded("connect", Cluster::connect(client(&b).build().unwrap()))
        .await
        .expect("honest bootstrap");
    b.script(ApiKey::Metadata, Fault::Close);
    let topics = ["hostile".to_owned()];
    let started = tokio::time::Instant::now();
    let err = bounded("refresh", cluster.refresh_metadata(Some(&topics)))
        .await
        .expect_err("Metadata closed on: the refresh must fail");
    let elapsed = started.elapsed();
    let inner = match &err {
        Error::NoBrokerAvailable { last, .. } => last.as_ref(),
        other => other,
    };
    eprintln!("Metadata Close: after {elapsed:?}: {err:?}");
    assert!(inner.is_retriable(), "Metadata Close: {err:?}");
    assert!(
        err.to_string().contains("127.0.0.1"),
        "Metadata Close: names the broker: {err}"
    );
    assert!(
        elapsed <= API_TIMEOUT + REQUEST_TIMEOUT,
        "Metadata Close: bounded, took {elapsed:?}"
    );
}
