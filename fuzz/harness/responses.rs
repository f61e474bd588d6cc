//! Response decoding (header + body) for the APIs the client uses, at every
//! version the crate knows, on arbitrary bytes; a decoded ApiVersions answer
//! also goes through version negotiation.

use bytes::Bytes;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::Request;
use purekafka::protocol::frame::{decode_response, split_frame};
use purekafka::protocol::versions::{ApiVersionTable, Versions};

fn decode<R: Request>(version: u8, frame: &Bytes) -> Option<R::Response> {
    let span = R::VERSIONS.max - R::VERSIONS.min + 1;
    let v = R::VERSIONS.min + i16::from(version) % span;
    decode_response::<R>(frame.clone(), v).ok()
}

/// A decoded ApiVersions answer feeds version negotiation: whatever the
/// broker advertises, a picked version lies in both ranges.
fn negotiate(resp: &ApiVersionsResponse, client_max: u8) {
    let table = ApiVersionTable::from_response(resp);
    let client = Versions::new(0, i16::from(client_max % 20));
    for (key, broker) in table.ranges() {
        if let Ok(v) = table.pick(*key, client) {
            assert!(
                v >= client.min && v <= client.max,
                "{v} outside the client range"
            );
            assert!(v >= broker.min && v <= broker.max, "{v} outside {broker:?}");
        }
    }
    let _ = table.feature_level("transaction.version");
}

/// One input: an API selector byte, a version byte, then the frame.
pub fn run(data: &[u8]) {
    let [api, version, rest @ ..] = data else {
        return;
    };
    let frame = Bytes::copy_from_slice(rest);
    match usize::from(*api) % 38 {
        0 => {
            if let Some(resp) = decode::<ApiVersionsRequest>(*version, &frame) {
                negotiate(&resp, *version);
            }
        }
        1 => drop(decode::<MetadataRequest>(*version, &frame)),
        2 => drop(decode::<FindCoordinatorRequest>(*version, &frame)),
        3 => drop(decode::<ProduceRequest>(*version, &frame)),
        4 => drop(decode::<FetchRequest>(*version, &frame)),
        5 => drop(decode::<ListOffsetsRequest>(*version, &frame)),
        6 => drop(decode::<OffsetCommitRequest>(*version, &frame)),
        7 => drop(decode::<OffsetFetchRequest>(*version, &frame)),
        8 => drop(decode::<JoinGroupRequest>(*version, &frame)),
        9 => drop(decode::<SyncGroupRequest>(*version, &frame)),
        10 => drop(decode::<InitProducerIdRequest>(*version, &frame)),
        11 => drop(decode::<HeartbeatRequest>(*version, &frame)),
        12 => drop(decode::<LeaveGroupRequest>(*version, &frame)),
        13 => drop(decode::<ConsumerGroupHeartbeatRequest>(*version, &frame)),
        14 => drop(decode::<AddPartitionsToTxnRequest>(*version, &frame)),
        15 => drop(decode::<AddOffsetsToTxnRequest>(*version, &frame)),
        16 => drop(decode::<EndTxnRequest>(*version, &frame)),
        17 => drop(decode::<TxnOffsetCommitRequest>(*version, &frame)),
        18 => drop(decode::<SaslHandshakeRequest>(*version, &frame)),
        19 => drop(decode::<SaslAuthenticateRequest>(*version, &frame)),
        20 => drop(decode::<CreateTopicsRequest>(*version, &frame)),
        21 => drop(decode::<DeleteTopicsRequest>(*version, &frame)),
        22 => drop(decode::<CreatePartitionsRequest>(*version, &frame)),
        23 => drop(decode::<DescribeConfigsRequest>(*version, &frame)),
        24 => drop(decode::<IncrementalAlterConfigsRequest>(*version, &frame)),
        25 => drop(decode::<ListGroupsRequest>(*version, &frame)),
        26 => drop(decode::<DescribeGroupsRequest>(*version, &frame)),
        27 => drop(decode::<DeleteGroupsRequest>(*version, &frame)),
        28 => drop(decode::<OffsetDeleteRequest>(*version, &frame)),
        29 => drop(decode::<DeleteRecordsRequest>(*version, &frame)),
        30 => drop(decode::<DescribeClusterRequest>(*version, &frame)),
        31 => drop(decode::<CreateAclsRequest>(*version, &frame)),
        32 => drop(decode::<DescribeAclsRequest>(*version, &frame)),
        33 => drop(decode::<DeleteAclsRequest>(*version, &frame)),
        34 => drop(decode::<DescribeProducersRequest>(*version, &frame)),
        35 => drop(decode::<ListTransactionsRequest>(*version, &frame)),
        36 => drop(decode::<DescribeTransactionsRequest>(*version, &frame)),
        _ => {
            let mut buf = bytes::BytesMut::from(rest);
            while let Ok(Some(_)) = split_frame(&mut buf, 1 << 16) {}
        }
    }
}
