//! Tasks (one per assigned partition): buffering polled records in
//! them, starting what the ordering mode and the in-flight limits allow
//! (the dispatcher), and the state the poll loop, the dispatcher and the
//! workers share (`worker` runs records; `process` runs one through the
//! topology under the failure policy).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering as AtomicOrdering};
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::{mpsc, Notify};
use tokio::time::Instant;

use super::slots::{Awaiting, Tasks};
use super::worker::{reserve, Job};
use super::Revoke;
use crate::consumer::{Consumer, ConsumerRecord};
use crate::error::Error;
use crate::producer::{DeliveryReceiver, Producer};
use crate::streams::config::StreamsConfig;
use crate::streams::error::{ProcessingError, StreamsError};
use crate::streams::metrics::{Counters, PartitionMetrics, StreamsMetrics};
use crate::streams::scheduler::{Flow, OrderingMode, TaskQueue};
use crate::streams::topology::Process;
use crate::streams::watermark::CommitWatermark;
use crate::TopicPartition;

/// One assigned partition.
pub(super) struct Task {
    pub(super) generation: u64,
    pub(super) queue: TaskQueue<ConsumerRecord>,
    pub(super) watermark: CommitWatermark,
    pub(super) revoked: bool,
    pub(super) committed: Option<i64>,
    /// Workers of this task free to take its next record (see the
    /// `worker` module docs).
    pub(super) runners: usize,
    /// Whether its last record waited (an async call): the dispatcher then
    /// starts every startable record at once, not one runner.
    pub(super) waits: bool,
    /// Records whose outputs are in the producer, not all acknowledged.
    pub(super) acking: usize,
    /// Exactly-once, while a transaction closes: the arrival number below
    /// which records must finish (and above which none starts) before the
    /// offsets go into the transaction; `u64::MAX` otherwise.
    pub(super) fence: u64,
}

/// The state the poll loop, the dispatcher and the workers share.
#[derive(Default)]
pub(super) struct Core {
    pub(super) tasks: Tasks<Task>,
    pub(super) in_flight: usize,
    pub(super) fatal: Option<StreamsError>,
    next_generation: u64,
    /// Set during a sync commit's offset commit round trip, and while a
    /// transaction commits: no record starts until it completes (neither
    /// the dispatcher nor the workers start the next).
    pub(super) hold: bool,
    /// Records dispatched since the last commit (exactly-once: is there a
    /// transaction to commit).
    pub(super) dispatched_since_commit: u64,
    /// Exactly-once, while a transaction closes (see `Task::fence`): a
    /// task made meanwhile starts nothing.
    pub(super) closing: bool,
    /// Drains and transaction closes waiting on `Shared::progress`: workers
    /// wake it only while one waits (an idle `Notify` still costs a lock
    /// per record).
    pub(super) watchers: usize,
    /// Records waiting for their outputs' acknowledgements.
    pub(super) awaiting: Awaiting,
}

impl Core {
    pub(super) fn task(&mut self, tp: &TopicPartition, ordering: OrderingMode) -> &mut Task {
        let (next_generation, closing) = (&mut self.next_generation, self.closing);
        let (_, task) = self.tasks.get_or_insert_with(tp, || {
            *next_generation += 1;
            Task {
                generation: *next_generation,
                queue: TaskQueue::new(ordering),
                watermark: CommitWatermark::new(),
                revoked: false,
                committed: None,
                runners: 0,
                waits: false,
                acking: 0,
                fence: if closing { 0 } else { u64::MAX },
            }
        });
        task
    }

    /// The task at index `i`, if it is still the one of `generation`.
    pub(super) fn task_at(&mut self, i: usize, generation: u64) -> Option<&mut Task> {
        self.tasks.at_mut(i).filter(|t| t.generation == generation)
    }

    /// Counts `n` settled outputs of record `tag` (with the first failure
    /// among them): once none is left, the record is settled (see
    /// [`Settled`]).
    pub(super) fn settle_one(
        &mut self,
        tag: u64,
        n: usize,
        result: Result<(), &Error>,
        now: Instant,
    ) -> Option<Settled> {
        let acked = self.awaiting.get_mut(tag)?;
        if let Err(e) = result {
            acked.error.get_or_insert_with(|| Box::new(e.clone()));
        }
        acked.remaining = acked.remaining.saturating_sub(n);
        if acked.remaining > 0 {
            return None;
        }
        self.complete(tag, now)
    }

    /// Record `tag`, all of whose outputs are settled: done (its watermark
    /// advances), failed (the application fails, naming its partition and
    /// offset; its watermark stays below it), or, when an output failed
    /// under the retry lane, kept acking with one output left, its
    /// hand-off to the retry topic.
    pub(super) fn complete(&mut self, tag: u64, now: Instant) -> Option<Settled> {
        let acked = self.awaiting.get_mut(tag)?;
        if acked.error.is_some() {
            if let Some(record) = acked.lane.take() {
                let error = *acked.error.take()?;
                acked.remaining = 1;
                return Some(Settled::HandOff { tag, record, error });
            }
        }
        let acked = self.awaiting.remove(tag)?;
        if let Some(t) = self.task_at(acked.task, acked.generation) {
            t.acking = t.acking.saturating_sub(1);
            if acked.error.is_none() {
                t.watermark.complete(acked.offset);
            }
        }
        Some(match acked.error {
            None => {
                let took = now.saturating_duration_since(acked.started);
                Settled::Done(u64::try_from(took.as_micros()).unwrap_or(u64::MAX))
            }
            Some(e) => {
                self.fatal.get_or_insert(StreamsError::Processing {
                    partition: acked.partition,
                    offset: acked.offset,
                    attempts: 1,
                    error: ProcessingError::new(format!(
                        "an output of the record was not delivered: {e}"
                    )),
                });
                Settled::Failed
            }
        })
    }
}

/// What became of a record once every output it sent is settled.
#[derive(Debug)]
pub(super) enum Settled {
    /// Every output acknowledged: the record is done; its latency in µs.
    Done(u64),
    /// An output failed: the application fails (`Core::fatal`).
    Failed,
    /// An output failed under the retry lane: the record is to be handed
    /// to the retry topic; it stays acking (its watermark held) with one
    /// output to settle, the hand-off, under the same tag.
    HandOff {
        tag: u64,
        record: Box<ConsumerRecord>,
        error: Error,
    },
}

pub(crate) struct Shared {
    pub(crate) config: StreamsConfig,
    pub(crate) processor: Process,
    pub(super) consumer: Consumer,
    pub(crate) producer: Producer,
    pub(super) core: Mutex<Core>,
    /// Wakes the dispatcher (records arrived, a worker ended, stop).
    pub(super) wake: Notify,
    /// Woken (all waiters) whenever a record finishes, for drains.
    pub(super) progress: Notify,
    pub(crate) stopping: AtomicBool,
    pub(crate) counters: Arc<Counters>,
    pub(super) revokes: mpsc::UnboundedSender<Revoke>,
    /// Where the producer reports tagged outputs (an [`Acks`]).
    pub(super) acks: Arc<dyn DeliveryReceiver>,
    /// Whether records are pipelined: done once their outputs are sent,
    /// committable once they are acknowledged. Only where the producer
    /// keeps each partition's order across its retries (see
    /// `clients::keeps_order`); otherwise a record waits for its outputs'
    /// acknowledgements before the next of its key or partition starts.
    pub(super) pipelined: bool,
}

impl Shared {
    pub(super) fn lock(&self) -> MutexGuard<'_, Core> {
        self.core.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The partitions of `topics` whose tasks this instance runs (not
    /// revoked).
    pub(super) fn owned_partitions(
        &self,
        topics: &std::collections::BTreeSet<String>,
    ) -> std::collections::BTreeSet<TopicPartition> {
        self.lock()
            .tasks
            .iter()
            .filter(|(tp, t)| !t.revoked && topics.contains(&*tp.topic))
            .map(|(tp, _)| tp.clone())
            .collect()
    }

    pub(super) fn metrics(&self) -> StreamsMetrics {
        let c = &self.counters;
        let get = |a: &AtomicU64| a.load(AtomicOrdering::Relaxed);
        let (in_flight, mut partitions) = {
            let core = self.lock();
            let partitions: Vec<PartitionMetrics> = core
                .tasks
                .iter()
                .filter(|(_, t)| !t.revoked)
                .map(|(tp, t)| PartitionMetrics {
                    partition: tp.clone(),
                    watermark: t.watermark.committable(),
                    committed: t.committed,
                    lag: None,
                    buffered: t.queue.buffered() as u64,
                    in_flight: (t.queue.in_flight() + t.acking) as u64,
                })
                .collect();
            ((core.in_flight + core.awaiting.len()) as u64, partitions)
        };
        for p in &mut partitions {
            let pending = self
                .lock()
                .tasks
                .get(&p.partition)
                .map_or(0, |t| t.watermark.pending() as i64);
            p.lag = self.consumer.lag(&p.partition).map(|l| l + pending);
        }
        partitions.sort_by(|a, b| a.partition.cmp(&b.partition));
        let processed = get(&c.processed);
        StreamsMetrics {
            processed,
            in_flight,
            commit_latency_last_us: get(&c.commit_latency_last_us),
            commit_latency_max_us: get(&c.commit_latency_max_us),
            processing_latency_mean_us: get(&c.processing_total_us) / processed.max(1),
            processing_latency_max_us: get(&c.processing_max_us),
            processing_latency_p50_us: c.processing.quantile_us(0.5),
            processing_latency_p99_us: c.processing.quantile_us(0.99),
            commit_latency_p50_us: c.commit_latency.quantile_us(0.5),
            commit_latency_p99_us: c.commit_latency.quantile_us(0.99),
            partitions,
            retried_in_place: get(&c.retried_in_place),
            handed_to_retry_lane: get(&c.handed_to_retry_lane),
            retry_lane_succeeded: get(&c.retry_lane_succeeded),
            retry_lane_requeued: get(&c.retry_lane_requeued),
            dead_lettered: get(&c.dead_lettered),
            retry_lane_held: get(&c.retry_lane_held),
            commits: get(&c.commits),
            commit_failures: get(&c.commit_failures),
        }
    }

    pub(super) fn record_commit_latency(&self, started: Instant) {
        let took = started.elapsed();
        let us = took.as_micros() as u64;
        let c = &self.counters;
        c.commit_latency.record(took);
        c.commit_latency_last_us.store(us, AtomicOrdering::Relaxed);
        c.commit_latency_max_us
            .fetch_max(us, AtomicOrdering::Relaxed);
    }

    /// Buffers polled records in their tasks (emptying `records`, whose
    /// room the poll loop reuses) and registers them in the
    /// watermarks (in offset order, so buffered records hold it back too).
    /// A task buffering `max_buffered_per_task` or more has its partition
    /// paused here, before the next `poll`, so its buffer stays within that
    /// bound plus one poll's records (the rest waits in the consumer,
    /// bounded by its fetch configs); the pause is applied under the lock,
    /// so no later resume decision can precede it.
    pub(super) fn accept(&self, records: &mut Vec<ConsumerRecord>) {
        let high = self.config.max_buffered_per_task;
        let mut core = self.lock();
        let mut records = records.drain(..).peekable();
        // `poll` returns each partition's records together: one task
        // lookup per run of them.
        while let Some(first) = records.next() {
            let tp = first.partition.clone();
            let task = core.task(&tp, self.config.ordering);
            let mut next = Some(first);
            while let Some(r) = next {
                if !task.revoked && task.watermark.register(r.offset) {
                    task.queue.push(r.key.clone(), r);
                }
                next = records.next_if(|r| r.partition == tp);
            }
            if !task.revoked && task.queue.must_pause(high) {
                // NotAssigned: the partition was just revoked.
                let _ = self.consumer.pause(std::slice::from_ref(&tp));
            }
        }
        drop(core);
        self.wake.notify_one();
    }

    /// Starts what the ordering mode and the limits allow; pauses and
    /// resumes fetching by buffer marks.
    pub(super) fn dispatch(self: &Arc<Self>) {
        let c = &self.config;
        let high = c.max_buffered_per_task;
        let tagged = self.pipelined;
        let (mut pause, mut resume, mut jobs) = (Vec::new(), Vec::new(), Vec::new());
        {
            let mut core = self.lock();
            // A sync commit's round trip holds starts back (see
            // `Core::hold`); the dispatcher runs during a commit's waits.
            let mut budget = if core.hold {
                0
            } else {
                c.max_in_flight.saturating_sub(core.in_flight)
            };
            let core = &mut *core;
            let now = Instant::now();
            for (i, tp, task) in core.tasks.iter_mut().filter(|(_, _, t)| !t.revoked) {
                // A task whose records do not wait needs one runner, which
                // takes them in a row; records that wait (async calls) each
                // get a worker, so that their calls overlap at once.
                let mut starts = match (task.waits, task.runners) {
                    (true, _) => usize::MAX,
                    (false, 0) => 1,
                    (false, _) => 0,
                };
                while starts > 0 && budget > 0 {
                    let Some((key, record)) = task
                        .queue
                        .take_one_keyed(c.max_in_flight_per_task, task.fence)
                    else {
                        break;
                    };
                    starts -= 1;
                    budget -= 1;
                    // Where records wait, a worker starts standing aside
                    // (see `Job::runner`).
                    let runner = !task.waits;
                    task.runners += usize::from(runner);
                    // The tag is reserved under the lock that starts the
                    // record (see `Awaiting::reserve`).
                    let tag = reserve(&mut core.awaiting, tagged, i, task.generation, &record, now);
                    jobs.push(Job {
                        task: i,
                        generation: task.generation,
                        key,
                        record,
                        tag,
                        runner,
                    });
                }
                match task.queue.flow(high, high / 2) {
                    Some(Flow::Pause) => pause.push(tp.clone()),
                    Some(Flow::Resume) => resume.push(tp.clone()),
                    None => {}
                }
            }
            core.in_flight += jobs.len();
            core.dispatched_since_commit += jobs.len() as u64;
        }
        // NotAssigned: the partition was just revoked; nothing to do.
        // (Each call wakes the fetchers: only when something changed.)
        if !pause.is_empty() {
            let _ = self.consumer.pause(&pause);
        }
        if !resume.is_empty() {
            let _ = self.consumer.resume(&resume);
        }
        for job in jobs {
            tokio::spawn(self.clone().work(job));
        }
    }
}

#[cfg(test)]
mod tests {
    //! Completion and commit: a record's offset becomes committable only
    //! once every output it sent is acknowledged; a failed output blocks
    //! it and goes through the failure policy.

    use bytes::Bytes;

    use super::*;
    use crate::error::Origin;
    use crate::protocol::records::TimestampType;
    use crate::streams::runtime::slots::{Acked, UNKNOWN_OUTPUTS};

    fn tp() -> TopicPartition {
        TopicPartition::new("in", 0)
    }

    fn record(offset: i64) -> ConsumerRecord {
        ConsumerRecord {
            partition: tp(),
            offset,
            timestamp: 7,
            timestamp_type: TimestampType::CreateTime,
            key: Some(Bytes::from_static(b"k")),
            value: Some(Bytes::from_static(b"v")),
            headers: Vec::new(),
            leader_epoch: None,
        }
    }

    /// A core with one task whose records at `offsets` were polled.
    fn core(offsets: &[i64]) -> Core {
        let mut core = Core::default();
        let task = core.task(&tp(), OrderingMode::Key);
        for o in offsets {
            assert!(task.watermark.register(*o));
        }
        core
    }

    /// Record `offset` starts (its tag reserved) and sends `n` outputs;
    /// `lane`: the retry lane keeps a copy of it.
    fn sent(core: &mut Core, offset: i64, n: usize, lane: bool) -> u64 {
        let tag = core.awaiting.reserve(Acked {
            partition: tp(),
            task: 0,
            generation: core.tasks.get(&tp()).unwrap().generation,
            offset,
            remaining: UNKNOWN_OUTPUTS,
            started: Instant::now(),
            error: None,
            lane: None,
        });
        core.tasks.get_mut(&tp()).unwrap().acking += 1;
        let a = core.awaiting.confirm(tag, n).unwrap();
        a.lane = lane.then(|| Box::new(record(offset)));
        assert_eq!(a.remaining, n);
        tag
    }

    fn committable(core: &Core) -> Option<i64> {
        core.tasks.get(&tp()).unwrap().watermark.committable()
    }

    fn failure() -> Error {
        Error::invalid_state(Origin::Streams, "MESSAGE_TOO_LARGE for out-0")
    }

    #[test]
    fn an_offset_is_committable_only_once_its_outputs_are_acknowledged() {
        let mut c = core(&[0, 1, 2]);
        let now = Instant::now();
        let first = sent(&mut c, 0, 2, false);
        let second = sent(&mut c, 1, 1, false);
        // The second record's output is acknowledged first: nothing is
        // committable past the first, whose outputs are not.
        assert!(matches!(
            c.settle_one(second, 1, Ok(()), now),
            Some(Settled::Done(_))
        ));
        assert_eq!(committable(&c), Some(0));
        assert!(c.settle_one(first, 1, Ok(()), now).is_none());
        assert_eq!(committable(&c), Some(0), "one output still unacknowledged");
        assert!(matches!(
            c.settle_one(first, 1, Ok(()), now),
            Some(Settled::Done(_))
        ));
        assert_eq!(committable(&c), Some(2));
        assert_eq!(c.tasks.get(&tp()).unwrap().acking, 0);
        assert!(c.fatal.is_none());
    }

    #[test]
    fn a_failed_output_blocks_the_commit_and_fails_the_application() {
        let mut c = core(&[0, 1]);
        let now = Instant::now();
        let first = sent(&mut c, 0, 2, false);
        let second = sent(&mut c, 1, 1, false);
        let e = failure();
        assert!(c.settle_one(first, 1, Err(&e), now).is_none());
        assert!(matches!(
            c.settle_one(first, 1, Ok(()), now),
            Some(Settled::Failed)
        ));
        assert!(matches!(
            c.settle_one(second, 1, Ok(()), now),
            Some(Settled::Done(_))
        ));
        assert_eq!(committable(&c), Some(0), "never past the failed record");
        match c.fatal.as_ref().expect("the application fails") {
            StreamsError::Processing {
                partition,
                offset,
                error,
                ..
            } => {
                assert_eq!((partition, *offset), (&tp(), 0));
                assert!(error.message().contains("out-0"), "{error}");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn under_the_retry_lane_a_failed_output_hands_the_record_off() {
        let mut c = core(&[0, 1]);
        let now = Instant::now();
        let first = sent(&mut c, 0, 1, true);
        let e = failure();
        let Some(Settled::HandOff { tag, record, error }) = c.settle_one(first, 1, Err(&e), now)
        else {
            panic!("handed off")
        };
        assert_eq!((tag, record.offset), (first, 0));
        assert!(error.to_string().contains("out-0"), "{error}");
        assert!(c.fatal.is_none());
        // Held until the hand-off is acknowledged.
        assert_eq!(committable(&c), Some(0));
        assert_eq!(c.tasks.get(&tp()).unwrap().acking, 1);
        assert!(matches!(
            c.settle_one(tag, 1, Ok(()), now),
            Some(Settled::Done(_))
        ));
        assert_eq!(committable(&c), Some(1));
        // A failed hand-off fails the application.
        let second = sent(&mut c, 1, 1, true);
        assert!(matches!(
            c.settle_one(second, 1, Err(&e), now),
            Some(Settled::HandOff { .. })
        ));
        assert!(matches!(
            c.settle_one(second, 1, Err(&e), now),
            Some(Settled::Failed)
        ));
        assert_eq!(committable(&c), Some(1));
        assert!(c.fatal.is_some());
    }

    #[test]
    fn outputs_settled_before_the_worker_confirms_them_complete_at_confirm() {
        let mut c = core(&[0]);
        let now = Instant::now();
        let tag = c.awaiting.reserve(Acked {
            partition: tp(),
            task: 0,
            generation: c.tasks.get(&tp()).unwrap().generation,
            offset: 0,
            remaining: UNKNOWN_OUTPUTS,
            started: now,
            error: None,
            lane: Some(Box::new(record(0))),
        });
        let e = failure();
        assert!(c.settle_one(tag, 1, Err(&e), now).is_none());
        assert_eq!(committable(&c), Some(0));
        assert_eq!(c.awaiting.confirm(tag, 1).map(|a| a.remaining), Some(0));
        assert!(matches!(
            c.complete(tag, now),
            Some(Settled::HandOff { .. })
        ));
        assert_eq!(committable(&c), Some(0));
    }
}
