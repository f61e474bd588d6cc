use std::collections::BTreeMap;

use kafka_protocol::messages::streams_group_heartbeat_request::{
    Subtopology, TaskIds as Owned, TopicInfo, Topology,
};
use kafka_protocol::messages::{GroupId, TopicName};

use super::*;

fn view(topics: &[(&str, i32)]) -> TopicView {
    topics
        .iter()
        .enumerate()
        .map(|(i, (n, p))| (n.to_string(), (uuid::Uuid::from_u128(i as u128 + 1), *p)))
        .collect()
}

fn topology(changelog: Option<&str>) -> Topology {
    Topology::default()
        .with_epoch(1)
        .with_subtopologies(vec![Subtopology::default()
            .with_subtopology_id(s("0"))
            .with_source_topics(vec![TopicName(s("in"))])
            .with_state_changelog_topics(
                changelog
                    .map(|c| TopicInfo::default().with_name(TopicName(s(c))))
                    .into_iter()
                    .collect(),
            )])
}

fn join(id: &str, t: Topology) -> StreamsGroupHeartbeatRequest {
    StreamsGroupHeartbeatRequest::default()
        .with_group_id(GroupId(s("g")))
        .with_member_id(s(id))
        .with_member_epoch(0)
        .with_rebalance_timeout_ms(1_000)
        .with_process_id(Some(s("p")))
        .with_topology(Some(t))
        .with_active_tasks(Some(vec![]))
        .with_standby_tasks(Some(vec![]))
        .with_warmup_tasks(Some(vec![]))
}

fn beat(id: &str, epoch: i32, owned: Option<Vec<i32>>) -> StreamsGroupHeartbeatRequest {
    let ids = |p: &Vec<i32>| {
        vec![Owned::default()
            .with_subtopology_id(s("0"))
            .with_partitions(p.clone())]
    };
    StreamsGroupHeartbeatRequest::default()
        .with_group_id(GroupId(s("g")))
        .with_member_id(s(id))
        .with_member_epoch(epoch)
        .with_active_tasks(owned.as_ref().map(ids))
        .with_standby_tasks(owned.as_ref().map(|_| vec![]))
        .with_warmup_tasks(owned.as_ref().map(|_| vec![]))
}

fn active(r: &StreamsGroupHeartbeatResponse) -> Option<Vec<i32>> {
    r.active_tasks
        .as_ref()
        .map(|t| t.iter().flat_map(|t| t.partitions.clone()).collect())
}

fn statuses(r: &StreamsGroupHeartbeatResponse) -> Vec<i8> {
    r.status.iter().flatten().map(|s| s.status_code).collect()
}

#[test]
fn tasks_move_only_after_their_owner_released_them() {
    let topics = view(&[("in", 4)]);
    let mut g = StreamsGroup::default();
    let a = g
        .heartbeat(&join("a", topology(None)), &topics, "c", 0)
        .response;
    assert_eq!((a.error_code, a.member_epoch), (0, 1));
    assert_eq!(active(&a), Some(vec![0, 1, 2, 3]));
    let b = g
        .heartbeat(&join("b", topology(None)), &topics, "c", 1)
        .response;
    assert_eq!(active(&b), Some(vec![]), "nothing free yet");
    assert_eq!(
        b.member_epoch, 2,
        "nothing to revoke: b is at the group epoch"
    );
    let a = g.heartbeat(&beat("a", 1, None), &topics, "c", 2).response;
    assert_eq!(active(&a), Some(vec![0, 1]), "a gives up half");
    assert_eq!(a.member_epoch, 1, "a stays at its epoch until it releases");
    assert_eq!(g.state(), "Reconciling");
    let b = g.heartbeat(&beat("b", 2, None), &topics, "c", 3).response;
    assert_eq!(active(&b), None, "a has not released them: unchanged");
    let a = g
        .heartbeat(&beat("a", 1, Some(vec![0, 1])), &topics, "c", 4)
        .response;
    assert_eq!((active(&a), a.member_epoch), (None, 2));
    let b = g.heartbeat(&beat("b", 2, None), &topics, "c", 5).response;
    assert_eq!(active(&b), Some(vec![2, 3]));
    assert_eq!(g.state(), "Stable");
    let stale = g.heartbeat(&beat("b", 1, None), &topics, "c", 6).response;
    assert_eq!(stale.error_code, Code::FencedMemberEpoch.value());
    assert_eq!(g.check_commit("a", 2), Code::None);
    assert_eq!(g.check_commit("a", 1), Code::StaleMemberEpoch);
    // Leaving (epoch -1) hands a's tasks to b.
    let left = g.heartbeat(&beat("a", -1, None), &topics, "c", 7).response;
    assert_eq!((left.error_code, left.member_epoch), (0, -1));
    let b = g.heartbeat(&beat("b", 2, None), &topics, "c", 8).response;
    assert_eq!((active(&b), b.member_epoch), (Some(vec![0, 1, 2, 3]), 3));
    let unknown = g.heartbeat(&beat("a", 2, None), &topics, "c", 9).response;
    assert_eq!(unknown.error_code, Code::UnknownMemberId.value());
}

#[test]
fn a_missing_source_topic_holds_the_group_until_it_exists() {
    let mut g = StreamsGroup::default();
    let r = g
        .heartbeat(&join("a", topology(None)), &view(&[]), "c", 0)
        .response;
    assert_eq!(r.error_code, 0);
    assert_eq!(statuses(&r), vec![MISSING_SOURCE_TOPICS]);
    assert_eq!(active(&r), Some(vec![]));
    assert_eq!(g.state(), "NotReady");
    let r = g.heartbeat(
        &beat("a", r.member_epoch, None),
        &view(&[("in", 2)]),
        "c",
        1,
    );
    assert!(statuses(&r.response).is_empty());
    assert_eq!(active(&r.response), Some(vec![0, 1]));
}

#[test]
fn missing_internal_topics_are_returned_for_creation_with_a_partition_per_task() {
    let mut g = StreamsGroup::default();
    let t = view(&[("in", 3)]);
    let first = g.heartbeat(&join("a", topology(Some("g-store-changelog"))), &t, "c", 0);
    assert_eq!(statuses(&first.response), vec![MISSING_INTERNAL_TOPICS]);
    let created: Vec<(String, i32)> = first
        .create
        .iter()
        .map(|(t, n)| (t.name.clone(), *n))
        .collect();
    assert_eq!(created, vec![("g-store-changelog".to_string(), 3)]);
    assert_eq!(
        active(&first.response),
        Some(vec![]),
        "no tasks before the topics exist"
    );
    // A changelog with the wrong partition count is refused by status.
    let wrong = view(&[("in", 3), ("g-store-changelog", 2)]);
    let r = g.heartbeat(
        &beat("a", first.response.member_epoch, None),
        &wrong,
        "c",
        1,
    );
    assert_eq!(statuses(&r.response), vec![INCORRECTLY_PARTITIONED_TOPICS]);
    let ok = view(&[("in", 3), ("g-store-changelog", 3)]);
    let r = g.heartbeat(&beat("a", r.response.member_epoch, None), &ok, "c", 2);
    assert!(r.create.is_empty());
    assert_eq!(active(&r.response), Some(vec![0, 1, 2]));
    let d = g.describe("g");
    let st = &d
        .topology
        .as_ref()
        .and_then(|t| t.subtopologies.clone())
        .unwrap()[0];
    assert_eq!(st.state_changelog_topics[0].partitions, 3);
}

#[test]
fn repartition_topics_take_the_task_count_of_their_writers() {
    let t = Topology::default().with_epoch(1).with_subtopologies(vec![
        Subtopology::default()
            .with_subtopology_id(s("0"))
            .with_source_topics(vec![TopicName(s("in"))])
            .with_repartition_sink_topics(vec![TopicName(s("rep"))]),
        Subtopology::default()
            .with_subtopology_id(s("1"))
            .with_repartition_source_topics(vec![
                TopicInfo::default().with_name(TopicName(s("rep")))
            ]),
    ]);
    let topology = StreamsTopology::from_wire(&t).unwrap();
    match configure(&topology, &view(&[("in", 5)])) {
        Configured::NotReady { status, create, .. } => {
            assert_eq!(status, MISSING_INTERNAL_TOPICS);
            assert_eq!(create.len(), 1);
            assert_eq!((create[0].0.name.as_str(), create[0].1), ("rep", 5));
        }
        other => panic!("{other:?}"),
    }
    let ready = configure(&topology, &view(&[("in", 5), ("rep", 5)]));
    let Configured::Ready { tasks, .. } = ready else {
        panic!("{ready:?}");
    };
    assert_eq!(tasks, BTreeMap::from([("0".into(), 5), ("1".into(), 5)]));
}

#[test]
fn invalid_requests_get_kafkas_errors() {
    let topics = view(&[("in", 1)]);
    let mut g = StreamsGroup::default();
    let no_topology = join("a", topology(None)).with_topology(None);
    let r = g.heartbeat(&no_topology, &topics, "c", 0).response;
    assert_eq!(r.error_code, Code::InvalidRequest.value());
    let bad_changelog = Topology::default().with_subtopologies(vec![Subtopology::default()
        .with_subtopology_id(s("0"))
        .with_source_topics(vec![TopicName(s("in"))])
        .with_state_changelog_topics(vec![TopicInfo::default()
            .with_name(TopicName(s("c")))
            .with_partitions(4)])]);
    let r = g
        .heartbeat(&join("a", bad_changelog), &topics, "c", 0)
        .response;
    assert_eq!(r.error_code, STREAMS_INVALID_TOPOLOGY);
    let r = g
        .heartbeat(&join("a", topology(None)), &topics, "c", 0)
        .response;
    assert_eq!(r.error_code, 0);
    let newer = topology(None).with_epoch(2);
    let r = g.heartbeat(&join("b", newer), &topics, "c", 1).response;
    assert_eq!(r.error_code, STREAMS_INVALID_TOPOLOGY_EPOCH);
    let older = topology(None).with_epoch(0);
    let r = g.heartbeat(&join("b", older), &topics, "c", 1).response;
    assert_eq!((r.error_code, statuses(&r)), (0, vec![STALE_TOPOLOGY]));
    let with_topology = beat("a", 1, None).with_topology(Some(topology(None)));
    let r = g.heartbeat(&with_topology, &topics, "c", 2).response;
    assert_eq!(r.error_code, Code::InvalidRequest.value());
}

#[test]
fn silent_members_and_slow_revokers_are_removed() {
    let topics = view(&[("in", 2)]);
    let mut g = StreamsGroup::default();
    g.heartbeat(&join("a", topology(None)), &topics, "c", 0);
    g.heartbeat(&join("b", topology(None)), &topics, "c", 0);
    // a must give up one task; it never does, past its 1 s rebalance timeout.
    let a = g.heartbeat(&beat("a", 1, None), &topics, "c", 10).response;
    assert_eq!(active(&a), Some(vec![0]));
    g.heartbeat(&beat("b", 2, None), &topics, "c", 500);
    assert!(!g.expire(1_000));
    assert!(
        g.expire(1_011),
        "a revoked for longer than its rebalance timeout"
    );
    assert_eq!(g.members.keys().collect::<Vec<_>>(), ["b"]);
    assert!(
        g.expire(500 + SESSION_TIMEOUT_MS + 1),
        "b silent past the session"
    );
    assert_eq!(g.state(), "Empty");
}

#[test]
fn answers_encode_at_every_served_version() {
    use crate::fake::wire::{encode_response, FakeResponse};
    let mut g = StreamsGroup::default();
    let r = g.heartbeat(&join("a", topology(None)), &view(&[("in", 1)]), "c", 0);
    for v in 0..=1 {
        let fitted = for_version(r.response.clone(), v);
        let bytes = encode_response(&FakeResponse::StreamsGroupHeartbeat(fitted), v, 7);
        assert!(bytes.is_ok(), "v{v}: {bytes:?}");
        let described = kafka_protocol::messages::StreamsGroupDescribeResponse::default()
            .with_groups(vec![g.describe("g")]);
        let bytes = encode_response(&FakeResponse::StreamsGroupDescribe(described), v, 7);
        assert!(bytes.is_ok(), "describe v{v}: {bytes:?}");
    }
}
