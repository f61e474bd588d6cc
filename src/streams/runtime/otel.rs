//! The streams runtime's OpenTelemetry hook (feature `otel`): each record
//! is processed inside a `process` span, a child of the record's trace,
//! which is the current context while the processor runs (so the user's
//! own spans are its children), and every output carries that span's
//! context in its headers (see [`crate::otel`]).

use opentelemetry::context::{FutureExt, WithContext};
use opentelemetry::Context;

use crate::consumer::ConsumerRecord;
use crate::otel::{end_process, Consumed};
use crate::producer::ProducerRecord;
use crate::streams::error::ProcessingError;
use crate::streams::topology::Records;

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

    /// Calls `f` (the processor's synchronous part) with the span as the
    /// current context.
    pub(super) fn current<R>(&self, f: impl FnOnce() -> R) -> R {
        let _current = self.0.clone().attach();
        f()
    }

    /// `processing` polled with the span as the current context.
    pub(super) fn instrument<F: std::future::Future>(&self, processing: F) -> WithContext<F> {
        processing.with_context(self.0.clone())
    }

    /// Ends the span with the processor's result; outputs carry its
    /// context.
    pub(super) fn finish(
        self,
        mut result: Result<Records<ProducerRecord>, ProcessingError>,
    ) -> Result<Records<ProducerRecord>, ProcessingError> {
        match &mut result {
            Ok(outputs) => end_process(&self.0, outputs.iter_mut().map(|o| &mut o.headers), None),
            Err(e) => end_process(&self.0, std::iter::empty(), Some(&*e)),
        }
        result
    }
}
