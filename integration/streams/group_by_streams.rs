//! `group_by` on a streams group (`group.protocol=streams`, KIP-1071;
//! issue #16): the count by a computed key of `group_by.rs` declared as
//! two subtopologies, `"0"` reading the input and writing the repartition
//! topic `<application.id>-by-city-repartition`, `"1"` reading it (with
//! its 4 partitions) and counting. One instance counts a first batch; a
//! second instance joins and the coordinator moves tasks of both
//! subtopologies to it; a second batch is counted across both. Under
//! exactly-once each city's updates (read_committed) are exactly 1, 2, ...
//! n over both batches; under at-least-once every count 1..=n is reached.

use std::collections::{BTreeMap, BTreeSet};

use purekafka::admin::StreamsGroupDescription;
use purekafka::consumer::IsolationLevel;
use purekafka::streams::{repartition_topic, GroupProtocol};
use purekafka::Admin;

use super::group_by::{
    city_config, counting_by_city, partition_count, produce_orders_in, updates, PARTITIONS,
};
use super::*;

/// Records per batch.
const BATCH: usize = 300;

/// The group's members' active tasks, per subtopology.
fn active(g: &StreamsGroupDescription) -> Vec<BTreeMap<String, BTreeSet<i32>>> {
    g.members
        .iter()
        .map(|m| {
            m.assignment
                .active
                .iter()
                .map(|(st, ps)| (st.clone(), ps.iter().copied().collect()))
                .collect()
        })
        .collect()
}

/// Waits (60 s at most) until the group has two members, every task of
/// both subtopologies is active on exactly one of them, and each member
/// runs tasks of both subtopologies.
async fn shared_by_two(admin: &Admin, app: &str) -> StreamsGroupDescription {
    let all: BTreeSet<i32> = (0..PARTITIONS).collect();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let g = admin
            .describe_streams_groups(&[app.to_owned()])
            .await
            .expect("describe call")
            .swap_remove(app)
            .expect("one result");
        let mut seen = Vec::new();
        if let Ok(g) = g {
            let members = active(&g);
            let shared = ["0", "1"].iter().all(|st| {
                let sets: Vec<BTreeSet<i32>> = members
                    .iter()
                    .map(|m| m.get(*st).cloned().unwrap_or_default())
                    .collect();
                let union: BTreeSet<i32> = sets.iter().flatten().copied().collect();
                let total: usize = sets.iter().map(BTreeSet::len).sum();
                union == all && total == all.len() && sets.iter().all(|s| !s.is_empty())
            });
            if members.len() == 2 && shared {
                return g;
            }
            seen = members;
        }
        assert!(
            Instant::now() < deadline,
            "the tasks of both subtopologies were not shared by two members within 60 s: \
             {seen:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn two_instances_count_by_a_computed_key(test: &str, mode: CommitMode) {
    let Some((bootstrap, cluster, input)) = setup(test, PARTITIONS).await else {
        return;
    };
    let out = format!("{input}-out");
    support::create_topic(&cluster, &out, PARTITIONS).await;
    let app = support::unique_topic(&format!("{test}-app"));
    let repartition = repartition_topic(&app, "by-city");
    let exactly_once = matches!(mode, CommitMode::ExactlyOnce);
    let start = |id: usize| {
        let dir = std::env::temp_dir().join(format!("purekafka-{app}-{id}"));
        let config = city_config(&bootstrap, &app, mode.clone())
            .group_protocol(GroupProtocol::Streams)
            .state_dir(dir)
            .build()
            .unwrap();
        counting_by_city(config, &input, &out).build().start()
    };

    let mut reference = produce_orders_in(&bootstrap, &input, 0..BATCH).await;
    let a = start(0).await.expect("instance a");
    // Each record is processed twice: in subtopology 0 (to the repartition
    // topic) and in subtopology 1 (counted).
    wait_for(&a, |r| r.metrics().processed >= 2 * BATCH as u64).await;

    let b = start(1).await.expect("instance b");
    let admin = Admin::connect(support::config(&bootstrap))
        .await
        .expect("admin");
    let g = shared_by_two(&admin, &app).await;
    let sub = |id: &str| {
        g.subtopologies
            .iter()
            .find(|s| s.id == id)
            .unwrap_or_else(|| panic!("subtopology {id} in {:?}", g.subtopologies))
    };
    assert_eq!(g.subtopologies.len(), 2, "{:?}", g.subtopologies);
    assert_eq!(sub("0").source_topics, vec![input.clone()]);
    assert_eq!(sub("0").repartition_sink_topics, vec![repartition.clone()]);
    assert_eq!(
        sub("1").repartition_source_topics,
        vec![(repartition.clone(), PARTITIONS)]
    );
    assert!(sub("1").source_topics.is_empty());
    assert_eq!(
        sub("1").state_changelog_topics.len(),
        1,
        "{:?}",
        sub("1").state_changelog_topics
    );
    assert_eq!(
        partition_count(&cluster, &repartition).await,
        PARTITIONS as usize
    );

    for (city, n) in produce_orders_in(&bootstrap, &input, BATCH..2 * BATCH).await {
        *reference.entry(city).or_insert(0) += n;
    }
    let deadline = Instant::now() + Duration::from_secs(90);
    while a.metrics().processed + b.metrics().processed < 4 * BATCH as u64 {
        assert!(!a.is_finished() && !b.is_finished(), "an instance stopped");
        assert!(
            Instant::now() < deadline,
            "not every record processed within 90 s: a {}, b {}",
            a.metrics().processed,
            b.metrics().processed
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        b.metrics().processed > 0,
        "the second instance processed nothing"
    );
    b.shutdown().await.expect("b shut down");
    a.shutdown().await.expect("a shut down");
    for id in 0..2 {
        let _ = std::fs::remove_dir_all(std::env::temp_dir().join(format!("purekafka-{app}-{id}")));
    }

    let isolation = if exactly_once {
        IsolationLevel::ReadCommitted
    } else {
        IsolationLevel::ReadUncommitted
    };
    let updates = updates(&bootstrap, &out, isolation).await;
    assert_eq!(
        updates.keys().collect::<Vec<_>>(),
        reference.keys().collect::<Vec<_>>()
    );
    for (city, n) in &reference {
        let u = &updates[city];
        if exactly_once {
            let want: Vec<i64> = (1..=*n).collect();
            assert_eq!(u, &want, "updates of {city}");
        } else {
            // At least once: every count 1..=n was reached. A hand-over
            // commits what is done before the partitions go, so a replay
            // (and a count above n) comes only from a revocation whose
            // drain timed out or whose commit failed.
            for k in 1..=*n {
                assert!(u.contains(&k), "{city}: count {k} missing in {u:?}");
            }
            assert!(u.iter().max() >= Some(n), "{city}: {u:?}");
        }
    }
}

#[tokio::test]
async fn exactly_once_group_by_on_a_streams_group_moves_both_subtopologies_and_counts_exactly() {
    two_instances_count_by_a_computed_key("streams_gbs_eos", CommitMode::ExactlyOnce).await;
}

#[tokio::test]
async fn at_least_once_group_by_on_a_streams_group_moves_both_subtopologies_and_counts_all() {
    two_instances_count_by_a_computed_key("streams_gbs_alos", CommitMode::Sync).await;
}
