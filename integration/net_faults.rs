//! Network faults. Connection level: a broker that dies or hangs
//! mid-request; every case must end in a typed error within the request
//! timeout, with no hang and no panic (hostile frames from a fake broker
//! are in the `offline` target's `hostile_connection.rs`).
//! Workload level, on the 3-node cluster: the Jepsen-style queue and the
//! exactly-once copier with every client connection through the cluster
//! proxy (`support::proxy::ClusterProxy`), under drops, black-holes,
//! latency and one-way cuts on the nodes that play a role.

use std::time::{Duration, Instant};

use kafka_protocol::messages::MetadataRequest;
use purekafka::cluster::{BrokerAddr, Connection, ConnectionConfig};
use purekafka::protocol::versions::Versions;
use purekafka::Error;

use std::sync::Arc;

use crate::support::chaos::{Chaos, Fault, Role, FAULTS};
use crate::support::copier::CopierRun;
use crate::support::{self, proxy::Proxy};

const METADATA: Versions = Versions::new(1, 12);

fn conn_config(request_timeout: Duration) -> ConnectionConfig {
    ConnectionConfig {
        client_id: "purekafka-faults".into(),
        request_timeout,
        setup_timeout: Duration::from_secs(5),
        max_response_size: 1 << 20,
        security: Default::default(),
    }
}

async fn connect(port: u16, request_timeout: Duration) -> Connection {
    Connection::connect(
        &BrokerAddr::bootstrap("127.0.0.1", port),
        &conn_config(request_timeout),
    )
    .await
    .expect("handshake with the broker")
}

#[tokio::test]
async fn broker_killed_mid_request_fails_every_pending_request() {
    let Some(bootstrap) = support::bootstrap("broker_killed_mid_request") else {
        return;
    };
    let upstream = bootstrap.split(',').next().unwrap().to_owned();
    let proxy = Proxy::start(&upstream).await;
    let timeout = Duration::from_secs(5);
    let conn = connect(proxy.port, timeout).await;
    // A healthy round trip first: the proxy really reaches the broker.
    let ok = conn
        .send(&MetadataRequest::default(), METADATA)
        .await
        .expect("metadata via proxy");
    assert!(!ok.brokers.is_empty());

    // Responses stop; three requests are pending when the "broker" dies.
    proxy.stall();
    let started = Instant::now();
    let pending: Vec<_> = (0..3)
        .map(|_| {
            let c = conn.clone();
            tokio::spawn(async move { c.send(&MetadataRequest::default(), METADATA).await })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(200)).await;
    proxy.kill();
    for p in pending {
        let err = p.await.expect("no panic").expect_err("request must fail");
        assert!(
            matches!(err, Error::Disconnected { .. } | Error::Io { .. }),
            "typed error, got {err:?}"
        );
        assert!(err.is_retriable(), "a dead connection is retriable: {err}");
        assert!(
            err.to_string().contains("127.0.0.1"),
            "error names the broker: {err}"
        );
    }
    assert!(
        started.elapsed() < timeout,
        "failed before the request timeout"
    );
    assert!(conn.is_closed());
    let err = conn
        .send(&MetadataRequest::default(), METADATA)
        .await
        .expect_err("closed");
    assert!(err.is_retriable());
}

#[tokio::test]
async fn hung_broker_times_out_and_closes_the_connection() {
    let Some(bootstrap) = support::bootstrap("hung_broker_times_out") else {
        return;
    };
    let upstream = bootstrap.split(',').next().unwrap().to_owned();
    let proxy = Proxy::start(&upstream).await;
    let timeout = Duration::from_millis(800);
    let conn = connect(proxy.port, timeout).await;
    proxy.stall();
    let err = conn
        .send(&MetadataRequest::default(), METADATA)
        .await
        .expect_err("no answer must time out");
    match &err {
        Error::Timeout {
            config_key, after, ..
        } => {
            assert_eq!(*config_key, "request.timeout.ms");
            assert_eq!(*after, timeout);
        }
        other => panic!("expected Timeout, got {other:?}"),
    }
    assert!(err.is_retriable());
    // The connection is torn down so that nothing later matches a stale response.
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(conn.is_closed());
}

/// The queue workload with every client connection through the loopback
/// proxy, and network faults instead of process faults: the transaction
/// coordinator black-holed, a leader's answers dropped (one direction
/// cut), the pollers' group coordinator cut off, a leader slowed down.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jepsen_queue_has_no_anomalies_under_network_faults() {
    use crate::support::chaos::Fault;
    use crate::support::proxy::NetFault;
    use crate::support::queue::{self, FaultPlan, Options, Target};
    let _serial = FAULTS.lock().await;
    let Some(bootstrap) = support::bootstrap3("jepsen_queue_net") else {
        return;
    };
    support::trace();
    let s = Duration::from_secs;
    let opts = Options {
        duration: s(30),
        partitions: 3,
        writers: 2,
        rate: 100,
        pollers: 2,
        txn_clients: 2,
        abort_probability: 0.2,
        faults: FaultPlan::Script(vec![
            (
                s(4),
                Target::TxnCoordinator,
                Fault::Net(NetFault::BlackHole),
                s(4),
            ),
            (s(10), Target::Leader, Fault::Net(NetFault::OneWay), s(3)),
            (
                s(15),
                Target::GroupCoordinator,
                Fault::Net(NetFault::Cut),
                s(3),
            ),
            (
                s(20),
                Target::Leader,
                Fault::Net(NetFault::Latency(Duration::from_millis(300))),
                s(3),
            ),
        ]),
        through_proxy: true,
        min_txns_after_faults: 5,
    };
    let report = queue::run(&bootstrap, opts).await.expect("workload ran");
    eprintln!("{report}");
    assert_eq!(
        report.faults_planned, 4,
        "the plan has four faults: {report}"
    );
    assert_eq!(report.faults.len(), 4, "every fault fired: {report}");
    let (relayed, dropped) = report.proxy_frames.expect("through the proxy");
    assert!(
        relayed > 1000 && dropped > 0,
        "the clients' traffic went through the proxy and the faults dropped some: {report}"
    );
    assert!(
        report.txns_committed_after_faults >= 5,
        "transactions did not resume after the faults: {report}"
    );
    assert!(
        report.sends_acked > 1000 && report.polls > 10 && report.ctp_checked > 100,
        "too little work to prove anything: {report}"
    );
    assert_eq!(report.anomalies(), 0, "{report}\n{}", report.examples());
}

/// The exactly-once copier with every connection through the loopback
/// proxy, under network faults on its transaction coordinator, its group
/// coordinator and an output leader. A copier run that fails is started
/// again (the next incarnation fences it); the output must hold every
/// input record once, in order per input partition.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eos_copy_is_exact_under_network_faults_through_the_proxy() {
    use crate::support::proxy::{ClusterProxy, NetFault};
    let _serial = FAULTS.lock().await;
    let Some(bootstrap) = support::bootstrap3("eos_copy_net_faults") else {
        return;
    };
    support::trace();
    const N: usize = 20_000;
    let run = CopierRun::prepare(&bootstrap, "eos-net", N, 2).await;
    let (cluster, output) = (run.cluster.clone(), run.output.clone());

    let proxy = Arc::new(ClusterProxy::start(&cluster).await.expect("proxy"));
    let through = proxy.bootstrap();
    let chaos = Chaos::with_proxy(cluster.clone(), proxy.clone());
    let (group, txn_id) = (run.group.clone(), run.txn_id.clone());
    let spawn_copier = || {
        run.command(
            &through,
            &[
                "--transaction-size",
                "500",
                "--pause-ms",
                "300",
                "--abort-probability",
                "0.2",
                "--idle-exit-ms",
                "8000",
            ],
        )
        .spawn()
        .expect("start eos_copy")
    };
    let mut copier = spawn_copier();
    let faults = [
        (Role::TxnCoordinator(txn_id.clone()), NetFault::Cut),
        (
            Role::Leader {
                topic: output.clone(),
                partition: 0,
            },
            NetFault::OneWay,
        ),
        (Role::GroupCoordinator(group.clone()), NetFault::BlackHole),
        (
            Role::TxnCoordinator(txn_id.clone()),
            NetFault::Latency(Duration::from_millis(300)),
        ),
    ];
    for (role, fault) in &faults {
        tokio::time::sleep(Duration::from_secs(3)).await;
        chaos
            .bounce(role, Fault::Net(*fault), Duration::from_secs(3))
            .await
            .expect("network fault");
    }
    let mut restarts = 0;
    let status = loop {
        let status = tokio::time::timeout(Duration::from_secs(240), copier.wait())
            .await
            .expect("the copier finishes within 240 s")
            .expect("copier ran");
        if status.success() || restarts == 3 {
            break status;
        }
        restarts += 1;
        copier = spawn_copier();
    };
    assert!(status.success(), "the last copier run failed: {status}");
    let injected = chaos.injected().len();
    let (relayed, dropped) = proxy.frames();
    eprintln!(
        "eos copy through the proxy: {N} inputs, {injected} network faults, {restarts} copier restarts; \
         proxy: {relayed} frames relayed, {dropped} dropped"
    );
    assert_eq!(injected, faults.len(), "every planned fault fired");
    assert!(
        relayed > 0 && dropped > 0,
        "traffic through the proxy, some dropped"
    );
    let total = run.assert_exact_copy(&bootstrap, N).await;
    eprintln!("eos copy through the proxy: output {total} records, each input once, in order");
}
