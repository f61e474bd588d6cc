//! How an instance joins its application's group, by `group.protocol`:
//! `classic` subscribes the consumer to the source topic (a consumer
//! group); `streams` joins a streams group (KIP-1071,
//! <https://cwiki.apache.org/confluence/display/KAFKA/KIP-1071%3A+Streams+Rebalance+Protocol>)
//! declaring the topology: one subtopology, `"0"`, reading the source
//! topic, with the state stores' changelog topics. The coordinator assigns
//! tasks `0_<partition>` (the task ids the stores' directories already
//! use); the consumer fetches each active task's partition, and
//! revocations reach the runtime's rebalance listener as under `classic`.
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
use crate::streams::state::changelog_topic;

/// Subscribes `consumer` to `topics` (the source, then any repartition
/// topics; the last is the stores' part's) as `config.group_protocol`
/// says. A streams group gets one subtopology: topologies that
/// repartition are refused on it at start (`repartition::check`).
pub(super) fn subscribe(
    consumer: &Consumer,
    config: &StreamsConfig,
    topics: &[String],
) -> Result<()> {
    match (config.group_protocol, topics) {
        (GroupProtocol::Streams, [source]) => {
            let stateful = !config.stores.specs().is_empty();
            let tasks = stateful.then(|| {
                // The stores follow the member's target tasks, to run the
                // standby ones, until the member ends.
                let (tx, rx) = watch::channel(TaskAssignment::default());
                tokio::spawn(config.stores.clone().run_standbys(rx));
                tx
            });
            consumer.join_streams_group(topology(config, source), None, tasks)
        }
        _ => consumer.subscribe(topics.iter().cloned()),
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

/// The topology a streams group member declares for this runtime.
pub(super) fn topology(config: &StreamsConfig, source: &str) -> StreamsTopology {
    StreamsTopology {
        epoch: 0,
        subtopologies: vec![Subtopology {
            id: "0".into(),
            source_topics: vec![source.to_owned()],
            state_changelog_topics: config
                .stores
                .specs()
                .iter()
                .map(|s| changelog_topic(&config.application_id, s.name()))
                .collect(),
            ..Subtopology::default()
        }],
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
        let t = topology(&c, "orders");
        assert_eq!(t.subtopologies.len(), 1);
        assert_eq!(t.subtopologies[0].id, "0");
        assert_eq!(t.subtopologies[0].source_topics, vec!["orders".to_owned()]);
        assert!(t.subtopologies[0].state_changelog_topics.is_empty());
        assert!(t.subtopologies[0].repartition_source_topics.is_empty());
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
