//! Connection setup before the task takes the socket: TLS (`SSL`,
//! `SASL_SSL`) and the ApiVersions exchange (KIP-511), bounded by
//! `socket.connection.setup.timeout.ms` as a whole.

use bytes::BytesMut;
use kafka_protocol::messages::{ApiKey, ApiVersionsRequest, ApiVersionsResponse};
use kafka_protocol::protocol::StrBytes;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

use super::task::Transport;
use super::{io_err, BrokerAddr, ConnectionConfig, API_VERSIONS_VERSION};
use crate::error::{Error, KafkaCode, Origin, Result};
use crate::protocol::frame::{self, RequestMeta};
use crate::protocol::versions::ApiVersionTable;

/// ApiVersions on the fresh socket, before the task takes it over. A broker
/// that does not know our ApiVersions version answers in v0 with
/// UNSUPPORTED_VERSION and its own range (KIP-511); we then retry at v0.
pub(super) async fn handshake<S: AsyncRead + AsyncWrite + Unpin + ?Sized>(
    stream: &mut S,
    label: &Origin,
    cfg: &ConnectionConfig,
) -> Result<ApiVersionTable> {
    let client_id = StrBytes::from_string(cfg.client_id.clone());
    let mut version = API_VERSIONS_VERSION;
    for attempt in 0..2 {
        let req = ApiVersionsRequest::default()
            .with_client_software_name(StrBytes::from_static_str("purekafka"))
            .with_client_software_version(StrBytes::from_static_str(env!("CARGO_PKG_VERSION")));
        let body = frame::encode_body(&req, version).map_err(|source| Error::Protocol {
            broker: label.clone(),
            api: format!("ApiVersions v{version}"),
            source,
        })?;
        let mut out = BytesMut::new();
        let meta = RequestMeta {
            api_key: ApiKey::ApiVersions as i16,
            version,
            correlation_id: attempt,
        };
        frame::encode_request(&mut out, meta, Some(&client_id), &body).map_err(|source| {
            Error::Protocol {
                broker: label.clone(),
                api: "ApiVersions".into(),
                source,
            }
        })?;
        stream
            .write_all(&out)
            .await
            .map_err(|e| io_err(label, "write", e))?;
        let mut buf = BytesMut::with_capacity(4096);
        let frame = loop {
            match frame::split_frame(&mut buf, cfg.max_response_size) {
                Ok(Some(f)) => break f,
                Ok(None) => {}
                Err(source) => {
                    return Err(Error::Protocol {
                        broker: label.clone(),
                        api: "ApiVersions".into(),
                        source,
                    })
                }
            }
            let n = stream
                .read_buf(&mut buf)
                .await
                .map_err(|e| io_err(label, "read", e))?;
            if n == 0 {
                return Err(Error::Disconnected {
                    broker: label.clone(),
                    api: Some("ApiVersions".into()),
                    reason: "broker closed the connection during the handshake (is this a Kafka listener with a matching security protocol?)".into(),
                });
            }
        };
        let protocol = |source| Error::Protocol {
            broker: label.clone(),
            api: format!("ApiVersions v{version}"),
            source,
        };
        let got = frame::peek_correlation_id(&frame).map_err(protocol)?;
        if got != attempt {
            return Err(protocol(crate::protocol::ProtocolError::Invalid {
                what: "correlation id",
                reason: format!("expected {attempt}, got {got}"),
            }));
        }
        // A broker that cannot parse our version answers in v0 (KIP-511); a
        // v0 answer is only accepted as that UNSUPPORTED_VERSION reply.
        let resp: ApiVersionsResponse =
            match frame::decode_response::<ApiVersionsRequest>(frame.clone(), version) {
                Ok(r) => r,
                Err(e) => match frame::decode_response::<ApiVersionsRequest>(frame, 0) {
                    Ok(r) if r.error_code == KafkaCode::UNSUPPORTED_VERSION.code() => r,
                    _ => return Err(protocol(e)),
                },
            };
        if resp.error_code == KafkaCode::UNSUPPORTED_VERSION.code() && version > 0 {
            version = 0;
            continue;
        }
        Error::check(resp.error_code, || format!("{label}: ApiVersions"))?;
        return Ok(ApiVersionTable::from_response(&resp));
    }
    Err(Error::Disconnected {
        broker: label.clone(),
        api: Some("ApiVersions".into()),
        reason: "version negotiation did not converge".into(),
    })
}

#[cfg(feature = "tls")]
pub(super) async fn secure(
    tcp: TcpStream,
    addr: &BrokerAddr,
    cfg: &ConnectionConfig,
    label: &Origin,
) -> Result<Transport> {
    let tls = crate::net::tls::connect(tcp, &addr.host, &cfg.security.tls, label).await?;
    Ok(Transport::Tls(Box::new(tls)))
}

#[cfg(not(feature = "tls"))]
pub(super) async fn secure(
    _tcp: TcpStream,
    _addr: &BrokerAddr,
    cfg: &ConnectionConfig,
    _label: &Origin,
) -> Result<Transport> {
    Err(Error::config(
        "security.protocol",
        format!(
            "{} needs TLS: build purekafka with the `tls` feature",
            cfg.security.protocol
        ),
    ))
}
