//! The share consumer (KIP-932, queues) against the real broker: members
//! sharing one partition, release and redelivery with rising delivery
//! counts, reject, close, and acquisition locks that lapse.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use purekafka::admin::AlterConfigOp;
use purekafka::consumer::share::AcknowledgementMode;
use purekafka::{AcknowledgeType, Admin, Cluster, ShareConsumer, ShareConsumerConfig, ShareRecord};
use tokio::time::Instant;

use crate::support::{self, records};

/// The broker's floor for `share.record.lock.duration.ms`
/// (`group.share.min.record.lock.duration.ms`, default 15 s).
const LOCK_MS: u64 = 15_000;

fn config(bootstrap: &str, group: &str, mode: AcknowledgementMode) -> ShareConsumerConfig {
    ShareConsumerConfig::from_properties([
        ("bootstrap.servers", bootstrap),
        ("client.id", "purekafka-it-share"),
        ("group.id", group),
        ("request.timeout.ms", "10000"),
        ("default.api.timeout.ms", "30000"),
        ("fetch.max.wait.ms", "200"),
        ("max.poll.records", "10"),
        (
            "share.acknowledgement.mode",
            match mode {
                AcknowledgementMode::Explicit => "explicit",
                _ => "implicit",
            },
        ),
    ])
    .expect("valid share consumer config")
}

/// A topic with `batches` batches of 10 records in partition 0, and a share
/// group that starts at the earliest offset (the broker's default is the
/// latest) with locks of `lock_ms`.
async fn setup(test: &str, batches: usize, lock_ms: u64) -> Option<(String, String, String)> {
    let bootstrap = support::bootstrap(test)?;
    if !support::real_broker_only(test, "share groups (KIP-932)") {
        return None;
    }
    support::trace();
    let cluster = Cluster::connect(support::config(&bootstrap))
        .await
        .expect("connect");
    let topic = support::unique_topic(test);
    support::create_topic(&cluster, &topic, 1).await;
    for b in 0..batches {
        records::produce(&cluster, &topic, 0, &records::values(&format!("v{b}-"), 10)).await;
    }
    let group = support::unique_topic(&format!("{test}-group"));
    let admin = Admin::connect(support::config(&bootstrap))
        .await
        .expect("admin");
    admin
        .alter_group_configs(
            &group,
            &[
                AlterConfigOp::Set("share.auto.offset.reset".into(), "earliest".into()),
                AlterConfigOp::Set("share.record.lock.duration.ms".into(), lock_ms.to_string()),
            ],
        )
        .await
        .expect("share group configs");
    Some((bootstrap, topic, group))
}

async fn consumer(
    bootstrap: &str,
    group: &str,
    topic: &str,
    mode: AcknowledgementMode,
) -> ShareConsumer {
    let c = ShareConsumer::connect(config(bootstrap, group, mode))
        .await
        .expect("share consumer");
    c.subscribe([topic]).expect("subscribe");
    c
}

/// Polls until `want` records arrived or `within` passed.
async fn poll_n(c: &ShareConsumer, want: usize, within: Duration) -> Vec<ShareRecord> {
    let deadline = Instant::now() + within;
    let mut out = Vec::new();
    while out.len() < want && Instant::now() < deadline {
        out.extend(c.poll(Duration::from_millis(500)).await.expect("poll"));
    }
    out
}

fn offsets(rs: &[ShareRecord]) -> BTreeSet<i64> {
    rs.iter().map(|r| r.offset).collect()
}

#[tokio::test]
async fn members_share_one_partition_and_every_record_is_processed() {
    let Some((bootstrap, topic, group)) = setup("share_many", 30, 30_000).await else {
        return;
    };
    let seen: Arc<Mutex<BTreeMap<i64, Vec<usize>>>> = Arc::default();
    let mut tasks = Vec::new();
    for member in 0..3 {
        let c = consumer(&bootstrap, &group, &topic, AcknowledgementMode::Implicit).await;
        let seen = seen.clone();
        tasks.push(tokio::spawn(async move {
            let deadline = Instant::now() + Duration::from_secs(60);
            while Instant::now() < deadline && seen.lock().unwrap().len() < 300 {
                for r in c.poll(Duration::from_millis(500)).await.expect("poll") {
                    assert_eq!(r.delivery_count, 1, "nothing was released");
                    // "Processing" takes a moment, so the others get a turn.
                    seen.lock()
                        .unwrap()
                        .entry(r.offset)
                        .or_default()
                        .push(member);
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            c.close().await.expect("close");
        }));
    }
    for t in tasks {
        t.await.expect("member task");
    }
    let seen = seen.lock().unwrap();
    assert_eq!(
        seen.keys().copied().collect::<Vec<_>>(),
        (0..300).collect::<Vec<_>>(),
        "every record processed at least once"
    );
    let members: BTreeSet<usize> = seen.values().flatten().copied().collect();
    assert!(
        members.len() >= 2,
        "one partition, several members: records went to {members:?} only"
    );
    let twice = seen.values().filter(|m| m.len() > 1).count();
    assert_eq!(
        twice, 0,
        "no record is delivered twice while all are accepted"
    );
}

#[tokio::test]
async fn released_records_come_back_with_a_higher_delivery_count() {
    let Some((bootstrap, topic, group)) = setup("share_release", 1, 30_000).await else {
        return;
    };
    let c = consumer(&bootstrap, &group, &topic, AcknowledgementMode::Explicit).await;
    let first = poll_n(&c, 10, Duration::from_secs(30)).await;
    assert_eq!(offsets(&first), (0..10).collect());
    assert!(first.iter().all(|r| r.delivery_count == 1));
    assert!(
        c.poll(Duration::from_millis(10)).await.is_err(),
        "explicit mode: poll refuses while records are unacknowledged"
    );
    for r in &first {
        c.acknowledge(r, AcknowledgeType::Release).expect("release");
    }
    let results = c.commit_sync().await.expect("commit");
    assert_eq!(results.len(), 1);
    assert!(results.values().all(Result::is_ok), "{results:?}");

    let again = poll_n(&c, 10, Duration::from_secs(30)).await;
    assert_eq!(
        offsets(&again),
        (0..10).collect(),
        "released records redelivered"
    );
    assert!(
        again.iter().all(|r| r.delivery_count == 2),
        "delivery counts rise: {:?}",
        again.iter().map(|r| r.delivery_count).collect::<Vec<_>>()
    );
    assert_eq!(again[3].value, first[3].value);
    for r in &again {
        c.acknowledge(r, AcknowledgeType::Accept).expect("accept");
    }
    c.close().await.expect("close");

    // The group has share state for exactly this partition. (Its start
    // offset reads 0 here even with every record accepted, as Java's
    // ShareGroupCommand --describe --offsets also shows on Kafka 4.4: the
    // persisted summary lags; only the partition and a clean answer are
    // asserted.)
    let admin = Admin::connect(support::config(&bootstrap))
        .await
        .expect("admin");
    let offsets = admin
        .describe_share_group_offsets(&group)
        .await
        .expect("share group offsets");
    assert_eq!(
        offsets.keys().cloned().collect::<Vec<_>>(),
        vec![first[0].partition.clone()]
    );
    assert!(
        offsets
            .values()
            .all(|r| matches!(r, Ok(o) if (0..=10).contains(o))),
        "{offsets:?}"
    );
}

#[tokio::test]
async fn rejected_records_are_never_redelivered() {
    let Some((bootstrap, topic, group)) = setup("share_reject", 1, 30_000).await else {
        return;
    };
    let c = consumer(&bootstrap, &group, &topic, AcknowledgementMode::Explicit).await;
    let first = poll_n(&c, 10, Duration::from_secs(30)).await;
    assert_eq!(first.len(), 10);
    for r in &first {
        let ty = if r.offset < 5 {
            AcknowledgeType::Reject
        } else {
            AcknowledgeType::Release
        };
        c.acknowledge(r, ty).expect("acknowledge");
    }
    // The acknowledgements ride on this poll's ShareFetch.
    let mut later = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(8);
    while Instant::now() < deadline {
        let got = c.poll(Duration::from_millis(500)).await.expect("poll");
        for r in &got {
            c.acknowledge(r, AcknowledgeType::Release)
                .expect("release again");
        }
        later.extend(got);
    }
    let redelivered = offsets(&later);
    assert_eq!(
        redelivered,
        (5..10).collect(),
        "released records keep coming back, rejected ones never"
    );
    assert!(later.iter().all(|r| r.delivery_count >= 2));
    let counts: BTreeSet<i16> = later.iter().map(|r| r.delivery_count).collect();
    assert!(
        counts.len() >= 2,
        "each release adds a delivery: {counts:?}"
    );
    c.close().await.expect("close");
}

#[tokio::test]
async fn close_releases_what_was_not_acknowledged() {
    let Some((bootstrap, topic, group)) = setup("share_close", 1, 30_000).await else {
        return;
    };
    let a = consumer(&bootstrap, &group, &topic, AcknowledgementMode::Explicit).await;
    let held = poll_n(&a, 10, Duration::from_secs(30)).await;
    assert_eq!(held.len(), 10);
    a.acknowledge(&held[0], AcknowledgeType::Accept)
        .expect("accept");
    let closed = Instant::now();
    a.close().await.expect("close");

    let b = consumer(&bootstrap, &group, &topic, AcknowledgementMode::Implicit).await;
    let got = poll_n(&b, 9, Duration::from_secs(20)).await;
    assert_eq!(
        offsets(&got),
        (1..10).collect(),
        "accepted record stays done"
    );
    assert!(got.iter().all(|r| r.delivery_count == 2));
    assert!(
        closed.elapsed() < Duration::from_secs(25),
        "released at close, well before the 30 s lock lapses"
    );
    b.close().await.expect("close");
}

#[tokio::test]
async fn a_stalled_members_records_return_when_its_locks_lapse() {
    let Some((bootstrap, topic, group)) = setup("share_lock", 1, LOCK_MS).await else {
        return;
    };
    let stalled = consumer(&bootstrap, &group, &topic, AcknowledgementMode::Explicit).await;
    let held = poll_n(&stalled, 10, Duration::from_secs(30)).await;
    assert_eq!(held.len(), 10);
    let acquired = Instant::now();
    // `stalled` stays a live member (its heartbeat runs) but never
    // acknowledges or polls again.
    let other = consumer(&bootstrap, &group, &topic, AcknowledgementMode::Implicit).await;
    let got = poll_n(&other, 10, Duration::from_millis(LOCK_MS + 20_000)).await;
    let waited = acquired.elapsed();
    assert_eq!(
        offsets(&got),
        (0..10).collect(),
        "every held record came back"
    );
    assert!(got.iter().all(|r| r.delivery_count == 2));
    assert!(
        waited >= Duration::from_millis(LOCK_MS - 1_000),
        "redelivered after {waited:?}, before the {LOCK_MS} ms lock lapsed"
    );
    other.close().await.expect("close");

    // Its late acknowledgements are for offsets `other` already accepted
    // (below the share-partition start offset); Kafka 4.4 answers them
    // without an error, so nothing is asserted about them here.
    let _ = stalled.close().await;
}

#[tokio::test]
async fn shares_a_partition_with_javas_share_consumer_and_admin_sees_both() {
    let Some((bootstrap, topic, group)) = setup("share_java", 0, 30_000).await else {
        return;
    };
    let admin = Admin::connect(support::config(&bootstrap))
        .await
        .expect("admin");
    let members = |admin: Admin, group: String| async move {
        match admin
            .describe_share_groups(std::slice::from_ref(&group))
            .await
        {
            Ok(mut d) => d
                .swap_remove(&group)
                .and_then(|r| r.ok())
                .map_or(0, |g| g.members.len()),
            Err(_) => 0,
        }
    };
    // Java's console share consumer: prints each value, exits after 8 s
    // without records.
    let java = {
        let (bootstrap, topic, group) = (bootstrap.clone(), topic.clone(), group.clone());
        tokio::task::spawn_blocking(move || {
            support::java::run(
                "org.apache.kafka.tools.consumer.ConsoleShareConsumer",
                &[
                    "--bootstrap-server",
                    &bootstrap,
                    "--topic",
                    &topic,
                    "--group",
                    &group,
                    "--timeout-ms",
                    "8000",
                    "--command-property",
                    "max.poll.records=5",
                ],
                None,
            )
        })
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    while members(admin.clone(), group.clone()).await < 1 {
        assert!(Instant::now() < deadline, "Java's member never joined");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let ours = consumer(&bootstrap, &group, &topic, AcknowledgementMode::Implicit).await;
    while members(admin.clone(), group.clone()).await < 2 {
        // Polling drives nothing here (the heartbeat task joins), but it
        // must not fail while the assignment arrives.
        assert!(ours
            .poll(Duration::from_millis(200))
            .await
            .expect("poll")
            .is_empty());
        assert!(Instant::now() < deadline, "our member never joined");
    }
    let listed = admin.list_share_groups().await.expect("list share groups");
    assert!(listed.iter().any(|g| g.group_id == group), "{listed:?}");

    let cluster = Cluster::connect(support::config(&bootstrap))
        .await
        .expect("connect");
    for b in 0..30 {
        records::produce(&cluster, &topic, 0, &records::values(&format!("j{b}-"), 10)).await;
    }
    let mut mine: Vec<String> = Vec::new();
    let quiet_until = |now: Instant| now + Duration::from_secs(10);
    let mut quiet = quiet_until(Instant::now());
    while Instant::now() < quiet {
        let got = ours.poll(Duration::from_millis(500)).await.expect("poll");
        if !got.is_empty() {
            quiet = quiet_until(Instant::now());
        }
        for r in got {
            mine.push(String::from_utf8_lossy(r.value.as_deref().unwrap_or_default()).into_owned());
            // Some processing time, so Java gets its share.
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
    ours.close().await.expect("close");
    let java_out = java.await.expect("java task");
    let theirs: Vec<String> = java_out
        .lines()
        .filter(|l| l.starts_with('j'))
        .map(str::to_owned)
        .collect();
    let all: BTreeSet<&String> = mine.iter().chain(&theirs).collect();
    assert_eq!(all.len(), 300, "every record processed by one of the two");
    assert_eq!(mine.len() + theirs.len(), 300, "none twice");
    assert!(
        !mine.is_empty() && !theirs.is_empty(),
        "both members got records: ours {}, Java's {}",
        mine.len(),
        theirs.len()
    );
}

/// `purekafka consume --share-group`: prints what it accepts; what it
/// fetched beyond `--max-messages` is released to the next reader.
#[cfg(feature = "cli")]
#[tokio::test]
async fn cli_consume_through_a_share_group_accepts_only_what_it_printed() {
    let Some((bootstrap, topic, group)) = setup("share_cli", 2, 30_000).await else {
        return;
    };
    let cli = move |max: &str| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_purekafka"))
            .args(["consume", "-b", &bootstrap, "--topic", &topic])
            .args(["--share-group", &group, "--max-messages", max])
            // A new member's partitions come with its second heartbeat,
            // one `group.share.heartbeat.interval.ms` (5 s) after joining.
            .args(["--timeout-ms", "12000"])
            .output()
            .expect("run the CLI");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(str::to_owned)
            .collect::<Vec<_>>()
    };
    let first = tokio::task::spawn_blocking({
        let cli = cli.clone();
        move || cli("5")
    })
    .await
    .expect("first run");
    assert_eq!(first.len(), 5, "{first:?}");
    let rest = tokio::task::spawn_blocking(move || cli("100"))
        .await
        .expect("second run");
    let all: BTreeSet<&String> = first.iter().chain(&rest).collect();
    assert_eq!(
        (rest.len(), all.len()),
        (15, 20),
        "the second run prints the 15 the first did not accept, released at its close: {rest:?}"
    );
}

#[tokio::test]
async fn commit_async_reports_to_the_acknowledgement_callback() {
    let Some((bootstrap, topic, group)) = setup("share_async", 1, 30_000).await else {
        return;
    };
    let c = consumer(&bootstrap, &group, &topic, AcknowledgementMode::Explicit).await;
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    c.set_acknowledgement_commit_callback(move |results| {
        let _ = tx.send(results.clone());
    });
    let got = poll_n(&c, 10, Duration::from_secs(30)).await;
    assert_eq!(got.len(), 10);
    for r in &got {
        c.acknowledge(r, AcknowledgeType::Accept).expect("accept");
    }
    c.commit_async();
    let results = tokio::time::timeout(Duration::from_secs(15), rx.recv())
        .await
        .expect("callback within 15 s")
        .expect("callback");
    assert_eq!(results.len(), 1, "{results:?}");
    assert!(results.values().all(Result::is_ok), "{results:?}");
    assert!(
        c.poll(Duration::from_secs(2))
            .await
            .expect("poll")
            .is_empty(),
        "accepted records do not come back"
    );
    c.close().await.expect("close");
}

/// The Kafka error code of a failed admin call.
fn code<T: std::fmt::Debug>(r: &purekafka::Result<T>) -> Option<i16> {
    r.as_ref()
        .err()
        .and_then(|e| e.kafka_code())
        .map(|c| c.code())
}

/// What members of `group` read after its start offsets were altered or
/// deleted: up to three members in turn, each polling up to 15 s (accepting
/// what it gets) and closing, until `want` records came. On Kafka 4.4 the
/// first member to join after the change reads nothing although it is
/// assigned the partition and DescribeShareGroupOffsets already shows the
/// new start offset (Java's console share consumer read nothing in 15 s
/// too); once a member has come and gone, the next reads from the new
/// start offset.
async fn read_after_reset(
    bootstrap: &str,
    group: &str,
    topic: &str,
    want: usize,
) -> Vec<ShareRecord> {
    let mut got = Vec::new();
    for _ in 0..3 {
        let c = consumer(bootstrap, group, topic, AcknowledgementMode::Implicit).await;
        got.extend(poll_n(&c, want - got.len(), Duration::from_secs(15)).await);
        c.close().await.expect("close");
        if got.len() >= want {
            break;
        }
    }
    got
}

const NON_EMPTY_GROUP: i16 = 68;
const GROUP_ID_NOT_FOUND: i16 = 69;

/// Reads and accepts the topic's 10 records through one member of `group`,
/// then leaves it running (the caller closes it).
async fn consume_all(bootstrap: &str, group: &str, topic: &str) -> ShareConsumer {
    let c = consumer(bootstrap, group, topic, AcknowledgementMode::Explicit).await;
    let got = poll_n(&c, 10, Duration::from_secs(30)).await;
    assert_eq!(offsets(&got), (0..10).collect());
    for r in &got {
        c.acknowledge(r, AcknowledgeType::Accept).expect("accept");
    }
    let results = c.commit_sync().await.expect("commit");
    assert!(results.values().all(Result::is_ok), "{results:?}");
    c
}

#[tokio::test]
async fn altered_start_offsets_redeliver_from_there_and_need_an_empty_group() {
    let Some((bootstrap, topic, group)) = setup("share_alter", 1, 30_000).await else {
        return;
    };
    let admin = Admin::connect(support::config(&bootstrap))
        .await
        .expect("admin");
    let tp = purekafka::TopicPartition::new(topic.as_str(), 0);
    let live = consume_all(&bootstrap, &group, &topic).await;
    let refused = admin
        .alter_share_group_offsets(&group, &[(tp.clone(), 4)])
        .await;
    assert_eq!(code(&refused), Some(NON_EMPTY_GROUP), "{refused:?}");
    live.close().await.expect("close");

    let altered = admin
        .alter_share_group_offsets(&group, &[(tp.clone(), 4)])
        .await
        .expect("alter share group offsets");
    assert_eq!(altered.len(), 1);
    assert!(altered[&tp].is_ok(), "{altered:?}");
    let starts = admin
        .describe_share_group_offsets(&group)
        .await
        .expect("describe share group offsets");
    assert!(
        matches!(starts.get(&tp), Some(Ok(4))),
        "start offset moved to 4: {starts:?}"
    );

    let got = read_after_reset(&bootstrap, &group, &topic, 6).await;
    assert_eq!(
        offsets(&got),
        (4..10).collect(),
        "accepted records from the new start offset on come again, none before it"
    );
    assert!(
        got.iter().all(|r| r.delivery_count == 1),
        "a fresh start: {:?}",
        got.iter().map(|r| r.delivery_count).collect::<Vec<_>>()
    );
}

#[tokio::test]
async fn deleted_share_offsets_start_the_topic_over_and_need_an_empty_group() {
    let Some((bootstrap, topic, group)) = setup("share_delete_offsets", 1, 30_000).await else {
        return;
    };
    let admin = Admin::connect(support::config(&bootstrap))
        .await
        .expect("admin");
    let live = consume_all(&bootstrap, &group, &topic).await;
    let refused = admin
        .delete_share_group_offsets(&group, std::slice::from_ref(&topic))
        .await;
    assert_eq!(code(&refused), Some(NON_EMPTY_GROUP), "{refused:?}");
    live.close().await.expect("close");

    let deleted = admin
        .delete_share_group_offsets(&group, std::slice::from_ref(&topic))
        .await
        .expect("delete share group offsets");
    assert_eq!(deleted.keys().collect::<Vec<_>>(), vec![&topic]);
    assert!(deleted[&topic].is_ok(), "{deleted:?}");
    let starts = admin
        .describe_share_group_offsets(&group)
        .await
        .expect("describe share group offsets");
    assert!(
        starts.values().all(|r| matches!(r, Ok(o) if *o < 0)),
        "no start offset left for the topic: {starts:?}"
    );

    let got = read_after_reset(&bootstrap, &group, &topic, 10).await;
    assert_eq!(
        offsets(&got),
        (0..10).collect(),
        "the group starts over by share.auto.offset.reset=earliest"
    );
}

#[tokio::test]
async fn delete_share_groups_spares_other_group_types_and_live_groups() {
    let Some((bootstrap, topic, group)) = setup("share_delete_group", 1, 30_000).await else {
        return;
    };
    let admin = Admin::connect(support::config(&bootstrap))
        .await
        .expect("admin");
    // A classic group that only committed offsets is not a share group.
    let classic = support::unique_topic("share_delete_group-classic");
    let tp = purekafka::TopicPartition::new(topic.as_str(), 0);
    let committed = admin
        .alter_group_offsets(&classic, &[(tp.clone(), 3)])
        .await
        .expect("commit as a classic group");
    assert!(committed[&tp].is_ok(), "{committed:?}");
    let mut r = admin
        .delete_share_groups(std::slice::from_ref(&classic))
        .await
        .expect("delete share groups");
    let r = r.swap_remove(&classic).expect("a result for the group");
    assert_eq!(code(&r), Some(GROUP_ID_NOT_FOUND), "{r:?}");
    let kept = admin
        .list_group_offsets(&classic, None)
        .await
        .expect("classic offsets");
    assert_eq!(kept[&tp].as_ref().map(|c| c.offset), Some(3), "untouched");

    let live = consume_all(&bootstrap, &group, &topic).await;
    let mut r = admin
        .delete_share_groups(std::slice::from_ref(&group))
        .await
        .expect("delete share groups");
    let r = r.swap_remove(&group).expect("a result for the group");
    assert_eq!(code(&r), Some(NON_EMPTY_GROUP), "{r:?}");
    live.close().await.expect("close");

    let mut r = admin
        .delete_share_groups(std::slice::from_ref(&group))
        .await
        .expect("delete share groups");
    r.swap_remove(&group)
        .expect("a result for the group")
        .expect("deleted");
    let listed = admin.list_share_groups().await.expect("list share groups");
    assert!(
        listed.iter().all(|g| g.group_id != group),
        "deleted group still listed: {listed:?}"
    );
}

/// `purekafka groups` on a share group, as `kafka-share-groups.sh`: listed
/// with its type, described with members and start offsets, its start
/// offsets reset (only once it is empty), and deleted.
#[cfg(feature = "cli")]
#[tokio::test]
async fn cli_groups_list_describe_reset_and_delete_a_share_group() {
    let Some((bootstrap, topic, group)) = setup("share_cli_groups", 1, 30_000).await else {
        return;
    };
    let run = |args: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_purekafka"))
            .args(["groups"])
            .args(args)
            .args(["-b", &bootstrap])
            .output()
            .expect("run the CLI");
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let json = |args: &[&str]| -> serde_json::Value {
        let (status, out, err) = run(args);
        assert_eq!(status, Some(0), "{args:?}: {err}");
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("{args:?}: {e}: {out}"))
    };
    let live = consume_all(&bootstrap, &group, &topic).await;

    let listed = json(&["list", "--type", "share", "--json"]);
    let ours: Vec<_> = listed
        .as_array()
        .expect("a list")
        .iter()
        .filter(|g| g["group"] == group.as_str())
        .collect();
    assert_eq!(ours.len(), 1, "{listed}");
    assert_eq!(ours[0]["type"], "share");

    let described = json(&["describe", &group, "--json"]);
    assert_eq!(described["type"], "share", "{described}");
    assert_eq!(described["state"], "Stable", "{described}");
    let members = described["members"].as_array().expect("members");
    assert_eq!(members.len(), 1, "{described}");
    assert_eq!(
        members[0]["assignment"],
        serde_json::json!([format!("{topic}-0")])
    );
    let offsets = described["offsets"].as_array().expect("offsets");
    assert_eq!(offsets.len(), 1, "{described}");
    assert_eq!(offsets[0]["topic"], topic.as_str());
    assert_eq!(offsets[0]["log_end_offset"], 10, "{described}");

    let (status, _, err) = run(&[
        "reset-offsets",
        &group,
        "--topic",
        &topic,
        "--to-offset",
        "3",
        "--execute",
    ]);
    assert_eq!(status, Some(1), "refused while a member is live");
    assert!(err.contains("must be empty"), "{err}");
    live.close().await.expect("close");

    let plan = json(&[
        "reset-offsets",
        &group,
        "--topic",
        &topic,
        "--to-latest",
        "--json",
    ]);
    assert_eq!(plan["executed"], false);
    assert_eq!(plan["partitions"][0]["new_start_offset"], 10, "{plan}");
    let done = json(&[
        "reset-offsets",
        &group,
        "--topic",
        &topic,
        "--to-offset",
        "3",
        "--execute",
        "--json",
    ]);
    assert_eq!(done["executed"], true);
    assert_eq!(done["partitions"][0]["new_start_offset"], 3, "{done}");
    let described = json(&["describe", &group, "--json"]);
    assert_eq!(described["members"], serde_json::json!([]), "{described}");
    assert_eq!(described["offsets"][0]["start_offset"], 3, "{described}");
    assert_eq!(described["offsets"][0]["lag"], 7, "{described}");

    let (status, out, err) = run(&["delete", &group]);
    assert_eq!(status, Some(0), "{err}");
    assert!(out.contains(&format!("deleted group {group}")), "{out}");
    let listed = json(&["list", "--type", "share", "--json"]);
    assert!(
        listed
            .as_array()
            .expect("a list")
            .iter()
            .all(|g| g["group"] != group.as_str()),
        "{listed}"
    );
}
