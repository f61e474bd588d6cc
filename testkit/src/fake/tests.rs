//! Scripted-request tests of the cluster state: no socket, no clock.

use bytes::Bytes;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use purekafka::protocol::records::RecordBatchBuilder;

use super::errors::Code;
use super::groups::GroupPhase;
use super::state::{BrokerInfo, ClusterState, Reply, StateConfig};
use super::wire::{FakeRequest, FakeResponse, Header};

fn cluster(brokers: i32) -> ClusterState {
    let infos = (0..brokers)
        .map(|id| BrokerInfo {
            id,
            host: "127.0.0.1".into(),
            port: 9000 + id as u16,
            alive: true,
        })
        .collect();
    let mut s = ClusterState::new(StateConfig::default(), infos);
    s.create_topic("t", 1, 1).expect("topic");
    s
}

fn header(api_key: ApiKey, version: i16) -> Header {
    Header {
        api_key,
        version,
        correlation_id: 1,
        client_id: Some("test".into()),
    }
}

fn batch(pid: i64, epoch: i16, seq: i32, n: usize) -> Bytes {
    let mut b = RecordBatchBuilder::new().producer(pid, epoch, seq);
    for i in 0..n {
        b.append(1_000, None, Some(format!("v{i}").as_bytes()), &[])
            .expect("append");
    }
    b.finish().expect("finish").freeze()
}

/// Produces one batch to t-0 on broker 0; returns (error code, base offset).
fn produce(s: &mut ClusterState, records: Bytes) -> (i16, i64) {
    let req = ProduceRequest::default()
        .with_acks(-1)
        .with_topic_data(vec![TopicProduceData::default()
            .with_name(TopicName(StrBytes::from_static_str("t")))
            .with_partition_data(vec![PartitionProduceData::default()
                .with_index(0)
                .with_records(Some(records))])]);
    match s.handle(
        0,
        &header(ApiKey::Produce, 9),
        FakeRequest::Produce(req),
        0,
        false,
    ) {
        Reply::Respond(FakeResponse::Produce(r)) => {
            let p = &r.responses[0].partition_responses[0];
            (p.error_code, p.base_offset)
        }
        other => panic!("unexpected {other:?}"),
    }
}

#[test]
fn idempotent_sequences_follow_kafka() {
    let mut s = cluster(1);
    assert_eq!(produce(&mut s, batch(7, 0, 0, 3)), (0, 0));
    assert_eq!(produce(&mut s, batch(7, 0, 3, 2)), (0, 3));
    // A retry of a recent batch answers its first offset, appends nothing.
    assert_eq!(produce(&mut s, batch(7, 0, 0, 3)), (0, 0));
    assert_eq!(s.partition("t", 0).map(|l| l.high_watermark()), Some(5));
    // A gap.
    let gap = produce(&mut s, batch(7, 0, 9, 1)).0;
    assert_eq!(gap, Code::OutOfOrderSequenceNumber.value());
    // A new epoch must start at 0; an older one is fenced.
    let new_epoch = produce(&mut s, batch(7, 1, 5, 1)).0;
    assert_eq!(new_epoch, Code::OutOfOrderSequenceNumber.value());
    assert_eq!(produce(&mut s, batch(7, 1, 0, 1)), (0, 5));
    assert_eq!(
        produce(&mut s, batch(7, 0, 5, 1)).0,
        Code::InvalidProducerEpoch.value()
    );
    // A producer the partition never saw is accepted at any sequence.
    assert_eq!(produce(&mut s, batch(8, 0, 42, 1)), (0, 6));
}

#[test]
fn corrupt_batches_are_refused_whole() {
    let mut s = cluster(1);
    let mut bad = batch(-1, -1, -1, 2).to_vec();
    let last = bad.len() - 1;
    bad[last] ^= 0xff;
    assert_eq!(
        produce(&mut s, Bytes::from(bad)).0,
        Code::CorruptMessage.value()
    );
    assert_eq!(
        produce(&mut s, Bytes::from_static(&[1, 2, 3])).0,
        Code::CorruptMessage.value()
    );
    assert_eq!(s.partition("t", 0).map(|l| l.high_watermark()), Some(0));
}

fn fetch_req(session_id: i32, epoch: i32, offset: Option<i64>) -> FetchRequest {
    let topics = offset
        .map(|o| {
            vec![FetchTopic::default()
                .with_topic(TopicName(StrBytes::from_static_str("t")))
                .with_partitions(vec![FetchPartition::default()
                    .with_partition(0)
                    .with_fetch_offset(o)
                    .with_current_leader_epoch(-1)
                    .with_last_fetched_epoch(-1)
                    .with_partition_max_bytes(1 << 20)])]
        })
        .unwrap_or_default();
    FetchRequest::default()
        .with_max_wait_ms(500)
        .with_min_bytes(1)
        .with_max_bytes(1 << 20)
        .with_session_id(session_id)
        .with_session_epoch(epoch)
        .with_topics(topics)
}

fn fetch(s: &mut ClusterState, req: FetchRequest, final_try: bool) -> Reply {
    s.handle(
        0,
        &header(ApiKey::Fetch, 12),
        FakeRequest::Fetch(req),
        0,
        final_try,
    )
}

#[test]
fn fetch_waits_when_empty_then_sessions_send_only_news() {
    let mut s = cluster(1);
    assert_eq!(
        fetch(&mut s, fetch_req(0, 0, Some(0)), false),
        Reply::WaitForData { until_ms: 500 }
    );
    let Reply::Respond(FakeResponse::Fetch(full)) = fetch(&mut s, fetch_req(0, 0, Some(0)), true)
    else {
        panic!("final try answers");
    };
    assert_ne!(full.session_id, 0, "a session was opened");
    assert_eq!(full.responses.len(), 1, "a full fetch lists the partition");
    let id = full.session_id;
    // Nothing new: an incremental fetch lists nothing.
    let Reply::Respond(FakeResponse::Fetch(quiet)) = fetch(&mut s, fetch_req(id, 1, None), true)
    else {
        panic!("answer");
    };
    assert!(quiet.responses.is_empty(), "{quiet:?}");
    produce(&mut s, batch(-1, -1, -1, 2));
    let Reply::Respond(FakeResponse::Fetch(news)) = fetch(&mut s, fetch_req(id, 2, None), false)
    else {
        panic!("data answers at once");
    };
    let part = &news.responses[0].partitions[0];
    assert_eq!(part.high_watermark, 2);
    assert!(part.records.as_ref().is_some_and(|r| !r.is_empty()));
    let Reply::Respond(FakeResponse::Fetch(stale)) = fetch(&mut s, fetch_req(id, 2, None), true)
    else {
        panic!("answer");
    };
    assert_eq!(stale.error_code, Code::InvalidFetchSessionEpoch.value());
}

#[test]
fn fetch_checks_leader_and_epoch() {
    let mut s = cluster(2);
    s.create_topic("two", 1, 2).expect("topic");
    let leader = s.partition("two", 0).map(|l| l.leader).expect("leader");
    let other = 1 - leader;
    let req = |epoch: i32| {
        FetchRequest::default()
            .with_session_epoch(-1)
            .with_max_bytes(1 << 20)
            .with_topics(vec![FetchTopic::default()
                .with_topic(TopicName(StrBytes::from_static_str("two")))
                .with_partitions(vec![FetchPartition::default()
                    .with_partition(0)
                    .with_current_leader_epoch(epoch)
                    .with_last_fetched_epoch(-1)
                    .with_partition_max_bytes(1000)])])
    };
    let code = |s: &mut ClusterState, broker: i32, epoch: i32| match s.handle(
        broker,
        &header(ApiKey::Fetch, 12),
        FakeRequest::Fetch(req(epoch)),
        0,
        true,
    ) {
        Reply::Respond(FakeResponse::Fetch(r)) => r.responses[0].partitions[0].error_code,
        other => panic!("{other:?}"),
    };
    assert_eq!(code(&mut s, leader, 0), 0);
    assert_eq!(code(&mut s, other, 0), Code::NotLeaderOrFollower.value());
    if let Some(log) = s.partition_mut("two", 0) {
        log.set_leader(other);
    }
    assert_eq!(code(&mut s, other, 0), Code::FencedLeaderEpoch.value());
    assert_eq!(code(&mut s, other, 2), Code::UnknownLeaderEpoch.value());
    assert_eq!(code(&mut s, other, 1), 0);
    assert_eq!(s.partition("two", 0).map(|l| l.epoch_end(0)), Some((0, 0)));
}

fn join(s: &mut ClusterState, member: &str, now: i64) -> Reply {
    let coordinator = s.coordinator_for("g").map(|b| b.id).expect("coordinator");
    let req = JoinGroupRequest::default()
        .with_group_id(GroupId(StrBytes::from_static_str("g")))
        .with_session_timeout_ms(1000)
        .with_rebalance_timeout_ms(2000)
        .with_member_id(StrBytes::from_string(member.into()))
        .with_protocol_type(StrBytes::from_static_str("consumer"))
        .with_protocols(vec![join_group_request::JoinGroupRequestProtocol::default(
        )
        .with_name(StrBytes::from_static_str("range"))
        .with_metadata(Bytes::from_static(b"m"))]);
    s.handle(
        coordinator,
        &header(ApiKey::JoinGroup, 9),
        FakeRequest::JoinGroup(req),
        now,
        false,
    )
}

fn joined_id(s: &mut ClusterState, now: i64) -> (String, u64) {
    let Reply::Respond(FakeResponse::JoinGroup(r)) = join(s, "", now) else {
        panic!("a new member is asked for an id first");
    };
    assert_eq!(r.error_code, Code::MemberIdRequired.value());
    let id = r.member_id.to_string();
    let Reply::Deferred(ticket) = join(s, &id, now) else {
        panic!("the join waits for the group");
    };
    (id, ticket)
}

#[test]
fn a_second_member_triggers_a_rebalance_and_a_silent_one_expires() {
    let mut s = cluster(1);
    let (a, ta) = joined_id(&mut s, 0);
    let done = s.take_completed();
    assert_eq!(done.len(), 1, "a lone member's join completes at once");
    assert_eq!(done[0].0, ta);
    let (b, _) = joined_id(&mut s, 10);
    assert_eq!(s.groups.groups["g"].phase, GroupPhase::PreparingRebalance);
    assert!(s.take_completed().is_empty(), "b waits for a to rejoin");
    let Reply::Deferred(_) = join(&mut s, &a, 20) else {
        panic!("a rejoins");
    };
    let done = s.take_completed();
    assert_eq!(done.len(), 2, "both joins complete");
    let generation = s.groups.groups["g"].generation;
    assert_eq!(generation, 2);
    // b stops heartbeating: after its session timeout it is removed.
    s.tick(20 + 500);
    assert_eq!(s.groups.groups["g"].members.len(), 2);
    s.groups.heartbeat("g", &a, generation, 900);
    s.tick(20 + 1001);
    assert_eq!(s.groups.groups["g"].phase, GroupPhase::PreparingRebalance);
    assert!(!s.groups.groups["g"].members.contains_key(&b));
}

#[test]
fn a_transaction_past_its_timeout_is_aborted_and_its_producer_fenced() {
    use kafka_protocol::messages::add_partitions_to_txn_request::AddPartitionsToTxnTopic;
    let mut s = cluster(1);
    let init = InitProducerIdRequest::default()
        .with_transactional_id(Some(TransactionalId(StrBytes::from_static_str("x"))))
        .with_transaction_timeout_ms(1000)
        .with_producer_id(ProducerId(-1))
        .with_producer_epoch(-1);
    let Reply::Respond(FakeResponse::InitProducerId(r)) = s.handle(
        0,
        &header(ApiKey::InitProducerId, 4),
        FakeRequest::InitProducerId(init),
        0,
        false,
    ) else {
        panic!("init answers");
    };
    assert_eq!((r.error_code, r.producer_epoch), (0, 0));
    let pid = r.producer_id.0;
    let add = AddPartitionsToTxnRequest::default()
        .with_v3_and_below_transactional_id(TransactionalId(StrBytes::from_static_str("x")))
        .with_v3_and_below_producer_id(ProducerId(pid))
        .with_v3_and_below_producer_epoch(0)
        .with_v3_and_below_topics(vec![AddPartitionsToTxnTopic::default()
            .with_name(TopicName(StrBytes::from_static_str("t")))
            .with_partitions(vec![0])]);
    s.handle(
        0,
        &header(ApiKey::AddPartitionsToTxn, 3),
        FakeRequest::AddPartitionsToTxn(add),
        0,
        false,
    );
    let mut b = RecordBatchBuilder::new()
        .producer(pid, 0, 0)
        .transactional(true);
    b.append(1, None, Some(b"v"), &[]).expect("append");
    assert_eq!(
        produce(&mut s, b.finish().expect("finish").freeze()),
        (0, 0)
    );
    assert_eq!(s.partition("t", 0).map(|l| l.last_stable_offset()), Some(0));
    s.tick(1001);
    assert_eq!(
        s.partition("t", 0).map(|l| l.last_stable_offset()),
        Some(2),
        "aborted: marker at 1"
    );
    assert_eq!(s.txns.by_id["x"].producer_epoch, 1, "the epoch was bumped");
    let mut late = RecordBatchBuilder::new()
        .producer(pid, 0, 1)
        .transactional(true);
    late.append(1, None, Some(b"late"), &[]).expect("append");
    let code = produce(&mut s, late.finish().expect("finish").freeze()).0;
    assert_eq!(
        code,
        Code::InvalidProducerEpoch.value(),
        "the timed-out producer is fenced"
    );
}

#[test]
fn hostile_partition_counts_are_refused_not_allocated() {
    let mut s = cluster(1);
    let huge = s
        .create_topic("huge", i32::MAX, 1)
        .map_err(|(code, _)| code);
    assert_eq!(huge, Err(Code::InvalidPartitions));
    let req = CreatePartitionsRequest::default().with_topics(vec![
        create_partitions_request::CreatePartitionsTopic::default()
            .with_name(TopicName(StrBytes::from_static_str("t")))
            .with_count(i32::MAX),
    ]);
    let Reply::Respond(FakeResponse::CreatePartitions(r)) = s.handle(
        0,
        &header(ApiKey::CreatePartitions, 3),
        FakeRequest::CreatePartitions(req),
        0,
        false,
    ) else {
        panic!("answers");
    };
    assert_eq!(r.results[0].error_code, Code::InvalidPartitions.value());
    assert_eq!(s.topics["t"].partitions.len(), 1);
}

/// One Fetch v13+ of `t-0` by topic id on `broker`, inside session
/// (`session_id`, `epoch`); `offset: None` sends no partition.
fn fetch_by_id(
    s: &mut ClusterState,
    broker: i32,
    (session_id, epoch): (i32, i32),
    topic_id: uuid::Uuid,
    offset: Option<i64>,
) -> FetchResponse {
    let mut req = fetch_req(session_id, epoch, offset);
    for t in &mut req.topics {
        t.topic = TopicName(StrBytes::default());
        t.topic_id = topic_id;
    }
    match s.handle(
        broker,
        &header(ApiKey::Fetch, 17),
        FakeRequest::Fetch(req),
        0,
        true,
    ) {
        Reply::Respond(FakeResponse::Fetch(r)) => r,
        other => panic!("unexpected {other:?}"),
    }
}

#[test]
fn produce_v13_and_fetch_v13_address_topics_by_id() {
    let mut s = cluster(1);
    let id = s.topic_id("t");
    assert!(!id.is_nil());
    let produce_v13 = |s: &mut ClusterState, topic_id: uuid::Uuid| {
        let req = ProduceRequest::default()
            .with_acks(-1)
            .with_topic_data(vec![TopicProduceData::default()
                .with_topic_id(topic_id)
                .with_partition_data(vec![PartitionProduceData::default()
                    .with_index(0)
                    .with_records(Some(batch(-1, -1, -1, 2)))])]);
        match s.handle(
            0,
            &header(ApiKey::Produce, 13),
            FakeRequest::Produce(req),
            0,
            false,
        ) {
            Reply::Respond(FakeResponse::Produce(r)) => r.responses[0].clone(),
            other => panic!("unexpected {other:?}"),
        }
    };
    let known = produce_v13(&mut s, id);
    assert_eq!(known.topic_id, id, "the answer names the topic by id");
    assert_eq!(known.partition_responses[0].error_code, 0);
    assert_eq!(known.partition_responses[0].base_offset, 0);
    let stranger = uuid::Uuid::from_u128(42);
    let unknown = produce_v13(&mut s, stranger);
    assert_eq!(unknown.topic_id, stranger);
    assert_eq!(
        unknown.partition_responses[0].error_code,
        Code::UnknownTopicId.value()
    );
    assert_eq!(s.partition("t", 0).map(|l| l.high_watermark()), Some(2));

    // A session opened by id answers by id, with the records.
    let full = fetch_by_id(&mut s, 0, (0, 0), id, Some(0));
    assert_eq!(full.error_code, 0);
    assert_eq!(full.responses[0].topic_id, id);
    let part = &full.responses[0].partitions[0];
    assert_eq!((part.error_code, part.high_watermark), (0, 2));
    assert!(part.records.as_ref().is_some_and(|r| !r.is_empty()));
    let session = full.session_id;
    // An id no topic has: UNKNOWN_TOPIC_ID, answered at once.
    let unknown = fetch_by_id(&mut s, 0, (0, -1), stranger, Some(0));
    assert_eq!(unknown.responses[0].topic_id, stranger);
    assert_eq!(
        unknown.responses[0].partitions[0].error_code,
        Code::UnknownTopicId.value()
    );
    // The topic is deleted: the session's next incremental fetch reports
    // its partition UNKNOWN_TOPIC_ID under the old id (as Kafka's sessions
    // do), instead of dropping it silently.
    let deleted = s.delete_topics(
        DeleteTopicsRequest::default()
            .with_topic_names(vec![TopicName(StrBytes::from_static_str("t"))]),
    );
    assert_eq!(deleted.responses[0].error_code, 0);
    let gone = fetch_by_id(&mut s, 0, (session, 1), id, None);
    assert_eq!(gone.responses.len(), 1, "{gone:?}");
    assert_eq!(gone.responses[0].topic_id, id);
    assert_eq!(
        gone.responses[0].partitions[0].error_code,
        Code::UnknownTopicId.value()
    );
    // Re-created under the same name, it has a new id: the old one stays
    // unknown.
    s.create_topic("t", 1, 1).expect("topic");
    assert_ne!(s.topic_id("t"), id);
    let stale = fetch_by_id(&mut s, 0, (session, 2), id, None);
    assert_eq!(
        stale.responses[0].partitions[0].error_code,
        Code::UnknownTopicId.value()
    );
}

#[test]
fn a_fetch_from_a_follower_names_the_leader_and_its_endpoint() {
    let mut s = cluster(2);
    let leader = s.partition("t", 0).map(|l| l.leader).expect("leader");
    let id = s.topic_id("t");
    let r = fetch_by_id(&mut s, 1 - leader, (0, -1), id, Some(0));
    let part = &r.responses[0].partitions[0];
    assert_eq!(part.error_code, Code::NotLeaderOrFollower.value());
    assert_eq!(part.current_leader.leader_id.0, leader);
    assert_eq!(r.node_endpoints.len(), 1, "{r:?}");
    assert_eq!(r.node_endpoints[0].node_id.0, leader);
    assert_eq!(r.node_endpoints[0].port, 9000 + leader);
}
