//! Running one record through the topology: the processor (a panic
//! becomes an error) under the retry policies (in place, or the hand-off
//! to the parallel retry lane), its outputs returned to be sent pipelined
//! (see `worker`) or, where the producer may reorder a partition's
//! retried batches, sent and awaited here; and the record caches' flush
//! before a commit (issue #16, KIP-63).

use std::sync::{Arc, Mutex};

use super::task::Shared;
use crate::consumer::ConsumerRecord;
use crate::error::Error;
use crate::producer::{DeliveryReceiver, Producer, ProducerRecord};
use crate::streams::config::FailurePolicy;
use crate::streams::error::{ProcessingError, StreamsError};
use crate::streams::metrics::bump;
use crate::streams::retry;
use crate::streams::topology::{Process, ProcessResult, Records};
use crate::TopicPartition;

impl Shared {
    /// Before offsets are committed (or a transaction commits): runs a
    /// flush tick of every task through the topology, so that each caching
    /// stage writes its record cache out to its store, changelog and
    /// downstream (issue #16, KIP-63), and waits until those outputs and
    /// changelog writes are acknowledged; at-least-once, also until every
    /// output sent so far is (a cache eviction's outputs belong to a later
    /// record than the updates they carry).
    pub(super) async fn flush_caches(&self) -> std::result::Result<(), StreamsError> {
        if !self.config.stores.caching() {
            return Ok(());
        }
        let tasks: Vec<TopicPartition> = self.lock().tasks.keys().cloned().collect();
        let failed = |tp: &dyn std::fmt::Display, e: &dyn std::fmt::Display| {
            StreamsError::Client(Error::invalid_state(
                crate::error::Origin::Streams,
                format!("flushing the record caches of {tp} before a commit: {e}"),
            ))
        };
        if self.config.is_exactly_once() {
            // The transaction's commit flushes these outputs (a failed one
            // fails it); they are awaited here as before.
            for tp in tasks {
                let tick = crate::streams::state::flush_tick(&tp);
                attempt_once(&self.processor, &self.producer, tick)
                    .await
                    .map_err(|e| failed(&tp, &e))?;
            }
            return Ok(());
        }
        // At-least-once: a flush forwards an output per key it writes out;
        // they are sent tagged (no future each), and the producer's flush
        // below, which waits for every record sent so far anyway, settles
        // them all.
        let outcome = Arc::new(FlushedOutputs::default());
        let receiver: Arc<dyn DeliveryReceiver> = outcome.clone();
        for tp in tasks {
            let tick = crate::streams::state::flush_tick(&tp);
            let outputs = run_processor(&self.processor, tick)
                .await
                .map_err(|e| failed(&tp, &e))?;
            for out in outputs {
                self.producer
                    .send_tagged(out, &receiver, 0)
                    .await
                    .map_err(|e| failed(&tp, &e))?;
            }
        }
        self.producer.flush().await;
        match outcome.error() {
            Some((tp, e)) => Err(StreamsError::Client(Error::invalid_state(
                crate::error::Origin::Streams,
                format!("flushing the record caches before a commit: an output to {tp} was not acknowledged: {e}"),
            ))),
            None => Ok(()),
        }
    }

    /// Pipelined (see `worker`): runs a record through the processor
    /// under the failure policy and returns the outputs to send, with,
    /// under the retry lane, a copy of the record to hand off should one
    /// of them fail. `Retry` runs it again in place after a processing
    /// failure; the lane's hand-off of a record that failed processing is
    /// its one output (a copy is kept only for a record that succeeded:
    /// a failed hand-off fails the application).
    pub(super) async fn outputs_under_policy(
        &self,
        record: ConsumerRecord,
    ) -> std::result::Result<(Records<ProducerRecord>, Option<Box<ConsumerRecord>>), StreamsError>
    {
        match self
            .under_policy(&record, |r| run_processor(&self.processor, r))
            .await?
        {
            UnderPolicy::Done(outputs) => {
                let lane = matches!(self.config.failure_policy, FailurePolicy::RetryLane(_))
                    .then(|| Box::new(record));
                Ok((outputs, lane))
            }
            UnderPolicy::HandOff(handoff) => {
                bump(&self.counters.handed_to_retry_lane);
                Ok((Records::One(handoff), None))
            }
        }
    }

    /// Not pipelined (see `Shared::pipelined`): runs a record through the
    /// topology under the failure policy and waits until its outputs are
    /// acknowledged; a failed output counts as a failed attempt.
    pub(super) async fn process(
        &self,
        record: ConsumerRecord,
    ) -> std::result::Result<(), StreamsError> {
        // Under `Fail` the record is never needed again: no copy of it.
        if matches!(self.config.failure_policy, FailurePolicy::Fail) {
            let (partition, offset) = (record.partition.clone(), record.offset);
            return attempt_once(&self.processor, &self.producer, record)
                .await
                .map_err(|error| StreamsError::Processing {
                    partition,
                    offset,
                    attempts: 1,
                    error,
                });
        }
        match self
            .under_policy(&record, |r| {
                attempt_once(&self.processor, &self.producer, r)
            })
            .await?
        {
            UnderPolicy::Done(()) => Ok(()),
            UnderPolicy::HandOff(handoff) => {
                self.producer.send(handoff).await?.await?;
                bump(&self.counters.handed_to_retry_lane);
                Ok(())
            }
        }
    }

    /// Runs `attempt` on copies of a record under the failure policy:
    /// `Retry` runs it again after a failure until its attempts are used
    /// up; `RetryLane` gives the record's hand-off to the retry topic
    /// after the first failure; otherwise the failure is the record's
    /// error.
    async fn under_policy<T, F, Fut>(
        &self,
        record: &ConsumerRecord,
        mut attempt_with: F,
    ) -> std::result::Result<UnderPolicy<T>, StreamsError>
    where
        F: FnMut(ConsumerRecord) -> Fut,
        Fut: std::future::Future<Output = std::result::Result<T, ProcessingError>>,
    {
        let mut attempt = 1u32;
        loop {
            let error = match attempt_with(record.clone()).await {
                Ok(done) => return Ok(UnderPolicy::Done(done)),
                Err(e) => e,
            };
            match &self.config.failure_policy {
                FailurePolicy::Retry(b) if attempt < b.max_attempts => {
                    bump(&self.counters.retried_in_place);
                    tokio::time::sleep(b.delay(attempt)).await;
                    attempt += 1;
                }
                FailurePolicy::RetryLane(lane) => {
                    let due = crate::clock::now_ms() + lane.backoff.delay(1).as_millis() as i64;
                    let handoff = retry::to_retry_topic(lane, record, 1, due, &error);
                    return Ok(UnderPolicy::HandOff(handoff));
                }
                _ => {
                    return Err(StreamsError::Processing {
                        partition: record.partition.clone(),
                        offset: record.offset,
                        attempts: attempt,
                        error,
                    })
                }
            }
        }
    }
}

/// What running a record under the failure policy came to.
enum UnderPolicy<T> {
    /// An attempt succeeded with this.
    Done(T),
    /// The retry lane takes the record: its hand-off to the retry topic.
    HandOff(ProducerRecord),
}

/// Runs a record through the processor (a panic becomes an error) and
/// waits until every output is acknowledged.
pub(crate) async fn attempt_once(
    processor: &Process,
    producer: &Producer,
    record: ConsumerRecord,
) -> std::result::Result<(), ProcessingError> {
    let outputs = run_processor(processor, record).await?;
    // Every output is sent before any is awaited, so they share batches;
    // a single output (the common case) needs no list of deliveries.
    if outputs.len() == 1 {
        let out = outputs.into_iter().next().expect("one output");
        producer.send(out).await?.await?;
        return Ok(());
    }
    let mut deliveries = Vec::with_capacity(outputs.len());
    for out in outputs {
        deliveries.push(producer.send(out).await?);
    }
    for d in deliveries {
        d.await?;
    }
    Ok(())
}

/// Runs a record through the processor: its outputs, or the error (a
/// panic becomes one).
///
/// A plain function returning [`Processing`], not an `async fn`: an async
/// fn keeps its argument (the record) in its state for as long as it runs,
/// and a worker waits on this future for the whole of a record's call, so
/// every byte here is held per record in flight (#22).
pub(super) fn run_processor(processor: &Process, record: ConsumerRecord) -> Processing {
    #[cfg(feature = "otel")]
    let span = super::otel::ProcessSpan::start(&record);
    // Stages do their synchronous part (decoding, say) when called: a
    // panic there is caught as one while polling is.
    #[cfg(feature = "otel")]
    let called = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        span.current(|| span.instrument(processor(record)))
    }));
    #[cfg(not(feature = "otel"))]
    let called = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| processor(record)));
    Processing {
        called: called.map_err(Some),
        #[cfg(feature = "otel")]
        span: Some(span),
    }
}

/// The processor's future for one record (see [`run_processor`]).
#[cfg(not(feature = "otel"))]
type Stage = crate::streams::topology::StageFuture<ProcessResult<Records<ProducerRecord>>>;
#[cfg(feature = "otel")]
type Stage = opentelemetry::context::WithContext<
    crate::streams::topology::StageFuture<ProcessResult<Records<ProducerRecord>>>,
>;

/// A record in the processor: its stage future, polled with panics caught
/// (no task spawned per record for that), or the panic of its synchronous
/// part.
pub(super) struct Processing {
    called: std::result::Result<Stage, Option<Box<dyn std::any::Any + Send>>>,
    #[cfg(feature = "otel")]
    span: Option<super::otel::ProcessSpan>,
}

impl std::future::Future for Processing {
    type Output = std::result::Result<Records<ProducerRecord>, ProcessingError>;

    fn poll(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        let this = self.get_mut();
        let outcome = match &mut this.called {
            Ok(stage) => match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                std::pin::Pin::new(stage).poll(cx)
            })) {
                Ok(std::task::Poll::Ready(r)) => Ok(r),
                Ok(std::task::Poll::Pending) => return std::task::Poll::Pending,
                Err(panic) => Err(panic),
            },
            Err(panic) => Err(panic
                .take()
                .expect("a finished record's processing is not polled again")),
        };
        std::task::Poll::Ready(match outcome {
            #[cfg(feature = "otel")]
            Ok(r) => match this.span.take() {
                Some(span) => span.finish(r),
                None => r,
            },
            #[cfg(not(feature = "otel"))]
            Ok(r) => r,
            Err(panic) => {
                let what = panic
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| panic.downcast_ref::<String>().cloned())
                    .unwrap_or_default();
                Err(ProcessingError::new(format!("processor panicked: {what}")))
            }
        })
    }
}

/// The outcome of the outputs a flush of the record caches forwarded
/// (at-least-once): the first that failed, with its partition.
#[derive(Default)]
struct FlushedOutputs(Mutex<Option<(TopicPartition, Error)>>);

impl FlushedOutputs {
    fn error(&self) -> Option<(TopicPartition, Error)> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

impl DeliveryReceiver for FlushedOutputs {
    fn delivered(&self, partition: &TopicPartition, _: &[u64], result: Result<(), &Error>) {
        if let Err(e) = result {
            self.0
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .get_or_insert_with(|| (partition.clone(), e.clone()));
        }
    }
}
