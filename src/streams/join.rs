//! Tables read from a topic and stream-table joins (Kafka Streams'
//! `StreamsBuilder#table` and `KStream#join` / `#leftJoin` with a
//! `KTable`, issue #16).
//!
//! [`TopologyBuilder::table`] materialises a topic into a key-value store
//! per partition: the topic is the store's changelog (Kafka Streams'
//! source-topic optimisation), restored when the partition's store opens
//! and then followed while it is open (see `state::table`). A record of
//! the stream's partition `p` is joined with the value its key has in the
//! table's partition `p`, so the two topics must be co-partitioned (same
//! partition count, same partitioner); `start()` checks the counts.
//!
//! [`SourceTable::to_stream`] reads the table's topic as the topology's
//! source instead: each record an update, a tombstone a `None` value.
//!
//! The join is a lookup: it reads the table as its follower has read it,
//! without Kafka Streams' timestamp synchronisation between the two
//! topics (as Kafka Streams' `GlobalKTable` joins).

use std::sync::Arc;

use bytes::Bytes;

use super::config::StreamsConfig;
use super::error::ProcessingError;
use super::serdes::Deserializer;
use super::state::{is_flush_tick, QueryCodec, StoreSpec, Stores};
use super::topology::{
    Late, Pipeline, Record, Records, StageFn, StageFuture, StageResult, TopologyBuilder,
};
use crate::consumer::ConsumerRecord;
use crate::producer::Serializer;

/// A table read from a topic (Kafka Streams' `KTable` from
/// `builder.table(topic)`): per key its latest value, a null value
/// deleting the key. Made by [`TopologyBuilder::table`]; streams join it
/// with [`Pipeline::join`] and [`Pipeline::left_join`], and its store can
/// be queried (`RunningStreams::store`).
pub struct SourceTable<K, V> {
    topic: String,
    store: String,
    codec: Arc<QueryCodec<K, V>>,
    /// The builder's config and cluster handle, for
    /// [`to_stream`](Self::to_stream).
    builder: (StreamsConfig, Late),
}

impl<K, V> SourceTable<K, V> {
    /// The topic the table is read from (its changelog).
    pub fn topic(&self) -> &str {
        &self.topic
    }

    /// The name of the store behind the table.
    pub fn store_name(&self) -> &str {
        &self.store
    }
}

impl<K: Send + 'static, V: Send + 'static> SourceTable<K, V> {
    /// The table's changelog as a stream (Kafka Streams' `KTable#toStream`
    /// on a table read from a topic): every record of the topic, in offset
    /// order per partition, with its key decoded by `keys` and its value by
    /// the table's deserializer; a tombstone (null value: the key's
    /// deletion) is `None`. The stream reads the topic in the
    /// application's group, as a source does, and is the topology's
    /// source: the topology then has no other (one source per topology),
    /// so a stream joined with this table and its changelog stream are two
    /// applications. A value that does not decode fails its record.
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), purekafka::streams::StreamsError> {
    /// use purekafka::producer::serializer::StringSerializer;
    /// use purekafka::streams::state::StoreSpec;
    /// use purekafka::streams::{StreamsConfig, Streams, StringDeserializer};
    ///
    /// let config = StreamsConfig::builder("customer-audit", "127.0.0.1:9092").build()?;
    /// let customers = Streams::topology(config).table(
    ///     "customers",
    ///     StringSerializer,
    ///     StringDeserializer,
    ///     StoreSpec::in_memory("customers"),
    /// );
    /// let running = customers
    ///     .to_stream(StringDeserializer)
    ///     .map(|r| {
    ///         let v = r.value.clone().unwrap_or_else(|| "deleted".to_owned());
    ///         Ok(r.with_value(v))
    ///     })
    ///     .to("customer-changes", StringSerializer, StringSerializer)
    ///     .build()
    ///     .start()
    ///     .await?;
    /// # running.shutdown().await
    /// # }
    /// ```
    pub fn to_stream<KD>(self, keys: KD) -> Pipeline<K, Option<V>>
    where
        KD: Deserializer<Output = K>,
    {
        let codec = self.codec;
        let stage: Arc<StageFn<K, Option<V>>> = Arc::new(move |r: ConsumerRecord| {
            if is_flush_tick(&r) {
                return StageFuture::Ready(Some(Ok(Records::none())));
            }
            let decode = || -> StageResult<K, Option<V>> {
                let key = match &r.key {
                    Some(k) => Some(keys.deserialize(&r.partition.topic, k)?),
                    None => None,
                };
                let value = match &r.value {
                    Some(v) => Some((codec.value)(v)?),
                    None => None,
                };
                Ok(Records::One(Record {
                    key,
                    value,
                    timestamp: r.timestamp,
                    headers: r.headers,
                    partition: r.partition,
                    offset: r.offset,
                }))
            };
            StageFuture::Ready(Some(decode()))
        });
        let (config, cluster) = self.builder;
        Pipeline::from_parts(config, self.topic, stage, cluster)
    }
}

impl TopologyBuilder {
    /// A table of `topic` (Kafka Streams' `builder.table`), materialised
    /// into `store`: keys as `keys` serializes them (a stream joined with
    /// the table looks its keys up through it, so it must write them as
    /// the table's producers did), values decoded with `values` when a
    /// join reads them (a value that does not decode fails the stream
    /// record that reads it). The topic is the store's changelog: no
    /// `-changelog` topic is created, and the topic must have the stream
    /// source's partition count (checked at start). Call it before
    /// [`source`](Self::source).
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), purekafka::streams::StreamsError> {
    /// use purekafka::producer::serializer::StringSerializer;
    /// use purekafka::streams::state::StoreSpec;
    /// use purekafka::streams::{StreamsConfig, Streams, StringDeserializer};
    ///
    /// let config = StreamsConfig::builder("enrich-orders", "127.0.0.1:9092").build()?;
    /// let builder = Streams::topology(config);
    /// let customers = builder.table(
    ///     "customers",
    ///     StringSerializer,
    ///     StringDeserializer,
    ///     StoreSpec::persistent("customers"),
    /// );
    /// let running = builder
    ///     .source("orders", StringDeserializer, StringDeserializer)
    ///     .left_join(&customers, |order: String, customer: Option<String>| {
    ///         format!("{order} for {}", customer.as_deref().unwrap_or("nobody"))
    ///     })
    ///     .to("orders-enriched", StringSerializer, StringSerializer)
    ///     .build()
    ///     .start()
    ///     .await?;
    /// # running.shutdown().await
    /// # }
    /// ```
    pub fn table<K, KS, VD>(
        &self,
        topic: impl Into<String>,
        keys: KS,
        values: VD,
        store: StoreSpec,
    ) -> SourceTable<K, VD::Output>
    where
        K: 'static,
        KS: Serializer<K> + Send + Sync + 'static,
        VD: Deserializer,
    {
        let topic: String = topic.into();
        let stores = self.stores();
        let name = store.name().to_owned();
        stores.register(store.following(&topic));
        let key_topic = topic.clone();
        let value_topic = topic.clone();
        let codec = Arc::new(QueryCodec::<K, VD::Output> {
            key: Box::new(move |k: &K| keys.serialize(&key_topic, k)),
            value: Box::new(move |b: &Bytes| values.deserialize(&value_topic, b)),
        });
        stores.register_codec(&name, codec.clone());
        SourceTable {
            topic,
            store: name,
            codec,
            builder: self.parts(),
        }
    }
}

impl<K: Send + Sync + 'static, V: Send + 'static> Pipeline<K, V> {
    /// Joins each record with the value its key has in `table` (Kafka
    /// Streams' `KStream#join(KTable)`): `joiner(value, table_value)`
    /// gives the output value; a record whose key the table lacks, or
    /// whose key is null, gives nothing.
    pub fn join<TV, R, F>(self, table: &SourceTable<K, TV>, joiner: F) -> Pipeline<K, R>
    where
        TV: Send + 'static,
        R: Send + 'static,
        F: Fn(V, TV) -> R + Send + Sync + 'static,
    {
        self.lookup(table, true, move |v, t| t.map(|t| joiner(v, t)))
    }

    /// Joins each record with the value its key has in `table`, if any
    /// (Kafka Streams' `KStream#leftJoin(KTable)`): every record gives
    /// `joiner(value, table_value)`, with `None` when the table lacks the
    /// key or the key is null (a null key is no lookup; Kafka Streams
    /// passes such records on since KIP-962).
    pub fn left_join<TV, R, F>(self, table: &SourceTable<K, TV>, joiner: F) -> Pipeline<K, R>
    where
        TV: Send + 'static,
        R: Send + 'static,
        F: Fn(V, Option<TV>) -> R + Send + Sync + 'static,
    {
        self.lookup(table, false, move |v, t| Some(joiner(v, t)))
    }

    /// The stage of both joins: per record, the table's value of its key
    /// in the record's partition (`None` when absent), then `joiner`
    /// (`None`: no output). `inner`: a null key gives nothing.
    fn lookup<TV, R, F>(self, table: &SourceTable<K, TV>, inner: bool, joiner: F) -> Pipeline<K, R>
    where
        TV: Send + 'static,
        R: Send + 'static,
        F: Fn(V, Option<TV>) -> Option<R> + Send + Sync + 'static,
    {
        let stores: Stores = self.stores();
        let stage = Arc::new((table.codec.clone(), table.store.clone(), joiner));
        self.flat_map_async(move |r: Record<K, V>| {
            let (stage, stores) = (stage.clone(), stores.clone());
            async move {
                let (codec, name, joiner) = &*stage;
                let found = match &r.key {
                    None if inner => return Ok(Vec::new()),
                    None => None,
                    Some(key) => {
                        let key = (codec.key)(key)?;
                        let store = stores.task_store(name, &r.partition).await?;
                        if let Some(reason) = store.follow_error() {
                            return Err(ProcessingError::new(reason));
                        }
                        match store.get(&key)? {
                            Some(bytes) => Some((codec.value)(&bytes)?),
                            None => None,
                        }
                    }
                };
                let value = r.value;
                Ok(match joiner(value, found) {
                    Some(out) => vec![Record {
                        key: r.key,
                        value: out,
                        timestamp: r.timestamp,
                        headers: r.headers,
                        partition: r.partition,
                        offset: r.offset,
                    }],
                    None => Vec::new(),
                })
            }
        })
    }
}
