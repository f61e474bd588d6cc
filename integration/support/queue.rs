//! A Jepsen-style queue workload on the 3-node cluster, with its checker.
//!
//! One topic, `partitions` partitions (a partition is the "key"); every
//! value written is a unique integer. Clients run at the same time:
//! - writers: idempotent producers, acks=all, plain sends;
//! - pollers: one consumer group, read_committed, committing after each
//!   poll;
//! - transactional clients: members of a second group (subscribed, so
//!   with generations and rebalances); each transaction polls
//!   (read_committed), sends fresh values, adds the consumed offsets with
//!   `send_offsets_to_transaction` and the member's generation (KIP-98,
//!   KIP-447) and commits, or aborts at random. Every input offset below
//!   the group's final committed offset must have been consumed by exactly
//!   one committed transaction.
//!
//! Meanwhile the fault plan pauses (SIGSTOP) or kills (SIGKILL) the node
//! that plays a role (see [`super::chaos`]). After healing, the pollers
//! drain the topic and a fresh read_committed consumer reads everything.
//!
//! The checker (see [`check`]) sorts anomalies into the classes of the
//! Jepsen Kafka workload: lost, duplicate, aborted-read, poll-skip and
//! nonmonotonic-poll (across the polls of one consumer session, i.e. with
//! no rebalance or seek between, and within one poll: the `int-` classes),
//! nonmonotonic-send (a producer's sends to a partition out of order in the
//! log; `int-` within one transaction), unseen (in the final read, never
//! delivered to the group pollers); plus inconsistent offsets (one offset,
//! two values) and unknown-outcome ("info") transactions seen both ways.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use purekafka::consumer::group::{
    ConsumerGroupMetadata, GroupConfig, GroupMember, OffsetAndMetadata,
};
use purekafka::consumer::{
    AutoOffsetReset, Consumer, ConsumerConfig, ConsumerRecord, IsolationLevel, RebalanceListener,
};
use purekafka::producer::{Acks, Producer, ProducerConfig, ProducerRecord};
use purekafka::{ClientConfig, ClientConfigBuilder, Cluster, TopicPartition, TxnErrorKind};
use tokio::time::Instant;

use super::chaos::{Chaos, Fault, Role};
use super::proxy::{ClusterProxy, NetFault};

mod check;

pub use check::Report;
use check::{check, value_of, FinalLog, Session, Shared};

/// Which role a planned fault hits (resolved when it fires).
#[derive(Clone, Copy, Debug)]
pub enum Target {
    /// The leader of a random partition of the queue topic.
    Leader,
    /// The active KRaft controller.
    Controller,
    /// The pollers' group coordinator.
    GroupCoordinator,
    /// The first transactional client's coordinator.
    TxnCoordinator,
}

/// When faults fire.
#[derive(Clone, Debug)]
pub enum FaultPlan {
    /// `(at, target, fault, hold)`, in order of `at` from the start.
    Script(Vec<(Duration, Target, Fault, Duration)>),
    /// A random target and fault every `every`, held for `hold`.
    /// With `net`, network faults through the proxy (drop, black-hole,
    /// latency, one direction cut) instead of kills and pauses.
    Random {
        every: Duration,
        hold: Duration,
        net: bool,
    },
}

/// Knobs of one run.
#[derive(Clone, Debug)]
pub struct Options {
    /// How long clients send (faults may extend it until healed).
    pub duration: Duration,
    pub partitions: i32,
    pub writers: usize,
    /// Sends per second per writer.
    pub rate: u32,
    pub pollers: usize,
    pub txn_clients: usize,
    /// Probability that a transaction is aborted on purpose.
    pub abort_probability: f64,
    pub faults: FaultPlan,
    /// Clients reach the cluster through a [`ClusterProxy`] (needed by
    /// [`Fault::Net`] faults).
    pub through_proxy: bool,
    /// Transactions that must commit after the last fault healed: clients
    /// keep going past `duration` (for at most another `duration`) until
    /// they have, so a slow machine still does enough work to check.
    pub min_txns_after_faults: u64,
}

/// Where each client is, so a client that does not stop can be named.
#[derive(Clone, Default)]
struct Stages(Arc<Mutex<BTreeMap<String, &'static str>>>);

impl Stages {
    fn set(&self, who: &str, stage: &'static str) {
        self.0.lock().unwrap().insert(who.to_owned(), stage);
    }
    fn done(&self, who: &str) {
        self.0.lock().unwrap().remove(who);
    }
    fn pending(&self) -> String {
        format!("{:?}", self.0.lock().unwrap())
    }
}

fn client(bootstrap: &str, id: &str) -> ClientConfigBuilder {
    ClientConfig::builder()
        .bootstrap_servers(bootstrap)
        .client_id(id)
        .request_timeout(Duration::from_secs(5))
        .default_api_timeout(Duration::from_secs(30))
}

fn partitions(topic: &str, n: i32) -> Vec<TopicPartition> {
    (0..n).map(|p| TopicPartition::new(topic, p)).collect()
}

/// What every sending client shares.
#[derive(Clone)]
struct Ctx {
    bootstrap: String,
    topic: String,
    opts: Options,
    /// The next unique value.
    next: Arc<AtomicI64>,
    stop: Arc<AtomicBool>,
    h: Shared,
    stages: Stages,
}

async fn writer(ctx: Ctx, id: usize) {
    let Ctx {
        bootstrap,
        topic,
        opts,
        next,
        stop,
        h,
        stages,
    } = ctx;
    let who = format!("writer-{id}");
    let producer_name: Arc<str> = who.as_str().into();
    stages.set(&who, "connect");
    let producer = Producer::connect(
        ProducerConfig::builder()
            .client(client(&bootstrap, &format!("jq-writer-{id}")))
            .acks(Acks::All)
            .idempotence(true)
            .delivery_timeout(Duration::from_secs(90))
            .build()
            .expect("writer config"),
    )
    .await
    .expect("writer producer");
    let gap = Duration::from_secs(1) / opts.rate.max(1);
    let mut tick = tokio::time::interval(gap);
    stages.set(&who, "send");
    while !stop.load(Ordering::Relaxed) {
        tick.tick().await;
        let v = next.fetch_add(1, Ordering::Relaxed);
        let p = (v % opts.partitions as i64) as i32;
        h.lock().unwrap().sent(&producer_name, None, p, v);
        let h2 = h.clone();
        let sent = producer
            .send_with_callback(
                ProducerRecord::new(&topic)
                    .partition(p)
                    .key(format!("k{p}"))
                    .value(v.to_string()),
                move |r| {
                    let mut h = h2.lock().unwrap();
                    match r {
                        Ok(m) => {
                            h.acked.insert(v, (m.partition.partition, m.offset));
                            h.note_offset(m.partition.partition, m.offset, v, "ack");
                        }
                        Err(_) => h.sends_failed += 1,
                    }
                },
            )
            .await;
        if sent.is_err() {
            h.lock().unwrap().sends_failed += 1;
        }
    }
    stages.set(&who, "flush");
    producer.flush().await;
    stages.set(&who, "close");
    let _ = producer.close(Duration::from_secs(30)).await;
    stages.done(&who);
}

/// Bumps a counter on every rebalance event: a new session begins.
struct Generation(Arc<AtomicU64>);

#[purekafka::async_trait]
impl RebalanceListener for Generation {
    async fn on_assigned(&self, _: &Consumer, _: &[TopicPartition]) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
    async fn on_revoked(&self, _: &Consumer, _: &[TopicPartition]) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
    async fn on_lost(&self, _: &Consumer, _: &[TopicPartition]) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

async fn poller(
    bootstrap: String,
    topic: String,
    group: String,
    stop: Arc<AtomicBool>,
    h: Shared,
    id: usize,
) {
    let consumer = Consumer::connect(
        ConsumerConfig::builder()
            .client(|_| client(&bootstrap, &format!("jq-poller-{id}")))
            .group_id(&group)
            .enable_auto_commit(false)
            .isolation_level(IsolationLevel::ReadCommitted)
            .auto_offset_reset(AutoOffsetReset::Earliest)
            .session_timeout(Duration::from_secs(10))
            .heartbeat_interval(Duration::from_millis(1000))
            .build()
            .expect("poller config"),
    )
    .await
    .expect("poller consumer");
    let generation = Arc::new(AtomicU64::new(0));
    consumer.set_rebalance_listener(Generation(generation.clone()));
    consumer.subscribe([topic.as_str()]).expect("subscribe");
    let who = format!("poller-{id}");
    let mut session = Session::new();
    let mut seen_gen = generation.load(Ordering::SeqCst);
    while !stop.load(Ordering::Relaxed) {
        let records = match consumer.poll(Duration::from_millis(200)).await {
            Ok(r) => r,
            Err(e) => {
                // Kept for the report; and a poll that fails at once (a
                // membership ended for good fails every later poll) must
                // not make this loop spin.
                h.lock().unwrap().poll_failed(&who, &e);
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let g = generation.load(Ordering::SeqCst);
        if g != seen_gen {
            seen_gen = g;
            session = Session::new();
        }
        if records.is_empty() {
            continue;
        }
        session.observe(&h, &who, &records, true);
        // After recording: a failed commit only means a redelivery.
        let _ = consumer.commit_sync().await;
    }
    let _ = consumer.close().await;
}

enum TxnEnd {
    Committed,
    Aborted,
    Unknown,
}

async fn txn_client(ctx: Ctx, txn_id: String, group: String) {
    let Ctx {
        bootstrap,
        topic,
        opts,
        next,
        stop,
        h,
        stages,
    } = ctx;
    let st = |s: &'static str| stages.set(&txn_id, s);
    let producer_name: Arc<str> = txn_id.as_str().into();
    st("connect");
    let producer = Producer::connect(
        ProducerConfig::builder()
            .client(client(&bootstrap, &format!("jq-{txn_id}")))
            .transactional_id(&txn_id)
            .delivery_timeout(Duration::from_secs(60))
            .build()
            .expect("txn config"),
    )
    .await
    .expect("txn producer");
    // A real member of the transactional group: its generation goes into
    // every TxnOffsetCommit, so a member the group has moved on from is
    // fenced (KIP-447).
    let consumer = Consumer::connect(
        ConsumerConfig::builder()
            .client(|_| client(&bootstrap, &format!("jq-{txn_id}-c")))
            .group_id(&group)
            .enable_auto_commit(false)
            .isolation_level(IsolationLevel::ReadCommitted)
            .auto_offset_reset(AutoOffsetReset::Earliest)
            .session_timeout(Duration::from_secs(10))
            .heartbeat_interval(Duration::from_millis(1000))
            .build()
            .expect("txn consumer config"),
    )
    .await
    .expect("txn consumer");
    let generation = Arc::new(AtomicU64::new(0));
    consumer.set_rebalance_listener(Generation(generation.clone()));
    consumer.subscribe([topic.as_str()]).expect("subscribe");
    let mut seen = TxnClientSeen::default();
    let mut need_init = true;
    'outer: while !stop.load(Ordering::Relaxed) {
        if need_init {
            st("init_transactions");
            if let Err(e) = producer.init_transactions().await {
                seen.failed("init_transactions", &e);
                tokio::time::sleep(Duration::from_millis(500)).await;
                continue;
            }
            need_init = false;
        }
        // After an abort, back to the committed offsets of what this member
        // holds (a rebalance does the same for what it is given).
        st("fetch_committed");
        let assigned = consumer.assignment();
        if !assigned.is_empty() {
            let committed = match consumer.committed(&assigned).await {
                Ok(c) => c,
                Err(e) => {
                    seen.failed("committed", &e);
                    tokio::time::sleep(Duration::from_millis(500)).await;
                    continue;
                }
            };
            for tp in &assigned {
                let _ = match committed.get(tp) {
                    Some(om) => consumer.seek(tp, om.offset),
                    None => consumer.seek_to_beginning(std::slice::from_ref(tp)),
                };
            }
        }
        let mut session = Session::new();
        let mut seen_gen = generation.load(Ordering::SeqCst);
        while !stop.load(Ordering::Relaxed) {
            st("poll");
            let records = match consumer.poll(Duration::from_millis(100)).await {
                Ok(r) => r,
                Err(e) => {
                    seen.failed("poll", &e);
                    Vec::new()
                }
            };
            seen.poll(records.len(), consumer.assignment().len());
            let g = generation.load(Ordering::SeqCst);
            if g != seen_gen {
                seen_gen = g;
                session = Session::new();
            }
            session.observe(&h, &txn_id, &records, false);
            // Without it the records cannot go into a transaction: rewind.
            let meta = match consumer.group_metadata() {
                Ok(m) => m,
                Err(e) => {
                    seen.failed("group_metadata", &e);
                    continue 'outer;
                }
            };
            let values: Vec<i64> = (0..4)
                .map(|_| next.fetch_add(1, Ordering::Relaxed))
                .collect();
            let abort = fastrand::f64() < opts.abort_probability;
            st("transaction");
            let (end, acks) =
                one_txn(&producer, &topic, &opts, &values, &records, &meta, abort).await;
            let consumed: Vec<(i32, i64)> = records
                .iter()
                .map(|r| (r.partition.partition, r.offset))
                .collect();
            let mut h = h.lock().unwrap();
            let txn = h.begin_txn();
            for v in &values {
                h.sent(
                    &producer_name,
                    Some(txn),
                    (*v % opts.partitions as i64) as i32,
                    *v,
                );
            }
            match end {
                TxnEnd::Committed => {
                    h.txns_committed += 1;
                    h.consumed_committed.push(consumed);
                    for (v, at) in values.iter().zip(acks) {
                        let (p, off) = at.unwrap_or(((*v % opts.partitions as i64) as i32, -1));
                        h.committed.insert(*v, (p, off));
                        h.note_offset(p, off, *v, "txn-ack");
                    }
                }
                TxnEnd::Aborted => {
                    h.txns_aborted += 1;
                    h.aborted.extend(values.iter().copied());
                    drop(h);
                    continue 'outer;
                }
                TxnEnd::Unknown => {
                    h.txns_unknown += 1;
                    h.info.push(values.clone());
                    h.consumed_info.push((values, consumed));
                    need_init = true;
                    drop(h);
                    continue 'outer;
                }
            }
        }
    }
    st("close");
    seen.generations = generation.load(Ordering::SeqCst);
    let account = seen.account(&txn_id, &consumer.assignment());
    h.lock().unwrap().txn_clients.push(account);
    let _ = producer.close(Duration::from_secs(30)).await;
    let _ = consumer.close().await;
    stages.done(&txn_id);
}

/// What one transactional client saw, for the report of a thin run.
#[derive(Default)]
struct TxnClientSeen {
    polls: u64,
    polls_with_records: u64,
    records: u64,
    polls_unassigned: u64,
    generations: u64,
    /// Failures by step: count and the last error.
    failures: std::collections::BTreeMap<&'static str, (u64, String)>,
}

impl TxnClientSeen {
    fn poll(&mut self, records: usize, assigned: usize) {
        self.polls += 1;
        self.records += records as u64;
        self.polls_with_records += u64::from(records > 0);
        self.polls_unassigned += u64::from(assigned == 0);
    }

    fn failed(&mut self, step: &'static str, e: &purekafka::Error) {
        let f = self.failures.entry(step).or_default();
        f.0 += 1;
        f.1 = e.to_string();
    }

    fn account(&self, who: &str, assigned: &[TopicPartition]) -> String {
        let failures: Vec<String> = self
            .failures
            .iter()
            .map(|(step, (n, last))| format!("{step} failed {n}x (last: {last})"))
            .collect();
        format!(
            "{who}: {} polls ({} with records, {} unassigned), {} records, \
             {} rebalance events, assigned at the end {:?}, failures [{}]",
            self.polls,
            self.polls_with_records,
            self.polls_unassigned,
            self.records,
            self.generations,
            assigned.iter().map(|tp| tp.partition).collect::<Vec<_>>(),
            failures.join(", ")
        )
    }
}

type Acked = Vec<Option<(i32, i64)>>;

/// One consume-transform-produce transaction.
async fn one_txn(
    producer: &Producer,
    topic: &str,
    opts: &Options,
    values: &[i64],
    consumed: &[ConsumerRecord],
    meta: &ConsumerGroupMetadata,
    abort: bool,
) -> (TxnEnd, Acked) {
    let mut futures = Vec::new();
    let body = async {
        producer.begin_transaction()?;
        for v in values {
            let p = (*v % opts.partitions as i64) as i32;
            futures.push(
                producer
                    .send(
                        ProducerRecord::new(topic)
                            .partition(p)
                            .key(format!("k{p}"))
                            .value(v.to_string()),
                    )
                    .await?,
            );
        }
        let mut offsets: HashMap<TopicPartition, OffsetAndMetadata> = HashMap::new();
        for r in consumed {
            offsets.insert(r.partition.clone(), OffsetAndMetadata::new(r.offset + 1));
        }
        if !offsets.is_empty() {
            producer.send_offsets_to_transaction(&offsets, meta).await?;
        }
        if abort {
            producer.abort_transaction().await?;
            return Ok(false);
        }
        producer.commit_transaction().await?;
        Ok::<bool, purekafka::Error>(true)
    };
    let end = match body.await {
        Ok(true) => TxnEnd::Committed,
        Ok(false) => TxnEnd::Aborted,
        Err(e) if e.txn_kind() == Some(TxnErrorKind::Abortable) => {
            match producer.abort_transaction().await {
                Ok(()) => TxnEnd::Aborted,
                Err(_) => TxnEnd::Unknown,
            }
        }
        // Indefinite (or anything else): the outcome is unknown until
        // init_transactions settles it.
        Err(_) => TxnEnd::Unknown,
    };
    let mut acks = Vec::new();
    for f in futures {
        acks.push(f.await.ok().map(|m| (m.partition.partition, m.offset)));
    }
    (end, acks)
}

/// Fires the plan's faults; returns how many it tried (each one a fault
/// the run must have injected).
async fn fault_driver(
    chaos: Arc<Chaos>,
    plan: FaultPlan,
    duration: Duration,
    roles: Roles,
) -> usize {
    let start = Instant::now();
    let mut planned = 0;
    let fire = |target: Target, fault: Fault, hold: Duration| {
        let chaos = chaos.clone();
        let roles = roles.clone();
        async move {
            let role = roles.role(target);
            eprintln!(
                "jepsen-queue: +{:.0}s {fault:?} {role}",
                start.elapsed().as_secs_f64()
            );
            if let Err(e) = chaos.bounce(&role, fault, hold).await {
                eprintln!("jepsen-queue: fault {fault:?} on {role}: {e}");
                let _ = chaos.heal().await;
            }
        }
    };
    match plan {
        FaultPlan::Script(steps) => {
            for (at, target, fault, hold) in steps {
                tokio::time::sleep_until(start + at).await;
                planned += 1;
                fire(target, fault, hold).await;
            }
        }
        FaultPlan::Random { every, hold, net } => {
            let targets = [
                Target::Leader,
                Target::Controller,
                Target::GroupCoordinator,
                Target::TxnCoordinator,
            ];
            while start.elapsed() + every + hold < duration {
                tokio::time::sleep(every).await;
                let target = targets[fastrand::usize(..targets.len())];
                let fault = if net {
                    [
                        Fault::Net(NetFault::Cut),
                        Fault::Net(NetFault::BlackHole),
                        Fault::Net(NetFault::Latency(Duration::from_millis(500))),
                        Fault::Net(NetFault::OneWay),
                    ][fastrand::usize(..4)]
                } else if fastrand::bool() {
                    Fault::Kill
                } else {
                    Fault::Pause
                };
                planned += 1;
                fire(target, fault, hold).await;
            }
        }
    }
    planned
}

#[derive(Clone)]
struct Roles {
    topic: String,
    partitions: i32,
    group: String,
    txn_id: String,
}

impl Roles {
    fn role(&self, t: Target) -> Role {
        match t {
            Target::Leader => Role::Leader {
                topic: self.topic.clone(),
                partition: fastrand::i32(0..self.partitions),
            },
            Target::Controller => Role::Controller,
            Target::GroupCoordinator => Role::GroupCoordinator(self.group.clone()),
            Target::TxnCoordinator => Role::TxnCoordinator(self.txn_id.clone()),
        }
    }
}

/// Reads every partition from the start to its last stable offset with a
/// fresh read_committed consumer: the version order the checker uses.
async fn final_read(bootstrap: &str, topic: &str, n: i32, h: &Shared) -> Result<FinalLog, String> {
    let consumer = Consumer::connect(
        ConsumerConfig::builder()
            .client(|_| client(bootstrap, "jq-final"))
            .isolation_level(IsolationLevel::ReadCommitted)
            .auto_offset_reset(AutoOffsetReset::Earliest)
            .build()
            .expect("final config"),
    )
    .await
    .map_err(|e| format!("final read: {e}"))?;
    let tps = partitions(topic, n);
    let ends = consumer
        .end_offsets(&tps)
        .await
        .map_err(|e| format!("final read: end offsets: {e}"))?;
    consumer.assign(tps.clone());
    consumer
        .seek_to_beginning(&tps)
        .map_err(|e| format!("final read: {e}"))?;
    let mut log = FinalLog::new();
    let mut session = Session::new();
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let mut done = true;
        for tp in &tps {
            let pos = consumer.position(tp).await.unwrap_or(0);
            if pos < ends.get(tp).copied().unwrap_or(0) {
                done = false;
            }
        }
        if done {
            break;
        }
        if Instant::now() > deadline {
            return Err(format!(
                "final read: not at the end offsets {ends:?} after 120 s"
            ));
        }
        let records = consumer
            .poll(Duration::from_millis(300))
            .await
            .unwrap_or_default();
        session.observe(h, "final", &records, false);
        for r in &records {
            if let Some(v) = value_of(r) {
                log.entry(r.partition.partition)
                    .or_default()
                    .push((r.offset, v));
            }
        }
    }
    let _ = consumer.close().await;
    Ok(log)
}

/// Runs the workload on the 3-node cluster at `bootstrap` and checks it.
/// `Err` means the run could not finish (not an anomaly).
pub async fn run(bootstrap: &str, opts: Options) -> Result<Report, String> {
    let start = Instant::now();
    let cluster = Cluster::connect(
        client(bootstrap, "jq-chaos")
            .build()
            .map_err(|e| e.to_string())?,
    )
    .await
    .map_err(|e| format!("connect: {e}"))?;
    let topic = super::unique_topic("jepsen-queue");
    super::create_topic(&cluster, &topic, opts.partitions).await;
    let group = super::unique_topic("jq-pollers");
    let roles = Roles {
        topic: topic.clone(),
        partitions: opts.partitions,
        group: group.clone(),
        txn_id: format!("{topic}-txn-0"),
    };
    // Clients go through the proxy when asked; the fault driver and the
    // final read talk to the brokers directly.
    let (chaos, clients_bootstrap) = if opts.through_proxy {
        let proxy = Arc::new(ClusterProxy::start(&cluster).await?);
        let through = proxy.bootstrap();
        (Chaos::with_proxy(cluster.clone(), proxy), through)
    } else {
        (Chaos::new(cluster.clone()), bootstrap.to_owned())
    };
    let chaos = Arc::new(chaos);
    let txn_group = format!("{topic}-txn-group");
    let h: Shared = Arc::default();
    let next = Arc::new(AtomicI64::new(0));
    let stop_clients = Arc::new(AtomicBool::new(false));
    let stop_pollers = Arc::new(AtomicBool::new(false));

    let stages = Stages::default();
    let ctx = Ctx {
        bootstrap: clients_bootstrap.clone(),
        topic: topic.clone(),
        opts: opts.clone(),
        next: next.clone(),
        stop: stop_clients.clone(),
        h: h.clone(),
        stages: stages.clone(),
    };
    let mut clients = Vec::new();
    for id in 0..opts.writers {
        clients.push(tokio::spawn(writer(ctx.clone(), id)));
    }
    for id in 0..opts.txn_clients {
        clients.push(tokio::spawn(txn_client(
            ctx.clone(),
            format!("{topic}-txn-{id}"),
            txn_group.clone(),
        )));
    }
    let mut pollers = Vec::new();
    for id in 0..opts.pollers {
        pollers.push(tokio::spawn(poller(
            clients_bootstrap.clone(),
            topic.clone(),
            group.clone(),
            stop_pollers.clone(),
            h.clone(),
            id,
        )));
    }

    // Faults, then the rest of the duration, then heal (the driver heals
    // after each fault; this is for a driver that failed half-way).
    let faults_planned =
        fault_driver(chaos.clone(), opts.faults.clone(), opts.duration, roles).await;
    let healed_at = h.lock().unwrap().txns_committed;
    tokio::time::sleep_until(start + opts.duration).await;
    chaos.heal().await?;
    let enough = || h.lock().unwrap().txns_committed >= healed_at + opts.min_txns_after_faults;
    let overtime = Instant::now() + opts.duration;
    while !enough() && Instant::now() < overtime {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    stop_clients.store(true, Ordering::Relaxed);
    for c in clients {
        tokio::time::timeout(Duration::from_secs(120), c)
            .await
            .map_err(|_| format!("clients did not stop within 120 s: {}", stages.pending()))?
            .map_err(|e| format!("client task: {e}"))?;
    }

    if opts.txn_clients > 0 {
        // Where the transactional group ended: every input offset below it
        // must be in exactly one committed transaction.
        let member = GroupMember::without_membership(&cluster, GroupConfig::new(&txn_group))
            .map_err(|e| format!("txn group: {e}"))?;
        let committed = member
            .fetch_committed(&partitions(&topic, opts.partitions))
            .await
            .map_err(|e| format!("txn group's committed offsets: {e}"))?;
        h.lock().unwrap().txn_group_committed = committed
            .iter()
            .map(|(tp, om)| (tp.partition, om.offset))
            .collect();
    }
    let log = final_read(bootstrap, &topic, opts.partitions, &h).await?;
    // The pollers drain: every value of the final read, or 60 s.
    let drain = Instant::now() + Duration::from_secs(60);
    while Instant::now() < drain {
        let drained = {
            let h = h.lock().unwrap();
            log.values()
                .flatten()
                .all(|(_, v)| h.read_by_pollers.contains(v))
        };
        if drained {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    stop_pollers.store(true, Ordering::Relaxed);
    for p in pollers {
        let _ = tokio::time::timeout(Duration::from_secs(60), p).await;
    }

    let h = h.lock().unwrap();
    let mut report = Report {
        elapsed: start.elapsed(),
        sends_acked: h.acked.len() as u64,
        sends_failed: h.sends_failed,
        polls: h.polls,
        polled_records: h.polled_records,
        txns_committed: h.txns_committed,
        txns_aborted: h.txns_aborted,
        txns_unknown: h.txns_unknown,
        txns_committed_after_faults: h.txns_committed - healed_at,
        faults_planned,
        proxy_frames: chaos.proxy_frames(),
        poll_errors: h
            .poll_errors
            .iter()
            .map(|(e, n)| format!("{n} x {e}"))
            .collect(),
        txn_clients: {
            let mut c = h.txn_clients.clone();
            if !c.is_empty() {
                c.push(format!(
                    "the group's committed offsets at the end {:?}",
                    h.txn_group_committed
                ));
            }
            c
        },
        faults: chaos
            .injected()
            .iter()
            .map(|i| format!("{:?} {} (node {})", i.fault, i.role, i.node))
            .collect(),
        ..Report::default()
    };
    check(&h, &log, &mut report);
    Ok(report)
}
