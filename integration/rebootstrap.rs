//! KIP-1102 metadata recovery: every broker of the cluster moves to new
//! addresses while a client runs, and `bootstrap.servers` (a forwarder whose
//! target is switched) now reaches them there. The moves are made with two
//! [`ClusterProxy`]s in front of the same brokers: the client learns the
//! first one's ports, which then close for good, while the bootstrap address
//! leads to the second one's.
//!
//! A broker can also ask for a rebootstrap: Metadata v13's top-level error
//! REBOOTSTRAP_REQUIRED (a [`StaleCluster`] of fake brokers answers it).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::api_versions_response::ApiVersion;
use kafka_protocol::messages::metadata_response::MetadataResponseBroker;
use kafka_protocol::messages::{
    ApiKey, ApiVersionsResponse, BrokerId, MetadataResponse, RequestHeader, ResponseHeader,
};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};

use purekafka::config::MetadataRecoveryStrategy;
use purekafka::producer::{Producer, ProducerConfig, ProducerRecord};
use purekafka::{ClientConfig, Cluster, Error};
use tokio::io::{copy_bidirectional, AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

use crate::support::proxy::{ClusterProxy, NetFault};
use crate::support::{self, read};

/// A loopback TCP forwarder standing for a DNS name or load balancer
/// behind `bootstrap.servers`: [`Switch::retarget`] points it elsewhere and
/// closes the connections it was carrying.
struct Switch {
    port: u16,
    target: Arc<Mutex<String>>,
    generation: watch::Sender<u64>,
    accept: tokio::task::JoinHandle<()>,
}

impl Switch {
    async fn start(target: &str) -> Switch {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind switch");
        let port = listener.local_addr().expect("addr").port();
        let target = Arc::new(Mutex::new(target.to_owned()));
        let (generation, gen_rx) = watch::channel(0u64);
        let to = target.clone();
        let accept = tokio::spawn(async move {
            while let Ok((mut client, _)) = listener.accept().await {
                let upstream = to.lock().unwrap().clone();
                let mut gen_rx = gen_rx.clone();
                let born = *gen_rx.borrow_and_update();
                tokio::spawn(async move {
                    let Ok(mut server) = TcpStream::connect(&upstream).await else {
                        return;
                    };
                    tokio::select! {
                        _ = copy_bidirectional(&mut client, &mut server) => {}
                        _ = gen_rx.wait_for(|g| *g != born) => {}
                    }
                });
            }
        });
        Switch {
            port,
            target,
            generation,
            accept,
        }
    }

    fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// New connections go to `target`; open ones are closed.
    fn retarget(&self, target: &str) {
        *self.target.lock().unwrap() = target.to_owned();
        self.generation.send_modify(|g| *g += 1);
    }
}

impl Drop for Switch {
    fn drop(&mut self) {
        self.accept.abort();
        self.generation.send_modify(|g| *g += 1);
    }
}

/// The first address of a proxy's bootstrap list.
fn first(bootstrap: &str) -> String {
    bootstrap.split(',').next().unwrap_or_default().to_owned()
}

fn ports(bootstrap: &str) -> Vec<String> {
    bootstrap.split(',').map(str::to_owned).collect()
}

/// A topic, a cluster handle to the real addresses, the first proxy and a
/// switch leading to it.
async fn setup(test: &str) -> Option<(Cluster, String, ClusterProxy, Switch)> {
    let bootstrap = support::bootstrap(test)?;
    Some(setup_on(&bootstrap, test).await)
}

async fn setup_on(bootstrap: &str, test: &str) -> (Cluster, String, ClusterProxy, Switch) {
    support::trace();
    let cluster = Cluster::connect(support::config(bootstrap))
        .await
        .expect("connect");
    let topic = support::unique_topic(test);
    support::create_topic(&cluster, &topic, 1).await;
    let old = ClusterProxy::start(&cluster).await.expect("first proxy");
    let switch = Switch::start(&first(&old.bootstrap())).await;
    (cluster, topic, old, switch)
}

fn client(bootstrap: &str, strategy: MetadataRecoveryStrategy) -> ClientConfig {
    ClientConfig::builder()
        .bootstrap_servers(bootstrap)
        .client_id("purekafka-it-rebootstrap")
        .request_timeout(Duration::from_secs(5))
        .default_api_timeout(Duration::from_secs(15))
        .metadata_recovery_strategy(strategy)
        .build()
        .expect("valid config")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_producer_follows_its_moved_cluster_through_bootstrap_with_nothing_lost() {
    let Some(bootstrap) = support::bootstrap("rebootstrap_producer") else {
        return;
    };
    producer_follows_the_move(&bootstrap, "rebootstrap_producer").await;
}

/// The same on the 3-node cluster: all three nodes' addresses change.
/// Nothing is killed, so the shared cluster is left as it was.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_producer_follows_its_moved_three_node_cluster_through_bootstrap() {
    // The fault tests kill and pause this cluster's nodes; not meanwhile.
    let _serial = crate::support::chaos::FAULTS.lock().await;
    let Some(bootstrap) = support::bootstrap3("rebootstrap_producer3") else {
        return;
    };
    producer_follows_the_move(&bootstrap, "rebootstrap_producer3").await;
}

async fn producer_follows_the_move(bootstrap: &str, test: &str) {
    const N: usize = 300;
    let (cluster, topic, old, switch) = setup_on(bootstrap, test).await;
    let producer = Producer::connect(
        ProducerConfig::from_properties([
            ("bootstrap.servers", switch.addr().as_str()),
            ("client.id", "purekafka-it-rebootstrap"),
            ("request.timeout.ms", "5000"),
            ("default.api.timeout.ms", "15000"),
            ("delivery.timeout.ms", "60000"),
            ("retry.backoff.max.ms", "200"),
            ("reconnect.backoff.max.ms", "200"),
            ("enable.idempotence", "true"),
        ])
        .expect("producer config"),
    )
    .await
    .expect("producer");
    let old_addrs = ports(&old.bootstrap());
    let learned: Vec<String> = producer_brokers(&producer);
    assert_eq!(
        learned, old_addrs,
        "the producer learned the first proxy's addresses"
    );

    let mut old = Some(old);
    let mut new = None;
    let mut deliveries = Vec::with_capacity(N);
    for i in 0..N {
        if i == N / 3 {
            let moved = ClusterProxy::start(&cluster).await.expect("second proxy");
            switch.retarget(&first(&moved.bootstrap()));
            // Every address the producer learned now refuses connections.
            drop(old.take());
            new = Some(moved);
        }
        let mut record = ProducerRecord::new(topic.as_str()).value(format!("r{i}"));
        record.partition = Some(0);
        deliveries.push(producer.send(record).await.expect("send"));
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    for (i, d) in deliveries.into_iter().enumerate() {
        tokio::time::timeout(Duration::from_secs(60), d)
            .await
            .unwrap_or_else(|_| panic!("record {i} not delivered within 60 s"))
            .unwrap_or_else(|e| panic!("record {i}: {e}"));
    }
    let new = new.expect("moved");
    assert_eq!(
        producer_brokers(&producer),
        ports(&new.bootstrap()),
        "the producer forgot the old addresses and learned the new ones"
    );
    assert!(new.frames().0 > 0, "traffic went to the new addresses");
    let values: Vec<String> = read::read_partition(&cluster, &topic, 0)
        .await
        .iter()
        .map(|r| String::from_utf8_lossy(r.value.as_deref().unwrap_or_default()).into_owned())
        .collect();
    assert_eq!(
        values,
        (0..N).map(|i| format!("r{i}")).collect::<Vec<_>>(),
        "every record once, in order"
    );
}

fn producer_brokers(producer: &Producer) -> Vec<String> {
    brokers(producer.cluster())
}

fn brokers(cluster: &Cluster) -> Vec<String> {
    cluster
        .metadata()
        .brokers
        .values()
        .map(|b| format!("{}:{}", b.host, b.port))
        .collect()
}

#[tokio::test]
async fn with_strategy_none_a_moved_cluster_is_lost_and_the_error_names_the_brokers_tried() {
    let Some((cluster, _topic, old, switch)) = setup("rebootstrap_none").await else {
        return;
    };
    let none = Cluster::connect(client(&switch.addr(), MetadataRecoveryStrategy::None))
        .await
        .expect("connect, strategy none");
    let rebootstrap = Cluster::connect(client(
        &switch.addr(),
        MetadataRecoveryStrategy::Rebootstrap,
    ))
    .await
    .expect("connect, strategy rebootstrap");
    let old_addrs = ports(&old.bootstrap());
    assert_eq!(brokers(&none), old_addrs);
    assert_eq!(brokers(&rebootstrap), old_addrs);

    let new = ClusterProxy::start(&cluster).await.expect("second proxy");
    switch.retarget(&first(&new.bootstrap()));
    drop(old);

    let err = none
        .refresh_metadata(None)
        .await
        .expect_err("strategy none: only the learned, now closed, addresses are asked");
    let Error::NoBrokerAvailable { tried, .. } = &err else {
        panic!("expected NoBrokerAvailable, got {err:?}");
    };
    for addr in &old_addrs {
        assert!(tried.contains(addr.as_str()), "{addr} named in: {err}");
    }
    assert!(
        !tried.contains(&switch.addr()),
        "bootstrap.servers is not asked again with strategy none: {err}"
    );

    let m = rebootstrap
        .refresh_metadata(None)
        .await
        .expect("strategy rebootstrap: bootstrap.servers answers");
    assert_eq!(brokers(&rebootstrap), ports(&new.bootstrap()));
    assert!(
        m.brokers
            .values()
            .all(|b| !old_addrs.contains(&format!("{}:{}", b.host, b.port))),
        "no learned broker kept: {:?}",
        m.brokers
    );
}

/// The old brokers still accept connections but never answer (black-holed),
/// and each Metadata wait (`request.timeout.ms`, 20 s) outlasts a whole
/// refresh (`default.api.timeout.ms`, 3 s), so a refresh that asks them first
/// never reaches bootstrap. Once refreshes have failed for
/// `metadata.recovery.rebootstrap.trigger.ms` (2 s), bootstrap is asked
/// first and the client finds the moved cluster.
#[tokio::test]
async fn refreshes_failing_past_the_trigger_go_back_to_bootstrap() {
    let Some((cluster, _topic, old, switch)) = setup("rebootstrap_trigger").await else {
        return;
    };
    let config = |trigger_ms: u64| {
        ClientConfig::builder()
            .bootstrap_servers(switch.addr())
            .client_id("purekafka-it-rebootstrap")
            .request_timeout(Duration::from_secs(20))
            .default_api_timeout(Duration::from_secs(3))
            .metadata_recovery_rebootstrap_trigger(Duration::from_millis(trigger_ms))
            .build()
            .expect("valid config")
    };
    let quick = Cluster::connect(config(2_000)).await.expect("connect");
    let slow = Cluster::connect(config(600_000)).await.expect("connect");
    let new = ClusterProxy::start(&cluster).await.expect("second proxy");
    for node in cluster.metadata().brokers.keys() {
        old.inject(*node, NetFault::BlackHole).expect("black-hole");
    }
    switch.retarget(&first(&new.bootstrap()));

    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let mut failures = 0;
    loop {
        match quick.refresh_metadata(None).await {
            Ok(_) => break,
            Err(e) => {
                failures += 1;
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "no recovery within 20 s: {e}"
                );
            }
        }
    }
    assert!(failures >= 1, "the first refresh asked the silent brokers");
    assert_eq!(brokers(&quick), ports(&new.bootstrap()));

    // The same client with a trigger far away keeps asking the silent
    // brokers first, and its refreshes keep timing out.
    for _ in 0..2 {
        let e = slow
            .refresh_metadata(None)
            .await
            .expect_err("the silent brokers are asked first");
        assert!(matches!(e, Error::Timeout { .. }), "{e:?}");
    }
    assert_eq!(brokers(&slow), ports(&old.bootstrap()));
}

/// Brokers that know only ApiVersions and Metadata (up to v13), each
/// listing all of them (node ids from 5) as the cluster `stale`; once
/// [`refuse`](Self::refuse)d, each answers Metadata with the top-level
/// error REBOOTSTRAP_REQUIRED (KIP-1102, v13+) and counts it.
struct StaleCluster {
    ports: Vec<u16>,
    refusing: Arc<AtomicBool>,
    refused: Arc<AtomicUsize>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl StaleCluster {
    async fn start(n: usize) -> StaleCluster {
        let mut listeners = Vec::new();
        for _ in 0..n {
            listeners.push(TcpListener::bind("127.0.0.1:0").await.expect("bind"));
        }
        let ports: Vec<u16> = listeners
            .iter()
            .map(|l| l.local_addr().expect("addr").port())
            .collect();
        let refusing = Arc::new(AtomicBool::new(false));
        let refused = Arc::new(AtomicUsize::new(0));
        let tasks = listeners
            .into_iter()
            .map(|l| {
                let (ports, refusing, refused) = (ports.clone(), refusing.clone(), refused.clone());
                tokio::spawn(async move {
                    while let Ok((sock, _)) = l.accept().await {
                        let (ports, refusing, refused) =
                            (ports.clone(), refusing.clone(), refused.clone());
                        tokio::spawn(serve_stale(sock, ports, refusing, refused));
                    }
                })
            })
            .collect();
        StaleCluster {
            ports,
            refusing,
            refused,
            tasks,
        }
    }

    fn addrs(&self) -> Vec<String> {
        self.ports
            .iter()
            .map(|p| format!("127.0.0.1:{p}"))
            .collect()
    }

    fn refuse(&self) {
        self.refusing.store(true, Ordering::SeqCst);
    }

    /// Metadata requests answered with REBOOTSTRAP_REQUIRED.
    fn refused(&self) -> usize {
        self.refused.load(Ordering::SeqCst)
    }
}

impl Drop for StaleCluster {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

async fn serve_stale(
    mut sock: TcpStream,
    ports: Vec<u16>,
    refusing: Arc<AtomicBool>,
    refused: Arc<AtomicUsize>,
) {
    loop {
        let Ok(size) = sock.read_i32().await else {
            return;
        };
        let mut frame = vec![0u8; usize::try_from(size).unwrap_or(0)];
        if sock.read_exact(&mut frame).await.is_err() || frame.len() < 8 {
            return;
        }
        let mut frame = Bytes::from(frame);
        let key = ApiKey::try_from(i16::from_be_bytes([frame[0], frame[1]])).expect("api key");
        let version = i16::from_be_bytes([frame[2], frame[3]]);
        let header = RequestHeader::decode(&mut frame, key.request_header_version(version))
            .expect("request header");
        let mut body = BytesMut::new();
        match key {
            ApiKey::ApiVersions => {
                let mut r = ApiVersionsResponse::default();
                r.api_keys = vec![
                    ApiVersion::default()
                        .with_api_key(ApiKey::ApiVersions as i16)
                        .with_min_version(0)
                        .with_max_version(3),
                    ApiVersion::default()
                        .with_api_key(ApiKey::Metadata as i16)
                        .with_min_version(0)
                        .with_max_version(13),
                ];
                r.encode(&mut body, version).expect("encode");
            }
            ApiKey::Metadata => {
                let mut r = MetadataResponse::default();
                r.brokers = ports
                    .iter()
                    .enumerate()
                    .map(|(i, p)| {
                        MetadataResponseBroker::default()
                            .with_node_id(BrokerId(5 + i as i32))
                            .with_host(StrBytes::from_static_str("127.0.0.1"))
                            .with_port(i32::from(*p))
                    })
                    .collect();
                r.cluster_id = Some(StrBytes::from_static_str("stale"));
                r.controller_id = BrokerId(5);
                if refusing.load(Ordering::SeqCst) {
                    refused.fetch_add(1, Ordering::SeqCst);
                    r.error_code = 129;
                }
                r.encode(&mut body, version).expect("encode");
            }
            _ => return,
        }
        let mut head = BytesMut::new();
        ResponseHeader::default()
            .with_correlation_id(header.correlation_id)
            .encode(&mut head, key.response_header_version(version))
            .expect("encode header");
        let mut out = BytesMut::new();
        out.put_i32(i32::try_from(head.len() + body.len()).expect("size"));
        out.extend_from_slice(&head);
        out.extend_from_slice(&body);
        if sock.write_all(&out).await.is_err() {
            return;
        }
    }
}

/// The stale cluster behind a switch, a client that learned it, and the
/// real cluster's id; the switch then leads to the real broker.
async fn stale_setup(
    test: &str,
    strategy: MetadataRecoveryStrategy,
) -> Option<(StaleCluster, Switch, Cluster, Option<String>, Cluster)> {
    let bootstrap = support::bootstrap(test)?;
    support::trace();
    let real = Cluster::connect(support::config(&bootstrap))
        .await
        .expect("connect");
    let real_id = real.metadata().cluster_id.clone();
    let stale = StaleCluster::start(2).await;
    let switch = Switch::start(&stale.addrs()[0]).await;
    let cluster = Cluster::connect(client(&switch.addr(), strategy))
        .await
        .expect("connect through the switch");
    let learned: Vec<String> = cluster
        .metadata()
        .brokers
        .values()
        .map(|b| format!("{}:{}", b.host, b.port))
        .collect();
    assert_eq!(
        learned,
        stale.addrs(),
        "the client learned the stale cluster"
    );
    switch.retarget(&first(&bootstrap));
    stale.refuse();
    Some((stale, switch, cluster, real_id, real))
}

#[tokio::test]
async fn rebootstrap_required_sends_the_client_straight_back_to_bootstrap() {
    let Some((stale, _switch, cluster, real_id, real)) = stale_setup(
        "rebootstrap_required",
        MetadataRecoveryStrategy::Rebootstrap,
    )
    .await
    else {
        return;
    };
    let m = cluster
        .refresh_metadata(None)
        .await
        .expect("metadata through bootstrap.servers");
    assert_eq!(m.cluster_id, real_id, "the real cluster's metadata");
    assert_eq!(
        m.brokers.keys().collect::<Vec<_>>(),
        real.metadata().brokers.keys().collect::<Vec<_>>(),
        "only the real cluster's brokers are known"
    );
    assert_eq!(
        stale.refused(),
        1,
        "one REBOOTSTRAP_REQUIRED, then bootstrap: the other stale broker is not asked"
    );
}

#[tokio::test]
async fn rebootstrap_required_under_strategy_none_fails_naming_the_key() {
    let Some((stale, _switch, cluster, _, _)) =
        stale_setup("rebootstrap_required_none", MetadataRecoveryStrategy::None).await
    else {
        return;
    };
    let err = cluster
        .refresh_metadata(None)
        .await
        .expect_err("strategy none does not go back to bootstrap");
    let text = err.to_string();
    assert!(matches!(err, Error::Config { .. }), "{err:?}");
    assert!(text.contains("metadata.recovery.strategy"), "{text}");
    assert!(text.contains("REBOOTSTRAP_REQUIRED"), "{text}");
    assert_eq!(stale.refused(), 1);
    assert!(
        cluster.metadata().brokers.keys().all(|id| *id >= 5),
        "nothing learned from bootstrap"
    );
}
