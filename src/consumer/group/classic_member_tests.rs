//! Scripted transitions of the classic member: events in, actions checked.

use kafka_protocol::messages::leave_group_response::MemberResponse;
use kafka_protocol::protocol::StrBytes;

use super::*;

fn tp(p: i32) -> TopicPartition {
    TopicPartition::new("t", p)
}

fn set(ps: &[i32]) -> BTreeSet<TopicPartition> {
    ps.iter().map(|p| tp(*p)).collect()
}

fn kafka(code: i16) -> Error {
    Error::Kafka {
        code: KafkaCode::from_code(code).unwrap(),
        context: "test".into(),
    }
}

fn joined(member: &str, leader: &str, generation: i32) -> Event {
    Event::Joined(Ok(JoinGroupResponse::default()
        .with_member_id(StrBytes::from_string(member.into()))
        .with_leader(StrBytes::from_string(leader.into()))
        .with_generation_id(generation)
        .with_protocol_name(Some(StrBytes::from_static_str("range")))))
}

fn join_error(code: i16, member: &str) -> Event {
    Event::Joined(Ok(JoinGroupResponse::default()
        .with_error_code(code)
        .with_member_id(StrBytes::from_string(member.into()))))
}

fn synced(parts: &[i32]) -> Event {
    let parts: Vec<TopicPartition> = parts.iter().map(|p| tp(*p)).collect();
    let bytes = subscription::encode_assignment(&parts).unwrap();
    Event::Synced(Ok(SyncGroupResponse::default().with_assignment(bytes)))
}

fn heartbeat(code: i16) -> Event {
    Event::Heartbeat(Ok(HeartbeatResponse::default().with_error_code(code)))
}

/// The action kinds, for compact assertions.
fn kinds(actions: &[Action]) -> Vec<&'static str> {
    actions
        .iter()
        .map(|a| match a {
            Action::Publish { .. } => "publish",
            Action::Revoke(_) => "revoke",
            Action::Lose(_) => "lose",
            Action::Assigned(_) => "assigned",
            Action::Join { .. } => "join",
            Action::Lead(_) => "lead",
            Action::Sync { .. } => "sync",
            Action::Wait => "wait",
            Action::Heartbeat { .. } => "heartbeat",
            Action::Rediscover => "rediscover",
            Action::Backoff { .. } => "backoff",
            Action::Leave { .. } => "leave",
            Action::WaitForPoll => "wait-for-poll",
            Action::Fatal(_) => "fatal",
            Action::Stop => "stop",
        })
        .collect()
}

/// A follower that joined as `m-1` in generation 5 and owns `parts`.
fn stable(cooperative: bool, is_static: bool, parts: &[i32]) -> ClassicMember {
    let mut m = ClassicMember::new("g".into(), is_static, cooperative);
    assert_eq!(kinds(&m.handle(Event::Start)), ["join"]);
    assert_eq!(
        kinds(&m.handle(joined("m-1", "m-0", 5))),
        ["publish", "sync"]
    );
    let out = m.handle(synced(parts));
    assert_eq!(kinds(&out), ["publish", "assigned", "wait"]);
    assert_eq!(m.phase(), &Phase::Stable { in_flight: false });
    m
}

fn heartbeat_due(m: &mut ClassicMember) -> Vec<Action> {
    m.handle(Event::HeartbeatDue {
        counts: PartitionCounts::new(),
    })
}

#[test]
fn a_dynamic_member_joins_again_with_the_id_member_id_required_gave() {
    let mut m = ClassicMember::new("g".into(), false, false);
    assert!(
        matches!(&m.handle(Event::Start)[..], [Action::Join { member_id, generation: -1, .. }] if member_id.is_empty())
    );
    let out = m.handle(join_error(MEMBER_ID_REQUIRED, "m-1"));
    assert!(matches!(&out[..], [Action::Join { member_id, .. }] if member_id == "m-1"));
    // A second MEMBER_ID_REQUIRED is a failed rebalance: backoff, rejoin.
    let out = m.handle(join_error(MEMBER_ID_REQUIRED, "m-2"));
    assert_eq!(kinds(&out), ["backoff"]);
}

#[test]
fn the_leader_assigns_before_syncing_and_a_follower_syncs_with_nothing() {
    let mut m = ClassicMember::new("g".into(), false, false);
    m.handle(Event::Start);
    let out = m.handle(joined("m-0", "m-0", 1));
    assert_eq!(kinds(&out), ["publish", "lead"]);
    assert_eq!(m.phase(), &Phase::Assigning);
    let mut counts = PartitionCounts::new();
    counts.insert("t".into(), 2);
    let out = m.handle(Event::Led(Ok((Vec::new(), counts.clone()))));
    assert!(
        matches!(&out[..], [Action::Sync { generation: 1, protocol: Some(p), .. }] if p.as_str() == "range")
    );
    m.handle(synced(&[0, 1]));
    assert_eq!(m.leader_topics(), ["t"]);
    // Partitions added to a subscribed topic: the leader rejoins (Java).
    counts.insert("t".into(), 3);
    let out = m.handle(Event::HeartbeatDue { counts });
    assert_eq!(kinds(&out), ["revoke"], "eager: revoke all, then rejoin");

    // KIP-814: a static leader whose assignment the coordinator kept skips
    // the assignor.
    let mut m = ClassicMember::new("g".into(), true, false);
    m.handle(Event::Start);
    let Event::Joined(Ok(resp)) = joined("m-0", "m-0", 2) else {
        unreachable!()
    };
    let out = m.handle(Event::Joined(Ok(resp.with_skip_assignment(true))));
    assert_eq!(kinds(&out), ["publish", "sync"]);
}

#[test]
fn rebalance_in_progress_rejoins_at_once_then_with_backoff() {
    let mut m = stable(false, false, &[0, 1]);
    heartbeat_due(&mut m);
    let out = m.handle(heartbeat(REBALANCE_IN_PROGRESS));
    assert!(matches!(&out[..], [Action::Revoke(p)] if *p == set(&[0, 1])));
    let out = m.handle(Event::RevokeDone);
    assert_eq!(kinds(&out), ["publish", "join"]);
    // The rebalance fails again: now with backoff.
    let out = m.handle(Event::Joined(Err(kafka(REBALANCE_IN_PROGRESS))));
    assert!(matches!(&out[..], [Action::Backoff { attempt: 1 }]));
    assert_eq!(kinds(&m.handle(Event::BackoffDone)), ["join"]);
}

/// Eager (range, roundrobin): everything is revoked before JoinGroup.
/// Cooperative (KIP-429): JoinGroup keeps the partitions, only what
/// SyncGroup took away is revoked, after it, then a follow-up rejoin.
#[test]
fn eager_revokes_before_joining_and_cooperative_after_syncing() {
    let mut eager = stable(false, false, &[0, 1]);
    let out = eager.handle(Event::SubscriptionChanged);
    assert_eq!(kinds(&out), ["revoke"]);
    let out = eager.handle(Event::RevokeDone);
    assert!(matches!(&out[1], Action::Join { owned, .. } if owned.is_empty()));
    eager.handle(joined("m-1", "m-0", 6));
    let out = eager.handle(synced(&[1]));
    assert!(matches!(&out[1], Action::Assigned(a) if *a == [tp(1)]));

    let mut coop = stable(true, false, &[0, 1]);
    let out = coop.handle(Event::SubscriptionChanged);
    assert!(matches!(&out[..], [Action::Join { owned, .. }] if *owned == [tp(0), tp(1)]));
    coop.handle(joined("m-1", "m-0", 6));
    let out = coop.handle(synced(&[1, 2]));
    assert!(matches!(&out[..], [Action::Revoke(r)] if *r == set(&[0])));
    let out = coop.handle(Event::RevokeDone);
    assert_eq!(kinds(&out), ["publish", "assigned", "join"]);
    assert!(matches!(&out[1], Action::Assigned(a) if *a == [tp(2)]));
    assert!(matches!(&out[2], Action::Join { owned, .. } if *owned == [tp(1), tp(2)]));
    // Nothing revoked in the follow-up: stable.
    coop.handle(joined("m-1", "m-0", 7));
    assert_eq!(
        kinds(&coop.handle(synced(&[1, 2]))),
        ["publish", "assigned", "wait"]
    );
}

/// UNKNOWN_MEMBER_ID (a member past `session.timeout.ms`, or removed):
/// the partitions are lost, not revoked, and the member rejoins without an
/// id. ILLEGAL_GENERATION keeps the id.
#[test]
fn fenced_members_lose_their_partitions_and_rejoin() {
    let mut m = stable(false, false, &[0, 1]);
    heartbeat_due(&mut m);
    let out = m.handle(heartbeat(UNKNOWN_MEMBER_ID));
    assert_eq!(kinds(&out), ["publish", "lose", "join"]);
    assert!(matches!(&out[1], Action::Lose(p) if *p == set(&[0, 1])));
    assert!(
        matches!(&out[2], Action::Join { member_id, generation: -1, .. } if member_id.is_empty())
    );

    let mut m = stable(true, false, &[0]);
    heartbeat_due(&mut m);
    let out = m.handle(heartbeat(ILLEGAL_GENERATION));
    assert_eq!(kinds(&out), ["publish", "lose", "join"]);
    assert!(
        matches!(&out[2], Action::Join { member_id, generation: -1, owned } if member_id == "m-1" && owned.is_empty())
    );

    // Fenced in SyncGroup too.
    let mut m = ClassicMember::new("g".into(), false, false);
    m.handle(Event::Start);
    m.handle(joined("m-1", "m-0", 3));
    let out = m.handle(Event::Synced(Ok(
        SyncGroupResponse::default().with_error_code(UNKNOWN_MEMBER_ID)
    )));
    assert!(matches!(
        &out[..],
        [Action::Publish { generation: -1, .. }, Action::Join { .. }]
    ));
}

/// NOT_COORDINATOR / COORDINATOR_NOT_AVAILABLE: look the coordinator up
/// again. A heartbeat keeps the membership and heartbeats again; a join
/// retries the join.
#[test]
fn a_moved_coordinator_is_looked_up_again() {
    for code in [16, 15] {
        let mut m = stable(false, false, &[0]);
        heartbeat_due(&mut m);
        let out = m.handle(heartbeat(code));
        assert!(matches!(
            &out[..],
            [Action::Rediscover, Action::Backoff { attempt: 0 }]
        ));
        assert_eq!(
            kinds(&m.handle(Event::BackoffDone)),
            ["wait"],
            "still a member"
        );
        assert_eq!(kinds(&heartbeat_due(&mut m)), ["heartbeat"]);

        let mut m = ClassicMember::new("g".into(), false, false);
        m.handle(Event::Start);
        let out = m.handle(Event::Joined(Ok(
            JoinGroupResponse::default().with_error_code(code)
        )));
        assert_eq!(kinds(&out), ["rediscover", "backoff"]);
        assert_eq!(kinds(&m.handle(Event::BackoffDone)), ["join"]);
    }
    // A lost connection counts the same.
    let mut m = stable(false, false, &[0]);
    heartbeat_due(&mut m);
    let gone = Error::Disconnected {
        broker: "broker 1".into(),
        api: Some("Heartbeat".into()),
        reason: "closed".into(),
    };
    assert_eq!(
        kinds(&m.handle(Event::Heartbeat(Err(gone)))),
        ["rediscover", "backoff"]
    );
}

/// KIP-345: FENCED_INSTANCE_ID (another process took our
/// `group.instance.id`) is fatal, as are authorisation and protocol errors.
#[test]
fn a_fenced_static_member_and_other_fatal_errors_stop_membership() {
    for code in [82, 30, 23] {
        let mut m = stable(false, true, &[0]);
        heartbeat_due(&mut m);
        let out = m.handle(heartbeat(code));
        assert_eq!(kinds(&out), ["fatal"], "{code}");
        assert_eq!(m.phase(), &Phase::Closed);
        assert_eq!(kinds(&m.handle(Event::Close)), ["stop"]);
    }
}

/// KIP-62: a dynamic member that stopped polling leaves, loses its
/// partitions and waits for the next poll to rejoin; a static member sends
/// no LeaveGroup (KIP-345).
#[test]
fn a_poll_expiry_leaves_and_rejoins_on_the_next_poll() {
    let mut m = stable(false, false, &[0]);
    let out = m.handle(Event::PollExpired);
    assert!(matches!(&out[..], [Action::Leave { member_id, .. }] if member_id == "m-1"));
    let left = LeaveGroupResponse::default().with_members(vec![MemberResponse::default()]);
    let out = m.handle(Event::Left(Ok(left)));
    assert_eq!(kinds(&out), ["publish", "lose", "wait-for-poll"]);
    assert_eq!(m.phase(), &Phase::Fenced);
    let out = m.handle(Event::Polled);
    assert!(matches!(&out[..], [Action::Join { member_id, .. }] if member_id.is_empty()));

    let mut m = stable(false, true, &[0]);
    assert_eq!(
        kinds(&m.handle(Event::PollExpired)),
        ["publish", "lose", "wait-for-poll"]
    );
}

/// Java's close: revoke what we own (so the consumer can commit), then
/// LeaveGroup for a dynamic member; a static member just goes.
#[test]
fn close_revokes_then_leaves() {
    let mut m = stable(false, false, &[0, 1]);
    assert!(matches!(&m.handle(Event::Close)[..], [Action::Revoke(p)] if *p == set(&[0, 1])));
    let out = m.handle(Event::RevokeDone);
    assert!(
        matches!(&out[..], [Action::Publish { owned, .. }, Action::Leave { .. }] if owned.is_empty())
    );
    // A failed LeaveGroup still closes.
    let out = m.handle(Event::Left(Err(kafka(16))));
    assert!(matches!(
        &out[..],
        [Action::Publish { generation: -1, .. }, Action::Stop]
    ));

    let mut m = stable(false, true, &[0]);
    m.handle(Event::Close);
    assert_eq!(kinds(&m.handle(Event::RevokeDone)), ["publish", "stop"]);

    // Close while joining: nothing owned, nothing to say.
    let mut m = ClassicMember::new("g".into(), false, false);
    m.handle(Event::Start);
    assert_eq!(kinds(&m.handle(Event::Close)), ["publish", "stop"]);
}

#[test]
fn coordinator_loading_retries_and_answers_out_of_phase_are_ignored() {
    let mut m = ClassicMember::new("g".into(), false, false);
    m.handle(Event::Start);
    assert_eq!(kinds(&m.handle(join_error(14, ""))), ["backoff"]);
    // A stray SyncGroup answer while backing off changes nothing.
    assert!(m.handle(synced(&[0])).is_empty());
    assert_eq!(m.phase(), &Phase::BackingOff { then_join: true });
    assert!(heartbeat_due(&mut m).is_empty());
}
