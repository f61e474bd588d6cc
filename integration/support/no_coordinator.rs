//! A fake single-broker cluster whose group coordinator never becomes
//! available: it answers ApiVersions and Metadata (itself as broker 0, no
//! topics) correctly, and every FindCoordinator with
//! COORDINATOR_NOT_AVAILABLE.

use bytes::{BufMut, BytesMut};
use kafka_protocol::messages::api_versions_response::ApiVersion;
use kafka_protocol::messages::find_coordinator_response::Coordinator;
use kafka_protocol::messages::metadata_response::MetadataResponseBroker;
use kafka_protocol::messages::{
    ApiVersionsResponse, BrokerId, FindCoordinatorResponse, MetadataResponse, ResponseHeader,
};
use kafka_protocol::protocol::{Encodable, HeaderVersion, StrBytes};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const COORDINATOR_NOT_AVAILABLE: i16 = 15;

/// Starts the fake; returns its port.
pub async fn start() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind fake");
    let port = listener.local_addr().expect("addr").port();
    tokio::spawn(async move {
        while let Ok((sock, _)) = listener.accept().await {
            tokio::spawn(serve(sock, port));
        }
    });
    port
}

fn frame<R: Encodable + HeaderVersion>(corr: i32, version: i16, resp: &R) -> BytesMut {
    let mut body = BytesMut::new();
    ResponseHeader::default()
        .with_correlation_id(corr)
        .encode(&mut body, R::header_version(version))
        .expect("header");
    resp.encode(&mut body, version).expect("body");
    let mut out = BytesMut::new();
    out.put_i32(body.len() as i32);
    out.put_slice(&body);
    out
}

async fn serve(mut sock: TcpStream, port: u16) {
    loop {
        let Ok(size) = sock.read_i32().await else {
            return;
        };
        let mut req = vec![0u8; usize::try_from(size).unwrap_or(0).min(1 << 20)];
        if sock.read_exact(&mut req).await.is_err() || req.len() < 8 {
            return;
        }
        let key = i16::from_be_bytes([req[0], req[1]]);
        let version = i16::from_be_bytes([req[2], req[3]]);
        let corr = i32::from_be_bytes([req[4], req[5], req[6], req[7]]);
        let out = match key {
            18 => {
                let api = |k: i16, max: i16| {
                    ApiVersion::default()
                        .with_api_key(k)
                        .with_min_version(0)
                        .with_max_version(max)
                };
                // ApiVersions responses always use header v0.
                let resp = ApiVersionsResponse::default().with_api_keys(vec![
                    api(18, 3),
                    api(3, 12),
                    api(10, 6),
                ]);
                let mut body = BytesMut::new();
                ResponseHeader::default()
                    .with_correlation_id(corr)
                    .encode(&mut body, 0)
                    .expect("header");
                resp.encode(&mut body, version.min(3)).expect("body");
                let mut out = BytesMut::new();
                out.put_i32(body.len() as i32);
                out.put_slice(&body);
                out
            }
            3 => frame(
                corr,
                version,
                &MetadataResponse::default()
                    .with_cluster_id(Some(StrBytes::from_static_str("fake")))
                    .with_controller_id(BrokerId(0))
                    .with_brokers(vec![MetadataResponseBroker::default()
                        .with_node_id(BrokerId(0))
                        .with_host(StrBytes::from_static_str("127.0.0.1"))
                        .with_port(i32::from(port))]),
            ),
            10 => {
                let resp = if version >= 4 {
                    FindCoordinatorResponse::default().with_coordinators(vec![
                        Coordinator::default()
                            .with_node_id(BrokerId(-1))
                            .with_port(-1)
                            .with_error_code(COORDINATOR_NOT_AVAILABLE),
                    ])
                } else {
                    FindCoordinatorResponse::default()
                        .with_node_id(BrokerId(-1))
                        .with_port(-1)
                        .with_error_code(COORDINATOR_NOT_AVAILABLE)
                };
                frame(corr, version, &resp)
            }
            _ => return,
        };
        if sock.write_all(&out).await.is_err() {
            return;
        }
    }
}
