//! The consumer's hand-out hook (features `metrics` and `otel`): counts the
//! records and bytes `poll` hands out (the Java consumer's
//! `records-consumed-total` and `bytes-consumed-total`) and records a
//! receive span per record (see [`crate::otel`]).

use super::config::ConsumerConfig;
use super::record::ConsumerRecord;

/// `records` are about to be returned by `poll`.
pub(super) fn handed_out(config: &ConsumerConfig, records: &[ConsumerRecord]) {
    #[cfg(feature = "metrics")]
    {
        let client = config.client.client_id.clone();
        let bytes: usize = records
            .iter()
            .map(|r| {
                r.key.as_ref().map_or(0, |k| k.len()) + r.value.as_ref().map_or(0, |v| v.len())
            })
            .sum();
        metrics_facade::counter!("kafka_consumer_records_consumed_total", "client_id" => client.clone())
            .increment(records.len() as u64);
        metrics_facade::counter!("kafka_consumer_bytes_consumed_total", "client_id" => client)
            .increment(bytes as u64);
    }
    #[cfg(feature = "otel")]
    for r in records {
        crate::otel::Consumed {
            topic: r.topic(),
            partition: r.partition.partition,
            offset: r.offset,
            headers: &r.headers,
            group: config.group_id.as_deref(),
            client_id: &config.client.client_id,
        }
        .received();
    }
}
