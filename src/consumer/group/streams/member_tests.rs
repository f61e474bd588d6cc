//! The streams member's transitions, scripted: no socket, no clock.

use std::collections::BTreeSet;
use std::time::Duration;

use kafka_protocol::messages::streams_group_heartbeat_response::{Status, TaskIds};
use kafka_protocol::messages::StreamsGroupHeartbeatResponse;
use kafka_protocol::protocol::StrBytes;

use super::*;
use crate::error::Error;

fn topology() -> StreamsTopology {
    StreamsTopology {
        epoch: 1,
        subtopologies: vec![Subtopology {
            id: "0".into(),
            source_topics: vec!["in".into()],
            state_changelog_topics: vec!["app-store-changelog".into()],
            ..Subtopology::default()
        }],
    }
}

fn member(static_id: Option<&str>) -> StreamsMemberState {
    StreamsMemberState::new(
        "app",
        "m-1",
        "p-1",
        static_id.map(str::to_owned),
        Duration::from_secs(30),
        topology(),
    )
}

fn ids(parts: &[i32]) -> Vec<TaskIds> {
    vec![TaskIds::default()
        .with_subtopology_id(StrBytes::from_static_str("0"))
        .with_partitions(parts.to_vec())]
}

fn set(parts: &[i32]) -> BTreeSet<TaskId> {
    parts.iter().map(|p| TaskId::new("0", *p)).collect()
}

fn answer(epoch: i32, active: Option<&[i32]>) -> StreamsGroupHeartbeatResponse {
    StreamsGroupHeartbeatResponse::default()
        .with_member_id(StrBytes::from_static_str("m-1"))
        .with_member_epoch(epoch)
        .with_heartbeat_interval_ms(2000)
        .with_active_tasks(active.map(ids))
        .with_standby_tasks(active.map(|_| Vec::new()))
        .with_warmup_tasks(active.map(|_| Vec::new()))
}

fn failure(code: i16) -> StreamsGroupHeartbeatResponse {
    StreamsGroupHeartbeatResponse::default()
        .with_error_code(code)
        .with_error_message(Some(StrBytes::from_static_str("told so")))
}

fn reported(req: &kafka_protocol::messages::StreamsGroupHeartbeatRequest) -> Option<Vec<i32>> {
    req.active_tasks
        .as_ref()
        .map(|t| t.iter().flat_map(|x| x.partitions.clone()).collect())
}

/// A member that joined and owns `parts`.
fn joined(parts: &[i32]) -> StreamsMemberState {
    let mut m = member(None);
    m.heartbeat_request();
    m.on_heartbeat(Ok(answer(1, Some(parts)))).expect("answer");
    m.heartbeat_request();
    m
}

#[test]
fn join_sends_epoch_zero_the_topology_and_the_process() {
    let mut m = member(None);
    let req = m.heartbeat_request();
    assert_eq!(req.member_epoch, 0);
    assert_eq!(req.group_id.0.as_str(), "app");
    assert_eq!(req.member_id.as_str(), "m-1");
    assert_eq!(req.process_id.as_deref(), Some("p-1"));
    assert_eq!(req.rebalance_timeout_ms, 30_000);
    let t = req.topology.as_ref().expect("topology on join");
    assert_eq!(t.epoch, 1);
    assert_eq!(t.subtopologies.len(), 1);
    assert_eq!(t.subtopologies[0].source_topics[0].0.as_str(), "in");
    assert_eq!(
        t.subtopologies[0].state_changelog_topics[0].name.0.as_str(),
        "app-store-changelog"
    );
    assert_eq!(reported(&req), Some(vec![]));
}

#[test]
fn assigned_tasks_are_started_and_acknowledged_by_the_next_heartbeat() {
    let mut m = member(None);
    m.heartbeat_request();
    // Joined, nothing assigned yet (the coordinator's initial delay).
    assert_eq!(m.on_heartbeat(Ok(answer(1, None))).unwrap(), vec![]);
    assert_eq!(m.epoch(), 1);
    assert_eq!(m.heartbeat_interval(), Duration::from_millis(2000));
    let req = m.heartbeat_request();
    assert!(
        req.topology.is_none(),
        "the topology goes only with the join"
    );
    assert_eq!(req.member_epoch, 1);
    let changes = m.on_heartbeat(Ok(answer(2, Some(&[0, 1, 2])))).unwrap();
    assert_eq!(changes, vec![TaskChange::Assign(set(&[0, 1, 2]))]);
    assert_eq!(m.owned().active, set(&[0, 1, 2]));
    let req = m.heartbeat_request();
    assert_eq!(req.member_epoch, 2);
    assert_eq!(reported(&req), Some(vec![0, 1, 2]));
    // Unchanged since: owned tasks are sent as null.
    m.on_heartbeat(Ok(answer(2, None))).unwrap();
    assert_eq!(reported(&m.heartbeat_request()), None);
}

#[test]
fn revoked_tasks_are_closed_before_new_ones_start() {
    let mut m = joined(&[0, 1, 2]);
    let changes = m.on_heartbeat(Ok(answer(3, Some(&[1, 3])))).unwrap();
    assert_eq!(changes, vec![TaskChange::Revoke(set(&[0, 2]))]);
    assert!(m.is_revoking());
    // Until the ack the member still owns (and reports) the revoked tasks.
    assert_eq!(m.owned().active, set(&[0, 1, 2]));
    assert_eq!(reported(&m.heartbeat_request()), None);
    let changes = m.revoke_done();
    assert_eq!(changes, vec![TaskChange::Assign(set(&[3]))]);
    assert_eq!(m.owned().active, set(&[1, 3]));
    assert_eq!(reported(&m.heartbeat_request()), Some(vec![1, 3]));
    assert_eq!(m.revoke_done(), vec![], "no second ack");
}

#[test]
fn a_newer_target_during_a_revocation_revokes_only_the_new_losses() {
    let mut m = joined(&[0, 1, 2]);
    m.on_heartbeat(Ok(answer(3, Some(&[1, 2])))).unwrap();
    let changes = m.on_heartbeat(Ok(answer(4, Some(&[2, 5])))).unwrap();
    assert_eq!(changes, vec![TaskChange::Revoke(set(&[1]))]);
    assert_eq!(m.revoke_done(), vec![TaskChange::Assign(set(&[5]))]);
    assert_eq!(m.owned().active, set(&[2, 5]));
}

#[test]
fn standby_and_warmup_tasks_are_tracked() {
    let mut m = member(None);
    m.heartbeat_request();
    let resp = answer(1, Some(&[0]))
        .with_standby_tasks(Some(ids(&[1])))
        .with_warmup_tasks(Some(ids(&[2])));
    m.on_heartbeat(Ok(resp)).unwrap();
    assert_eq!(m.owned().standby, set(&[1]));
    assert_eq!(m.owned().warmup, set(&[2]));
    let req = m.heartbeat_request();
    assert_eq!(req.standby_tasks.unwrap()[0].partitions, vec![1]);
    assert_eq!(req.warmup_tasks.unwrap()[0].partitions, vec![2]);
}

#[test]
fn fenced_or_unknown_member_loses_its_tasks_and_rejoins_with_the_topology() {
    for code in [110, 25] {
        let mut m = joined(&[0, 1]);
        let changes = m.on_heartbeat(Ok(failure(code))).unwrap();
        assert_eq!(changes, vec![TaskChange::Lose(set(&[0, 1]))], "code {code}");
        assert_eq!(m.owned(), &TaskAssignment::default());
        let req = m.heartbeat_request();
        assert_eq!(req.member_epoch, 0);
        assert!(req.topology.is_some());
        assert_eq!(reported(&req), Some(vec![]));
    }
}

#[test]
fn coordinator_errors_are_retriable_and_keep_the_tasks() {
    for code in [14, 15, 16] {
        let mut m = joined(&[0]);
        let err = m.on_heartbeat(Ok(failure(code))).unwrap_err();
        assert!(err.is_retriable(), "{err}");
        assert_eq!(m.owned().active, set(&[0]));
        // The owned tasks are reported again with the retry.
        assert_eq!(reported(&m.heartbeat_request()), Some(vec![0]));
    }
    let mut m = joined(&[0]);
    let err = m
        .on_heartbeat(Err(Error::Disconnected {
            broker: crate::error::Origin::Cluster,
            api: Some("StreamsGroupHeartbeat".into()),
            reason: "closed".into(),
        }))
        .unwrap_err();
    assert!(err.is_retriable());
    assert_eq!(reported(&m.heartbeat_request()), Some(vec![0]));
}

#[test]
fn topology_errors_are_fatal_and_named() {
    for code in [130, 131, 132, 30] {
        let mut m = member(None);
        m.heartbeat_request();
        let err = m.on_heartbeat(Ok(failure(code))).unwrap_err();
        assert!(!err.is_retriable(), "code {code}: {err}");
        let text = err.to_string();
        assert!(
            text.contains("StreamsGroupHeartbeat (told so) for group app member m-1"),
            "{text}"
        );
    }
}

#[test]
fn statuses_are_kept() {
    let mut m = member(None);
    m.heartbeat_request();
    let resp = answer(1, None).with_status(Some(vec![Status::default()
        .with_status_code(1)
        .with_status_detail(StrBytes::from_static_str("Source topics in are missing."))]));
    m.on_heartbeat(Ok(resp)).unwrap();
    assert_eq!(
        m.statuses(),
        &[(1, "Source topics in are missing.".to_owned())]
    );
}

#[test]
fn leaving_sends_minus_one_or_minus_two_for_a_static_member() {
    let mut m = joined(&[0, 1]);
    assert_eq!(m.leave(), set(&[0, 1]));
    assert_eq!(m.heartbeat_request().member_epoch, LEAVE_EPOCH);
    assert_eq!(m.on_heartbeat(Ok(answer(-1, None))).unwrap(), vec![]);
    assert!(m.has_left());

    let mut m = member(Some("instance-a"));
    m.heartbeat_request();
    m.on_heartbeat(Ok(answer(1, Some(&[0])))).unwrap();
    m.leave();
    let req = m.heartbeat_request();
    assert_eq!(req.member_epoch, LEAVE_STATIC_EPOCH);
    assert_eq!(req.instance_id.as_deref(), Some("instance-a"));
}

#[test]
fn the_rack_goes_with_the_join_only() {
    let mut m = member(None).with_rack(Some("rack-a".into()));
    let join = m.heartbeat_request();
    assert_eq!(join.rack_id.as_deref(), Some("rack-a"));
    m.on_heartbeat(Ok(answer(1, Some(&[0])))).expect("answer");
    assert_eq!(m.heartbeat_request().rack_id, None);
    let mut m = member(None).with_rack(Some(String::new()));
    assert_eq!(m.heartbeat_request().rack_id, None, "an empty rack is none");
}

#[test]
fn a_member_that_left_rejoins_with_epoch_zero_the_topology_and_nothing_owned() {
    let mut m = joined(&[0, 1]);
    m.leave();
    m.heartbeat_request();
    m.on_heartbeat(Ok(answer(-1, None))).unwrap();
    m.rejoin();
    assert!(!m.has_left());
    assert_eq!(m.owned(), &TaskAssignment::default());
    let req = m.heartbeat_request();
    assert_eq!(req.member_epoch, 0);
    assert!(req.topology.is_some(), "the join carries the topology");
    assert_eq!(reported(&req), Some(vec![]));
    let changes = m.on_heartbeat(Ok(answer(3, Some(&[1])))).unwrap();
    assert_eq!(changes, vec![TaskChange::Assign(set(&[1]))]);
}

#[test]
fn the_target_shows_new_standbys_while_the_revocation_is_under_way() {
    let mut m = member(None);
    m.heartbeat_request();
    m.on_heartbeat(Ok(answer(1, Some(&[0, 1])))).unwrap();
    assert_eq!(m.target().active, set(&[0, 1]));
    // Task 1 moves away and stays here as a standby: the target says so
    // before the application has closed it; what is owned does not.
    let moved = answer(2, Some(&[0])).with_standby_tasks(Some(ids(&[1])));
    let changes = m.on_heartbeat(Ok(moved)).unwrap();
    assert_eq!(changes, vec![TaskChange::Revoke(set(&[1]))]);
    assert_eq!(m.target().standby, set(&[1]));
    assert_eq!(m.target().active, set(&[0]));
    assert_eq!(m.owned().active, set(&[0, 1]));
    assert!(m.owned().standby.is_empty());
    assert!(m.revoke_done().is_empty());
    assert_eq!(m.target(), m.owned());
    assert_eq!(m.owned().standby, set(&[1]));
}
