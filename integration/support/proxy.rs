//! Loopback TCP proxies for network faults. [`Proxy`] sits in front of one
//! real broker and can cut every connection (as if the broker process
//! died) or stop forwarding broker bytes (as if the broker hung).
//! [`ClusterProxy`] sits in front of every broker of a cluster, speaks
//! Kafka framing (the size prefix and the request header of the protocol
//! guide) and rewrites the broker addresses in Metadata and
//! FindCoordinator answers, so all of a client's traffic goes through it;
//! per broker it can drop connections, black-hole, delay, or cut one
//! direction. It also records the topics every Metadata request named, so
//! a test can see what a client keeps asking for.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::{
    ApiKey, FindCoordinatorResponse, MetadataRequest, MetadataResponse, RequestHeader,
    ResponseHeader,
};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// A running proxy; dropping it stops accepting.
pub struct Proxy {
    /// The proxy's listening port on 127.0.0.1.
    pub port: u16,
    stall: Arc<AtomicBool>,
    kill: watch::Sender<bool>,
    accept: tokio::task::JoinHandle<()>,
}

impl Proxy {
    /// Starts a proxy forwarding to `upstream` (`host:port`).
    pub async fn start(upstream: &str) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind proxy");
        let port = listener.local_addr().expect("addr").port();
        let stall = Arc::new(AtomicBool::new(false));
        let (kill, kill_rx) = watch::channel(false);
        let upstream = upstream.to_owned();
        let stall2 = stall.clone();
        let accept = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let Ok(server) = TcpStream::connect(&upstream).await else {
                    continue;
                };
                tokio::spawn(pipe(client, server, stall2.clone(), kill_rx.clone()));
            }
        });
        Proxy {
            port,
            stall,
            kill,
            accept,
        }
    }

    /// Stops forwarding broker→client bytes (connections stay open).
    pub fn stall(&self) {
        self.stall.store(true, Ordering::SeqCst);
    }

    /// Closes every proxied connection at once.
    pub fn kill(&self) {
        let _ = self.kill.send(true);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.accept.abort();
        let _ = self.kill.send(true);
    }
}

async fn pipe(
    client: TcpStream,
    server: TcpStream,
    stall: Arc<AtomicBool>,
    mut kill: watch::Receiver<bool>,
) {
    let (mut cr, mut cw) = client.into_split();
    let (mut sr, mut sw) = server.into_split();
    let up = async {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            match cr.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => {
                    if sw.write_all(&buf[..n]).await.is_err() {
                        return;
                    }
                }
            }
        }
    };
    let down = async {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            match sr.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => {
                    if stall.load(Ordering::SeqCst) {
                        // Swallow: the client sees a broker that never answers.
                        continue;
                    }
                    if cw.write_all(&buf[..n]).await.is_err() {
                        return;
                    }
                }
            }
        }
    };
    tokio::select! {
        _ = up => {}
        _ = down => {}
        _ = kill.wait_for(|k| *k) => {}
    }
}

/// A network fault one broker's [`ClusterProxy`] applies.
///
/// A connection that lost a frame to `BlackHole` or `OneWay` is closed when
/// it would next forward one past the fault (see `pass`): a TCP stream never
/// resumes with a gap, so a client sees a stall and then a reset (or its
/// own request timeout), never a later answer in place of a lost one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NetFault {
    /// Every connection closed now; new ones closed on arrival.
    Cut,
    /// Connections accepted and held; nothing forwarded either way.
    BlackHole,
    /// Each frame forwarded this much later, both ways.
    Latency(Duration),
    /// Requests reach the broker; its answers are dropped.
    OneWay,
}

/// What a broker's proxy does now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    Forward,
    Fault(NetFault),
}

/// One proxy per broker of a cluster, all on loopback, that understands
/// Kafka framing: Metadata and FindCoordinator answers are rewritten so
/// that every broker address a client learns is its proxy, so a client that
/// bootstraps through [`ClusterProxy::bootstrap`] never reaches a broker
/// directly. Each broker's proxy can apply a [`NetFault`] (drop connections,
/// black-hole, latency, one direction cut) until [`heal`](Self::heal).
pub struct ClusterProxy {
    /// node id -> (proxy port, mode)
    nodes: BTreeMap<i32, (u16, watch::Sender<Mode>)>,
    accepts: Vec<tokio::task::JoinHandle<()>>,
    counts: Arc<Counts>,
}

/// What every broker's proxy saw: frames relayed and dropped, and the
/// topics of each Metadata request.
#[derive(Default)]
struct Counts {
    relayed: AtomicU64,
    dropped: AtomicU64,
    metadata: std::sync::Mutex<Vec<MetadataTopics>>,
}

/// The topics one Metadata request named; `None`: every topic.
pub type MetadataTopics = Option<Vec<String>>;

impl ClusterProxy {
    /// Starts a proxy for each broker `cluster`'s metadata lists.
    pub async fn start(cluster: &purekafka::Cluster) -> Result<ClusterProxy, String> {
        let meta = cluster
            .refresh_metadata(None)
            .await
            .map_err(|e| format!("metadata: {e}"))?;
        let mut listeners = Vec::new();
        let mut ports = HashMap::new();
        for (id, b) in &meta.brokers {
            let listener = TcpListener::bind("127.0.0.1:0")
                .await
                .map_err(|e| format!("bind: {e}"))?;
            let port = listener.local_addr().map_err(|e| e.to_string())?.port();
            ports.insert(*id, port);
            listeners.push((*id, format!("{}:{}", b.host, b.port), listener));
        }
        let ports = Arc::new(ports);
        let counts = Arc::new(Counts::default());
        let mut nodes = BTreeMap::new();
        let mut accepts = Vec::new();
        for (id, upstream, listener) in listeners {
            let (mode, mode_rx) = watch::channel(Mode::Forward);
            nodes.insert(id, (ports[&id], mode));
            let ports = ports.clone();
            let counts = counts.clone();
            accepts.push(tokio::spawn(async move {
                while let Ok((client, _)) = listener.accept().await {
                    if *mode_rx.borrow() == Mode::Fault(NetFault::Cut) {
                        continue;
                    }
                    let Ok(server) = TcpStream::connect(&upstream).await else {
                        continue;
                    };
                    tokio::spawn(relay(
                        client,
                        server,
                        ports.clone(),
                        mode_rx.clone(),
                        counts.clone(),
                    ));
                }
            }));
        }
        Ok(ClusterProxy {
            nodes,
            accepts,
            counts,
        })
    }

    /// Every proxy's address, for `bootstrap.servers`.
    pub fn bootstrap(&self) -> String {
        self.nodes
            .values()
            .map(|(port, _)| format!("127.0.0.1:{port}"))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// Applies `fault` to broker `node`'s traffic.
    pub fn inject(&self, node: i32, fault: NetFault) -> Result<(), String> {
        let (_, mode) = self
            .nodes
            .get(&node)
            .ok_or_else(|| format!("no proxy for node {node}"))?;
        mode.send_replace(Mode::Fault(fault));
        Ok(())
    }

    /// Frames relayed and frames dropped by a fault so far: a run can
    /// tell its traffic went through the proxy and the faults bit.
    pub fn frames(&self) -> (u64, u64) {
        (
            self.counts.relayed.load(Ordering::Relaxed),
            self.counts.dropped.load(Ordering::Relaxed),
        )
    }

    /// The topics of every Metadata request the client sent (relayed or
    /// not), in arrival order across brokers.
    pub fn metadata_requests(&self) -> Vec<MetadataTopics> {
        self.counts.metadata.lock().unwrap().clone()
    }

    /// Back to forwarding, for every broker.
    pub fn heal(&self) {
        for (_, mode) in self.nodes.values() {
            mode.send_replace(Mode::Forward);
        }
    }
}

impl Drop for ClusterProxy {
    fn drop(&mut self) {
        for a in &self.accepts {
            a.abort();
        }
        for (_, mode) in self.nodes.values() {
            mode.send_replace(Mode::Fault(NetFault::Cut));
        }
    }
}

/// Largest frame the proxy relays; a bigger size prefix closes the
/// connection.
const MAX_FRAME: usize = 64 << 20;

/// Reads one size-prefixed frame (without the prefix).
async fn read_frame<R: AsyncReadExt + Unpin>(r: &mut R) -> Option<Bytes> {
    let size = usize::try_from(r.read_i32().await.ok()?).ok()?;
    if size > MAX_FRAME {
        return None;
    }
    let mut buf = vec![0u8; size];
    r.read_exact(&mut buf).await.ok()?;
    Some(buf.into())
}

/// Whether a frame passes under the current mode: `Some(true)` forward it
/// (after the latency, if any), `Some(false)` drop it (marking the
/// connection's stream `lost`), `None` close the connection.
async fn pass(
    mode: &watch::Receiver<Mode>,
    toward_client: bool,
    lost: &AtomicBool,
) -> Option<bool> {
    let now = *mode.borrow();
    let forward = match now {
        Mode::Forward => true,
        Mode::Fault(NetFault::Cut) => return None,
        Mode::Fault(NetFault::Latency(d)) => {
            tokio::time::sleep(d).await;
            true
        }
        // Dropped, not delayed: the bytes are gone.
        Mode::Fault(NetFault::BlackHole) => false,
        Mode::Fault(NetFault::OneWay) => !toward_client,
    };
    if !forward {
        lost.store(true, Ordering::Relaxed);
        return Some(false);
    }
    // Past a gap the stream closes (see `NetFault`), but under `OneWay`,
    // whose requests still reach the broker while its answers are dropped.
    if lost.load(Ordering::Relaxed) && now != Mode::Fault(NetFault::OneWay) {
        return None;
    }
    Some(true)
}

/// Relays one connection frame by frame, rewriting broker addresses in
/// Metadata and FindCoordinator answers.
async fn relay(
    client: TcpStream,
    server: TcpStream,
    ports: Arc<HashMap<i32, u16>>,
    mode: watch::Receiver<Mode>,
    counts: Arc<Counts>,
) {
    let (mut cr, mut cw) = client.into_split();
    let (mut sr, mut sw) = server.into_split();
    // correlation id -> (api key, version), from the requests relayed.
    let pending: Arc<std::sync::Mutex<HashMap<i32, (i16, i16)>>> = Arc::default();
    let (up_mode, down_mode, mut cut) = (mode.clone(), mode.clone(), mode);
    let requests = pending.clone();
    let up_counts = counts.clone();
    // Set once either direction dropped a frame.
    let lost = Arc::new(AtomicBool::new(false));
    let up_lost = lost.clone();
    let up = async move {
        while let Some(frame) = read_frame(&mut cr).await {
            if frame.len() >= 8 {
                let key = i16::from_be_bytes([frame[0], frame[1]]);
                let version = i16::from_be_bytes([frame[2], frame[3]]);
                let corr = i32::from_be_bytes([frame[4], frame[5], frame[6], frame[7]]);
                requests.lock().unwrap().insert(corr, (key, version));
                if key == ApiKey::Metadata as i16 {
                    if let Some(topics) = metadata_topics(&frame, version) {
                        up_counts.metadata.lock().unwrap().push(topics);
                    }
                }
            }
            match pass(&up_mode, false, &up_lost).await {
                None => return,
                Some(false) => {
                    up_counts.dropped.fetch_add(1, Ordering::Relaxed);
                    continue;
                }
                Some(true) => {
                    up_counts.relayed.fetch_add(1, Ordering::Relaxed);
                }
            }
            let mut out = BytesMut::with_capacity(frame.len() + 4);
            out.put_i32(frame.len() as i32);
            out.put_slice(&frame);
            if sw.write_all(&out).await.is_err() {
                return;
            }
        }
    };
    let down = async move {
        while let Some(frame) = read_frame(&mut sr).await {
            let corr = match frame.get(..4) {
                Some(b) => i32::from_be_bytes([b[0], b[1], b[2], b[3]]),
                None => return,
            };
            let api = pending.lock().unwrap().remove(&corr);
            match pass(&down_mode, true, &lost).await {
                None => return,
                Some(false) => {
                    counts.dropped.fetch_add(1, Ordering::Relaxed);
                    continue;
                }
                Some(true) => {
                    counts.relayed.fetch_add(1, Ordering::Relaxed);
                }
            }
            let frame = match api {
                Some((key, version)) => rewrite(frame, key, version, &ports),
                None => frame,
            };
            let mut out = BytesMut::with_capacity(frame.len() + 4);
            out.put_i32(frame.len() as i32);
            out.put_slice(&frame);
            if cw.write_all(&out).await.is_err() {
                return;
            }
        }
    };
    tokio::select! {
        _ = up => {}
        _ = down => {}
        _ = cut.wait_for(|m| *m == Mode::Fault(NetFault::Cut)) => {}
    }
}

/// The topics a Metadata request frame names, if it decodes.
fn metadata_topics(frame: &Bytes, version: i16) -> Option<MetadataTopics> {
    let mut body = frame.clone();
    RequestHeader::decode(&mut body, ApiKey::Metadata.request_header_version(version)).ok()?;
    let request = MetadataRequest::decode(&mut body, version).ok()?;
    Some(request.topics.map(|topics| {
        topics
            .into_iter()
            .filter_map(|t| t.name.map(|n| n.0.to_string()))
            .collect()
    }))
}

/// Points the broker addresses of a Metadata or FindCoordinator answer at
/// their proxies; any other answer (or one that does not decode) is
/// relayed as it came.
fn rewrite(frame: Bytes, key: i16, version: i16, ports: &HashMap<i32, u16>) -> Bytes {
    let Ok(api) = ApiKey::try_from(key) else {
        return frame;
    };
    if !matches!(api, ApiKey::Metadata | ApiKey::FindCoordinator) {
        return frame;
    }
    let header_version = api.response_header_version(version);
    let mut body = frame.clone();
    let Ok(header) = ResponseHeader::decode(&mut body, header_version) else {
        return frame;
    };
    let port_of = |id: i32| ports.get(&id).map(|p| i32::from(*p));
    let mut out = BytesMut::new();
    if header.encode(&mut out, header_version).is_err() {
        return frame;
    }
    let encoded = match api {
        ApiKey::Metadata => {
            let Ok(mut r) = MetadataResponse::decode(&mut body, version) else {
                return frame;
            };
            for b in &mut r.brokers {
                if let Some(port) = port_of(b.node_id.0) {
                    b.host = StrBytes::from_static_str("127.0.0.1");
                    b.port = port;
                }
            }
            r.encode(&mut out, version)
        }
        _ => {
            let Ok(mut r) = FindCoordinatorResponse::decode(&mut body, version) else {
                return frame;
            };
            if let Some(port) = port_of(r.node_id.0) {
                r.host = StrBytes::from_static_str("127.0.0.1");
                r.port = port;
            }
            for c in &mut r.coordinators {
                if let Some(port) = port_of(c.node_id.0) {
                    c.host = StrBytes::from_static_str("127.0.0.1");
                    c.port = port;
                }
            }
            r.encode(&mut out, version)
        }
    };
    match encoded {
        Ok(()) => out.freeze(),
        Err(_) => frame,
    }
}
