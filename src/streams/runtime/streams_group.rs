//! How an instance joins its application's group, by `group.protocol`:
//! `classic` subscribes the consumer to the source topic (a consumer
//! group); `streams` joins a streams group (KIP-1071,
//! <https://cwiki.apache.org/confluence/display/KAFKA/KIP-1071%3A+Streams+Rebalance+Protocol>)
//! declaring the topology: one subtopology, `"0"`, reading the source
//! topic, with the state stores' changelog topics. The coordinator assigns
//! tasks `0_<partition>` (the task ids the stores' directories already
//! use); the consumer fetches each active task's partition, and
//! revocations reach the runtime's rebalance listener as under `classic`.

use crate::cluster::Cluster;
use crate::consumer::group::streams::{check_coordinator, StreamsTopology, Subtopology};
use crate::consumer::Consumer;
use crate::error::Result;
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
            consumer.subscribe_streams(topology(config, source), None)
        }
        _ => consumer.subscribe(topics.iter().cloned()),
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
