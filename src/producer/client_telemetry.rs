//! The producer's side of KIP-714 client telemetry
//! (<https://cwiki.apache.org/confluence/display/KAFKA/KIP-714%3A+Client+metrics+and+observability>):
//! which of its counters are pushed, under the names the Java producer
//! gives them (`org.apache.kafka.producer.<metric>`, its `producer-metrics`
//! group with dashes as dots), and the resource attributes. The protocol
//! is [`crate::cluster::telemetry`].

use std::sync::{Arc, Weak};

use super::Shared;
use crate::cluster::telemetry::{ClientTelemetry, Reading, Sample};

/// Starts telemetry when `enable.metrics.push` is on.
pub(super) fn start(shared: &Arc<Shared>) -> Option<ClientTelemetry> {
    if !shared.config.client.enable_metrics_push {
        return None;
    }
    let mut resource = Vec::new();
    if let Some(id) = &shared.config.transactional_id {
        resource.push(("transactional_id".to_owned(), id.clone()));
    }
    let weak: Weak<Shared> = Arc::downgrade(shared);
    ClientTelemetry::spawn(
        shared.cluster.clone(),
        resource,
        Box::new(move || weak.upgrade().map(|s| samples(&s))),
    )
}

fn samples(shared: &Shared) -> Vec<Sample> {
    let m = shared.metrics.snapshot();
    let ms = |d: std::time::Duration| d.as_secs_f64() * 1000.0;
    let s = |name, reading| Sample {
        name,
        attributes: Vec::new(),
        reading,
    };
    vec![
        s(
            "org.apache.kafka.producer.record.send.total",
            Reading::Total(m.records_sent),
        ),
        s(
            "org.apache.kafka.producer.record.error.total",
            Reading::Total(m.record_errors),
        ),
        s(
            "org.apache.kafka.producer.batch.split.total",
            Reading::Total(m.batch_splits),
        ),
        s(
            "org.apache.kafka.producer.batch.size.avg",
            Reading::Gauge(m.batch_size_avg()),
        ),
        s(
            "org.apache.kafka.producer.request.latency.avg",
            Reading::Gauge(ms(m.request_latency_avg())),
        ),
        s(
            "org.apache.kafka.producer.request.latency.max",
            Reading::Gauge(ms(m.request_latency_max)),
        ),
        s(
            "org.apache.kafka.producer.produce.throttle.time.max",
            Reading::Gauge(ms(m.throttle_time_max)),
        ),
    ]
}
