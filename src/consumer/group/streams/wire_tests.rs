//! The generated StreamsGroupHeartbeat / StreamsGroupDescribe types (API keys
//! 88 and 89, vendored kafka-protocol) against bytes written by Kafka 4.4.0's
//! own generated Java classes
//! (`vendor/kafka-protocol/purekafka-schemas/GoldenFrames.java`): each
//! message, built here with the same values, encodes to exactly those bytes,
//! and the bytes decode back to it, at every version the broker serves.

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::streams_group_describe_response as describe;
use kafka_protocol::messages::streams_group_heartbeat_request as hb_req;
use kafka_protocol::messages::streams_group_heartbeat_response as hb_resp;
use kafka_protocol::messages::{
    ApiKey, GroupId, StreamsGroupDescribeRequest, StreamsGroupDescribeResponse,
    StreamsGroupHeartbeatRequest, StreamsGroupHeartbeatResponse, TopicName,
};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_owned())
}

fn unhex(h: &str) -> Vec<u8> {
    (0..h.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&h[i..i + 2], 16).expect("hex"))
        .collect()
}

/// Encodes `msg` at `version`, compares with Java's bytes, and decodes
/// Java's bytes back to `msg`.
fn same_as_java<M: Encodable + Decodable + PartialEq + std::fmt::Debug>(
    msg: &M,
    version: i16,
    java_hex: &str,
) {
    let java = unhex(java_hex);
    let mut ours = BytesMut::new();
    msg.encode(&mut ours, version).expect("encode");
    assert_eq!(
        ours.as_ref(),
        java.as_slice(),
        "v{version} bytes differ from Java's"
    );
    assert_eq!(msg.compute_size(version).expect("size"), java.len());
    let decoded = M::decode(&mut Bytes::from(java), version).expect("decode");
    assert_eq!(&decoded, msg, "v{version} decodes to another message");
}

#[test]
fn api_keys_88_and_89_are_known_with_the_versions_kafka_4_4_serves() {
    let hb = ApiKey::try_from(88).expect("88 known");
    let describe = ApiKey::try_from(89).expect("89 known");
    assert_eq!(hb, ApiKey::StreamsGroupHeartbeat);
    assert_eq!(describe, ApiKey::StreamsGroupDescribe);
    for k in [hb, describe] {
        let v = k.valid_versions();
        assert_eq!((v.min, v.max), (0, 1));
        // Flexible from v0: header v2 for requests, v1 for responses.
        assert_eq!(k.request_header_version(0), 2);
        assert_eq!(k.response_header_version(0), 1);
    }
    assert_eq!(
        crate::protocol::frame::api_name(88),
        "StreamsGroupHeartbeat"
    );
    assert_eq!(crate::protocol::frame::api_name(89), "StreamsGroupDescribe");
}

#[test]
fn heartbeat_request_with_topology_matches_java() {
    let msg = StreamsGroupHeartbeatRequest::default()
        .with_group_id(GroupId(s("app")))
        .with_member_id(s("m-1"))
        .with_member_epoch(0)
        .with_rebalance_timeout_ms(30000)
        .with_process_id(Some(s("p-1")))
        .with_topology(Some(
            hb_req::Topology::default()
                .with_epoch(1)
                .with_subtopologies(vec![hb_req::Subtopology::default()
                    .with_subtopology_id(s("0"))
                    .with_source_topics(vec![TopicName(s("in"))])
                    .with_state_changelog_topics(vec![hb_req::TopicInfo::default()
                        .with_name(TopicName(s("app-store-changelog")))
                        .with_topic_configs(vec![hb_req::KeyValue::default()
                            .with_key(s("cleanup.policy"))
                            .with_value(s("compact"))])])]),
        ))
        .with_active_tasks(Some(vec![hb_req::TaskIds::default()
            .with_subtopology_id(s("0"))
            .with_partitions(vec![0, 2])]))
        .with_user_endpoint(Some(
            hb_req::Endpoint::default()
                .with_host(s("h"))
                .with_port(65000),
        ));
    // v1 is byte-identical to v0 (bumped only to negotiate response v1).
    let java = "04617070046d2d31000000000000000000000000753001000000010202300203696e0102146170702d73746f72652d6368616e67656c6f67000000000000020f636c65616e75702e706f6c69637908636f6d706163740000010101000002023003000000000000000200000004702d31010268fde8000000000000";
    same_as_java(&msg, 0, java);
    same_as_java(&msg, 1, java);
}

#[test]
fn heartbeat_response_versions_match_java() {
    let base = || {
        StreamsGroupHeartbeatResponse::default()
            .with_member_id(s("m-1"))
            .with_member_epoch(5)
            .with_heartbeat_interval_ms(5000)
            .with_task_offset_interval_ms(60000)
            .with_status(Some(vec![hb_resp::Status::default()
                .with_status_code(3)
                .with_status_detail(s("missing"))]))
            .with_active_tasks(Some(vec![hb_resp::TaskIds::default()
                .with_subtopology_id(s("0"))
                .with_partitions(vec![1, 3])]))
            .with_standby_tasks(Some(vec![]))
            .with_warmup_tasks(None)
    };
    // v0: the int32 AcceptableRecoveryLagLegacy after HeartbeatIntervalMs.
    same_as_java(
        &base().with_acceptable_recovery_lag_legacy(10000),
        0,
        "00000000000000046d2d310000000500001388000027100000ea600203086d697373696e6700020230030000000100000003000100000000000000",
    );
    // v1 (KIP-1331): an int64 AcceptableRecoveryLag after
    // TaskOffsetIntervalMs, and TopologyDescriptionRequired.
    same_as_java(
        &base()
            .with_acceptable_recovery_lag(20000)
            .with_topology_description_required(true),
        1,
        "00000000000000046d2d3100000005000013880000ea600000000000004e200203086d697373696e670002023003000000010000000300010001000000000000",
    );
}

#[test]
fn describe_request_versions_match_java() {
    let msg = StreamsGroupDescribeRequest::default()
        .with_group_ids(vec![GroupId(s("app")), GroupId(s("other"))])
        .with_include_authorized_operations(true);
    same_as_java(&msg, 0, "0304617070066f746865720100");
    same_as_java(&msg, 1, "0304617070066f74686572010000");
}

#[test]
fn describe_response_versions_match_java() {
    let member = describe::Member::default()
        .with_member_id(s("m-1"))
        .with_member_epoch(5)
        .with_client_id(s("c"))
        .with_client_host(s("/127.0.0.1"))
        .with_topology_epoch(1)
        .with_process_id(s("p-1"))
        .with_assignment(describe::Assignment::default().with_active_tasks(
            vec![describe::TaskIds::default()
                .with_subtopology_id(s("0"))
                .with_partitions(vec![0, 1])],
        ));
    let group = describe::DescribedGroup::default()
        .with_group_id(GroupId(s("app")))
        .with_group_state(s("Stable"))
        .with_group_epoch(3)
        .with_assignment_epoch(3)
        .with_topology(Some(
            describe::Topology::default()
                .with_epoch(1)
                .with_subtopologies(Some(vec![describe::Subtopology::default()
                    .with_subtopology_id(s("0"))
                    .with_source_topics(vec![s("in")])])),
        ))
        .with_members(vec![member]);
    let missing = describe::DescribedGroup::default()
        .with_group_id(GroupId(s("other")))
        .with_error_code(69)
        .with_error_message(Some(s("Group other not found.")));
    let msg = StreamsGroupDescribeResponse::default().with_groups(vec![group, missing]);
    same_as_java(
        &msg,
        0,
        "00000000030000000461707007537461626c65000000030000000301000000010202300203696e010101000002046d2d3100000005000002630b2f3132372e302e302e310000000104702d31ff01010102023003000000000000000100010100010101000000800000000000451747726f7570206f74686572206e6f7420666f756e642e066f74686572010000000000000000ff01800000000000",
    );
    same_as_java(
        &msg,
        1,
        "00000000030000000461707007537461626c65000000030000000301000000010202300203696e010101000002046d2d3100000005000002630b2f3132372e302e302e310000000104702d31ff0101010202300300000000000000010001010001010100000080000000ff00000000451747726f7570206f74686572206e6f7420666f756e642e066f74686572010000000000000000ff0180000000ff00000000",
    );
}
