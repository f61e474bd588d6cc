//! OpenTelemetry traces for Kafka records (feature `otel`): spans named and
//! attributed after the OpenTelemetry messaging semantic conventions (the
//! general messaging spans and their Kafka page,
//! <https://opentelemetry.io/docs/specs/semconv/messaging/kafka/>), and the
//! W3C Trace Context (<https://www.w3.org/TR/trace-context/>) carried in
//! record headers `traceparent` and `tracestate`.
//!
//! What the clients do with it, once the feature is on:
//! - the producer starts a `send {topic}` span (kind producer) per record,
//!   as a child of the context in the record's own `traceparent` header if
//!   it has one, else of [`Context::current`]; it writes the span's context
//!   into the record's headers and ends the span at delivery (acknowledged
//!   or failed);
//! - the consumer records a `poll {topic}` span (kind consumer, operation
//!   type `receive`) per record it hands out, a child of the record's
//!   `traceparent`;
//! - the streams runtime runs each record inside a `process {topic}` span
//!   (kind consumer, a child of the record's `traceparent`) and writes that
//!   span's context into the headers of every output, so the outputs' send
//!   spans, and what consumes them, join the input's trace.
//!
//! ```no_run
//! # async fn demo(producer: purekafka::Producer, consumer: purekafka::Consumer) -> purekafka::Result<()> {
//! use opentelemetry::context::FutureExt;
//! use opentelemetry::trace::{TraceContextExt, Tracer};
//! use opentelemetry::{global, Context};
//!
//! // Any SDK and exporter: OTLP in production, the in-memory one here.
//! let provider = opentelemetry_sdk::trace::SdkTracerProvider::builder()
//!     .with_simple_exporter(opentelemetry_sdk::trace::InMemorySpanExporter::default())
//!     .build();
//! global::set_tracer_provider(provider);
//!
//! // Records sent in a context join its trace (otherwise each starts one).
//! let request = Context::current_with_span(global::tracer("my-app").start("request"));
//! let record = purekafka::ProducerRecord::new("orders").value("qty=2");
//! producer.send(record).with_context(request).await?;
//!
//! // A consumed record's context, to start your own spans under it.
//! for record in consumer.poll(std::time::Duration::from_secs(1)).await? {
//!     let cx = purekafka::otel::extract(&Context::current(), &record.headers);
//!     let _span = global::tracer("my-app").start_with_context("bill", &cx);
//! }
//! # Ok(())
//! # }
//! ```
//!
//! Spans go to the global tracer provider
//! ([`opentelemetry::global::set_tracer_provider`]); without one they cost
//! a no-op span each. The semantic conventions' older operation name
//! `publish` is `send` in their current version, used here.

use bytes::Bytes;
use opentelemetry::global::{self, BoxedSpan};
use opentelemetry::trace::{
    SpanContext, SpanId, SpanKind, Status, TraceContextExt, TraceFlags, TraceId, TraceState, Tracer,
};
use opentelemetry::{Context, KeyValue};

use crate::error::Error;
use crate::protocol::records::RecordHeader;

/// The W3C Trace Context header with the trace id, parent span id and
/// flags.
pub const TRACEPARENT: &str = "traceparent";
/// The W3C Trace Context header with vendor-specific state.
pub const TRACESTATE: &str = "tracestate";
/// The instrumentation scope name of every span purekafka starts.
pub const TRACER_NAME: &str = "purekafka";

/// The remote span context a record's `traceparent` (and `tracestate`)
/// headers carry, if they hold a valid one.
pub fn span_context_from_headers(headers: &[RecordHeader]) -> Option<SpanContext> {
    let value = |name: &str| {
        headers
            .iter()
            .rev()
            .find(|h| h.key.as_ref() == name.as_bytes())
            .and_then(|h| h.value.as_ref())
            .and_then(|v| std::str::from_utf8(v).ok())
    };
    let state = value(TRACESTATE)
        .and_then(|s| s.parse::<TraceState>().ok())
        .unwrap_or_default();
    parse_traceparent(value(TRACEPARENT)?, state)
}

/// The context a record's headers carry: `parent` with the record's remote
/// span context as its span, or `parent` unchanged when the headers carry
/// none. Use it to start your own spans under a consumed record's trace.
pub fn extract(parent: &Context, headers: &[RecordHeader]) -> Context {
    match span_context_from_headers(headers) {
        Some(sc) => parent.with_remote_span_context(sc),
        None => parent.clone(),
    }
}

/// Writes `cx`'s span context into `headers` as `traceparent` (and
/// `tracestate` when not empty), replacing any earlier ones; does nothing
/// when `cx` has no valid span context.
pub fn inject(cx: &Context, headers: &mut Vec<RecordHeader>) {
    let span = cx.span();
    let sc = span.span_context();
    if !sc.is_valid() {
        return;
    }
    headers.retain(|h| h.key.as_ref() != TRACEPARENT.as_bytes() && h.key != TRACESTATE.as_bytes());
    headers.push(RecordHeader::new(
        TRACEPARENT,
        Some(Bytes::from(format_traceparent(sc))),
    ));
    let state = sc.trace_state().header();
    if !state.is_empty() {
        headers.push(RecordHeader::new(TRACESTATE, Some(Bytes::from(state))));
    }
}

/// `00-{trace id}-{span id}-{flags}` (version 00 of the W3C format).
fn format_traceparent(sc: &SpanContext) -> String {
    format!(
        "00-{:032x}-{:016x}-{:02x}",
        sc.trace_id(),
        sc.span_id(),
        sc.trace_flags() & TraceFlags::SAMPLED
    )
}

/// Parses a `traceparent` value. Versions above 00 are read by their first
/// four fields, as the W3C spec asks; version ff, all-zero ids and
/// malformed fields are rejected.
fn parse_traceparent(value: &str, state: TraceState) -> Option<SpanContext> {
    let mut parts = value.trim().split('-');
    let (version, trace, span, flags) =
        (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    let hex = |s: &str, len: usize| s.len() == len && s.bytes().all(|b| b.is_ascii_hexdigit());
    if !hex(version, 2) || version == "ff" || !hex(trace, 32) || !hex(span, 16) || !hex(flags, 2) {
        return None;
    }
    // Version 00 has exactly four fields; later ones may add more.
    if version == "00" && parts.next().is_some() {
        return None;
    }
    if trace.bytes().any(|b| b.is_ascii_uppercase()) || span.bytes().any(|b| b.is_ascii_uppercase())
    {
        return None;
    }
    let trace_id = TraceId::from_hex(trace).ok()?;
    let span_id = SpanId::from_hex(span).ok()?;
    let flags = u8::from_str_radix(flags, 16).ok()?;
    if trace_id == TraceId::INVALID || span_id == SpanId::INVALID {
        return None;
    }
    Some(SpanContext::new(
        trace_id,
        span_id,
        TraceFlags::new(flags) & TraceFlags::SAMPLED,
        true,
        state,
    ))
}

fn start(name: String, kind: SpanKind, parent: &Context, attributes: Vec<KeyValue>) -> BoxedSpan {
    let tracer = global::tracer(TRACER_NAME);
    tracer
        .span_builder(name)
        .with_kind(kind)
        .with_attributes(attributes)
        .start_with_context(&tracer, parent)
}

fn common(operation: &'static str, kind: &'static str, topic: &str) -> Vec<KeyValue> {
    vec![
        KeyValue::new("messaging.system", "kafka"),
        KeyValue::new("messaging.operation.name", operation),
        KeyValue::new("messaging.operation.type", kind),
        KeyValue::new("messaging.destination.name", topic.to_owned()),
    ]
}

/// A record's send span, open until its delivery.
pub(crate) struct SendSpan(Context);

impl SendSpan {
    /// Starts the span of a record about to be sent to `topic` and writes
    /// its context into the record's `headers`.
    pub(crate) fn start(
        topic: &str,
        partition: Option<i32>,
        client_id: &str,
        headers: &mut Vec<RecordHeader>,
    ) -> SendSpan {
        let parent = extract(&Context::current(), headers);
        let mut attributes = common("send", "send", topic);
        attributes.push(KeyValue::new("messaging.client.id", client_id.to_owned()));
        if let Some(p) = partition {
            attributes.push(KeyValue::new(
                "messaging.destination.partition.id",
                p.to_string(),
            ));
        }
        let span = start(
            format!("send {topic}"),
            SpanKind::Producer,
            &parent,
            attributes,
        );
        let cx = parent.with_span(span);
        inject(&cx, headers);
        SendSpan(cx)
    }

    /// Ends the span: acknowledged at `offset` (-1 when unknown) of
    /// `partition`, or failed with `error`.
    pub(crate) fn delivered(self, outcome: std::result::Result<(i32, i64), &Error>) {
        let span = self.0.span();
        match outcome {
            Ok((partition, offset)) => {
                span.set_attribute(KeyValue::new(
                    "messaging.destination.partition.id",
                    partition.to_string(),
                ));
                if offset >= 0 {
                    span.set_attribute(KeyValue::new("messaging.kafka.offset", offset));
                }
            }
            Err(e) => {
                span.set_attribute(KeyValue::new("error.type", error_type(e)));
                span.set_status(Status::error(e.to_string()));
            }
        }
        span.end();
    }
}

/// The `error.type` of a failed operation: the Kafka error code's name
/// when the broker gave one, else the error's kind.
fn error_type(e: &Error) -> &'static str {
    e.kafka_code().map_or("_OTHER", |code| code.name())
}

/// Where a consumed record came from, for its spans.
pub(crate) struct Consumed<'a> {
    pub topic: &'a str,
    pub partition: i32,
    pub offset: i64,
    pub headers: &'a [RecordHeader],
    pub group: Option<&'a str>,
    pub client_id: &'a str,
}

impl Consumed<'_> {
    fn attributes(&self, operation: &'static str, kind: &'static str) -> Vec<KeyValue> {
        let mut a = common(operation, kind, self.topic);
        a.push(KeyValue::new(
            "messaging.destination.partition.id",
            self.partition.to_string(),
        ));
        a.push(KeyValue::new("messaging.kafka.offset", self.offset));
        if !self.client_id.is_empty() {
            a.push(KeyValue::new(
                "messaging.client.id",
                self.client_id.to_owned(),
            ));
        }
        if let Some(g) = self.group {
            a.push(KeyValue::new("messaging.consumer.group.name", g.to_owned()));
        }
        a
    }

    /// Records the `poll {topic}` span of a record handed out by `poll`:
    /// a child of the record's trace, ended at once.
    pub(crate) fn received(&self) {
        let parent = extract(&Context::current(), self.headers);
        let mut span = start(
            format!("poll {}", self.topic),
            SpanKind::Consumer,
            &parent,
            self.attributes("poll", "receive"),
        );
        opentelemetry::trace::Span::end(&mut span);
    }

    /// Starts the `process {topic}` span of a record, a child of its
    /// trace; the context returned carries it.
    pub(crate) fn process(&self) -> Context {
        let parent = extract(&Context::current(), self.headers);
        let span = start(
            format!("process {}", self.topic),
            SpanKind::Consumer,
            &parent,
            self.attributes("process", "process"),
        );
        parent.with_span(span)
    }
}

/// Ends a process span started by [`Consumed::process`]: writes its
/// context into every output's headers (so their send spans are its
/// children) and marks a failure.
pub(crate) fn end_process<'a>(
    cx: &Context,
    outputs: impl Iterator<Item = &'a mut Vec<RecordHeader>>,
    error: Option<&dyn std::fmt::Display>,
) {
    for headers in outputs {
        inject(cx, headers);
    }
    let span = cx.span();
    if let Some(e) = error {
        span.set_attribute(KeyValue::new("error.type", "_OTHER"));
        span.set_status(Status::error(e.to_string()));
    }
    span.end();
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(tp: &str) -> Vec<RecordHeader> {
        vec![RecordHeader::new(
            TRACEPARENT,
            Some(Bytes::from(tp.to_owned())),
        )]
    }

    #[test]
    fn traceparent_round_trip() {
        let h = headers("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01");
        let sc = span_context_from_headers(&h).expect("valid");
        assert_eq!(
            sc.trace_id(),
            TraceId::from_hex("0af7651916cd43dd8448eb211c80319c").unwrap()
        );
        assert_eq!(sc.span_id(), SpanId::from_hex("b7ad6b7169203331").unwrap());
        assert!(sc.is_sampled());
        assert!(sc.is_remote());
        let mut out = vec![RecordHeader::new("other", None)];
        inject(&Context::new().with_remote_span_context(sc), &mut out);
        assert_eq!(out.len(), 2, "the other header is kept");
        assert_eq!(out[1], h[0]);
    }

    #[test]
    fn tracestate_travels_with_traceparent() {
        let mut h = headers("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00");
        h.push(RecordHeader::new(
            TRACESTATE,
            Some(Bytes::from_static(b"congo=t61rcWkgMzE")),
        ));
        let sc = span_context_from_headers(&h).expect("valid");
        assert!(!sc.is_sampled());
        assert_eq!(sc.trace_state().get("congo"), Some("t61rcWkgMzE"));
        let mut out = Vec::new();
        inject(&Context::new().with_remote_span_context(sc), &mut out);
        assert_eq!(out, h);
    }

    #[test]
    fn malformed_traceparents_are_ignored() {
        for bad in [
            "",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331",
            "00-00000000000000000000000000000000-b7ad6b7169203331-01",
            "00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01",
            "ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
            "00-0AF7651916CD43DD8448EB211C80319C-b7ad6b7169203331-01",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-extra",
            "00-0af7651916cd43dd8448eb211c8031-b7ad6b7169203331-01",
            "00-0af7651916cd43dd8448eb211c80319g-b7ad6b7169203331-01",
        ] {
            assert!(
                span_context_from_headers(&headers(bad)).is_none(),
                "{bad:?}"
            );
        }
        // A later version may carry more fields.
        let later = "01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-extra";
        assert!(span_context_from_headers(&headers(later)).is_some());
        // No headers, or a null value: nothing.
        assert!(span_context_from_headers(&[]).is_none());
        assert!(span_context_from_headers(&[RecordHeader::new(TRACEPARENT, None)]).is_none());
    }

    #[test]
    fn invalid_context_injects_nothing() {
        let mut out = headers("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01");
        inject(&Context::new(), &mut out);
        assert_eq!(out.len(), 1);
    }
}
