//! Response decoding (header + body) for the APIs the client uses, at every
//! version the crate knows, on arbitrary bytes.
#![no_main]

use bytes::Bytes;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::Request;
use libfuzzer_sys::fuzz_target;
use purekafka::protocol::frame::{decode_response, split_frame};

fn decode<R: Request>(version: u8, frame: &Bytes) {
    let span = R::VERSIONS.max - R::VERSIONS.min + 1;
    let v = R::VERSIONS.min + i16::from(version) % span;
    let _ = decode_response::<R>(frame.clone(), v);
}

fuzz_target!(|data: &[u8]| {
    let [api, version, rest @ ..] = data else { return };
    let frame = Bytes::copy_from_slice(rest);
    match usize::from(*api) % 38 {
        0 => decode::<ApiVersionsRequest>(*version, &frame),
        1 => decode::<MetadataRequest>(*version, &frame),
        2 => decode::<FindCoordinatorRequest>(*version, &frame),
        3 => decode::<ProduceRequest>(*version, &frame),
        4 => decode::<FetchRequest>(*version, &frame),
        5 => decode::<ListOffsetsRequest>(*version, &frame),
        6 => decode::<OffsetCommitRequest>(*version, &frame),
        7 => decode::<OffsetFetchRequest>(*version, &frame),
        8 => decode::<JoinGroupRequest>(*version, &frame),
        9 => decode::<SyncGroupRequest>(*version, &frame),
        10 => decode::<InitProducerIdRequest>(*version, &frame),
        11 => decode::<HeartbeatRequest>(*version, &frame),
        12 => decode::<LeaveGroupRequest>(*version, &frame),
        13 => decode::<ConsumerGroupHeartbeatRequest>(*version, &frame),
        14 => decode::<AddPartitionsToTxnRequest>(*version, &frame),
        15 => decode::<AddOffsetsToTxnRequest>(*version, &frame),
        16 => decode::<EndTxnRequest>(*version, &frame),
        17 => decode::<TxnOffsetCommitRequest>(*version, &frame),
        18 => decode::<SaslHandshakeRequest>(*version, &frame),
        19 => decode::<SaslAuthenticateRequest>(*version, &frame),
        20 => decode::<CreateTopicsRequest>(*version, &frame),
        21 => decode::<DeleteTopicsRequest>(*version, &frame),
        22 => decode::<CreatePartitionsRequest>(*version, &frame),
        23 => decode::<DescribeConfigsRequest>(*version, &frame),
        24 => decode::<IncrementalAlterConfigsRequest>(*version, &frame),
        25 => decode::<ListGroupsRequest>(*version, &frame),
        26 => decode::<DescribeGroupsRequest>(*version, &frame),
        27 => decode::<DeleteGroupsRequest>(*version, &frame),
        28 => decode::<OffsetDeleteRequest>(*version, &frame),
        29 => decode::<DeleteRecordsRequest>(*version, &frame),
        30 => decode::<DescribeClusterRequest>(*version, &frame),
        31 => decode::<CreateAclsRequest>(*version, &frame),
        32 => decode::<DescribeAclsRequest>(*version, &frame),
        33 => decode::<DeleteAclsRequest>(*version, &frame),
        34 => decode::<DescribeProducersRequest>(*version, &frame),
        35 => decode::<ListTransactionsRequest>(*version, &frame),
        36 => decode::<DescribeTransactionsRequest>(*version, &frame),
        _ => {
            let mut buf = bytes::BytesMut::from(rest);
            while let Ok(Some(_)) = split_frame(&mut buf, 1 << 16) {}
        }
    }
});
