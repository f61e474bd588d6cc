//! The thin async layer: one listener task per broker, one task per
//! connection that splits frames, asks the [`ClusterState`] and writes the
//! answer, and a ticker that drives group timers. All protocol rules live in
//! the state; this file only moves bytes and waits.
//!
//! A connection serves one request at a time, in order, as Kafka does
//! (a broker mutes a connection until its response is sent), so responses
//! can never be reordered. Every wait is bounded.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use bytes::{Buf, Bytes, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{oneshot, watch, Notify};
use tracing::debug;

use super::authz::{merge, Checked};
use super::control::{error_response, Action, Rules};
use super::sasl::{Gate, SaslSession, SaslUsers};
use super::state::{ClusterState, Reply, Ticket};
use super::wire::{
    api_versions_fallback, decode_request, encode_response, FakeResponse, WireError,
};

/// Largest request frame accepted (Kafka's `socket.request.max.bytes`).
const MAX_REQUEST: usize = 100 << 20;
/// The longest a deferred answer (a join, a sync) may take.
const MAX_DEFERRED: Duration = Duration::from_secs(600);
/// How often group timers advance.
const TICK: Duration = Duration::from_millis(10);

/// The state plus the channels of requests waiting for a deferred answer.
pub struct Inner {
    /// The cluster.
    pub state: ClusterState,
    waiters: HashMap<Ticket, oneshot::Sender<FakeResponse>>,
}

impl Inner {
    /// Sends every completed deferred answer to its waiting connection.
    fn dispatch(&mut self) {
        for (ticket, response) in self.state.take_completed() {
            if let Some(tx) = self.waiters.remove(&ticket) {
                let _ = tx.send(response);
            }
        }
    }
}

/// What every task shares.
pub struct Shared {
    inner: Mutex<Inner>,
    /// Fault rules.
    pub rules: Mutex<Rules>,
    /// Woken after every append, for waiting fetches.
    data: Notify,
    start: Instant,
    /// The SASL users, when the listeners are `SASL_PLAINTEXT`.
    sasl: Option<Arc<SaslUsers>>,
}

impl Shared {
    /// Wraps a state.
    pub fn new(state: ClusterState, seed: u64, sasl: Option<Arc<SaslUsers>>) -> Arc<Shared> {
        Arc::new(Shared {
            inner: Mutex::new(Inner {
                state,
                waiters: HashMap::new(),
            }),
            rules: Mutex::new(Rules::seeded(seed)),
            data: Notify::new(),
            start: Instant::now(),
            sasl,
        })
    }

    /// Locks the state. A panic while holding it cannot leave a half
    /// update visible to tests that matter more than the poison flag, so
    /// the guard is recovered.
    pub fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Milliseconds since the cluster started.
    pub fn now_ms(&self) -> i64 {
        i64::try_from(self.start.elapsed().as_millis()).unwrap_or(i64::MAX)
    }

    /// Wakes waiting fetches (data was appended or leadership moved).
    pub fn wake_fetches(&self) {
        self.data.notify_waiters();
    }
}

/// Advances group timers until `stop` fires.
pub async fn ticker(shared: Arc<Shared>) {
    let mut interval = tokio::time::interval(TICK);
    loop {
        interval.tick().await;
        let now = shared.now_ms();
        let mut inner = shared.lock();
        inner.state.tick(now);
        inner.dispatch();
    }
}

/// Accepts connections for broker `id` until `alive` turns false.
pub async fn listen(
    shared: Arc<Shared>,
    id: i32,
    listener: TcpListener,
    mut alive: watch::Receiver<bool>,
) {
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let Ok((sock, _)) = accepted else { continue };
                let _ = sock.set_nodelay(true);
                tokio::spawn(connection(shared.clone(), id, sock, alive.clone()));
            }
            changed = alive.changed() => {
                if changed.is_err() || !*alive.borrow() {
                    return;
                }
            }
        }
    }
}

async fn connection(
    shared: Arc<Shared>,
    broker: i32,
    sock: TcpStream,
    mut alive: watch::Receiver<bool>,
) {
    tokio::select! {
        _ = serve(&shared, broker, sock) => {}
        _ = async { while alive.changed().await.is_ok() && *alive.borrow() {} } => {}
    }
}

async fn serve(shared: &Shared, broker: i32, mut sock: TcpStream) {
    let mut buf = BytesMut::with_capacity(4096);
    let mut sasl = SaslSession::default();
    let host = sock
        .peer_addr()
        .map(|a| a.ip().to_string())
        .unwrap_or_default();
    loop {
        let frame = loop {
            match split_frame(&mut buf, MAX_REQUEST) {
                Ok(Some(frame)) => break frame,
                Ok(None) => {}
                Err(size) => {
                    debug!(broker, size, "fake: bad frame size, closing");
                    return;
                }
            }
            match sock.read_buf(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        };
        let (header, request) = match decode_request(frame) {
            Ok(decoded) => decoded,
            Err(WireError::UnsupportedVersion {
                api_key: 18,
                correlation_id,
                ..
            }) => {
                let Ok(bytes) = api_versions_fallback(correlation_id) else {
                    return;
                };
                if sock.write_all(&bytes).await.is_err() {
                    return;
                }
                continue;
            }
            Err(e) => {
                // Kafka closes the connection on an unparsable request.
                debug!(broker, error = %e, "fake: closing connection");
                return;
            }
        };
        if let Some(users) = &shared.sasl {
            let (response, close) = match sasl.on_request(users, &request) {
                Gate::Pass => (None, false),
                Gate::Answer(r) => (Some(r), false),
                Gate::AnswerAndClose(r) => (Some(r), true),
                Gate::Close => {
                    debug!(broker, api = ?header.api_key, "fake: request before SASL authentication, closing");
                    return;
                }
            };
            if let Some(response) = response {
                let Ok(bytes) = encode_response(&response, header.version, header.correlation_id)
                else {
                    return;
                };
                if sock.write_all(&bytes).await.is_err() || close {
                    return;
                }
                continue;
            }
        }
        let mut request = request;
        if matches!(
            request,
            super::wire::FakeRequest::Fetch(_) | super::wire::FakeRequest::Produce(_)
        ) {
            // Named before the rules look, so a rule's topic matches by id too.
            shared.lock().state.name_topics(&mut request);
        }
        let principal = sasl.principal();
        let who = (principal.as_str(), host.as_str());
        let checked = shared.lock().state.authorize(who, &mut request);
        let extra = match checked {
            Checked::Refuse(response) => {
                match encode_response(&response, header.version, header.correlation_id) {
                    Ok(bytes) if sock.write_all(&bytes).await.is_ok() => continue,
                    _ => return,
                }
            }
            Checked::Serve(extra) => extra,
        };
        let filtered = matches!(
            request,
            super::wire::FakeRequest::Metadata(_)
                | super::wire::FakeRequest::DescribeGroups(_)
                | super::wire::FakeRequest::ListGroups(_)
                | super::wire::FakeRequest::ListTransactions(_)
        )
        .then(|| request.clone());
        let action = shared
            .rules
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .action_for(broker, &request);
        let response = match action {
            Action::Drop => return,
            Action::Silence => {
                // Hold the socket open, answer nothing, until the peer leaves.
                let mut sink = [0u8; 1024];
                while matches!(sock.read(&mut sink).await, Ok(n) if n > 0) {}
                return;
            }
            Action::Error(code) => match error_response(&request, code) {
                Some(r) => Some(r),
                None => return,
            },
            Action::Delay(d) => {
                tokio::time::sleep(d).await;
                match answer(shared, broker, &header, request).await {
                    Ok(r) => r,
                    Err(Abandoned) => return,
                }
            }
            Action::DelayAnswer(d) => {
                let served = match answer(shared, broker, &header, request).await {
                    Ok(r) => r,
                    Err(Abandoned) => return,
                };
                tokio::time::sleep(d).await;
                served
            }
            Action::Pass => match answer(shared, broker, &header, request).await {
                Ok(r) => r,
                Err(Abandoned) => return,
            },
        };
        let Some(mut response) = response else {
            continue;
        };
        if let Some(extra) = extra {
            merge(&mut response, extra);
        }
        if let Some(original) = filtered {
            shared
                .lock()
                .state
                .authorize_answer(who, &original, &mut response);
        }
        match encode_response(&response, header.version, header.correlation_id) {
            Ok(bytes) => {
                if sock.write_all(&bytes).await.is_err() {
                    return;
                }
            }
            Err(e) => {
                debug!(broker, error = %e, api = ?header.api_key, "fake: cannot encode response");
                return;
            }
        }
    }
}

/// A deferred answer that never came (bounded by [`MAX_DEFERRED`]): the
/// connection is closed so the client retries instead of waiting on it.
struct Abandoned;

/// Runs one request through the state, waiting where the state says to.
/// `Ok(None)`: nothing to send (acks=0).
async fn answer(
    shared: &Shared,
    broker: i32,
    header: &super::wire::Header,
    request: super::wire::FakeRequest,
) -> Result<Option<FakeResponse>, Abandoned> {
    let is_write = matches!(
        request,
        super::wire::FakeRequest::Produce(_) | super::wire::FakeRequest::EndTxn(_)
    );
    let mut final_try = false;
    loop {
        let notified = shared.data.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        let (reply, rx) = {
            let mut inner = shared.lock();
            let now = shared.now_ms();
            let reply = inner
                .state
                .handle(broker, header, request.clone(), now, final_try);
            let rx = match reply {
                Reply::Deferred(ticket) => {
                    let (tx, rx) = oneshot::channel();
                    inner.waiters.insert(ticket, tx);
                    Some(rx)
                }
                _ => None,
            };
            inner.dispatch();
            (reply, rx)
        };
        if is_write {
            shared.wake_fetches();
        }
        match reply {
            Reply::Respond(r) => return Ok(Some(r)),
            Reply::Nothing => return Ok(None),
            Reply::Deferred(_) => {
                let rx = rx.ok_or(Abandoned)?;
                return match tokio::time::timeout(MAX_DEFERRED, rx).await {
                    Ok(Ok(r)) => Ok(Some(r)),
                    _ => Err(Abandoned),
                };
            }
            Reply::WaitForData { until_ms } => {
                let wait = u64::try_from(until_ms - shared.now_ms()).unwrap_or(0);
                let _ = tokio::time::timeout(Duration::from_millis(wait), notified).await;
                final_try = shared.now_ms() >= until_ms;
            }
        }
    }
}

/// Splits one size-prefixed request off `buf` (the fake's own framing, so it
/// does not lean on the client it tests): none until it is whole; the
/// announced size when it is negative or above `max`.
fn split_frame(buf: &mut BytesMut, max: usize) -> Result<Option<Bytes>, i32> {
    let Some(prefix) = buf.get(..4) else {
        return Ok(None);
    };
    let announced = i32::from_be_bytes([prefix[0], prefix[1], prefix[2], prefix[3]]);
    let size = usize::try_from(announced)
        .ok()
        .filter(|s| *s <= max)
        .ok_or(announced)?;
    if buf.len() < 4 + size {
        // At most 1 MiB reserved ahead: a size prefix alone pins no memory.
        buf.reserve((4 + size - buf.len()).min(1 << 20));
        return Ok(None);
    }
    buf.advance(4);
    Ok(Some(buf.split_to(size).freeze()))
}
