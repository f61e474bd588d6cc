//! The streams group protocol (KIP-1071) against the real broker (Kafka 4.2+
//! serves it by default): the StreamsGroupHeartbeat/StreamsGroupDescribe
//! types (API keys 88, 89) on the wire and `Admin::describe_streams_groups`.

use kafka_protocol::messages::streams_group_heartbeat_request::{Subtopology, Topology};
use kafka_protocol::messages::{GroupId, StreamsGroupHeartbeatRequest, TopicName};
use kafka_protocol::protocol::StrBytes;
use purekafka::cluster::{CoordinatorKind, Workload};
use purekafka::protocol::versions::Versions;
use purekafka::{Admin, Cluster, KafkaCode};

use crate::support;

const GROUP_ID_NOT_FOUND: i16 = 69;

async fn setup(test: &str, partitions: i32) -> Option<(String, Cluster, String)> {
    let bootstrap = support::bootstrap(test)?;
    if !support::real_broker_only(test, "streams groups (KIP-1071)") {
        return None;
    }
    support::trace();
    let cluster = Cluster::connect(support::config(&bootstrap))
        .await
        .expect("connect");
    let topic = support::unique_topic(test);
    support::create_topic(&cluster, &topic, partitions).await;
    Some((bootstrap, cluster, topic))
}

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_owned())
}

#[tokio::test]
async fn raw_heartbeat_and_describe_are_answered_by_the_broker() {
    let Some((bootstrap, cluster, topic)) = setup("sg-raw", 2).await else {
        return;
    };
    let group = support::unique_topic("sg-raw-group");
    // StreamsGroupDescribe of an unknown group: GROUP_ID_NOT_FOUND, named.
    let admin = Admin::connect(support::config(&bootstrap))
        .await
        .expect("admin");
    let mut d = admin
        .describe_streams_groups(std::slice::from_ref(&group))
        .await
        .expect("describe call");
    let err = d.swap_remove(&group).expect("one result").unwrap_err();
    assert_eq!(
        err.kafka_code(),
        KafkaCode::from_code(GROUP_ID_NOT_FOUND),
        "{err}"
    );
    assert!(err.to_string().contains("StreamsGroupDescribe"), "{err}");

    // A join with a one-subtopology topology, built from the raw types.
    let addr = cluster
        .coordinator(CoordinatorKind::Group, &group)
        .await
        .expect("coordinator");
    let join = StreamsGroupHeartbeatRequest::default()
        .with_group_id(GroupId(s(&group)))
        .with_member_id(s("raw-member-1"))
        .with_member_epoch(0)
        .with_rebalance_timeout_ms(10_000)
        .with_process_id(Some(s("raw-process")))
        .with_client_tags(Some(vec![]))
        .with_active_tasks(Some(vec![]))
        .with_standby_tasks(Some(vec![]))
        .with_warmup_tasks(Some(vec![]))
        .with_topology(Some(Topology::default().with_epoch(1).with_subtopologies(
            vec![
            Subtopology::default()
                .with_subtopology_id(s("0"))
                .with_source_topics(vec![TopicName(s(&topic))]),
        ],
        )));
    let resp = cluster
        .send(&addr, Workload::Group, &join, Versions::new(0, 1))
        .await
        .expect("StreamsGroupHeartbeat");
    assert_eq!(resp.error_code, 0, "{:?}", resp.error_message);
    assert_eq!(resp.member_id.as_str(), "raw-member-1");
    assert!(resp.member_epoch >= 1, "epoch {}", resp.member_epoch);
    assert!(resp.heartbeat_interval_ms > 0);

    // The group now exists, as a streams group with that member.
    let mut d = admin
        .describe_streams_groups(std::slice::from_ref(&group))
        .await
        .expect("describe call");
    let g = d
        .swap_remove(&group)
        .expect("one result")
        .expect("described");
    assert_eq!(g.members.len(), 1);
    assert_eq!(g.members[0].member_id, "raw-member-1");
    assert_eq!(g.members[0].process_id, "raw-process");

    // Leave (epoch -1).
    let leave = StreamsGroupHeartbeatRequest::default()
        .with_group_id(GroupId(s(&group)))
        .with_member_id(s("raw-member-1"))
        .with_member_epoch(-1);
    let resp = cluster
        .send(&addr, Workload::Group, &leave, Versions::new(0, 1))
        .await
        .expect("leave");
    assert_eq!(resp.error_code, 0, "{:?}", resp.error_message);
    assert_eq!(resp.member_epoch, -1);
}
