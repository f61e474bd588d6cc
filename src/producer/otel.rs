//! The producer's OpenTelemetry hook (feature `otel`): a send span per
//! record, its context written into the record's headers, ended at
//! delivery (see [`crate::otel`]).

use std::sync::{Arc, Mutex};

use super::accumulator::Completion;
use super::record::{DeliveryReceiver, ProducerRecord};
use crate::error::Error;
use crate::otel::SendSpan;
use crate::TopicPartition;

/// Starts `record`'s send span and writes its context into the record's
/// headers.
pub(super) fn start(mut record: ProducerRecord, client_id: &str) -> (ProducerRecord, SendSpan) {
    let span = SendSpan::start(
        &record.topic,
        record.partition,
        client_id,
        &mut record.headers,
    );
    (record, span)
}

/// Wraps `done` so that the record's delivery ends `span`.
pub(super) fn until_delivered(span: SendSpan, done: Completion) -> Completion {
    match done {
        Completion::Channel(tx) => Completion::Callback(Box::new(move |r| {
            span.delivered(outcome(&r));
            let _ = tx.send(r);
        })),
        Completion::Callback(f) => Completion::Callback(Box::new(move |r| {
            span.delivered(outcome(&r));
            f(r)
        })),
        Completion::Tagged(inner, tag) => Completion::Tagged(
            Arc::new(TracedReceiver {
                inner,
                span: Mutex::new(Some(span)),
            }),
            tag,
        ),
    }
}

fn outcome(r: &crate::error::Result<super::RecordMetadata>) -> Result<(i32, i64), &Error> {
    r.as_ref().map(|m| (m.partition.partition, m.offset))
}

/// A tagged record's receiver with its span: ends the span, then reports
/// to the caller's receiver. One per record, so the run of tags it gets
/// is this record's.
struct TracedReceiver {
    inner: Arc<dyn DeliveryReceiver>,
    span: Mutex<Option<SendSpan>>,
}

impl DeliveryReceiver for TracedReceiver {
    fn delivered(&self, partition: &TopicPartition, tags: &[u64], result: Result<(), &Error>) {
        self.delivered_through(partition, tags, result.map(|()| -1));
    }

    fn delivered_through(
        &self,
        partition: &TopicPartition,
        tags: &[u64],
        result: Result<i64, &Error>,
    ) {
        let span = self.span.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(span) = span {
            span.delivered(result.map(|offset| (partition.partition, offset)));
        }
        self.inner.delivered_through(partition, tags, result);
    }
}
