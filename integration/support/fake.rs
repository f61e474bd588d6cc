//! A scripted fake broker on loopback: answers the ApiVersions handshake
//! correctly, then answers the next request with a chosen fault.

use bytes::{BufMut, BytesMut};
use kafka_protocol::messages::api_versions_response::ApiVersion;
use kafka_protocol::messages::{ApiVersionsResponse, ResponseHeader};
use kafka_protocol::protocol::Encodable;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// What the fake does with the first request after the handshake.
#[derive(Clone)]
pub enum Fault {
    /// A well-sized frame holding bytes that do not decode.
    Garbage,
    /// A frame whose correlation id is not the pending request's.
    WrongCorrelation,
    /// A size prefix larger than any allowed response.
    Oversized,
    /// A negative size prefix.
    NegativeSize,
    /// Half a frame, then close.
    Truncated,
    /// Read the request and never answer.
    Silent,
}

/// Starts the fake; returns its port. Serves connections until the test ends.
pub async fn start(fault: Fault) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind fake");
    let port = listener.local_addr().expect("addr").port();
    tokio::spawn(async move {
        while let Ok((sock, _)) = listener.accept().await {
            tokio::spawn(serve(sock, fault.clone()));
        }
    });
    port
}

async fn read_frame(sock: &mut TcpStream) -> Option<Vec<u8>> {
    let size = sock.read_i32().await.ok()?;
    let mut buf = vec![0u8; usize::try_from(size).ok()?.min(1 << 20)];
    sock.read_exact(&mut buf).await.ok()?;
    Some(buf)
}

fn correlation(frame: &[u8]) -> i32 {
    i32::from_be_bytes([frame[4], frame[5], frame[6], frame[7]])
}

async fn serve(mut sock: TcpStream, fault: Fault) {
    let Some(req) = read_frame(&mut sock).await else {
        return;
    };
    let version = i16::from_be_bytes([req[2], req[3]]);
    let resp = ApiVersionsResponse::default().with_api_keys(vec![
        ApiVersion::default()
            .with_api_key(18)
            .with_min_version(0)
            .with_max_version(3),
        ApiVersion::default()
            .with_api_key(3)
            .with_min_version(0)
            .with_max_version(12),
    ]);
    let mut body = BytesMut::new();
    ResponseHeader::default()
        .with_correlation_id(correlation(&req))
        .encode(&mut body, 0)
        .expect("header");
    resp.encode(&mut body, version).expect("body");
    let mut out = BytesMut::new();
    out.put_i32(body.len() as i32);
    out.put_slice(&body);
    if sock.write_all(&out).await.is_err() {
        return;
    }
    let Some(req) = read_frame(&mut sock).await else {
        return;
    };
    let corr = correlation(&req);
    let mut out = BytesMut::new();
    match fault {
        Fault::Garbage => {
            out.put_i32(12);
            out.put_i32(corr);
            out.put_slice(&[0xff; 8]);
        }
        Fault::WrongCorrelation => {
            out.put_i32(8);
            out.put_i32(corr.wrapping_add(1000));
            out.put_slice(&[0; 4]);
        }
        Fault::Oversized => out.put_i32(i32::MAX),
        Fault::NegativeSize => out.put_i32(-5),
        Fault::Truncated => {
            out.put_i32(100);
            out.put_i32(corr);
        }
        Fault::Silent => {
            tokio::time::sleep(std::time::Duration::from_secs(60)).await;
            return;
        }
    }
    let _ = sock.write_all(&out).await;
    // Keep the socket open briefly so the client reads what we wrote.
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
}
