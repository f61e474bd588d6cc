//! The parallel retry lane (opt-in): a failed record goes to a retry topic
//! with its attempt count, due time, origin and error in headers (see
//! [`crate::streams::retry`]), and the main lane moves on. A secondary
//! worker, a second consumer in the group `<application.id>-retry-lane`,
//! holds fetched retry records in a min-heap by due time (bounded: beyond
//! `max_held` it pauses fetching), retries each when due without blocking
//! the others, re-queues with attempt+1, and after the last attempt writes
//! to the dead-letter topic. Its own offsets are committed by
//! [`CommitWatermark`]s, so a record is never committed before it is done.
//!
//! The lane gives up ordering (a retried record lands after later ones)
//! and exactly-once (the hand-off and the retry are separate writes); the
//! configuration refuses it with exactly-once.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::sync::atomic::Ordering as AtomicOrdering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tracing::warn;

use super::{attempt_once, Shared};
use crate::clock::now_ms;
use crate::consumer::{Consumer, ConsumerRecord, OffsetAndMetadata, Offsets, RebalanceListener};
use crate::streams::config::RetryLane;
use crate::streams::metrics::bump;
use crate::streams::retry::{dead_letter, header_value, origin, to_retry_topic, DUE};
use crate::streams::watermark::CommitWatermark;
use crate::TopicPartition;

/// The lane's tasks: a watermark per retry-topic partition.
#[derive(Default)]
struct LaneCore {
    tasks: HashMap<TopicPartition, (u64, CommitWatermark)>,
    generation: u64,
    in_flight: usize,
}

type Core = Arc<Mutex<LaneCore>>;

fn lock(core: &Core) -> std::sync::MutexGuard<'_, LaneCore> {
    core.lock().unwrap_or_else(|p| p.into_inner())
}

fn committable(core: &Core, only: Option<&[TopicPartition]>) -> Offsets {
    lock(core)
        .tasks
        .iter()
        .filter(|(tp, _)| only.is_none_or(|o| o.contains(tp)))
        .filter_map(|(tp, (_, w))| Some((tp.clone(), OffsetAndMetadata::new(w.committable()?))))
        .collect()
}

struct LaneListener(Core);

#[async_trait::async_trait]
impl RebalanceListener for LaneListener {
    async fn on_revoked(&self, consumer: &Consumer, partitions: &[TopicPartition]) {
        let offsets = committable(&self.0, Some(partitions));
        if !offsets.is_empty() {
            if let Err(e) = consumer.commit_sync_offsets(offsets).await {
                warn!(error = %e, "retry lane: commit on revoke failed");
            }
        }
        let mut core = lock(&self.0);
        for tp in partitions {
            core.tasks.remove(tp);
        }
    }

    async fn on_lost(&self, _: &Consumer, partitions: &[TopicPartition]) {
        let mut core = lock(&self.0);
        for tp in partitions {
            core.tasks.remove(tp);
        }
    }
}

/// A held retry record, ordered by due time.
type Held = Reverse<(i64, u64)>;

/// Runs the lane until the application stops.
pub(crate) async fn run_lane(shared: Arc<Shared>, lane: RetryLane) {
    if let Err(e) = lane_loop(&shared, &lane).await {
        warn!(error = %e, "retry lane stopped");
    }
}

async fn lane_loop(shared: &Arc<Shared>, lane: &RetryLane) -> crate::Result<()> {
    let c = &shared.config;
    // A second member of its own group, on the main consumer's cluster.
    let consumer = Consumer::with_cluster(
        shared.consumer.cluster().clone(),
        super::clients::lane_consumer_config(c)?,
    );
    let core: Core = Arc::default();
    consumer.set_rebalance_listener(LaneListener(core.clone()));
    consumer.subscribe([lane.retry_topic.clone()])?;
    let mut heap: BinaryHeap<Held> = BinaryHeap::new();
    let mut held: HashMap<u64, (u64, ConsumerRecord)> = HashMap::new();
    let mut seq = 0u64;
    let mut paused = false;
    let mut next_commit = tokio::time::Instant::now() + c.commit_interval;
    while !shared.stopping.load(AtomicOrdering::Acquire) {
        let wait = heap
            .peek()
            .map_or(100, |Reverse((due, _))| (due - now_ms()).clamp(1, 100));
        let records = match consumer.poll(Duration::from_millis(wait as u64)).await {
            Ok(r) => r,
            Err(crate::Error::Closed) => break,
            Err(e) => {
                warn!(error = %e, "retry lane: poll failed; retrying");
                Vec::new()
            }
        };
        {
            let mut core_guard = lock(&core);
            let core = &mut *core_guard;
            for r in records {
                if !core.tasks.contains_key(&r.partition) {
                    core.generation += 1;
                    let g = core.generation;
                    core.tasks
                        .insert(r.partition.clone(), (g, CommitWatermark::new()));
                }
                let (generation, w) = core.tasks.get_mut(&r.partition).expect("inserted");
                if w.register(r.offset) {
                    let due = header_value(&r, DUE)
                        .and_then(|d| d.parse().ok())
                        .unwrap_or(0);
                    seq += 1;
                    heap.push(Reverse((due, seq)));
                    held.insert(seq, (*generation, r));
                }
            }
        }
        let now = now_ms();
        while let Some(Reverse((due, id))) = heap.peek().copied() {
            if due > now {
                break;
            }
            heap.pop();
            if let Some((generation, r)) = held.remove(&id) {
                lock(&core).in_flight += 1;
                tokio::spawn(retry_one(
                    shared.clone(),
                    lane.clone(),
                    core.clone(),
                    generation,
                    r,
                ));
            }
        }
        shared
            .counters
            .retry_lane_held
            .store(held.len() as u64, AtomicOrdering::Relaxed);
        let assignment = consumer.assignment();
        if !paused && held.len() >= lane.max_held {
            paused = consumer.pause(&assignment).is_ok();
        } else if paused && held.len() < lane.max_held / 2 {
            paused = consumer.resume(&assignment).is_err();
        }
        if tokio::time::Instant::now() >= next_commit {
            let offsets = committable(&core, None);
            if !offsets.is_empty() {
                consumer
                    .commit_async_offsets(offsets, |r| {
                        if let Err(e) = r {
                            warn!(error = %e, "retry lane: commit failed");
                        }
                    })
                    .await;
            }
            next_commit = tokio::time::Instant::now() + c.commit_interval;
        }
    }
    // Records not due yet stay uncommitted and are read again next time.
    let deadline = tokio::time::Instant::now() + c.drain_timeout;
    while lock(&core).in_flight > 0 && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let offsets = committable(&core, None);
    if !offsets.is_empty() {
        consumer.commit_sync_offsets(offsets).await?;
    }
    consumer.close().await
}

async fn retry_one(
    shared: Arc<Shared>,
    lane: RetryLane,
    core: Core,
    generation: u64,
    r: ConsumerRecord,
) {
    let done = match origin(&r) {
        None => {
            warn!(partition = %r.partition, offset = r.offset, "retry lane: record without origin headers; skipped");
            true
        }
        Some((input, attempts)) => {
            match attempt_once(&shared.processor, &shared.producer, input.clone()).await {
                Ok(()) => {
                    bump(&shared.counters.retry_lane_succeeded);
                    true
                }
                Err(e) => {
                    let attempts = attempts + 1;
                    let next = if attempts >= lane.backoff.max_attempts {
                        dead_letter(&lane, &input, attempts, e.message())
                    } else {
                        let due = now_ms() + lane.backoff.delay(attempts).as_millis() as i64;
                        to_retry_topic(&lane, &input, attempts, due, &e)
                    };
                    let dlq = attempts >= lane.backoff.max_attempts;
                    match shared.producer.send(next).await {
                        Ok(d) => match d.await {
                            Ok(_) => {
                                bump(if dlq {
                                    &shared.counters.dead_lettered
                                } else {
                                    &shared.counters.retry_lane_requeued
                                });
                                true
                            }
                            Err(e) => {
                                warn!(error = %e, "retry lane: re-queue failed");
                                false
                            }
                        },
                        Err(e) => {
                            warn!(error = %e, "retry lane: re-queue failed");
                            false
                        }
                    }
                }
            }
        }
    };
    let mut core = lock(&core);
    core.in_flight -= 1;
    if done {
        if let Some((g, w)) = core.tasks.get_mut(&r.partition) {
            if *g == generation {
                w.complete(r.offset);
            }
        }
    }
}
