//! The `otel` feature against the real broker: three records produced under
//! one root span, passed through a streams application and consumed form one
//! trace, every span with the expected parent (the SDK's in-memory
//! exporter receives them); spans the processor starts itself, in its
//! synchronous part and while its future runs, are children of the process
//! span.
//!
//! A target of its own: the test installs the process-wide tracer provider,
//! and in the `integration` target every concurrent test's records would
//! then carry trace headers.

// The shared helpers; this target uses a few of them.
#[allow(dead_code)]
#[path = "support/mod.rs"]
mod support;

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use opentelemetry::context::FutureExt;
use opentelemetry::trace::{SpanId, SpanKind, TraceContextExt, Tracer, TracerProvider};
use opentelemetry::{Context, Value};
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider, SpanData};
use purekafka::producer::serializer::StringSerializer;
use purekafka::streams::{Streams, StreamsConfig, StringDeserializer};
use purekafka::{Cluster, Consumer, ConsumerConfig, Producer, ProducerConfig, ProducerRecord};
use tokio::time::Instant;

const N: usize = 3;

fn attr<'a>(s: &'a SpanData, key: &str) -> Option<&'a Value> {
    s.attributes
        .iter()
        .find(|kv| kv.key.as_str() == key)
        .map(|kv| &kv.value)
}

fn named<'a>(spans: &'a [SpanData], name: &str) -> Vec<&'a SpanData> {
    spans.iter().filter(|s| s.name == name).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_trace_from_produce_through_streams_to_consume() {
    let Some(bootstrap) = support::bootstrap("otel") else {
        return;
    };
    support::trace();
    let cluster = Cluster::connect(support::config(&bootstrap))
        .await
        .expect("connect");
    let input = support::unique_topic("otel");
    support::create_topic(&cluster, &input, 1).await;
    let output = format!("{input}-out");
    support::create_topic(&cluster, &output, 1).await;
    let exporter = InMemorySpanExporter::default();
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(exporter.clone())
        .build();
    opentelemetry::global::set_tracer_provider(provider.clone());

    // The records are sent under one root span: one trace.
    let tracer = provider.tracer("test");
    let root = tracer.start("test-root");
    let root_cx = Context::current_with_span(root);
    let root_sc = root_cx.span().span_context().clone();
    let producer = Producer::connect(
        ProducerConfig::builder()
            .bootstrap_servers(&bootstrap)
            .build()
            .unwrap(),
    )
    .await
    .unwrap();
    for i in 0..N {
        let r = ProducerRecord::new(&input)
            .key(format!("k{i}"))
            .value(format!("v{i}"));
        let delivery = producer
            .send(r)
            .with_context(root_cx.clone())
            .await
            .unwrap();
        delivery.await.unwrap();
    }

    let app = support::unique_topic("otel-app");
    let running = Streams::topology(
        StreamsConfig::builder(&app, &bootstrap)
            .commit_interval(Duration::from_millis(200))
            .consumer_property("auto.offset.reset", "earliest")
            .build()
            .unwrap(),
    )
    .source(input.as_str(), StringDeserializer, StringDeserializer)
    .map_async(|r| {
        // The user's own spans, under whatever context is current.
        let tracer = opentelemetry::global::tracer("user");
        drop(tracer.start("user-sync"));
        async move {
            tokio::task::yield_now().await;
            drop(opentelemetry::global::tracer("user").start("user-async"));
            Ok(r)
        }
    })
    .to(output.as_str(), StringSerializer, StringSerializer)
    .build()
    .start()
    .await
    .unwrap();

    let consumer = Consumer::connect(
        ConsumerConfig::from_properties([
            ("bootstrap.servers", bootstrap.as_str()),
            ("group.id", format!("{app}-reader").as_str()),
            ("auto.offset.reset", "earliest"),
        ])
        .unwrap(),
    )
    .await
    .unwrap();
    consumer.subscribe([output.as_str()]).unwrap();
    let mut consumed = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    while consumed.len() < N {
        assert!(
            Instant::now() < deadline,
            "consumed {} of {N}",
            consumed.len()
        );
        consumed.extend(consumer.poll(Duration::from_millis(500)).await.unwrap());
    }
    running.shutdown().await.unwrap();
    consumer.close().await.unwrap();

    // Every span of the chain has ended (sends at their delivery).
    let ours = |s: &&SpanData| s.span_context.trace_id() == root_sc.trace_id();
    let spans: Vec<SpanData> = loop {
        let all = exporter.get_finished_spans().unwrap();
        let spans: Vec<SpanData> = all.iter().filter(ours).cloned().collect();
        let done = named(&spans, &format!("send {output}")).len() == N
            && named(&spans, &format!("poll {output}")).len() == N;
        if done {
            break spans;
        }
        assert!(Instant::now() < deadline, "spans so far: {spans:#?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    opentelemetry::global::set_tracer_provider(
        opentelemetry::trace::noop::NoopTracerProvider::new(),
    );

    let by_id: HashMap<SpanId, &SpanData> = spans
        .iter()
        .map(|s| (s.span_context.span_id(), s))
        .collect();
    let parent = |s: &SpanData| by_id.get(&s.parent_span_id).copied();
    let send_in = named(&spans, &format!("send {input}"));
    let poll_in = named(&spans, &format!("poll {input}"));
    let process = named(&spans, &format!("process {input}"));
    let send_out = named(&spans, &format!("send {output}"));
    let poll_out = named(&spans, &format!("poll {output}"));
    assert_eq!(send_in.len(), N, "{spans:#?}");
    assert_eq!(poll_in.len(), N, "{spans:#?}");
    assert_eq!(process.len(), N, "{spans:#?}");
    for s in &send_in {
        assert_eq!(s.parent_span_id, root_sc.span_id());
        assert_eq!(s.span_kind, SpanKind::Producer);
        assert_eq!(attr(s, "messaging.system"), Some(&Value::from("kafka")));
        assert_eq!(
            attr(s, "messaging.operation.type"),
            Some(&Value::from("send"))
        );
        assert_eq!(
            attr(s, "messaging.destination.name"),
            Some(&Value::from(input.clone()))
        );
        assert!(matches!(attr(s, "messaging.kafka.offset"), Some(Value::I64(o)) if *o >= 0));
    }
    for s in poll_in.iter().chain(&process) {
        assert_eq!(s.span_kind, SpanKind::Consumer);
        let p = parent(s).expect("parent exported");
        assert_eq!(p.name, format!("send {input}"), "{s:#?}");
        assert_eq!(
            attr(s, "messaging.kafka.offset"),
            attr(p, "messaging.kafka.offset")
        );
    }
    for s in &process {
        assert_eq!(
            attr(s, "messaging.operation.type"),
            Some(&Value::from("process"))
        );
    }
    for s in &send_out {
        assert_eq!(parent(s).expect("parent").name, format!("process {input}"));
    }
    // The processor's own spans: one each per record, under its process
    // span.
    for name in ["user-sync", "user-async"] {
        let user = named(&spans, name);
        assert_eq!(user.len(), N, "{name}: {spans:#?}");
        let parents: HashSet<SpanId> = user.iter().map(|s| s.parent_span_id).collect();
        let expected: HashSet<SpanId> = process.iter().map(|s| s.span_context.span_id()).collect();
        assert_eq!(parents, expected, "{name}: one per process span");
    }
    for s in &poll_out {
        assert_eq!(parent(s).expect("parent").name, format!("send {output}"));
        assert_eq!(
            attr(s, "messaging.operation.type"),
            Some(&Value::from("receive"))
        );
    }
    // Each consumed record carries its send span's context.
    for r in &consumed {
        let sc = purekafka::otel::span_context_from_headers(&r.headers).expect("traceparent");
        assert_eq!(sc.trace_id(), root_sc.trace_id());
        let s = by_id.get(&sc.span_id()).expect("the send span");
        assert_eq!(s.name, format!("send {output}"));
    }
}
