//! Repartitioning through an internal topic (Kafka Streams' `groupBy`
//! and its repartition topics, `<application.id>-<name>-repartition`;
//! see the Kafka Streams developer guide, "Repartitioning", and
//! `KStreamImpl#groupBy`). A [`Pipeline::group_by`](super::Pipeline::group_by)
//! ends the stages so far in a sink to the repartition topic, keyed by the
//! computed key (the producer's default partitioner then puts every record
//! of a key in one partition), and starts a second part of the topology
//! reading that topic: the stateful stage after it sees every record of a
//! key in one task, in the order they were written.
//!
//! The topology stays one processor for the runtime: each earlier part is
//! registered here with the topic it reads, and [`compose`] dispatches a
//! record by its topic. The runtime subscribes to every part's topic, so
//! tasks of the input and of the repartition topic are tasks like any
//! other: their offsets are committed together, and under exactly-once the
//! repartition writes, the outputs and both topics' offsets are in the
//! same transaction (the repartition topic is then read `read_committed`).
//!
//! On a streams group (`group.protocol=streams`, KIP-1071) each part is a
//! subtopology of the declared topology, numbered as Kafka Streams numbers
//! them: `"0"` reads the input and writes the first repartition topic,
//! `"1"` reads it (declared with its partition count), and so on; the
//! last, the stores' one, declares the changelogs (see
//! `runtime/streams_group.rs`). Records below the committed offset of a
//! repartition partition are deleted every `repartition.purge.interval.ms`
//! (see `runtime/purge.rs`).

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex, MutexGuard};

use tracing::info;

use super::config::StreamsConfig;
use super::error::ProcessingError;
use super::topology::{Process, StageFuture};
use crate::admin::{Admin, NewTopic};
use crate::cluster::Cluster;
use crate::error::{Error, KafkaCode, Origin};

/// `<application.id>-<name>-repartition`, as Kafka Streams names it.
pub fn repartition_topic(application_id: &str, name: &str) -> String {
    format!("{application_id}-{name}-repartition")
}

/// One earlier part of a topology: the topic it reads, the repartition
/// topic it writes, and its processing.
#[derive(Clone)]
pub(crate) struct Part {
    pub(crate) input: String,
    pub(crate) repartition: String,
    pub(crate) process: Process,
}

/// The earlier parts of a topology, in the order they were built (each
/// reads the topic the one before it writes). Travels in the config, as
/// the stores do.
#[derive(Clone, Default)]
pub(crate) struct Repartitions(Arc<Mutex<Vec<Part>>>);

impl std::fmt::Debug for Repartitions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.lock().iter().map(|p| (&p.input, &p.repartition)))
            .finish()
    }
}

impl Repartitions {
    fn lock(&self) -> MutexGuard<'_, Vec<Part>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Registers an earlier part (at build time).
    pub(crate) fn register(&self, part: Part) {
        self.lock().push(part);
    }

    /// The registered parts.
    pub(crate) fn parts(&self) -> Vec<Part> {
        self.lock().clone()
    }
}

/// Every topic the topology reads: the earlier parts' inputs, then
/// `source` (the last part's, a repartition topic when there are parts).
pub(crate) fn topics(parts: &[Part], source: &str) -> Vec<String> {
    let mut topics: Vec<String> = parts.iter().map(|p| p.input.clone()).collect();
    topics.push(source.to_owned());
    topics
}

/// The whole topology as one processor: a record of `source` goes to
/// `last`, one of an earlier part's input to that part. Without parts it
/// is `last` itself (nothing added per record).
pub(crate) fn compose(parts: Vec<Part>, source: &str, last: Process) -> Process {
    if parts.is_empty() {
        return last;
    }
    let source: Arc<str> = source.into();
    Arc::new(move |r| {
        if *r.partition.topic == *source {
            return last(r);
        }
        match parts.iter().find(|p| *p.input == *r.partition.topic) {
            Some(p) => (p.process)(r),
            None => StageFuture::Ready(Some(Err(ProcessingError::new(format!(
                "a record of {} reached a topology that does not read that topic",
                r.partition
            ))))),
        }
    })
}

/// Why `config` cannot run its repartitions, if it cannot: a name that
/// cannot name a topic, or two `group_by`s of one name.
pub(crate) fn check(config: &StreamsConfig) -> Result<(), Error> {
    let parts = config.repartitions.parts();
    let mut seen = BTreeSet::new();
    for p in &parts {
        let name = p
            .repartition
            .strip_prefix(&format!("{}-", config.application_id))
            .and_then(|n| n.strip_suffix("-repartition"))
            .unwrap_or_default();
        let legal = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-');
        if name.is_empty() || !name.chars().all(legal) {
            return Err(Error::config(
                "group_by name",
                format!(
                    "group_by name {name:?}: it names the topic {}, so it takes only ASCII \
                     letters, digits, '.', '_' and '-'",
                    p.repartition
                ),
            ));
        }
        if !seen.insert(p.repartition.as_str()) {
            return Err(Error::config(
                "group_by name",
                format!("two group_by stages use the name {name:?}; give each its own"),
            ));
        }
    }
    Ok(())
}

/// Creates each repartition topic with its input's partition count
/// (`cleanup.policy=delete`; the broker's retention applies to what the
/// purge, `repartition.purge.interval.ms`, has not deleted), or checks an
/// existing one's count; returns each part's count. On a streams group
/// the topology declares these counts, and the coordinator finds the
/// topics already made (Kafka 4.4's coordinator would create missing ones
/// itself, reporting MISSING_INTERNAL_TOPICS meanwhile).
pub(crate) async fn prepare(parts: &[Part], cluster: &Cluster) -> Result<Vec<i32>, Error> {
    let admin = Admin::with_cluster(cluster.clone());
    let mut counts = Vec::with_capacity(parts.len());
    for p in parts {
        let partitions = super::state::partition_count(cluster, &p.input)
            .await?
            .ok_or_else(|| {
                Error::invalid_state(
                    Origin::Streams,
                    format!(
                        "topic {} does not exist: group_by sizes its repartition topic {} by \
                         it; create it first",
                        p.input, p.repartition
                    ),
                )
            })?;
        let partitions = i32::try_from(partitions).map_err(|_| {
            Error::invalid_state(
                Origin::Streams,
                format!("{}: {partitions} partitions", p.input),
            )
        })?;
        let topic =
            NewTopic::new(p.repartition.clone(), partitions).config("cleanup.policy", "delete");
        for (name, result) in admin.create_topics(&[topic], false).await? {
            match result {
                Ok(_) => info!(topic = %name, partitions, "created repartition topic"),
                Err(e) if e.kafka_code() == Some(KafkaCode::TOPIC_ALREADY_EXISTS) => {}
                Err(e) => return Err(e),
            }
        }
        match super::state::partition_count(cluster, &p.repartition).await? {
            Some(n) if n as i64 == i64::from(partitions) => {}
            found => {
                return Err(Error::invalid_state(
                    Origin::Streams,
                    format!(
                        "repartition topic {} has {} partition(s) but its input {} has \
                         {partitions}: delete the repartition topic (with the application \
                         stopped) so that it is created again",
                        p.repartition,
                        found.map_or("no".to_owned(), |n| n.to_string()),
                        p.input
                    ),
                ))
            }
        }
        counts.push(partitions);
    }
    Ok(counts)
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;
    use crate::consumer::ConsumerRecord;
    use crate::producer::ProducerRecord;
    use crate::streams::config::GroupProtocol;
    use crate::streams::topology::Records;
    use crate::TopicPartition;

    fn marker(topic: &'static str) -> Process {
        Arc::new(move |_| StageFuture::Ready(Some(Ok(Records::One(ProducerRecord::new(topic))))))
    }

    fn record(topic: &str) -> ConsumerRecord {
        ConsumerRecord {
            partition: TopicPartition::new(topic, 0),
            offset: 0,
            timestamp: 0,
            key: None,
            value: Some(Bytes::from_static(b"v")),
            headers: Vec::new(),
            timestamp_type: Default::default(),
            leader_epoch: None,
        }
    }

    async fn routed(p: &Process, topic: &str) -> Result<String, String> {
        match p(record(topic)).await {
            Ok(Records::One(out)) => Ok(out.topic.to_string()),
            Ok(_) => Err("not one output".into()),
            Err(e) => Err(e.to_string()),
        }
    }

    #[tokio::test]
    async fn each_record_goes_to_the_part_reading_its_topic() {
        let parts = vec![
            Part {
                input: "orders".into(),
                repartition: "app-a-repartition".into(),
                process: marker("first"),
            },
            Part {
                input: "app-a-repartition".into(),
                repartition: "app-b-repartition".into(),
                process: marker("second"),
            },
        ];
        assert_eq!(
            topics(&parts, "app-b-repartition"),
            ["orders", "app-a-repartition", "app-b-repartition"]
        );
        let p = compose(parts, "app-b-repartition", marker("last"));
        assert_eq!(routed(&p, "orders").await.unwrap(), "first");
        assert_eq!(routed(&p, "app-a-repartition").await.unwrap(), "second");
        assert_eq!(routed(&p, "app-b-repartition").await.unwrap(), "last");
        let e = routed(&p, "other").await.unwrap_err();
        assert!(e.contains("other-0"), "{e}");
        assert_eq!(
            repartition_topic("app", "by-city"),
            "app-by-city-repartition"
        );
    }

    fn with_parts(protocol: GroupProtocol, names: &[&str]) -> StreamsConfig {
        let c = StreamsConfig::builder("app", "127.0.0.1:1")
            .group_protocol(protocol)
            .build()
            .unwrap();
        for (i, n) in names.iter().enumerate() {
            c.repartitions.register(Part {
                input: format!("in-{i}"),
                repartition: repartition_topic("app", n),
                process: marker("x"),
            });
        }
        c
    }

    #[test]
    fn bad_names_and_shared_names_are_refused_at_start_on_either_protocol() {
        assert!(check(&with_parts(GroupProtocol::Classic, &[])).is_ok());
        assert!(check(&with_parts(GroupProtocol::Streams, &[])).is_ok());
        assert!(check(&with_parts(GroupProtocol::Classic, &["by-city", "by-day"])).is_ok());
        assert!(check(&with_parts(GroupProtocol::Streams, &["by-city"])).is_ok());
        let e = check(&with_parts(GroupProtocol::Streams, &["a b"])).unwrap_err();
        assert!(e.to_string().contains("a b"), "{e}");
        let e = check(&with_parts(GroupProtocol::Classic, &["a/b"])).unwrap_err();
        assert!(e.to_string().contains("a/b"), "{e}");
        let e = check(&with_parts(GroupProtocol::Classic, &[""])).unwrap_err();
        assert!(e.to_string().contains("group_by name"), "{e}");
        let e = check(&with_parts(GroupProtocol::Classic, &["x", "x"])).unwrap_err();
        assert!(e.to_string().contains("two group_by"), "{e}");
    }
}
