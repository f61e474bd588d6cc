//! The topology builder: a typed source, then `map`/`filter`/`flat_map`/
//! `for_each` stages in sync and async forms, then a sink `to(topic)`.
//! Building composes the stages into one function from a consumed record
//! to the records to produce, which the runtime runs once per record
//! (concurrently, as the ordering mode allows): its result is there at
//! once when every stage is synchronous, with nothing allocated for it per
//! record. The methods
//! that end a pipeline in a sink (`to`, `sink`, `branch`) live in `sink`,
//! which builds on this module (and not the other way round).

use std::future::Future;
use std::sync::{Arc, OnceLock};

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
    dyn Fn(ConsumerRecord) -> StageFuture<StageResult<K, V>> + Send + Sync;
pub(crate) type StageResult<K, V> = std::result::Result<Records<Record<K, V>>, ProcessingError>;

/// What a stage gives for one record: its result at once (a synchronous
/// stage, or a chain of them: nothing to allocate per record) or a boxed
/// future (an async stage).
pub(crate) enum StageFuture<T> {
    Ready(Option<T>),
    Boxed(BoxFuture<'static, T>),
}

// Nothing is pinned in place: a ready value is moved out, and the boxed
// future is pinned in its box.
impl<T> Unpin for StageFuture<T> {}

impl<T> Future for StageFuture<T> {
    type Output = T;

    fn poll(self: std::pin::Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> std::task::Poll<T> {
        match self.get_mut() {
            StageFuture::Ready(v) => std::task::Poll::Ready(
                v.take()
                    .expect("a ready stage future is polled once, as any future"),
            ),
            StageFuture::Boxed(f) => f.as_mut().poll(cx),
        }
    }
}

/// A stage's records from one input record: one (the common case) without
/// a list to allocate per record, or a list.
pub(crate) enum Records<T> {
    One(T),
    Many(Vec<T>),
}

impl<T> Records<T> {
    /// No record (allocates nothing).
    pub(crate) fn none() -> Self {
        Records::Many(Vec::new())
    }

    /// How many.
    pub(crate) fn len(&self) -> usize {
        match self {
            Records::One(_) => 1,
            Records::Many(list) => list.len(),
        }
    }

    /// Whether there is none.
    pub(crate) fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Each record, to change in place.
    #[cfg(feature = "otel")]
    pub(crate) fn iter_mut(&mut self) -> std::slice::IterMut<'_, T> {
        match self {
            Records::One(r) => std::slice::from_mut(r).iter_mut(),
            Records::Many(list) => list.iter_mut(),
        }
    }

    pub(crate) fn push_all(&mut self, more: Records<T>) {
        if self.is_empty() {
            *self = more;
            return;
        }
        let mut list = match std::mem::replace(self, Records::none()) {
            Records::One(r) => vec![r],
            Records::Many(list) => list,
        };
        list.extend(more);
        *self = Records::from(list);
    }
}

impl<T> From<Vec<T>> for Records<T> {
    fn from(mut list: Vec<T>) -> Self {
        match list.len() {
            1 => Records::One(list.pop().expect("one record")),
            _ => Records::Many(list),
        }
    }
}

impl<T> IntoIterator for Records<T> {
    type Item = T;
    type IntoIter = std::iter::Chain<std::option::IntoIter<T>, std::vec::IntoIter<T>>;

    fn into_iter(self) -> Self::IntoIter {
        let (one, many) = match self {
            Records::One(r) => (Some(r), Vec::new()),
            Records::Many(list) => (None, list),
        };
        one.into_iter().chain(many)
    }
}

/// A built topology's whole processing of one record: what to produce.
///
/// The runtime no longer runs topologies through this type (it holds a
/// handle whose result is ready at once when every stage is synchronous,
/// with no `Vec` and no boxed future per record); it stays for source
/// compatibility.
pub type Processor = Arc<
    dyn Fn(
            ConsumerRecord,
        ) -> BoxFuture<'static, std::result::Result<Vec<ProducerRecord>, ProcessingError>>
        + Send
        + Sync,
>;

/// The runtime's handle on a built topology: a record's outputs, ready at
/// once when every stage is synchronous.
pub(crate) type Process = Arc<
    dyn Fn(ConsumerRecord) -> StageFuture<ProcessResult<Records<ProducerRecord>>> + Send + Sync,
>;

/// A synchronous sink: a record's outputs.
pub(crate) type SyncSinkFn<K, V> =
    dyn Fn(Record<K, V>) -> ProcessResult<Records<ProducerRecord>> + Send + Sync;

/// A pipeline whose last stage is async, run with a synchronous sink
/// inside that stage's future: one box per record, not two.
pub(crate) type FusedFn<K, V> = dyn Fn(ConsumerRecord, Arc<SyncSinkFn<K, V>>) -> StageFuture<ProcessResult<Records<ProducerRecord>>>
    + Send
    + Sync;

/// A source topic's stages so far, producing `Record<K, V>`s.
pub struct Pipeline<K, V> {
    config: StreamsConfig,
    source: String,
    stage: Arc<StageFn<K, V>>,
    /// Set while the last stage is async (see [`FusedFn`]).
    fused: Option<Arc<FusedFn<K, V>>>,
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
    pub(super) processor: Process,
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
        config.repartitions = Default::default();
        TopologyBuilder {
            config,
            cluster: Late::default(),
        }
    }

    /// A builder for the next part of a topology (after a `group_by`):
    /// the same config, stores, repartitions and cluster handle.
    pub(crate) fn resume(config: StreamsConfig, cluster: Late) -> TopologyBuilder {
        TopologyBuilder { config, cluster }
    }

    /// A copy of the config (sharing its stores and repartitions) and the
    /// cluster handle, for a pipeline started elsewhere (a table's
    /// `to_stream`).
    pub(crate) fn parts(&self) -> (StreamsConfig, Late) {
        (self.config.clone(), self.cluster.clone())
    }

    /// The stores of this topology (a table registers its own).
    pub(crate) fn stores(&self) -> super::state::Stores {
        self.config.stores.clone()
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
        // Decoding is synchronous: done here, so that the boxed future
        // holds the decoded record only, not the consumed one as well.
        let stage: Arc<StageFn<KD::Output, VD::Output>> = Arc::new(move |r: ConsumerRecord| {
            // A record cache's flush tick (see `state::flush_tick`) is no
            // input record.
            if super::state::is_flush_tick(&r) {
                return StageFuture::Ready(Some(Ok(Records::none())));
            }
            // The key and value are handed to the deserializers by value:
            // bytes kept as they are move on, with no reference-count
            // round trip on the fetch response they share.
            let decode = || -> StageResult<KD::Output, VD::Output> {
                let topic = &r.partition.topic;
                let key = match r.key {
                    Some(k) => Some(serdes.0.deserialize_owned(topic, k)?),
                    None => None,
                };
                let value = serdes
                    .1
                    .deserialize_owned(topic, r.value.unwrap_or_default())?;
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
        Pipeline {
            config: self.config,
            source: topic.into(),
            stage,
            fused: None,
            cluster: self.cluster,
        }
    }
}

impl<K: Send + 'static, V: Send + 'static> Pipeline<K, V> {
    /// The stage every other is built on: each record to any number of
    /// records, asynchronously. The previous stage's future is made when a
    /// record comes in, so this stage's future holds it and not the record.
    fn then<K2, V2, F, Fut>(self, f: F) -> Pipeline<K2, V2>
    where
        K2: Send + 'static,
        V2: Send + 'static,
        F: Fn(Record<K, V>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = StageResult<K2, V2>> + Send + 'static,
    {
        let prev = self.stage;
        let f = Arc::new(f);
        // Where the previous stages are done with one record (the common
        // case), `f` is called at once and only its future is boxed, with
        // the sink if fused: the box is held per record in flight, and the
        // general path's async fns hold the previous stage's records and
        // `f`'s future twice (#22).
        let stage: Arc<StageFn<K2, V2>> = {
            let (prev, f) = (prev.clone(), f.clone());
            Arc::new(move |r| match prev(r) {
                StageFuture::Ready(Some(Ok(Records::One(r)))) => StageFuture::Boxed(Box::pin(f(r))),
                records => StageFuture::Boxed(Box::pin(apply_async(f.clone(), records))),
            })
        };
        let fused: Arc<FusedFn<K2, V2>> = Arc::new(move |r, sink| match prev(r) {
            StageFuture::Ready(Some(Ok(Records::One(r)))) => {
                StageFuture::Boxed(Box::pin(Sunk { fut: f(r), sink }))
            }
            records => {
                let f = f.clone();
                StageFuture::Boxed(Box::pin(async move {
                    apply_sync(&*sink, apply_async(f, records).await)
                }))
            }
        });
        Pipeline {
            config: self.config,
            source: self.source,
            stage,
            fused: Some(fused),
            cluster: self.cluster,
        }
    }

    /// A synchronous stage: applied at once when the previous stage's
    /// result is ready (no future is boxed), else after it.
    fn then_sync<K2, V2, F>(self, f: F) -> Pipeline<K2, V2>
    where
        K2: Send + 'static,
        V2: Send + 'static,
        F: Fn(Record<K, V>) -> StageResult<K2, V2> + Send + Sync + 'static,
    {
        let prev = self.stage;
        let f = Arc::new(f);
        let stage: Arc<StageFn<K2, V2>> = Arc::new(move |r| match prev(r) {
            StageFuture::Ready(Some(records)) => StageFuture::Ready(Some(apply_sync(&*f, records))),
            pending => {
                let f = f.clone();
                StageFuture::Boxed(Box::pin(async move { apply_sync(&*f, pending.await) }))
            }
        });
        Pipeline {
            config: self.config,
            source: self.source,
            stage,
            fused: None,
            cluster: self.cluster,
        }
    }

    /// Adds a stage that turns each record into zero or more records,
    /// asynchronously.
    pub fn flat_map_async<K2, V2, F, Fut>(self, f: F) -> Pipeline<K2, V2>
    where
        K2: Send + 'static,
        V2: Send + 'static,
        F: Fn(Record<K, V>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = std::result::Result<Vec<Record<K2, V2>>, ProcessingError>>
            + Send
            + 'static,
    {
        self.then(move |r| MapOk {
            fut: f(r),
            map: Records::from,
        })
    }

    /// Maps each record asynchronously (the processing may do I/O).
    pub fn map_async<K2: Send + 'static, V2: Send + 'static, F, Fut>(self, f: F) -> Pipeline<K2, V2>
    where
        F: Fn(Record<K, V>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = std::result::Result<Record<K2, V2>, ProcessingError>> + Send + 'static,
    {
        self.then(move |r| MapOk {
            fut: f(r),
            map: Records::One,
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
        self.then_sync(move |r| f(r).map(Records::One))
    }

    /// Turns each record into zero or more records.
    pub fn flat_map<K2: Send + 'static, V2: Send + 'static, F>(self, f: F) -> Pipeline<K2, V2>
    where
        F: Fn(Record<K, V>) -> std::result::Result<Vec<Record<K2, V2>>, ProcessingError>
            + Send
            + Sync
            + 'static,
    {
        self.then_sync(move |r| f(r).map(Records::from))
    }

    /// Keeps the records `keep` accepts.
    pub fn filter<F>(self, keep: F) -> Pipeline<K, V>
    where
        F: Fn(&Record<K, V>) -> bool + Send + Sync + 'static,
    {
        self.then_sync(move |r| {
            Ok(if keep(&r) {
                Records::One(r)
            } else {
                Records::none()
            })
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
        let processor: Process = Arc::new(move |r| {
            let records = stage(r);
            let f = f.clone();
            StageFuture::Boxed(Box::pin(async move {
                for r in records.await? {
                    f(r).await?;
                }
                Ok(Records::none())
            }))
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
        let run = move |records: StageResult<K, V>| -> ProcessResult<Records<ProducerRecord>> {
            for r in records? {
                f(r)?;
            }
            Ok(Records::none())
        };
        let run = Arc::new(run);
        let stage = self.stage;
        let processor: Process = Arc::new(move |r| match stage(r) {
            StageFuture::Ready(Some(records)) => StageFuture::Ready(Some(run(records))),
            pending => {
                let run = run.clone();
                StageFuture::Boxed(Box::pin(async move { run(pending.await) }))
            }
        });
        Topology {
            config: self.config,
            source: self.source,
            processor,
            cluster: self.cluster,
        }
    }

    /// The stores of this topology (stateful stages register theirs).
    pub(crate) fn stores(&self) -> super::state::Stores {
        self.config.stores.clone()
    }

    /// `application.id`.
    pub(crate) fn application_id(&self) -> String {
        self.config.application_id.clone()
    }

    /// A pipeline from [`into_parts`](Self::into_parts)' parts with another
    /// last stage (a stage that sees the consumed record itself, as a
    /// caching aggregation sees the runtime's flush ticks).
    pub(crate) fn from_parts(
        config: StreamsConfig,
        source: String,
        stage: Arc<StageFn<K, V>>,
        cluster: Late,
    ) -> Pipeline<K, V> {
        Pipeline {
            config,
            source,
            stage,
            fused: None,
            cluster,
        }
    }

    /// The application's config.
    pub(crate) fn config(&self) -> &StreamsConfig {
        &self.config
    }

    /// While the last stage is async: the pipeline run with a synchronous
    /// sink inside that stage's future (see `sink`).
    pub(crate) fn fused(&self) -> Option<Arc<FusedFn<K, V>>> {
        self.fused.clone()
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
        processor: Process,
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

/// An async stage `f` applied to the previous stage's records.
async fn apply_async<K, V, K2, V2, F, Fut>(
    f: Arc<F>,
    records: StageFuture<StageResult<K, V>>,
) -> StageResult<K2, V2>
where
    F: Fn(Record<K, V>) -> Fut,
    Fut: Future<Output = StageResult<K2, V2>>,
{
    match records.await? {
        Records::One(r) => f(r).await,
        Records::Many(list) => {
            let mut out = Records::none();
            for r in list {
                out.push_all(f(r).await?);
            }
            Ok(out)
        }
    }
}

pin_project_lite::pin_project! {
    /// A stage closure's future with its result mapped: a struct, not an
    /// async block, which would hold the closure's future twice.
    struct MapOk<Fut, T, U> {
        #[pin]
        fut: Fut,
        map: fn(T) -> U,
    }
}

impl<Fut, T, U> Future for MapOk<Fut, T, U>
where
    Fut: Future<Output = ProcessResult<T>>,
{
    type Output = ProcessResult<U>;

    fn poll(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        let this = self.project();
        this.fut.poll(cx).map(|r| r.map(*this.map))
    }
}

pin_project_lite::pin_project! {
    /// An async last stage's future for one record, with the synchronous
    /// sink applied to its result (see [`FusedFn`]).
    struct Sunk<Fut, S: ?Sized> {
        #[pin]
        fut: Fut,
        sink: Arc<S>,
    }
}

impl<Fut, S, T, U> Future for Sunk<Fut, S>
where
    Fut: Future<Output = ProcessResult<Records<T>>>,
    S: Fn(T) -> ProcessResult<Records<U>> + ?Sized,
{
    type Output = ProcessResult<Records<U>>;

    fn poll(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        let this = self.project();
        this.fut.poll(cx).map(|r| apply_sync(&**this.sink, r))
    }
}

/// A synchronous stage (or sink) `f` applied to the previous stage's
/// records.
fn apply_sync<T, U>(
    f: &(impl Fn(T) -> ProcessResult<Records<U>> + ?Sized),
    records: ProcessResult<Records<T>>,
) -> ProcessResult<Records<U>> {
    match records? {
        Records::One(r) => f(r),
        Records::Many(list) => {
            let mut out = Records::none();
            for r in list {
                out.push_all(f(r)?);
            }
            Ok(out)
        }
    }
}

/// The result type of stage closures.
pub type ProcessResult<T> = std::result::Result<T, ProcessingError>;

#[cfg(test)]
mod tests {
    use super::Records;

    fn listed(r: Records<u32>) -> Vec<u32> {
        r.into_iter().collect()
    }

    #[test]
    fn records_keep_one_without_a_list_and_keep_their_order() {
        assert!(matches!(Records::from(vec![7]), Records::One(7)));
        assert_eq!(listed(Records::from(vec![1, 2, 3])), [1, 2, 3]);
        assert_eq!(listed(Records::from(Vec::new())), Vec::<u32>::new());
        let mut out = Records::none();
        out.push_all(Records::One(1));
        assert!(matches!(out, Records::One(1)));
        out.push_all(Records::from(vec![2, 3]));
        out.push_all(Records::none());
        out.push_all(Records::One(4));
        assert_eq!(listed(out), [1, 2, 3, 4]);
    }
}
