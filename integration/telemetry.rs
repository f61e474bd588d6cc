//! The `metrics` feature against the real broker: the Prometheus endpoint
//! serves the producer's, consumer's and streams' counters with the values
//! the test produced and consumed; each client's own connection counters
//! move when its connections open, answer and close; group counters when
//! a second member joins (both group protocols), each member's apart
//! though they share a `client.id`; clients without a `client.id` are
//! named as Java names them; a revoked partition's lag leaves the output. (The `otel` test is a target of its own, `integration/otel.rs`.)

pub(crate) mod metrics {
    use std::collections::HashMap;
    use std::net::SocketAddr;
    use std::sync::OnceLock;
    use std::time::Duration;

    use purekafka::producer::serializer::StringSerializer;
    use purekafka::streams::{Streams, StringDeserializer};
    use purekafka::telemetry::MetricsPublisher;
    use purekafka::{
        Admin, ClientConfig, Cluster, Consumer, ConsumerConfig, Producer, ProducerConfig,
        ProducerRecord,
    };
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::time::Instant;

    use crate::support;

    const N: usize = 40;
    const PARTITIONS: i32 = 2;
    /// How long the test endpoint keeps a gauge nobody sets.
    const STALE_AFTER: Duration = Duration::from_secs(3);

    /// The process's one Prometheus endpoint, shared by these tests. Served
    /// from a thread without a runtime, so it outlives each test's runtime.
    pub(crate) fn endpoint() -> SocketAddr {
        static ADDR: OnceLock<SocketAddr> = OnceLock::new();
        *ADDR.get_or_init(|| {
            // A free port: bound, read, released.
            let addr = std::net::TcpListener::bind("127.0.0.1:0")
                .unwrap()
                .local_addr()
                .unwrap();
            std::thread::spawn(move || {
                purekafka::telemetry::serve_prometheus_with(addr, STALE_AFTER)
                    .expect("the only global recorder of this process")
            })
            .join()
            .unwrap();
            addr
        })
    }

    /// GET / on `addr`: the Prometheus text format, parsed into
    /// `name{labels}` -> value.
    pub(crate) async fn scrape(addr: std::net::SocketAddr) -> HashMap<String, f64> {
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

    pub(crate) fn get(m: &HashMap<String, f64>, key: &str) -> f64 {
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
        let addr = endpoint();

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
        // The application counts three times: itself, its consumer and its producer.
        assert_eq!(publisher.publish(), 5, "three live clients, the app's two");
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
        let requests = get(&m, &format!("kafka_producer_produce_request_total{p}"));
        let batches = get(&m, &format!("kafka_producer_batch_send_total{p}"));
        assert!((1.0..=N as f64).contains(&batches), "{batches} batches");
        assert!(
            requests >= 1.0 && requests <= batches,
            "{requests} requests"
        );
        // Every request on the producer's connections: Metadata and
        // Produce at least.
        let all = get(&m, &format!("kafka_producer_request_total{p}"));
        assert!(all >= requests + 1.0, "{all} requests, {requests} Produce");
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

    /// Polls `stats` until `done` holds (10 s at most).
    async fn until<T: std::fmt::Debug>(
        what: &str,
        mut stats: impl FnMut() -> T,
        done: impl Fn(&T) -> bool,
    ) -> T {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let s = stats();
            if done(&s) {
                return s;
            }
            assert!(Instant::now() < deadline, "{what}: {s:?}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    fn client(bootstrap: &str, client_id: &str) -> ClientConfig {
        ClientConfig::builder()
            .bootstrap_servers(bootstrap)
            .client_id(client_id)
            .build()
            .unwrap()
    }

    /// Each client counts its own connections, though both have one
    /// `client.id`: when they are set up, for what they write and read,
    /// and when they close.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn each_client_counts_its_own_connections() {
        let Some(bootstrap) = support::bootstrap("telemetry-connections") else {
            return;
        };
        let id = support::unique_topic("conn-metrics");
        let a = Cluster::connect(client(&bootstrap, &id)).await.unwrap();
        let s = a.connection_stats();
        assert!(s.created >= 1, "{s:?}");
        assert_eq!((s.closed, s.connections), (0, s.created), "{s:?}");
        assert_eq!(
            (s.successful_authentications, s.failed_authentications),
            (s.created, 0),
            "PLAINTEXT: ready counts as authenticated, as in Java"
        );
        // The bootstrap Metadata at least, answered.
        assert!(s.requests >= 1 && s.responses == s.requests, "{s:?}");
        assert!(s.bytes_out > 12 && s.bytes_in > s.bytes_out, "{s:?}");
        assert!(s.request_latency_max > Duration::ZERO, "{s:?}");

        // A second client with the same client.id starts from zero and
        // adds nothing to the first's.
        let b = Cluster::connect(client(&bootstrap, &id)).await.unwrap();
        let sb = b.connection_stats();
        assert_eq!(a.connection_stats(), s, "b's connect is not a's");
        assert!(sb.created >= 1 && sb.requests >= 1, "{sb:?}");
        assert_eq!(sb.created, s.created, "one client's set-up as the other's");

        // A Metadata request through a counts for a only.
        a.refresh_metadata(None).await.unwrap();
        let s2 = a.connection_stats();
        assert_eq!(
            (s2.requests, s2.responses),
            (s.requests + 1, s.responses + 1)
        );
        assert!(s2.bytes_out > s.bytes_out && s2.bytes_in > s.bytes_in);
        assert_eq!(b.connection_stats(), sb, "a's request is not b's");

        // A connection of a's that closes (a request that times out closes
        // its connection, as in Java) counts as closed, for a only. The
        // request is a Fetch the broker parks (an empty partition,
        // min_bytes 1, max_wait 30 s), so the 300 ms timeout always fires
        // first. The topic is made by a third client, counted apart.
        let topic = support::unique_topic("conn-metrics-parked");
        let maker = Cluster::connect(client(&bootstrap, &id)).await.unwrap();
        support::create_topic(&maker, &topic, 1).await;
        let broker = a
            .metadata()
            .brokers
            .values()
            .next()
            .expect("a broker")
            .addr();
        let conn = a
            .connection(&broker, purekafka::cluster::Workload::Fetch)
            .await
            .unwrap();
        let s3 = a.connection_stats();
        assert_eq!(s3.created, s2.created + 1, "a Fetch connection: {s3:?}");
        use kafka_protocol::messages::fetch_request::{FetchPartition, FetchRequest, FetchTopic};
        let version = conn
            .version_for::<FetchRequest>(purekafka::protocol::versions::Versions::new(4, 12))
            .unwrap();
        let parked = FetchRequest::default()
            .with_replica_id(kafka_protocol::messages::BrokerId(-1))
            .with_max_wait_ms(30_000)
            .with_min_bytes(1)
            .with_max_bytes(1 << 20)
            .with_topics(vec![FetchTopic::default()
                .with_topic(kafka_protocol::messages::TopicName(
                    kafka_protocol::protocol::StrBytes::from_string(topic.clone()),
                ))
                .with_partitions(vec![FetchPartition::default()
                    .with_partition(0)
                    .with_fetch_offset(0)
                    .with_partition_max_bytes(1 << 20)])]);
        // Right after CreateTopics the broker may answer at once with a
        // partition error (it has not loaded the partition yet): ask again.
        let mut answers = Vec::new();
        let timed_out = loop {
            match conn
                .send_at_with_timeout(&parked, version, Duration::from_millis(300))
                .await
            {
                Ok(r) if answers.len() < 20 => {
                    let codes: Vec<i16> = r
                        .responses
                        .iter()
                        .flat_map(|t| t.partitions.iter().map(|p| p.error_code))
                        .collect();
                    answers.push((r.error_code, codes));
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                other => break other,
            }
        };
        assert!(
            matches!(timed_out, Err(purekafka::Error::Timeout { .. })),
            "a parked Fetch was answered within 300 ms: {:?}, earlier answers (error codes) {answers:?}",
            timed_out.map(|_| ())
        );
        let s4 = until(
            "the closed connection",
            || a.connection_stats(),
            |s| s.closed == 1,
        )
        .await;
        assert_eq!(s4.connections, s4.created - 1);
        assert_eq!(b.connection_stats(), sb);
    }

    fn group_consumer(
        bootstrap: &str,
        client_id: &str,
        group: &str,
        protocol: &str,
    ) -> ConsumerConfig {
        let mut props = vec![
            ("bootstrap.servers", bootstrap),
            ("client.id", client_id),
            ("group.id", group),
            ("group.protocol", protocol),
            ("auto.offset.reset", "earliest"),
            ("enable.auto.commit", "false"),
            ("fetch.max.wait.ms", "100"),
        ];
        if protocol == "classic" {
            props.extend([
                ("session.timeout.ms", "10000"),
                ("heartbeat.interval.ms", "200"),
            ]);
        }
        ConsumerConfig::from_properties(props).unwrap()
    }

    /// Polls both consumers until each owns one of the two partitions.
    async fn poll_until_split(a: &Consumer, b: &Consumer) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while a.assignment().len() != 1 || b.assignment().len() != 1 {
            assert!(
                Instant::now() < deadline,
                "assignments {:?} and {:?}",
                a.assignment(),
                b.assignment()
            );
            let (ra, rb) = tokio::join!(
                a.poll(Duration::from_millis(100)),
                b.poll(Duration::from_millis(100))
            );
            ra.unwrap();
            rb.unwrap();
        }
    }

    async fn group_counters_move(protocol: &str) {
        let test = format!("telemetry-group-{protocol}");
        let Some((bootstrap, _cluster, topic)) = crate::streams::setup(&test, PARTITIONS).await
        else {
            return;
        };
        let addr = endpoint();
        let group = support::unique_topic(&format!("{test}-group"));
        // Both members have one client.id: each counts its own.
        let id = support::unique_topic(&format!("{test}-c"));
        let a = Consumer::connect(group_consumer(&bootstrap, &id, &group, protocol))
            .await
            .unwrap();
        a.subscribe([topic.as_str()]).unwrap();
        let deadline = Instant::now() + Duration::from_secs(60);
        while a.assignment().len() != PARTITIONS as usize {
            assert!(
                Instant::now() < deadline,
                "a alone got {:?}",
                a.assignment()
            );
            a.poll(Duration::from_millis(100)).await.unwrap();
        }
        let first = a.metrics().group;
        assert_eq!(first.rebalances, 1, "{first:?}");
        assert!(first.rebalance_latency_max > Duration::ZERO, "{first:?}");
        assert_eq!(first.rebalance_latency_avg, first.rebalance_latency_max);
        assert!(first.last_rebalance_ago.is_some(), "{first:?}");
        assert_eq!(first.commits, 0);

        // A second member joins: a rebalances again.
        let b = Consumer::connect(group_consumer(&bootstrap, &id, &group, protocol))
            .await
            .unwrap();
        b.subscribe([topic.as_str()]).unwrap();
        poll_until_split(&a, &b).await;
        let s = a.metrics().group;
        assert!(s.rebalances > first.rebalances, "{s:?}");
        assert!(
            s.rebalance_latency_total >= first.rebalance_latency_total,
            "{s:?}"
        );
        // b joined once, into the group a was already in.
        let sb = b.metrics().group;
        assert!(sb.rebalances >= 1 && sb.rebalances < s.rebalances, "{sb:?}");
        // Heartbeats are answered while the members stay.
        let before = s.heartbeats;
        let deadline = Instant::now() + Duration::from_secs(30);
        while a.metrics().group.heartbeats <= before {
            assert!(Instant::now() < deadline, "no heartbeat answered");
            let (ra, rb) = tokio::join!(
                a.poll(Duration::from_millis(100)),
                b.poll(Duration::from_millis(100))
            );
            ra.unwrap();
            rb.unwrap();
        }
        let tp = a.assignment()[0].clone();
        a.commit_sync_offsets(
            [(tp, purekafka::OffsetAndMetadata::new(0))]
                .into_iter()
                .collect(),
        )
        .await
        .expect("commit");
        let s = a.metrics().group;
        assert_eq!(s.commits, 1);
        assert!(s.commit_latency_max > Duration::ZERO);
        assert_eq!(b.metrics().group.commits, 0, "a's commit is not b's");

        // The same through the exporter.
        let mut publisher = MetricsPublisher::new().consumer(&a);
        publisher.publish();
        let m = scrape(addr).await;
        let l = format!("{{client_id=\"{id}\"}}");
        let published = get(&m, &format!("kafka_consumer_rebalance_total{l}"));
        assert!(published >= 2.0, "{published}");
        assert_eq!(get(&m, &format!("kafka_consumer_commit_total{l}")), 1.0);
        assert!(get(&m, &format!("kafka_consumer_heartbeat_total{l}")) >= 1.0);
        assert!(get(&m, &format!("kafka_consumer_last_rebalance_seconds_ago{l}")) >= 0.0);
        assert!(get(&m, &format!("kafka_consumer_connection_creation_total{l}")) >= 2.0);
        assert!(get(&m, &format!("kafka_consumer_connection_count{l}")) >= 1.0);
        assert!(get(&m, &format!("kafka_consumer_request_total{l}")) >= 1.0);
        assert!(get(&m, &format!("kafka_consumer_incoming_byte_total{l}")) > 0.0);
        assert!(
            get(
                &m,
                &format!("kafka_consumer_request_latency_max_seconds{l}")
            ) > 0.0
        );
        assert_eq!(
            get(&m, &format!("kafka_consumer_assigned_partitions{l}")),
            1.0
        );
        b.close().await.unwrap();
        a.close().await.unwrap();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn group_counters_move_when_a_member_joins_classic() {
        group_counters_move("classic").await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn group_counters_move_when_a_member_joins_consumer_protocol() {
        group_counters_move("consumer").await;
    }

    /// Tokens for the secure broker's unsecured-JWT validator: the first
    /// is a valid one for alice, every later one is not a JWT at all.
    #[derive(Debug, Default)]
    struct GoodOnce(std::sync::atomic::AtomicUsize);

    #[purekafka::async_trait]
    impl purekafka::TokenProvider for GoodOnce {
        async fn token(&self) -> Result<purekafka::config::OAuthToken, String> {
            if self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst) == 0 {
                purekafka::config::UnsecuredJwt {
                    subject: "alice".into(),
                    lifetime: Duration::from_secs(3600),
                }
                .token()
                .await
            } else {
                Ok(purekafka::config::OAuthToken {
                    value: "not-a-jwt".into(),
                    extensions: Vec::new(),
                })
            }
        }
    }

    /// A SASL exchange the broker refuses counts as a failed
    /// authentication of the client whose connection it was (Java's
    /// `failed-authentication-total`), and the refused connection as
    /// created and closed.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_refused_sasl_authentication_counts_as_failed() {
        let Some(bootstrap) = support::bootstrap_secure("telemetry-failed-auth") else {
            return;
        };
        let config = ClientConfig::builder()
            .bootstrap_servers(&bootstrap)
            .client_id(support::unique_topic("failed-auth"))
            .security_protocol(purekafka::SecurityProtocol::SaslPlaintext)
            .sasl_mechanism(purekafka::SaslMechanism::OAuthBearer)
            .sasl_token_provider(std::sync::Arc::new(GoodOnce::default()))
            .build()
            .unwrap();
        let cluster = Cluster::connect(config)
            .await
            .expect("the first token is good");
        let s = cluster.connection_stats();
        assert_eq!(
            (
                s.created,
                s.successful_authentications,
                s.failed_authentications
            ),
            (1, 1, 0),
            "{s:?}"
        );
        let broker = cluster
            .metadata()
            .brokers
            .values()
            .next()
            .expect("a broker")
            .addr();
        let err = cluster
            .connection(&broker, purekafka::cluster::Workload::Fetch)
            .await
            .expect_err("the second token is refused");
        let s = until(
            "the refused connection's close",
            || cluster.connection_stats(),
            |s| s.closed == 1,
        )
        .await;
        assert_eq!(
            (
                s.created,
                s.successful_authentications,
                s.failed_authentications
            ),
            (2, 1, 1),
            "{err}: {s:?}"
        );
        assert_eq!(s.connections, 1);
    }

    /// Sends `n` records with `producer` and waits for their acks.
    async fn produce(producer: &Producer, topic: &str, n: usize) {
        let mut acks = Vec::new();
        for i in 0..n {
            let r = ProducerRecord::new(topic).value(format!("v{i}"));
            acks.push(producer.send(r).await.unwrap());
        }
        for a in acks {
            a.await.unwrap();
        }
    }

    /// Two producers with one `client.id` keep their own counts, in
    /// `metrics()` and through the exporter, where the second is told
    /// apart by `client_instance`.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn two_producers_with_one_client_id_count_apart() {
        let Some((bootstrap, _cluster, topic)) =
            crate::streams::setup("telemetry-same-id", 1).await
        else {
            return;
        };
        let addr = endpoint();
        let id = support::unique_topic("same-id");
        let config = || {
            ProducerConfig::builder()
                .bootstrap_servers(&bootstrap)
                .set("client.id", &id)
                .unwrap()
                .build()
                .unwrap()
        };
        let p1 = Producer::connect(config()).await.unwrap();
        let p2 = Producer::connect(config()).await.unwrap();
        produce(&p1, &topic, 3).await;
        produce(&p2, &topic, 5).await;
        let (m1, m2) = (p1.metrics(), p2.metrics());
        assert_eq!((m1.records_sent, m2.records_sent), (3, 5));
        for m in [&m1, &m2] {
            // Its own Metadata and Produce requests at least.
            assert!(m.connections.created >= 1, "{m:?}");
            assert!(m.connections.requests > m.requests, "{m:?}");
        }
        // More records from p1 move p1's connection counters only.
        produce(&p1, &topic, 1).await;
        let (n1, n2) = (p1.metrics(), p2.metrics());
        assert!(n1.connections.requests > m1.connections.requests);
        assert!(n1.connections.bytes_out > m1.connections.bytes_out);
        assert_eq!(n2.connections, m2.connections, "p1's requests are not p2's");

        let mut publisher = MetricsPublisher::new().producer(&p1).producer(&p2);
        assert_eq!(publisher.publish(), 2);
        let m = scrape(addr).await;
        let first = format!("{{client_id=\"{id}\"}}");
        let second = format!("{{client_id=\"{id}\",client_instance=\"2\"}}");
        assert_eq!(
            get(&m, &format!("kafka_producer_record_send_total{first}")),
            4.0
        );
        assert_eq!(
            get(&m, &format!("kafka_producer_record_send_total{second}")),
            5.0
        );
        assert_eq!(
            get(&m, &format!("kafka_producer_request_total{first}")),
            n1.connections.requests as f64
        );
        assert_eq!(
            get(&m, &format!("kafka_producer_request_total{second}")),
            n2.connections.requests as f64
        );
        p1.close(Duration::from_secs(10)).await.unwrap();
        p2.close(Duration::from_secs(10)).await.unwrap();
    }

    /// The number at the end of `id`, which must start with `prefix`.
    fn numbered(id: &str, prefix: &str) -> u64 {
        id.strip_prefix(prefix)
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("{id} is not {prefix}N"))
    }

    /// Without `client.id`, each client names itself as the Java client
    /// does, and the exporter labels each with its own.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn clients_without_a_client_id_are_named_as_java_names_them() {
        let Some(bootstrap) = support::bootstrap("telemetry-default-ids") else {
            return;
        };
        let addr = endpoint();
        let producer = || {
            ProducerConfig::builder()
                .bootstrap_servers(&bootstrap)
                .build()
                .unwrap()
        };
        let p1 = Producer::connect(producer()).await.unwrap();
        let p2 = Producer::connect(producer()).await.unwrap();
        let id = |p: &Producer| p.cluster().config().client_id.clone();
        let (n1, n2) = (
            numbered(&id(&p1), "producer-"),
            numbered(&id(&p2), "producer-"),
        );
        assert!(n2 > n1, "{n1} then {n2}");
        let txn = support::unique_topic("txn");
        let tp = Producer::connect(
            ProducerConfig::builder()
                .bootstrap_servers(&bootstrap)
                .transactional_id(&txn)
                .build()
                .unwrap(),
        )
        .await
        .unwrap();
        assert_eq!(id(&tp), format!("producer-{txn}"));

        let group = support::unique_topic("default-id-group");
        let consumer = |props: &[(&str, &str)]| {
            let mut all = vec![("bootstrap.servers", bootstrap.as_str())];
            all.extend_from_slice(props);
            ConsumerConfig::from_properties(all).unwrap()
        };
        let grouped = Consumer::connect(consumer(&[("group.id", &group)]))
            .await
            .unwrap();
        let c_id = grouped.config().client.client_id.clone();
        numbered(&c_id, &format!("consumer-{group}-"));
        let static_member = Consumer::connect(consumer(&[
            ("group.id", &group),
            ("group.instance.id", "i1"),
        ]))
        .await
        .unwrap();
        assert_eq!(
            static_member.config().client.client_id,
            format!("consumer-{group}-i1")
        );
        let lone = Consumer::connect(consumer(&[])).await.unwrap();
        numbered(&lone.config().client.client_id, "consumer-null-");
        let admin = Admin::connect(
            ClientConfig::builder()
                .bootstrap_servers(&bootstrap)
                .build()
                .unwrap(),
        )
        .await
        .unwrap();
        numbered(&admin.cluster().config().client_id, "adminclient-");

        // The exporter: each producer under its own id.
        let mut publisher = MetricsPublisher::new()
            .producer(&p1)
            .producer(&p2)
            .consumer(&grouped);
        assert_eq!(publisher.publish(), 3);
        let m = scrape(addr).await;
        for p in [&p1, &p2] {
            let key = format!(
                "kafka_producer_connection_creation_total{{client_id=\"{}\"}}",
                id(p)
            );
            assert_eq!(get(&m, &key), p.metrics().connections.created as f64);
        }
        let key = format!("kafka_consumer_connection_creation_total{{client_id=\"{c_id}\"}}");
        assert!(get(&m, &key) >= 1.0);
        for c in [grouped, static_member, lone] {
            c.close().await.unwrap();
        }
        for p in [p1, p2, tp] {
            p.close(Duration::from_secs(10)).await.unwrap();
        }
    }

    /// A partition's lag gauge leaves the Prometheus output once the
    /// partition is no longer assigned.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_revoked_partitions_gauges_leave_the_output() {
        let Some((bootstrap, _cluster, topic)) =
            crate::streams::setup("telemetry-stale", PARTITIONS).await
        else {
            return;
        };
        let addr = endpoint();
        let id = support::unique_topic("stale-c");
        let consumer = Consumer::connect(
            ConsumerConfig::from_properties([
                ("bootstrap.servers", bootstrap.as_str()),
                ("client.id", id.as_str()),
                ("auto.offset.reset", "earliest"),
            ])
            .unwrap(),
        )
        .await
        .unwrap();
        let tp = |p| purekafka::TopicPartition::new(topic.as_str(), p);
        consumer.assign(vec![tp(0), tp(1)]);
        let lag = |p: i32| {
            format!("kafka_consumer_records_lag{{client_id=\"{id}\",topic=\"{topic}\",partition=\"{p}\"}}")
        };
        let publisher = MetricsPublisher::new()
            .interval(Duration::from_millis(100))
            .consumer(&consumer)
            .spawn();
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let _ = consumer.poll(Duration::from_millis(100)).await.unwrap();
            let m = scrape(addr).await;
            if m.contains_key(&lag(0)) && m.contains_key(&lag(1)) {
                break;
            }
            assert!(Instant::now() < deadline, "both lags never published");
        }
        consumer.assign(vec![tp(0)]);
        // Gone within the stale window (plus a publisher tick and slack);
        // partition 0's stays, set at every tick.
        let deadline = Instant::now() + STALE_AFTER + Duration::from_secs(5);
        loop {
            let _ = consumer.poll(Duration::from_millis(100)).await.unwrap();
            let m = scrape(addr).await;
            assert!(
                m.contains_key(&lag(0)),
                "the assigned partition's lag stays"
            );
            if !m.contains_key(&lag(1)) {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "the revoked partition's lag stayed"
            );
        }
        assert_eq!(
            get(
                &scrape(addr).await,
                &format!("kafka_consumer_assigned_partitions{{client_id=\"{id}\"}}")
            ),
            1.0
        );
        publisher.abort();
        consumer.close().await.unwrap();
    }

    /// The share consumer's counters (KIP-932) count what `poll` hands out
    /// and the heartbeats answered, in `metrics()` and through the
    /// exporter.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn share_consumer_counters_count_what_poll_hands_out() {
        let test = "telemetry-share";
        let Some(bootstrap) = support::bootstrap(test) else {
            return;
        };
        if !support::real_broker_only(test, "share groups (KIP-932)") {
            return;
        }
        let addr = endpoint();
        let cluster = purekafka::Cluster::connect(support::config(&bootstrap))
            .await
            .unwrap();
        let topic = support::unique_topic(test);
        support::create_topic(&cluster, &topic, 1).await;
        let values = support::records::values("share-", 10);
        support::records::produce(&cluster, &topic, 0, &values).await;
        // Key `k0` on every record.
        let bytes: usize = values.iter().map(|(_, v)| v.len() + 2).sum();
        let group = support::unique_topic(&format!("{test}-group"));
        purekafka::Admin::connect(support::config(&bootstrap))
            .await
            .unwrap()
            .alter_group_configs(
                &group,
                &[purekafka::admin::AlterConfigOp::Set(
                    "share.auto.offset.reset".into(),
                    "earliest".into(),
                )],
            )
            .await
            .expect("share group config");
        let id = support::unique_topic("share-c");
        let consumer = purekafka::ShareConsumer::connect(
            purekafka::ShareConsumerConfig::from_properties([
                ("bootstrap.servers", bootstrap.as_str()),
                ("client.id", id.as_str()),
                ("group.id", group.as_str()),
                ("fetch.max.wait.ms", "200"),
            ])
            .unwrap(),
        )
        .await
        .unwrap();
        assert_eq!(consumer.metrics().records_consumed, 0);
        consumer.subscribe([topic.as_str()]).unwrap();
        let mut got = 0;
        let deadline = Instant::now() + Duration::from_secs(60);
        while got < values.len() {
            assert!(Instant::now() < deadline, "got {got}");
            got += consumer
                .poll(Duration::from_millis(500))
                .await
                .unwrap()
                .len();
        }
        let m = consumer.metrics();
        assert_eq!(m.records_consumed, values.len() as u64);
        assert_eq!(m.bytes_consumed, bytes as u64);
        assert!(m.heartbeats >= 1, "{m:?}");

        let mut publisher = MetricsPublisher::new().share_consumer(&consumer);
        assert_eq!(publisher.publish(), 1);
        let scraped = scrape(addr).await;
        let l = format!("{{client_id=\"{id}\"}}");
        assert_eq!(
            get(
                &scraped,
                &format!("kafka_share_consumer_records_consumed_total{l}")
            ),
            values.len() as f64
        );
        assert_eq!(
            get(
                &scraped,
                &format!("kafka_share_consumer_bytes_consumed_total{l}")
            ),
            bytes as f64
        );
        assert!(
            get(
                &scraped,
                &format!("kafka_share_consumer_heartbeat_total{l}")
            ) >= 1.0
        );
        assert!(
            get(
                &scraped,
                &format!("kafka_share_consumer_connection_creation_total{l}")
            ) >= 1.0
        );
        consumer.close().await.unwrap();
        drop(consumer);
        assert_eq!(publisher.publish(), 0, "gone");
    }
}
