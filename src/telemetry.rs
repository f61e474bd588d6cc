//! Client and streams metrics through the [`metrics`](metrics_facade) facade (feature
//! `metrics`), and a Prometheus scrape endpoint.
//!
//! A [`MetricsPublisher`] reads the counters the clients keep anyway
//! ([`Producer::metrics`], the consumer's assignment and lag,
//! [`ShareConsumer::metrics`] with its acknowledgements by type,
//! [`RunningStreams::metrics`] and the application's own consumer and
//! producer) at an interval and sets the facade's
//! counters and gauges, so the record path pays nothing for it; the
//! consumer counts the records and bytes it hands out directly. Whatever
//! recorder the application installs receives them;
//! [`serve_prometheus`] installs one with an HTTP listener.
//!
//! Names follow the Java client's metric names (KIP-78's producer and
//! consumer metrics, with the connection metrics of its network layer and
//! the group metrics of `consumer-coordinator-metrics`; KIP-932's
//! `consumer-share-fetch-manager-metrics` and
//! `consumer-share-coordinator-metrics`; Kafka Streams'
//! KIP-444 names) where one exists:
//! `kafka_<client>_<java name, dashes as underscores>`, with durations in
//! seconds (`_seconds`); the `client-id` tag is the `client_id` label and
//! streams metrics carry `application_id`. docs/metrics.md has the table.
//!
//! Each client owns its counters, connection and group counters included
//! ([`ProducerMetrics::connections`], [`ConsumerMetrics`]); the publisher
//! labels each live client's with its `client.id`, so two clients with one
//! `client.id` publish into one series (give each its own, or leave
//! `client.id` unset: each client then generates its own as Java's does).
//!
//! Every value is set again at every interval; a series the publisher
//! stops setting (a partition no longer assigned, a client gone) is stale.
//! [`serve_prometheus`] drops stale gauges from its output.

use std::net::SocketAddr;
use std::time::Duration;

use metrics_facade::{counter, gauge, Label};

use crate::consumer::share::{AcknowledgeType, ShareConsumerMetrics};
use crate::consumer::{Consumer, ShareConsumer};
use crate::error::{Error, Result};
use crate::producer::{Producer, ProducerMetrics};
use crate::streams::{RunningStreams, StreamsMetrics};

pub use crate::consumer::{ConsumerMetrics, GroupStats};
pub use crate::net::ConnectionStats;

type Reader<T> = Box<dyn Fn() -> Option<T> + Send + Sync>;

/// A client or application, with its labels (`client_id` or
/// `application_id`).
enum Source {
    Producer(Vec<Label>, Reader<ProducerMetrics>),
    Consumer(Vec<Label>, Reader<Consumer>),
    Share(Vec<Label>, Reader<ShareConsumerMetrics>),
    Streams(Vec<Label>, Reader<StreamsMetrics>),
}

impl Source {
    fn kind(&self) -> &'static str {
        match self {
            Source::Producer(..) => "producer",
            Source::Consumer(..) => "consumer",
            Source::Share(..) => "share_consumer",
            Source::Streams(..) => "streams",
        }
    }

    fn labels(&self) -> &[Label] {
        match self {
            Source::Producer(l, _)
            | Source::Consumer(l, _)
            | Source::Share(l, _)
            | Source::Streams(l, _) => l,
        }
    }
}

/// Publishes the metrics of producers, consumers and streams applications
/// through the `metrics` facade, every [`interval`](Self::interval)
/// (default 5 s). It holds no client alive: a client dropped (or an
/// application shut down) stops being published, and the publisher's task
/// ends when none is left.
///
/// ```no_run
/// # async fn demo(producer: purekafka::Producer) -> purekafka::Result<()> {
/// purekafka::telemetry::serve_prometheus("127.0.0.1:9464".parse().unwrap())?;
/// purekafka::telemetry::MetricsPublisher::new()
///     .producer(&producer)
///     .spawn();
/// # Ok(())
/// # }
/// ```
#[must_use = "nothing is published until `spawn` or `publish`"]
pub struct MetricsPublisher {
    sources: Vec<Source>,
    interval: Duration,
}

impl Default for MetricsPublisher {
    fn default() -> Self {
        MetricsPublisher::new()
    }
}

impl MetricsPublisher {
    /// A publisher with no clients yet, publishing every 5 s.
    pub fn new() -> MetricsPublisher {
        MetricsPublisher {
            sources: Vec::new(),
            interval: Duration::from_secs(5),
        }
    }

    /// How often the counters are read and published (at least 10 ms).
    pub fn interval(mut self, every: Duration) -> Self {
        self.interval = every.max(Duration::from_millis(10));
        self
    }

    /// `client_id` as the `client_id` label; a second client of `kind`
    /// with the same `client.id` in this publisher gets
    /// `client_instance="2"` too (the third "3", ...), so each appears.
    fn client_labels(&self, kind: &str, client_id: String) -> Vec<Label> {
        let same = self
            .sources
            .iter()
            .filter(|s| {
                s.kind() == kind && s.labels().first().map(Label::value) == Some(&client_id)
            })
            .count();
        let mut labels = vec![Label::new("client_id", client_id)];
        if same > 0 {
            labels.push(Label::new("client_instance", (same + 1).to_string()));
        }
        labels
    }

    /// Publishes `producer`'s metrics, labelled with its `client.id`.
    pub fn producer(mut self, producer: &Producer) -> Self {
        let (client_id, read) = producer.metrics_reader();
        let labels = self.client_labels("producer", client_id);
        self.sources.push(Source::Producer(labels, Box::new(read)));
        self
    }

    /// Publishes `consumer`'s consumed records and bytes, assignment, lag,
    /// connections and (with a `group.id`) group membership, labelled with
    /// its `client.id`.
    pub fn consumer(mut self, consumer: &Consumer) -> Self {
        let labels = self.client_labels("consumer", consumer.config().client.client_id.clone());
        self.sources
            .push(Source::Consumer(labels, Box::new(consumer.downgrade())));
        self
    }

    /// Publishes a share consumer's counters and connections (KIP-932),
    /// labelled with its `client.id`.
    pub fn share_consumer(mut self, consumer: &ShareConsumer) -> Self {
        let (client_id, read) = consumer.metrics_reader();
        let labels = self.client_labels("share_consumer", client_id);
        self.sources.push(Source::Share(labels, Box::new(read)));
        self
    }

    /// Publishes a running application's metrics, labelled with its
    /// `application.id`, and those of the clients it runs on (its consumer
    /// or share consumer, and its producer: connections, group membership,
    /// commits), as the `kafka_consumer_…`, `kafka_share_consumer_…` and
    /// `kafka_producer_…` series labelled with their `client.id` and the
    /// `application_id`.
    pub fn streams(mut self, running: &RunningStreams) -> Self {
        let (application_id, read) = running.metrics_reader();
        let app = Label::new("application_id", application_id);
        let clients = running.clients();
        if let Some(consumer) = &clients.consumer {
            let mut labels =
                self.client_labels("consumer", consumer.config().client.client_id.clone());
            labels.push(app.clone());
            self.sources
                .push(Source::Consumer(labels, Box::new(consumer.downgrade())));
        }
        if let Some(consumer) = &clients.share_consumer {
            let (client_id, read) = consumer.metrics_reader();
            let mut labels = self.client_labels("share_consumer", client_id);
            labels.push(app.clone());
            self.sources.push(Source::Share(labels, Box::new(read)));
        }
        let (client_id, read_producer) = clients.producer.metrics_reader();
        let mut labels = self.client_labels("producer", client_id);
        labels.push(app.clone());
        self.sources
            .push(Source::Producer(labels, Box::new(read_producer)));
        self.sources
            .push(Source::Streams(vec![app], Box::new(read)));
        self
    }

    /// Reads every client's counters once and publishes them; forgets the
    /// clients that are gone. Returns how many are left.
    pub fn publish(&mut self) -> usize {
        self.sources.retain(|s| match s {
            Source::Producer(labels, read) => read()
                .map(|m| {
                    producer(labels, &m);
                    connections("producer", labels, &m.connections);
                })
                .is_some(),
            Source::Consumer(labels, read) => read()
                .map(|c| {
                    let m = c.metrics();
                    consumer(labels, &c, &m);
                    connections("consumer", labels, &m.connections);
                    if c.config().group_id.is_some() {
                        group(labels, &m.group);
                    }
                })
                .is_some(),
            Source::Share(labels, read) => read()
                .map(|m| {
                    share_consumer(labels, &m);
                    connections("share_consumer", labels, &m.connections);
                })
                .is_some(),
            Source::Streams(labels, read) => read().map(|m| streams(labels, &m)).is_some(),
        });
        self.sources.len()
    }

    /// Publishes now and then every interval on a tokio task, until every
    /// client is gone (or the task is aborted).
    pub fn spawn(mut self) -> tokio::task::JoinHandle<()> {
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(self.interval);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                if self.publish() == 0 {
                    return;
                }
            }
        })
    }
}

/// How long [`serve_prometheus`] keeps a gauge nobody sets any more.
pub const DEFAULT_STALE_AFTER: Duration = Duration::from_secs(60);

/// Installs a Prometheus recorder as the process's global `metrics`
/// recorder and serves its text format over HTTP on `addr` (any path),
/// on the current tokio runtime if there is one, else on a thread of its
/// own. Gauges not set for [`DEFAULT_STALE_AFTER`] (a partition's lag
/// after it was revoked, a closed client's gauges) leave the output.
///
/// Fails when a global recorder is installed already or `addr` cannot be
/// bound (not retriable as is: pick another address).
pub fn serve_prometheus(addr: SocketAddr) -> Result<()> {
    serve_prometheus_with(addr, DEFAULT_STALE_AFTER)
}

/// [`serve_prometheus`], dropping gauges not set for `stale_after`. Keep it
/// a few publisher intervals long: a live gauge is set at every interval.
pub fn serve_prometheus_with(addr: SocketAddr, stale_after: Duration) -> Result<()> {
    metrics_exporter_prometheus::PrometheusBuilder::new()
        .with_http_listener(addr)
        .idle_timeout(metrics_util::MetricKindMask::GAUGE, Some(stale_after))
        .install()
        .map_err(|e| Error::Config {
            key: "metrics-addr".into(),
            reason: format!("cannot serve Prometheus metrics on {addr}: {e}"),
        })
}

fn secs(d: Duration) -> f64 {
    d.as_secs_f64()
}

fn us(v: u64) -> f64 {
    v as f64 / 1e6
}

fn producer(labels: &[Label], m: &ProducerMetrics) {
    let l = || labels.to_vec();
    counter!("kafka_producer_record_send_total", l()).absolute(m.records_sent);
    counter!("kafka_producer_byte_total", l()).absolute(m.bytes_sent);
    counter!("kafka_producer_batch_send_total", l()).absolute(m.batches_sent);
    counter!("kafka_producer_produce_request_total", l()).absolute(m.requests);
    counter!("kafka_producer_batch_retry_total", l()).absolute(m.retries);
    counter!("kafka_producer_record_error_total", l()).absolute(m.record_errors);
    counter!("kafka_producer_epoch_bump_total", l()).absolute(m.epoch_bumps);
    counter!("kafka_producer_batch_split_total", l()).absolute(m.batch_splits);
    counter!("kafka_producer_throttled_response_total", l()).absolute(m.throttled_responses);
    gauge!("kafka_producer_request_latency_avg_seconds", l()).set(secs(m.request_latency_avg()));
    gauge!("kafka_producer_request_latency_max_seconds", l()).set(secs(m.request_latency_max));
    gauge!("kafka_producer_batch_size_avg", l()).set(m.batch_size_avg());
    gauge!("kafka_producer_records_per_batch_avg", l()).set(m.records_per_batch());
    gauge!("kafka_producer_produce_throttle_time_max_seconds", l()).set(secs(m.throttle_time_max));
}

fn consumer(l: &[Label], c: &Consumer, m: &ConsumerMetrics) {
    counter!("kafka_consumer_records_consumed_total", l.to_vec()).absolute(m.records_consumed);
    counter!("kafka_consumer_bytes_consumed_total", l.to_vec()).absolute(m.bytes_consumed);
    let assignment = c.assignment();
    gauge!("kafka_consumer_assigned_partitions", l.to_vec()).set(assignment.len() as f64);
    let mut max = None;
    for tp in &assignment {
        let Some(lag) = c.lag(tp) else { continue };
        max = max.max(Some(lag));
        let mut labels = l.to_vec();
        labels.push(Label::new("topic", tp.topic.to_string()));
        labels.push(Label::new("partition", tp.partition.to_string()));
        gauge!("kafka_consumer_records_lag", labels).set(lag as f64);
    }
    if let Some(max) = max {
        gauge!("kafka_consumer_records_lag_max", l.to_vec()).set(max as f64);
    }
}

/// A client's connection counters; the connection-level request latency
/// only for the consumers (the producer's `request-latency-avg` is its
/// Produce requests', published above).
fn connections(kind: &str, labels: &[Label], s: &ConnectionStats) {
    let name = |metric: &str| format!("kafka_{kind}_{metric}");
    let l = || labels.to_vec();
    gauge!(name("connection_count"), l()).set(s.connections as f64);
    counter!(name("connection_creation_total"), l()).absolute(s.created);
    counter!(name("connection_close_total"), l()).absolute(s.closed);
    counter!(name("request_total"), l()).absolute(s.requests);
    counter!(name("response_total"), l()).absolute(s.responses);
    counter!(name("outgoing_byte_total"), l()).absolute(s.bytes_out);
    counter!(name("incoming_byte_total"), l()).absolute(s.bytes_in);
    counter!(name("successful_authentication_total"), l()).absolute(s.successful_authentications);
    counter!(name("failed_authentication_total"), l()).absolute(s.failed_authentications);
    if kind != "producer" {
        gauge!(name("request_latency_avg_seconds"), l()).set(secs(s.request_latency_avg));
        gauge!(name("request_latency_max_seconds"), l()).set(secs(s.request_latency_max));
    }
}

fn share_consumer(labels: &[Label], m: &ShareConsumerMetrics) {
    let l = || labels.to_vec();
    counter!("kafka_share_consumer_records_consumed_total", l()).absolute(m.records_consumed);
    counter!("kafka_share_consumer_bytes_consumed_total", l()).absolute(m.bytes_consumed);
    counter!("kafka_share_consumer_heartbeat_total", l()).absolute(m.heartbeats);
    counter!("kafka_share_consumer_rebalance_total", l()).absolute(m.rebalances);
    counter!("kafka_share_consumer_records_fetched_total", l()).absolute(m.records_fetched);
    counter!("kafka_share_consumer_fetch_request_total", l()).absolute(m.fetch_requests);
    gauge!("kafka_share_consumer_fetch_latency_avg_seconds", l()).set(secs(m.fetch_latency_avg));
    gauge!("kafka_share_consumer_fetch_latency_max_seconds", l()).set(secs(m.fetch_latency_max));
    let (sent, failed) = (&m.acknowledgements_sent, &m.acknowledgement_errors);
    counter!("kafka_share_consumer_acknowledgements_send_total", l()).absolute(sent.total());
    counter!("kafka_share_consumer_acknowledgements_error_total", l()).absolute(failed.total());
    for (ty, name) in [
        (AcknowledgeType::Accept, "accept"),
        (AcknowledgeType::Release, "release"),
        (AcknowledgeType::Reject, "reject"),
    ] {
        let mut labels = l();
        labels.push(Label::new("type", name));
        counter!(
            "kafka_share_consumer_acknowledgements_send_by_type_total",
            labels.clone()
        )
        .absolute(sent.of(ty));
        counter!(
            "kafka_share_consumer_acknowledgements_error_by_type_total",
            labels
        )
        .absolute(failed.of(ty));
    }
}

/// A consumer's group counters.
fn group(labels: &[Label], s: &GroupStats) {
    let l = || labels.to_vec();
    counter!("kafka_consumer_rebalance_total", l()).absolute(s.rebalances);
    counter!("kafka_consumer_failed_rebalance_total", l()).absolute(s.failed_rebalances);
    gauge!("kafka_consumer_rebalance_latency_avg_seconds", l()).set(secs(s.rebalance_latency_avg));
    gauge!("kafka_consumer_rebalance_latency_max_seconds", l()).set(secs(s.rebalance_latency_max));
    gauge!("kafka_consumer_rebalance_latency_total_seconds", l())
        .set(secs(s.rebalance_latency_total));
    // Java reports -1 before the first rebalance.
    gauge!("kafka_consumer_last_rebalance_seconds_ago", l())
        .set(s.last_rebalance_ago.map_or(-1.0, |d| d.as_secs() as f64));
    counter!("kafka_consumer_heartbeat_total", l()).absolute(s.heartbeats);
    counter!("kafka_consumer_commit_total", l()).absolute(s.commits);
    gauge!("kafka_consumer_commit_latency_avg_seconds", l()).set(secs(s.commit_latency_avg));
    gauge!("kafka_consumer_commit_latency_max_seconds", l()).set(secs(s.commit_latency_max));
}

fn streams(labels: &[Label], m: &StreamsMetrics) {
    let l = || labels.to_vec();
    counter!("kafka_streams_process_total", l()).absolute(m.processed);
    counter!("kafka_streams_commit_total", l()).absolute(m.commits);
    counter!("kafka_streams_commit_failure_total", l()).absolute(m.commit_failures);
    counter!("kafka_streams_retry_in_place_total", l()).absolute(m.retried_in_place);
    counter!("kafka_streams_retry_lane_handed_total", l()).absolute(m.handed_to_retry_lane);
    counter!("kafka_streams_retry_lane_succeeded_total", l()).absolute(m.retry_lane_succeeded);
    counter!("kafka_streams_retry_lane_requeued_total", l()).absolute(m.retry_lane_requeued);
    counter!("kafka_streams_dead_letter_total", l()).absolute(m.dead_lettered);
    gauge!("kafka_streams_in_flight", l()).set(m.in_flight as f64);
    gauge!("kafka_streams_retry_lane_held", l()).set(m.retry_lane_held as f64);
    gauge!("kafka_streams_process_latency_avg_seconds", l()).set(us(m.processing_latency_mean_us));
    gauge!("kafka_streams_process_latency_max_seconds", l()).set(us(m.processing_latency_max_us));
    gauge!("kafka_streams_process_latency_p50_seconds", l()).set(us(m.processing_latency_p50_us));
    gauge!("kafka_streams_process_latency_p99_seconds", l()).set(us(m.processing_latency_p99_us));
    gauge!("kafka_streams_commit_latency_max_seconds", l()).set(us(m.commit_latency_max_us));
    gauge!("kafka_streams_commit_latency_p50_seconds", l()).set(us(m.commit_latency_p50_us));
    gauge!("kafka_streams_commit_latency_p99_seconds", l()).set(us(m.commit_latency_p99_us));
    for p in &m.partitions {
        let mut labels = l();
        labels.push(Label::new("topic", p.partition.topic.to_string()));
        labels.push(Label::new("partition", p.partition.partition.to_string()));
        let lb = || labels.clone();
        if let Some(lag) = p.lag {
            gauge!("kafka_streams_records_lag", lb()).set(lag as f64);
        }
        if let Some(w) = p.watermark {
            gauge!("kafka_streams_watermark_offset", lb()).set(w as f64);
        }
        if let Some(c) = p.committed {
            gauge!("kafka_streams_committed_offset", lb()).set(c as f64);
        }
        gauge!("kafka_streams_partition_buffered", lb()).set(p.buffered as f64);
        gauge!("kafka_streams_partition_in_flight", labels).set(p.in_flight as f64);
    }
}
