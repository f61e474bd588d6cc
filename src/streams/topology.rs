//! The topology builder: a typed source, then `map`/`filter`/`flat_map`/
//! `for_each` stages in sync and async forms, then a sink `to(topic)`.
//! Building composes the stages into one [`Processor`]: a function from a
//! consumed record to the records to produce, which the runtime runs once
//! per record (concurrently, as the ordering mode allows). The methods
//! that end a pipeline in a sink (`to`, `sink`, `branch`) live in `sink`,
//! which builds on this module (and not the other way round).

use std::future::Future;
use std::sync::{Arc, OnceLock};

use bytes::Bytes;

use super::config::StreamsConfig;
use super::error::ProcessingError;
use super::serdes::Deserializer;
use crate::cluster::Cluster;
use crate::consumer::{BoxFuture, ConsumerRecord};
use crate::producer::ProducerRecord;
use crate::protocol::records::RecordHeader;
use crate::TopicPartition;

/// A record inside the topology: typed key and value, with the input
/// record's timestamp, headers and coordinates (propagated to outputs).
#[derive(Debug, Clone)]
pub struct Record<K, V> {
    /// Key; `None` is null.
    pub key: Option<K>,
    /// Value.
    pub value: V,
    /// Timestamp (ms since the epoch), propagated to outputs.
    pub timestamp: i64,
    /// Headers, propagated to outputs.
    pub headers: Vec<RecordHeader>,
    /// Where the input record was read.
    pub partition: TopicPartition,
    /// The input record's offset.
    pub offset: i64,
}

impl<K, V> Record<K, V> {
    /// The same record with another value.
    pub fn with_value<V2>(self, value: V2) -> Record<K, V2> {
        Record {
            key: self.key,
            value,
            timestamp: self.timestamp,
            headers: self.headers,
            partition: self.partition,
            offset: self.offset,
        }
    }
}

pub(crate) type StageFn<K, V> =
    dyn Fn(ConsumerRecord) -> BoxFuture<'static, StageResult<K, V>> + Send + Sync;
pub(crate) type StageResult<K, V> = std::result::Result<Vec<Record<K, V>>, ProcessingError>;

/// A built topology's whole processing of one record: what to produce.
pub type Processor = Arc<
    dyn Fn(
            ConsumerRecord,
        ) -> BoxFuture<'static, std::result::Result<Vec<ProducerRecord>, ProcessingError>>
        + Send
        + Sync,
>;

/// A source topic's stages so far, producing `Record<K, V>`s.
pub struct Pipeline<K, V> {
    config: StreamsConfig,
    source: String,
    stage: Arc<StageFn<K, V>>,
    cluster: Late,
}

/// The producer's cluster handle, set when the application starts (sinks
/// with a partitioner read partition counts from its metadata).
pub(crate) type Late = Arc<OnceLock<Cluster>>;

/// A finished topology: build it into [`Streams`](super::Streams) with
/// `Topology::build` (defined by the runtime, which the topology does not
/// import).
pub struct Topology {
    pub(super) config: StreamsConfig,
    pub(super) source: String,
    pub(super) processor: Processor,
    pub(super) cluster: Late,
}

/// Starts a topology: [`Streams::topology`](super::Streams::topology) returns one.
pub struct TopologyBuilder {
    config: StreamsConfig,
    cluster: Late,
}

impl TopologyBuilder {
    pub(crate) fn new(mut config: StreamsConfig) -> TopologyBuilder {
        // This topology's own stores, even if the config was cloned from
        // another topology's.
        config.stores = Default::default();
        TopologyBuilder {
            config,
            cluster: Late::default(),
        }
    }

    /// Reads `topic`, decoding keys with `keys` and values with `values`.
    /// A record that does not decode fails like a failed stage.
    pub fn source<KD: Deserializer, VD: Deserializer>(
        self,
        topic: impl Into<String>,
        keys: KD,
        values: VD,
    ) -> Pipeline<KD::Output, VD::Output> {
        let serdes = Arc::new((keys, values));
        let stage: Arc<StageFn<KD::Output, VD::Output>> = Arc::new(move |r: ConsumerRecord| {
            let serdes = serdes.clone();
            Box::pin(async move {
                let topic = r.partition.topic.clone();
                let key = match &r.key {
                    Some(k) => Some(serdes.0.deserialize(&topic, k)?),
                    None => None,
                };
                let empty = Bytes::new();
                let value = serdes
                    .1
                    .deserialize(&topic, r.value.as_ref().unwrap_or(&empty))?;
                Ok(vec![Record {
                    key,
                    value,
                    timestamp: r.timestamp,
                    headers: r.headers,
                    partition: r.partition,
                    offset: r.offset,
                }])
            })
        });
        Pipeline {
            config: self.config,
            source: topic.into(),
            stage,
            cluster: self.cluster,
        }
    }
}

impl<K: Send + 'static, V: Send + 'static> Pipeline<K, V> {
    /// Adds a stage that turns each record into zero or more records,
    /// asynchronously (the general form the others are built on).
    pub fn flat_map_async<K2, V2, F, Fut>(self, f: F) -> Pipeline<K2, V2>
    where
        K2: Send + 'static,
        V2: Send + 'static,
        F: Fn(Record<K, V>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = std::result::Result<Vec<Record<K2, V2>>, ProcessingError>>
            + Send
            + 'static,
    {
        let prev = self.stage;
        let f = Arc::new(f);
        let stage: Arc<StageFn<K2, V2>> = Arc::new(move |r| {
            let prev = prev.clone();
            let f = f.clone();
            Box::pin(async move {
                let mut out = Vec::new();
                for r in prev(r).await? {
                    out.extend(f(r).await?);
                }
                Ok(out)
            })
        });
        Pipeline {
            config: self.config,
            source: self.source,
            stage,
            cluster: self.cluster,
        }
    }

    /// Maps each record asynchronously (the processing may do I/O).
    pub fn map_async<K2: Send + 'static, V2: Send + 'static, F, Fut>(self, f: F) -> Pipeline<K2, V2>
    where
        F: Fn(Record<K, V>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = std::result::Result<Record<K2, V2>, ProcessingError>> + Send + 'static,
    {
        let f = Arc::new(f);
        self.flat_map_async(move |r| {
            let fut = f(r);
            async move { fut.await.map(|r| vec![r]) }
        })
    }

    /// Maps each record.
    pub fn map<K2: Send + 'static, V2: Send + 'static, F>(self, f: F) -> Pipeline<K2, V2>
    where
        F: Fn(Record<K, V>) -> std::result::Result<Record<K2, V2>, ProcessingError>
            + Send
            + Sync
            + 'static,
    {
        self.flat_map_async(move |r| std::future::ready(f(r).map(|r| vec![r])))
    }

    /// Turns each record into zero or more records.
    pub fn flat_map<K2: Send + 'static, V2: Send + 'static, F>(self, f: F) -> Pipeline<K2, V2>
    where
        F: Fn(Record<K, V>) -> std::result::Result<Vec<Record<K2, V2>>, ProcessingError>
            + Send
            + Sync
            + 'static,
    {
        self.flat_map_async(move |r| std::future::ready(f(r)))
    }

    /// Keeps the records `keep` accepts.
    pub fn filter<F>(self, keep: F) -> Pipeline<K, V>
    where
        F: Fn(&Record<K, V>) -> bool + Send + Sync + 'static,
    {
        self.flat_map_async(move |r| {
            std::future::ready(Ok(if keep(&r) { vec![r] } else { Vec::new() }))
        })
    }

    /// Ends the topology with an asynchronous action per record (nothing
    /// is produced); a record is done when the action's future is.
    pub fn for_each_async<F, Fut>(self, f: F) -> Topology
    where
        F: Fn(Record<K, V>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = std::result::Result<(), ProcessingError>> + Send + 'static,
    {
        let stage = self.stage;
        let f = Arc::new(f);
        let processor: Processor = Arc::new(move |r| {
            let stage = stage.clone();
            let f = f.clone();
            Box::pin(async move {
                for r in stage(r).await? {
                    f(r).await?;
                }
                Ok(Vec::new())
            })
        });
        Topology {
            config: self.config,
            source: self.source,
            processor,
            cluster: self.cluster,
        }
    }

    /// Ends the topology with an action per record.
    pub fn for_each<F>(self, f: F) -> Topology
    where
        F: Fn(Record<K, V>) -> std::result::Result<(), ProcessingError> + Send + Sync + 'static,
    {
        self.for_each_async(move |r| std::future::ready(f(r)))
    }

    /// The stores of this topology (stateful stages register theirs).
    pub(crate) fn stores(&self) -> super::state::Stores {
        self.config.stores.clone()
    }

    /// `application.id`.
    pub(crate) fn application_id(&self) -> String {
        self.config.application_id.clone()
    }

    /// The parts a sink or a split builds on (see `sink`).
    pub(crate) fn into_parts(self) -> (StreamsConfig, String, Arc<StageFn<K, V>>, Late) {
        (self.config, self.source, self.stage, self.cluster)
    }
}

impl Topology {
    pub(crate) fn from_parts(
        config: StreamsConfig,
        source: String,
        processor: Processor,
        cluster: Late,
    ) -> Topology {
        Topology {
            config,
            source,
            processor,
            cluster,
        }
    }
}

/// The result type of stage closures.
pub type ProcessResult<T> = std::result::Result<T, ProcessingError>;
