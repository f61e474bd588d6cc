//! Client and streams metrics through the [`metrics`](metrics_facade) facade (feature
//! `metrics`), and a Prometheus scrape endpoint.
//!
//! A [`MetricsPublisher`] reads the counters the clients keep anyway
//! ([`Producer::metrics`], the consumer's assignment and lag,
//! [`RunningStreams::metrics`]) at an interval and sets the facade's
//! counters and gauges, so the record path pays nothing for it; the
//! consumer counts the records and bytes it hands out directly. Whatever
//! recorder the application installs receives them;
//! [`serve_prometheus`] installs one with an HTTP listener.
//!
//! Names follow the Java client's metric names (KIP-78's producer and
//! consumer metrics, with the connection metrics of its network layer and
//! the group metrics of `consumer-coordinator-metrics`; Kafka Streams'
//! KIP-444 names) where one exists:
//! `kafka_<client>_<java name, dashes as underscores>`, with durations in
//! seconds (`_seconds`); the `client-id` tag is the `client_id` label and
//! streams metrics carry `application_id`. docs/metrics.md has the table.
//!
//! Connection and group counters are kept per `client.id`, as Java names
//! its metrics: [`connection_stats`] and [`group_stats`] read them without
//! the exporter.
//!
//! Every value is set again at every interval; a series the publisher
//! stops setting (a partition no longer assigned, a client gone) is stale.
//! [`serve_prometheus`] drops stale gauges from its output.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use metrics_facade::{counter, gauge, Label};

use crate::consumer::group::metrics::GroupMetrics;
use crate::consumer::share::ShareConsumerMetrics;
use crate::consumer::{Consumer, ShareConsumer};
use crate::error::{Error, Result};
pub use crate::net::ConnectionStats;
use crate::producer::{Producer, ProducerMetrics};
use crate::streams::{RunningStreams, StreamsMetrics};

pub use crate::consumer::group::metrics::GroupStats;

type Reader<T> = Box<dyn Fn() -> Option<T> + Send + Sync>;

enum Source {
    Producer(Client, Reader<ProducerMetrics>),
    Consumer(Client, Reader<Consumer>),
    Share(Client, Reader<ShareConsumerMetrics>),
    Streams(Vec<Label>, Reader<StreamsMetrics>),
}

/// A client's labels, `client.id` and group counters (once it has joined).
struct Client {
    labels: Vec<Label>,
    client_id: String,
    group: Option<Arc<GroupMetrics>>,
}

impl Client {
    fn new(client_id: String) -> Client {
        Client {
            labels: vec![Label::new("client_id", client_id.clone())],
            client_id,
            group: None,
        }
    }
}

/// The connection counters of every live client with `client.id`
/// `client_id` (the Java client's connection metrics; summed, as Java's
/// metrics of two clients with one `client.id` collide), or `None` when
/// no client with that id is alive.
pub fn connection_stats(client_id: &str) -> Option<ConnectionStats> {
    crate::net::metrics::connection_stats(client_id)
}

/// The group counters (rebalances, heartbeats, commits) of the consumers
/// with `client.id` `client_id` that are or were members of a group, or
/// `None` when no such member is alive. Both group protocols count.
pub fn group_stats(client_id: &str) -> Option<GroupStats> {
    crate::consumer::group::metrics::group_metrics(client_id).map(|m| m.stats())
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

    /// Publishes `producer`'s metrics, labelled with its `client.id`.
    pub fn producer(mut self, producer: &Producer) -> Self {
        let (client_id, read) = producer.metrics_reader();
        self.sources
            .push(Source::Producer(Client::new(client_id), Box::new(read)));
        self
    }

    /// Publishes `consumer`'s assignment, lag, connections and group
    /// membership, labelled with its `client.id` (it counts consumed
    /// records and bytes itself).
    pub fn consumer(mut self, consumer: &Consumer) -> Self {
        let client = Client::new(consumer.config().client.client_id.clone());
        self.sources
            .push(Source::Consumer(client, Box::new(consumer.downgrade())));
        self
    }

    /// Publishes a share consumer's counters and connections (KIP-932),
    /// labelled with its `client.id`.
    pub fn share_consumer(mut self, consumer: &ShareConsumer) -> Self {
        let (client_id, read) = consumer.metrics_reader();
        self.sources
            .push(Source::Share(Client::new(client_id), Box::new(read)));
        self
    }

    /// Publishes a running application's metrics, labelled with its
    /// `application.id`.
    pub fn streams(mut self, running: &RunningStreams) -> Self {
        let (application_id, read) = running.metrics_reader();
        self.sources.push(Source::Streams(
            vec![Label::new("application_id", application_id)],
            Box::new(read),
        ));
        self
    }

    /// Reads every client's counters once and publishes them; forgets the
    /// clients that are gone. Returns how many are left.
    pub fn publish(&mut self) -> usize {
        self.sources.retain_mut(|s| match s {
            Source::Producer(client, read) => read()
                .map(|m| {
                    producer(&client.labels, &m);
                    connections("producer", client);
                })
                .is_some(),
            Source::Consumer(client, read) => read()
                .map(|c| {
                    consumer(&client.labels, &c);
                    connections("consumer", client);
                    group(client);
                })
                .is_some(),
            Source::Share(client, read) => read()
                .map(|m| {
                    share_consumer(&client.labels, &m);
                    connections("share_consumer", client);
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

fn consumer(l: &[Label], c: &Consumer) {
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

/// The connection counters of `client`'s `client.id`; the connection-level
/// request latency only for the consumer (the producer's
/// `request-latency-avg` is its Produce requests', published above).
fn connections(kind: &str, client: &Client) {
    let Some(s) = connection_stats(&client.client_id) else {
        return;
    };
    let name = |metric: &str| format!("kafka_{kind}_{metric}");
    let l = || client.labels.clone();
    gauge!(name("connection_count"), l()).set(s.connections as f64);
    counter!(name("connection_creation_total"), l()).absolute(s.created);
    counter!(name("connection_close_total"), l()).absolute(s.closed);
    counter!(name("request_total"), l()).absolute(s.requests);
    counter!(name("response_total"), l()).absolute(s.responses);
    counter!(name("outgoing_byte_total"), l()).absolute(s.bytes_out);
    counter!(name("incoming_byte_total"), l()).absolute(s.bytes_in);
    counter!(name("successful_authentication_total"), l()).absolute(s.successful_authentications);
    counter!(name("failed_authentication_total"), l()).absolute(s.failed_authentications);
    if kind == "consumer" {
        gauge!(name("request_latency_avg_seconds"), l()).set(secs(s.request_latency_avg));
        gauge!(name("request_latency_max_seconds"), l()).set(secs(s.request_latency_max));
    }
}

fn share_consumer(labels: &[Label], m: &ShareConsumerMetrics) {
    let l = || labels.to_vec();
    counter!("kafka_share_consumer_records_consumed_total", l()).absolute(m.records_consumed);
    counter!("kafka_share_consumer_bytes_consumed_total", l()).absolute(m.bytes_consumed);
    counter!("kafka_share_consumer_heartbeat_total", l()).absolute(m.heartbeats);
}

/// The consumer's group counters, once it has been a member.
fn group(client: &mut Client) {
    if client.group.is_none() {
        client.group = crate::consumer::group::metrics::group_metrics(&client.client_id);
    }
    let Some(g) = &client.group else { return };
    let s = g.stats();
    let l = || client.labels.clone();
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
