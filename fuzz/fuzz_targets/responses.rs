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
    match api % 12 {
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
        _ => {
            let mut buf = bytes::BytesMut::from(rest);
            while let Ok(Some(_)) = split_frame(&mut buf, 1 << 16) {}
        }
    }
});
