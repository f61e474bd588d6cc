//! The runtime on a share group (`source.group=share`, KIP-932,
//! <https://cwiki.apache.org/confluence/display/KAFKA/KIP-932%3A+Queues+for+Kafka>):
//! one explicit-mode [`ShareConsumer`] per instance, records processed on
//! tokio tasks up to `max_in_flight`, and each record acknowledged when it
//! is settled: Accept once its outputs are acknowledged, Release for a
//! retry (after the backoff's delay), Reject when retries are exhausted
//! with no dead-letter topic. No tasks, watermarks or commits: the broker
//! tracks each record. DESIGN.md "streams on a share group" gives the
//! reasons; [`decide`] is the policy, without I/O.
//!
//! Also [`Engine`]: what [`RunningStreams`] holds, this runtime or the
//! consumer-group one.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering as AtomicOrdering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{watch, Notify};
use tokio::time::Instant;
use tracing::warn;

use super::{attempt_once, clients, RunningStreams, Shared, Streams};
use crate::cluster::Cluster;
use crate::consumer::share::{
    AcknowledgeType, AcknowledgementMode, ShareConsumer, ShareConsumerConfig, ShareRecord,
};
use crate::error::{Error, Result};
use crate::producer::Producer;
use crate::streams::config::{FailurePolicy, StreamsConfig};
use crate::streams::error::{ProcessingError, StreamsError};
use crate::streams::metrics::{bump, check_dead_letters, Counters, StreamsMetrics};
use crate::streams::retry;
use crate::streams::source_group::{check_stateless, DELIVERY_COUNT};
use crate::streams::topology::Process;
use crate::TopicPartition;

/// How long one poll waits for records (and the idle loop's period).
const POLL_TIMEOUT: Duration = Duration::from_millis(100);

/// What a settled record gets, by [`decide`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Decision {
    /// Processed, outputs acknowledged.
    Accept,
    /// Wait `after`, then release it: the broker delivers it again, with
    /// a higher delivery count, to any instance.
    Release { after: Duration },
    /// Write it to the retry lane's dead-letter topic, then accept it
    /// (release it if that write fails).
    DeadLetter,
    /// `FailurePolicy::Fail`: release it and stop the application.
    ReleaseAndStop,
    /// `FailurePolicy::Retry` after its last attempt: reject it (never
    /// delivered again) and stop the application.
    RejectAndStop,
}

/// The acknowledgement of a record delivered `delivery_count` times (the
/// broker's count, 1 the first time: the attempt number) whose processing
/// succeeded or not, under `policy`.
pub(super) fn decide(policy: &FailurePolicy, delivery_count: i16, ok: bool) -> Decision {
    if ok {
        return Decision::Accept;
    }
    let attempt = u32::try_from(delivery_count).unwrap_or(0).max(1);
    match policy {
        FailurePolicy::Retry(b) if attempt < b.max_attempts => Decision::Release {
            after: b.delay(attempt),
        },
        FailurePolicy::Retry(_) => Decision::RejectAndStop,
        FailurePolicy::RetryLane(lane) if attempt < lane.backoff.max_attempts => {
            Decision::Release {
                after: lane.backoff.delay(attempt),
            }
        }
        FailurePolicy::RetryLane(_) => Decision::DeadLetter,
        _ => Decision::ReleaseAndStop,
    }
}

/// What [`RunningStreams`] holds: the application's config (its stores
/// are read through it) and the running engine.
pub(super) struct Engine {
    pub(super) config: StreamsConfig,
    kind: Kind,
}

enum Kind {
    Group(Arc<Shared>),
    Share(Arc<ShareRun>),
}

impl Engine {
    /// The consumer-group runtime.
    pub(super) fn group(shared: Arc<Shared>) -> Engine {
        Engine {
            config: shared.config.clone(),
            kind: Kind::Group(shared),
        }
    }

    pub(super) fn metrics(&self) -> StreamsMetrics {
        match &self.kind {
            Kind::Group(s) => s.metrics(),
            Kind::Share(s) => s.metrics(),
        }
    }

    /// Asks the runtime to stop (shutdown follows).
    pub(super) fn stop(&self) {
        match &self.kind {
            Kind::Group(s) => {
                s.stopping.store(true, AtomicOrdering::Release);
                s.wake.notify_one();
            }
            Kind::Share(s) => s.stop(),
        }
    }

    /// The clients the runtime runs on: its group consumer or share
    /// consumer, and its producer.
    #[cfg(feature = "metrics")]
    pub(super) fn clients(&self) -> super::EmbeddedClients {
        match &self.kind {
            Kind::Group(s) => super::EmbeddedClients {
                consumer: Some(s.consumer.clone()),
                share_consumer: None,
                producer: s.producer.clone(),
            },
            Kind::Share(s) => super::EmbeddedClients {
                consumer: None,
                share_consumer: Some(s.consumer.clone()),
                producer: s.producer.clone(),
            },
        }
    }

    /// A reader of the counters that does not keep the runtime alive.
    #[cfg(feature = "metrics")]
    pub(super) fn reader(&self) -> impl Fn() -> Option<StreamsMetrics> + Send + Sync + 'static {
        enum Weakly {
            Group(std::sync::Weak<Shared>),
            Share(std::sync::Weak<ShareRun>),
        }
        let weak = match &self.kind {
            Kind::Group(s) => Weakly::Group(Arc::downgrade(s)),
            Kind::Share(s) => Weakly::Share(Arc::downgrade(s)),
        };
        move || match &weak {
            Weakly::Group(w) => w.upgrade().map(|s| s.metrics()),
            Weakly::Share(w) => w.upgrade().map(|s| s.metrics()),
        }
    }
}

/// What the loop and the record workers share.
pub(super) struct ShareRun {
    config: StreamsConfig,
    processor: Process,
    consumer: ShareConsumer,
    producer: Producer,
    counters: Arc<Counters>,
    in_flight: AtomicUsize,
    /// Woken when a record settles, on a fatal error and on stop.
    wake: Notify,
    /// Set once to stop: ends the loop and cuts retry delays short.
    stop: watch::Sender<bool>,
    fatal: Mutex<Option<StreamsError>>,
}

impl ShareRun {
    fn stop(&self) {
        self.stop.send_replace(true);
        self.wake.notify_one();
    }

    fn stopping(&self) -> bool {
        *self.stop.borrow()
    }

    fn fail(&self, e: StreamsError) {
        self.fatal
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get_or_insert(e);
        self.wake.notify_one();
    }

    fn take_fatal(&self) -> Option<StreamsError> {
        self.fatal.lock().unwrap_or_else(|p| p.into_inner()).take()
    }

    fn metrics(&self) -> StreamsMetrics {
        let c = &self.counters;
        let get = |a: &AtomicU64| a.load(AtomicOrdering::Relaxed);
        let processed = get(&c.processed);
        StreamsMetrics {
            processed,
            in_flight: self.in_flight.load(AtomicOrdering::Relaxed) as u64,
            retried_in_place: get(&c.retried_in_place),
            dead_lettered: get(&c.dead_lettered),
            processing_latency_mean_us: get(&c.processing_total_us) / processed.max(1),
            processing_latency_max_us: get(&c.processing_max_us),
            processing_latency_p50_us: c.processing.quantile_us(0.5),
            processing_latency_p99_us: c.processing.quantile_us(0.99),
            ..StreamsMetrics::default()
        }
    }

    fn done(&self, started: Instant) {
        let took = started.elapsed();
        let us = u64::try_from(took.as_micros()).unwrap_or(u64::MAX);
        let c = &self.counters;
        bump(&c.processed);
        c.processing.record(took);
        c.processing_total_us.fetch_add(us, AtomicOrdering::Relaxed);
        c.processing_max_us.fetch_max(us, AtomicOrdering::Relaxed);
    }

    fn acknowledge(&self, partition: &TopicPartition, offset: i64, ty: AcknowledgeType) {
        // Fails only after close (a record that outlived the drain): the
        // broker releases it when the session closes or its lock lapses.
        if let Err(e) = self.consumer.acknowledge_offset(partition, offset, ty) {
            warn!(%partition, offset, ?ty, error = %e, "acknowledgement not recorded");
        }
    }
}

/// The share consumer's config: the share group `application.id`,
/// explicit acknowledgement, `max.poll.records` at most the in-flight
/// limit, then the application's consumer properties.
fn share_consumer_config(c: &StreamsConfig) -> Result<ShareConsumerConfig> {
    let max_poll = c.max_in_flight.min(500).to_string();
    let defaults = [
        ("bootstrap.servers", c.bootstrap_servers.as_str()),
        ("group.id", c.application_id.as_str()),
        ("share.acknowledgement.mode", "explicit"),
        ("max.poll.records", max_poll.as_str()),
        ("fetch.max.wait.ms", "100"),
    ];
    let mut b = ShareConsumerConfig::builder();
    for (k, v) in defaults {
        b = b.set(k, v)?;
    }
    for (k, v) in &c.consumer_properties {
        b = b.set(k, v)?;
    }
    let mut cfg = b.build()?;
    if cfg.group_id != c.application_id {
        return Err(Error::config(
            "group.id",
            "the share group of a streams application is its application.id",
        ));
    }
    if cfg.acknowledgement_mode != AcknowledgementMode::Explicit {
        return Err(Error::config(
            "share.acknowledgement.mode",
            "the streams runtime acknowledges each record as it settles (explicit mode)",
        ));
    }
    if let Some(client) = &c.client {
        cfg.client = client.clone();
    }
    if cfg.client.client_id.is_empty() {
        cfg.client.client_id = c.application_id.clone();
    }
    Ok(cfg)
}

/// Connects, joins the share group `application.id` and starts the loop.
pub(super) async fn start(streams: Streams) -> std::result::Result<RunningStreams, StreamsError> {
    let c = &streams.config;
    check_stateless(c)?;
    let consumer_config = share_consumer_config(c)?;
    let cluster = Cluster::connect(consumer_config.client.clone()).await?;
    let consumer = ShareConsumer::with_cluster(cluster.clone(), consumer_config);
    let producer_config = clients::producer_config(c)?;
    let producer = if clients::producer_shares_cluster(c) {
        Producer::with_cluster(cluster.clone(), producer_config).await?
    } else {
        Producer::connect(producer_config).await?
    };
    let _ = streams.cluster.set(cluster);
    consumer.subscribe([streams.source.as_str()])?;
    let run = Arc::new(ShareRun {
        config: streams.config.clone(),
        processor: streams.processor,
        consumer,
        producer,
        counters: Arc::new(Counters::default()),
        in_flight: AtomicUsize::new(0),
        wake: Notify::new(),
        stop: watch::channel(false).0,
        fatal: Mutex::new(None),
    });
    let driver = tokio::spawn(drive(run.clone()));
    Ok(RunningStreams {
        shared: Engine {
            config: streams.config,
            kind: Kind::Share(run),
        },
        driver,
    })
}

/// Polls while there is room, starts a worker per record; on stop or a
/// fatal error drains and closes.
async fn drive(run: Arc<ShareRun>) -> std::result::Result<(), StreamsError> {
    let guard = match &run.config.failure_policy {
        FailurePolicy::RetryLane(lane) => lane.dead_letter_guard,
        _ => None,
    };
    let mut samples: std::collections::VecDeque<(Instant, u64, u64)> =
        [(Instant::now(), 0, 0)].into();
    let interval = run.config.commit_interval;
    let mut next_check = Instant::now() + interval;
    let limit = run.config.max_in_flight;
    let result = loop {
        if let Some(e) = run.take_fatal() {
            break Err(e);
        }
        if run.stopping() {
            break Ok(());
        }
        if let Some(g) = &guard {
            if Instant::now() >= next_check {
                next_check = Instant::now() + interval;
                if let Err(e) = check_dead_letters(&run.counters, g, &mut samples) {
                    break Err(e);
                }
            }
        }
        let room = limit.saturating_sub(run.in_flight.load(AtomicOrdering::Acquire));
        if room == 0 {
            tokio::select! {
                _ = run.wake.notified() => {}
                _ = tokio::time::sleep(POLL_TIMEOUT) => {}
            }
            continue;
        }
        match run.consumer.poll_pipelined(POLL_TIMEOUT, room).await {
            Ok(records) => {
                for record in records {
                    run.in_flight.fetch_add(1, AtomicOrdering::AcqRel);
                    tokio::spawn(work(run.clone(), record));
                }
            }
            Err(e) if e.is_retriable() => {
                warn!(group = %run.config.application_id, error = %e, "share poll failed; retrying");
                tokio::time::sleep(POLL_TIMEOUT).await;
            }
            Err(e) => break Err(e.into()),
        }
    };
    // Shutdown: cut retry delays short, wait for records in flight, then
    // close: decided acknowledgements go out, the rest is released.
    run.stop();
    let deadline = Instant::now() + run.config.drain_timeout;
    while run.in_flight.load(AtomicOrdering::Acquire) > 0 {
        tokio::select! {
            _ = run.wake.notified() => {}
            _ = tokio::time::sleep_until(deadline) => {
                warn!(
                    group = %run.config.application_id,
                    in_flight = run.in_flight.load(AtomicOrdering::Acquire),
                    "drain timed out on shutdown; their records are released"
                );
                break;
            }
        }
    }
    let closed = run.consumer.close().await;
    let _ = run.producer.close(Duration::from_secs(10)).await;
    result?;
    closed?;
    Ok(())
}

/// Processes one record and acknowledges it as [`decide`] says.
async fn work(run: Arc<ShareRun>, record: ShareRecord) {
    let started = Instant::now();
    let count = record.delivery_count;
    let ShareRecord { record, .. } = record;
    let (partition, offset) = (record.partition.clone(), record.offset);
    // Only a dead letter needs the record after processing.
    let copy =
        matches!(run.config.failure_policy, FailurePolicy::RetryLane(_)).then(|| record.clone());
    let outcome = DELIVERY_COUNT
        .scope(count, attempt_once(&run.processor, &run.producer, record))
        .await;
    let decision = decide(&run.config.failure_policy, count, outcome.is_ok());
    let error = outcome.err().unwrap_or_else(|| ProcessingError::new(""));
    let stopped = |error| StreamsError::Processing {
        partition: partition.clone(),
        offset,
        attempts: u32::try_from(count).unwrap_or(0),
        error,
    };
    match decision {
        Decision::Accept => {
            run.acknowledge(&partition, offset, AcknowledgeType::Accept);
            run.done(started);
        }
        Decision::Release { after } => {
            let mut stop = run.stop.subscribe();
            tokio::select! {
                _ = tokio::time::sleep(after) => {}
                _ = stop.wait_for(|s| *s) => {}
            }
            run.acknowledge(&partition, offset, AcknowledgeType::Release);
            bump(&run.counters.retried_in_place);
        }
        Decision::DeadLetter => {
            let written = match (&run.config.failure_policy, &copy) {
                (FailurePolicy::RetryLane(lane), Some(input)) => {
                    let attempts = u32::try_from(count).unwrap_or(0);
                    let letter = retry::dead_letter(lane, input, attempts, error.message());
                    match run.producer.send(letter).await {
                        Ok(delivery) => delivery.await.map(|_| ()),
                        Err(e) => Err(e),
                    }
                }
                _ => Err(Error::invalid_state(
                    crate::error::Origin::Streams,
                    "dead letter without a retry lane",
                )),
            };
            match written {
                Ok(()) => {
                    run.acknowledge(&partition, offset, AcknowledgeType::Accept);
                    bump(&run.counters.dead_lettered);
                }
                Err(e) => {
                    warn!(%partition, offset, error = %e, "dead-letter write failed; released for another attempt");
                    run.acknowledge(&partition, offset, AcknowledgeType::Release);
                }
            }
        }
        Decision::ReleaseAndStop => {
            run.acknowledge(&partition, offset, AcknowledgeType::Release);
            run.fail(stopped(error));
        }
        Decision::RejectAndStop => {
            run.acknowledge(&partition, offset, AcknowledgeType::Reject);
            run.fail(stopped(error));
        }
    }
    run.in_flight.fetch_sub(1, AtomicOrdering::AcqRel);
    run.wake.notify_one();
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::streams::config::{Backoff, RetryLane};

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn a_processed_record_is_accepted_whatever_its_count_or_policy() {
        let lane = FailurePolicy::RetryLane(RetryLane::new("r", "d", Backoff::fixed(MS, 3)));
        for policy in [
            FailurePolicy::Fail,
            FailurePolicy::Retry(Backoff::fixed(MS, 3)),
            lane,
        ] {
            for count in [1, 2, 9] {
                assert_eq!(decide(&policy, count, true), Decision::Accept);
            }
        }
    }

    #[test]
    fn fail_releases_and_stops() {
        assert_eq!(
            decide(&FailurePolicy::Fail, 1, false),
            Decision::ReleaseAndStop
        );
        assert_eq!(
            decide(&FailurePolicy::Fail, 4, false),
            Decision::ReleaseAndStop
        );
    }

    #[test]
    fn retry_releases_after_the_backoff_until_the_last_attempt_then_rejects() {
        let b = Backoff::exponential(10 * MS, 30 * MS, 3);
        let policy = FailurePolicy::Retry(Backoff { jitter: 0.0, ..b });
        // The delivery count is the attempt number.
        assert_eq!(
            decide(&policy, 1, false),
            Decision::Release { after: 10 * MS }
        );
        assert_eq!(
            decide(&policy, 2, false),
            Decision::Release { after: 20 * MS }
        );
        assert_eq!(decide(&policy, 3, false), Decision::RejectAndStop);
        // Delivered more often than the policy allows (a lapsed lock).
        assert_eq!(decide(&policy, 7, false), Decision::RejectAndStop);
    }

    #[test]
    fn the_lane_releases_until_its_last_attempt_then_dead_letters() {
        let lane = RetryLane::new("unused", "dlq", Backoff::fixed(5 * MS, 2));
        let policy = FailurePolicy::RetryLane(lane);
        assert_eq!(
            decide(&policy, 1, false),
            Decision::Release { after: 5 * MS }
        );
        assert_eq!(decide(&policy, 2, false), Decision::DeadLetter);
        assert_eq!(decide(&policy, 3, false), Decision::DeadLetter);
    }

    #[test]
    fn a_hostile_delivery_count_counts_as_the_first_attempt() {
        let policy = FailurePolicy::Retry(Backoff::fixed(MS, 2));
        for count in [0, -1, i16::MIN] {
            assert_eq!(
                decide(&policy, count, false),
                Decision::Release { after: MS }
            );
        }
    }

    fn config(props: &[(&str, &str)]) -> StreamsConfig {
        let mut b = StreamsConfig::builder("app", "h:9092")
            .source_group(crate::streams::SourceGroup::Share)
            .ordering(crate::streams::OrderingMode::Unordered)
            .max_in_flight(64, 200);
        for (k, v) in props {
            b = b.consumer_property(*k, *v);
        }
        b.build().unwrap()
    }

    #[test]
    fn the_share_consumer_is_explicit_in_group_application_id() {
        let cfg = share_consumer_config(&config(&[("fetch.max.wait.ms", "50")])).unwrap();
        assert_eq!(cfg.group_id, "app");
        assert_eq!(cfg.acknowledgement_mode, AcknowledgementMode::Explicit);
        assert_eq!(cfg.max_poll_records, 200);
        assert_eq!(cfg.fetch_max_wait, 50 * MS);
        assert_eq!(cfg.client.client_id, "app");
        let refused = |props: &[(&str, &str)]| {
            share_consumer_config(&config(props))
                .unwrap_err()
                .to_string()
        };
        let e = refused(&[("share.acknowledgement.mode", "implicit")]);
        assert!(e.contains("share.acknowledgement.mode"), "{e}");
        let e = refused(&[("group.id", "other")]);
        assert!(e.contains("group.id"), "{e}");
        // A consumer-group setting is not a share consumer's.
        let e = refused(&[("session.timeout.ms", "10000")]);
        assert!(e.contains("session.timeout.ms"), "{e}");
    }
}
