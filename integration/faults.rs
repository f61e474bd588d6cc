//! Broker faults on the 3-node cluster (`scripts/kafka up --nodes 3`):
//! nodes are SIGKILLed and restarted while clients run. Tests here take a
//! shared lock, because each one stops nodes the others depend on.
//! The fault driver and the Jepsen-style queue workload live in
//! `support::chaos` and `support::queue`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use purekafka::producer::{Producer, ProducerConfig, ProducerRecord};
use purekafka::{Cluster, TopicPartition};

use crate::support::{self, read::read_partition};

use crate::support::chaos::{Chaos, Fault, Role, FAULTS};
use crate::support::copier::CopierRun;

/// The values of one partition, each a decimal number, in offset order.
async fn read_numbers<T>(cluster: &Cluster, topic: &str, partition: i32) -> Vec<T>
where
    T: std::str::FromStr,
    T::Err: std::fmt::Debug,
{
    read_partition(cluster, topic, partition)
        .await
        .iter()
        .map(|r| {
            std::str::from_utf8(r.value.as_deref().unwrap())
                .unwrap()
                .parse()
                .unwrap()
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idempotent_producer_keeps_every_acked_record_once_and_in_order_across_a_leader_kill() {
    // The lock first: another fault test may have a node down right now.
    let _serial = FAULTS.lock().await;
    let Some(bootstrap) = support::bootstrap3("idempotent_producer_leader_kill") else {
        return;
    };
    support::trace();
    let client = purekafka::ClientConfig::builder()
        .bootstrap_servers(&bootstrap)
        .client_id("purekafka-faults")
        .request_timeout(Duration::from_secs(5))
        .default_api_timeout(Duration::from_secs(30));
    let cluster = Cluster::connect(client.clone().build().unwrap())
        .await
        .unwrap();
    let topic = support::unique_topic("f-idem");
    support::create_topic(&cluster, &topic, 3).await;
    let producer = Producer::connect(
        ProducerConfig::builder()
            .client(client)
            .batch_size(4096)
            .delivery_timeout(Duration::from_secs(90))
            .build()
            .unwrap(),
    )
    .await
    .unwrap();

    // Partition p gets values p, p+3, p+6, ...: each partition's values must
    // come back strictly increasing (order) and each at most once.
    const N: u64 = 60_000;
    let acked: Arc<Mutex<HashMap<u64, (i32, i64)>>> = Arc::default();
    let failed: Arc<Mutex<Vec<String>>> = Arc::default();
    let sender = {
        let producer = producer.clone();
        let topic = topic.clone();
        let acked = acked.clone();
        let failed = failed.clone();
        tokio::spawn(async move {
            for i in 0..N {
                let record = ProducerRecord::new(&topic)
                    .partition((i % 3) as i32)
                    .value(i.to_string());
                let acked = acked.clone();
                let failed = failed.clone();
                producer
                    .send_with_callback(record, move |r| match r {
                        Ok(m) => {
                            acked
                                .lock()
                                .unwrap()
                                .insert(i, (m.partition.partition, m.offset));
                        }
                        Err(e) => failed.lock().unwrap().push(format!("{i}: {e}")),
                    })
                    .await
                    .expect("send");
                if i % 200 == 0 {
                    // About 20k records/s, so the kill lands mid-stream.
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            }
        })
    };

    tokio::time::sleep(Duration::from_millis(800)).await;
    let chaos = Chaos::new(cluster.clone());
    let victim = chaos
        .inject(
            &Role::Leader {
                topic: topic.clone(),
                partition: 0,
            },
            Fault::Kill,
        )
        .await
        .expect("kill the leader");
    let acked_at_kill = acked.lock().unwrap().len();
    tokio::time::sleep(Duration::from_secs(3)).await;
    chaos.heal().await.expect("restart the leader");

    sender.await.unwrap();
    producer.flush().await;
    let metrics = producer.metrics();
    producer.close(Duration::from_secs(30)).await.unwrap();
    let failed = failed.lock().unwrap().clone();
    assert!(
        failed.is_empty(),
        "records failed: {:?}",
        &failed[..failed.len().min(5)]
    );
    let acked = acked.lock().unwrap().clone();
    assert_eq!(acked.len() as u64, N, "every record acknowledged");
    assert!(
        acked_at_kill < N as usize,
        "the kill landed after the last ack; the test proved nothing"
    );

    let mut total = 0;
    let mut found = std::collections::HashSet::new();
    for p in 0..3 {
        let values: Vec<u64> = read_numbers(&cluster, &topic, p).await;
        for w in values.windows(2) {
            assert!(
                w[0] < w[1],
                "partition {p}: {} then {} (duplicate or reorder)",
                w[0],
                w[1]
            );
        }
        found.extend(values.iter().copied());
        for v in &values {
            let (ap, _) = acked[v];
            assert_eq!(ap, p, "value {v} acked for partition {ap}, found in {p}");
        }
        total += values.len();
    }
    let mut missing: Vec<(u64, (i32, i64))> = acked
        .iter()
        .filter(|(v, _)| !found.contains(v))
        .map(|(v, at)| (*v, *at))
        .collect();
    missing.sort();
    assert!(
        missing.is_empty(),
        "{} acknowledged records missing, e.g. (value, (partition, offset)): {:?}",
        missing.len(),
        &missing[..missing.len().min(8)]
    );
    assert_eq!(
        total as u64, N,
        "each acknowledged record present exactly once"
    );
    eprintln!(
        "leader kill: node {victim} killed after {acked_at_kill} acks; {} retries, {} epoch bumps, {} requests",
        metrics.retries, metrics.epoch_bumps, metrics.requests
    );
    assert!(metrics.retries > 0, "the kill should have forced retries");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eos_copy_survives_copier_kills_and_every_broker_bounced_in_turn() {
    let _serial = FAULTS.lock().await;
    let Some(bootstrap) = support::bootstrap3("eos_copy_under_faults") else {
        return;
    };
    support::trace();
    // 60k input records: partition p holds "p<p>-<seq>" in order.
    const N: usize = 60_000;
    let run = CopierRun::prepare(&bootstrap, "eos", N, 3).await;
    let (cluster, output) = (run.cluster.clone(), run.output.clone());

    // A read_committed verifier runs throughout: no duplicate, and each
    // input partition's values in order, at every moment.
    let progress = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let verifier = {
        let bootstrap = bootstrap.clone();
        let output = output.clone();
        let progress = progress.clone();
        tokio::spawn(async move {
            use purekafka::consumer::{AutoOffsetReset, Consumer, ConsumerConfig, IsolationLevel};
            let consumer = Consumer::connect(
                ConsumerConfig::builder()
                    .bootstrap_servers(&bootstrap)
                    .auto_offset_reset(AutoOffsetReset::Earliest)
                    .isolation_level(IsolationLevel::ReadCommitted)
                    .build()
                    .unwrap(),
            )
            .await
            .unwrap();
            consumer.assign(
                (0..3)
                    .map(|p| TopicPartition::new(output.as_str(), p))
                    .collect(),
            );
            let mut last: HashMap<String, u64> = HashMap::new();
            let mut seen = 0usize;
            let deadline = tokio::time::Instant::now() + Duration::from_secs(240);
            while seen < N && tokio::time::Instant::now() < deadline {
                let Ok(records) = consumer.poll(Duration::from_millis(200)).await else {
                    continue;
                };
                for r in records {
                    let v = String::from_utf8(r.value.unwrap().to_vec()).unwrap();
                    let (p, seq) = v.split_once('-').unwrap();
                    let seq: u64 = seq.parse().unwrap();
                    if let Some(prev) = last.insert(p.to_owned(), seq) {
                        assert!(seq == prev + 1, "verifier: {p} went from {prev} to {seq}");
                    } else {
                        assert_eq!(seq, 0, "verifier: {p} starts at {seq}");
                    }
                    seen += 1;
                }
                progress.store(seen, std::sync::atomic::Ordering::Relaxed);
            }
            consumer.close().await.unwrap();
            seen
        })
    };

    let txn_id = run.txn_id.clone();
    // `idle_ms`: a broker bounce can stall the input for seconds, which must
    // not read as the end of the input while a round runs.
    let spawn_copier = |idle_ms: &str| {
        run.command(
            &bootstrap,
            &[
                "--transaction-size",
                "500",
                // About 1k records/s, so the copy spans all three rounds.
                "--pause-ms",
                "250",
                "--abort-probability",
                "0.33",
                "--idle-exit-ms",
                idle_ms,
            ],
        )
        .spawn()
        .expect("start eos_copy")
    };
    // Transactions bounce: three rounds; in each, one broker is hard-bounced
    // (SIGKILL, restart) while the copier runs, the transaction coordinator
    // first, then the other two, so every node goes down once. Then the
    // copier itself is SIGKILLed at a random moment.
    let chaos = Chaos::new(cluster.clone());
    let first = chaos
        .resolve(&Role::TxnCoordinator(txn_id.clone()))
        .await
        .expect("transaction coordinator");
    let order: Vec<i32> = std::iter::once(first)
        .chain((1..=3).filter(|n| *n != first))
        .collect();
    let mut kills_mid_copy = 0;
    let mut bounced = Vec::new();
    for victim in order {
        let before = progress.load(std::sync::atomic::Ordering::Relaxed);
        let mut copier = spawn_copier("60000");
        let wait_for_progress = |min: usize| {
            let progress = progress.clone();
            async move {
                let from = tokio::time::Instant::now();
                while progress.load(std::sync::atomic::Ordering::Relaxed) < min
                    && from.elapsed() < Duration::from_secs(30)
                {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        };
        wait_for_progress(before + 1_000).await;
        let role = if victim == first {
            Role::TxnCoordinator(txn_id.clone())
        } else {
            Role::Node(victim)
        };
        let node = chaos
            .bounce(&role, Fault::Kill, Duration::from_secs(2))
            .await
            .expect("bounce");
        bounced.push(node);
        // The copier must go on after the bounce.
        let after = progress.load(std::sync::atomic::Ordering::Relaxed);
        wait_for_progress(after + 1_000).await;
        tokio::time::sleep(Duration::from_millis(fastrand::u64(0..400))).await;
        if copier.try_wait().ok().flatten().is_none() {
            kills_mid_copy += 1;
        }
        copier.start_kill().expect("SIGKILL the copier");
        let _ = copier.wait().await;
    }
    let mut nodes = bounced.clone();
    nodes.sort();
    assert_eq!(
        nodes,
        vec![1, 2, 3],
        "every broker bounced once: {bounced:?}"
    );
    assert_eq!(kills_mid_copy, 3, "every kill hit a running copier");
    let status = spawn_copier("4000").wait().await.expect("last copier run");
    assert!(status.success(), "the last copier run failed: {status}");

    let seen = verifier.await.expect("verifier");
    assert_eq!(seen, N, "the verifier saw every record once");
    run.assert_exact_copy(&bootstrap, N).await;
    eprintln!(
        "transactions bounce: {N} records copied, brokers bounced {bounced:?} (first: txn coordinator), \
         copier SIGKILLed {kills_mid_copy} times; anomalies: duplicates 0, missing 0, out of order 0"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jepsen_queue_has_no_anomalies_under_a_pause_and_a_kill() {
    use crate::support::chaos::Fault;
    use crate::support::queue::{self, FaultPlan, Options, Target};
    let _serial = FAULTS.lock().await;
    let Some(bootstrap) = support::bootstrap3("jepsen_queue") else {
        return;
    };
    support::trace();
    // One pause of the transaction coordinator, one kill of a leader.
    let opts = Options {
        duration: Duration::from_secs(25),
        partitions: 3,
        writers: 2,
        rate: 100,
        pollers: 2,
        // Two members of the transactional group: rebalances and
        // generations are part of the run.
        txn_clients: 2,
        abort_probability: 0.2,
        faults: FaultPlan::Script(vec![
            (
                Duration::from_secs(4),
                Target::TxnCoordinator,
                Fault::Pause,
                Duration::from_secs(4),
            ),
            (
                Duration::from_secs(11),
                Target::Leader,
                Fault::Kill,
                Duration::from_secs(3),
            ),
        ]),
        through_proxy: false,
        min_txns_after_faults: 5,
    };
    let report = queue::run(&bootstrap, opts).await.expect("workload ran");
    eprintln!("{report}");
    assert_eq!(
        report.faults_planned, 2,
        "the plan has two faults: {report}"
    );
    assert_eq!(report.faults.len(), 2, "both faults fired: {report}");
    // Clients run on until 5 transactions commit after the faults (or
    // for at most twice the duration): fewer means the transactional
    // client did not recover.
    assert!(
        report.txns_committed_after_faults >= 5,
        "transactions did not resume after the faults: {report}"
    );
    assert!(
        report.sends_acked > 1000 && report.polls > 10,
        "too little work to prove anything: {report}"
    );
    assert!(
        report.ctp_checked > 100,
        "the transactional group consumed too little to check: {report}"
    );
    assert_eq!(report.anomalies(), 0, "{report}\n{}", report.examples());
}

/// The long variant, run by `scripts/jepsen` (not in the test command).
/// Knobs (environment): `JEPSEN_SECS` (default 300), `JEPSEN_FAULT_EVERY`
/// seconds between faults (20), `JEPSEN_FAULT_HOLD` seconds a fault lasts
/// (6), `JEPSEN_WRITERS` (3), `JEPSEN_RATE` sends/s per writer (200),
/// `JEPSEN_POLLERS` (2), `JEPSEN_TXN_CLIENTS` (2), `JEPSEN_NET` (0; 1 puts
/// the clients behind the proxy and makes the faults network faults).
/// Faults are random: kill or pause (or with `JEPSEN_NET=1`: drop,
/// black-hole, 500 ms latency, answers dropped) of a leader, the
/// controller, the group or the transaction coordinator.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "long; run through scripts/jepsen"]
async fn jepsen_queue_long() {
    use crate::support::queue::{self, FaultPlan, Options};
    let _serial = FAULTS.lock().await;
    let Some(bootstrap) = support::bootstrap3("jepsen_queue_long") else {
        return;
    };
    support::trace();
    let knob = |k: &str, d: u64| -> u64 {
        std::env::var(k)
            .ok()
            .map(|v| {
                v.parse()
                    .unwrap_or_else(|_| panic!("{k}={v}: not a number"))
            })
            .unwrap_or(d)
    };
    let opts = Options {
        duration: Duration::from_secs(knob("JEPSEN_SECS", 300)),
        partitions: 3,
        writers: knob("JEPSEN_WRITERS", 3) as usize,
        rate: knob("JEPSEN_RATE", 200) as u32,
        pollers: knob("JEPSEN_POLLERS", 2) as usize,
        txn_clients: knob("JEPSEN_TXN_CLIENTS", 2) as usize,
        abort_probability: 0.2,
        faults: FaultPlan::Random {
            every: Duration::from_secs(knob("JEPSEN_FAULT_EVERY", 20)),
            hold: Duration::from_secs(knob("JEPSEN_FAULT_HOLD", 6)),
            net: knob("JEPSEN_NET", 0) == 1,
        },
        through_proxy: knob("JEPSEN_NET", 0) == 1,
        min_txns_after_faults: 1,
    };
    let txn_clients = opts.txn_clients;
    let report = queue::run(&bootstrap, opts).await.expect("workload ran");
    println!("{report}");
    assert!(
        report.faults_planned >= 1,
        "the run was too short for one fault: {report}"
    );
    assert_eq!(
        report.faults.len(),
        report.faults_planned,
        "every planned fault fired: {report}"
    );
    assert!(
        txn_clients == 0 || report.txns_committed_after_faults >= 1,
        "transactions did not resume after the faults: {report}"
    );
    assert!(
        txn_clients == 0 || report.ctp_checked > 0,
        "the transactional group consumed nothing to check: {report}"
    );
    if let Some((relayed, _)) = report.proxy_frames {
        assert!(relayed > 0, "no traffic went through the proxy: {report}");
    }
    assert_eq!(report.anomalies(), 0, "{}", report.examples());
}

/// Issue #9 (d): a streams app with the parallel retry lane (#8) keeps its
/// promises while the broker coordinating its group is hard-bounced: every
/// input is processed at least once, and the dead-letter topic holds
/// exactly the records that exhausted their attempts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_retry_lane_processes_everything_and_dead_letters_exactly_across_a_broker_bounce() {
    use purekafka::streams::{
        Backoff, FailurePolicy, OrderingMode, ProcessingError, RetryLane, Streams, StreamsConfig,
        StringDeserializer,
    };
    use std::collections::{BTreeMap, HashSet};
    let _serial = FAULTS.lock().await;
    let Some(bootstrap) = support::bootstrap3("streams_retry_lane_bounce") else {
        return;
    };
    support::trace();
    let cluster = Cluster::connect(support::config(&bootstrap)).await.unwrap();
    let topic = support::unique_topic("f-streams");
    let retry_topic = format!("{topic}-retry");
    let dlq = format!("{topic}-dlq");
    support::create_topic(&cluster, &topic, 3).await;
    support::create_topic(&cluster, &retry_topic, 3).await;
    support::create_topic(&cluster, &dlq, 1).await;

    // v % 50 == 0 always fails (dead-lettered after 3 attempts); v % 50 == 1
    // fails twice, then succeeds in the retry lane.
    const N: i64 = 3_000;
    let succeeded: Arc<Mutex<HashSet<i64>>> = Arc::default();
    let attempts: Arc<Mutex<HashMap<i64, u32>>> = Arc::default();
    let app = support::unique_topic("f-streams-app");
    let lane = RetryLane::new(
        retry_topic.as_str(),
        dlq.as_str(),
        Backoff::fixed(Duration::from_millis(500), 3),
    );
    let (ok, att) = (succeeded.clone(), attempts.clone());
    let running = Streams::topology(
        StreamsConfig::builder(&app, &bootstrap)
            .commit_interval(Duration::from_millis(200))
            .consumer_property("session.timeout.ms", "10000")
            .consumer_property("heartbeat.interval.ms", "500")
            .ordering(OrderingMode::Key)
            .max_in_flight(64, 128)
            .failure_policy(FailurePolicy::RetryLane(lane))
            .build()
            .unwrap(),
    )
    .source(topic.as_str(), StringDeserializer, StringDeserializer)
    .for_each_async(move |rec| {
        let (ok, att) = (ok.clone(), att.clone());
        async move {
            let v: i64 = rec
                .value
                .parse()
                .map_err(|e| ProcessingError::new(format!("{e}")))?;
            let n = {
                let mut a = att.lock().unwrap();
                let e = a.entry(v).or_default();
                *e += 1;
                *e
            };
            tokio::time::sleep(Duration::from_millis(1)).await;
            match v % 50 {
                0 => Err(ProcessingError::new(format!("{v} always fails"))),
                1 if n <= 2 => Err(ProcessingError::new(format!("{v} fails twice"))),
                _ => {
                    ok.lock().unwrap().insert(v);
                    Ok(())
                }
            }
        }
    })
    .build()
    .start()
    .await
    .unwrap();

    // Input arrives over ~10 s; the group coordinator is bounced meanwhile.
    let producer = Producer::connect(
        ProducerConfig::builder()
            .bootstrap_servers(&bootstrap)
            .delivery_timeout(Duration::from_secs(90))
            .build()
            .unwrap(),
    )
    .await
    .unwrap();
    let input = {
        let producer = producer.clone();
        let topic = topic.clone();
        tokio::spawn(async move {
            let mut acks = Vec::new();
            for v in 0..N {
                let r = ProducerRecord::new(&topic)
                    .key(format!("key-{}", v % 97))
                    .value(v.to_string());
                acks.push(producer.send(r).await.expect("send"));
                if v % 30 == 0 {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
            for a in acks {
                a.await.expect("input record acknowledged");
            }
        })
    };
    tokio::time::sleep(Duration::from_secs(3)).await;
    let chaos = Chaos::new(cluster.clone());
    let victim = chaos
        .bounce(
            &Role::GroupCoordinator(app.clone()),
            Fault::Kill,
            Duration::from_secs(2),
        )
        .await
        .expect("bounce the group coordinator");
    input.await.unwrap();
    producer.close(Duration::from_secs(10)).await.unwrap();

    let always = (0..N).filter(|v| v % 50 == 0).count() as u64;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    loop {
        let done = succeeded.lock().unwrap().len() as i64 == N - always as i64;
        let m = running.metrics();
        if done && m.dead_lettered >= always {
            break;
        }
        assert!(!running.is_finished(), "the app stopped: {m:?}");
        assert!(
            tokio::time::Instant::now() < deadline,
            "not done after 120 s: {} of {} succeeded, {m:?}",
            succeeded.lock().unwrap().len(),
            N - always as i64
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let m = running.metrics();
    running.shutdown().await.unwrap();

    let succeeded = succeeded.lock().unwrap().clone();
    let missing: Vec<i64> = (0..N)
        .filter(|v| v % 50 != 0 && !succeeded.contains(v))
        .collect();
    assert!(missing.is_empty(), "never processed: {missing:?}");
    let wrongly_ok: Vec<i64> = succeeded.iter().filter(|v| *v % 50 == 0).copied().collect();
    assert!(wrongly_ok.is_empty(), "{wrongly_ok:?}");
    let dead: Vec<i64> = read_numbers(&cluster, &dlq, 0).await;
    let mut counts: BTreeMap<i64, usize> = BTreeMap::new();
    for v in &dead {
        *counts.entry(*v).or_default() += 1;
    }
    let dup: Vec<i64> = counts
        .iter()
        .filter(|(_, c)| **c > 1)
        .map(|(v, _)| *v)
        .collect();
    let want: Vec<i64> = (0..N).filter(|v| v % 50 == 0).collect();
    let got: Vec<i64> = counts.keys().copied().collect();
    let reprocessed = attempts
        .lock()
        .unwrap()
        .iter()
        .filter(|(v, n)| **n > if *v % 50 <= 1 { 3 } else { 1 })
        .count();
    eprintln!(
        "streams retry lane under bounce: {N} inputs, group coordinator node {victim} bounced; \
         processed {} ({reprocessed} values processed more than their attempt count), \
         dead-lettered {} (duplicates {}), missing {}",
        m.processed,
        dead.len(),
        dup.len(),
        missing.len()
    );
    assert!(dup.is_empty(), "dead-lettered twice: {dup:?}");
    assert_eq!(got, want, "dead-letter contents");
}
