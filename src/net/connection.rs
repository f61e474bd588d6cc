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

use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::{ApiKey, ApiVersionsRequest, ApiVersionsResponse};
use kafka_protocol::protocol::{Request, StrBytes};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;
use tracing::{debug, trace, Instrument};

use super::security::SecurityConfig;
use crate::error::{Error, KafkaCode, Result};
use crate::protocol::frame::{self, RequestMeta};
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

/// The byte stream under a connection.
enum Transport {
    Plain(TcpStream),
    #[cfg(feature = "tls")]
    Tls(Box<tokio_rustls::client::TlsStream<TcpStream>>),
}

struct Outgoing {
    api_key: i16,
    version: i16,
    body: Bytes,
    /// How long the broker may take to answer (`request.timeout.ms` unless
    /// the API waits longer by design, as JoinGroup does).
    timeout: Duration,
    /// `None` for requests the broker does not answer (Produce with acks=0).
    reply: Option<oneshot::Sender<Result<Bytes>>>,
}

struct Pending {
    correlation_id: i32,
    api_key: i16,
    version: i16,
    deadline: Instant,
    timeout: Duration,
    reply: oneshot::Sender<Result<Bytes>>,
}

/// A handle to a live connection. Cheap to clone; the task ends when every
/// handle is dropped or the connection breaks.
#[derive(Clone)]
pub struct Connection {
    broker: Arc<str>,
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
    /// `socket.connection.setup.timeout.ms` as a whole.
    pub async fn connect(addr: &BrokerAddr, cfg: &ConnectionConfig) -> Result<Connection> {
        let label: Arc<str> = addr.to_string().into();
        tokio::time::timeout(cfg.setup_timeout, Self::setup(addr, cfg, label.clone()))
            .await
            .map_err(|_| Error::Timeout {
                broker: label.to_string().into(),
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
        label: Arc<str>,
    ) -> Result<Connection> {
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
        let (tx, rx) = mpsc::channel(QUEUE_DEPTH);
        let (session_tx, session_rx) = oneshot::channel();
        let task = ConnectionTask {
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
            broker: label,
            tx,
            versions: Arc::new(versions),
            request_timeout: cfg.request_timeout,
        };
        if cfg.security.protocol.uses_sasl() {
            // Nothing else is sent on this connection until it is returned,
            // so the exchange has the socket to itself.
            if let Some(lifetime) = super::sasl::authenticate(&conn, &cfg.security.sasl).await? {
                let after = super::sasl::reauth_after(lifetime);
                debug!(broker = %conn.broker, ?lifetime, ?after, "SASL session expires; closing before then (KIP-368)");
                let _ = session_tx.send(Instant::now() + after);
            }
        }
        Ok(conn)
    }

    /// The broker label used in errors (`broker 1 (host:port)`).
    pub fn broker(&self) -> &str {
        &self.broker
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
                broker: self.broker.to_string().into(),
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
            broker: self.broker.to_string().into(),
            api: format!("{} v{version}", frame::api_name(R::KEY)),
            source,
        })
    }

    /// Sends a request that gets no response (Produce with acks=0). Returns
    /// once the frame is queued for writing.
    pub async fn send_no_response<R: Request>(&self, req: &R, version: i16) -> Result<()> {
        let body = self.encode::<R>(req, version)?;
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
            broker: self.broker.to_string(),
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
        await_reply(rx, self.broker.as_ref(), R::KEY, timeout).await
    }

    fn encode<R: Request>(&self, req: &R, version: i16) -> Result<Bytes> {
        frame::encode_body(req, version).map_err(|source| Error::Protocol {
            broker: self.broker.to_string().into(),
            api: format!("{} v{version}", frame::api_name(R::KEY)),
            source,
        })
    }

    fn closed(&self, api_key: i16) -> Error {
        Error::Disconnected {
            broker: self.broker.to_string().into(),
            api: Some(frame::api_name(api_key).into()),
            reason: "connection is closed".into(),
        }
    }
}

/// A queued request's response (see [`Connection::enqueue`]).
#[must_use = "the response arrives only if awaited"]
pub struct PendingResponse<R: Request> {
    rx: oneshot::Receiver<Result<Bytes>>,
    broker: String,
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
            broker: self.broker.clone().into(),
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
    broker: &str,
    api_key: i16,
    timeout: Duration,
) -> Result<Bytes> {
    let bound = timeout.saturating_mul(2);
    match tokio::time::timeout(bound, rx).await {
        Ok(Ok(result)) => result,
        Ok(Err(_)) => Err(Error::Disconnected {
            broker: broker.to_owned().into(),
            api: Some(frame::api_name(api_key).into()),
            reason: "connection is closed".into(),
        }),
        Err(_) => Err(Error::Timeout {
            broker: broker.to_owned().into(),
            api: frame::api_name(api_key).into(),
            after: bound,
            config_key: "request.timeout.ms",
        }),
    }
}

fn io_err(broker: &str, op: &'static str, e: std::io::Error) -> Error {
    Error::Io {
        broker: broker.to_owned().into(),
        op,
        source: Arc::new(e),
    }
}

/// ApiVersions on the fresh socket, before the task takes it over. A broker
/// that does not know our ApiVersions version answers in v0 with
/// UNSUPPORTED_VERSION and its own range (KIP-511); we then retry at v0.
async fn handshake<S: AsyncRead + AsyncWrite + Unpin + ?Sized>(
    stream: &mut S,
    label: &str,
    cfg: &ConnectionConfig,
) -> Result<ApiVersionTable> {
    let client_id = StrBytes::from_string(cfg.client_id.clone());
    let mut version = API_VERSIONS_VERSION;
    for attempt in 0..2 {
        let req = ApiVersionsRequest::default()
            .with_client_software_name(StrBytes::from_static_str("purekafka"))
            .with_client_software_version(StrBytes::from_static_str(env!("CARGO_PKG_VERSION")));
        let body = frame::encode_body(&req, version).map_err(|source| Error::Protocol {
            broker: label.to_owned().into(),
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
                broker: label.to_owned().into(),
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
                        broker: label.to_owned().into(),
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
                    broker: label.to_owned().into(),
                    api: Some("ApiVersions".into()),
                    reason: "broker closed the connection during the handshake (is this a Kafka listener with a matching security protocol?)".into(),
                });
            }
        };
        let protocol = |source| Error::Protocol {
            broker: label.to_owned().into(),
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
        broker: label.to_owned().into(),
        api: Some("ApiVersions".into()),
        reason: "version negotiation did not converge".into(),
    })
}

struct ConnectionTask {
    broker: Arc<str>,
    client_id: StrBytes,
    request_timeout: Duration,
    max_response_size: usize,
    next_correlation_id: i32,
}

/// Why the connection ended; the head request gets `head`, the rest `rest`.
struct Broken {
    head: Error,
    rest: Error,
}

impl ConnectionTask {
    async fn run<R, W>(
        mut self,
        mut read_half: R,
        mut write_half: W,
        mut rx: mpsc::Receiver<Outgoing>,
        session_end: oneshot::Receiver<Instant>,
    ) where
        R: AsyncRead + Unpin,
        W: AsyncWrite + Unpin,
    {
        let (pending_tx, mut pending_rx) = mpsc::channel::<Pending>(MAX_PENDING);
        let broker = self.broker.clone();
        let max_response_size = self.max_response_size;
        // Writer and reader run concurrently inside this one task: a large
        // request being written never stops responses from being read (the
        // broker may be blocked writing to us). A broken writer or reader
        // ends both; a writer with nothing more to send (every handle gone,
        // or the SASL session about to expire) lets the reader answer what
        // is in flight first: it ends once `pending_tx` is dropped and the
        // FIFO is empty, each entry bounded by its own deadline.
        let broken = {
            let writer = self.write_loop(&mut rx, pending_tx, &mut write_half, session_end);
            let reader = read_loop(&broker, max_response_size, &mut pending_rx, &mut read_half);
            tokio::pin!(writer, reader);
            tokio::select! {
                b = &mut writer => match b {
                    Some(b) => b,
                    None => reader.await,
                },
                b = &mut reader => b,
            }
        };
        debug!(reason = %broken.head, "connection closed");
        rx.close();
        let mut head = Some(broken.head);
        while let Ok(p) = pending_rx.try_recv() {
            let err = head.take().unwrap_or_else(|| broken.rest.clone());
            let _ = p.reply.send(Err(err));
        }
        while let Ok(out) = rx.try_recv() {
            if let Some(reply) = out.reply {
                let _ = reply.send(Err(broken.rest.clone()));
            }
        }
    }

    /// Writes queued requests until the queue ends (`None`: drain) or the
    /// socket breaks (`Some`).
    async fn write_loop<W: AsyncWrite + Unpin>(
        &mut self,
        rx: &mut mpsc::Receiver<Outgoing>,
        pending_tx: mpsc::Sender<Pending>,
        write_half: &mut W,
        session_end: oneshot::Receiver<Instant>,
    ) -> Option<Broken> {
        let mut buf = BytesMut::with_capacity(16 * 1024);
        let session_end = async {
            match session_end.await {
                Ok(at) => tokio::time::sleep_until(at).await,
                // No session lifetime: the connection lives until dropped.
                Err(_) => std::future::pending().await,
            }
        };
        tokio::pin!(session_end);
        let mut expiring = false;
        loop {
            let next = tokio::select! {
                out = rx.recv() => out,
                () = &mut session_end, if !expiring => {
                    // KIP-368: take no new requests (handles see the
                    // connection closed and the pool dials a new one), but
                    // send what is already queued.
                    debug!("SASL session near its end: draining, then closing");
                    expiring = true;
                    rx.close();
                    continue;
                }
            };
            // `None`: every handle is gone or the session is expiring.
            let out = next?;
            let correlation_id = self.next_correlation_id;
            self.next_correlation_id = self.next_correlation_id.wrapping_add(1).max(1);
            buf.clear();
            let meta = RequestMeta {
                api_key: out.api_key,
                version: out.version,
                correlation_id,
            };
            if let Err(source) =
                frame::encode_request(&mut buf, meta, Some(&self.client_id), &out.body)
            {
                if let Some(reply) = out.reply {
                    let _ = reply.send(Err(Error::Protocol {
                        broker: self.broker.to_string().into(),
                        api: frame::api_name(out.api_key).into(),
                        source,
                    }));
                }
                continue;
            }
            trace!(
                api = frame::api_name(out.api_key),
                version = out.version,
                correlation_id,
                bytes = buf.len(),
                "write"
            );
            if let Some(reply) = out.reply {
                let pending = Pending {
                    correlation_id,
                    api_key: out.api_key,
                    version: out.version,
                    deadline: Instant::now() + out.timeout,
                    timeout: out.timeout,
                    reply,
                };
                // Registered before the bytes leave, so the reader can never
                // see a response it has no entry for.
                if pending_tx.send(pending).await.is_err() {
                    return Some(self.disconnected("reader stopped"));
                }
            }
            // A broker that stops reading must not park the writer forever
            // (requests without responses have no reader-side deadline).
            match tokio::time::timeout(self.request_timeout, write_half.write_all(&buf)).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => {
                    let e = io_err(&self.broker, "write", e);
                    return Some(Broken {
                        head: e.clone(),
                        rest: e,
                    });
                }
                Err(_) => {
                    let e = Error::Timeout {
                        broker: self.broker.to_string().into(),
                        api: format!("writing {}", frame::api_name(out.api_key)),
                        after: self.request_timeout,
                        config_key: "request.timeout.ms",
                    };
                    return Some(Broken {
                        head: e.clone(),
                        rest: e,
                    });
                }
            }
        }
    }

    fn disconnected(&self, reason: &str) -> Broken {
        let e = Error::Disconnected {
            broker: self.broker.to_string().into(),
            api: None,
            reason: reason.into(),
        };
        Broken {
            head: e.clone(),
            rest: e,
        }
    }
}

async fn read_loop<R: AsyncRead + Unpin>(
    broker: &Arc<str>,
    max_response_size: usize,
    pending_rx: &mut mpsc::Receiver<Pending>,
    read_half: &mut R,
) -> Broken {
    let mut buf = BytesMut::with_capacity(64 * 1024);
    let closed = |api: Option<String>, reason: String| {
        let head = Error::Disconnected {
            broker: broker.to_string().into(),
            api,
            reason: reason.clone(),
        };
        let rest = Error::Disconnected {
            broker: broker.to_string().into(),
            api: None,
            reason,
        };
        Broken { head, rest }
    };
    loop {
        // Idle: wait for the next request, but notice a peer that hangs up.
        // `biased`: a pending entry is always registered before its bytes are
        // written, so when both are ready the entry must win; otherwise an
        // already-arrived response would look unsolicited.
        let head = tokio::select! {
            biased;
            p = pending_rx.recv() => match p {
                Some(p) => p,
                None => return closed(None, "no more requests".into()),
            },
            r = read_half.read_buf(&mut buf) => {
                return match r {
                    Ok(0) => closed(None, "broker closed the connection".into()),
                    Ok(_) => closed(None, "broker sent bytes with no request pending".into()),
                    Err(e) => Broken { head: io_err(broker, "read", e), rest: io_err(broker, "read", std::io::Error::other("connection reset")) },
                };
            }
        };
        let api = format!("{} v{}", frame::api_name(head.api_key), head.version);
        let protocol_err = |source| Error::Protocol {
            broker: broker.to_string().into(),
            api: api.clone(),
            source,
        };
        // The stream cannot be trusted past a bad frame: answer the head
        // request with the cause and close.
        let fail_head = |head: Pending, e: Error| {
            let _ = head.reply.send(Err(e.clone()));
            closed(None, e.to_string())
        };
        let frame = loop {
            match frame::split_frame(&mut buf, max_response_size) {
                Ok(Some(f)) => break f,
                Ok(None) => {}
                Err(source) => return fail_head(head, protocol_err(source)),
            }
            tokio::select! {
                r = read_half.read_buf(&mut buf) => match r {
                    Ok(0) => {
                        let b = closed(Some(api.clone()), "broker closed the connection".into());
                        let _ = head.reply.send(Err(b.head));
                        return closed(None, "broker closed the connection".into());
                    }
                    Ok(_) => {}
                    Err(e) => {
                        let _ = head.reply.send(Err(io_err(broker, "read", e)));
                        return closed(None, "read failed".into());
                    }
                },
                _ = tokio::time::sleep_until(head.deadline) => {
                    let _ = head.reply.send(Err(Error::Timeout {
                        broker: broker.to_string().into(),
                        api: api.clone(),
                        after: head.timeout,
                        config_key: "request.timeout.ms",
                    }));
                    return closed(None, format!("closed after {api} timed out"));
                }
            }
        };
        match frame::peek_correlation_id(&frame) {
            Ok(id) if id == head.correlation_id => {
                trace!(api = %api, correlation_id = id, bytes = frame.len(), "read");
                let _ = head.reply.send(Ok(frame));
            }
            Ok(id) => {
                let reason = format!("expected {}, got {id}", head.correlation_id);
                return fail_head(
                    head,
                    protocol_err(crate::protocol::ProtocolError::Invalid {
                        what: "correlation id",
                        reason,
                    }),
                );
            }
            Err(source) => return fail_head(head, protocol_err(source)),
        }
    }
}

#[cfg(feature = "tls")]
async fn secure(
    tcp: TcpStream,
    addr: &BrokerAddr,
    cfg: &ConnectionConfig,
    label: &str,
) -> Result<Transport> {
    let tls = super::tls::connect(tcp, &addr.host, &cfg.security.tls, label).await?;
    Ok(Transport::Tls(Box::new(tls)))
}

#[cfg(not(feature = "tls"))]
async fn secure(
    _tcp: TcpStream,
    _addr: &BrokerAddr,
    cfg: &ConnectionConfig,
    _label: &str,
) -> Result<Transport> {
    Err(Error::config(
        "security.protocol",
        format!(
            "{} needs TLS: build purekafka with the `tls` feature",
            cfg.security.protocol
        ),
    ))
}
