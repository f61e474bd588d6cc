//! One sender task per broker (a "sink", as franz-go calls it) and the
//! metadata watcher that routes partitions to sinks.
//!
//! A sink drains ready batches of the partitions its broker leads into
//! Produce requests (<https://kafka.apache.org/protocol#The_Messages_Produce>),
//! at most one batch per partition per request and at most
//! `max.in.flight.requests.per.connection` requests at once on its produce
//! connection. Each response is handled by the task that sent the request,
//! so a slow broker never holds up another broker's sink.
//!
//! The sink's own state (request slots, quota throttle, rotation) is the
//! state machine in [`state`]; each partition's is the accumulator's.

mod state;

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::messages::{ProduceRequest, ProduceResponse};
use tokio::sync::Notify;
use tokio::time::Instant;

use super::accumulator::{BatchOutcome, Drained, PartitionQueue, Verdict};
use super::Shared;
use crate::error::{Error, KafkaCode};
use crate::net::{PendingResponse, Workload};
use crate::protocol::frame::{self, ProduceHeader, ProduceTopic};
use crate::protocol::versions::Versions;
use crate::TopicPartition;
use state::{SinkState, Step};

/// Produce v3 is the first with record batch v2; v13 addresses topics by id.
const PRODUCE_VERSIONS: Versions = Versions::new(3, 12);

/// Starts `broker`'s sink if it is not running, and wakes it.
pub(crate) fn wake(shared: &Arc<Shared>, broker: i32) {
    if broker < 0 {
        return;
    }
    let mut sinks = shared.sinks.lock().unwrap_or_else(|p| p.into_inner());
    let notify = sinks.entry(broker).or_insert_with(|| {
        let notify = Arc::new(Notify::new());
        let span = tracing::debug_span!("producer sink", broker);
        tokio::spawn(tracing::Instrument::instrument(
            run_sink(shared.clone(), broker, notify.clone()),
            span,
        ));
        notify
    });
    notify.notify_one();
}

/// Starts the task that compresses `queue`'s batches closed at
/// `batch.max.size` ([`Accumulator::seal_closed`]), off the sender's
/// thread, a batch per turn: it wakes the partition's sink after each
/// batch and yields its thread between them.
///
/// [`Accumulator::seal_closed`]: super::accumulator::Accumulator::seal_closed
pub(crate) fn spawn_sealer(shared: &Arc<Shared>, queue: Arc<PartitionQueue>) {
    let shared = shared.clone();
    tokio::spawn(async move {
        while shared.acc.seal_closed(&queue) {
            wake(&shared, queue.leader.load(Ordering::Acquire));
            tokio::task::yield_now().await;
        }
    });
}

/// Wakes every running sink (after an epoch bump or on shutdown).
pub(crate) fn wake_all(shared: &Arc<Shared>) {
    let sinks = shared.sinks.lock().unwrap_or_else(|p| p.into_inner());
    for notify in sinks.values() {
        notify.notify_one();
    }
}

/// Gives a request's slot back when dropped, even if a completion callback
/// run while handling its answer panics.
struct Slot(Arc<Mutex<SinkState>>);

impl Drop for Slot {
    fn drop(&mut self) {
        lock(&self.0).on_done();
    }
}

fn lock(state: &Mutex<SinkState>) -> std::sync::MutexGuard<'_, SinkState> {
    state.lock().unwrap_or_else(|p| p.into_inner())
}

/// The thin task around one broker's [`SinkState`].
async fn run_sink(shared: Arc<Shared>, broker: i32, wake_me: Arc<Notify>) {
    let state = Arc::new(Mutex::new(SinkState::new(shared.config.max_in_flight)));
    loop {
        let step = lock(&state).on_wake(Instant::now());
        let start = match step {
            Step::Throttled(until) => {
                tokio::time::sleep_until(until).await;
                continue;
            }
            Step::Full => {
                wake_me.notified().await;
                continue;
            }
            Step::Drain { start } => start,
        };
        let slot = Slot(state.clone());
        let producer = shared.producer_ids().map(|i| i.current());
        let urgent = shared.acc.memory.waiters.load(Ordering::Acquire) > 0 || shared.is_closing();
        let gate = shared
            .txn
            .as_ref()
            .map(|t| move |tp: &TopicPartition| t.can_send(tp));
        let drained = shared.acc.drain(
            broker,
            shared.config.max_request_size,
            producer,
            urgent,
            start,
            gate.as_ref().map(|g| g as &dyn Fn(&TopicPartition) -> bool),
        );
        let next_wake = drained.next_wake;
        for queue in drained.sealers {
            spawn_sealer(&shared, queue);
        }
        shared.fail_expired(drained.expired, drained.bump);
        if drained.batches.is_empty() {
            drop(slot);
            if shared.is_closing() && shared.acc.outstanding() == 0 {
                let mut sinks = shared.sinks.lock().unwrap_or_else(|p| p.into_inner());
                sinks.remove(&broker);
                return;
            }
            let until = lock(&state).idle_until(Instant::now(), next_wake, shared.is_closing());
            match until {
                Some(t) => {
                    tokio::select! {
                        _ = wake_me.notified() => {}
                        _ = tokio::time::sleep_until(t) => {}
                    }
                }
                None => wake_me.notified().await,
            }
            continue;
        }
        // Queue the request here, in drain order: the connection writes
        // requests in the order they are queued, and idempotent batches of a
        // partition must reach the broker in sequence order. Only the wait
        // for the response runs in its own task.
        let started = Instant::now();
        let sent = produce(&shared, broker, &drained.batches).await;
        let shared = shared.clone();
        let wake_me = wake_me.clone();
        tokio::spawn(async move {
            let outcomes = match sent {
                Sent::Pending(response, broker_name) => match response.wait().await {
                    Ok(resp) => {
                        if resp.throttle_time_ms > 0 {
                            let time =
                                Duration::from_millis(resp.throttle_time_ms.unsigned_abs().into());
                            shared.metrics.throttled(time);
                            lock(&slot.0).on_throttle(Instant::now(), time);
                        }
                        match_response(&resp, &drained.batches, &broker_name)
                    }
                    Err(e) => all_failed(&drained.batches, &e),
                },
                Sent::Done(outcomes) => outcomes,
            };
            shared.metrics.request_done(started.elapsed());
            // Partitions whose leader moved while this request was out: the
            // new leader's sink holds their later batches back until this
            // outcome is known (sequence order), and nothing else wakes it.
            let mut moved: Vec<i32> = Vec::new();
            for (d, outcome) in drained.batches.into_iter().zip(outcomes) {
                let leader = d.queue.leader.load(Ordering::Acquire);
                on_outcome(&shared, d, outcome);
                if leader != broker && leader >= 0 && !moved.contains(&leader) {
                    moved.push(leader);
                }
            }
            drop(slot);
            wake_me.notify_one();
            for leader in moved {
                wake(&shared, leader);
            }
        });
    }
}

/// A Produce request on its way: queued with a response to await, or
/// already settled (acks=0, or it could not be queued).
enum Sent {
    Pending(PendingResponse<ProduceRequest>, String),
    Done(Vec<BatchOutcome>),
}

fn all_failed(batches: &[Drained], e: &Error) -> Vec<BatchOutcome> {
    batches.iter().map(|_| Err(e.clone())).collect()
}

/// Builds the Produce request for `batches` and queues it on the broker's
/// produce connection.
async fn produce(shared: &Shared, broker: i32, batches: &[Drained]) -> Sent {
    let addr = match shared.cluster.broker(broker) {
        Ok(addr) => addr,
        Err(e) => return Sent::Done(all_failed(batches, &e)),
    };
    let mut topics: BTreeMap<&str, Vec<(i32, Bytes)>> = BTreeMap::new();
    for d in batches {
        topics
            .entry(&d.queue.tp.topic)
            .or_default()
            .push((d.queue.tp.partition, d.data.clone()));
    }
    let topics: Vec<ProduceTopic<'_>> = topics
        .into_iter()
        .map(|(name, partitions)| ProduceTopic { name, partitions })
        .collect();
    let cfg = &shared.config;
    let header = ProduceHeader {
        transactional_id: shared.txn.as_ref().map(|t| t.id.as_str()),
        acks: cfg.acks.wire(),
        timeout_ms: cfg.client.request_timeout.as_millis().min(i32::MAX as u128) as i32,
    };
    // Produce v12 in a transaction means transactions v2 (KIP-890).
    let versions = match &shared.txn {
        Some(t) if !t.is_v2() => Versions::new(PRODUCE_VERSIONS.min, 11),
        _ => PRODUCE_VERSIONS,
    };
    let conn = match shared.cluster.connection(&addr, Workload::Produce).await {
        Ok(conn) => conn,
        Err(e) => return Sent::Done(all_failed(batches, &e)),
    };
    let version = match conn.version_for::<ProduceRequest>(versions) {
        Ok(v) => v,
        Err(e) => return Sent::Done(all_failed(batches, &e)),
    };
    // The batches are chunks of the body, not copies (frame::encode_produce).
    let body = match frame::encode_produce(version, header, &topics) {
        Ok(body) => body,
        Err(source) => {
            let e = Error::Protocol {
                broker: conn.origin().clone(),
                api: format!("Produce v{version}"),
                source,
            };
            return Sent::Done(all_failed(batches, &e));
        }
    };
    if cfg.acks.wire() == 0 {
        return Sent::Done(
            match conn.send_no_response::<ProduceRequest>(body, version).await {
                Ok(()) => batches.iter().map(|_| Ok((-1, -1))).collect(),
                Err(e) => all_failed(batches, &e),
            },
        );
    }
    match conn.enqueue_encoded(body, version).await {
        Ok(pending) => Sent::Pending(pending, conn.broker().to_owned()),
        Err(e) => Sent::Done(all_failed(batches, &e)),
    }
}

fn match_response(resp: &ProduceResponse, batches: &[Drained], broker: &str) -> Vec<BatchOutcome> {
    batches
        .iter()
        .map(|d| {
            let tp = &d.queue.tp;
            let found = resp
                .responses
                .iter()
                .filter(|t| *t.name.0 == *tp.topic)
                .flat_map(|t| t.partition_responses.iter())
                .find(|p| p.index == tp.partition);
            let Some(p) = found else {
                return Err(Error::Kafka {
                    code: KafkaCode::from_code(-1).unwrap_or(KafkaCode::UNKNOWN_PRODUCER_ID),
                    context: format!(
                        "Produce to {tp} on {broker}: the response omits the partition"
                    ),
                });
            };
            if p.error_code == KafkaCode::DUPLICATE_SEQUENCE_NUMBER.code() {
                // Already written by an earlier attempt; its offset is unknown.
                return Ok((-1, -1));
            }
            Error::check(p.error_code, || {
                let detail = match &p.error_message {
                    Some(m) => format!(" ({m})"),
                    None if p.error_code == KafkaCode::MESSAGE_TOO_LARGE.code() => {
                        " (larger than the topic's max.message.bytes)".to_owned()
                    }
                    None => String::new(),
                };
                format!("Produce to {tp} on {broker}{detail}")
            })?;
            Ok((p.base_offset, p.log_append_time_ms))
        })
        .collect()
}

/// Hands one batch's outcome to its partition's state machine and carries
/// out its verdict.
fn on_outcome(shared: &Arc<Shared>, drained: Drained, outcome: BatchOutcome) {
    // The request's handle on the batch goes first: a finished batch's
    // buffer is reused only when nothing else holds it.
    let Drained {
        queue,
        batch_id,
        data,
    } = drained;
    drop(data);
    let tp: &TopicPartition = &queue.tp;
    // As the Java client does, a lost connection also asks for metadata:
    // the broker may be gone and its partitions led elsewhere.
    if let Err(e) = &outcome {
        if e.invalidates_metadata() || e.kafka_code().is_none() {
            shared.cluster.request_refresh();
            shared.watcher.notify_one();
        }
    }
    let ids = shared.producer_ids();
    // The current id matters only for judging a refusal.
    let current = match &outcome {
        Err(_) => ids.and_then(|i| i.current()),
        Ok(_) => None,
    };
    let ctx = shared
        .acc
        .outcome_context(Instant::now(), current, ids.is_some());
    let verdict = queue.lock().on_outcome(tp, batch_id, outcome, &ctx);
    let m = &shared.metrics;
    match verdict {
        Verdict::Stale => {}
        Verdict::Acked { batch, result } => {
            m.records_sent
                .fetch_add(batch.count() as u64, Ordering::Relaxed);
            m.bytes_sent
                .fetch_add(batch.data.len() as u64, Ordering::Relaxed);
            m.batches_sent.fetch_add(1, Ordering::Relaxed);
            shared.acc.finish_batch(tp, batch, Ok(result));
        }
        Verdict::Split => {
            m.batch_splits.fetch_add(1, Ordering::Relaxed);
            tracing::debug!(partition = %tp, "batch too large for the broker; split in two");
        }
        Verdict::Retry {
            error,
            attempt,
            bump,
        } => {
            tracing::debug!(partition = %tp, error = %error, attempt, "retrying batch");
            m.retries.fetch_add(1, Ordering::Relaxed);
            if bump {
                shared.bump_epoch();
            }
        }
        Verdict::Failed {
            batch,
            error,
            cause,
            bump,
        } => {
            if let Some(txn) = &shared.txn {
                txn.batch_failed(&cause);
            }
            tracing::warn!(partition = %tp, error = %error, records = batch.count(), "batch failed");
            m.record_errors
                .fetch_add(batch.count() as u64, Ordering::Relaxed);
            shared.acc.finish_batch(tp, batch, Err(error));
            if bump {
                shared.bump_epoch();
            }
        }
    }
}

/// Follows metadata: sets every partition queue's leader from the newest
/// snapshot, wakes the sinks of partitions with data, asks for a refresh
/// while some partition holding records has no leader (its topic counts
/// as used, as the Java sender's unknown-leader topics do, so records
/// waiting keep it tracked or track it again), and expires what waits
/// there.
pub(crate) async fn run_watcher(shared: Arc<Shared>) {
    let tick = shared
        .config
        .client
        .retry_backoff
        .max(Duration::from_millis(10));
    let mut seen_generation = u64::MAX;
    loop {
        tokio::select! {
            _ = shared.watcher.notified() => {}
            _ = tokio::time::sleep(tick) => {}
        }
        if shared.is_closing() && shared.acc.outstanding() == 0 {
            wake_all(&shared);
            return;
        }
        let meta = shared.cluster.metadata();
        let mut leaderless = false;
        for q in shared.acc.queues() {
            if meta.generation != seen_generation {
                let leader = meta
                    .topics
                    .get(&*q.tp.topic)
                    .and_then(|t| t.partitions.iter().find(|p| p.partition == q.tp.partition))
                    .map_or(-1, |p| p.leader);
                let old = q.leader.swap(leader, Ordering::AcqRel);
                if old != leader {
                    tracing::debug!(partition = %q.tp, from = old, to = leader, "partition leader moved");
                    if leader >= 0 {
                        wake(&shared, leader);
                    }
                }
            }
            if q.leader.load(Ordering::Acquire) < 0 {
                let expired = shared.acc.expire_only(&q);
                shared.fail_expired(expired.expired, expired.bump);
                // An empty queue needs no leader: asking for one would
                // refresh forever for a topic no longer used.
                if q.lock().holds_records() {
                    leaderless = true;
                    shared.router.track(&shared.cluster, &q.tp.topic);
                }
            }
        }
        seen_generation = meta.generation;
        if leaderless {
            shared.cluster.request_refresh();
        }
    }
}
