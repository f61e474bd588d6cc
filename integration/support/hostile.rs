//! A scriptable hostile broker on loopback (issue #9 part 3).
//!
//! It answers ApiVersions with every version kafka-protocol knows, answers
//! Metadata and FindCoordinator pointing at itself (so producers, consumers,
//! admins and group members all route here), and answers the data-path APIs
//! (Produce, Fetch, ListOffsets, InitProducerId, OffsetCommit), the
//! transaction APIs and a one-member classic group (JoinGroup, SyncGroup,
//! Heartbeat, OffsetFetch, LeaveGroup), a one-member KIP-848 group
//! (ConsumerGroupHeartbeat) and SASL with plausible bodies: PLAIN,
//! SCRAM-SHA-256/512 as a real server (RFC 5802: nonce, salt, iterations,
//! a server signature checked by the client) and OAUTHBEARER (RFC 7628).
//! Other APIs get an empty body. Per API key a [`Fault`] replaces the
//! honest answer. Responses are encoded with kafka-protocol's `Encodable`,
//! then corrupted on the wire.
//!
//! It also serves the connection-level frame tests (a single Metadata
//! request on a bare `Connection`), which once had a fake of their own.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use bytes::{Buf, BufMut, Bytes, BytesMut};
use kafka_protocol::messages::api_versions_response::ApiVersion;
use kafka_protocol::messages::fetch_response::{FetchableTopicResponse, PartitionData};
use kafka_protocol::messages::find_coordinator_response::Coordinator;
use kafka_protocol::messages::list_offsets_response::{
    ListOffsetsPartitionResponse, ListOffsetsTopicResponse,
};
use kafka_protocol::messages::metadata_response::{
    MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
};
use kafka_protocol::messages::offset_commit_response::{
    OffsetCommitResponsePartition, OffsetCommitResponseTopic,
};
use kafka_protocol::messages::produce_response::{PartitionProduceResponse, TopicProduceResponse};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use purekafka::protocol::compression::Compression;
use purekafka::protocol::records::RecordBatchBuilder;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// The only topic's id, so Fetch v13+ and Produce v13 can use topic ids.
pub const TOPIC_ID: u128 = 0x9e11_0000_0000_0000_0000_0000_0000_0001;

/// What the broker does instead of answering an API honestly.
#[derive(Clone, Debug)]
pub enum Fault {
    /// A correctly framed response (right correlation id) whose body is junk.
    Malformed,
    /// The size prefix and half the frame, then the socket closes.
    Truncated,
    /// A size prefix of this many bytes (meant to exceed the client's
    /// `purekafka.max.response.bytes`), followed by a few bytes of it.
    Oversized(i32),
    /// The honest response under another correlation id.
    WrongCorrelation,
    /// A negative size prefix.
    NegativeLength,
    /// A size prefix of `i32::MAX`.
    HugeLength,
    /// Fetch only: a record batch whose CRC-32C does not match.
    BadCrc,
    /// Fetch only: a small batch that inflates past the consumer's decode
    /// bound ([`BOMB_INFLATED`] bytes, more than [`BOMB_LIMIT`]).
    Bomb(Compression),
    /// The honest response with this error code wherever the API has one.
    ErrorCode(i16),
    /// Read the request and never answer (the connection stays open).
    Silent,
    /// Fetch only, a semantic lie: a batch of [`LIE_RECORDS`] records that
    /// starts 2 offsets below the fetch offset (records the consumer has
    /// already had).
    Rewound,
    /// Fetch only, a semantic lie: the batch at the fetch offset twice in
    /// one answer (the same offsets delivered twice).
    Duplicated,
    /// ApiVersions only, a lie about what is served: each listed API is
    /// claimed with this `(min, max)` range, or left out (`None`); the
    /// requests that follow are still answered honestly.
    Claims(Vec<(ApiKey, Option<(i16, i16)>)>),
    /// The honest answer held back until the next request's answer has
    /// been written (pipelined responses swapped).
    Swapped,
    /// The honest answer written one byte at a time, this long apart (a
    /// slow-drip broker).
    SlowDrip(std::time::Duration),
    /// Metadata only, a semantic lie from a lagging broker: the partition
    /// led by node 1 (an address nobody listens on) at leader epoch
    /// [`STALE_EPOCH`], below the honest [`LEADER_EPOCH`] (KIP-320).
    StaleEpoch,
    /// Fetch only, a semantic lie: a batch at the fetch offset whose
    /// header covers [`LIE_RECORDS`] offsets but whose records carry the
    /// offset deltas [`MISNUMBERED_DELTAS`] (repeated, backwards, past the
    /// batch's last offset); its CRC is correct.
    Misnumbered,
    /// ConsumerGroupHeartbeat only, a lie about the assignment: these
    /// (topic id, partitions) instead of `hostile-0`.
    Assigns(Vec<(u128, Vec<i32>)>),
    /// SaslAuthenticate only: a hostile SASL server message.
    Sasl(SaslLie),
    /// Read the request, then close the connection without an answer (a
    /// broker that drops a request it does not serve).
    Close,
    /// Fetch only: a batch of [`LIE_RECORDS`] records at the fetch offset
    /// (values: their offsets), answered this long after the request (an
    /// answer still in flight while the group moves the partition).
    LateRecords(std::time::Duration),
}

/// What a hostile SASL server says in its [`Fault::Sasl`] step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SaslLie {
    /// SCRAM server-first: a nonce that does not extend the client's.
    ScramNonce,
    /// SCRAM server-first: this iteration count.
    ScramIterations(u32),
    /// SCRAM server-first cut after the nonce (no salt, no iterations).
    ScramTruncated,
    /// SCRAM server-final: a verifier that is not the server signature.
    ScramSignature,
    /// SCRAM server-final: `e=invalid-proof`.
    ScramError,
    /// OAUTHBEARER: the RFC 7628 error challenge (`{"status":"invalid_token"}`)
    /// then, on the client's `%x01`, SASL_AUTHENTICATION_FAILED (as Kafka).
    OAuthError,
    /// OAUTHBEARER: the error challenge, then an empty success answer to
    /// the client's `%x01` (the client must still fail).
    OAuthErrorThenSuccess,
}

/// The leader epoch of every honest Metadata answer.
pub const LEADER_EPOCH: i32 = 7;
/// The leader epoch of the [`Fault::StaleEpoch`] lie.
pub const STALE_EPOCH: i32 = 3;
/// Offset deltas of the [`Fault::Misnumbered`] batch's records.
pub const MISNUMBERED_DELTAS: [u8; 5] = [0, 0, 3, 1, 9];
/// The SCRAM user the fake knows, and its password.
pub const SCRAM_USER: &str = "hostile-user";
/// The password of [`SCRAM_USER`].
pub const SCRAM_PASSWORD: &str = "hostile-password";
/// The iteration count of an honest SCRAM server-first message.
const SCRAM_ITERATIONS: u32 = 4096;

/// Records in each batch of the [`Fault::Rewound`] and
/// [`Fault::Duplicated`] lies; the answer's high watermark is past them.
pub const LIE_RECORDS: i64 = 5;

/// Per API key: the fault, and whether it applies to the next request only.
type Script = Arc<Mutex<HashMap<ApiKey, (Fault, bool)>>>;
/// Requests received per API key.
type Counts = Arc<Mutex<HashMap<ApiKey, usize>>>;
/// Epochs the client sent, in order: Fetch's current leader epoch,
/// ConsumerGroupHeartbeat's member epoch and OffsetCommit's generation or
/// member epoch.
type Epochs = Arc<Mutex<HashMap<ApiKey, Vec<i32>>>>;
/// When each request arrived, per API key.
type Arrivals = Arc<Mutex<HashMap<ApiKey, Vec<std::time::Instant>>>>;
/// One ConsumerGroupHeartbeat: when it arrived, and the owned partitions
/// it reported by topic id (`None`: unchanged since the last one).
pub type HeartbeatOwned = (std::time::Instant, Option<Vec<(u128, Vec<i32>)>>);
/// Every ConsumerGroupHeartbeat's [`HeartbeatOwned`], in order.
type Owned = Arc<Mutex<Vec<HeartbeatOwned>>>;

/// A running hostile broker; stops when the test's runtime ends.
pub struct HostileBroker {
    /// Its loopback port.
    pub port: u16,
    script: Script,
    counts: Counts,
    epochs: Epochs,
    arrivals: Arrivals,
    owned: Owned,
    lifetime_ms: Arc<std::sync::atomic::AtomicI64>,
}

impl HostileBroker {
    /// Binds an ephemeral loopback port and starts serving.
    pub async fn start() -> HostileBroker {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let script: Script = Arc::default();
        let counts: Counts = Arc::default();
        let epochs: Epochs = Arc::default();
        let arrivals: Arrivals = Arc::default();
        let owned: Owned = Arc::default();
        let lifetime_ms: Arc<std::sync::atomic::AtomicI64> = Arc::default();
        let seen = Seen {
            counts: counts.clone(),
            epochs: epochs.clone(),
            arrivals: arrivals.clone(),
            owned: owned.clone(),
            lifetime_ms: lifetime_ms.clone(),
        };
        let shared = script.clone();
        tokio::spawn(async move {
            loop {
                match listener.accept().await {
                    Ok((sock, _)) => {
                        tokio::spawn(serve(sock, port, shared.clone(), seen.clone()));
                    }
                    // A connection reset before it was taken, or a moment
                    // without descriptors (8 test threads at once): ending
                    // the loop would drop the listener, and every later
                    // connection would be refused (seen once in CI).
                    Err(_) => tokio::time::sleep(std::time::Duration::from_millis(10)).await,
                }
            }
        });
        HostileBroker {
            port,
            script,
            counts,
            epochs,
            arrivals,
            owned,
            lifetime_ms,
        }
    }

    /// From now on, every successful SaslAuthenticate answer grants a
    /// session of this many milliseconds (KIP-368; 0: no limit).
    pub fn session_lifetime_ms(&self, ms: i64) {
        self.lifetime_ms
            .store(ms, std::sync::atomic::Ordering::SeqCst);
    }

    /// When each `api` request so far arrived.
    pub fn arrivals(&self, api: ApiKey) -> Vec<std::time::Instant> {
        self.arrivals
            .lock()
            .unwrap()
            .get(&api)
            .cloned()
            .unwrap_or_default()
    }

    /// Per ConsumerGroupHeartbeat so far: when it arrived and the owned
    /// partitions it reported (`None`: unchanged since the last one).
    pub fn heartbeat_owned(&self) -> Vec<HeartbeatOwned> {
        self.owned.lock().unwrap().clone()
    }

    /// Starts a broker with one fault scripted.
    pub async fn with(api: ApiKey, fault: Fault) -> HostileBroker {
        let b = HostileBroker::start().await;
        b.script(api, fault);
        b
    }

    /// From now on, answers `api` with `fault`.
    pub fn script(&self, api: ApiKey, fault: Fault) {
        self.script.lock().unwrap().insert(api, (fault, false));
    }

    /// Answers the next `api` request with `fault`, later ones honestly.
    pub fn script_once(&self, api: ApiKey, fault: Fault) {
        self.script.lock().unwrap().insert(api, (fault, true));
    }

    /// How many `api` requests arrived so far.
    pub fn count(&self, api: ApiKey) -> usize {
        self.counts.lock().unwrap().get(&api).copied().unwrap_or(0)
    }

    /// The epochs the client sent in `api` requests so far (Fetch: the
    /// first partition's current leader epoch; ConsumerGroupHeartbeat: the
    /// member epoch; OffsetCommit: the generation or member epoch).
    pub fn epochs(&self, api: ApiKey) -> Vec<i32> {
        self.epochs
            .lock()
            .unwrap()
            .get(&api)
            .cloned()
            .unwrap_or_default()
    }

    /// `127.0.0.1:<port>`.
    pub fn bootstrap(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }
}

async fn read_frame(sock: &mut TcpStream) -> Option<Bytes> {
    let size = sock.read_i32().await.ok()?;
    let size = usize::try_from(size).ok().filter(|s| *s <= 64 << 20)?;
    let mut buf = vec![0u8; size];
    sock.read_exact(&mut buf).await.ok()?;
    Some(buf.into())
}

/// What the broker records about the requests it gets, and the session
/// lifetime its SASL answers grant.
#[derive(Clone)]
struct Seen {
    counts: Counts,
    epochs: Epochs,
    arrivals: Arrivals,
    owned: Owned,
    lifetime_ms: Arc<std::sync::atomic::AtomicI64>,
}

async fn serve(mut sock: TcpStream, port: u16, script: Script, seen: Seen) {
    // An answer held back by `Fault::Swapped`, written after the next one.
    let mut held: Option<BytesMut> = None;
    // This connection's SASL exchange.
    let mut sasl = SaslServer::default();
    while let Some(frame) = read_frame(&mut sock).await {
        let Some((key, version, corr, request)) = parse_request(frame) else {
            return;
        };
        let now = std::time::Instant::now();
        *seen.counts.lock().unwrap().entry(key).or_default() += 1;
        seen.arrivals
            .lock()
            .unwrap()
            .entry(key)
            .or_default()
            .push(now);
        if let Some(Req::ConsumerGroupHeartbeat(r)) = &request {
            let owned = r.topic_partitions.as_ref().map(|ts| {
                ts.iter()
                    .map(|t| (t.topic_id.as_u128(), t.partitions.clone()))
                    .collect()
            });
            seen.owned.lock().unwrap().push((now, owned));
        }
        sasl.lifetime_ms = seen.lifetime_ms.load(std::sync::atomic::Ordering::SeqCst);
        let epoch = match &request {
            Some(Req::Fetch(r)) => r
                .topics
                .first()
                .and_then(|t| t.partitions.first())
                .map(|p| p.current_leader_epoch),
            Some(Req::ConsumerGroupHeartbeat(r)) => Some(r.member_epoch),
            Some(Req::OffsetCommit(r)) => Some(r.generation_id_or_member_epoch),
            _ => None,
        };
        if let Some(epoch) = epoch {
            seen.epochs
                .lock()
                .unwrap()
                .entry(key)
                .or_default()
                .push(epoch);
        }
        let fault = {
            let mut script = script.lock().unwrap();
            match script.get(&key).cloned() {
                Some((fault, true)) => {
                    script.remove(&key);
                    Some(fault)
                }
                other => other.map(|(fault, _)| fault),
            }
        };
        // ApiVersions is honest but for `Claims`: the tests are about what
        // follows it.
        let fault = match (key, fault) {
            (ApiKey::ApiVersions, Some(Fault::Claims(c))) => Some(Fault::Claims(c)),
            (ApiKey::ApiVersions, _) => None,
            (_, fault) => fault,
        };
        let body = honest_body(key, version, port, request, fault.as_ref(), &mut sasl);
        let mut header = BytesMut::new();
        let header_version = key.response_header_version(version);
        let mut out = BytesMut::new();
        let answer = |corr: i32, header: &mut BytesMut, body: &[u8], out: &mut BytesMut| {
            ResponseHeader::default()
                .with_correlation_id(corr)
                .encode(header, header_version)
                .expect("header");
            out.put_i32((header.len() + body.len()) as i32);
            out.put_slice(header);
            out.put_slice(body);
        };
        match fault {
            None
            | Some(
                Fault::ErrorCode(_)
                | Fault::BadCrc
                | Fault::Bomb(_)
                | Fault::Rewound
                | Fault::Duplicated
                | Fault::Claims(_)
                | Fault::StaleEpoch
                | Fault::Misnumbered
                | Fault::Assigns(_)
                | Fault::Sasl(_),
            ) => answer(corr, &mut header, &body, &mut out),
            Some(Fault::LateRecords(after)) => {
                answer(corr, &mut header, &body, &mut out);
                tokio::time::sleep(after).await;
            }
            Some(Fault::Close) => return,
            Some(Fault::Swapped) => {
                answer(corr, &mut header, &body, &mut out);
                held = Some(out);
                continue;
            }
            Some(Fault::SlowDrip(every)) => {
                answer(corr, &mut header, &body, &mut out);
                for byte in out.chunks(1) {
                    if sock.write_all(byte).await.is_err() {
                        return;
                    }
                    tokio::time::sleep(every).await;
                }
                continue;
            }
            Some(Fault::Malformed) => answer(corr, &mut header, &[0xff; 9], &mut out),
            Some(Fault::WrongCorrelation) => {
                answer(corr.wrapping_add(1000), &mut header, &body, &mut out)
            }
            Some(Fault::Truncated) => {
                answer(corr, &mut header, &body, &mut out);
                let half = out.len() / 2;
                let _ = sock.write_all(&out[..half.max(5)]).await;
                return;
            }
            Some(Fault::Oversized(size)) => {
                out.put_i32(size);
                out.put_i32(corr);
                out.put_slice(&[0; 64]);
            }
            Some(Fault::NegativeLength) => out.put_i32(-7),
            Some(Fault::HugeLength) => out.put_i32(i32::MAX),
            Some(Fault::Silent) => {
                // Keep reading (and ignoring) so the client sees an open, mute peer.
                while read_frame(&mut sock).await.is_some() {}
                return;
            }
        }
        if let Some(earlier) = held.take() {
            out.extend_from_slice(&earlier);
        }
        if sock.write_all(&out).await.is_err() {
            return;
        }
    }
}

fn parse_request(mut frame: Bytes) -> Option<(ApiKey, i16, i32, Option<Req>)> {
    if frame.len() < 8 {
        return None;
    }
    let key = ApiKey::try_from((&frame[..2]).get_i16()).ok()?;
    let version = (&frame[2..4]).get_i16();
    let corr = (&frame[4..8]).get_i32();
    RequestHeader::decode(&mut frame, key.request_header_version(version)).ok()?;
    let request = match key {
        ApiKey::Metadata => MetadataRequest::decode(&mut frame, version).map(Req::Metadata),
        ApiKey::FindCoordinator => {
            FindCoordinatorRequest::decode(&mut frame, version).map(Req::FindCoordinator)
        }
        ApiKey::Produce => ProduceRequest::decode(&mut frame, version).map(Req::Produce),
        ApiKey::Fetch => FetchRequest::decode(&mut frame, version).map(Req::Fetch),
        ApiKey::ListOffsets => {
            ListOffsetsRequest::decode(&mut frame, version).map(Req::ListOffsets)
        }
        ApiKey::OffsetCommit => {
            OffsetCommitRequest::decode(&mut frame, version).map(Req::OffsetCommit)
        }
        ApiKey::CreateTopics => {
            CreateTopicsRequest::decode(&mut frame, version).map(Req::CreateTopics)
        }
        ApiKey::AddPartitionsToTxn => {
            AddPartitionsToTxnRequest::decode(&mut frame, version).map(Req::AddPartitionsToTxn)
        }
        ApiKey::TxnOffsetCommit => {
            TxnOffsetCommitRequest::decode(&mut frame, version).map(Req::TxnOffsetCommit)
        }
        ApiKey::InitProducerId => {
            InitProducerIdRequest::decode(&mut frame, version).map(Req::InitProducerId)
        }
        ApiKey::JoinGroup => JoinGroupRequest::decode(&mut frame, version).map(Req::JoinGroup),
        ApiKey::SyncGroup => SyncGroupRequest::decode(&mut frame, version).map(Req::SyncGroup),
        ApiKey::ConsumerGroupHeartbeat => {
            ConsumerGroupHeartbeatRequest::decode(&mut frame, version)
                .map(Req::ConsumerGroupHeartbeat)
        }
        ApiKey::SaslHandshake => {
            SaslHandshakeRequest::decode(&mut frame, version).map(Req::SaslHandshake)
        }
        ApiKey::SaslAuthenticate => {
            SaslAuthenticateRequest::decode(&mut frame, version).map(Req::SaslAuthenticate)
        }
        _ => return Some((key, version, corr, None)),
    }
    .ok();
    Some((key, version, corr, request))
}

/// The requests whose answers depend on what was asked.
enum Req {
    Metadata(MetadataRequest),
    FindCoordinator(FindCoordinatorRequest),
    Produce(ProduceRequest),
    Fetch(FetchRequest),
    ListOffsets(ListOffsetsRequest),
    OffsetCommit(OffsetCommitRequest),
    CreateTopics(CreateTopicsRequest),
    AddPartitionsToTxn(AddPartitionsToTxnRequest),
    TxnOffsetCommit(TxnOffsetCommitRequest),
    InitProducerId(InitProducerIdRequest),
    JoinGroup(JoinGroupRequest),
    SyncGroup(SyncGroupRequest),
    ConsumerGroupHeartbeat(ConsumerGroupHeartbeatRequest),
    SaslHandshake(SaslHandshakeRequest),
    SaslAuthenticate(SaslAuthenticateRequest),
}

fn name(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_owned())
}

fn uuid() -> uuid::Uuid {
    uuid::Uuid::from_u128(TOPIC_ID)
}

/// A record batch at `offset` for the BadCrc and Bomb faults.
fn hostile_records(fault: &Fault, offset: i64) -> Option<Bytes> {
    match fault {
        Fault::BadCrc => {
            let mut b = RecordBatchBuilder::new().base_offset(offset);
            b.append(0, Some(b"k"), Some(b"value"), &[]).unwrap();
            let mut batch = b.finish().unwrap();
            // CRC-32C sits at bytes 17..21 of the batch header.
            batch[17] ^= 0xff;
            Some(batch.freeze())
        }
        Fault::Bomb(codec) if offset == 0 => Some(bomb(*codec)),
        Fault::Rewound => Some(numbered_batch((offset - 2).max(0)).freeze()),
        Fault::Duplicated => {
            let mut twice = numbered_batch(offset);
            twice.extend_from_slice(&numbered_batch(offset).freeze());
            Some(twice.freeze())
        }
        Fault::Misnumbered => Some(misnumbered_batch(offset)),
        Fault::LateRecords(_) => Some(numbered_batch(offset).freeze()),
        _ => None,
    }
}

/// [`numbered_batch`] at `base` with each record's offset delta replaced
/// by [`MISNUMBERED_DELTAS`] and the CRC recomputed, so only the offsets
/// lie. Each record is small enough that its length, timestamp delta and
/// offset delta are one varint byte each.
fn misnumbered_batch(base: i64) -> Bytes {
    let mut batch = numbered_batch(base);
    // Records follow the 61-byte batch header: length, attributes,
    // timestamp delta, offset delta.
    let mut at = 61;
    for delta in MISNUMBERED_DELTAS {
        let len = usize::from(batch[at] >> 1);
        batch[at + 3] = delta << 1; // zigzag
        at += 1 + len;
    }
    assert_eq!(at, batch.len(), "every record rewritten");
    let crc = crc32c::crc32c(&batch[21..]);
    batch[17..21].copy_from_slice(&crc.to_be_bytes());
    batch.freeze()
}

/// [`LIE_RECORDS`] records from `base`, each holding its own offset as
/// its value.
fn numbered_batch(base: i64) -> BytesMut {
    let mut b = RecordBatchBuilder::new().base_offset(base);
    for off in base..base + LIE_RECORDS {
        b.append(0, None, Some(off.to_string().as_bytes()), &[])
            .unwrap();
    }
    b.finish().unwrap()
}

/// Bytes of zeros in a bomb's one record: past the
/// `purekafka.max.decompressed.bytes` the hostile tests configure
/// ([`BOMB_LIMIT`]).
pub const BOMB_INFLATED: usize = 5 << 20;
/// The decompression bound the hostile tests give the consumer.
pub const BOMB_LIMIT: usize = 4 << 20;

/// One record of [`BOMB_INFLATED`] zeros at offset 0, compressed: a few
/// hundred KiB on the wire at most, past [`BOMB_LIMIT`] once inflated.
/// Built once per codec.
pub fn bomb(codec: Compression) -> Bytes {
    static BOMBS: Mutex<Vec<(Compression, Bytes)>> = Mutex::new(Vec::new());
    let mut bombs = BOMBS.lock().unwrap();
    if let Some((_, b)) = bombs.iter().find(|(c, _)| *c == codec) {
        return b.clone();
    }
    let zeros = vec![0u8; BOMB_INFLATED];
    let mut b = RecordBatchBuilder::new().compression(codec, None).unwrap();
    b.append(0, None, Some(&zeros), &[]).unwrap();
    let batch = b.finish().unwrap().freeze();
    bombs.push((codec, batch.clone()));
    batch
}

fn honest_body(
    key: ApiKey,
    version: i16,
    port: u16,
    request: Option<Req>,
    fault: Option<&Fault>,
    sasl: &mut SaslServer,
) -> BytesMut {
    let code = match fault {
        Some(Fault::ErrorCode(c)) => *c,
        _ => 0,
    };
    let mut out = BytesMut::new();
    let encoded = match (key, request) {
        (ApiKey::ApiVersions, _) => {
            let claims = match fault {
                Some(Fault::Claims(c)) => c.clone(),
                _ => Vec::new(),
            };
            let mut r = ApiVersionsResponse::default();
            r.api_keys = ApiKey::iter()
                .filter_map(|k| {
                    let v = k.valid_versions();
                    let (min, max) = match claims.iter().find(|(c, _)| *c == k) {
                        Some((_, claim)) => (*claim)?,
                        None => (v.min, v.max),
                    };
                    Some(
                        ApiVersion::default()
                            .with_api_key(k as i16)
                            .with_min_version(min)
                            .with_max_version(max),
                    )
                })
                .collect();
            r.encode(&mut out, version)
        }
        (ApiKey::Metadata, Some(Req::Metadata(req))) => {
            let mut r = MetadataResponse::default();
            let mut broker = MetadataResponseBroker::default();
            broker.node_id = BrokerId(0);
            broker.host = name("127.0.0.1");
            broker.port = i32::from(port);
            r.brokers = vec![broker];
            let stale = matches!(fault, Some(Fault::StaleEpoch));
            if stale {
                // Node 1 at port 1: nothing listens there.
                let mut gone = MetadataResponseBroker::default();
                gone.node_id = BrokerId(1);
                gone.host = name("127.0.0.1");
                gone.port = 1;
                r.brokers.push(gone);
            }
            let (leader, epoch) = if stale {
                (1, STALE_EPOCH)
            } else {
                (0, LEADER_EPOCH)
            };
            r.cluster_id = Some(name("hostile"));
            r.controller_id = BrokerId(0);
            let names: Vec<String> = match req.topics {
                Some(ts) if !ts.is_empty() => ts
                    .into_iter()
                    .filter_map(|t| t.name.map(|n| n.0.to_string()))
                    .collect(),
                _ => vec!["hostile".to_owned()],
            };
            r.topics = names
                .into_iter()
                .map(|n: String| {
                    let mut p = MetadataResponsePartition::default();
                    p.leader_id = BrokerId(leader);
                    p.leader_epoch = epoch;
                    p.replica_nodes = vec![BrokerId(0), BrokerId(1)];
                    p.isr_nodes = vec![BrokerId(leader)];
                    let mut t = MetadataResponseTopic::default();
                    t.error_code = code;
                    t.name = Some(TopicName(name(&n)));
                    t.topic_id = uuid();
                    t.partitions = vec![p];
                    t
                })
                .collect();
            r.encode(&mut out, version)
        }
        (ApiKey::FindCoordinator, Some(Req::FindCoordinator(req))) => {
            // v0-3 answer one key at the top level; v4+ a list of keys.
            let mut r = FindCoordinatorResponse::default();
            if version < 4 {
                r.error_code = code;
                r.node_id = BrokerId(0);
                r.host = name("127.0.0.1");
                r.port = i32::from(port);
            } else {
                let keys = if req.coordinator_keys.is_empty() {
                    vec![req.key]
                } else {
                    req.coordinator_keys
                };
                r.coordinators = keys
                    .into_iter()
                    .map(|k| {
                        let mut c = Coordinator::default();
                        c.key = k;
                        c.node_id = BrokerId(0);
                        c.host = name("127.0.0.1");
                        c.port = i32::from(port);
                        c.error_code = code;
                        c
                    })
                    .collect();
            }
            r.encode(&mut out, version)
        }
        (ApiKey::Produce, Some(Req::Produce(req))) => {
            let mut r = ProduceResponse::default();
            r.responses = req
                .topic_data
                .into_iter()
                .map(|t| {
                    let mut tr = TopicProduceResponse::default();
                    tr.name = t.name;
                    tr.topic_id = t.topic_id;
                    tr.partition_responses = t
                        .partition_data
                        .into_iter()
                        .map(|p| {
                            let mut pr = PartitionProduceResponse::default();
                            pr.index = p.index;
                            pr.error_code = code;
                            pr
                        })
                        .collect();
                    tr
                })
                .collect();
            r.encode(&mut out, version)
        }
        (ApiKey::Fetch, Some(Req::Fetch(req))) => {
            let mut r = FetchResponse::default();
            r.responses = req
                .topics
                .into_iter()
                .map(|t| {
                    let mut tr = FetchableTopicResponse::default();
                    tr.topic = t.topic;
                    tr.topic_id = t.topic_id;
                    tr.partitions = t
                        .partitions
                        .into_iter()
                        .map(|p| {
                            let mut pd = PartitionData::default();
                            pd.partition_index = p.partition;
                            pd.error_code = code;
                            let end = match fault {
                                Some(
                                    Fault::Rewound
                                    | Fault::Duplicated
                                    | Fault::Misnumbered
                                    | Fault::LateRecords(_),
                                ) => p.fetch_offset + LIE_RECORDS + 1,
                                _ => p.fetch_offset + 1,
                            };
                            pd.high_watermark = end;
                            pd.last_stable_offset = end;
                            pd.records = fault.and_then(|f| hostile_records(f, p.fetch_offset));
                            pd
                        })
                        .collect();
                    tr
                })
                .collect();
            r.encode(&mut out, version)
        }
        (ApiKey::ListOffsets, Some(Req::ListOffsets(req))) => {
            let mut r = ListOffsetsResponse::default();
            r.topics = req
                .topics
                .into_iter()
                .map(|t| {
                    let mut tr = ListOffsetsTopicResponse::default();
                    tr.name = t.name;
                    tr.partitions = t
                        .partitions
                        .into_iter()
                        .map(|p| {
                            let mut pr = ListOffsetsPartitionResponse::default();
                            pr.partition_index = p.partition_index;
                            pr.error_code = code;
                            pr.offset = 0;
                            pr
                        })
                        .collect();
                    tr
                })
                .collect();
            r.encode(&mut out, version)
        }
        (ApiKey::OffsetCommit, Some(Req::OffsetCommit(req))) => {
            let mut r = OffsetCommitResponse::default();
            r.topics = req
                .topics
                .into_iter()
                .map(|t| {
                    let mut tr = OffsetCommitResponseTopic::default();
                    tr.name = t.name;
                    tr.topic_id = t.topic_id;
                    tr.partitions = t
                        .partitions
                        .into_iter()
                        .map(|p| {
                            let mut pr = OffsetCommitResponsePartition::default();
                            pr.partition_index = p.partition_index;
                            pr.error_code = code;
                            pr
                        })
                        .collect();
                    tr
                })
                .collect();
            r.encode(&mut out, version)
        }
        (ApiKey::InitProducerId, req) => {
            let mut r = InitProducerIdResponse::default();
            r.error_code = code;
            r.producer_id = ProducerId(1);
            // A bump (KIP-360) names the current id and epoch: the next one.
            if let Some(Req::InitProducerId(req)) = req {
                if req.producer_id.0 >= 0 {
                    r.producer_epoch = req.producer_epoch.wrapping_add(1);
                }
            }
            r.encode(&mut out, version)
        }
        (ApiKey::CreateTopics, Some(Req::CreateTopics(req))) => {
            let mut r = CreateTopicsResponse::default();
            r.topics = req
                .topics
                .into_iter()
                .map(|t| {
                    let mut tr = create_topics_response::CreatableTopicResult::default();
                    tr.name = t.name;
                    tr.error_code = code;
                    tr
                })
                .collect();
            r.encode(&mut out, version)
        }
        (ApiKey::DescribeCluster, _) => {
            let mut r = DescribeClusterResponse::default();
            r.error_code = code;
            r.encode(&mut out, version)
        }
        (ApiKey::ListGroups, _) => {
            let mut r = ListGroupsResponse::default();
            r.error_code = code;
            r.encode(&mut out, version)
        }
        (ApiKey::Heartbeat, _) => {
            let mut r = HeartbeatResponse::default();
            r.error_code = code;
            r.encode(&mut out, version)
        }
        (ApiKey::AddPartitionsToTxn, Some(Req::AddPartitionsToTxn(req))) => {
            let mut r = AddPartitionsToTxnResponse::default();
            if version >= 4 {
                r.error_code = code;
            }
            r.results_by_topic_v3_and_below = req
                .v3_and_below_topics
                .into_iter()
                .map(|t| {
                    let mut tr = add_partitions_to_txn_response::AddPartitionsToTxnTopicResult::default();
                    tr.name = t.name;
                    tr.results_by_partition = t
                        .partitions
                        .into_iter()
                        .map(|p| {
                            let mut pr = add_partitions_to_txn_response::AddPartitionsToTxnPartitionResult::default();
                            pr.partition_index = p;
                            pr.partition_error_code = code;
                            pr
                        })
                        .collect();
                    tr
                })
                .collect();
            r.encode(&mut out, version)
        }
        // No committed offsets: positions come from auto.offset.reset.
        (ApiKey::OffsetFetch, _) => {
            let mut r = OffsetFetchResponse::default();
            r.error_code = code;
            r.encode(&mut out, version)
        }
        (ApiKey::LeaveGroup, _) => {
            let mut r = LeaveGroupResponse::default();
            r.error_code = code;
            r.encode(&mut out, version)
        }
        (ApiKey::SaslHandshake, req) => {
            if let Some(Req::SaslHandshake(req)) = req {
                sasl.mechanism = req.mechanism.to_string();
            }
            let mut r = SaslHandshakeResponse::default();
            r.error_code = code;
            r.mechanisms = ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"]
                .into_iter()
                .map(name)
                .collect();
            r.encode(&mut out, version)
        }
        (ApiKey::SaslAuthenticate, req) => {
            let lie = match fault {
                Some(Fault::Sasl(lie)) => Some(*lie),
                _ => None,
            };
            let client = match req {
                Some(Req::SaslAuthenticate(req)) => req.auth_bytes,
                _ => Bytes::new(),
            };
            let (refused, auth) = sasl.answer(&client, lie);
            let mut r = SaslAuthenticateResponse::default();
            r.error_code = if refused { 58 } else { code };
            r.error_message = (r.error_code != 0).then(|| name("hostile refusal"));
            if r.error_code == 0 {
                r.session_lifetime_ms = sasl.lifetime_ms;
            }
            r.auth_bytes = auth;
            r.encode(&mut out, version)
        }
        (ApiKey::ConsumerGroupHeartbeat, Some(Req::ConsumerGroupHeartbeat(req))) => {
            let mut r = ConsumerGroupHeartbeatResponse::default();
            r.error_code = code;
            r.error_message = (code != 0).then(|| name("hostile refusal"));
            r.member_id = Some(req.member_id);
            r.heartbeat_interval_ms = 200;
            if req.member_epoch < 0 {
                // Leaving.
                r.member_epoch = req.member_epoch;
                return encode_or_panic(r, version);
            }
            r.member_epoch = req.member_epoch.max(0) + 1;
            let owned: Vec<(u128, Vec<i32>)> = match fault {
                Some(Fault::Assigns(a)) => a.clone(),
                _ => vec![(TOPIC_ID, vec![0])],
            };
            let mut a = consumer_group_heartbeat_response::Assignment::default();
            a.topic_partitions = owned
                .into_iter()
                .map(|(id, ps)| {
                    let mut t = consumer_group_heartbeat_response::TopicPartitions::default();
                    t.topic_id = uuid::Uuid::from_u128(id);
                    t.partitions = ps;
                    t
                })
                .collect();
            r.assignment = Some(a);
            r.encode(&mut out, version)
        }
        (ApiKey::AddOffsetsToTxn, _) => {
            let mut r = AddOffsetsToTxnResponse::default();
            r.error_code = code;
            r.encode(&mut out, version)
        }
        (ApiKey::EndTxn, _) => {
            let mut r = EndTxnResponse::default();
            r.error_code = code;
            r.producer_id = ProducerId(-1);
            r.producer_epoch = -1;
            r.encode(&mut out, version)
        }
        (ApiKey::TxnOffsetCommit, Some(Req::TxnOffsetCommit(req))) => {
            let mut r = TxnOffsetCommitResponse::default();
            r.topics = req
                .topics
                .into_iter()
                .map(|t| {
                    let mut tr = txn_offset_commit_response::TxnOffsetCommitResponseTopic::default();
                    tr.name = t.name;
                    tr.partitions = t
                        .partitions
                        .into_iter()
                        .map(|p| {
                            let mut pr = txn_offset_commit_response::TxnOffsetCommitResponsePartition::default();
                            pr.partition_index = p.partition_index;
                            pr.error_code = code;
                            pr
                        })
                        .collect();
                    tr
                })
                .collect();
            r.encode(&mut out, version)
        }
        // One-member groups: the joiner leads, and its own subscription is
        // echoed back for it to assign.
        (ApiKey::JoinGroup, Some(Req::JoinGroup(req))) => {
            let mut r = JoinGroupResponse::default();
            r.error_code = code;
            if req.member_id.is_empty() && version >= 4 && code == 0 {
                // KIP-394: the first join is answered with a member id to rejoin with.
                r.error_code = 79; // MEMBER_ID_REQUIRED
                r.member_id = name("hostile-member");
                return encode_or_panic(r, version);
            }
            let member = if req.member_id.is_empty() {
                name("hostile-member")
            } else {
                req.member_id
            };
            let protocol = req.protocols.first();
            r.generation_id = 1;
            r.protocol_type = Some(name("consumer"));
            r.protocol_name = protocol.map(|p| p.name.clone());
            r.leader = member.clone();
            r.member_id = member.clone();
            let mut m = join_group_response::JoinGroupResponseMember::default();
            m.member_id = member;
            m.group_instance_id = req.group_instance_id;
            m.metadata = protocol.map(|p| p.metadata.clone()).unwrap_or_default();
            r.members = vec![m];
            r.encode(&mut out, version)
        }
        (ApiKey::SyncGroup, Some(Req::SyncGroup(req))) => {
            let mut r = SyncGroupResponse::default();
            r.error_code = code;
            r.protocol_type = req.protocol_type;
            r.protocol_name = req.protocol_name;
            r.assignment = req
                .assignments
                .into_iter()
                .find(|a| a.member_id == req.member_id)
                .map(|a| a.assignment)
                .unwrap_or_default();
            r.encode(&mut out, version)
        }
        // Anything else: no body at all, which the client must refuse as
        // malformed.
        _ => Ok(()),
    };
    encoded.expect("encode response");
    out
}

fn encode_or_panic<M: Encodable>(msg: M, version: i16) -> BytesMut {
    let mut out = BytesMut::new();
    msg.encode(&mut out, version).expect("encode response");
    out
}

/// The server side of one connection's SASL exchange.
#[derive(Default)]
struct SaslServer {
    /// The mechanism named in SaslHandshake.
    mechanism: String,
    /// The session lifetime (KIP-368) a successful answer grants.
    lifetime_ms: i64,
    /// SCRAM: client-first-message-bare and server-first-message, for the
    /// AuthMessage the signatures cover.
    scram: Option<(String, String)>,
}

impl SaslServer {
    /// The answer to one SaslAuthenticate: (refuse with
    /// SASL_AUTHENTICATION_FAILED, auth bytes). `lie` replaces the honest
    /// message of the step it belongs to.
    fn answer(&mut self, client: &[u8], lie: Option<SaslLie>) -> (bool, Bytes) {
        use base64::engine::general_purpose::STANDARD as B64;
        use base64::Engine;
        const SALT: &[u8] = b"hostile-salt";
        if client == [1] {
            // RFC 7628 3.2.3: the client acknowledged our error challenge.
            return (lie != Some(SaslLie::OAuthErrorThenSuccess), Bytes::new());
        }
        if client.starts_with(b"n,,\x01auth=") {
            return match lie {
                Some(SaslLie::OAuthError | SaslLie::OAuthErrorThenSuccess) => (
                    false,
                    Bytes::from_static(br#"{"status":"invalid_token","scope":"kafka"}"#),
                ),
                _ => (false, Bytes::new()),
            };
        }
        let text = String::from_utf8_lossy(client).into_owned();
        if let Some(bare) = text.strip_prefix("n,,").filter(|b| b.starts_with("n=")) {
            let client_nonce = bare
                .split(',')
                .find_map(|a| a.strip_prefix("r="))
                .unwrap_or("");
            let nonce = match lie {
                Some(SaslLie::ScramNonce) => "someone-elses-nonce-hostile".to_owned(),
                _ => format!("{client_nonce}hostile"),
            };
            let iterations = match lie {
                Some(SaslLie::ScramIterations(i)) => i,
                _ => SCRAM_ITERATIONS,
            };
            let first = match lie {
                Some(SaslLie::ScramTruncated) => format!("r={nonce}"),
                _ => format!("r={nonce},s={},i={iterations}", B64.encode(SALT)),
            };
            self.scram = Some((bare.to_owned(), first.clone()));
            return (false, Bytes::from(first.into_bytes()));
        }
        if let (Some(without_proof), Some((bare, first))) = (
            text.split(",p=").next().filter(|_| text.starts_with("c=")),
            &self.scram,
        ) {
            if lie == Some(SaslLie::ScramError) {
                return (false, Bytes::from_static(b"e=invalid-proof"));
            }
            let auth_message = format!("{bare},{first},{without_proof}");
            let mut signature = server_signature(&self.mechanism, SALT, &auth_message);
            if lie == Some(SaslLie::ScramSignature) {
                signature[0] ^= 0xff;
            }
            return (
                false,
                Bytes::from(format!("v={}", B64.encode(signature)).into_bytes()),
            );
        }
        // PLAIN, or an honest OAUTHBEARER token: accepted.
        (false, Bytes::new())
    }
}

/// RFC 5802's ServerSignature for [`SCRAM_PASSWORD`] under `mechanism`
/// (SCRAM-SHA-512, or SHA-256 for anything else). The salted passwords
/// (PBKDF2, slow in a debug build) are computed once per process.
fn server_signature(mechanism: &str, salt: &[u8], auth_message: &str) -> Vec<u8> {
    use hmac::{Hmac, Mac};
    use sha2::{Sha256, Sha512};
    use std::sync::OnceLock;
    static SALTED_256: OnceLock<[u8; 32]> = OnceLock::new();
    static SALTED_512: OnceLock<[u8; 64]> = OnceLock::new();
    let password = SCRAM_PASSWORD.as_bytes();
    let iterations = SCRAM_ITERATIONS;
    if mechanism == "SCRAM-SHA-512" {
        let salted = SALTED_512.get_or_init(|| {
            let mut salted = [0u8; 64];
            pbkdf2::pbkdf2_hmac::<Sha512>(password, salt, iterations, &mut salted);
            salted
        });
        let mut key = <Hmac<Sha512> as Mac>::new_from_slice(salted).unwrap();
        key.update(b"Server Key");
        let key = key.finalize().into_bytes();
        let mut sig = <Hmac<Sha512> as Mac>::new_from_slice(&key).unwrap();
        sig.update(auth_message.as_bytes());
        sig.finalize().into_bytes().to_vec()
    } else {
        let salted = SALTED_256.get_or_init(|| {
            let mut salted = [0u8; 32];
            pbkdf2::pbkdf2_hmac::<Sha256>(password, salt, iterations, &mut salted);
            salted
        });
        let mut key = <Hmac<Sha256> as Mac>::new_from_slice(salted).unwrap();
        key.update(b"Server Key");
        let key = key.finalize().into_bytes();
        let mut sig = <Hmac<Sha256> as Mac>::new_from_slice(&key).unwrap();
        sig.update(auth_message.as_bytes());
        sig.finalize().into_bytes().to_vec()
    }
}
