//! Golden byte vectors for request/response framing, derived by hand from
//! the protocol guide (<https://kafka.apache.org/protocol#protocol_messages>).

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::{ApiVersionsRequest, MetadataRequest};
use kafka_protocol::protocol::StrBytes;
use purekafka::protocol::frame::{
    decode_response, encode_body, encode_request, split_frame, RequestMeta,
};
use purekafka::protocol::versions::ApiVersionTable;
use purekafka::protocol::ProtocolError;

#[test]
fn api_versions_v3_request_bytes() {
    let req = ApiVersionsRequest::default()
        .with_client_software_name(StrBytes::from_static_str("purekafka"))
        .with_client_software_version(StrBytes::from_static_str("0.1.0"));
    let body = encode_body(&req, 3).unwrap();
    let mut out = BytesMut::new();
    let meta = RequestMeta {
        api_key: 18,
        version: 3,
        correlation_id: 1,
    };
    encode_request(
        &mut out,
        meta,
        Some(&StrBytes::from_static_str("purekafka")),
        &body,
    )
    .unwrap();
    let mut expected = vec![0, 0, 0, 37]; // size: 20 header + 17 body
    expected.extend([0, 18, 0, 3, 0, 0, 0, 1]); // api key, version, correlation id
    expected.extend([0, 9]); // client id: int16 length (header v2 keeps it non-compact)
    expected.extend(b"purekafka");
    expected.push(0); // header tagged fields
    expected.push(10); // compact string: length + 1
    expected.extend(b"purekafka");
    expected.push(6);
    expected.extend(b"0.1.0");
    expected.push(0); // body tagged fields
    assert_eq!(&out[..], &expected[..]);
}

#[test]
fn metadata_v12_all_topics_request_bytes() {
    let req = MetadataRequest::default().with_topics(None);
    let body = encode_body(&req, 12).unwrap();
    // topics: compact nullable array, null = 0; allow_auto_topic_creation true
    // (the schema default); include_topic_authorized_operations false; tags.
    assert_eq!(&body[..], &[0, 1, 0, 0]);
}

fn api_versions_v3_response() -> Vec<u8> {
    let mut f = vec![0, 0, 0, 5]; // correlation id (response header v0 for ApiVersions)
    f.extend([0, 0]); // error code
    f.push(3); // compact array of 2 entries
    f.extend([0, 3, 0, 0, 0, 12, 0]); // Metadata 0..=12, tags
    f.extend([0, 18, 0, 0, 0, 3, 0]); // ApiVersions 0..=3, tags
    f.extend([0, 0, 0, 0]); // throttle time
    f.push(0); // tagged fields (no features)
    f
}

#[test]
fn api_versions_v3_response_decodes() {
    let frame = Bytes::from(api_versions_v3_response());
    let resp = decode_response::<ApiVersionsRequest>(frame, 3).unwrap();
    let table = ApiVersionTable::from_response(&resp);
    assert_eq!(table.ranges().len(), 2);
    assert_eq!(table.broker_range(3).map(|r| (r.min, r.max)), Some((0, 12)));
}

#[test]
fn every_truncation_of_a_response_is_an_error() {
    let full = api_versions_v3_response();
    for len in 0..full.len() {
        let frame = Bytes::from(full[..len].to_vec());
        assert!(
            decode_response::<ApiVersionsRequest>(frame, 3).is_err(),
            "prefix of {len} bytes"
        );
    }
    let mut trailing = full.clone();
    trailing.push(0);
    let err = decode_response::<ApiVersionsRequest>(Bytes::from(trailing), 3).unwrap_err();
    assert!(matches!(err, ProtocolError::Invalid { .. }), "{err:?}");
}

#[test]
fn stream_splitting_handles_byte_at_a_time_arrival() {
    let payload = api_versions_v3_response();
    let mut wire = (payload.len() as i32).to_be_bytes().to_vec();
    wire.extend(&payload);
    wire.extend(&wire.clone());
    let mut buf = BytesMut::new();
    let mut frames = Vec::new();
    for b in wire {
        buf.extend_from_slice(&[b]);
        if let Some(f) = split_frame(&mut buf, 1024).unwrap() {
            frames.push(f);
        }
    }
    assert_eq!(frames.len(), 2);
    assert!(frames.iter().all(|f| f[..] == payload[..]));
}

mod properties {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic_the_response_decoders(data in proptest::collection::vec(any::<u8>(), 0..256), v in 0i16..13) {
            let frame = Bytes::from(data);
            let _ = decode_response::<MetadataRequest>(frame.clone(), v);
            let _ = decode_response::<ApiVersionsRequest>(frame, v.min(3));
        }

        #[test]
        fn split_frame_never_panics(data in proptest::collection::vec(any::<u8>(), 0..64)) {
            let mut buf = BytesMut::from(&data[..]);
            while let Ok(Some(_)) = split_frame(&mut buf, 32) {}
        }
    }
}
