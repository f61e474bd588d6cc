//! Scripted transitions of the KIP-848 member: events in, actions checked.

use kafka_protocol::messages::consumer_group_heartbeat_response::Assignment;
use kafka_protocol::protocol::StrBytes;

use super::*;

fn tp(p: i32) -> TopicPartition {
    TopicPartition::new("t", p)
}

fn set(ps: &[i32]) -> BTreeSet<TopicPartition> {
    ps.iter().map(|p| tp(*p)).collect()
}

fn member(is_static: bool) -> Kip848Member {
    Kip848Member::new("g".into(), "m-1".into(), is_static, Duration::from_secs(3))
}

/// An answer with `epoch`; `assigned`: a target assignment (its topic ids
/// are resolved by the driver, so any id does here).
fn answer(epoch: i32, assigned: Option<&[i32]>) -> Event {
    let mut resp = ConsumerGroupHeartbeatResponse::default()
        .with_member_id(Some(StrBytes::from_static_str("m-1")))
        .with_member_epoch(epoch)
        .with_heartbeat_interval_ms(5000);
    if let Some(ps) = assigned {
        resp = resp.with_assignment(Some(Assignment::default().with_topic_partitions(vec![
            TopicPartitions::default().with_partitions(ps.to_vec()),
        ])));
    }
    Event::Heartbeat(Ok(resp))
}

fn refused(code: i16) -> Event {
    Event::Heartbeat(Ok(
        ConsumerGroupHeartbeatResponse::default().with_error_code(code)
    ))
}

fn kinds(actions: &[Action]) -> Vec<&'static str> {
    actions
        .iter()
        .map(|a| match a {
            Action::Publish { .. } => "publish",
            Action::Heartbeat { .. } => "heartbeat",
            Action::Resolve(_) => "resolve",
            Action::Revoke(_) => "revoke",
            Action::Lose(_) => "lose",
            Action::Assigned(_) => "assigned",
            Action::Wait { .. } => "wait",
            Action::Rediscover => "rediscover",
            Action::Backoff { .. } => "backoff",
            Action::WaitForPoll => "wait-for-poll",
            Action::Fatal(_) => "fatal",
            Action::Stop => "stop",
        })
        .collect()
}

/// A member at epoch 5 owning `parts`, between heartbeats.
fn stable(is_static: bool, parts: &[i32]) -> Kip848Member {
    let mut m = member(is_static);
    assert!(matches!(
        &m.handle(Event::Start)[..],
        [Action::Heartbeat { epoch: 0, .. }]
    ));
    assert_eq!(
        kinds(&m.handle(answer(5, Some(parts)))),
        ["publish", "resolve"]
    );
    let out = m.handle(Event::Resolved(set(parts)));
    assert_eq!(kinds(&out), ["publish", "assigned", "heartbeat"]);
    assert_eq!(kinds(&m.handle(answer(5, None))), ["publish", "wait"]);
    assert_eq!(m.phase(), &Phase::Stable);
    m
}

#[test]
fn a_member_joins_with_epoch_0_and_takes_the_coordinators_interval() {
    let m = stable(false, &[0, 1]);
    assert_eq!(m.interval(), Duration::from_millis(5000));
    assert!(
        matches!(m.heartbeat_action(), Action::Heartbeat { epoch: 5, owned, .. } if owned == set(&[0, 1]))
    );
}

/// Partial reconciliation: what is no longer assigned is revoked first; the
/// new partitions come after the ack; the next heartbeat goes at once and
/// reports what the member now owns.
#[test]
fn reconciliation_revokes_first_then_adds_and_reports_at_once() {
    let mut m = stable(false, &[0, 1]);
    assert_eq!(kinds(&m.handle(Event::HeartbeatDue)), ["heartbeat"]);
    m.handle(answer(6, Some(&[1, 2])));
    let out = m.handle(Event::Resolved(set(&[1, 2])));
    assert!(matches!(&out[..], [Action::Revoke(r)] if *r == set(&[0])));
    // Heartbeats while the ack is awaited report what is still owned.
    assert!(
        matches!(m.heartbeat_action(), Action::Heartbeat { owned, .. } if owned == set(&[0, 1]))
    );
    let out = m.handle(Event::RevokeDone);
    assert_eq!(kinds(&out), ["publish", "assigned", "heartbeat"]);
    assert!(matches!(&out[1], Action::Assigned(a) if *a == [tp(2)]));
    assert!(matches!(&out[2], Action::Heartbeat { epoch: 6, owned, .. } if *owned == set(&[1, 2])));
}

/// The coordinator sends each assignment once: one arriving during a
/// revocation (on a heartbeat sent while waiting for the ack) is kept and
/// reconciled after the current one.
#[test]
fn an_assignment_arriving_during_a_revocation_is_kept() {
    let mut m = stable(false, &[0, 1]);
    m.handle(Event::HeartbeatDue);
    m.handle(answer(6, Some(&[1])));
    m.handle(Event::Resolved(set(&[1])));
    let out = m.handle(answer(7, Some(&[1, 3])));
    assert_eq!(kinds(&out), ["publish"], "absorbed, not acted on yet");
    let out = m.handle(Event::RevokeDone);
    assert!(matches!(&out[2], Action::Heartbeat { epoch: 7, .. }));
    // The next answer carries no assignment; the kept one is reconciled.
    let out = m.handle(answer(7, None));
    assert_eq!(kinds(&out), ["publish", "resolve"]);
    let out = m.handle(Event::Resolved(set(&[1, 3])));
    assert!(matches!(&out[1], Action::Assigned(a) if *a == [tp(3)]));
}

/// An unchanged target needs no callbacks and no extra heartbeat.
#[test]
fn an_unchanged_assignment_settles() {
    let mut m = stable(false, &[0]);
    m.handle(Event::HeartbeatDue);
    m.handle(answer(5, Some(&[0])));
    assert_eq!(kinds(&m.handle(Event::Resolved(set(&[0])))), ["wait"]);
}

/// FENCED_MEMBER_EPOCH / UNKNOWN_MEMBER_ID: the partitions are lost and
/// the member rejoins with epoch 0 at once.
#[test]
fn a_fenced_member_loses_its_partitions_and_rejoins_with_epoch_0() {
    for code in [FENCED_MEMBER_EPOCH, UNKNOWN_MEMBER_ID] {
        let mut m = stable(false, &[0, 1]);
        m.handle(Event::HeartbeatDue);
        let out = m.handle(refused(code));
        assert_eq!(kinds(&out), ["publish", "lose", "heartbeat"]);
        assert!(matches!(&out[1], Action::Lose(l) if *l == set(&[0, 1])));
        assert!(matches!(&out[2], Action::Heartbeat { epoch: 0, owned, .. } if owned.is_empty()));
    }
}

#[test]
fn coordinator_errors_back_off_and_rediscover() {
    for (code, first) in [(14, "backoff"), (16, "rediscover"), (15, "rediscover")] {
        let mut m = stable(false, &[0]);
        m.handle(Event::HeartbeatDue);
        let out = m.handle(refused(code));
        assert_eq!(kinds(&out)[0], first, "{code}");
        assert!(matches!(out.last(), Some(Action::Backoff { attempt: 0 })));
        assert_eq!(kinds(&m.handle(Event::BackoffDone)), ["heartbeat"]);
        // A second failure in a row backs off longer.
        assert!(matches!(
            m.handle(refused(code)).last(),
            Some(Action::Backoff { attempt: 1 })
        ));
    }
    // Unsupported assignor, authorisation: fatal.
    let mut m = stable(false, &[0]);
    m.handle(Event::HeartbeatDue);
    assert_eq!(kinds(&m.handle(refused(30))), ["fatal"]);
}

/// Leaving: epoch -1, or -2 for a static member; close revokes first.
#[test]
fn close_revokes_then_leaves_with_epoch_minus_1_or_minus_2() {
    for (is_static, leave_epoch) in [(false, LEAVE_EPOCH), (true, LEAVE_STATIC_EPOCH)] {
        let mut m = stable(is_static, &[0]);
        assert!(matches!(&m.handle(Event::Close)[..], [Action::Revoke(r)] if *r == set(&[0])));
        let out = m.handle(Event::RevokeDone);
        assert!(matches!(&out[..], [Action::Heartbeat { epoch, .. }] if *epoch == leave_epoch));
        // Best effort: an error still closes.
        let out = m.handle(refused(16));
        assert!(matches!(
            &out[..],
            [Action::Publish { epoch: -1, .. }, Action::Stop]
        ));
        assert_eq!(m.phase(), &Phase::Closed);
    }
    // Never joined: nothing to leave.
    let mut m = member(false);
    m.handle(Event::Start);
    assert_eq!(kinds(&m.handle(Event::Close)), ["publish", "stop"]);
}

/// The application stopped polling: leave without a revocation (nobody
/// would ack it), lose the partitions, rejoin with epoch 0 on the next poll.
#[test]
fn a_poll_expiry_leaves_loses_and_rejoins_on_the_next_poll() {
    let mut m = stable(false, &[0]);
    let out = m.handle(Event::PollExpired);
    assert!(matches!(
        &out[..],
        [Action::Heartbeat {
            epoch: LEAVE_EPOCH,
            ..
        }]
    ));
    let out = m.handle(answer(-1, None));
    assert_eq!(kinds(&out), ["publish", "lose", "wait-for-poll"]);
    assert_eq!(m.phase(), &Phase::Fenced);
    assert!(matches!(
        &m.handle(Event::Polled)[..],
        [Action::Heartbeat { epoch: 0, .. }]
    ));
}
