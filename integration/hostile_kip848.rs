//! The KIP-848 consumer group protocol (`group.protocol=consumer`) against
//! the hostile broker (issue #17): ConsumerGroupHeartbeat answers that
//! break the frame, carry an error (fatal, or fencing the member), lie
//! about the assignment, or drip in one byte per 100 ms. Every case ends
//! in a typed error or a bounded, empty poll; a fenced member rejoins.
//! Protocol:
//! <https://cwiki.apache.org/confluence/display/KAFKA/KIP-848%3A+The+Next+Generation+of+the+Consumer+Rebalance+Protocol>.
//! No real broker needed.

use std::time::Duration;

use kafka_protocol::messages::ApiKey;
use purekafka::consumer::GroupProtocol;
use purekafka::{Consumer, ConsumerConfig, Error, TopicPartition};

use crate::hostile::{assert_frame_error, bounded, connect_consumer, frame_faults, API_TIMEOUT};
use crate::support::hostile::{Fault, HostileBroker, TOPIC_ID};

const HEARTBEAT: ApiKey = ApiKey::ConsumerGroupHeartbeat;

async fn member(b: &HostileBroker) -> Consumer {
    let c = connect_consumer(
        b,
        ConsumerConfig::builder()
            .group_id("hostile-848")
            .group_protocol(GroupProtocol::Consumer)
            .enable_auto_commit(false)
            .fetch_max_wait(Duration::from_millis(100)),
    )
    .await;
    c.subscribe(["hostile"]).expect("subscribe");
    c
}

/// Polls for `within`: the first error, and the last assignment seen.
async fn poll_member(c: &Consumer, within: Duration) -> (Option<Error>, Vec<TopicPartition>) {
    let deadline = tokio::time::Instant::now() + within;
    let mut assignment = Vec::new();
    while tokio::time::Instant::now() < deadline {
        let res = bounded("poll", c.poll(Duration::from_millis(200))).await;
        assignment = c.assignment();
        match res {
            Err(e) => return (Some(e), assignment),
            Ok(records) => assert!(records.is_empty(), "the honest fetch is empty"),
        }
    }
    (None, assignment)
}

fn hostile_0() -> Vec<TopicPartition> {
    vec![TopicPartition::new("hostile", 0)]
}

/// Frame faults, a fatal error code and a slow drip on every heartbeat:
/// no assignment is ever taken; `poll` reports the broken frame typed (or
/// stays empty while the member retries in the background), and `close`
/// ends within the bound. Control first: the honest group assigns
/// `hostile-0`.
#[tokio::test]
async fn heartbeat_faults_end_typed_and_never_assign() {
    let b = HostileBroker::start().await;
    let c = bounded("member", member(&b)).await;
    let (err, assigned) = poll_member(&c, API_TIMEOUT).await;
    assert!(err.is_none(), "honest group: {err:?}");
    assert_eq!(assigned, hostile_0(), "the honest group assigns hostile-0");
    let _ = bounded("close", c.close()).await;

    let mut faults = frame_faults();
    faults.push(Fault::ErrorCode(30)); // GROUP_AUTHORIZATION_FAILED: fatal
    faults.push(Fault::SlowDrip(Duration::from_millis(100)));
    for fault in faults {
        let b = HostileBroker::with(HEARTBEAT, fault.clone()).await;
        let c = bounded("member", member(&b)).await;
        let started = tokio::time::Instant::now();
        let (err, assigned) = poll_member(&c, API_TIMEOUT).await;
        assert!(assigned.is_empty(), "{fault:?}: assigned {assigned:?}");
        assert!(b.count(HEARTBEAT) > 0, "{fault:?}: a heartbeat was sent");
        match (&fault, &err) {
            (Fault::ErrorCode(_), Some(e)) => {
                assert!(
                    matches!(e, Error::Kafka { code, .. } if code.code() == 30),
                    "{fault:?}: {e:?}"
                );
                assert!(!e.is_retriable(), "{fault:?}: {e}");
                let text = e.to_string();
                for part in [
                    "ConsumerGroupHeartbeat",
                    "hostile-848",
                    "member",
                    "coordinator",
                ] {
                    assert!(text.contains(part), "{fault:?}: names {part}: {text}");
                }
                assert!(
                    started.elapsed() < API_TIMEOUT,
                    "{fault:?}: reported within {API_TIMEOUT:?}"
                );
            }
            // Retried in the background (a lost answer, a timeout): polls
            // stay empty, and a retry never makes up an assignment.
            (Fault::Truncated | Fault::Silent | Fault::SlowDrip(_), e) => {
                assert!(e.is_none(), "{fault:?}: {e:?}");
                assert!(
                    b.count(HEARTBEAT) >= 2,
                    "{fault:?}: the member retried ({} heartbeats)",
                    b.count(HEARTBEAT)
                );
            }
            (f, Some(e)) => assert_frame_error(f, e, "ConsumerGroupHeartbeat"),
            (f, None) => panic!("{f:?}: poll must report the broken answer"),
        }
        let _ = bounded("close", c.close()).await;
    }
}

/// FENCED_MEMBER_EPOCH (110) and UNKNOWN_MEMBER_ID (25) after the member
/// holds `hostile-0`: it loses the partition, rejoins with epoch 0 and is
/// assigned again, with no error surfaced (KIP-848's fencing is recovered
/// by rejoining, as the Java consumer does).
#[tokio::test]
async fn a_fenced_member_rejoins_at_epoch_zero_and_is_assigned_again() {
    for code in [110, 25] {
        let b = HostileBroker::start().await;
        let c = bounded("member", member(&b)).await;
        let (err, assigned) = poll_member(&c, API_TIMEOUT).await;
        assert!(
            err.is_none() && assigned == hostile_0(),
            "{code}: {err:?} {assigned:?}"
        );
        let joins = |b: &HostileBroker| b.epochs(HEARTBEAT).iter().filter(|e| **e == 0).count();
        assert_eq!(joins(&b), 1, "{code}: one join so far");
        b.script_once(HEARTBEAT, Fault::ErrorCode(code));
        let started = tokio::time::Instant::now();
        while joins(&b) < 2 {
            assert!(
                started.elapsed() < API_TIMEOUT,
                "{code}: no rejoin within {API_TIMEOUT:?}: {:?}",
                b.epochs(HEARTBEAT)
            );
            let r = bounded("poll", c.poll(Duration::from_millis(100))).await;
            r.unwrap_or_else(|e| panic!("{code}: fencing is recovered, not surfaced: {e:?}"));
        }
        let (err, assigned) = poll_member(&c, Duration::from_secs(1)).await;
        assert!(err.is_none(), "{code}: {err:?}");
        assert_eq!(
            assigned,
            hostile_0(),
            "{code}: assigned again after rejoining"
        );
        let _ = bounded("close", c.close()).await;
    }
}

/// Lies about the assignment: a topic id no metadata knows, and a
/// partition the topic does not have. Each is left out after a metadata
/// refresh (nothing is assigned) and never fetched. Polls stay bounded and
/// empty.
#[tokio::test]
async fn assignment_lies_never_reach_the_fetcher() {
    let unknown_topic = Fault::Assigns(vec![(0xdead_beef, vec![0])]);
    let b = HostileBroker::with(HEARTBEAT, unknown_topic).await;
    let c = bounded("member", member(&b)).await;
    let metadata_before = b.count(ApiKey::Metadata);
    let (err, assigned) = poll_member(&c, API_TIMEOUT).await;
    assert!(err.is_none(), "unknown topic id: {err:?}");
    assert!(
        assigned.is_empty(),
        "unknown topic id: assigned {assigned:?}"
    );
    assert!(
        b.count(ApiKey::Metadata) > metadata_before,
        "unknown topic id: metadata refreshed to resolve it"
    );
    assert_eq!(
        b.count(ApiKey::Fetch),
        0,
        "unknown topic id: nothing fetched"
    );
    let _ = bounded("close", c.close()).await;

    let missing_partition = Fault::Assigns(vec![(TOPIC_ID, vec![99])]);
    let b = HostileBroker::with(HEARTBEAT, missing_partition).await;
    let c = bounded("member", member(&b)).await;
    let metadata_before = b.count(ApiKey::Metadata);
    let (err, assigned) = poll_member(&c, API_TIMEOUT).await;
    assert!(err.is_none(), "partition 99: {err:?}");
    assert!(
        assigned.is_empty(),
        "partition 99: left out of the assignment, assigned {assigned:?}"
    );
    assert!(
        b.count(ApiKey::Metadata) > metadata_before,
        "partition 99: metadata refreshed to find it"
    );
    assert_eq!(
        b.count(ApiKey::Fetch),
        0,
        "partition 99: no fetch for a partition the topic does not have"
    );
    let _ = bounded("close", c.close()).await;
}

/// A KIP-848 revocation racing a Fetch answer (issue #17): the member owns
/// `hostile-0`, a Fetch for it is in flight (its answer, 5 records, comes
/// 700 ms late, inside `request.timeout.ms`), and the next heartbeat
/// revokes the partition. The member
/// acknowledges the revocation (a heartbeat owning nothing) before the
/// answer arrives; no poll after that acknowledgement may hand out a record
/// of the revoked partition. Control first: the same late answer without a
/// revocation is delivered, so the race, not the fake, keeps the records
/// out.
#[tokio::test]
async fn a_fetch_answer_arriving_after_a_revocation_is_never_delivered() {
    let late = Duration::from_millis(700);
    for revoke in [false, true] {
        let b = HostileBroker::start().await;
        let c = bounded("member", member(&b)).await;
        let (err, assigned) = poll_member(&c, API_TIMEOUT).await;
        assert!(
            err.is_none() && assigned == hostile_0(),
            "revoke={revoke}: {err:?} {assigned:?}"
        );
        let fetches = b.count(ApiKey::Fetch);
        b.script_once(ApiKey::Fetch, Fault::LateRecords(late));
        let started = tokio::time::Instant::now();
        // The next Fetch after the script gets the late answer.
        while b.count(ApiKey::Fetch) <= fetches && started.elapsed() < API_TIMEOUT {
            let r = bounded("poll", c.poll(Duration::from_millis(50))).await;
            assert!(
                r.expect("poll").is_empty(),
                "revoke={revoke}: honest fetches are empty"
            );
        }
        let late_fetch_at = *b
            .arrivals(ApiKey::Fetch)
            .get(fetches)
            .unwrap_or_else(|| panic!("revoke={revoke}: the late Fetch was sent"));
        let heartbeats = b.heartbeat_owned().len();
        if revoke {
            b.script(HEARTBEAT, Fault::Assigns(Vec::new()));
        }
        // Poll past the late answer; note when each record came.
        let mut got: Vec<(std::time::Instant, TopicPartition, i64)> = Vec::new();
        let until = tokio::time::Instant::now() + late + Duration::from_secs(2);
        while tokio::time::Instant::now() < until {
            let records = bounded("poll", c.poll(Duration::from_millis(100)))
                .await
                .unwrap_or_else(|e| panic!("revoke={revoke}: {e:?}"));
            let now = std::time::Instant::now();
            got.extend(records.iter().map(|r| (now, r.partition.clone(), r.offset)));
        }
        if !revoke {
            assert!(
                got.iter().any(|(_, tp, _)| *tp == hostile_0()[0]),
                "control: the late answer's records are delivered: {got:?}"
            );
            let _ = bounded("close", c.close()).await;
            continue;
        }
        // The acknowledgement: the first heartbeat after the script that
        // reports owning nothing.
        let ack_at = b.heartbeat_owned()[heartbeats..]
            .iter()
            .find(|(_, owned)| matches!(owned, Some(o) if o.iter().all(|(_, ps)| ps.is_empty())))
            .map(|(at, _)| *at)
            .expect("the member acknowledged the revocation");
        assert!(
            ack_at < late_fetch_at + late,
            "the revocation was acknowledged while the Fetch was in flight ({:?} after it was sent)",
            ack_at - late_fetch_at
        );
        assert!(c.assignment().is_empty(), "revoked: {:?}", c.assignment());
        let after_ack: Vec<_> = got.iter().filter(|(at, _, _)| *at >= ack_at).collect();
        assert!(
            after_ack.is_empty(),
            "records of the revoked partition delivered after the acknowledgement: {after_ack:?}"
        );
        eprintln!(
            "revocation acked {:?} after the late Fetch was sent; {} records before the ack, 0 after",
            ack_at - late_fetch_at,
            got.len()
        );
        let _ = bounded("close", c.close()).await;
    }
}

/// A commit whose retry crosses a revocation (issue #17). The member owns
/// `hostile-0` and commits offset 3 for it; the first OffsetCommit is
/// answered with a retriable code (COORDINATOR_LOAD_IN_PROGRESS, 14, or
/// STALE_MEMBER_EPOCH, 113), and during the retry backoff (1.5 s) the next
/// heartbeat revokes the partition, which the member acknowledges. The
/// retry would carry the new member epoch, which the coordinator accepts
/// (it checks the epoch, not ownership), overwriting the new owner's
/// offsets; so the commit must fail instead: `CommitFailed` with the code,
/// not retriable, naming `hostile-0`, the group and the revocation, within
/// `default.api.timeout.ms`, and no second OffsetCommit is sent. Java's
/// `commitSync` fails such a commit with `CommitFailedException`. Before
/// the fix in this round the retry was sent and the commit reported as
/// succeeded.
///
/// Only one request is in flight per connection and the member heartbeats
/// on the commit's connection, so a revocation cannot be acknowledged while
/// an OffsetCommit is on the wire (the broker answers the commit first,
/// while the member still owns the partition); the retry is where the race
/// is. Control: the same answer without a revocation is retried and
/// succeeds.
#[tokio::test]
async fn a_commit_retry_crossing_a_revocation_fails_instead_of_committing() {
    let backoff = Duration::from_millis(1500);
    for (revoke, code) in [(false, 14), (false, 113), (true, 14), (true, 113)] {
        let case = format!("revoke={revoke} first answer={code}");
        let b = HostileBroker::start().await;
        let ms = backoff.as_millis().to_string();
        let config = ConsumerConfig::builder()
            .group_id("hostile-848")
            .group_protocol(GroupProtocol::Consumer)
            .enable_auto_commit(false)
            .fetch_max_wait(Duration::from_millis(100))
            .client(|_| {
                crate::hostile::client(&b)
                    .set("retry.backoff.ms", &ms)
                    .and_then(|c| c.set("retry.backoff.max.ms", &ms))
                    .expect("retry backoff")
            })
            .fetch_max_bytes(1 << 19)
            .build()
            .expect("config");
        let c = std::sync::Arc::new(
            bounded("member", Consumer::connect(config))
                .await
                .expect("consumer"),
        );
        c.subscribe(["hostile"]).expect("subscribe");
        let (err, assigned) = poll_member(&c, API_TIMEOUT).await;
        assert!(
            err.is_none() && assigned == hostile_0(),
            "{case}: {err:?} {assigned:?}"
        );
        b.script_once(ApiKey::OffsetCommit, Fault::ErrorCode(code));
        let heartbeats = b.heartbeat_owned().len();
        let started = tokio::time::Instant::now();
        let commit = {
            let c = c.clone();
            tokio::spawn(async move {
                let offsets = [(
                    TopicPartition::new("hostile", 0),
                    purekafka::consumer::OffsetAndMetadata::new(3),
                )]
                .into_iter()
                .collect();
                c.commit_sync_offsets(offsets).await
            })
        };
        while b.count(ApiKey::OffsetCommit) == 0 && started.elapsed() < API_TIMEOUT {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let first_at = *b
            .arrivals(ApiKey::OffsetCommit)
            .first()
            .unwrap_or_else(|| panic!("{case}: the OffsetCommit was sent"));
        if revoke {
            b.script(HEARTBEAT, Fault::Assigns(Vec::new()));
        }
        // Keep polling (a poll hands the revocation to the member) until
        // the commit ends.
        while !commit.is_finished() && started.elapsed() < API_TIMEOUT * 2 {
            let _ = bounded("poll", c.poll(Duration::from_millis(50))).await;
        }
        let result = bounded("commit", commit)
            .await
            .expect("the commit task ended");
        let took = started.elapsed();
        let commits = b.count(ApiKey::OffsetCommit);
        let epochs = b.epochs(ApiKey::OffsetCommit);
        eprintln!("{case}: {result:?} after {took:?}; {commits} OffsetCommit (epochs {epochs:?})");
        if !revoke {
            result.unwrap_or_else(|e| panic!("{case}: retried and committed: {e}"));
            assert_eq!(commits, 2, "{case}: one retry");
            let _ = bounded("close", c.close()).await;
            continue;
        }
        let ack_at = b.heartbeat_owned()[heartbeats..]
            .iter()
            .find(|(_, owned)| matches!(owned, Some(o) if o.iter().all(|(_, ps)| ps.is_empty())))
            .map(|(at, _)| *at)
            .unwrap_or_else(|| panic!("{case}: the member acknowledged the revocation"));
        assert!(
            ack_at < first_at + backoff,
            "{case}: the revocation was acknowledged during the backoff ({:?} after the first \
             OffsetCommit)",
            ack_at - first_at
        );
        assert!(c.assignment().is_empty(), "{case}: {:?}", c.assignment());
        let e = result.expect_err("a commit for a revoked partition must not be retried");
        assert!(
            matches!(&e, Error::CommitFailed { code: k, .. } if k.code() == code),
            "{case}: {e:?}"
        );
        assert!(e.is_commit_failed() && !e.is_retriable(), "{case}: {e}");
        let text = e.to_string();
        for part in ["hostile-0", "hostile-848", "revoked"] {
            assert!(text.contains(part), "{case}: names {part}: {text}");
        }
        assert_eq!(commits, 1, "{case}: the retry was not sent");
        assert!(took < API_TIMEOUT, "{case}: failed within {API_TIMEOUT:?}");
        let _ = bounded("close", c.close()).await;
    }
}
