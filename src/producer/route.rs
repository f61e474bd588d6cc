//! Routing records: a topic's partitions and leaders from the metadata
//! snapshot (cached per metadata generation, waited for up to
//! `max.block.ms` when unknown), and the choice of partition.
//!
//! Every route lookup is a use of its topic: the cluster keeps the topic in
//! its metadata refreshes until no send used it for `metadata.max.idle.ms`
//! (KIP-526, [`Cluster::track_while_used`]).

use std::collections::HashMap;
use std::sync::{Arc, OnceLock, RwLock};
use std::time::Duration;

use tokio::time::Instant;

use super::accumulator::PartitionQueue;
use super::config::ProducerConfig;
use super::partitioner::{self, Partitioning, StickyState};
use super::record::ProducerRecord;
use crate::cluster::{Cluster, TopicUse};
use crate::error::{Error, KafkaCode, Result};
use crate::TopicPartition;

/// A topic's partitions as the partitioner sees them.
#[derive(Clone)]
pub(crate) struct Route {
    pub(crate) name: Arc<str>,
    pub(crate) generation: u64,
    /// Leader per partition index (-1: none).
    pub(crate) leaders: Arc<[i32]>,
    pub(crate) available: Arc<[i32]>,
    /// Each partition's accumulator queue, looked up on its first record
    /// under this generation: later records skip the accumulator's map.
    pub(crate) queues: Box<[OnceLock<Arc<PartitionQueue>>]>,
    /// Marks the topic used (`metadata.max.idle.ms`).
    used: TopicUse,
}

/// The route cache and the partitioner's state.
pub(crate) struct Router {
    routes: RwLock<HashMap<String, Arc<Route>>>,
    partitioning: Partitioning,
    sticky: StickyState,
    ignore_keys: bool,
    adaptive: bool,
    batch_size: usize,
    /// `metadata.max.idle.ms`.
    max_idle: Duration,
}

impl Router {
    pub(crate) fn new(partitioning: Partitioning, config: &ProducerConfig) -> Router {
        Router {
            routes: RwLock::new(HashMap::new()),
            partitioning,
            sticky: StickyState::default(),
            ignore_keys: config.partitioner_ignore_keys,
            adaptive: config.partitioner_adaptive,
            batch_size: config.batch_size,
            max_idle: config.metadata_max_idle,
        }
    }

    /// Keeps `topic` in the cluster's metadata refreshes while this
    /// producer uses it, counting a use now.
    pub(crate) fn track(&self, cluster: &Cluster, topic: &str) -> TopicUse {
        cluster.track_while_used(topic, self.max_idle)
    }

    /// The topic's route from the cache, if current metadata has it; a
    /// lookup that finds it is a use of the topic.
    pub(crate) fn cached(&self, cluster: &Cluster, topic: &str) -> Option<Arc<Route>> {
        let generation = cluster.metadata().generation;
        if let Some(route) = self
            .routes
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(topic)
        {
            if route.generation == generation {
                route.used.touch();
                return Some(route.clone());
            }
        }
        let meta = cluster.metadata();
        let info = meta.topics.get(topic)?;
        if info.error.is_some() || info.partitions.is_empty() {
            return None;
        }
        let count = info
            .partitions
            .iter()
            .map(|p| p.partition + 1)
            .max()
            .unwrap_or(0)
            .max(0) as usize;
        let mut leaders = vec![-1; count];
        for p in &info.partitions {
            if let Some(slot) = usize::try_from(p.partition)
                .ok()
                .and_then(|i| leaders.get_mut(i))
            {
                *slot = p.leader;
            }
        }
        let available: Vec<i32> = (0..count as i32)
            .filter(|&p| leaders[p as usize] >= 0)
            .collect();
        let mut routes = self.routes.write().unwrap_or_else(|p| p.into_inner());
        let name = match routes.get(topic) {
            Some(r) => r.name.clone(),
            None => Arc::from(topic),
        };
        // Keep the topic in the metadata refreshes while it is used, so
        // leader moves are seen even if it was known before this producer
        // used it; tracked again if it was dropped as idle meanwhile.
        let used = self.track(cluster, topic);
        let route = Arc::new(Route {
            name,
            generation: meta.generation,
            leaders: leaders.into(),
            available: available.into(),
            queues: (0..count).map(|_| OnceLock::new()).collect(),
            used,
        });
        routes.insert(topic.to_owned(), route.clone());
        Some(route)
    }

    /// Waits (until `deadline`, `max_block` after the call) for metadata to
    /// list the topic. Unknown topics are retried, as the Java client waits
    /// for auto-creation.
    pub(crate) async fn fetch(
        &self,
        cluster: &Cluster,
        topic: &str,
        deadline: Instant,
        max_block: Duration,
        backoff: impl Fn(u32) -> Duration,
    ) -> Result<Arc<Route>> {
        let mut last = None;
        let mut attempt = 0u32;
        loop {
            // Each attempt is a use: a wait longer than
            // `metadata.max.idle.ms` does not drop the topic.
            self.track(cluster, topic);
            let remaining = deadline.saturating_duration_since(Instant::now());
            let refresh = tokio::time::timeout(
                remaining,
                cluster.refresh_metadata(Some(&[topic.to_owned()])),
            )
            .await;
            match refresh {
                Ok(Ok(meta)) => {
                    if let Some(route) = self.cached(cluster, topic) {
                        return Ok(route);
                    }
                    if let Some(code) = meta.topics.get(topic).and_then(|t| t.error) {
                        if !code.is_retriable() {
                            return Err(Error::Kafka {
                                code,
                                context: format!("Metadata for topic {topic}"),
                            });
                        }
                        last = Some(code);
                    }
                }
                Ok(Err(e)) if !e.is_retriable() => return Err(e),
                Ok(Err(_)) | Err(_) => {}
            }
            attempt += 1;
            let backoff = backoff(attempt);
            if Instant::now() + backoff >= deadline {
                return Err(Error::Kafka {
                    code: last.unwrap_or(KafkaCode::UNKNOWN_TOPIC_OR_PARTITION),
                    context: format!(
                        "topic {topic} not present in metadata after {} ms (max.block.ms)",
                        max_block.as_millis()
                    ),
                });
            }
            tokio::time::sleep(backoff).await;
        }
    }

    /// The partition for `record` (`size` bytes); `queued` gives a
    /// partition's queued bytes, for the adaptive sticky partitioner.
    pub(crate) fn partition_for(
        &self,
        route: &Route,
        record: &ProducerRecord,
        size: usize,
        queued: impl Fn(&TopicPartition) -> usize,
    ) -> Result<i32> {
        let partitions = route.leaders.len() as i32;
        let partition = match (record.partition, &self.partitioning) {
            (Some(p), _) => p,
            (None, Partitioning::Custom(custom)) => custom.partition(
                &record.topic,
                record.key.as_deref(),
                record.value.as_deref(),
                partitions,
                &route.available,
            ),
            (None, Partitioning::RoundRobin) => {
                self.sticky
                    .round_robin(&route.name, partitions, &route.available)
            }
            (None, _) => match &record.key {
                Some(key) if !self.ignore_keys => partitioner::partition_for_key(key, partitions),
                _ => {
                    let queued = |p: i32| queued(&TopicPartition::new(route.name.clone(), p));
                    let adaptive: Option<&dyn Fn(i32) -> usize> = self.adaptive.then_some(&queued);
                    self.sticky.sticky(
                        &route.name,
                        size,
                        self.batch_size,
                        partitions,
                        &route.available,
                        adaptive,
                    )
                }
            },
        };
        if !(0..partitions).contains(&partition) {
            return Err(Error::UnknownPartition {
                topic: record.topic.to_string(),
                partition,
            });
        }
        Ok(partition)
    }
}
