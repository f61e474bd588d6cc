//! Request and response framing: the 4-byte size prefix, request and response
//! headers, and correlation ids (<https://kafka.apache.org/protocol#protocol_common>).
//!
//! Bodies are encoded and decoded with the `kafka-protocol` crate's message
//! types. Framing is split in two so that the connection task stays generic:
//! callers encode a body ([`encode_body`]), the connection prepends the header
//! ([`encode_request`]) once it has assigned a correlation id, and splits
//! frames from the byte stream ([`split_frame`]) before handing each one back
//! to the caller to decode ([`decode_response`]).
//!
//! Internal: hidden from the documentation unless the `internals` feature is
//! on, with no stability promise.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use kafka_protocol::messages::{ApiKey, RequestHeader, ResponseHeader};
use kafka_protocol::protocol::{Decodable, Encodable, Request, StrBytes};

use super::ProtocolError;

mod body;
mod produce;

pub use body::{FrameBuf, RequestBody};
pub use produce::{encode_produce, ProduceHeader, ProduceTopic};

/// Size of the length prefix in front of every frame.
pub const SIZE_PREFIX: usize = 4;

/// Encodes a request body (no header, no size prefix) at `version`.
pub fn encode_body<R: Request>(req: &R, version: i16) -> Result<Bytes, ProtocolError> {
    let api = api_name(R::KEY);
    check_version::<R>(version)?;
    let size = req
        .compute_size(version)
        .map_err(|e| ProtocolError::Encode {
            what: api,
            reason: e.to_string(),
        })?;
    let mut buf = BytesMut::with_capacity(size);
    req.encode(&mut buf, version)
        .map_err(|e| ProtocolError::Encode {
            what: api,
            reason: e.to_string(),
        })?;
    Ok(buf.freeze())
}

fn check_version<R: Request>(version: i16) -> Result<(), ProtocolError> {
    let range = R::VERSIONS;
    if version < range.min || version > range.max {
        return Err(ProtocolError::Unsupported {
            what: api_name(R::KEY),
            value: version.into(),
        });
    }
    Ok(())
}

/// Identifies a request on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestMeta {
    /// The API key.
    pub api_key: i16,
    /// The negotiated version.
    pub version: i16,
    /// The correlation id the broker echoes back.
    pub correlation_id: i32,
}

/// Writes a whole request frame (size prefix, header, body) into `out`.
pub fn encode_request(
    out: &mut BytesMut,
    meta: RequestMeta,
    client_id: Option<&StrBytes>,
    body: &[u8],
) -> Result<(), ProtocolError> {
    encode_head(out, meta, client_id, body.len())?;
    out.put_slice(body);
    Ok(())
}

/// Writes the size prefix and request header of a frame whose body of
/// `body_len` bytes follows separately (see [`FrameBuf`]).
pub fn encode_head(
    out: &mut BytesMut,
    meta: RequestMeta,
    client_id: Option<&StrBytes>,
    body_len: usize,
) -> Result<(), ProtocolError> {
    let key = ApiKey::try_from(meta.api_key).map_err(|_| ProtocolError::Unsupported {
        what: "API key",
        value: meta.api_key.into(),
    })?;
    let header_version = key.request_header_version(meta.version);
    let header = RequestHeader::default()
        .with_request_api_key(meta.api_key)
        .with_request_api_version(meta.version)
        .with_correlation_id(meta.correlation_id)
        .with_client_id(client_id.cloned());
    let encode_err = |e: anyhow_like::Error| ProtocolError::Encode {
        what: "request header",
        reason: e.0,
    };
    let header_size = header
        .compute_size(header_version)
        .map_err(|e| encode_err(e.into()))?;
    let total = header_size.saturating_add(body_len);
    let size = i32::try_from(total).map_err(|_| ProtocolError::TooLarge {
        what: "request",
        size: total as u64,
        limit: i32::MAX as u64,
    })?;
    out.reserve(SIZE_PREFIX + header_size);
    out.put_i32(size);
    header
        .encode(out, header_version)
        .map_err(|e| encode_err(e.into()))
}

/// Most bytes [`split_frame`] reserves for a frame before more of it has
/// arrived.
const RESERVE_STEP: usize = 8 << 20;

/// Splits one complete frame off the front of `buf`.
///
/// Returns `Ok(None)` until the whole frame has arrived. The returned frame
/// excludes the size prefix. A negative size or one above `max_size` is an
/// error: the stream cannot be trusted any more.
pub fn split_frame(buf: &mut BytesMut, max_size: usize) -> Result<Option<Bytes>, ProtocolError> {
    let Some(prefix) = buf.get(..SIZE_PREFIX) else {
        return Ok(None);
    };
    let size = i32::from_be_bytes([prefix[0], prefix[1], prefix[2], prefix[3]]);
    let size = usize::try_from(size).map_err(|_| ProtocolError::Invalid {
        what: "frame size",
        reason: format!("negative size {size}"),
    })?;
    if size > max_size {
        return Err(ProtocolError::TooLarge {
            what: "response frame",
            size: size as u64,
            limit: max_size as u64,
        });
    }
    if buf.len() < SIZE_PREFIX + size {
        // Reserve for the rest of this frame, at most RESERVE_STEP at a
        // time: four bytes from a peer must not pin max_size of memory up
        // front. A frame within the step (a fetch response of a few
        // partitions) gets its room at once, not by doubling steps that
        // allocate twice its size over its read.
        buf.reserve((SIZE_PREFIX + size - buf.len()).min(RESERVE_STEP));
        return Ok(None);
    }
    buf.advance(SIZE_PREFIX);
    Ok(Some(buf.split_to(size).freeze()))
}

/// Reads the correlation id at the front of a response frame without
/// consuming it (every response header starts with it).
pub fn peek_correlation_id(frame: &[u8]) -> Result<i32, ProtocolError> {
    match frame.get(..4) {
        Some(b) => Ok(i32::from_be_bytes([b[0], b[1], b[2], b[3]])),
        None => Err(ProtocolError::Truncated {
            what: "response header",
            needed: 4,
            available: frame.len(),
        }),
    }
}

/// Decodes a response frame (header + body) for request type `R` at `version`.
///
/// The whole frame must be consumed; trailing bytes are an error. Decoding
/// runs under `catch_unwind` so that a defect in a generated decoder surfaces
/// as an error rather than tearing down the connection task.
pub fn decode_response<R: Request>(
    frame: Bytes,
    version: i16,
) -> Result<R::Response, ProtocolError> {
    let api = api_name(R::KEY);
    let key = ApiKey::try_from(R::KEY).map_err(|_| ProtocolError::Unsupported {
        what: "API key",
        value: R::KEY.into(),
    })?;
    let header_version = key.response_header_version(version);
    let result = std::panic::catch_unwind(move || {
        let mut frame = frame;
        let header = ResponseHeader::decode(&mut frame, header_version)?;
        let body = R::Response::decode(&mut frame, version)?;
        Ok::<_, anyhow_like::Error>((header, body, frame.remaining()))
    });
    match result {
        Ok(Ok((_, body, 0))) => Ok(body),
        Ok(Ok((_, _, trailing))) => Err(ProtocolError::Invalid {
            what: api,
            reason: format!(
                "{trailing} trailing bytes after the response body (version {version})"
            ),
        }),
        Ok(Err(e)) => Err(ProtocolError::Invalid {
            what: api,
            reason: format!("malformed response (version {version}): {}", e.0),
        }),
        Err(_) => Err(ProtocolError::Invalid {
            what: api,
            reason: format!("decoder rejected the response (version {version})"),
        }),
    }
}

/// The API's name, e.g. `"Metadata"`.
pub fn api_name(key: i16) -> &'static str {
    match ApiKey::try_from(key) {
        Ok(k) => api_key_name(k),
        Err(_) => "UnknownApi",
    }
}

fn api_key_name(k: ApiKey) -> &'static str {
    use ApiKey::*;
    match k {
        Produce => "Produce",
        Fetch => "Fetch",
        ListOffsets => "ListOffsets",
        Metadata => "Metadata",
        OffsetCommit => "OffsetCommit",
        OffsetFetch => "OffsetFetch",
        FindCoordinator => "FindCoordinator",
        JoinGroup => "JoinGroup",
        Heartbeat => "Heartbeat",
        LeaveGroup => "LeaveGroup",
        SyncGroup => "SyncGroup",
        DescribeGroups => "DescribeGroups",
        ListGroups => "ListGroups",
        SaslHandshake => "SaslHandshake",
        ApiVersions => "ApiVersions",
        CreateTopics => "CreateTopics",
        DeleteTopics => "DeleteTopics",
        DeleteRecords => "DeleteRecords",
        InitProducerId => "InitProducerId",
        OffsetForLeaderEpoch => "OffsetForLeaderEpoch",
        AddPartitionsToTxn => "AddPartitionsToTxn",
        AddOffsetsToTxn => "AddOffsetsToTxn",
        EndTxn => "EndTxn",
        WriteTxnMarkers => "WriteTxnMarkers",
        TxnOffsetCommit => "TxnOffsetCommit",
        DescribeAcls => "DescribeAcls",
        CreateAcls => "CreateAcls",
        DeleteAcls => "DeleteAcls",
        DescribeConfigs => "DescribeConfigs",
        AlterConfigs => "AlterConfigs",
        AlterReplicaLogDirs => "AlterReplicaLogDirs",
        DescribeLogDirs => "DescribeLogDirs",
        SaslAuthenticate => "SaslAuthenticate",
        CreatePartitions => "CreatePartitions",
        CreateDelegationToken => "CreateDelegationToken",
        RenewDelegationToken => "RenewDelegationToken",
        ExpireDelegationToken => "ExpireDelegationToken",
        DescribeDelegationToken => "DescribeDelegationToken",
        DeleteGroups => "DeleteGroups",
        ElectLeaders => "ElectLeaders",
        IncrementalAlterConfigs => "IncrementalAlterConfigs",
        AlterPartitionReassignments => "AlterPartitionReassignments",
        ListPartitionReassignments => "ListPartitionReassignments",
        OffsetDelete => "OffsetDelete",
        DescribeClientQuotas => "DescribeClientQuotas",
        AlterClientQuotas => "AlterClientQuotas",
        DescribeUserScramCredentials => "DescribeUserScramCredentials",
        AlterUserScramCredentials => "AlterUserScramCredentials",
        Vote => "Vote",
        BeginQuorumEpoch => "BeginQuorumEpoch",
        EndQuorumEpoch => "EndQuorumEpoch",
        DescribeQuorum => "DescribeQuorum",
        AlterPartition => "AlterPartition",
        UpdateFeatures => "UpdateFeatures",
        Envelope => "Envelope",
        FetchSnapshot => "FetchSnapshot",
        DescribeCluster => "DescribeCluster",
        DescribeProducers => "DescribeProducers",
        BrokerRegistration => "BrokerRegistration",
        BrokerHeartbeat => "BrokerHeartbeat",
        UnregisterBroker => "UnregisterBroker",
        DescribeTransactions => "DescribeTransactions",
        ListTransactions => "ListTransactions",
        AllocateProducerIds => "AllocateProducerIds",
        ConsumerGroupHeartbeat => "ConsumerGroupHeartbeat",
        ConsumerGroupDescribe => "ConsumerGroupDescribe",
        ControllerRegistration => "ControllerRegistration",
        GetTelemetrySubscriptions => "GetTelemetrySubscriptions",
        PushTelemetry => "PushTelemetry",
        AssignReplicasToDirs => "AssignReplicasToDirs",
        ListConfigResources => "ListConfigResources",
        DescribeTopicPartitions => "DescribeTopicPartitions",
        ShareGroupHeartbeat => "ShareGroupHeartbeat",
        ShareGroupDescribe => "ShareGroupDescribe",
        ShareFetch => "ShareFetch",
        ShareAcknowledge => "ShareAcknowledge",
        AddRaftVoter => "AddRaftVoter",
        RemoveRaftVoter => "RemoveRaftVoter",
        UpdateRaftVoter => "UpdateRaftVoter",
        InitializeShareGroupState => "InitializeShareGroupState",
        ReadShareGroupState => "ReadShareGroupState",
        WriteShareGroupState => "WriteShareGroupState",
        DeleteShareGroupState => "DeleteShareGroupState",
        ReadShareGroupStateSummary => "ReadShareGroupStateSummary",
        StreamsGroupHeartbeat => "StreamsGroupHeartbeat",
        StreamsGroupDescribe => "StreamsGroupDescribe",
        DescribeShareGroupOffsets => "DescribeShareGroupOffsets",
        AlterShareGroupOffsets => "AlterShareGroupOffsets",
        DeleteShareGroupOffsets => "DeleteShareGroupOffsets",
    }
}

/// `kafka-protocol` reports errors as `anyhow::Error`; we only need the text,
/// so convert at the boundary instead of depending on anyhow ourselves.
mod anyhow_like {
    pub struct Error(pub String);
    impl<E: std::fmt::Display> From<E> for Error {
        fn from(e: E) -> Self {
            Error(e.to_string())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::messages::{ApiVersionsRequest, MetadataRequest};

    #[test]
    fn request_frame_layout() {
        let body = encode_body(&MetadataRequest::default().with_topics(None), 1).unwrap();
        let mut out = BytesMut::new();
        let meta = RequestMeta {
            api_key: 3,
            version: 1,
            correlation_id: 7,
        };
        let client = StrBytes::from_static_str("pk");
        encode_request(&mut out, meta, Some(&client), &body).unwrap();
        // size, api key 3, version 1, correlation 7, client id "pk", body:
        // Metadata v1 with topics = null is the array length -1.
        let expected: &[u8] = &[
            0, 0, 0, 16, 0, 3, 0, 1, 0, 0, 0, 7, 0, 2, b'p', b'k', 0xff, 0xff, 0xff, 0xff,
        ];
        assert_eq!(&out[..], expected);
    }

    #[test]
    fn split_frame_waits_for_whole_frame_and_bounds_size() {
        let mut buf = BytesMut::from(&[0u8, 0, 0, 3, 1, 2][..]);
        assert_eq!(split_frame(&mut buf, 100).unwrap(), None);
        buf.put_u8(3);
        buf.put_slice(&[0, 0]);
        let frame = split_frame(&mut buf, 100).unwrap().unwrap();
        assert_eq!(&frame[..], &[1, 2, 3]);
        assert_eq!(&buf[..], &[0, 0]);

        let mut big = BytesMut::from(&[0x7fu8, 0xff, 0xff, 0xff][..]);
        assert!(matches!(
            split_frame(&mut big, 1 << 20),
            Err(ProtocolError::TooLarge { .. })
        ));
        let mut neg = BytesMut::from(&[0xffu8, 0xff, 0xff, 0xfe][..]);
        assert!(matches!(
            split_frame(&mut neg, 1 << 20),
            Err(ProtocolError::Invalid { .. })
        ));
    }

    #[test]
    fn split_frame_reserves_a_frame_within_the_step_at_once_and_no_more() {
        // 3 MiB announced: room for all of it after its first bytes.
        let size = 3 << 20;
        let mut buf = BytesMut::from(&(size as i32).to_be_bytes()[..]);
        buf.put_slice(&[7; 100]);
        assert_eq!(split_frame(&mut buf, 100 << 20).unwrap(), None);
        assert!(buf.capacity() >= SIZE_PREFIX + size, "{}", buf.capacity());
        // 90 MiB announced (within max_size): only a step is reserved.
        let size: usize = 90 << 20;
        let mut buf = BytesMut::from(&(size as i32).to_be_bytes()[..]);
        assert_eq!(split_frame(&mut buf, 100 << 20).unwrap(), None);
        assert!(buf.capacity() <= 2 * RESERVE_STEP, "{}", buf.capacity());
    }

    #[test]
    fn garbage_and_truncated_responses_are_errors() {
        let frame = Bytes::from_static(&[0, 0, 0, 1, 0]);
        assert!(decode_response::<ApiVersionsRequest>(frame, 3).is_err());
        let frame = Bytes::from_static(&[0, 0, 0, 1, 0, 0, 0xff, 0xff, 0xff, 0x7f]);
        assert!(decode_response::<MetadataRequest>(frame, 12).is_err());
        assert!(peek_correlation_id(&[0, 1]).is_err());
    }

    #[test]
    fn out_of_range_version_is_refused() {
        assert!(matches!(
            encode_body(&MetadataRequest::default(), 99),
            Err(ProtocolError::Unsupported { .. })
        ));
    }
}
