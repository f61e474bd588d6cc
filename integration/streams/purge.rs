//! Repartition topics purged (`repartition.purge.interval.ms`, issue #16):
//! once the counting application of `group_by.rs` has committed past the
//! records of its repartition topic, each partition's log start offset
//! (ListOffsets earliest) rises to the group's committed offset, and is
//! never seen above it, on a consumer group and on a streams group (and
//! there under exactly-once, where the offsets commit with the
//! transactions); with the interval set to an hour nothing is deleted.

use std::collections::BTreeMap;

use purekafka::admin::OffsetSpec;
use purekafka::streams::{repartition_topic, GroupProtocol};
use purekafka::Admin;

use super::group_by::{city_config, counting_by_city, produce_orders_in, PARTITIONS};
use super::*;

const RECORDS: usize = 200;

/// Per repartition partition: (log start, committed, log end) offsets,
/// read in that order (a committed offset only grows, so a purge that
/// respects it shows log start <= committed).
async fn offsets(admin: &Admin, app: &str, tps: &[TopicPartition]) -> Vec<(i64, i64, i64)> {
    let listed = |spec: OffsetSpec| async move {
        let ask: Vec<(TopicPartition, OffsetSpec)> =
            tps.iter().map(|tp| (tp.clone(), spec)).collect();
        let m = admin.list_offsets(&ask).await.expect("list offsets");
        tps.iter()
            .map(|tp| m[tp].as_ref().expect("listed offset").offset)
            .collect::<Vec<i64>>()
    };
    let earliest = listed(OffsetSpec::Earliest).await;
    let committed: BTreeMap<TopicPartition, i64> = admin
        .list_group_offsets(app, Some(tps))
        .await
        .expect("group offsets")
        .into_iter()
        .map(|(tp, o)| (tp, o.map_or(0, |o| o.offset)))
        .collect();
    let latest = listed(OffsetSpec::Latest).await;
    tps.iter()
        .enumerate()
        .map(|(i, tp)| {
            (
                earliest[i],
                committed.get(tp).copied().unwrap_or(0),
                latest[i],
            )
        })
        .collect()
}

/// Starts counting `RECORDS` records through the repartition topic with
/// the purge every `interval`; returns the app's admin, id and repartition
/// partitions, and the running app.
async fn counted(
    test: &str,
    protocol: GroupProtocol,
    mode: CommitMode,
    interval: Duration,
) -> Option<(Admin, String, Vec<TopicPartition>, RunningStreams)> {
    let (bootstrap, cluster, input) = setup(test, PARTITIONS).await?;
    let out = format!("{input}-out");
    support::create_topic(&cluster, &out, PARTITIONS).await;
    let app = support::unique_topic(&format!("{test}-app"));
    produce_orders_in(&bootstrap, &input, 0..RECORDS).await;
    let config = city_config(&bootstrap, &app, mode)
        .group_protocol(protocol)
        .repartition_purge_interval(interval)
        .build()
        .unwrap();
    let running = counting_by_city(config, &input, &out)
        .build()
        .start()
        .await
        .expect("start");
    let admin = Admin::connect(support::config(&bootstrap))
        .await
        .expect("admin");
    let repartition = repartition_topic(&app, "by-city");
    let tps = (0..PARTITIONS)
        .map(|p| TopicPartition::new(repartition.as_str(), p))
        .collect();
    Some((admin, app, tps, running))
}

async fn purged_up_to_the_committed_offset(test: &str, protocol: GroupProtocol, mode: CommitMode) {
    let exactly_once = matches!(mode, CommitMode::ExactlyOnce);
    let Some((admin, app, tps, running)) =
        counted(test, protocol, mode, Duration::from_millis(300)).await
    else {
        return;
    };
    // Sampled from the start, while records are processed and committed.
    let deadline = Instant::now() + Duration::from_secs(60);
    let last = loop {
        let now = offsets(&admin, &app, &tps).await;
        for (tp, (start, committed, _)) in tps.iter().zip(&now) {
            assert!(
                start <= committed,
                "{tp}: log start {start} above the committed offset {committed}"
            );
        }
        // Done: every record processed (twice: to the repartition topic,
        // then counted from it), everything written committed, and purged
        // up to it. Under exactly-once the last offset of a partition
        // written to is its transaction's commit marker, which no consumer
        // offset passes.
        let processed = running.metrics().processed >= 2 * RECORDS as u64;
        let committed_all = |c: i64, e: i64| c == e || (exactly_once && c == e - 1);
        if processed && now.iter().all(|(s, c, e)| s == c && committed_all(*c, *e)) {
            break now;
        }
        assert!(!running.is_finished(), "the app stopped early");
        assert!(
            Instant::now() < deadline,
            "not purged up to the committed offsets within 60 s: (log start, committed, \
             end) per partition {now:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    running.shutdown().await.expect("clean shutdown");
    let purged: i64 = last.iter().map(|(s, _, _)| s).sum();
    if exactly_once {
        // The records, and the markers of the transactions before the
        // last (the last one's marker sits at the committed offset).
        assert!(
            purged >= RECORDS as i64,
            "every repartition record purged: {last:?}"
        );
    } else {
        assert_eq!(
            purged, RECORDS as i64,
            "every repartition record purged: {last:?}"
        );
    }
}

#[tokio::test]
async fn repartition_records_are_purged_up_to_the_committed_offset_on_a_consumer_group() {
    purged_up_to_the_committed_offset(
        "streams_purge_classic",
        GroupProtocol::Classic,
        CommitMode::Sync,
    )
    .await;
}

#[tokio::test]
async fn repartition_records_are_purged_up_to_the_committed_offset_on_a_streams_group() {
    purged_up_to_the_committed_offset(
        "streams_purge_streams",
        GroupProtocol::Streams,
        CommitMode::Sync,
    )
    .await;
}

#[tokio::test]
async fn exactly_once_repartition_records_are_purged_up_to_the_committed_offset() {
    purged_up_to_the_committed_offset(
        "streams_purge_eos",
        GroupProtocol::Streams,
        CommitMode::ExactlyOnce,
    )
    .await;
}

#[tokio::test]
async fn with_an_hour_long_purge_interval_nothing_is_purged() {
    let Some((admin, app, tps, running)) = counted(
        "streams_purge_never",
        GroupProtocol::Classic,
        CommitMode::Sync,
        Duration::from_secs(3600),
    )
    .await
    else {
        return;
    };
    wait_for(&running, |r| r.metrics().processed >= 2 * RECORDS as u64).await;
    // Wait until every repartition record's offset is committed: from
    // then on a purge would delete them.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let now = offsets(&admin, &app, &tps).await;
        if now.iter().all(|(_, c, e)| c == e) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "not committed within 60 s: {now:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    running.shutdown().await.expect("clean shutdown");
    let now = offsets(&admin, &app, &tps).await;
    let written: i64 = now.iter().map(|(_, _, e)| e).sum();
    assert_eq!(written, RECORDS as i64, "{now:?}");
    assert!(
        now.iter().all(|(s, _, _)| *s == 0),
        "records purged with a one-hour interval: {now:?}"
    );
}
