//! One broker connection, owned by one task.
//!
//! Callers hand `(request, oneshot)` pairs to the task over a bounded channel.
//! The task assigns correlation ids, writes whole frames, and matches
//! responses FIFO: Kafka answers in request order on a connection
//! (<https://kafka.apache.org/protocol#protocol_network>), so the response at
//! the head must carry the correlation id of the oldest pending request, and
//! any other id means the stream cannot be trusted.
//!
//! Because only the task writes, a caller that drops its future can never
//! leave half a frame on the socket. When the connection breaks (I/O error,
//! EOF, undecodable frame, request timeout) every pending and queued request
//! fails with a typed, retriable error and the task ends; the pool dials
//! again on next use.
//!
//! Setup, bounded as a whole by `socket.connection.setup.timeout.ms`: TCP
//! connect, the TLS handshake (`SSL`, `SASL_SSL`; module `tls`),
//! ApiVersions, then, with the task already running, the SASL exchange
//! (`SASL_*`; see [`super::sasl`]). Only an authenticated connection is
//! handed to callers. A SASL session with a lifetime (KIP-368) makes the task
//! stop taking requests shortly before it expires, drain what is in flight
//! and close, so the pool dials a fresh, re-authenticated connection.
//!
//! - `handshake`: TLS and ApiVersions before the task takes the socket;
//! - `task`: the connection task and its read loop.

mod handshake;
mod task;

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::protocol::{Request, StrBytes};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;
use tracing::{debug, Instrument};

use handshake::{handshake, secure};
use task::{ConnectionTask, Outgoing, Transport};

use super::security::SecurityConfig;
use crate::error::{BrokerRef, Error, Origin, Result};
use crate::protocol::frame::{self, RequestBody};
use crate::protocol::versions::{ApiVersionTable, Versions};

/// Requests queued to one connection before `send` waits (backpressure).
const QUEUE_DEPTH: usize = 64;
/// Requests written but not yet answered on one connection.
const MAX_PENDING: usize = 64;
/// Highest ApiVersions version this client sends (KIP-511 fields at v3).
const API_VERSIONS_VERSION: i16 = 3;

/// How to reach a broker and how to label it in errors and logs.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct BrokerAddr {
    /// Node id from metadata; `None` for a bootstrap address.
    pub id: Option<i32>,
    /// Host name or address.
    pub host: String,
    /// TCP port.
    pub port: u16,
}

impl BrokerAddr {
    /// A bootstrap address (no node id yet).
    pub fn bootstrap(host: impl Into<String>, port: u16) -> BrokerAddr {
        BrokerAddr {
            id: None,
            host: host.into(),
            port,
        }
    }
}

impl From<&BrokerAddr> for BrokerRef {
    fn from(addr: &BrokerAddr) -> BrokerRef {
        BrokerRef::new(addr.id, Some(format!("{}:{}", addr.host, addr.port)))
    }
}

impl From<&BrokerAddr> for Origin {
    fn from(addr: &BrokerAddr) -> Origin {
        Origin::Broker(addr.into())
    }
}

impl std::fmt::Display for BrokerAddr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.id {
            Some(id) => write!(f, "broker {id} ({}:{})", self.host, self.port),
            None => write!(f, "bootstrap {}:{}", self.host, self.port),
        }
    }
}

/// Per-connection settings. The net layer does not know the client config:
/// `ConnectionConfig::from_client` (in `config.rs`) builds one from it.
#[derive(Debug, Clone)]
pub struct ConnectionConfig {
    /// `client.id` sent in every request header.
    pub client_id: String,
    /// `request.timeout.ms`.
    pub request_timeout: Duration,
    /// `socket.connection.setup.timeout.ms`.
    pub setup_timeout: Duration,
    /// Largest response frame accepted.
    pub max_response_size: usize,
    /// `security.protocol` and its TLS and SASL settings.
    pub security: SecurityConfig,
}

/// A handle to a live connection. Cheap to clone; the task ends when every
/// handle is dropped or the connection breaks.
#[derive(Clone)]
pub struct Connection {
    broker: Arc<str>,
    origin: Origin,
    tx: mpsc::Sender<Outgoing>,
    versions: Arc<ApiVersionTable>,
    request_timeout: Duration,
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection")
            .field("broker", &self.broker)
            .field("open", &!self.tx.is_closed())
            .finish()
    }
}

impl Connection {
    /// Dials `addr`, secures the connection as configured (TLS, SASL),
    /// negotiates API versions and starts the connection task. Bounded by
    /// `socket.connection.setup.timeout.ms` as a whole. A connection made
    /// this way counts into no client's connection metrics (a client's
    /// connections count into its own).
    pub async fn connect(addr: &BrokerAddr, cfg: &ConnectionConfig) -> Result<Connection> {
        Self::connect_counted(addr, cfg, Arc::default()).await
    }

    /// [`connect`](Self::connect), counting into `metrics` (the owning
    /// client's connection counters).
    pub(crate) async fn connect_counted(
        addr: &BrokerAddr,
        cfg: &ConnectionConfig,
        metrics: Arc<super::metrics::ConnectionMetrics>,
    ) -> Result<Connection> {
        tokio::time::timeout(cfg.setup_timeout, Self::setup(addr, cfg, metrics))
            .await
            .map_err(|_| Error::Timeout {
                broker: addr.into(),
                api: format!(
                    "connection setup (TCP connect, ApiVersions, security.protocol={})",
                    cfg.security.protocol
                ),
                after: cfg.setup_timeout,
                config_key: "socket.connection.setup.timeout.ms",
            })?
    }

    async fn setup(
        addr: &BrokerAddr,
        cfg: &ConnectionConfig,
        metrics: Arc<super::metrics::ConnectionMetrics>,
    ) -> Result<Connection> {
        let label: Origin = addr.into();
        let tcp = TcpStream::connect((addr.host.as_str(), addr.port))
            .await
            .map_err(|e| io_err(&label, "connect", e))?;
        tcp.set_nodelay(true)
            .map_err(|e| io_err(&label, "connect", e))?;
        let mut transport = if cfg.security.protocol.uses_tls() {
            secure(tcp, addr, cfg, &label).await?
        } else {
            Transport::Plain(tcp)
        };
        let versions = match &mut transport {
            Transport::Plain(s) => handshake(s, &label, cfg).await?,
            #[cfg(feature = "tls")]
            Transport::Tls(s) => handshake(s.as_mut(), &label, cfg).await?,
        };
        debug!(broker = %label, apis = versions.ranges().len(), protocol = %cfg.security.protocol, "connected");
        metrics.opened();
        let (tx, rx) = mpsc::channel(QUEUE_DEPTH);
        let (session_tx, session_rx) = oneshot::channel();
        let task = ConnectionTask {
            metrics: metrics.clone(),
            broker: label.clone(),
            client_id: StrBytes::from_string(cfg.client_id.clone()),
            request_timeout: cfg.request_timeout,
            max_response_size: cfg.max_response_size,
            next_correlation_id: 1,
        };
        let span = tracing::debug_span!("connection", broker = %label);
        match transport {
            Transport::Plain(s) => {
                let (r, w) = s.into_split();
                tokio::spawn(task.run(r, w, rx, session_rx).instrument(span));
            }
            #[cfg(feature = "tls")]
            Transport::Tls(s) => {
                let (r, w) = tokio::io::split(*s);
                tokio::spawn(task.run(r, w, rx, session_rx).instrument(span));
            }
        }
        let conn = Connection {
            broker: label.to_string().into(),
            origin: label,
            tx,
            versions: Arc::new(versions),
            request_timeout: cfg.request_timeout,
        };
        if cfg.security.protocol.uses_sasl() {
            // Nothing else is sent on this connection until it is returned,
            // so the exchange has the socket to itself.
            let auth = super::sasl::authenticate(&conn, &cfg.security.sasl).await;
            metrics.authenticated(auth.is_ok());
            if let Some(lifetime) = auth? {
                let after = super::sasl::reauth_after(lifetime);
                debug!(broker = %conn.broker, ?lifetime, ?after, "SASL session expires; closing before then (KIP-368)");
                let _ = session_tx.send(Instant::now() + after);
            }
        } else {
            metrics.authenticated(true);
        }
        Ok(conn)
    }

    /// The broker label used in errors (`broker 1 (host:port)`).
    pub fn broker(&self) -> &str {
        &self.broker
    }

    /// The broker as errors name it: its node id and address.
    pub fn origin(&self) -> &Origin {
        &self.origin
    }

    /// Whether the connection task has ended.
    pub fn is_closed(&self) -> bool {
        self.tx.is_closed()
    }

    /// The API versions the broker advertised.
    pub fn api_versions(&self) -> &ApiVersionTable {
        &self.versions
    }

    /// The highest version of `R` in both `client` and the broker's range.
    pub fn version_for<R: Request>(&self, client: Versions) -> Result<i16> {
        let crate_range = Versions::new(
            client.min.max(R::VERSIONS.min),
            client.max.min(R::VERSIONS.max),
        );
        self.versions
            .pick(R::KEY, crate_range)
            .map_err(|m| Error::UnsupportedVersion {
                broker: self.origin.clone(),
                api: m.api.to_string(),
                client_min: m.client.min,
                client_max: m.client.max,
                broker_min: m.broker.map_or(-1, |b| b.min),
                broker_max: m.broker.map_or(-1, |b| b.max),
            })
    }

    /// Sends `req` at the highest common version in `client` and decodes the answer.
    pub async fn send<R: Request>(&self, req: &R, client: Versions) -> Result<R::Response> {
        let version = self.version_for::<R>(client)?;
        self.send_at(req, version).await
    }

    /// Sends `req` at `version` (already negotiated) and decodes the answer.
    pub async fn send_at<R: Request>(&self, req: &R, version: i16) -> Result<R::Response> {
        self.send_at_with_timeout(req, version, self.request_timeout)
            .await
    }

    /// Like [`send_at`](Self::send_at) with a response timeout of its own,
    /// for APIs the broker may hold longer than `request.timeout.ms`
    /// (JoinGroup waits up to the rebalance timeout).
    pub async fn send_at_with_timeout<R: Request>(
        &self,
        req: &R,
        version: i16,
        timeout: Duration,
    ) -> Result<R::Response> {
        let frame = self.round_trip::<R>(req, version, timeout).await?;
        frame::decode_response::<R>(frame, version).map_err(|source| Error::Protocol {
            broker: self.origin.clone(),
            api: format!("{} v{version}", frame::api_name(R::KEY)),
            source,
        })
    }

    /// Sends a request of type `R`, already encoded as `body` (see
    /// [`frame::encode_produce`]), that gets no response (Produce with
    /// acks=0). Returns once the frame is queued for writing.
    pub async fn send_no_response<R: Request>(
        &self,
        body: RequestBody,
        version: i16,
    ) -> Result<()> {
        let out = Outgoing {
            api_key: R::KEY,
            version,
            body,
            timeout: self.request_timeout,
            reply: None,
        };
        self.tx.send(out).await.map_err(|_| self.closed(R::KEY))
    }

    /// Queues `req` for writing and returns its response to await later.
    ///
    /// Requests queued by one task are written in the order of these calls,
    /// so a caller can pipeline requests whose order matters (idempotent
    /// Produce) and await their responses elsewhere.
    pub async fn enqueue<R: Request>(&self, req: &R, version: i16) -> Result<PendingResponse<R>> {
        let body = self.encode::<R>(req, version)?;
        self.enqueue_encoded(body, version).await
    }

    /// [`enqueue`](Self::enqueue) for a request of type `R` already encoded
    /// as `body`: a Produce request whose record batches are chunks of
    /// their own ([`frame::encode_produce`]) reaches the socket without
    /// being copied into a frame.
    pub async fn enqueue_encoded<R: Request>(
        &self,
        body: RequestBody,
        version: i16,
    ) -> Result<PendingResponse<R>> {
        let (reply, rx) = oneshot::channel();
        let out = Outgoing {
            api_key: R::KEY,
            version,
            body,
            timeout: self.request_timeout,
            reply: Some(reply),
        };
        self.tx.send(out).await.map_err(|_| self.closed(R::KEY))?;
        Ok(PendingResponse {
            rx,
            broker: self.origin.clone(),
            version,
            timeout: self.request_timeout,
            _response: std::marker::PhantomData,
        })
    }

    async fn round_trip<R: Request>(
        &self,
        req: &R,
        version: i16,
        timeout: Duration,
    ) -> Result<Bytes> {
        let body = self.encode::<R>(req, version)?;
        let (reply, rx) = oneshot::channel();
        let out = Outgoing {
            api_key: R::KEY,
            version,
            body,
            timeout,
            reply: Some(reply),
        };
        self.tx.send(out).await.map_err(|_| self.closed(R::KEY))?;
        await_reply(rx, &self.origin, R::KEY, timeout).await
    }

    fn encode<R: Request>(&self, req: &R, version: i16) -> Result<RequestBody> {
        frame::encode_body(req, version)
            .map(RequestBody::from)
            .map_err(|source| Error::Protocol {
                broker: self.origin.clone(),
                api: format!("{} v{version}", frame::api_name(R::KEY)),
                source,
            })
    }

    fn closed(&self, api_key: i16) -> Error {
        Error::Disconnected {
            broker: self.origin.clone(),
            api: Some(frame::api_name(api_key).into()),
            reason: "connection is closed".into(),
        }
    }
}

/// A queued request's response (see [`Connection::enqueue`]).
#[must_use = "the response arrives only if awaited"]
pub struct PendingResponse<R: Request> {
    rx: oneshot::Receiver<Result<Bytes>>,
    broker: Origin,
    version: i16,
    timeout: Duration,
    _response: std::marker::PhantomData<fn() -> R>,
}

impl<R: Request> PendingResponse<R> {
    /// Waits for the response (bounded like [`Connection::send_at`]) and
    /// decodes it.
    pub async fn wait(self) -> Result<R::Response> {
        let frame = await_reply(self.rx, &self.broker, R::KEY, self.timeout).await?;
        frame::decode_response::<R>(frame, self.version).map_err(|source| Error::Protocol {
            broker: self.broker.clone(),
            api: format!("{} v{}", frame::api_name(R::KEY), self.version),
            source,
        })
    }
}

/// Waits for the connection task's reply. The task enforces the timeout
/// from the moment it writes; this outer bound (twice that) also covers time
/// spent queued behind other requests.
async fn await_reply(
    rx: oneshot::Receiver<Result<Bytes>>,
    broker: &Origin,
    api_key: i16,
    timeout: Duration,
) -> Result<Bytes> {
    let bound = timeout.saturating_mul(2);
    match tokio::time::timeout(bound, rx).await {
        Ok(Ok(result)) => result,
        Ok(Err(_)) => Err(Error::Disconnected {
            broker: broker.clone(),
            api: Some(frame::api_name(api_key).into()),
            reason: "connection is closed".into(),
        }),
        Err(_) => Err(Error::Timeout {
            broker: broker.clone(),
            api: frame::api_name(api_key).into(),
            after: bound,
            config_key: "request.timeout.ms",
        }),
    }
}

pub(super) fn io_err(broker: &Origin, op: &'static str, e: std::io::Error) -> Error {
    Error::Io {
        broker: broker.clone(),
        op,
        source: Arc::new(e),
    }
}
