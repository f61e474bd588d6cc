//! The stateful DSL (Kafka Streams' `KGroupedStream`, issue #16):
//! `group_by_key()`, then `count`, `reduce` or `aggregate` into a state
//! store (see [`state`](super::state)), giving a [`Table`] whose updates
//! go on with [`Table::to_stream`].
//!
//! Each update is a read-modify-write of the record's key in the input
//! partition's store, written through to the changelog before the record
//! counts as done. Records of one key reach the store one at a time in
//! offset order under [`OrderingMode::Partition`](super::OrderingMode) and
//! [`OrderingMode::Key`](super::OrderingMode) (the key being the input
//! record's key: a stage before `group_by_key` that changes keys needs
//! `Partition` mode for that order, or `group_by`, which repartitions
//! through a topic, see `repartition`); `Unordered` is refused at start.

use std::sync::Arc;

use bytes::Bytes;

use super::error::ProcessingError;
use super::repartition::{repartition_topic, Part};
use super::serdes::Deserializer;
use super::state::{
    changelog_topic, is_flush_tick, CacheEntry, QueryCodec, StoreSpec, Stores, TaskStore,
};
use super::topology::{Pipeline, Record, Records, StageFn, StageFuture, Topology, TopologyBuilder};
use crate::consumer::ConsumerRecord;
use crate::error::{Error, Result};
use crate::producer::Serializer;

/// Kafka's `LongSerializer`/`LongDeserializer` format: 8 bytes, big
/// endian (the value type of [`GroupedStream::count`]).
#[derive(Debug, Clone, Copy, Default)]
pub struct LongSerde;

impl Serializer<i64> for LongSerde {
    fn serialize(&self, _: &str, data: &i64) -> Result<Bytes> {
        Ok(Bytes::copy_from_slice(&data.to_be_bytes()))
    }
}

impl Deserializer for LongSerde {
    type Output = i64;
    fn deserialize(&self, topic: &str, data: &Bytes) -> Result<i64> {
        let bytes: [u8; 8] = data[..].try_into().map_err(|_| Error::Serialization {
            topic: topic.to_owned(),
            part: "long (deserializing)",
            reason: format!("expected 8 bytes, got {}", data.len()),
        })?;
        Ok(i64::from_be_bytes(bytes))
    }
}

/// A stream grouped by its key, ready to aggregate (Kafka Streams'
/// `KGroupedStream`); see [`Pipeline::group_by_key`].
pub struct GroupedStream<K, V> {
    pipeline: Pipeline<K, V>,
}

/// The result of an aggregation: a changelog stream of per-key values
/// (Kafka Streams' `KTable`), kept in a state store. Every update (one per
/// input record) is a record of [`to_stream`](Self::to_stream).
pub struct Table<K, V> {
    updates: Pipeline<K, V>,
    store: String,
}

impl<K: Send + 'static, V: Send + 'static> Table<K, V> {
    pub(crate) fn new(updates: Pipeline<K, V>, store: String) -> Table<K, V> {
        Table { updates, store }
    }

    /// The table's updates as a stream: each is the key and its new value,
    /// with the input record's timestamp and headers.
    pub fn to_stream(self) -> Pipeline<K, V> {
        self.updates
    }

    /// The name of the store behind the table.
    pub fn store_name(&self) -> &str {
        &self.store
    }
}

impl<K: Send + 'static, V: Send + 'static> Pipeline<K, V> {
    /// Groups the stream by its key for an aggregation. Records with a
    /// null key are dropped by the aggregation (as in Kafka Streams).
    pub fn group_by_key(self) -> GroupedStream<K, V> {
        GroupedStream { pipeline: self }
    }

    /// Groups the stream by a new key, `select(record)`, through the
    /// repartition topic `<application.id>-<name>-repartition` (Kafka
    /// Streams' `groupBy` with `Grouped.as(name)`): each record is written
    /// there under its new key (`keys.0`, `values.0` serialize it; the
    /// default partitioner puts a key in one partition) and read back
    /// (`keys.1`, `values.1`) by a second part of the topology, so the
    /// aggregation sees every record of a key in one task, in order,
    /// whatever the ordering mode and wherever the input had the key.
    ///
    /// The runtime creates the topic at start with the input's partition
    /// count and reads it in the application's group; under exactly-once
    /// the repartition writes, the outputs and both topics' offsets go in
    /// one transaction. Every `repartition.purge.interval.ms` the records
    /// below the group's committed offset are deleted from the topic. On a
    /// streams group (`group.protocol=streams`) the parts before and after
    /// are the subtopologies `0` and `1` of the declared topology.
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), purekafka::streams::StreamsError> {
    /// use purekafka::producer::serializer::StringSerializer;
    /// use purekafka::streams::state::StoreSpec;
    /// use purekafka::streams::{LongSerde, StreamsConfig, Streams, StringDeserializer};
    ///
    /// let config = StreamsConfig::builder("orders-by-city", "127.0.0.1:9092").build()?;
    /// let running = Streams::topology(config)
    ///     .source("orders", StringDeserializer, StringDeserializer)
    ///     // The value is "city,amount": count orders per city.
    ///     .group_by(
    ///         "by-city",
    ///         |r| r.value.split(',').next().unwrap_or_default().to_owned(),
    ///         (StringSerializer, StringDeserializer),
    ///         (StringSerializer, StringDeserializer),
    ///     )
    ///     .count(StoreSpec::persistent("city-counts"), StringSerializer)
    ///     .to_stream()
    ///     .to("orders-per-city", StringSerializer, LongSerde)
    ///     .build()
    ///     .start()
    ///     .await?;
    /// # running.shutdown().await
    /// # }
    /// ```
    pub fn group_by<K2, F, KS, KD, VS, VD>(
        self,
        name: &str,
        select: F,
        keys: (KS, KD),
        values: (VS, VD),
    ) -> GroupedStream<K2, V>
    where
        K2: Send + 'static,
        F: Fn(&Record<K, V>) -> K2 + Send + Sync + 'static,
        KS: Serializer<K2> + Send + Sync + 'static,
        KD: Deserializer<Output = K2>,
        VS: Serializer<V> + Send + Sync + 'static,
        VD: Deserializer<Output = V>,
    {
        let topic = repartition_topic(&self.application_id(), name);
        let upstream = self
            .map(move |r| {
                let key = select(&r);
                Ok(Record {
                    key: Some(key),
                    value: r.value,
                    timestamp: r.timestamp,
                    headers: r.headers,
                    partition: r.partition,
                    offset: r.offset,
                })
            })
            .to(topic.clone(), keys.0, values.0);
        let Topology {
            config,
            source,
            processor,
            cluster,
        } = upstream;
        config.repartitions.register(Part {
            input: source,
            repartition: topic.clone(),
            process: processor,
        });
        TopologyBuilder::resume(config, cluster)
            .source(topic, keys.1, values.1)
            .group_by_key()
    }
}

impl<K: Send + Sync + 'static, V: Send + 'static> GroupedStream<K, V> {
    pub(crate) fn into_pipeline(self) -> Pipeline<K, V> {
        self.pipeline
    }

    /// Counts the records per key into `store` (keys serialized by
    /// `keys`, counts as [`LongSerde`]).
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), purekafka::streams::StreamsError> {
    /// use purekafka::producer::serializer::StringSerializer;
    /// use purekafka::streams::state::StoreSpec;
    /// use purekafka::streams::{LongSerde, StreamsConfig, Streams, StringDeserializer};
    ///
    /// let config = StreamsConfig::builder("order-counts", "127.0.0.1:9092").build()?;
    /// let running = Streams::topology(config)
    ///     .source("orders", StringDeserializer, StringDeserializer)
    ///     .group_by_key()
    ///     .count(StoreSpec::persistent("counts"), StringSerializer)
    ///     .to_stream()
    ///     .to("orders-per-customer", StringSerializer, LongSerde)
    ///     .build()
    ///     .start()
    ///     .await?;
    /// # running.shutdown().await
    /// # }
    /// ```
    pub fn count<KS>(self, store: StoreSpec, keys: KS) -> Table<K, i64>
    where
        KS: Serializer<K> + Send + Sync + 'static,
    {
        self.aggregate(store, keys, LongSerde, LongSerde, || 0, |_, _, n| n + 1)
    }

    /// Combines each key's values with `reducer(aggregate, value)`; a
    /// key's first value is its first aggregate. Values are kept as
    /// `values` serializes them and read back with `decode`.
    pub fn reduce<KS, VS, VD, F>(
        self,
        store: StoreSpec,
        keys: KS,
        values: VS,
        decode: VD,
        reducer: F,
    ) -> Table<K, V>
    where
        KS: Serializer<K> + Send + Sync + 'static,
        VS: Serializer<V> + Send + Sync + 'static,
        VD: Deserializer<Output = V>,
        F: Fn(V, V) -> V + Send + Sync + 'static,
    {
        self.apply(store, keys, values, decode, move |_, v, agg| match agg {
            Some(a) => reducer(a, v),
            None => v,
        })
    }

    /// Folds each key's values into an aggregate: `init()` for a new key,
    /// then `aggregator(key, value, aggregate)`. Aggregates are kept as
    /// `values` serializes them and read back with `decode`.
    pub fn aggregate<A, KS, AS, AD, I, F>(
        self,
        store: StoreSpec,
        keys: KS,
        values: AS,
        decode: AD,
        init: I,
        aggregator: F,
    ) -> Table<K, A>
    where
        A: Send + 'static,
        KS: Serializer<K> + Send + Sync + 'static,
        AS: Serializer<A> + Send + Sync + 'static,
        AD: Deserializer<Output = A>,
        I: Fn() -> A + Send + Sync + 'static,
        F: Fn(&K, V, A) -> A + Send + Sync + 'static,
    {
        self.apply(store, keys, values, decode, move |k, v, agg| {
            aggregator(k, v, agg.unwrap_or_else(&init))
        })
    }

    /// The stage behind every aggregation: per record, the new aggregate
    /// from the value and the old one.
    fn apply<A, KS, AS, AD, F>(
        self,
        spec: StoreSpec,
        keys: KS,
        values: AS,
        decode: AD,
        step: F,
    ) -> Table<K, A>
    where
        A: Send + 'static,
        KS: Serializer<K> + Send + Sync + 'static,
        AS: Serializer<A> + Send + Sync + 'static,
        AD: Deserializer<Output = A>,
        F: Fn(&K, V, Option<A>) -> A + Send + Sync + 'static,
    {
        let stores: Stores = self.pipeline.stores();
        let name = spec.name().to_owned();
        // Serdes errors name the changelog topic, which is where these
        // bytes go.
        let topic: Arc<str> = changelog_topic(&self.pipeline.application_id(), &name).into();
        // A flush runs the stages downstream of the cache for entries whose
        // records are done: a failure there cannot be retried in place.
        let config = self.pipeline.config();
        let cached = config.cache_max_bytes > 0
            && !matches!(config.failure_policy, super::FailurePolicy::Retry(_));
        stores.register(spec.cached(cached));
        let serdes = Arc::new((keys, decode));
        let query = serdes.clone();
        let query_topic = topic.clone();
        let codec = QueryCodec::<K, A> {
            key: Box::new({
                let (query, topic) = (query.clone(), query_topic.clone());
                move |k: &K| query.0.serialize(&topic, k)
            }),
            value: Box::new(move |b: &Bytes| query.1.deserialize(&query_topic, b)),
        };
        stores.register_codec(&name, Arc::new(codec));
        let stage = Arc::new((serdes, values, step, name.clone(), topic));
        if cached {
            let updates = cached_stage(self.pipeline, stores, stage);
            return Table {
                updates,
                store: name,
            };
        }
        let updates = self.pipeline.flat_map_async(move |r: Record<K, V>| {
            let (stage, stores) = (stage.clone(), stores.clone());
            async move {
                let (serdes, values, step, name, topic) = &*stage;
                let (keys, decode) = &**serdes;
                let Some(key) = r.key else {
                    return Ok(Vec::new());
                };
                let key_bytes = keys.serialize(topic, &key)?;
                let store = stores.task_store(name, &r.partition).await?;
                let value = r.value;
                let agg = aggregate_step(
                    &store,
                    key_bytes,
                    (r.offset, r.timestamp),
                    (name, topic),
                    (values, decode),
                    |old| step(&key, value, old),
                )
                .await?;
                Ok(vec![Record {
                    key: Some(key),
                    value: agg,
                    timestamp: r.timestamp,
                    headers: r.headers,
                    partition: r.partition,
                    offset: r.offset,
                }])
            }
        });
        Table {
            updates,
            store: name,
        }
    }
}

/// A key-value aggregation's stage and what it needs: serdes (key
/// serializer, value decoder), value serializer, step, store name and
/// changelog topic.
type StageParts<KS, AD, AS, F> = Arc<(Arc<(KS, AD)>, AS, F, String, Arc<str>)>;

/// A key-value aggregation behind a record cache (KIP-63): a record's
/// update goes to the cache and forwards nothing, unless the cache is full
/// and writes out its least recently updated entries (forwarded then, with
/// the context of the record that last updated each); a flush tick
/// (`state::flush_tick`, run by the runtime before it commits) writes out
/// the cache of its partition and forwards every entry. The tick goes up
/// the pipeline first, so that what upstream caches write out is
/// aggregated here before this cache is flushed.
fn cached_stage<K, V, A, KS, AS, AD, F>(
    pipeline: Pipeline<K, V>,
    stores: Stores,
    stage: StageParts<KS, AD, AS, F>,
) -> Pipeline<K, A>
where
    K: Send + Sync + 'static,
    V: Send + 'static,
    A: Send + 'static,
    KS: Serializer<K> + Send + Sync + 'static,
    AS: Serializer<A> + Send + Sync + 'static,
    AD: Deserializer<Output = A>,
    F: Fn(&K, V, Option<A>) -> A + Send + Sync + 'static,
{
    let (config, source, prev, cluster) = pipeline.into_parts();
    let stage_fn: Arc<StageFn<K, A>> = Arc::new(move |r: ConsumerRecord| {
        let tick = is_flush_tick(&r).then(|| r.partition.clone());
        let records = prev(r);
        let (stage, stores) = (stage.clone(), stores.clone());
        StageFuture::Boxed(Box::pin(async move {
            let (serdes, values, step, name, topic) = &*stage;
            let (keys, decode) = &**serdes;
            let mut out = Vec::new();
            for r in records.await? {
                let Some(key) = r.key else { continue };
                let key_bytes = keys.serialize(topic, &key)?;
                let store = stores.task_store(name, &r.partition).await?;
                let partition = r.partition;
                let value = r.value;
                let evicted = store
                    .update_cached(
                        key_bytes,
                        (r.offset, r.timestamp, r.headers),
                        key,
                        |key, old| {
                            let old = old.map(|b| decode.deserialize(topic, b)).transpose()?;
                            Ok(Some(values.serialize(topic, &step(key, value, old))?))
                        },
                    )
                    .await?;
                forward(&mut out, evicted, &partition, (name, topic), decode)?;
            }
            if let Some(partition) = tick {
                // A tick never opens a store: a partition without one has
                // nothing cached.
                if let Some(store) = stores.local(name, partition.partition) {
                    // Boxed: once per commit, not inlined into every
                    // record's future.
                    let flushed = Box::pin(store.flush_cache()).await?;
                    forward(&mut out, flushed, &partition, (name, topic), decode)?;
                }
            }
            Ok(Records::from(out))
        }))
    });
    Pipeline::from_parts(config, source, stage_fn, cluster)
}

/// Turns entries a record cache wrote out into the stage's records.
fn forward<K: 'static, A, AD: Deserializer<Output = A>>(
    out: &mut Vec<Record<K, A>>,
    entries: Vec<(Bytes, CacheEntry)>,
    partition: &crate::TopicPartition,
    (name, topic): (&str, &str),
    decode: &AD,
) -> std::result::Result<(), ProcessingError> {
    for (_, e) in entries {
        let Some(bytes) = e.value else { continue };
        let key = e.origin.downcast::<K>().map_err(|_| {
            ProcessingError::new(format!("store {name}: a cached key of another type"))
        })?;
        out.push(Record {
            key: Some(*key),
            value: decode.deserialize(topic, &bytes)?,
            timestamp: e.timestamp,
            headers: e.headers,
            partition: partition.clone(),
            offset: e.offset,
        });
    }
    Ok(())
}

/// One aggregation step on a task's store: the key's aggregate is read,
/// `step` computes the next one, which is written through to the changelog
/// and returned. A record already applied (a retry in place) gets the stored
/// aggregate and `step` does not run again. `names` are the store's name and
/// its changelog topic (serdes errors name the topic, where the bytes go).
pub(crate) async fn aggregate_step<A, AS, AD>(
    store: &TaskStore,
    store_key: Bytes,
    (offset, timestamp): (i64, i64),
    (name, topic): (&str, &str),
    (values, decode): (&AS, &AD),
    step: impl FnOnce(Option<A>) -> A,
) -> std::result::Result<A, ProcessingError>
where
    AS: Serializer<A>,
    AD: Deserializer<Output = A>,
{
    let mut computed = None;
    let new = store
        .update(store_key, offset, timestamp, |old| {
            let old = old.map(|b| decode.deserialize(topic, b)).transpose()?;
            let agg = step(old);
            let bytes = values.serialize(topic, &agg)?;
            computed = Some(agg);
            Ok::<_, ProcessingError>(Some(bytes))
        })
        .await?;
    match computed {
        Some(agg) => Ok(agg),
        None => {
            let bytes = new.ok_or_else(|| {
                ProcessingError::new(format!("store {name}: no value after update"))
            })?;
            Ok(decode.deserialize(topic, &bytes)?)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn longs_are_eight_bytes_big_endian() {
        let b = LongSerde.serialize("t", &258).unwrap();
        assert_eq!(&b[..], &[0, 0, 0, 0, 0, 0, 1, 2]);
        assert_eq!(LongSerde.deserialize("t", &b).unwrap(), 258);
        let err = LongSerde
            .deserialize("counts", &Bytes::from_static(&[1, 2]))
            .unwrap_err();
        assert!(err.to_string().contains("counts"), "{err}");
    }
}
