//! The `metrics` feature against the real broker: the Prometheus endpoint
//! serves the producer's, consumer's and streams' counters with the values
//! the test produced and consumed. (The `otel` test is a target of its own,
//! `integration/otel.rs`.)

mod metrics {
    use std::collections::HashMap;
    use std::time::Duration;

    use purekafka::producer::serializer::StringSerializer;
    use purekafka::streams::{Streams, StringDeserializer};
    use purekafka::telemetry::{serve_prometheus, MetricsPublisher};
    use purekafka::{Consumer, ConsumerConfig, Producer, ProducerConfig, ProducerRecord};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::time::Instant;

    use crate::support;

    const N: usize = 40;
    const PARTITIONS: i32 = 2;

    /// GET / on `addr`: the Prometheus text format, parsed into
    /// `name{labels}` -> value.
    async fn scrape(addr: std::net::SocketAddr) -> HashMap<String, f64> {
        let mut s = tokio::net::TcpStream::connect(addr).await.expect("connect");
        s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .await
            .unwrap();
        let mut body = String::new();
        tokio::time::timeout(Duration::from_secs(10), s.read_to_string(&mut body))
            .await
            .expect("scrape within 10 s")
            .unwrap();
        assert!(body.starts_with("HTTP/1.1 200"), "{body}");
        body.lines()
            .filter(|l| !l.starts_with('#'))
            .filter_map(|l| {
                let (name, value) = l.rsplit_once(' ')?;
                Some((name.to_owned(), value.parse().ok()?))
            })
            .collect()
    }

    fn get(m: &HashMap<String, f64>, key: &str) -> f64 {
        *m.get(key)
            .unwrap_or_else(|| panic!("{key} not scraped; have {:?}", m.keys()))
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn prometheus_endpoint_serves_client_and_streams_metrics() {
        let Some((bootstrap, cluster, topic)) =
            crate::streams::setup("telemetry-metrics", PARTITIONS).await
        else {
            return;
        };
        // A free port: bound, read, released.
        let addr = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap();
        serve_prometheus(addr).expect("the only global recorder of this process");

        let id = support::unique_topic("metrics-client");
        let producer = Producer::connect(
            ProducerConfig::builder()
                .bootstrap_servers(&bootstrap)
                .set("client.id", &format!("{id}-p"))
                .unwrap()
                .build()
                .unwrap(),
        )
        .await
        .unwrap();
        let mut value_bytes = 0;
        let mut acks = Vec::new();
        for i in 0..N {
            let value = format!("value-{i}");
            value_bytes += value.len();
            let r = ProducerRecord::new(&topic)
                .key(format!("k{i}"))
                .value(value);
            acks.push(producer.send(r).await.unwrap());
        }
        for a in acks {
            a.await.unwrap();
        }
        let key_bytes: usize = (0..N).map(|i| format!("k{i}").len()).sum();

        let consumer = Consumer::connect(
            ConsumerConfig::from_properties([
                ("bootstrap.servers", bootstrap.as_str()),
                ("client.id", format!("{id}-c").as_str()),
                ("auto.offset.reset", "earliest"),
            ])
            .unwrap(),
        )
        .await
        .unwrap();
        consumer.assign(
            (0..PARTITIONS)
                .map(|p| purekafka::TopicPartition::new(topic.as_str(), p))
                .collect(),
        );
        let mut got = 0;
        let deadline = Instant::now() + Duration::from_secs(30);
        while got < N {
            assert!(Instant::now() < deadline, "consumed {got} of {N}");
            got += consumer
                .poll(Duration::from_millis(500))
                .await
                .unwrap()
                .len();
        }
        assert_eq!(got, N);
        // One more poll: the lag of every partition is known and 0.
        let _ = consumer.poll(Duration::from_millis(200)).await.unwrap();

        let app = support::unique_topic("metrics-app");
        let out = format!("{topic}-out");
        support::create_topic(&cluster, &out, 1).await;
        let running = Streams::topology(
            crate::streams::config(&bootstrap, &app)
                .consumer_property("auto.offset.reset", "earliest")
                .build()
                .unwrap(),
        )
        .source(topic.as_str(), StringDeserializer, StringDeserializer)
        .map(Ok)
        .to(out.as_str(), StringSerializer, StringSerializer)
        .build()
        .start()
        .await
        .unwrap();
        crate::streams::wait_for(&running, |r| r.metrics().processed >= N as u64).await;

        let mut publisher = MetricsPublisher::new()
            .producer(&producer)
            .consumer(&consumer)
            .streams(&running);
        assert_eq!(publisher.publish(), 3, "three live clients");
        let m = scrape(addr).await;
        let p = format!("{{client_id=\"{id}-p\"}}");
        let c = format!("{{client_id=\"{id}-c\"}}");
        let s = format!("{{application_id=\"{app}\"}}");
        assert_eq!(
            get(&m, &format!("kafka_producer_record_send_total{p}")),
            N as f64
        );
        assert_eq!(
            get(&m, &format!("kafka_producer_record_error_total{p}")),
            0.0
        );
        let requests = get(&m, &format!("kafka_producer_request_total{p}"));
        let batches = get(&m, &format!("kafka_producer_batch_send_total{p}"));
        assert!((1.0..=N as f64).contains(&batches), "{batches} batches");
        assert!(
            requests >= 1.0 && requests <= batches,
            "{requests} requests"
        );
        // Batches on the wire hold at least the keys and values.
        let sent_bytes = get(&m, &format!("kafka_producer_byte_total{p}"));
        assert!(
            sent_bytes >= (key_bytes + value_bytes) as f64,
            "{sent_bytes}"
        );
        let latency = get(
            &m,
            &format!("kafka_producer_request_latency_avg_seconds{p}"),
        );
        assert!(latency > 0.0 && latency < 30.0, "{latency} s");

        assert_eq!(
            get(&m, &format!("kafka_consumer_records_consumed_total{c}")),
            N as f64
        );
        assert_eq!(
            get(&m, &format!("kafka_consumer_bytes_consumed_total{c}")),
            (key_bytes + value_bytes) as f64
        );
        assert_eq!(
            get(&m, &format!("kafka_consumer_assigned_partitions{c}")),
            PARTITIONS as f64
        );
        assert_eq!(get(&m, &format!("kafka_consumer_records_lag_max{c}")), 0.0);
        let lag0 = format!(
            "kafka_consumer_records_lag{{client_id=\"{id}-c\",topic=\"{topic}\",partition=\"0\"}}"
        );
        assert_eq!(get(&m, &lag0), 0.0);

        assert_eq!(
            get(&m, &format!("kafka_streams_process_total{s}")),
            N as f64
        );
        let p99 = get(&m, &format!("kafka_streams_process_latency_p99_seconds{s}"));
        let max = get(&m, &format!("kafka_streams_process_latency_max_seconds{s}"));
        // The histogram's quantiles are within 0.1%; the max is exact.
        assert!(p99 > 0.0 && p99 <= max * 1.001, "p99 {p99} s, max {max} s");

        // A background publisher publishes the same way, and stops once its
        // clients are gone.
        let handle = MetricsPublisher::new()
            .interval(Duration::from_millis(50))
            .producer(&producer)
            .spawn();
        producer
            .send(ProducerRecord::new(&topic).value("one more"))
            .await
            .unwrap()
            .await
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let m = scrape(addr).await;
            if get(&m, &format!("kafka_producer_record_send_total{p}")) == (N + 1) as f64 {
                break;
            }
            assert!(Instant::now() < deadline, "the publisher did not publish");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        running.shutdown().await.unwrap();
        consumer.close().await.unwrap();
        producer.close(Duration::from_secs(10)).await.unwrap();
        drop((producer, consumer));
        tokio::time::timeout(Duration::from_secs(10), handle)
            .await
            .expect("the publisher ends when its producer is gone")
            .unwrap();
        assert_eq!(publisher.publish(), 0, "every client is gone");
    }
}
