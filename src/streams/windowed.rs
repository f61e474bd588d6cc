//! Tumbling and hopping time windows with a grace period (Kafka Streams'
//! `TimeWindows.ofSizeAndGrace(..).advanceBy(..)`, KIP-633):
//! `group_by_key().windowed_by(w)` then `count` or `aggregate` per key and
//! window, into a window store (see [`WindowStore`](super::state::WindowStore)).
//!
//! A record belongs to every window `[start, start + size)` that holds its
//! timestamp, with `start` a multiple of `advance` (tumbling windows:
//! `advance = size`, one window per record; hopping: `size / advance` of
//! them). Each window's store key is the key's bytes followed by the start
//! as 8 bytes big endian (Kafka Streams' time-windowed key layout). A
//! window *closes* when the stream time (the highest timestamp the stage
//! has seen on the partition since its store opened) reaches `end +
//! grace`; a record for a closed window is dropped from it and counted,
//! once per window it missed (`RunningStreams::dropped_late_records`), as
//! Kafka Streams counts them. A window is deleted from the store and the
//! changelog once stream time reaches `start + retention` (the store's
//! [`StoreSpec::with_retention`], at least and by default `size + grace`).
//!
//! By default every update of a window is emitted. With
//! [`WindowedStream::emit_on_window_close`] (Kafka Streams' KIP-825
//! `EmitStrategy.onWindowClose()`, which gives what
//! `suppress(Suppressed.untilWindowCloses(..))` gives) each window is
//! emitted once, with its final value, when stream time reaches its `end +
//! grace`: by the record that moves stream time there, with that record's
//! timestamp. The window store is the buffer, so the results wait in the
//! store and its changelog, and a restored store emits neither twice nor
//! never; a window is expired only after it was emitted.
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
    advance_ms: i64,
    grace_ms: i64,
}

impl TimeWindows {
    /// Windows of `size` (at least 1 ms), open `grace` past their end.
    pub fn of_size_and_grace(size: Duration, grace: Duration) -> TimeWindows {
        let ms = |d: Duration| i64::try_from(d.as_millis()).unwrap_or(i64::MAX);
        let size_ms = ms(size).max(1);
        TimeWindows {
            size_ms,
            advance_ms: size_ms,
            grace_ms: ms(grace),
        }
    }

    /// Hopping windows: a window starts every `advance` (at least 1 ms, at
    /// most the size; a larger one is taken as the size, tumbling), so a
    /// record is counted in each of the windows that hold it.
    pub fn advance_by(mut self, advance: Duration) -> TimeWindows {
        let ms = i64::try_from(advance.as_millis()).unwrap_or(i64::MAX);
        self.advance_ms = ms.clamp(1, self.size_ms);
        self
    }

    /// The starts of the windows holding `timestamp`, oldest first.
    pub fn starts_of(&self, timestamp: i64) -> impl Iterator<Item = i64> {
        let (size, advance) = (self.size_ms, self.advance_ms);
        let last = timestamp - timestamp.rem_euclid(advance);
        let first_after = timestamp.saturating_sub(size);
        // The oldest start s with s + size > timestamp.
        let first = last - (last - first_after - 1).div_euclid(advance) * advance;
        (0..)
            .map(move |i: i64| first.saturating_add(i.saturating_mul(advance)))
            .take_while(move |s| *s <= last)
    }

    /// Size plus grace: the least time a window is kept after its start.
    fn min_retention_ms(&self) -> i64 {
        self.size_ms.saturating_add(self.grace_ms)
    }

    /// Windows of `size` with no grace: a window closes at its end.
    pub fn of_size_with_no_grace(size: Duration) -> TimeWindows {
        TimeWindows::of_size_and_grace(size, Duration::ZERO)
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
    /// Window end: exclusive for time windows; for a session (see
    /// [`SessionWindows`](super::SessionWindows)), the timestamp of its
    /// last record, inclusive (as Kafka Streams' `SessionWindow`).
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

/// Reads a key back from a window store (emit-on-close).
type KeyDecoder<K> = Arc<dyn Deserializer<Output = K>>;

/// A grouped stream cut into windows; see [`GroupedStream::windowed_by`].
pub struct WindowedStream<K, V> {
    pipeline: Pipeline<K, V>,
    windows: TimeWindows,
    /// Emit-on-close: how to read keys back from the store.
    on_close: Option<KeyDecoder<K>>,
}

impl<K: Send + Sync + 'static, V: Send + 'static> GroupedStream<K, V> {
    /// Aggregates per key and time window.
    pub fn windowed_by(self, windows: TimeWindows) -> WindowedStream<K, V> {
        WindowedStream {
            pipeline: self.into_pipeline(),
            windows,
            on_close: None,
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

/// Windowed aggregations clone the key into each update and, with hopping
/// windows, the value into each window but the last.
impl<K: Clone + Send + Sync + 'static, V: Clone + Send + 'static> WindowedStream<K, V> {
    /// Emits each window once, with its final value, when it closes
    /// (stream time reaches its end plus grace), instead of every update
    /// (Kafka Streams' `emitStrategy(EmitStrategy.onWindowClose())`,
    /// KIP-825, or `suppress(untilWindowCloses)`). `keys` reads a key back
    /// from the store, where the aggregation's key serializer wrote it.
    pub fn emit_on_window_close<KD>(mut self, keys: KD) -> WindowedStream<K, V>
    where
        KD: Deserializer<Output = K>,
    {
        self.on_close = Some(Arc::new(keys));
        self
    }

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
        let retention = spec
            .retention_ms()
            .unwrap_or(0)
            .max(self.windows.min_retention_ms());
        stores.register(spec.windowed(retention));
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
        let stage = Arc::new((
            serdes,
            values,
            init,
            aggregator,
            (name.clone(), topic),
            self.on_close,
        ));
        let updates = self.pipeline.flat_map_async(move |r: Record<K, V>| {
            let (stage, stores) = (stage.clone(), stores.clone());
            async move {
                let (serdes, values, init, aggregator, (name, topic), on_close) = &*stage;
                let (keys, decode) = &**serdes;
                let Some(key) = r.key else {
                    return Ok(Vec::new());
                };
                let store = stores.task_store(name, &r.partition).await?;
                let stream_time = store.observe(r.timestamp);
                let key_bytes = keys.serialize(topic, &key)?;
                let Record {
                    value,
                    timestamp,
                    headers,
                    partition,
                    offset,
                    ..
                } = r;
                let mut out = Vec::new();
                let mut value = Some(value);
                let mut starts = windows.starts_of(timestamp).peekable();
                while let Some(start) = starts.next() {
                    if windows.closed(start, stream_time) {
                        stores.count_late();
                        tracing::debug!(store = %name, %partition, offset, timestamp, start,
                            stream_time, "dropped a record for a closed window");
                        continue;
                    }
                    // The value goes to the last window; the others get a clone.
                    let v = if starts.peek().is_some() {
                        value.clone()
                    } else {
                        value.take()
                    };
                    let Some(v) = v else { continue };
                    let agg = aggregate_step(
                        &store,
                        window_key(&key_bytes, start),
                        (offset, timestamp),
                        (name, topic),
                        (values, decode),
                        |old| aggregator(&key, v, old.unwrap_or_else(init)),
                    )
                    .await?;
                    if on_close.is_none() {
                        out.push(Record {
                            key: Some(Windowed {
                                key: key.clone(),
                                start,
                                end: start.saturating_add(windows.size_ms),
                            }),
                            value: agg,
                            timestamp,
                            headers: headers.clone(),
                            partition: partition.clone(),
                            offset,
                        });
                    }
                }
                let mut expire_up_to = i64::MAX;
                if let Some(key_decode) = on_close {
                    // The latest start of a closed window.
                    let cutoff = stream_time
                        .saturating_sub(windows.size_ms)
                        .saturating_sub(windows.grace_ms);
                    let (closed, emitted_before) =
                        store.close_windows(cutoff, offset, timestamp).await?;
                    expire_up_to = emitted_before;
                    for (store_key, bytes) in closed {
                        let Some(start) = super::state::window_start(&store_key) else {
                            continue;
                        };
                        let key_bytes = store_key.slice(..store_key.len() - 8);
                        let window_key = key_decode.deserialize(topic, &key_bytes)?;
                        out.push(Record {
                            key: Some(Windowed {
                                key: window_key,
                                start,
                                end: start.saturating_add(windows.size_ms),
                            }),
                            value: decode.deserialize(topic, &bytes)?,
                            timestamp,
                            headers: headers.clone(),
                            partition: partition.clone(),
                            offset,
                        });
                    }
                }
                store
                    .expire_windows(stream_time, timestamp, expire_up_to)
                    .await?;
                Ok(out)
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
        let starts = |w: TimeWindows, ts| w.starts_of(ts).collect::<Vec<i64>>();
        assert_eq!(starts(w, 0), [0]);
        assert_eq!(starts(w, 9_999), [0]);
        assert_eq!(starts(w, 10_000), [10_000]);
        assert_eq!(starts(w, -1), [-10_000]);
        let hop = w.advance_by(Duration::from_secs(4));
        assert_eq!(starts(hop, 0), [-8_000, -4_000, 0]);
        assert_eq!(starts(hop, 9_999), [0, 4_000, 8_000]);
        assert_eq!(starts(hop, 12_000), [4_000, 8_000, 12_000]);
        assert_eq!(starts(hop, 12_001), [4_000, 8_000, 12_000]);
        assert_eq!(starts(hop, 14_000), [8_000, 12_000]);
        let five = w.advance_by(Duration::from_secs(5));
        assert_eq!(starts(five, 10_000), [5_000, 10_000]);
        assert_eq!(
            starts(w.advance_by(Duration::from_secs(60)), 12_000),
            [10_000]
        );
        assert_eq!(w.min_retention_ms(), 15_000);
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
