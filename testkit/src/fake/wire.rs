//! The APIs the fake serves, and the bytes around them: request headers,
//! bodies decoded with kafka-protocol's broker-side types, responses encoded
//! with their header (<https://kafka.apache.org/protocol#protocol_messages>).
//!
//! The table below is the single source of truth for ApiVersions: an API
//! absent from it is absent from the ApiVersions answer, so clients see
//! `UNSUPPORTED_VERSION` (or refuse to send it) instead of waiting forever.

use bytes::{Buf, Bytes, BytesMut};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::{Decodable, Encodable};

/// Why a frame could not be turned into a request the fake serves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WireError {
    /// The header itself is malformed: the stream cannot be trusted.
    Header(String),
    /// An API key the fake does not serve (Kafka closes the connection).
    UnknownApi(i16),
    /// A served API at a version outside the advertised range.
    UnsupportedVersion {
        /// The API key.
        api_key: i16,
        /// The version asked for.
        version: i16,
        /// The correlation id, so ApiVersions can still be answered.
        correlation_id: i32,
    },
    /// The body does not decode at its declared version.
    Body(String),
}

impl std::fmt::Display for WireError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WireError::Header(e) => write!(f, "malformed request header: {e}"),
            WireError::UnknownApi(k) => write!(f, "API key {k} is not served by the fake"),
            WireError::UnsupportedVersion {
                api_key, version, ..
            } => write!(f, "API key {api_key} version {version} is not served"),
            WireError::Body(e) => write!(f, "malformed request body: {e}"),
        }
    }
}

/// The header fields a handler may need.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header {
    /// The API key.
    pub api_key: ApiKey,
    /// The request's version.
    pub version: i16,
    /// Echoed in the response.
    pub correlation_id: i32,
    /// The client's id, if it sent one.
    pub client_id: Option<String>,
}

macro_rules! served {
    ($($name:ident: $req:ident => $resp:ident, $min:expr, $max:expr;)*) => {
        /// A decoded request of an API the fake serves.
        #[derive(Debug, Clone, PartialEq)]
        #[allow(clippy::large_enum_variant)]
        pub enum FakeRequest {
            $(
                #[doc = concat!("A ", stringify!($name), " request.")]
                $name($req),
            )*
        }

        /// A response to a [`FakeRequest`].
        #[derive(Debug, Clone, PartialEq)]
        #[allow(clippy::large_enum_variant)]
        pub enum FakeResponse {
            $(
                #[doc = concat!("A ", stringify!($name), " response.")]
                $name($resp),
            )*
        }

        /// `(API key, min version, max version)` of every served API.
        pub const SERVED: &[(ApiKey, i16, i16)] = &[$((ApiKey::$name, $min, $max)),*];

        fn decode_body(key: ApiKey, body: &mut Bytes, version: i16) -> Result<FakeRequest, WireError> {
            let err = |e: anyhow_error::Error| WireError::Body(e.0);
            match key {
                $(ApiKey::$name => $req::decode(body, version)
                    .map(FakeRequest::$name)
                    .map_err(|e| err(e.into())),)*
                other => Err(WireError::UnknownApi(other as i16)),
            }
        }

        impl FakeRequest {
            /// The request's API key.
            pub fn api_key(&self) -> ApiKey {
                match self {
                    $(FakeRequest::$name(_) => ApiKey::$name,)*
                }
            }
        }

        impl FakeResponse {
            /// The response's API key.
            pub fn api_key(&self) -> ApiKey {
                match self {
                    $(FakeResponse::$name(_) => ApiKey::$name,)*
                }
            }

            fn encode_body(&self, out: &mut BytesMut, version: i16) -> Result<(), String> {
                match self {
                    $(FakeResponse::$name(r) => r.encode(out, version).map_err(|e| e.to_string()),)*
                }
            }
        }
    };
}

// Versions: the ranges Kafka 4 brokers accept, capped where a newer version
// needs a feature the fake does not model (AddPartitionsToTxn 4+ is
// broker-to-broker). Produce 13 and Fetch 13+ address topics by id
// (`topic_ids.rs`). Clients
// use transactions v2 (KIP-890) only where ApiVersions finalizes
// `transaction.version` 2, which the fake does when configured so.
// ListTransactions stops at v1: v2 adds a transactional id regex.
// SaslHandshake starts at v1: v0 is followed by raw, unframed SASL tokens,
// which the fake does not speak.
served! {
    ApiVersions: ApiVersionsRequest => ApiVersionsResponse, 0, 4;
    Metadata: MetadataRequest => MetadataResponse, 0, 12;
    CreateTopics: CreateTopicsRequest => CreateTopicsResponse, 2, 7;
    DeleteTopics: DeleteTopicsRequest => DeleteTopicsResponse, 1, 6;
    CreatePartitions: CreatePartitionsRequest => CreatePartitionsResponse, 0, 3;
    Produce: ProduceRequest => ProduceResponse, 3, 13;
    InitProducerId: InitProducerIdRequest => InitProducerIdResponse, 0, 5;
    Fetch: FetchRequest => FetchResponse, 4, 18;
    ListOffsets: ListOffsetsRequest => ListOffsetsResponse, 1, 9;
    OffsetForLeaderEpoch: OffsetForLeaderEpochRequest => OffsetForLeaderEpochResponse, 2, 4;
    DeleteRecords: DeleteRecordsRequest => DeleteRecordsResponse, 0, 2;
    FindCoordinator: FindCoordinatorRequest => FindCoordinatorResponse, 0, 6;
    JoinGroup: JoinGroupRequest => JoinGroupResponse, 0, 9;
    SyncGroup: SyncGroupRequest => SyncGroupResponse, 0, 5;
    Heartbeat: HeartbeatRequest => HeartbeatResponse, 0, 4;
    LeaveGroup: LeaveGroupRequest => LeaveGroupResponse, 0, 5;
    OffsetCommit: OffsetCommitRequest => OffsetCommitResponse, 2, 9;
    OffsetFetch: OffsetFetchRequest => OffsetFetchResponse, 1, 9;
    DescribeGroups: DescribeGroupsRequest => DescribeGroupsResponse, 0, 5;
    ListGroups: ListGroupsRequest => ListGroupsResponse, 0, 5;
    AddPartitionsToTxn: AddPartitionsToTxnRequest => AddPartitionsToTxnResponse, 0, 3;
    AddOffsetsToTxn: AddOffsetsToTxnRequest => AddOffsetsToTxnResponse, 0, 4;
    TxnOffsetCommit: TxnOffsetCommitRequest => TxnOffsetCommitResponse, 0, 5;
    EndTxn: EndTxnRequest => EndTxnResponse, 0, 5;
    ConsumerGroupHeartbeat: ConsumerGroupHeartbeatRequest => ConsumerGroupHeartbeatResponse, 0, 1;
    ConsumerGroupDescribe: ConsumerGroupDescribeRequest => ConsumerGroupDescribeResponse, 0, 1;
    ElectLeaders: ElectLeadersRequest => ElectLeadersResponse, 0, 2;
    StreamsGroupHeartbeat: StreamsGroupHeartbeatRequest => StreamsGroupHeartbeatResponse, 0, 1;
    StreamsGroupDescribe: StreamsGroupDescribeRequest => StreamsGroupDescribeResponse, 0, 1;
    DescribeConfigs: DescribeConfigsRequest => DescribeConfigsResponse, 1, 4;
    IncrementalAlterConfigs: IncrementalAlterConfigsRequest => IncrementalAlterConfigsResponse, 0, 1;
    DescribeCluster: DescribeClusterRequest => DescribeClusterResponse, 0, 2;
    DeleteGroups: DeleteGroupsRequest => DeleteGroupsResponse, 0, 2;
    OffsetDelete: OffsetDeleteRequest => OffsetDeleteResponse, 0, 0;
    DescribeProducers: DescribeProducersRequest => DescribeProducersResponse, 0, 0;
    DescribeTransactions: DescribeTransactionsRequest => DescribeTransactionsResponse, 0, 0;
    ListTransactions: ListTransactionsRequest => ListTransactionsResponse, 0, 1;
    DescribeAcls: DescribeAclsRequest => DescribeAclsResponse, 1, 3;
    CreateAcls: CreateAclsRequest => CreateAclsResponse, 1, 3;
    DeleteAcls: DeleteAclsRequest => DeleteAclsResponse, 1, 3;
    SaslHandshake: SaslHandshakeRequest => SaslHandshakeResponse, 1, 1;
    SaslAuthenticate: SaslAuthenticateRequest => SaslAuthenticateResponse, 0, 2;
}

/// kafka-protocol reports errors as `anyhow::Error`; keep only the text so
/// this crate needs no anyhow dependency.
mod anyhow_error {
    pub struct Error(pub String);
    impl<E: std::fmt::Display> From<E> for Error {
        fn from(e: E) -> Self {
            Error(e.to_string())
        }
    }
}

/// The served range of `key`, if any.
pub fn served_range(key: ApiKey) -> Option<(i16, i16)> {
    SERVED
        .iter()
        .find(|(k, _, _)| *k == key)
        .map(|(_, min, max)| (*min, *max))
}

/// Decodes one frame (size prefix already removed) into its header and body.
///
/// Decoding runs under `catch_unwind`: a defect in a generated decoder must
/// close one connection, never take the fake down.
pub fn decode_request(frame: Bytes) -> Result<(Header, FakeRequest), WireError> {
    std::panic::catch_unwind(move || decode_request_inner(frame))
        .unwrap_or_else(|_| Err(WireError::Body("decoder panicked".into())))
}

fn decode_request_inner(mut frame: Bytes) -> Result<(Header, FakeRequest), WireError> {
    if frame.remaining() < 8 {
        return Err(WireError::Header(format!("{} bytes", frame.len())));
    }
    let api_key = i16::from_be_bytes([frame[0], frame[1]]);
    let version = i16::from_be_bytes([frame[2], frame[3]]);
    let correlation_id = i32::from_be_bytes([frame[4], frame[5], frame[6], frame[7]]);
    let key = ApiKey::try_from(api_key).map_err(|_| WireError::UnknownApi(api_key))?;
    let Some((min, max)) = served_range(key) else {
        return Err(WireError::UnknownApi(api_key));
    };
    if version < min || version > max {
        return Err(WireError::UnsupportedVersion {
            api_key,
            version,
            correlation_id,
        });
    }
    let header_version = key.request_header_version(version);
    let header = RequestHeader::decode(&mut frame, header_version)
        .map_err(|e| WireError::Header(e.to_string()))?;
    let request = decode_body(key, &mut frame, version)?;
    if frame.has_remaining() {
        return Err(WireError::Body(format!(
            "{} trailing bytes after the body",
            frame.remaining()
        )));
    }
    Ok((
        Header {
            api_key: key,
            version,
            correlation_id,
            client_id: header.client_id.map(|c| c.to_string()),
        },
        request,
    ))
}

/// Encodes a whole response frame: size prefix, response header, body.
pub fn encode_response(
    response: &FakeResponse,
    version: i16,
    correlation_id: i32,
) -> Result<Bytes, String> {
    let key = response.api_key();
    let header_version = key.response_header_version(version);
    let mut out = BytesMut::with_capacity(256);
    out.extend_from_slice(&[0; 4]);
    ResponseHeader::default()
        .with_correlation_id(correlation_id)
        .encode(&mut out, header_version)
        .map_err(|e| e.to_string())?;
    response.encode_body(&mut out, version)?;
    let size = i32::try_from(out.len() - 4).map_err(|_| "response over 2 GiB".to_string())?;
    out[..4].copy_from_slice(&size.to_be_bytes());
    Ok(out.freeze())
}

/// The ApiVersions answer for an unsupported ApiVersions version: Kafka
/// answers at version 0 with `UNSUPPORTED_VERSION` and its ranges, so the
/// client can retry with a version both speak (KIP-511).
pub fn api_versions_fallback(correlation_id: i32) -> Result<Bytes, String> {
    let response = FakeResponse::ApiVersions(api_versions(35));
    encode_response(&response, 0, correlation_id)
}

/// `metadata.version` 33 (Kafka 4.4-IV2), the level a Kafka 4.4 cluster
/// finalizes; the lowest KRaft level is 7 (3.3-IV3).
const METADATA_VERSION: (i16, i16) = (7, 33);

/// The ApiVersions body listing [`SERVED`], the finalized
/// `metadata.version` (KIP-584, as every KRaft cluster has) and, from
/// level 2, the finalized `transaction.version` (KIP-890).
pub fn api_versions_with(error_code: i16, transaction_version: i16) -> ApiVersionsResponse {
    use kafka_protocol::messages::api_versions_response::{
        FinalizedFeatureKey, SupportedFeatureKey,
    };
    let mut features = vec![("metadata.version", METADATA_VERSION.0, METADATA_VERSION.1)];
    if transaction_version >= 2 {
        features.push(("transaction.version", 0, transaction_version));
    }
    api_versions(error_code)
        .with_supported_features(
            features
                .iter()
                .map(|(name, min, max)| {
                    SupportedFeatureKey::default()
                        .with_name(kafka_protocol::protocol::StrBytes::from_static_str(name))
                        .with_min_version(*min)
                        .with_max_version(*max)
                })
                .collect(),
        )
        .with_finalized_features_epoch(1)
        .with_finalized_features(
            features
                .iter()
                .map(|(name, _, level)| {
                    FinalizedFeatureKey::default()
                        .with_name(kafka_protocol::protocol::StrBytes::from_static_str(name))
                        .with_min_version_level(*level)
                        .with_max_version_level(*level)
                })
                .collect(),
        )
}

/// The ApiVersions body listing [`SERVED`].
pub fn api_versions(error_code: i16) -> ApiVersionsResponse {
    use kafka_protocol::messages::api_versions_response::ApiVersion;
    ApiVersionsResponse::default()
        .with_error_code(error_code)
        .with_api_keys(
            SERVED
                .iter()
                .map(|(k, min, max)| {
                    ApiVersion::default()
                        .with_api_key(*k as i16)
                        .with_min_version(*min)
                        .with_max_version(*max)
                })
                .collect(),
        )
}
