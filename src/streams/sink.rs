//! Sinks that end a topology or one of its branches: produce to a topic
//! (partitioned by the producer, or by a user partitioner given the
//! topic's partition count, as Kafka Streams' `StreamPartitioner`), or run
//! an action; and [`Branched`], which routes each record to the first
//! branch whose predicate accepts it (Kafka Streams' `split()` /
//! `BranchedKStream`, KIP-418).

use std::future::Future;
use std::sync::Arc;

use super::error::ProcessingError;
use super::topology::{
    Late, Pipeline, ProcessResult, Processor, Record, Records, StageFuture, Topology,
};
use crate::producer::{ProducerRecord, Serializer};

type SinkFn<K, V> =
    dyn Fn(Record<K, V>, Late) -> StageFuture<ProcessResult<Vec<ProducerRecord>>> + Send + Sync;

/// Where records leave a topology: a topic or an action.
pub struct Sink<K, V>(Arc<SinkFn<K, V>>);

impl<K, V> Clone for Sink<K, V> {
    fn clone(&self) -> Self {
        Sink(self.0.clone())
    }
}

impl<K: Send + 'static, V: Send + 'static> Sink<K, V> {
    /// Produces every record to `topic` (partition chosen by the
    /// producer's partitioner from the key), with its timestamp and
    /// headers.
    pub fn to<KS, VS>(topic: impl Into<String>, keys: KS, values: VS) -> Sink<K, V>
    where
        KS: Serializer<K> + Send + Sync + 'static,
        VS: Serializer<V> + Send + Sync + 'static,
    {
        Sink::producing(topic.into(), keys, values, None)
    }

    /// [`to`](Self::to), the partition being `partitioner(record,
    /// partitions)` where `partitions` is the topic's partition count
    /// (from the metadata cache, refreshed when the topic is not in it). A
    /// result outside `0..partitions` fails the record.
    pub fn to_with_partitioner<KS, VS, P>(
        topic: impl Into<String>,
        keys: KS,
        values: VS,
        partitioner: P,
    ) -> Sink<K, V>
    where
        KS: Serializer<K> + Send + Sync + 'static,
        VS: Serializer<V> + Send + Sync + 'static,
        P: Fn(&Record<K, V>, i32) -> i32 + Send + Sync + 'static,
    {
        Sink::producing(topic.into(), keys, values, Some(Arc::new(partitioner)))
    }

    #[allow(clippy::type_complexity)]
    fn producing<KS, VS>(
        topic: String,
        keys: KS,
        values: VS,
        partitioner: Option<Arc<dyn Fn(&Record<K, V>, i32) -> i32 + Send + Sync>>,
    ) -> Sink<K, V>
    where
        KS: Serializer<K> + Send + Sync + 'static,
        VS: Serializer<V> + Send + Sync + 'static,
    {
        let topic: Arc<str> = topic.into();
        let serdes = Arc::new((keys, values));
        let Some(partitioner) = partitioner else {
            // Synchronous: the future holds the result only, not the record.
            return Sink(Arc::new(move |r: Record<K, V>, _: Late| {
                StageFuture::Ready(Some(encode(&serdes, r, None, &topic)))
            }));
        };
        Sink(Arc::new(move |r: Record<K, V>, cluster: Late| {
            let (topic, serdes, partitioner) = (topic.clone(), serdes.clone(), partitioner.clone());
            StageFuture::Boxed(Box::pin(async move {
                let n = partition_count(&cluster, &topic).await?;
                let p = partitioner(&r, n);
                if !(0..n).contains(&p) {
                    return Err(ProcessingError::new(format!(
                        "the partitioner of sink {topic} chose partition {p}, outside 0..{n}"
                    )));
                }
                encode(&serdes, r, Some(p), &topic)
            }))
        }))
    }

    /// Runs an async action per record.
    pub fn for_each_async<F, Fut>(f: F) -> Sink<K, V>
    where
        F: Fn(Record<K, V>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ProcessResult<()>> + Send + 'static,
    {
        Sink(Arc::new(move |r, _| {
            let fut = f(r);
            StageFuture::Boxed(Box::pin(async move { fut.await.map(|()| Vec::new()) }))
        }))
    }

    /// Runs an action per record.
    pub fn for_each<F>(f: F) -> Sink<K, V>
    where
        F: Fn(Record<K, V>) -> ProcessResult<()> + Send + Sync + 'static,
    {
        Sink(Arc::new(move |r, _| {
            StageFuture::Ready(Some(f(r).map(|()| Vec::new())))
        }))
    }

    pub(crate) fn run(
        &self,
        r: Record<K, V>,
        cluster: &Late,
    ) -> StageFuture<ProcessResult<Vec<ProducerRecord>>> {
        (self.0)(r, cluster.clone())
    }
}

impl<K: Send + 'static, V: Send + 'static> Pipeline<K, V> {
    /// Ends the topology by producing every record to `topic` (partition
    /// chosen by the producer's partitioner from the key), with its
    /// timestamp and headers. A record is done when its outputs are
    /// acknowledged (or inside the open transaction under exactly-once).
    pub fn to<KS, VS>(self, topic: impl Into<String>, keys: KS, values: VS) -> Topology
    where
        KS: Serializer<K> + Send + Sync + 'static,
        VS: Serializer<V> + Send + Sync + 'static,
    {
        self.sink(Sink::to(topic, keys, values))
    }

    /// [`to`](Self::to) with the partition chosen by `partitioner` from
    /// the record and the topic's partition count (see
    /// [`Sink::to_with_partitioner`]).
    pub fn to_with_partitioner<KS, VS, P>(
        self,
        topic: impl Into<String>,
        keys: KS,
        values: VS,
        partitioner: P,
    ) -> Topology
    where
        KS: Serializer<K> + Send + Sync + 'static,
        VS: Serializer<V> + Send + Sync + 'static,
        P: Fn(&Record<K, V>, i32) -> i32 + Send + Sync + 'static,
    {
        self.sink(Sink::to_with_partitioner(topic, keys, values, partitioner))
    }

    /// Ends the topology with `sink`.
    pub fn sink(self, sink: Sink<K, V>) -> Topology {
        let (config, source, stage, cluster) = self.into_parts();
        let late = cluster.clone();
        let processor: Processor = Arc::new(move |r| {
            // Made now: the future holds the stage's future, not the record.
            let records = stage(r);
            // Synchronous stages and sink: the outputs now, and a future
            // that only holds them.
            let records = match records {
                StageFuture::Ready(Some(Ok(Records::One(r)))) => match sink.run(r, &late) {
                    StageFuture::Ready(Some(out)) => return Box::pin(std::future::ready(out)),
                    pending => return Box::pin(pending),
                },
                records => records,
            };
            let sink = sink.clone();
            let late = late.clone();
            Box::pin(async move {
                // One record in, one out (the common case): no list to
                // gather the sink's outputs in.
                match records.await? {
                    Records::One(r) => sink.run(r, &late).await,
                    Records::Many(list) => {
                        let mut out = Vec::new();
                        for r in list {
                            out.extend(sink.run(r, &late).await?);
                        }
                        Ok(out)
                    }
                }
            })
        });
        Topology::from_parts(config, source, processor, cluster)
    }

    /// Splits the stream (Kafka Streams' `split`): each record goes to the
    /// first branch whose predicate accepts it, see [`Branched`].
    pub fn branch(self) -> Branched<K, V> {
        Branched::new(self)
    }
}

/// The record a producing sink sends for `r`: to `partition`, or when
/// `None` to the producer's choice.
fn encode<K, V, KS: Serializer<K>, VS: Serializer<V>>(
    serdes: &(KS, VS),
    r: Record<K, V>,
    partition: Option<i32>,
    topic: &Arc<str>,
) -> ProcessResult<Vec<ProducerRecord>> {
    let mut p = ProducerRecord::new(topic)
        .value_with(&serdes.1, &r.value)
        .map_err(|e| ProcessingError::new(e.to_string()))?
        .timestamp(r.timestamp);
    if let Some(k) = &r.key {
        p = p
            .key_with(&serdes.0, k)
            .map_err(|e| ProcessingError::new(e.to_string()))?;
    }
    if let Some(partition) = partition {
        p = p.partition(partition);
    }
    p.headers = r.headers;
    Ok(vec![p])
}

async fn partition_count(cluster: &Late, topic: &str) -> ProcessResult<i32> {
    let c = cluster
        .get()
        .ok_or_else(|| ProcessingError::new("the application has not started"))?;
    let known = |m: &crate::cluster::ClusterMetadata| {
        m.topics
            .get(topic)
            .map(|t| t.partitions.len())
            .filter(|n| *n > 0)
    };
    let n = match known(&c.metadata()) {
        Some(n) => n,
        None => {
            let m = c
                .refresh_metadata(Some(&[topic.to_owned()]))
                .await
                .map_err(|e| ProcessingError::new(format!("metadata of sink {topic}: {e}")))?;
            known(&m).ok_or_else(|| {
                ProcessingError::new(format!("sink topic {topic} has no partitions in metadata"))
            })?
        }
    };
    i32::try_from(n).map_err(|_| ProcessingError::new(format!("{topic}: {n} partitions")))
}

/// A stream split into branches (see [`Pipeline::branch`]): each record
/// goes to the first branch whose predicate accepts it; records no branch
/// accepts go to the default branch, or are dropped.
///
/// ```no_run
/// # fn demo(p: purekafka::streams::Pipeline<String, String>) -> purekafka::streams::Topology {
/// use purekafka::producer::serializer::StringSerializer;
/// use purekafka::streams::Sink;
///
/// p.branch()
///     .branch(|r| r.value.starts_with("EU"), Sink::to("orders-eu", StringSerializer, StringSerializer))
///     .branch(|r| r.value.starts_with("US"), Sink::to("orders-us", StringSerializer, StringSerializer))
///     .default_branch(Sink::for_each(|r| {
///         eprintln!("no region: {}", r.value);
///         Ok(())
///     }))
/// # }
/// ```
pub struct Branched<K, V> {
    pipeline: Pipeline<K, V>,
    #[allow(clippy::type_complexity)]
    branches: Vec<(Arc<dyn Fn(&Record<K, V>) -> bool + Send + Sync>, Sink<K, V>)>,
}

impl<K: Send + 'static, V: Send + 'static> Branched<K, V> {
    pub(crate) fn new(pipeline: Pipeline<K, V>) -> Branched<K, V> {
        Branched {
            pipeline,
            branches: Vec::new(),
        }
    }

    /// Adds a branch: records `predicate` accepts (and no earlier branch
    /// took) go to `sink`.
    pub fn branch<F>(mut self, predicate: F, sink: Sink<K, V>) -> Branched<K, V>
    where
        F: Fn(&Record<K, V>) -> bool + Send + Sync + 'static,
    {
        self.branches.push((Arc::new(predicate), sink));
        self
    }

    /// Ends the split: records no branch accepts go to `sink`.
    pub fn default_branch(self, sink: Sink<K, V>) -> Topology {
        self.finish(Some(sink))
    }

    /// Ends the split: records no branch accepts are dropped (they count
    /// as done).
    pub fn no_default_branch(self) -> Topology {
        self.finish(None)
    }

    fn finish(self, default: Option<Sink<K, V>>) -> Topology {
        let (config, source, stage, cluster) = self.pipeline.into_parts();
        let branches = Arc::new(self.branches);
        let late = cluster.clone();
        let processor: Processor = Arc::new(move |r| {
            let records = stage(r);
            let (branches, default, late) = (branches.clone(), default.clone(), late.clone());
            Box::pin(async move {
                let mut out = Vec::new();
                for r in records.await? {
                    let sink = branches
                        .iter()
                        .find(|(accept, _)| accept(&r))
                        .map(|(_, sink)| sink)
                        .or(default.as_ref());
                    if let Some(sink) = sink {
                        out.extend(sink.run(r, &late).await?);
                    }
                }
                Ok(out)
            })
        });
        Topology::from_parts(config, source, processor, cluster)
    }
}
