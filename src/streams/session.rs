//! Session windows (Kafka Streams' `SessionWindows`, KIP-633 for the
//! grace period): `group_by_key().session_windowed_by(w)` then `count` or
//! `aggregate` per key and session, into a session store (see
//! [`WindowStore::sessions`](super::state::WindowStore::sessions)).
//!
//! A session is `[start, end]` (both inclusive, the timestamps of its
//! first and last record). A record at `ts` opens the session `[ts, ts]`
//! and merges with every session of its key that ends at `ts - gap` or
//! later and starts at `ts + gap` or earlier: the merged session spans
//! them all, its aggregate is the sessions' aggregates combined by the
//! merger, then the record's value aggregated in. When the merge changes
//! a session's window, each session merged away is deleted from the store
//! and the changelog and emitted as a tombstone (a `None` value for its
//! old window), before the merged session's new value is emitted (Kafka
//! Streams' forwarding with the record cache off). Records are emitted
//! with the session's end as timestamp.
//!
//! Stream time is the highest timestamp the stage has seen on the
//! partition since its store opened. A record whose merged session ends
//! before `stream time - grace - gap` is late: dropped and counted
//! (`RunningStreams::dropped_late_records`). A session is deleted once
//! stream time reaches its end plus the store's retention (its
//! [`StoreSpec::with_retention`], at least and by default `gap + grace`).
//! Timestamps are taken as non-negative (a store orders them as unsigned
//! bytes, as Kafka Streams' stores do). Session aggregations are not
//! cached and have no emit-on-close yet; a record run again in place
//! (`FailurePolicy::Retry`) that the store already applied is not applied
//! twice and emits its session's current value.

use std::sync::Arc;
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};

use super::error::ProcessingError;
use super::serdes::Deserializer;
use super::state::{changelog_topic, QueryCodec, StoreSpec, Stores, Write};
use super::stateful::{GroupedStream, LongSerde, Table};
use super::topology::{Pipeline, Record};
use super::windowed::Windowed;
use crate::error::Result;
use crate::producer::Serializer;

/// Session windows: a key's records at most `gap` apart are one session,
/// which accepts records up to `grace` (in stream time) after it could
/// last have been extended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SessionWindows {
    gap_ms: i64,
    grace_ms: i64,
}

impl SessionWindows {
    /// Sessions closed by `gap` (at least 1 ms) of inactivity, with no
    /// grace (Kafka Streams' `ofInactivityGapWithNoGrace`).
    pub fn with_inactivity_gap(gap: Duration) -> SessionWindows {
        SessionWindows {
            gap_ms: ms(gap).max(1),
            grace_ms: 0,
        }
    }

    /// Accepts records up to `grace` late (Kafka Streams'
    /// `ofInactivityGapAndGrace`).
    pub fn grace(mut self, grace: Duration) -> SessionWindows {
        self.grace_ms = ms(grace);
        self
    }

    /// The inactivity gap, ms.
    pub fn gap_ms(&self) -> i64 {
        self.gap_ms
    }

    /// The grace period, ms.
    pub fn grace_ms(&self) -> i64 {
        self.grace_ms
    }
}

fn ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// The store key of `key`'s session `[start, end]`: the key's bytes, then
/// end and start as 8 bytes big endian each (Kafka Streams' session key
/// layout, also the changelog's key).
fn session_key(key: &[u8], start: i64, end: i64) -> Bytes {
    let mut b = BytesMut::with_capacity(key.len() + 16);
    b.put_slice(key);
    b.put_i64(end);
    b.put_i64(start);
    b.freeze()
}

/// The `(start, end)` of a store key that is a session of the key
/// `key_len` bytes long, if it is one.
fn session_of(store_key: &[u8], key_len: usize) -> Option<(i64, i64)> {
    if store_key.len() != key_len.checked_add(16)? {
        return None;
    }
    let at = |i: usize| -> Option<i64> {
        Some(i64::from_be_bytes(
            store_key.get(i..i + 8)?.try_into().ok()?,
        ))
    };
    let (end, start) = (at(key_len)?, at(key_len + 8)?);
    Some((start, end))
}

/// Serializes a session [`Windowed`] key as Kafka Streams'
/// `SessionWindowedSerializer` does: the key's bytes (by the inner
/// serializer), then the session's end and start, 8 bytes big endian each.
#[derive(Debug, Clone, Copy, Default)]
pub struct SessionWindowedSerializer<KS>(pub KS);

impl<K, KS: Serializer<K>> Serializer<Windowed<K>> for SessionWindowedSerializer<KS> {
    fn serialize(&self, topic: &str, data: &Windowed<K>) -> Result<Bytes> {
        Ok(session_key(
            &self.0.serialize(topic, &data.key)?,
            data.start,
            data.end,
        ))
    }
}

/// What a record does to its key's sessions (the pure part of the
/// stage): the sessions found near `ts` (start, end), in any order.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Merge {
    /// The merged session ends before the close time: drop the record.
    Late { start: i64, end: i64 },
    /// The merged session, and the sessions to delete first (all found
    /// ones when the merge changes a window, else none).
    Into {
        start: i64,
        end: i64,
        removed: Vec<(i64, i64)>,
    },
}

/// Kafka Streams' session rule for a record at `ts` given the key's
/// sessions `found` that it touches, at `close` (stream time - grace -
/// gap).
fn merge(ts: i64, found: &[(i64, i64)], close: i64) -> Merge {
    let start = found.iter().map(|s| s.0).fold(ts, i64::min);
    let end = found.iter().map(|s| s.1).fold(ts, i64::max);
    if end < close {
        return Merge::Late { start, end };
    }
    let removed = if (start, end) == (ts, ts) {
        Vec::new()
    } else {
        found.to_vec()
    };
    Merge::Into {
        start,
        end,
        removed,
    }
}

/// A grouped stream cut into sessions; see
/// [`GroupedStream::session_windowed_by`].
pub struct SessionWindowedStream<K, V> {
    pipeline: Pipeline<K, V>,
    windows: SessionWindows,
}

impl<K: Send + Sync + 'static, V: Send + 'static> GroupedStream<K, V> {
    /// Aggregates per key and session (Kafka Streams'
    /// `windowedBy(SessionWindows)`).
    pub fn session_windowed_by(self, windows: SessionWindows) -> SessionWindowedStream<K, V> {
        SessionWindowedStream {
            pipeline: self.into_pipeline(),
            windows,
        }
    }
}

/// What the stage emits for one record.
enum Outcome<A> {
    Late,
    /// Run again in place: the session holding the record, as stored.
    Rerun(Option<(i64, i64, Bytes)>),
    Merged {
        removed: Vec<(i64, i64)>,
        start: i64,
        end: i64,
        agg: A,
    },
}

/// Session aggregations clone the key into each emitted record.
impl<K: Clone + Send + Sync + 'static, V: Send + 'static> SessionWindowedStream<K, V> {
    /// Counts the records per key and session (keys serialized by
    /// `keys`). Each update is `Some(count)`; a session merged into
    /// another is `None` for its old window.
    pub fn count<KS>(self, store: StoreSpec, keys: KS) -> Table<Windowed<K>, Option<i64>>
    where
        KS: Serializer<K> + Send + Sync + 'static,
    {
        self.aggregate(
            store,
            keys,
            LongSerde,
            LongSerde,
            || 0,
            |_, _, n| n + 1,
            |_, a, b| a + b,
        )
    }

    /// Folds the values of each key's sessions: `init()` for a new
    /// session, `aggregator(key, value, aggregate)` per record and
    /// `merger(key, a, b)` when sessions merge. Aggregates are kept as
    /// `values` serializes them and read back with `decode`. Each update
    /// is `Some(aggregate)` for the session's window; a session merged
    /// into another is `None` for its old window.
    #[allow(clippy::too_many_arguments)]
    pub fn aggregate<A, KS, AS, AD, I, F, M>(
        self,
        spec: StoreSpec,
        keys: KS,
        values: AS,
        decode: AD,
        init: I,
        aggregator: F,
        merger: M,
    ) -> Table<Windowed<K>, Option<A>>
    where
        A: Send + 'static,
        KS: Serializer<K> + Send + Sync + 'static,
        AS: Serializer<A> + Send + Sync + 'static,
        AD: Deserializer<Output = A>,
        I: Fn() -> A + Send + Sync + 'static,
        F: Fn(&K, V, A) -> A + Send + Sync + 'static,
        M: Fn(&K, A, A) -> A + Send + Sync + 'static,
    {
        let stores: Stores = self.pipeline.stores();
        let name = spec.name().to_owned();
        let topic: Arc<str> = changelog_topic(&self.pipeline.application_id(), &name).into();
        let windows = self.windows;
        let retention = spec
            .retention_ms()
            .unwrap_or(0)
            .max(windows.gap_ms.saturating_add(windows.grace_ms));
        stores.register(spec.sessioned(retention));
        let serdes = Arc::new((keys, decode));
        let (query, query_topic) = (serdes.clone(), topic.clone());
        let codec = QueryCodec::<Windowed<K>, A> {
            key: Box::new({
                let (query, topic) = (query.clone(), query_topic.clone());
                move |w: &Windowed<K>| -> Result<Bytes> {
                    Ok(session_key(
                        &query.0.serialize(&topic, &w.key)?,
                        w.start,
                        w.end,
                    ))
                }
            }),
            value: Box::new(move |b: &Bytes| query.1.deserialize(&query_topic, b)),
        };
        stores.register_codec(&name, Arc::new(codec));
        let stage = Arc::new((
            serdes,
            values,
            init,
            aggregator,
            merger,
            (name.clone(), topic),
        ));
        let updates = self.pipeline.flat_map_async(move |r: Record<K, V>| {
            let (stage, stores) = (stage.clone(), stores.clone());
            async move {
                let (serdes, values, init, aggregator, merger, (name, topic)) = &*stage;
                let (keys, decode) = &**serdes;
                let Some(key) = r.key else {
                    return Ok(Vec::new());
                };
                let store = stores.task_store(name, &r.partition).await?;
                let ts = r.timestamp;
                let stream_time = store.observe(ts);
                let close = stream_time
                    .saturating_sub(windows.grace_ms)
                    .saturating_sub(windows.gap_ms);
                let key_bytes = keys.serialize(topic, &key)?;
                // Every session of the key ending at ts - gap or later
                // (the scan also meets longer keys this key prefixes: they
                // are skipped by length).
                let from = session_key(&key_bytes, 0, ts.saturating_sub(windows.gap_ms).max(0));
                let mut to = BytesMut::with_capacity(key_bytes.len() + 16);
                to.put_slice(&key_bytes);
                to.put_bytes(0xff, 16);
                let latest_start = ts.saturating_add(windows.gap_ms);
                let value = r.value;
                let outcome = store
                    .rewrite((&from, &to), (r.offset, &key_bytes), |entries, rerun| {
                        let found: Vec<(i64, i64, Bytes)> = entries
                            .into_iter()
                            .filter_map(|(k, v)| {
                                let (s, e) = session_of(&k, key_bytes.len())?;
                                (s <= latest_start).then_some((s, e, v))
                            })
                            .collect();
                        if rerun {
                            let holding = found.into_iter().find(|(s, e, _)| *s <= ts && ts <= *e);
                            return Ok((Vec::new(), Outcome::Rerun(holding)));
                        }
                        let windows: Vec<(i64, i64)> =
                            found.iter().map(|(s, e, _)| (*s, *e)).collect();
                        let (start, end, removed) = match merge(ts, &windows, close) {
                            Merge::Late { .. } => return Ok((Vec::new(), Outcome::Late)),
                            Merge::Into {
                                start,
                                end,
                                removed,
                            } => (start, end, removed),
                        };
                        let mut agg = init();
                        for (_, _, bytes) in &found {
                            agg = merger(&key, agg, decode.deserialize(topic, bytes)?);
                        }
                        let agg = aggregator(&key, value, agg);
                        let mut writes: Vec<Write> = removed
                            .iter()
                            .map(|(s, e)| (session_key(&key_bytes, *s, *e), None, *e))
                            .collect();
                        writes.push((
                            session_key(&key_bytes, start, end),
                            Some(values.serialize(topic, &agg)?),
                            end,
                        ));
                        Ok::<_, ProcessingError>((
                            writes,
                            Outcome::Merged {
                                removed,
                                start,
                                end,
                                agg,
                            },
                        ))
                    })
                    .await?;
                let emit = |start: i64, end: i64, value: Option<A>| Record {
                    key: Some(Windowed {
                        key: key.clone(),
                        start,
                        end,
                    }),
                    value,
                    timestamp: end,
                    headers: r.headers.clone(),
                    partition: r.partition.clone(),
                    offset: r.offset,
                };
                let out = match outcome {
                    Outcome::Late => {
                        stores.count_late();
                        tracing::debug!(store = %name, partition = %r.partition, offset = r.offset,
                            timestamp = ts, stream_time, "dropped a record for a closed session");
                        Vec::new()
                    }
                    Outcome::Rerun(None) => Vec::new(),
                    Outcome::Rerun(Some((start, end, bytes))) => {
                        vec![emit(start, end, Some(decode.deserialize(topic, &bytes)?))]
                    }
                    Outcome::Merged {
                        removed,
                        start,
                        end,
                        agg,
                    } => {
                        let mut out: Vec<_> =
                            removed.iter().map(|(s, e)| emit(*s, *e, None)).collect();
                        out.push(emit(start, end, Some(agg)));
                        out
                    }
                };
                store.expire_windows(stream_time, ts, i64::MAX).await?;
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
    fn records_merge_sessions_they_touch_and_late_ones_are_dropped() {
        // Alone: a new session [ts, ts], nothing removed.
        assert_eq!(
            merge(100, &[], 0),
            Merge::Into {
                start: 100,
                end: 100,
                removed: vec![]
            }
        );
        // Extends a session: the old window is removed.
        assert_eq!(
            merge(130, &[(90, 110)], 0),
            Merge::Into {
                start: 90,
                end: 130,
                removed: vec![(90, 110)]
            }
        );
        // Bridges two sessions into one.
        assert_eq!(
            merge(120, &[(90, 110), (125, 140)], 0),
            Merge::Into {
                start: 90,
                end: 140,
                removed: vec![(90, 110), (125, 140)]
            }
        );
        // Inside a session: the window is the same but is rewritten
        // (Kafka Streams removes and puts it again).
        assert_eq!(
            merge(100, &[(90, 110)], 0),
            Merge::Into {
                start: 90,
                end: 110,
                removed: vec![(90, 110)]
            }
        );
        // The same single-record session: no removal.
        assert_eq!(
            merge(100, &[(100, 100)], 0),
            Merge::Into {
                start: 100,
                end: 100,
                removed: vec![]
            }
        );
        // Late: the merged session ends before the close time.
        assert_eq!(
            merge(50, &[(40, 60)], 61),
            Merge::Late { start: 40, end: 60 }
        );
        assert!(matches!(merge(50, &[(40, 60)], 60), Merge::Into { .. }));
    }

    #[test]
    fn session_keys_are_key_end_start_and_read_back_by_key_length() {
        let k = session_key(b"ab", 258, 513);
        assert_eq!(&k[..], b"ab\0\0\0\0\0\0\x02\x01\0\0\0\0\0\0\x01\x02");
        assert_eq!(session_of(&k, 2), Some((258, 513)));
        assert_eq!(session_of(&k, 3), None, "a longer key's session");
        let w = Windowed {
            key: "ab".to_owned(),
            start: 258,
            end: 513,
        };
        let s = SessionWindowedSerializer(crate::producer::serializer::StringSerializer);
        assert_eq!(s.serialize("t", &w).unwrap(), k);
        let sw = SessionWindows::with_inactivity_gap(Duration::from_secs(5))
            .grace(Duration::from_secs(2));
        assert_eq!((sw.gap_ms(), sw.grace_ms()), (5_000, 2_000));
        assert_eq!(
            SessionWindows::with_inactivity_gap(Duration::ZERO).gap_ms(),
            1
        );
    }
}
