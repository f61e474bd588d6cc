//! The connection task: the one owner of a broker socket. It writes whole
//! frames with fresh correlation ids, matches answers FIFO, enforces each
//! request's timeout, and on any break fails every pending request.

use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use kafka_protocol::protocol::StrBytes;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;
use tracing::{debug, trace};

use super::{io_err, MAX_PENDING};
use crate::error::{Error, Origin, Result};
use crate::net::metrics::ConnectionMetrics;
use crate::protocol::frame::{self, RequestMeta};

/// The byte stream under a connection.
pub(super) enum Transport {
    Plain(TcpStream),
    #[cfg(feature = "tls")]
    Tls(Box<tokio_rustls::client::TlsStream<TcpStream>>),
}

pub(super) struct Outgoing {
    pub(super) api_key: i16,
    pub(super) version: i16,
    pub(super) body: Bytes,
    /// How long the broker may take to answer (`request.timeout.ms` unless
    /// the API waits longer by design, as JoinGroup does).
    pub(super) timeout: Duration,
    /// `None` for requests the broker does not answer (Produce with acks=0).
    pub(super) reply: Option<oneshot::Sender<Result<Bytes>>>,
}

pub(super) struct Pending {
    correlation_id: i32,
    api_key: i16,
    version: i16,
    deadline: Instant,
    timeout: Duration,
    reply: oneshot::Sender<Result<Bytes>>,
}

pub(super) struct ConnectionTask {
    /// This `client.id`'s connection counters.
    pub(super) metrics: Arc<ConnectionMetrics>,
    pub(super) broker: Origin,
    pub(super) client_id: StrBytes,
    pub(super) request_timeout: Duration,
    pub(super) max_response_size: usize,
    pub(super) next_correlation_id: i32,
}

/// Why the connection ended; the head request gets `head`, the rest `rest`.
struct Broken {
    head: Error,
    rest: Error,
}

impl ConnectionTask {
    pub(super) async fn run<R, W>(
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
        let metrics = self.metrics.clone();
        let broken = {
            let writer = self.write_loop(&mut rx, pending_tx, &mut write_half, session_end);
            let reader = read_loop(
                &broker,
                max_response_size,
                &metrics,
                &mut pending_rx,
                &mut read_half,
            );
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
        metrics.closed();
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
                        broker: self.broker.clone(),
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
                Ok(Ok(())) => self.metrics.sent(buf.len()),
                Ok(Err(e)) => {
                    let e = io_err(&self.broker, "write", e);
                    return Some(Broken {
                        head: e.clone(),
                        rest: e,
                    });
                }
                Err(_) => {
                    let e = Error::Timeout {
                        broker: self.broker.clone(),
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
            broker: self.broker.clone(),
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
    broker: &Origin,
    max_response_size: usize,
    metrics: &ConnectionMetrics,
    pending_rx: &mut mpsc::Receiver<Pending>,
    read_half: &mut R,
) -> Broken {
    let mut buf = BytesMut::with_capacity(64 * 1024);
    let closed = |api: Option<String>, reason: String| {
        let head = Error::Disconnected {
            broker: broker.clone(),
            api,
            reason: reason.clone(),
        };
        let rest = Error::Disconnected {
            broker: broker.clone(),
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
            broker: broker.clone(),
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
                        broker: broker.clone(),
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
                // Registered (just before its bytes were written) at
                // `deadline - timeout`; the size prefix counts as bytes.
                let written = head.deadline.checked_sub(head.timeout);
                let latency = written.map_or(Duration::ZERO, |w| w.elapsed());
                metrics.received(frame.len() + 4, latency);
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
