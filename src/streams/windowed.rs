//! Tumbling time windows with a grace period (Kafka Streams'
//! `TimeWindows.ofSizeAndGrace`, KIP-633): `group_by_key().windowed_by(w)`
//! then `count` or `aggregate` per key and window.
//!
//! A record belongs to the window `[start, start + size)` with `start` its
//! timestamp rounded down to a multiple of `size`. Each window's store key
//! is the key's bytes followed by the start as 8 bytes big endian (Kafka
//! Streams' time-windowed key layout). A window *closes* when the stream
//! time (the highest timestamp the stage has seen on the partition since
//! its store opened) reaches `end + grace`; a record for a closed window
//! is dropped and counted (`RunningStreams::dropped_late_records`).
//! Stream time is observed as records reach the stage: under
//! `OrderingMode::Partition` that is offset order, as in Kafka Streams;
//! under `Key` records of other keys may arrive in another order, so what
//! counts as late can differ from run to run.

use std::sync::Arc;
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};

use super::serdes::Deserializer;
use super::state::{changelog_topic, QueryCodec, StoreSpec, Stores};
use super::stateful::{aggregate_step, GroupedStream, LongSerde, Table};
use super::topology::{Pipeline, Record};
use crate::error::Result;
use crate::producer::Serializer;

/// Tumbling windows of `size` that accept records up to `grace` after
/// their end (in stream time).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimeWindows {
    size_ms: i64,
    grace_ms: i64,
}

impl TimeWindows {
    /// Windows of `size` (at least 1 ms), open `grace` past their end.
    pub fn of_size_and_grace(size: Duration, grace: Duration) -> TimeWindows {
        let ms = |d: Duration| i64::try_from(d.as_millis()).unwrap_or(i64::MAX);
        TimeWindows {
            size_ms: ms(size).max(1),
            grace_ms: ms(grace),
        }
    }

    /// Windows of `size` with no grace: a window closes at its end.
    pub fn of_size_with_no_grace(size: Duration) -> TimeWindows {
        TimeWindows::of_size_and_grace(size, Duration::ZERO)
    }

    /// The start of the window holding `timestamp`.
    pub fn start_of(&self, timestamp: i64) -> i64 {
        timestamp - timestamp.rem_euclid(self.size_ms)
    }

    /// Whether the window starting at `start` is closed at `stream_time`.
    fn closed(&self, start: i64, stream_time: i64) -> bool {
        start
            .saturating_add(self.size_ms)
            .saturating_add(self.grace_ms)
            <= stream_time
    }
}

/// A key and the window it is aggregated in (`[start, end)`, ms).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Windowed<K> {
    /// The record key.
    pub key: K,
    /// Window start (inclusive), ms since the epoch.
    pub start: i64,
    /// Window end (exclusive).
    pub end: i64,
}

/// Serializes a [`Windowed`] key as Kafka Streams' time-windowed serde
/// does: the key's bytes (by the inner serializer), then the window start
/// as 8 bytes big endian.
#[derive(Debug, Clone, Copy, Default)]
pub struct WindowedSerializer<KS>(pub KS);

impl<K, KS: Serializer<K>> Serializer<Windowed<K>> for WindowedSerializer<KS> {
    fn serialize(&self, topic: &str, data: &Windowed<K>) -> Result<Bytes> {
        Ok(window_key(&self.0.serialize(topic, &data.key)?, data.start))
    }
}

/// A grouped stream cut into windows; see [`GroupedStream::windowed_by`].
pub struct WindowedStream<K, V> {
    pipeline: Pipeline<K, V>,
    windows: TimeWindows,
}

impl<K: Send + Sync + 'static, V: Send + 'static> GroupedStream<K, V> {
    /// Aggregates per key and time window.
    pub fn windowed_by(self, windows: TimeWindows) -> WindowedStream<K, V> {
        WindowedStream {
            pipeline: self.into_pipeline(),
            windows,
        }
    }
}

/// The store key of `key` in the window starting at `start`.
fn window_key(key: &[u8], start: i64) -> Bytes {
    let mut b = BytesMut::with_capacity(key.len() + 8);
    b.put_slice(key);
    b.put_i64(start);
    b.freeze()
}

impl<K: Send + Sync + 'static, V: Send + 'static> WindowedStream<K, V> {
    /// Counts the records per key and window (keys serialized by `keys`).
    pub fn count<KS>(self, store: StoreSpec, keys: KS) -> Table<Windowed<K>, i64>
    where
        KS: Serializer<K> + Send + Sync + 'static,
    {
        self.aggregate(store, keys, LongSerde, LongSerde, || 0, |_, _, n| n + 1)
    }

    /// Folds the values of each key and window: `init()` for a new window,
    /// then `aggregator(key, value, aggregate)`.
    pub fn aggregate<A, KS, AS, AD, I, F>(
        self,
        spec: StoreSpec,
        keys: KS,
        values: AS,
        decode: AD,
        init: I,
        aggregator: F,
    ) -> Table<Windowed<K>, A>
    where
        A: Send + 'static,
        KS: Serializer<K> + Send + Sync + 'static,
        AS: Serializer<A> + Send + Sync + 'static,
        AD: Deserializer<Output = A>,
        I: Fn() -> A + Send + Sync + 'static,
        F: Fn(&K, V, A) -> A + Send + Sync + 'static,
    {
        let stores: Stores = self.pipeline.stores();
        let name = spec.name().to_owned();
        let topic: Arc<str> = changelog_topic(&self.pipeline.application_id(), &name).into();
        stores.register(spec);
        let serdes = Arc::new((keys, decode));
        let (query, query_topic) = (serdes.clone(), topic.clone());
        let codec = QueryCodec::<Windowed<K>, A> {
            key: Box::new({
                let (query, topic) = (query.clone(), query_topic.clone());
                move |w: &Windowed<K>| -> Result<Bytes> {
                    Ok(window_key(&query.0.serialize(&topic, &w.key)?, w.start))
                }
            }),
            value: Box::new(move |b: &Bytes| query.1.deserialize(&query_topic, b)),
        };
        stores.register_codec(&name, Arc::new(codec));
        let windows = self.windows;
        let stage = Arc::new((serdes, values, init, aggregator, name.clone(), topic));
        let updates = self.pipeline.flat_map_async(move |r: Record<K, V>| {
            let (stage, stores) = (stage.clone(), stores.clone());
            async move {
                let (serdes, values, init, aggregator, name, topic) = &*stage;
                let (keys, decode) = &**serdes;
                let Some(key) = r.key else {
                    return Ok(Vec::new());
                };
                let store = stores.task_store(name, &r.partition).await?;
                let start = windows.start_of(r.timestamp);
                let stream_time = store.observe(r.timestamp);
                if windows.closed(start, stream_time) {
                    stores.count_late();
                    tracing::debug!(store = %name, partition = %r.partition, offset = r.offset,
                        timestamp = r.timestamp, stream_time, "dropped a record for a closed window");
                    return Ok(Vec::new());
                }
                let store_key = window_key(&keys.serialize(topic, &key)?, start);
                let value = r.value;
                let agg = aggregate_step(
                    &store,
                    store_key,
                    (r.offset, r.timestamp),
                    (name, topic),
                    (values, decode),
                    |old| aggregator(&key, value, old.unwrap_or_else(init)),
                )
                .await?;
                let windowed = Windowed {
                    key,
                    start,
                    end: start.saturating_add(windows.size_ms),
                };
                Ok(vec![Record {
                    key: Some(windowed),
                    value: agg,
                    timestamp: r.timestamp,
                    headers: r.headers,
                    partition: r.partition,
                    offset: r.offset,
                }])
            }
        });
        Table::new(updates, name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_start_at_multiples_of_their_size_and_close_after_grace() {
        let w = TimeWindows::of_size_and_grace(Duration::from_secs(10), Duration::from_secs(5));
        assert_eq!(w.start_of(0), 0);
        assert_eq!(w.start_of(9_999), 0);
        assert_eq!(w.start_of(10_000), 10_000);
        assert_eq!(w.start_of(-1), -10_000);
        assert!(!w.closed(0, 14_999));
        assert!(w.closed(0, 15_000));
        let none = TimeWindows::of_size_with_no_grace(Duration::from_secs(10));
        assert!(none.closed(0, 10_000) && !none.closed(0, 9_999));
        assert_eq!(&window_key(b"k", 258)[..], b"k\0\0\0\0\0\0\x01\x02");
        let w = Windowed {
            key: "k".to_owned(),
            start: 258,
            end: 10_258,
        };
        let s = WindowedSerializer(crate::producer::serializer::StringSerializer);
        assert_eq!(s.serialize("t", &w).unwrap(), window_key(b"k", 258));
    }
}
