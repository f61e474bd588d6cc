//! The streams runtime's OpenTelemetry hook (feature `otel`): each record
//! is processed inside a `process` span, a child of the record's trace, and
//! every output carries that span's context in its headers (see
//! [`crate::otel`]).

use opentelemetry::Context;

use crate::consumer::ConsumerRecord;
use crate::otel::{end_process, Consumed};
use crate::producer::ProducerRecord;
use crate::streams::error::ProcessingError;

/// A record's process span, from the processor's start to its outputs.
pub(super) struct ProcessSpan(Context);

impl ProcessSpan {
    /// Starts `record`'s process span.
    pub(super) fn start(record: &ConsumerRecord) -> ProcessSpan {
        ProcessSpan(
            Consumed {
                topic: record.topic(),
                partition: record.partition.partition,
                offset: record.offset,
                headers: &record.headers,
                group: None,
                client_id: "",
            }
            .process(),
        )
    }

    /// Ends the span with the processor's result; outputs carry its
    /// context.
    pub(super) fn finish(
        self,
        mut result: Result<Vec<ProducerRecord>, ProcessingError>,
    ) -> Result<Vec<ProducerRecord>, ProcessingError> {
        match &mut result {
            Ok(outputs) => end_process(&self.0, outputs.iter_mut().map(|o| &mut o.headers), None),
            Err(e) => end_process(&self.0, std::iter::empty(), Some(&*e)),
        }
        result
    }
}
