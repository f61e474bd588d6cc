//! The streams driver's pure parts: tasks to partitions, statuses, the
//! topology check.

use std::collections::BTreeSet;
use std::time::Duration;

use tokio::time::Instant;

use super::*;
use crate::consumer::group::streams::subscribe::input_topics;
use crate::consumer::group::streams::Subtopology;

fn topology() -> StreamsTopology {
    StreamsTopology {
        epoch: 1,
        subtopologies: vec![
            Subtopology {
                id: "0".into(),
                source_topics: vec!["orders".into(), "payments".into()],
                state_changelog_topics: vec!["app-store-changelog".into()],
                ..Subtopology::default()
            },
            Subtopology {
                id: "1".into(),
                repartition_source_topics: vec![("app-by-user-repartition".into(), 0)],
                ..Subtopology::default()
            },
        ],
    }
}

fn tp(topic: &str, p: i32) -> TopicPartition {
    TopicPartition::new(topic, p)
}

#[test]
fn a_task_is_its_partition_of_every_topic_its_subtopology_reads() {
    let tasks: BTreeSet<TaskId> = [TaskId::new("0", 2), TaskId::new("1", 0)].into();
    let parts = task_partitions(&topology(), &tasks);
    let want: BTreeSet<TopicPartition> = [
        tp("orders", 2),
        tp("payments", 2),
        tp("app-by-user-repartition", 0),
    ]
    .into();
    assert_eq!(parts, want, "changelog topics are not consumed");
}

#[test]
fn tasks_of_unknown_subtopologies_or_negative_partitions_are_left_out() {
    let tasks: BTreeSet<TaskId> = [
        TaskId::new("7", 0),
        TaskId::new("0", -1),
        TaskId::new("0", 0),
    ]
    .into();
    let parts = task_partitions(&topology(), &tasks);
    assert_eq!(parts, [tp("orders", 0), tp("payments", 0)].into());
}

#[test]
fn fatal_statuses_stop_membership_at_once_naming_the_status_and_group() {
    let now = Instant::now();
    for (code, name) in [
        (
            INCORRECTLY_PARTITIONED_TOPICS,
            "INCORRECTLY_PARTITIONED_TOPICS",
        ),
        (SHUTDOWN_APPLICATION, "SHUTDOWN_APPLICATION"),
    ] {
        let mut w = StatusWatch::new("app", Duration::from_secs(300));
        let e = w
            .check(&[(code, "topics a and b differ".into())], now)
            .unwrap_err();
        let text = e.to_string();
        assert!(
            text.contains(name) && text.contains("streams group app"),
            "{text}"
        );
        assert!(text.contains("topics a and b differ"), "{text}");
        assert!(!e.is_retriable());
    }
}

#[test]
fn waitable_statuses_stop_membership_only_once_they_last_the_bound() {
    let bound = Duration::from_secs(300);
    let mut w = StatusWatch::new("app", bound);
    let t0 = Instant::now();
    let missing = vec![(
        MISSING_SOURCE_TOPICS,
        "Source topics in are missing.".to_owned(),
    )];
    w.check(&missing, t0).expect("first seen");
    w.check(&missing, t0 + bound / 2).expect("within the bound");
    let e = w.check(&missing, t0 + bound).unwrap_err();
    assert!(e.to_string().contains("MISSING_SOURCE_TOPICS"), "{e}");
    assert!(e.to_string().contains("max.poll.interval.ms"), "{e}");
}

#[test]
fn a_status_that_clears_starts_its_clock_again() {
    let bound = Duration::from_secs(10);
    let mut w = StatusWatch::new("app", bound);
    let t0 = Instant::now();
    let internal = vec![(MISSING_INTERNAL_TOPICS, "creating".to_owned())];
    w.check(&internal, t0).unwrap();
    w.check(&[], t0 + Duration::from_secs(9)).unwrap();
    w.check(&internal, t0 + Duration::from_secs(12)).unwrap();
    w.check(&internal, t0 + Duration::from_secs(21)).unwrap();
    assert!(w.check(&internal, t0 + Duration::from_secs(22)).is_err());
    // ASSIGNMENT_DELAYED is the coordinator's own bounded wait.
    let delayed = vec![(ASSIGNMENT_DELAYED, "initial rebalance delay".to_owned())];
    let mut w = StatusWatch::new("app", bound);
    w.check(&delayed, t0).unwrap();
    w.check(&delayed, t0 + bound * 3).unwrap();
    // Unknown codes are waited out the same way as missing topics.
    let mut w = StatusWatch::new("app", bound);
    w.check(&[(42, "new".to_owned())], t0).unwrap();
    let e = w.check(&[(42, "new".to_owned())], t0 + bound).unwrap_err();
    assert!(e.to_string().contains("status 42"), "{e}");
}

#[test]
fn a_topology_must_have_readable_uniquely_named_subtopologies() {
    assert_eq!(
        input_topics(&topology()).unwrap(),
        vec![
            "app-by-user-repartition".to_owned(),
            "orders".to_owned(),
            "payments".to_owned()
        ]
    );
    let empty = StreamsTopology::default();
    assert!(input_topics(&empty)
        .unwrap_err()
        .to_string()
        .contains("topology"));
    let mut twice = topology();
    twice.subtopologies[1].id = "0".into();
    assert!(input_topics(&twice)
        .unwrap_err()
        .to_string()
        .contains("unique"));
    let mut reads_nothing = topology();
    reads_nothing.subtopologies[1]
        .repartition_source_topics
        .clear();
    assert!(input_topics(&reads_nothing)
        .unwrap_err()
        .to_string()
        .contains("reads no topic"));
}
