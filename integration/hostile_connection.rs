//! One bare `Connection` against the hostile broker: a single Metadata
//! request whose answer breaks the frame must fail typed within the
//! request timeout, and a broken frame leaves the connection closed so no
//! later answer can be matched to the wrong request. (These tests had a
//! fake broker of their own in `net_faults.rs`; they now share
//! `support::hostile`.) No real broker needed.

use std::time::Duration;

use kafka_protocol::messages::{ApiKey, MetadataRequest};
use purekafka::net::{BrokerAddr, Connection, ConnectionConfig};
use purekafka::protocol::versions::Versions;
use purekafka::Error;

use crate::hostile::{assert_frame_error, bounded, frame_faults, MAX_RESPONSE};
use crate::support::hostile::{Fault, HostileBroker};

const METADATA: Versions = Versions::new(1, 12);
const REQUEST_TIMEOUT: Duration = Duration::from_secs(2);

#[tokio::test]
async fn a_connection_fails_typed_on_every_frame_fault() {
    for fault in frame_faults() {
        let b = HostileBroker::with(ApiKey::Metadata, fault.clone()).await;
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
        .expect("the handshake is honest");
        let started = tokio::time::Instant::now();
        let err = bounded("send", conn.send(&MetadataRequest::default(), METADATA))
            .await
            .expect_err(&format!("{fault:?}: a broken answer must be an error"));
        assert!(
            started.elapsed() <= REQUEST_TIMEOUT + Duration::from_millis(500),
            "{fault:?}: bounded by the request timeout, took {:?}",
            started.elapsed()
        );
        // The version the request went out at is named with the API.
        assert_frame_error(&fault, &err, "Metadata v12");
        match fault {
            Fault::Silent => {
                assert!(
                    matches!(&err, Error::Timeout { config_key, after, .. }
                        if *config_key == "request.timeout.ms" && *after == REQUEST_TIMEOUT),
                    "{err:?}"
                );
            }
            Fault::Truncated => assert!(matches!(&err, Error::Disconnected { .. }), "{err:?}"),
            _ => assert!(!err.is_retriable(), "{fault:?}: {err}"),
        }
        // A frame the client cannot delimit or match (or a timeout) closes
        // the connection; a well-delimited body that does not decode
        // (`Malformed`) leaves the stream in step, so it may stay open.
        if !matches!(fault, Fault::Malformed) {
            tokio::time::sleep(Duration::from_millis(50)).await;
            assert!(conn.is_closed(), "{fault:?}: the connection is torn down");
        }
    }
}
