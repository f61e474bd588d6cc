//! The consumer's side of KIP-714 client telemetry
//! (<https://cwiki.apache.org/confluence/display/KAFKA/KIP-714%3A+Client+metrics+and+observability>):
//! what it pushes, under the names the Java consumer gives the same
//! metrics (`org.apache.kafka.consumer.<group>.<metric>`: the
//! `consumer-fetch-manager-metrics` and `consumer-coordinator-metrics`
//! groups, dashes as dots), and the resource attributes. The protocol is
//! [`crate::cluster::telemetry`].

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Weak;

use super::record::ConsumerRecord;
use super::{ConsumerConfig, Shared};
use crate::cluster::telemetry::{ClientTelemetry, Reading, Sample};
use crate::cluster::Cluster;

/// Records and bytes (keys and values) `poll` handed out.
#[derive(Debug, Default)]
pub(super) struct Consumed {
    records: AtomicU64,
    bytes: AtomicU64,
}

impl Consumed {
    /// `records` are about to be returned by `poll`.
    pub(super) fn handed_out(&self, records: &[ConsumerRecord]) {
        let bytes: usize = records
            .iter()
            .map(|r| {
                r.key.as_ref().map_or(0, |k| k.len()) + r.value.as_ref().map_or(0, |v| v.len())
            })
            .sum();
        self.records.fetch_add(records.len() as u64, Relaxed);
        self.bytes.fetch_add(bytes as u64, Relaxed);
    }

    /// Records and bytes handed out so far.
    pub(super) fn totals(&self) -> (u64, u64) {
        (self.records.load(Relaxed), self.bytes.load(Relaxed))
    }
}

/// Starts telemetry when `enable.metrics.push` is on.
pub(super) fn start(
    shared: Weak<Shared>,
    cluster: &Cluster,
    config: &ConsumerConfig,
) -> Option<ClientTelemetry> {
    if !config.client.enable_metrics_push {
        return None;
    }
    let mut resource = Vec::new();
    if let Some(g) = &config.group_id {
        resource.push(("group_id".to_owned(), g.clone()));
    }
    if let Some(i) = &config.group.group_instance_id {
        resource.push(("group_instance_id".to_owned(), i.clone()));
    }
    if let Some(r) = &config.client_rack {
        resource.push(("client_rack".to_owned(), r.clone()));
    }
    ClientTelemetry::spawn(
        cluster.clone(),
        resource,
        Box::new(move || shared.upgrade().map(|s| samples(&s))),
    )
}

fn samples(shared: &Shared) -> Vec<Sample> {
    let isolation = shared.config.isolation_level;
    let state = shared.lock();
    let mut out = vec![
        Sample {
            name: "org.apache.kafka.consumer.fetch.manager.records.consumed.total",
            attributes: Vec::new(),
            reading: Reading::Total(shared.consumed.records.load(Relaxed)),
        },
        Sample {
            name: "org.apache.kafka.consumer.fetch.manager.bytes.consumed.total",
            attributes: Vec::new(),
            reading: Reading::Total(shared.consumed.bytes.load(Relaxed)),
        },
        Sample {
            name: "org.apache.kafka.consumer.coordinator.assigned.partitions",
            attributes: Vec::new(),
            reading: Reading::Gauge(state.partitions.len() as f64),
        },
    ];
    let mut max = None;
    for (tp, p) in &state.partitions {
        let Some(lag) = p.lag(isolation) else {
            continue;
        };
        max = max.max(Some(lag));
        out.push(Sample {
            name: "org.apache.kafka.consumer.fetch.manager.records.lag",
            attributes: vec![
                ("topic".to_owned(), tp.topic.to_string()),
                ("partition".to_owned(), tp.partition.to_string()),
            ],
            reading: Reading::Gauge(lag as f64),
        });
    }
    if let Some(max) = max {
        out.push(Sample {
            name: "org.apache.kafka.consumer.fetch.manager.records.lag.max",
            attributes: Vec::new(),
            reading: Reading::Gauge(max as f64),
        });
    }
    out
}
