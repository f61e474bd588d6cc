//! Connection faults: a broker that dies or hangs mid-request, and hostile
//! frames from a fake broker. Every case must end in a typed error within the
//! request timeout: no hang, no panic.

use std::time::{Duration, Instant};

use kafka_protocol::messages::MetadataRequest;
use purekafka::net::{BrokerAddr, Connection, ConnectionConfig};
use purekafka::protocol::versions::Versions;
use purekafka::protocol::ProtocolError;
use purekafka::Error;

use crate::support::{self, fake, proxy::Proxy};

const METADATA: Versions = Versions::new(1, 12);

fn conn_config(request_timeout: Duration) -> ConnectionConfig {
    ConnectionConfig {
        client_id: "purekafka-faults".into(),
        request_timeout,
        setup_timeout: Duration::from_secs(5),
        max_response_size: 1 << 20,
        security: Default::default(),
    }
}

async fn connect(port: u16, request_timeout: Duration) -> Connection {
    Connection::connect(
        &BrokerAddr::bootstrap("127.0.0.1", port),
        &conn_config(request_timeout),
    )
    .await
    .expect("handshake with the broker")
}

#[tokio::test]
async fn broker_killed_mid_request_fails_every_pending_request() {
    let Some(bootstrap) = support::bootstrap("broker_killed_mid_request") else {
        return;
    };
    let upstream = bootstrap.split(',').next().unwrap().to_owned();
    let proxy = Proxy::start(&upstream).await;
    let timeout = Duration::from_secs(5);
    let conn = connect(proxy.port, timeout).await;
    // A healthy round trip first: the proxy really reaches the broker.
    let ok = conn
        .send(&MetadataRequest::default(), METADATA)
        .await
        .expect("metadata via proxy");
    assert!(!ok.brokers.is_empty());

    // Responses stop; three requests are pending when the "broker" dies.
    proxy.stall();
    let started = Instant::now();
    let pending: Vec<_> = (0..3)
        .map(|_| {
            let c = conn.clone();
            tokio::spawn(async move { c.send(&MetadataRequest::default(), METADATA).await })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(200)).await;
    proxy.kill();
    for p in pending {
        let err = p.await.expect("no panic").expect_err("request must fail");
        assert!(
            matches!(err, Error::Disconnected { .. } | Error::Io { .. }),
            "typed error, got {err:?}"
        );
        assert!(err.is_retriable(), "a dead connection is retriable: {err}");
        assert!(
            err.to_string().contains("127.0.0.1"),
            "error names the broker: {err}"
        );
    }
    assert!(
        started.elapsed() < timeout,
        "failed before the request timeout"
    );
    assert!(conn.is_closed());
    let err = conn
        .send(&MetadataRequest::default(), METADATA)
        .await
        .expect_err("closed");
    assert!(err.is_retriable());
}

#[tokio::test]
async fn hung_broker_times_out_and_closes_the_connection() {
    let Some(bootstrap) = support::bootstrap("hung_broker_times_out") else {
        return;
    };
    let upstream = bootstrap.split(',').next().unwrap().to_owned();
    let proxy = Proxy::start(&upstream).await;
    let timeout = Duration::from_millis(800);
    let conn = connect(proxy.port, timeout).await;
    proxy.stall();
    let err = conn
        .send(&MetadataRequest::default(), METADATA)
        .await
        .expect_err("no answer must time out");
    match &err {
        Error::Timeout {
            config_key, after, ..
        } => {
            assert_eq!(*config_key, "request.timeout.ms");
            assert_eq!(*after, timeout);
        }
        other => panic!("expected Timeout, got {other:?}"),
    }
    assert!(err.is_retriable());
    // The connection is torn down so that nothing later matches a stale response.
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(conn.is_closed());
}

async fn fault_error(fault: fake::Fault) -> Error {
    let port = fake::start(fault).await;
    let conn = connect(port, Duration::from_secs(2)).await;
    let started = Instant::now();
    let err = conn
        .send(&MetadataRequest::default(), METADATA)
        .await
        .expect_err("a hostile answer must be an error");
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "bounded by the request timeout"
    );
    err
}

#[tokio::test]
async fn garbage_response_is_a_protocol_error() {
    let err = fault_error(fake::Fault::Garbage).await;
    assert!(matches!(err, Error::Protocol { .. }), "{err:?}");
    assert!(
        err.to_string().contains("Metadata v12"),
        "names the API: {err}"
    );
    assert!(!err.is_retriable());
}

#[tokio::test]
async fn wrong_correlation_id_is_detected() {
    let err = fault_error(fake::Fault::WrongCorrelation).await;
    match err {
        Error::Protocol {
            source: ProtocolError::Invalid { what, .. },
            ..
        } => assert_eq!(what, "correlation id"),
        other => panic!("expected a correlation id error, got {other:?}"),
    }
}

#[tokio::test]
async fn oversized_frame_is_refused_without_allocating_it() {
    let err = fault_error(fake::Fault::Oversized).await;
    assert!(
        matches!(err, Error::Protocol { source: ProtocolError::TooLarge { limit, .. }, .. } if limit == 1 << 20),
        "{err:?}"
    );
}

#[tokio::test]
async fn negative_frame_size_is_refused() {
    let err = fault_error(fake::Fault::NegativeSize).await;
    assert!(
        matches!(
            err,
            Error::Protocol {
                source: ProtocolError::Invalid { .. },
                ..
            }
        ),
        "{err:?}"
    );
}

#[tokio::test]
async fn truncated_frame_then_close_is_a_disconnect() {
    let err = fault_error(fake::Fault::Truncated).await;
    assert!(matches!(err, Error::Disconnected { .. }), "{err:?}");
    assert!(err.is_retriable());
}

#[tokio::test]
async fn silent_broker_times_out() {
    let err = fault_error(fake::Fault::Silent).await;
    assert!(matches!(err, Error::Timeout { .. }), "{err:?}");
}
