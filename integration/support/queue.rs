//! A Jepsen-style queue workload on the 3-node cluster, with its checker.
//!
//! One topic, `partitions` partitions (a partition is the "key"); every
//! value written is a unique integer. Clients run at the same time:
//! - writers: idempotent producers, acks=all, plain sends;
//! - pollers: one consumer group, read_committed, committing after each
//!   poll;
//! - transactional clients: each transaction polls (read_committed, offsets
//!   of a second group), sends fresh values, adds the consumed offsets with
//!   `send_offsets_to_transaction` (KIP-98, KIP-447) and commits, or aborts
//!   at random.
//!
//! Meanwhile the fault plan pauses (SIGSTOP) or kills (SIGKILL) the node
//! that plays a role (see [`super::chaos`]). After healing, the pollers
//! drain the topic and a fresh read_committed consumer reads everything.
//!
//! The checker counts, per class: lost writes (acknowledged, or committed
//! in a transaction, yet absent from the final read), duplicates (a value
//! twice in the final read), aborted reads (a value of an aborted
//! transaction seen by a read_committed reader), non-monotonic polls (an
//! offset not above the previous one of the same partition within one
//! consumer session, i.e. with no rebalance or seek between), inconsistent
//! offsets (one offset, two values, across acks and reads) and unseen
//! acknowledged values (present at the end, never delivered to the group
//! pollers).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;
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
    Random { every: Duration, hold: Duration },
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
}

/// What happened, and the anomalies per class.
#[derive(Debug, Default)]
pub struct Report {
    pub elapsed: Duration,
    pub sends_acked: u64,
    pub sends_failed: u64,
    pub polls: u64,
    pub polled_records: u64,
    pub txns_committed: u64,
    pub txns_aborted: u64,
    pub txns_unknown: u64,
    pub final_records: u64,
    pub faults: Vec<String>,
    pub lost: Vec<i64>,
    pub duplicates: Vec<i64>,
    pub aborted_reads: Vec<i64>,
    pub non_monotonic: Vec<String>,
    pub inconsistent_offsets: Vec<String>,
    pub unseen: Vec<i64>,
}

impl Report {
    /// Anomalies of every class together.
    pub fn anomalies(&self) -> usize {
        self.lost.len()
            + self.duplicates.len()
            + self.aborted_reads.len()
            + self.non_monotonic.len()
            + self.inconsistent_offsets.len()
            + self.unseen.len()
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "jepsen-queue: {:.0}s, ops: {} sends acked ({} failed), {} polls ({} records), \
             {} txns committed / {} aborted / {} unknown, final read {} records; \
             faults: {} [{}]; anomalies: lost {} duplicates {} aborted-reads {} \
             non-monotonic {} inconsistent-offsets {} unseen {}",
            self.elapsed.as_secs_f64(),
            self.sends_acked,
            self.sends_failed,
            self.polls,
            self.polled_records,
            self.txns_committed,
            self.txns_aborted,
            self.txns_unknown,
            self.final_records,
            self.faults.len(),
            self.faults.join(", "),
            self.lost.len(),
            self.duplicates.len(),
            self.aborted_reads.len(),
            self.non_monotonic.len(),
            self.inconsistent_offsets.len(),
            self.unseen.len(),
        )
    }
}

/// Everything the clients observed.
#[derive(Default)]
struct History {
    /// Plain sends acknowledged: value -> (partition, offset).
    acked: HashMap<i64, (i32, i64)>,
    sends_failed: u64,
    /// Values of committed transactions, with their acknowledged offsets.
    committed: HashMap<i64, (i32, i64)>,
    aborted: HashSet<i64>,
    txns_committed: u64,
    txns_aborted: u64,
    txns_unknown: u64,
    /// Values any read_committed reader saw (pollers, txn clients, final).
    read_any: HashSet<i64>,
    /// Values the group pollers saw.
    read_by_pollers: HashSet<i64>,
    /// (partition, offset) -> value, from acks and reads.
    at: HashMap<(i32, i64), i64>,
    inconsistent: Vec<String>,
    non_monotonic: Vec<String>,
    polls: u64,
    polled_records: u64,
}

impl History {
    fn note_offset(&mut self, p: i32, off: i64, v: i64, who: &str) {
        if off < 0 {
            return;
        }
        if let Some(prev) = self.at.insert((p, off), v) {
            if prev != v {
                self.inconsistent
                    .push(format!("{who}: p{p}@{off} holds {v}, earlier {prev}"));
            }
        }
    }
}

type Shared = Arc<Mutex<History>>;

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

fn value_of(r: &ConsumerRecord) -> Option<i64> {
    std::str::from_utf8(r.value.as_deref()?).ok()?.parse().ok()
}

/// Per-partition last offset within one consumer session.
struct Session {
    last: HashMap<i32, i64>,
}

impl Session {
    fn new() -> Session {
        Session {
            last: HashMap::new(),
        }
    }

    /// Records a poll's records in the history.
    fn observe(&mut self, h: &Shared, who: &str, records: &[ConsumerRecord], poller: bool) {
        let mut h = h.lock().unwrap();
        h.polls += 1;
        h.polled_records += records.len() as u64;
        for r in records {
            let p = r.partition.partition;
            if let Some(prev) = self.last.insert(p, r.offset) {
                if r.offset <= prev {
                    h.non_monotonic
                        .push(format!("{who}: p{p} offset {} after {prev}", r.offset));
                }
            }
            let Some(v) = value_of(r) else {
                h.inconsistent
                    .push(format!("{who}: p{p}@{} holds no integer", r.offset));
                continue;
            };
            h.note_offset(p, r.offset, v, who);
            h.read_any.insert(v);
            if poller {
                h.read_by_pollers.insert(v);
            }
        }
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
    stages.set(&who, "connect");
    let producer = Producer::new(
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

impl RebalanceListener for Generation {
    fn on_assigned<'a>(
        &'a self,
        _: &'a Consumer,
        _: &'a [TopicPartition],
    ) -> purekafka::consumer::BoxFuture<'a, ()> {
        self.0.fetch_add(1, Ordering::SeqCst);
        Box::pin(std::future::ready(()))
    }
    fn on_revoked<'a>(
        &'a self,
        _: &'a Consumer,
        _: &'a [TopicPartition],
    ) -> purekafka::consumer::BoxFuture<'a, ()> {
        self.0.fetch_add(1, Ordering::SeqCst);
        Box::pin(std::future::ready(()))
    }
    fn on_lost<'a>(
        &'a self,
        _: &'a Consumer,
        _: &'a [TopicPartition],
    ) -> purekafka::consumer::BoxFuture<'a, ()> {
        self.0.fetch_add(1, Ordering::SeqCst);
        Box::pin(std::future::ready(()))
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
            Err(_) => continue,
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
    st("connect");
    let producer = Producer::new(
        ProducerConfig::builder()
            .client(client(&bootstrap, &format!("jq-{txn_id}")))
            .transactional_id(&txn_id)
            .delivery_timeout(Duration::from_secs(60))
            .build()
            .expect("txn config"),
    )
    .await
    .expect("txn producer");
    let consumer = Consumer::connect(
        ConsumerConfig::builder()
            .client(|_| client(&bootstrap, &format!("jq-{txn_id}-c")))
            .isolation_level(IsolationLevel::ReadCommitted)
            .auto_offset_reset(AutoOffsetReset::Earliest)
            .build()
            .expect("txn consumer config"),
    )
    .await
    .expect("txn consumer");
    let member = GroupMember::without_membership(consumer.cluster(), GroupConfig::new(&group))
        .expect("group member");
    let meta = ConsumerGroupMetadata {
        group_id: group.clone(),
        generation_id: -1,
        member_id: String::new(),
        group_instance_id: None,
    };
    let tps = partitions(&topic, opts.partitions);
    consumer.assign(tps.clone());
    let mut need_init = true;
    'outer: while !stop.load(Ordering::Relaxed) {
        if need_init {
            st("init_transactions");
            if producer.init_transactions().await.is_err() {
                tokio::time::sleep(Duration::from_millis(500)).await;
                continue;
            }
            need_init = false;
        }
        // Restart from the committed offsets (after an abort, too).
        st("fetch_committed");
        let Ok(committed) = member.fetch_committed(&tps).await else {
            tokio::time::sleep(Duration::from_millis(500)).await;
            continue;
        };
        for tp in &tps {
            let _ = match committed.get(tp) {
                Some(om) => consumer.seek(tp, om.offset),
                None => consumer.seek_to_beginning(std::slice::from_ref(tp)),
            };
        }
        let mut session = Session::new();
        while !stop.load(Ordering::Relaxed) {
            st("poll");
            let records = consumer
                .poll(Duration::from_millis(100))
                .await
                .unwrap_or_default();
            session.observe(&h, &txn_id, &records, false);
            let values: Vec<i64> = (0..4)
                .map(|_| next.fetch_add(1, Ordering::Relaxed))
                .collect();
            let abort = fastrand::f64() < opts.abort_probability;
            st("transaction");
            let (end, acks) =
                one_txn(&producer, &topic, &opts, &values, &records, &meta, abort).await;
            let mut h = h.lock().unwrap();
            match end {
                TxnEnd::Committed => {
                    h.txns_committed += 1;
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
                    need_init = true;
                    drop(h);
                    continue 'outer;
                }
            }
        }
    }
    st("close");
    let _ = producer.close(Duration::from_secs(30)).await;
    let _ = consumer.close().await;
    stages.done(&txn_id);
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

async fn fault_driver(chaos: Arc<Chaos>, plan: FaultPlan, duration: Duration, roles: Roles) {
    let start = Instant::now();
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
                fire(target, fault, hold).await;
            }
        }
        FaultPlan::Random { every, hold } => {
            let targets = [
                Target::Leader,
                Target::Controller,
                Target::GroupCoordinator,
                Target::TxnCoordinator,
            ];
            while start.elapsed() + every + hold < duration {
                tokio::time::sleep(every).await;
                let target = targets[fastrand::usize(..targets.len())];
                let fault = if fastrand::bool() {
                    Fault::Kill
                } else {
                    Fault::Pause
                };
                fire(target, fault, hold).await;
            }
        }
    }
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
/// fresh read_committed consumer: value -> occurrences.
async fn final_read(
    bootstrap: &str,
    topic: &str,
    n: i32,
    h: &Shared,
) -> Result<BTreeMap<i64, u32>, String> {
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
    let mut counts = BTreeMap::new();
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
                *counts.entry(v).or_insert(0) += 1;
            }
        }
    }
    let _ = consumer.close().await;
    Ok(counts)
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
    let chaos = Arc::new(Chaos::new(cluster));
    let h: Shared = Arc::default();
    let next = Arc::new(AtomicI64::new(0));
    let stop_clients = Arc::new(AtomicBool::new(false));
    let stop_pollers = Arc::new(AtomicBool::new(false));

    let stages = Stages::default();
    let ctx = Ctx {
        bootstrap: bootstrap.to_owned(),
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
            format!("{topic}-txn-group"),
        )));
    }
    let mut pollers = Vec::new();
    for id in 0..opts.pollers {
        pollers.push(tokio::spawn(poller(
            bootstrap.to_owned(),
            topic.clone(),
            group.clone(),
            stop_pollers.clone(),
            h.clone(),
            id,
        )));
    }

    // Faults, then the rest of the duration, then heal (the driver heals
    // after each fault; this is for a driver that failed half-way).
    fault_driver(chaos.clone(), opts.faults.clone(), opts.duration, roles).await;
    tokio::time::sleep_until(start + opts.duration).await;
    chaos.heal().await?;
    stop_clients.store(true, Ordering::Relaxed);
    for c in clients {
        tokio::time::timeout(Duration::from_secs(120), c)
            .await
            .map_err(|_| format!("clients did not stop within 120 s: {}", stages.pending()))?
            .map_err(|e| format!("client task: {e}"))?;
    }

    let counts = final_read(bootstrap, &topic, opts.partitions, &h).await?;
    // The pollers drain: every value of the final read, or 60 s.
    let drain = Instant::now() + Duration::from_secs(60);
    while Instant::now() < drain {
        let drained = {
            let h = h.lock().unwrap();
            counts.keys().all(|v| h.read_by_pollers.contains(v))
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
        final_records: counts.values().map(|c| *c as u64).sum(),
        faults: chaos
            .injected()
            .iter()
            .map(|i| format!("{:?} {} (node {})", i.fault, i.role, i.node))
            .collect(),
        ..Report::default()
    };
    check(&h, &counts, &mut report);
    Ok(report)
}

/// The checker: compares what was acknowledged, aborted and read with the
/// final read (`counts`: value -> occurrences) and fills the anomaly lists.
fn check(h: &History, counts: &BTreeMap<i64, u32>, report: &mut Report) {
    let must: HashSet<i64> = h.acked.keys().chain(h.committed.keys()).copied().collect();
    report.lost = must
        .iter()
        .filter(|v| !counts.contains_key(v))
        .copied()
        .collect();
    report.duplicates = counts
        .iter()
        .filter(|(_, c)| **c > 1)
        .map(|(v, _)| *v)
        .collect();
    report.aborted_reads = h
        .aborted
        .iter()
        .filter(|v| h.read_any.contains(v) || counts.contains_key(v))
        .copied()
        .collect();
    report.non_monotonic = h.non_monotonic.clone();
    report.inconsistent_offsets = h.inconsistent.clone();
    report.unseen = must
        .iter()
        .filter(|v| counts.contains_key(v) && !h.read_by_pollers.contains(v))
        .copied()
        .collect();
    for list in [
        &mut report.lost,
        &mut report.duplicates,
        &mut report.aborted_reads,
        &mut report.unseen,
    ] {
        list.sort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each anomaly class is detected (the checker can fail).
    #[test]
    fn checker_finds_each_anomaly_class() {
        let h: Shared = Arc::default();
        {
            let mut g = h.lock().unwrap();
            for v in 0..10 {
                g.acked.insert(v, ((v % 2) as i32, v / 2));
            }
            g.committed.insert(100, (0, 50));
            g.aborted.insert(200);
        }
        let rec = |p: i32, off: i64, v: i64| ConsumerRecord {
            partition: TopicPartition::new("q", p),
            offset: off,
            timestamp: 0,
            timestamp_type: purekafka::protocol::records::TimestampType::CreateTime,
            key: None,
            value: Some(v.to_string().into()),
            headers: Vec::new(),
            leader_epoch: None,
        };
        // A poller sees 0..8 except 4, and value 200 (aborted); then
        // partition 0 goes backwards within the session.
        let mut s = Session::new();
        let first: Vec<ConsumerRecord> = (0..8)
            .filter(|v| *v != 4)
            .map(|v| rec((v % 2) as i32, v / 2, v))
            .chain([rec(1, 60, 200)])
            .collect();
        s.observe(&h, "p", &first, true);
        s.observe(&h, "p", &[rec(0, 1, 2)], true);
        // Another reader sees a different value at p0@0.
        Session::new().observe(&h, "x", &[rec(0, 0, 99)], false);
        // Final read: 9 missing (lost), 3 twice (duplicate), 4 present but
        // never polled (unseen), 100 present.
        let counts: BTreeMap<i64, u32> = [
            (0, 1),
            (1, 1),
            (2, 1),
            (3, 2),
            (4, 1),
            (5, 1),
            (6, 1),
            (7, 1),
            (8, 1),
            (100, 1),
        ]
        .into_iter()
        .collect();
        let mut r = Report::default();
        check(&h.lock().unwrap(), &counts, &mut r);
        assert_eq!(r.lost, vec![9]);
        assert_eq!(r.duplicates, vec![3]);
        assert_eq!(r.aborted_reads, vec![200]);
        assert_eq!(r.non_monotonic.len(), 1, "{:?}", r.non_monotonic);
        assert_eq!(
            r.inconsistent_offsets.len(),
            1,
            "{:?}",
            r.inconsistent_offsets
        );
        assert_eq!(r.unseen, vec![4, 8, 100]);
        assert_eq!(r.anomalies(), 1 + 1 + 1 + 1 + 1 + 3);
    }
}
