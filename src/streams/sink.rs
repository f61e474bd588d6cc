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
    Late, Pipeline, Process, ProcessResult, Record, Records, StageFuture, SyncSinkFn, Topology,
};
use crate::producer::{ProducerRecord, Serializer};

type SinkFn<K, V> =
    dyn Fn(Record<K, V>, Late) -> StageFuture<ProcessResult<Records<ProducerRecord>>> + Send + Sync;

/// Where records leave a topology: a topic or an action.
pub struct Sink<K, V>(SinkKind<K, V>);

/// A sink that gives its outputs at once, or one that may wait.
enum SinkKind<K, V> {
    Sync(Arc<SyncSinkFn<K, V>>),
    Async(Arc<SinkFn<K, V>>),
}

impl<K, V> Clone for Sink<K, V> {
    fn clone(&self) -> Self {
        Sink(match &self.0 {
            SinkKind::Sync(f) => SinkKind::Sync(f.clone()),
            SinkKind::Async(f) => SinkKind::Async(f.clone()),
        })
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
            return Sink(SinkKind::Sync(Arc::new(move |r: Record<K, V>| {
                encode(&serdes, r, None, &topic)
            })));
        };
        Sink(SinkKind::Async(Arc::new(
            move |r: Record<K, V>, cluster: Late| {
                let (topic, serdes, partitioner) =
                    (topic.clone(), serdes.clone(), partitioner.clone());
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
            },
        )))
    }

    /// Runs an async action per record.
    pub fn for_each_async<F, Fut>(f: F) -> Sink<K, V>
    where
        F: Fn(Record<K, V>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ProcessResult<()>> + Send + 'static,
    {
        Sink(SinkKind::Async(Arc::new(move |r, _| {
            let fut = f(r);
            StageFuture::Boxed(Box::pin(async move { fut.await.map(|()| Records::none()) }))
        })))
    }

    /// Runs an action per record.
    pub fn for_each<F>(f: F) -> Sink<K, V>
    where
        F: Fn(Record<K, V>) -> ProcessResult<()> + Send + Sync + 'static,
    {
        Sink(SinkKind::Sync(Arc::new(move |r| {
            f(r).map(|()| Records::none())
        })))
    }

    pub(crate) fn run(
        &self,
        r: Record<K, V>,
        cluster: &Late,
    ) -> StageFuture<ProcessResult<Records<ProducerRecord>>> {
        match &self.0 {
            SinkKind::Sync(f) => StageFuture::Ready(Some(f(r))),
            SinkKind::Async(f) => f(r, cluster.clone()),
        }
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
        // After an async stage, a synchronous sink runs inside that
        // stage's future: one box per record.
        if let (Some(fused), SinkKind::Sync(sink)) = (self.fused(), &sink.0) {
            let sink = sink.clone();
            let (config, source, _, cluster) = self.into_parts();
            let processor: Process = Arc::new(move |r| fused(r, sink.clone()));
            return Topology::from_parts(config, source, processor, cluster);
        }
        let (config, source, stage, cluster) = self.into_parts();
        let late = cluster.clone();
        let processor: Process = Arc::new(move |r| {
            // Made now: the future holds the stage's future, not the record.
            let records = stage(r);
            // Synchronous stages and sink: the outputs now, nothing boxed.
            let records = match records {
                StageFuture::Ready(Some(Ok(Records::One(r)))) => return sink.run(r, &late),
                records => records,
            };
            let sink = sink.clone();
            let late = late.clone();
            StageFuture::Boxed(Box::pin(async move {
                // One record in, one out (the common case): no list to
                // gather the sink's outputs in.
                match records.await? {
                    Records::One(r) => sink.run(r, &late).await,
                    Records::Many(list) => {
                        let mut out = Records::none();
                        for r in list {
                            out.push_all(sink.run(r, &late).await?);
                        }
                        Ok(out)
                    }
                }
            }))
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
) -> ProcessResult<Records<ProducerRecord>> {
    // The sink owns `r`: its key and value are serialized by value, so
    // bytes passed through unchanged reach the producer without a copy or
    // a reference-count round trip.
    let mut p = ProducerRecord::new(topic).timestamp(r.timestamp);
    p.value = Some(
        serdes
            .1
            .serialize_owned(topic, r.value)
            .map_err(|e| ProcessingError::new(e.to_string()))?,
    );
    if let Some(k) = r.key {
        p.key = Some(
            serdes
                .0
                .serialize_owned(topic, k)
                .map_err(|e| ProcessingError::new(e.to_string()))?,
        );
    }
    if let Some(partition) = partition {
        p = p.partition(partition);
    }
    p.headers = r.headers;
    Ok(Records::One(p))
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
        let processor: Process = Arc::new(move |r| {
            let records = stage(r);
            let (branches, default, late) = (branches.clone(), default.clone(), late.clone());
            StageFuture::Boxed(Box::pin(async move {
                let mut out = Records::none();
                for r in records.await? {
                    let sink = branches
                        .iter()
                        .find(|(accept, _)| accept(&r))
                        .map(|(_, sink)| sink)
                        .or(default.as_ref());
                    if let Some(sink) = sink {
                        out.push_all(sink.run(r, &late).await?);
                    }
                }
                Ok(out)
            }))
        });
        Topology::from_parts(config, source, processor, cluster)
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;
    use crate::consumer::ConsumerRecord;
    use crate::producer::serializer::StringSerializer;
    use crate::protocol::records::TimestampType;
    use crate::streams::{Streams, StreamsConfig, StringDeserializer};
    use crate::TopicPartition;

    fn input(offset: i64, value: &str) -> ConsumerRecord {
        ConsumerRecord {
            partition: TopicPartition::new("in", 0),
            offset,
            timestamp: 7,
            timestamp_type: TimestampType::CreateTime,
            key: Some(Bytes::from_static(b"k")),
            value: Some(Bytes::copy_from_slice(value.as_bytes())),
            headers: Vec::new(),
            leader_epoch: None,
        }
    }

    fn source() -> Pipeline<String, String> {
        let config = StreamsConfig::builder("app", "x:1").build().unwrap();
        Streams::topology(config).source("in", StringDeserializer, StringDeserializer)
    }

    fn values(out: ProcessResult<Records<ProducerRecord>>) -> Vec<(String, String, i64)> {
        out.unwrap()
            .into_iter()
            .map(|p| {
                let text = |b: Option<Bytes>| String::from_utf8(b.unwrap().to_vec()).unwrap();
                (p.topic.to_string(), text(p.value), p.timestamp.unwrap())
            })
            .collect()
    }

    #[tokio::test]
    async fn synchronous_stages_and_sink_give_their_outputs_at_once() {
        let t = source()
            .map(|r| {
                let v = format!("{}!", r.value);
                Ok(r.with_value(v))
            })
            .to("out", StringSerializer, StringSerializer);
        let StageFuture::Ready(Some(out)) = (t.processor)(input(3, "a")) else {
            panic!("a synchronous pipeline's result is ready when called");
        };
        assert_eq!(values(out), [("out".to_owned(), "a!".to_owned(), 7)]);
        // Several records from a synchronous flat_map: all, in order.
        let t = source()
            .flat_map(|r| {
                Ok(vec![
                    r.clone().with_value("1".to_owned()),
                    r.with_value("2".into()),
                ])
            })
            .to("out", StringSerializer, StringSerializer);
        let out: Vec<_> = values((t.processor)(input(4, "b")).await);
        assert_eq!(
            out.iter().map(|o| o.1.as_str()).collect::<Vec<_>>(),
            ["1", "2"]
        );
    }

    #[tokio::test]
    async fn an_async_stage_runs_its_synchronous_sink_inside_its_future() {
        let t = source()
            .map_async(|r| async move {
                tokio::task::yield_now().await;
                let v = r.value.to_uppercase();
                Ok(r.with_value(v))
            })
            .to("out", StringSerializer, StringSerializer);
        let fut = (t.processor)(input(5, "abc"));
        assert!(matches!(fut, StageFuture::Boxed(_)));
        assert_eq!(values(fut.await), [("out".to_owned(), "ABC".to_owned(), 7)]);
        // Zero, one and many records from an async stage, in order; a
        // failing stage fails the record.
        let t = source()
            .flat_map_async(|r| async move {
                match r.value.as_str() {
                    "fail" => Err(ProcessingError::new("no")),
                    v => Ok(v
                        .chars()
                        .map(|c| r.clone().with_value(c.to_string()))
                        .collect()),
                }
            })
            .to("out", StringSerializer, StringSerializer);
        let got = |v: &str| (t.processor)(input(6, v));
        assert!(values(got("").await).is_empty());
        assert_eq!(values(got("x").await).len(), 1);
        let many: Vec<_> = values(got("xyz").await).into_iter().map(|o| o.1).collect();
        assert_eq!(many, ["x", "y", "z"]);
        assert!(got("fail").await.is_err());
    }

    #[tokio::test]
    async fn a_synchronous_for_each_runs_when_called() {
        let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
        let s = seen.clone();
        let t = source().for_each(move |r| {
            s.lock().unwrap().push(r.value);
            Ok(())
        });
        let StageFuture::Ready(Some(out)) = (t.processor)(input(1, "v")) else {
            panic!("a synchronous for_each is ready when called");
        };
        assert!(out.unwrap().is_empty());
        assert_eq!(*seen.lock().unwrap(), ["v"]);
    }

    #[tokio::test]
    async fn a_pass_through_hands_the_fetched_bytes_on_and_a_new_string_is_not_copied() {
        use crate::producer::serializer::BytesSerializer;
        use crate::streams::BytesDeserializer;
        use std::sync::atomic::{AtomicUsize, Ordering};

        // A record whose key and value are slices of one fetched response.
        let frame = bytes::BytesMut::from(&b"key-and-value"[..]).freeze();
        let mut r = input(8, "");
        r.key = Some(frame.slice(..3));
        r.value = Some(frame.slice(4..));
        let (key, value) = (r.key.clone().unwrap(), r.value.clone().unwrap());
        let config = StreamsConfig::builder("app", "x:1").build().unwrap();
        let t = Streams::topology(config)
            .source("in", BytesDeserializer, BytesDeserializer)
            .to("out", BytesSerializer, BytesSerializer);
        let Records::One(p) = (t.processor)(r).await.unwrap() else {
            panic!("one record in, one out");
        };
        assert_eq!(p.key.as_ref().unwrap().as_ptr(), key.as_ptr());
        assert_eq!(p.value.as_ref().unwrap().as_ptr(), value.as_ptr());

        // A value built by a stage reaches the producer in its own buffer.
        let built = Arc::new(AtomicUsize::new(0));
        let seen = built.clone();
        let t = source()
            .map(move |r| {
                let v = format!("{}?", r.value);
                seen.store(v.as_ptr() as usize, Ordering::Relaxed);
                Ok(r.with_value(v))
            })
            .to("out", StringSerializer, StringSerializer);
        let Records::One(p) = (t.processor)(input(9, "b")).await.unwrap() else {
            panic!("one record in, one out");
        };
        assert_eq!(p.value.as_deref(), Some(&b"b?"[..]));
        assert_eq!(
            p.value.unwrap().as_ptr() as usize,
            built.load(Ordering::Relaxed)
        );
    }
}
