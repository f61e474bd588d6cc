//! How an instance joins its application's group, by `group.protocol`:
//! `classic` subscribes the consumer to the source topic (a consumer
//! group); `streams` joins a streams group (KIP-1071,
//! <https://cwiki.apache.org/confluence/display/KAFKA/KIP-1071%3A+Streams+Rebalance+Protocol>)
//! declaring the topology: one subtopology per part, numbered from `"0"`
//! as Kafka Streams numbers them. Without `group_by` that is one,
//! `"0"`, reading the source topic. Each `group_by` adds one: the part
//! before it writes the repartition topic
//! `<application.id>-<name>-repartition` (a repartition sink), the next
//! reads it (a repartition source, declared with its partition count, the
//! input's, which `repartition::prepare` created it with). The last
//! subtopology, the one whose stages hold the stores, declares their
//! changelog topics. The coordinator assigns tasks `<subtopology>_<p>`;
//! the consumer fetches partition `p` of each topic the task's
//! subtopology reads, and revocations reach the runtime's rebalance
//! listener as under `classic`. (Persistent stores keep their directories
//! named `0_<partition>` whichever subtopology they belong to.)
//!
//! Standby replicas (`num.standby.replicas`): the coordinator places
//! standby and warm-up tasks by the group's config
//! `streams.num.standby.replicas`, which `start()` sets when the
//! application sets `num.standby.replicas`; the member publishes its
//! target tasks, and the stores run the standby ones (`state/standby.rs`).

use tokio::sync::watch;
use tracing::info;

use crate::admin::{Admin, AlterConfigOp, ConfigResource};
use crate::cluster::Cluster;
use crate::consumer::group::streams::{
    check_coordinator, StreamsTopology, Subtopology, TaskAssignment,
};
use crate::consumer::Consumer;
use crate::error::{Error, Result};
use crate::streams::config::{GroupProtocol, StreamsConfig};
use crate::streams::repartition::{self, Part};
use crate::streams::state::changelog_topic;

/// Subscribes `consumer` as `config.group_protocol` says: `classic` to
/// every topic the topology reads (each part's input, then `source`, the
/// stores' part's); `streams` joins the streams group declaring
/// [`topology`] (`counts`: each repartition topic's partitions).
pub(super) fn subscribe(
    consumer: &Consumer,
    config: &StreamsConfig,
    parts: &[Part],
    counts: &[i32],
    source: &str,
) -> Result<()> {
    match config.group_protocol {
        GroupProtocol::Streams => {
            let topology = topology(config, parts, counts, source);
            let stateful = !config.stores.specs().is_empty();
            let tasks = stateful.then(|| {
                // The stores follow the member's target tasks, to run the
                // standby ones, until the member ends.
                let (tx, rx) = watch::channel(TaskAssignment::default());
                let stores_subtopology = parts.len().to_string();
                tokio::spawn(config.stores.clone().run_standbys(stores_subtopology, rx));
                tx
            });
            consumer.join_streams_group(topology, None, tasks)
        }
        GroupProtocol::Classic => consumer.subscribe(repartition::topics(parts, source)),
    }
}

/// The group config that places standby tasks on a streams group.
pub(super) const STANDBY_REPLICAS_KEY: &str = "streams.num.standby.replicas";

/// Under `group.protocol=streams` with `num.standby.replicas` set: sets
/// the group's `streams.num.standby.replicas` to it (IncrementalAlterConfigs
/// on the group resource, KIP-1071), as the coordinator places standbys by
/// the group's config and not by anything a member sends. An error names
/// both keys; the broker refuses a value above its
/// `group.streams.max.standby.replicas` (not retriable until one changes).
pub(super) async fn set_standby_replicas(cluster: &Cluster, config: &StreamsConfig) -> Result<()> {
    let (GroupProtocol::Streams, Some(n)) = (config.group_protocol, config.num_standby_replicas)
    else {
        return Ok(());
    };
    let group = ConfigResource::Group(config.application_id.clone());
    let op = AlterConfigOp::Set(STANDBY_REPLICAS_KEY.to_owned(), n.to_string());
    let admin = Admin::with_cluster(cluster.clone());
    let result = admin
        .incremental_alter_configs(&[(group.clone(), vec![op])], false)
        .await
        .and_then(|mut r| {
            r.shift_remove(&group)
                .unwrap_or_else(|| Err(Error::config(STANDBY_REPLICAS_KEY, "no answer")))
        });
    match result {
        Ok(()) => {
            info!(group = %config.application_id, replicas = n, "set the streams group's {STANDBY_REPLICAS_KEY}");
            Ok(())
        }
        Err(e) => Err(Error::config(
            "num.standby.replicas",
            format!(
                "setting group {}'s {STANDBY_REPLICAS_KEY} to {n} failed: {e} (the broker caps \
                 it at group.streams.max.standby.replicas, default 2)",
                config.application_id
            ),
        )),
    }
}

/// Under `group.protocol=streams`, refuses to start against a coordinator
/// that does not serve StreamsGroupHeartbeat (API 88), by name, from its
/// ApiVersions answer; `classic` needs no check.
pub(super) async fn check_broker(cluster: &Cluster, config: &StreamsConfig) -> Result<()> {
    match config.group_protocol {
        GroupProtocol::Streams => check_coordinator(cluster, &config.application_id).await,
        GroupProtocol::Classic => Ok(()),
    }
}

/// The topology a streams group member declares for this runtime: part
/// `i` (of `parts`, each before a `group_by`) is subtopology `i`, reading
/// its input (the input topic for the first, the previous repartition
/// topic, with its partition count from `counts`, for the others) and
/// writing its repartition topic; the last subtopology reads `source`
/// (the last repartition topic when there are parts) and declares the
/// stores' changelogs.
pub(super) fn topology(
    config: &StreamsConfig,
    parts: &[Part],
    counts: &[i32],
    source: &str,
) -> StreamsTopology {
    let reads = |i: usize, topic: &str| -> Subtopology {
        match i.checked_sub(1) {
            None => Subtopology {
                id: "0".into(),
                source_topics: vec![topic.to_owned()],
                ..Subtopology::default()
            },
            Some(before) => Subtopology {
                id: i.to_string(),
                // 0: the coordinator derives it (only reached when counts
                // is short, which `prepare` never returns).
                repartition_source_topics: vec![(
                    topic.to_owned(),
                    counts.get(before).copied().unwrap_or(0),
                )],
                ..Subtopology::default()
            },
        }
    };
    let mut subtopologies: Vec<Subtopology> = parts
        .iter()
        .enumerate()
        .map(|(i, p)| Subtopology {
            repartition_sink_topics: vec![p.repartition.clone()],
            ..reads(i, &p.input)
        })
        .collect();
    subtopologies.push(Subtopology {
        state_changelog_topics: config
            .stores
            .specs()
            .iter()
            .map(|s| changelog_topic(&config.application_id, s.name()))
            .collect(),
        ..reads(parts.len(), source)
    });
    StreamsTopology {
        epoch: 0,
        subtopologies,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_subtopology_reads_the_source_and_declares_no_changelog_when_stateless() {
        let c = StreamsConfig::builder("app", "127.0.0.1:9092")
            .group_protocol(GroupProtocol::Streams)
            .build()
            .unwrap();
        let t = topology(&c, &[], &[], "orders");
        assert_eq!(t.subtopologies.len(), 1);
        assert_eq!(t.subtopologies[0].id, "0");
        assert_eq!(t.subtopologies[0].source_topics, vec!["orders".to_owned()]);
        assert!(t.subtopologies[0].state_changelog_topics.is_empty());
        assert!(t.subtopologies[0].repartition_source_topics.is_empty());
    }

    #[test]
    fn a_group_by_makes_two_subtopologies_joined_by_the_repartition_topic() {
        let c = StreamsConfig::builder("app", "127.0.0.1:9092")
            .group_protocol(GroupProtocol::Streams)
            .build()
            .unwrap();
        c.stores
            .register(crate::streams::state::StoreSpec::in_memory("counts"));
        let noop: crate::streams::topology::Process =
            std::sync::Arc::new(|_| crate::streams::topology::StageFuture::Ready(None));
        let parts = [
            Part {
                input: "orders".into(),
                repartition: "app-by-city-repartition".into(),
                process: noop.clone(),
            },
            Part {
                input: "app-by-city-repartition".into(),
                repartition: "app-by-day-repartition".into(),
                process: noop,
            },
        ];
        let t = topology(&c, &parts, &[4, 6], "app-by-day-repartition");
        let want = [
            Subtopology {
                id: "0".into(),
                source_topics: vec!["orders".into()],
                repartition_sink_topics: vec!["app-by-city-repartition".into()],
                ..Subtopology::default()
            },
            Subtopology {
                id: "1".into(),
                repartition_source_topics: vec![("app-by-city-repartition".into(), 4)],
                repartition_sink_topics: vec!["app-by-day-repartition".into()],
                ..Subtopology::default()
            },
            Subtopology {
                id: "2".into(),
                repartition_source_topics: vec![("app-by-day-repartition".into(), 6)],
                state_changelog_topics: vec!["app-counts-changelog".into()],
                ..Subtopology::default()
            },
        ];
        assert_eq!(t.subtopologies, want);
    }

    #[test]
    fn group_protocol_parses_kafka_streams_values_and_names_the_key() {
        assert_eq!(
            "classic".parse::<GroupProtocol>().unwrap(),
            GroupProtocol::Classic
        );
        assert_eq!(
            " STREAMS ".parse::<GroupProtocol>().unwrap(),
            GroupProtocol::Streams
        );
        assert_eq!(GroupProtocol::default(), GroupProtocol::Classic);
        let e = "consumer".parse::<GroupProtocol>().unwrap_err();
        assert!(e.to_string().contains("group.protocol"), "{e}");
    }
}
