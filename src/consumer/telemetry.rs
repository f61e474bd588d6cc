//! The consumer's hand-out hook (feature `otel`): records a receive span
//! per record `poll` hands out (see [`crate::otel`]).

use super::config::ConsumerConfig;
use super::record::ConsumerRecord;

/// `records` are about to be returned by `poll`.
pub(super) fn handed_out(config: &ConsumerConfig, records: &[ConsumerRecord]) {
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
