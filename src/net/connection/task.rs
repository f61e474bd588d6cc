//! The connection task: the one owner of a broker socket. It writes whole
//! frames with fresh correlation ids, matches answers FIFO, enforces each
//! request's timeout, and on any break fails every pending request.

use std::sync::Arc;
use std::time::Duration;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use kafka_protocol::protocol::StrBytes;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;
use tracing::{debug, trace};

use super::{io_err, MAX_PENDING};
use crate::error::{Error, Origin, Result};
use crate::net::metrics::ConnectionMetrics;
use crate::protocol::frame::{self, FrameBuf, RequestBody, RequestMeta};
use crate::protocol::ProtocolError;

/// The byte stream under a connection.
pub(super) enum Transport {
    Plain(TcpStream),
    #[cfg(feature = "tls")]
    Tls(Box<tokio_rustls::client::TlsStream<TcpStream>>),
}

pub(super) struct Outgoing {
    pub(super) api_key: i16,
    pub(super) version: i16,
    pub(super) body: RequestBody,
    /// How long the broker may take to answer (`request.timeout.ms` unless
    /// the API waits longer by design, as JoinGroup does).
    pub(super) timeout: Duration,
    /// `None` for requests the broker does not answer (Produce with acks=0).
    pub(super) reply: Option<oneshot::Sender<Result<Bytes>>>,
}

/// Bodies up to this size are copied behind their header and written in
/// one piece, as small requests always were; a larger body (a Produce
/// request's record batches) is written from its own chunks with one
/// vectored write, never copied into this buffer.
const INLINE_BODY: usize = 16 * 1024;
/// The write buffer's capacity when a connection starts.
const WRITE_BUFFER: usize = 16 * 1024;
/// A write buffer that grew past this (a header with a very long
/// `client.id`) is given back after its request instead of being kept for
/// the connection's life.
const WRITE_BUFFER_KEEP: usize = 32 * 1024;

/// The connection's reused write buffer: each frame's size prefix and
/// header, and its body when small.
struct WriteBuffer {
    buf: BytesMut,
}

impl WriteBuffer {
    fn new() -> WriteBuffer {
        WriteBuffer {
            buf: BytesMut::with_capacity(WRITE_BUFFER),
        }
    }

    /// The whole frame of a request: its head in this buffer, then the
    /// body, copied here when small and left in its chunks otherwise.
    fn frame<'a>(
        &'a mut self,
        meta: RequestMeta,
        client_id: &StrBytes,
        body: &'a RequestBody,
    ) -> std::result::Result<FrameBuf<'a>, ProtocolError> {
        self.buf.clear();
        frame::encode_head(&mut self.buf, meta, Some(client_id), body.len())?;
        if body.len() <= INLINE_BODY {
            for part in body.parts() {
                self.buf.put_slice(part);
            }
            return Ok(FrameBuf::new(&self.buf, &[]));
        }
        Ok(FrameBuf::new(&self.buf, body.parts()))
    }

    /// After a frame is written: a buffer that grew past the bound goes.
    fn release(&mut self) {
        if self.buf.capacity() > WRITE_BUFFER_KEEP {
            self.buf = BytesMut::with_capacity(WRITE_BUFFER);
        }
    }
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
        let mut buf = WriteBuffer::new();
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
            let meta = RequestMeta {
                api_key: out.api_key,
                version: out.version,
                correlation_id,
            };
            let mut bytes = match buf.frame(meta, &self.client_id, &out.body) {
                Ok(bytes) => bytes,
                Err(source) => {
                    buf.release();
                    if let Some(reply) = out.reply {
                        let _ = reply.send(Err(Error::Protocol {
                            broker: self.broker.clone(),
                            api: frame::api_name(out.api_key).into(),
                            source,
                        }));
                    }
                    continue;
                }
            };
            let len = bytes.remaining();
            trace!(
                api = frame::api_name(out.api_key),
                version = out.version,
                correlation_id,
                bytes = len,
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
            let written =
                tokio::time::timeout(self.request_timeout, write_half.write_all_buf(&mut bytes))
                    .await;
            buf.release();
            match written {
                Ok(Ok(())) => self.metrics.sent(len),
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

#[cfg(test)]
mod tests {
    use super::*;

    fn meta() -> RequestMeta {
        RequestMeta {
            api_key: 0,
            version: 9,
            correlation_id: 42,
        }
    }

    /// The frame's bytes, read through its `Buf`.
    fn read(mut frame: FrameBuf<'_>) -> Vec<u8> {
        let mut out = Vec::with_capacity(frame.remaining());
        while frame.has_remaining() {
            let n = frame.chunk().len();
            out.extend_from_slice(frame.chunk());
            frame.advance(n);
        }
        out
    }

    /// The same frame as one contiguous copy (the path every request took).
    fn flat(client_id: &StrBytes, body: &RequestBody) -> Vec<u8> {
        let mut out = BytesMut::new();
        frame::encode_request(&mut out, meta(), Some(client_id), &body.to_bytes()).expect("encode");
        out.to_vec()
    }

    #[test]
    fn a_large_body_is_written_from_its_chunks_and_the_buffer_stays_small() {
        let client = StrBytes::from_static_str("producer-1");
        let batch = Bytes::from(vec![9u8; 1 << 20]);
        let mut body = RequestBody::from(Bytes::from_static(b"prefix"));
        body.push(batch.clone());
        let mut buf = WriteBuffer::new();
        let frame = buf.frame(meta(), &client, &body).expect("frame");
        let mut slices = [std::io::IoSlice::new(&[]); 4];
        let n = frame.chunks_vectored(&mut slices);
        assert_eq!(n, 3, "head, prefix and batch in one vectored write");
        assert_eq!(
            slices[2].as_ptr(),
            batch.as_ptr(),
            "the batch is not copied"
        );
        assert_eq!(read(frame), flat(&client, &body));
        assert!(
            buf.buf.capacity() <= WRITE_BUFFER_KEEP,
            "the body never entered the write buffer"
        );
    }

    #[test]
    fn a_small_body_is_copied_behind_its_header() {
        let client = StrBytes::from_static_str("c");
        let mut body = RequestBody::from(Bytes::from_static(b"abc"));
        body.push(Bytes::from_static(b"def"));
        let mut buf = WriteBuffer::new();
        let frame = buf.frame(meta(), &client, &body).expect("frame");
        assert_eq!(frame.chunk().len(), frame.remaining(), "one piece");
        assert_eq!(read(frame), flat(&client, &body));
    }

    #[test]
    fn a_write_buffer_grown_past_the_bound_is_given_back() {
        // A header larger than the bound (a 30,000-byte client.id) with an
        // inlined body grows the buffer past it.
        let client = StrBytes::from_string("x".repeat(30_000));
        let body = RequestBody::from(Bytes::from(vec![1u8; INLINE_BODY]));
        let mut buf = WriteBuffer::new();
        let frame = buf.frame(meta(), &client, &body).expect("frame");
        assert_eq!(read(frame), flat(&client, &body));
        assert!(
            buf.buf.capacity() > WRITE_BUFFER_KEEP,
            "the case under test"
        );
        buf.release();
        assert!(buf.buf.capacity() <= WRITE_BUFFER_KEEP);
        // A buffer within the bound is kept as it is.
        let small = StrBytes::from_static_str("c");
        let body = RequestBody::from(Bytes::from(vec![1u8; 1024]));
        let frame = buf.frame(meta(), &small, &body).expect("frame");
        assert_eq!(read(frame), flat(&small, &body));
        let kept = buf.buf.capacity();
        buf.release();
        assert_eq!(buf.buf.capacity(), kept);
    }
}
