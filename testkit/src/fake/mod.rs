//! An in-process, Kafka-compatible fake cluster for fast, deterministic
//! tests (issue #15): N brokers on loopback ports speaking the real wire
//! protocol (<https://kafka.apache.org/protocol>), so any Kafka client can
//! use it, plus the controls a test needs: fault rules, leader moves,
//! broker kills and restarts, and reads of the cluster's state.
//!
//! The cluster is a plain struct ([`ClusterState`]) that takes decoded
//! requests and returns responses; a thin tokio layer (one task per
//! connection) moves the bytes. What is served, and what is not, is listed
//! in [`SERVED`]: an API absent from it is absent from ApiVersions.
//!
//! ```no_run
//! # async fn demo() -> Result<(), purekafka_testkit::fake::FakeError> {
//! use purekafka_testkit::fake::{Action, FakeCluster, Rule};
//! use kafka_protocol::messages::ApiKey;
//!
//! let fake = FakeCluster::start(3).await?;
//! fake.create_topic("orders", 6)?;
//! // The next two Produce requests for `orders` fail as if leadership moved.
//! fake.intercept(Rule::new(Action::Error(6)).on_api(ApiKey::Produce).on_topic("orders").times(2));
//! let bootstrap = fake.bootstrap(); // "127.0.0.1:p1,127.0.0.1:p2,127.0.0.1:p3"
//! // ... run a producer / consumer group / streams app against `bootstrap` ...
//! fake.move_leader("orders", 0, 2)?; // bumps the leader epoch
//! fake.kill_broker(1)?; // its partitions move to live replicas
//! println!("committed: {:?}", fake.committed_offset("my-group", "orders", 0));
//! # Ok(()) }
//! ```

mod acls;
mod authz;
mod authz_admin;
mod configs;
mod consumer_groups;
mod control;
mod elections;
mod errors;
mod fetch;
mod fetch_session;
mod group_admin;
mod group_api;
mod group_describe;
mod groups;
mod log;
mod produce;
mod sasl;
mod server;
mod shapes;
mod state;
mod streams_group_api;
mod streams_groups;
mod topic_ids;
mod topics;
mod txn;
mod txn_admin;
mod wire;

#[cfg(test)]
mod tests;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use purekafka::protocol::records::{decode_batches, DecodeLimits, Record};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

pub use acls::AclEntry;
pub use authz::Authorizer;
pub use control::{Action, Rule};
pub use errors::Code;
pub use groups::{Committed, GroupPhase};
pub use sasl::SaslMechanism;
pub use state::{BrokerInfo, ClusterState, Reply, StateConfig};
pub use wire::{
    decode_request, encode_response, FakeRequest, FakeResponse, Header, WireError, SERVED,
};

use server::Shared;

/// Why a fake-cluster operation failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FakeError {
    /// Binding a broker's port failed (retry with another port).
    #[error("fake broker {broker}: cannot bind {addr}: {source}")]
    Bind {
        /// The broker.
        broker: i32,
        /// The address.
        addr: String,
        /// The cause.
        source: std::io::Error,
    },
    /// The cluster refused the operation with a Kafka error code.
    #[error("fake cluster: {what}: {code:?}: {message}")]
    Refused {
        /// The operation.
        what: &'static str,
        /// The Kafka error.
        code: Code,
        /// Details, naming the topic-partition or broker.
        message: String,
    },
}

/// Options for [`FakeCluster`]; see [`FakeCluster::builder`].
#[derive(Debug, Clone)]
pub struct FakeClusterBuilder {
    brokers: usize,
    host: String,
    base_port: u16,
    seed: u64,
    config: StateConfig,
    sasl: sasl::SaslUsers,
}

impl Default for FakeClusterBuilder {
    fn default() -> Self {
        FakeClusterBuilder {
            brokers: 1,
            host: "127.0.0.1".into(),
            base_port: 0,
            seed: 0,
            config: StateConfig::default(),
            sasl: sasl::SaslUsers::default(),
        }
    }
}

impl FakeClusterBuilder {
    /// Number of brokers, ids 0..n (default 1).
    pub fn brokers(mut self, n: usize) -> Self {
        self.brokers = n.max(1);
        self
    }

    /// First port; brokers take consecutive ports. Default 0: each broker
    /// gets a free port from the OS.
    pub fn base_port(mut self, port: u16) -> Self {
        self.base_port = port;
        self
    }

    /// Seed of the generator behind [`Rule::with_probability`] (default 0):
    /// a scripted sequence of faults replays identically from its seed.
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }

    /// The finalized `transaction.version` ApiVersions advertises: 1
    /// (default; clients use transactions v1) or 2 (KIP-890: Produce v12
    /// adds partitions, TxnOffsetCommit v5 adds the group, EndTxn v5 bumps
    /// the epoch).
    pub fn transaction_version(mut self, version: i16) -> Self {
        self.config.transaction_version = version.clamp(1, 2);
        self
    }

    /// Create unknown topics when a client's Metadata request allows it
    /// (Kafka's `auto.create.topics.enable`; default false).
    pub fn auto_create_topics(mut self, on: bool) -> Self {
        self.config.auto_create_topics = on;
        self
    }

    /// Partitions of auto-created topics and of CreateTopics with -1
    /// (default 1).
    pub fn default_partitions(mut self, n: i32) -> Self {
        self.config.default_partitions = n.max(1);
        self
    }

    /// `group.initial.rebalance.delay.ms` (default 0, Kafka's is 3000).
    pub fn initial_rebalance_delay(mut self, delay: Duration) -> Self {
        self.config.initial_rebalance_delay_ms =
            i64::try_from(delay.as_millis()).unwrap_or(i64::MAX);
        self
    }

    /// Makes every listener `SASL_PLAINTEXT` and adds a PLAIN user. With
    /// any SASL user, a connection must authenticate (SaslHandshake v1,
    /// SaslAuthenticate) before anything but ApiVersions; a wrong password
    /// gets `SASL_AUTHENTICATION_FAILED` and a closed connection.
    pub fn sasl_plain(mut self, user: &str, password: &str) -> Self {
        self.sasl.add(SaslMechanism::Plain, user, password);
        self
    }

    /// Adds a user for `mechanism` (credentials are per mechanism, as Kafka
    /// stores them; SCRAM ones are salted and hashed at 4096 iterations) and
    /// turns SASL on as [`sasl_plain`](Self::sasl_plain) does.
    pub fn sasl_user(mut self, mechanism: SaslMechanism, user: &str, password: &str) -> Self {
        self.sasl.add(mechanism, user, password);
        self
    }

    /// Runs an authorizer (Kafka's `StandardAuthorizer` with
    /// `allow.everyone.if.no.acl.found=false`): requests are checked against
    /// the ACLs clients create with CreateAcls, and refused with
    /// TOPIC_/GROUP_/CLUSTER_AUTHORIZATION_FAILED as Kafka refuses them. The
    /// principal is `User:<name>` of the SASL user (see
    /// [`sasl_plain`](Self::sasl_plain)), `User:ANONYMOUS` without SASL.
    pub fn authorizer(mut self, authorizer: Authorizer) -> Self {
        self.config.authorizer = Some(authorizer);
        self
    }

    /// Binds every broker and starts serving.
    pub async fn start(self) -> Result<FakeCluster, FakeError> {
        let mut listeners = Vec::with_capacity(self.brokers);
        let mut infos = Vec::with_capacity(self.brokers);
        for i in 0..self.brokers {
            let id = i as i32;
            let port = if self.base_port == 0 {
                0
            } else {
                self.base_port.saturating_add(i as u16)
            };
            let addr = format!("{}:{port}", self.host);
            let listener = TcpListener::bind(&addr)
                .await
                .map_err(|source| FakeError::Bind {
                    broker: id,
                    addr: addr.clone(),
                    source,
                })?;
            let port = listener
                .local_addr()
                .map_err(|source| FakeError::Bind {
                    broker: id,
                    addr,
                    source,
                })?
                .port();
            infos.push(BrokerInfo {
                id,
                host: self.host.clone(),
                port,
                alive: true,
            });
            listeners.push(listener);
        }
        let sasl = (!self.sasl.is_empty()).then(|| Arc::new(self.sasl));
        let shared = Shared::new(
            ClusterState::new(self.config, infos.clone()),
            self.seed,
            sasl,
        );
        let ticker = tokio::spawn(server::ticker(shared.clone()));
        let mut slots = Vec::with_capacity(listeners.len());
        for (listener, info) in listeners.into_iter().zip(&infos) {
            let (alive, rx) = watch::channel(true);
            let task = tokio::spawn(server::listen(shared.clone(), info.id, listener, rx));
            slots.push(BrokerSlot {
                id: info.id,
                host: info.host.clone(),
                port: info.port,
                alive,
                task,
            });
        }
        Ok(FakeCluster {
            shared,
            slots: Mutex::new(slots),
            ticker,
        })
    }
}

struct BrokerSlot {
    id: i32,
    host: String,
    port: u16,
    alive: watch::Sender<bool>,
    task: JoinHandle<()>,
}

/// A running fake cluster. `Send + Sync`; stops serving when dropped.
pub struct FakeCluster {
    shared: Arc<Shared>,
    slots: Mutex<Vec<BrokerSlot>>,
    ticker: JoinHandle<()>,
}

impl std::fmt::Debug for FakeCluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FakeCluster")
            .field("bootstrap", &self.bootstrap())
            .finish()
    }
}

impl FakeCluster {
    /// Options: broker count, ports, auto-creation.
    pub fn builder() -> FakeClusterBuilder {
        FakeClusterBuilder::default()
    }

    /// Starts `brokers` brokers on free loopback ports.
    pub async fn start(brokers: usize) -> Result<FakeCluster, FakeError> {
        FakeCluster::builder().brokers(brokers).start().await
    }

    fn slots(&self) -> std::sync::MutexGuard<'_, Vec<BrokerSlot>> {
        self.slots.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// `host:port` of every broker, comma-separated (`bootstrap.servers`).
    pub fn bootstrap(&self) -> String {
        self.slots()
            .iter()
            .map(|s| format!("{}:{}", s.host, s.port))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// `(broker id, port)` of every broker.
    pub fn brokers(&self) -> Vec<(i32, u16)> {
        self.slots().iter().map(|s| (s.id, s.port)).collect()
    }

    /// Runs `f` on the cluster state under its lock, for reads and direct
    /// changes in tests.
    pub fn with_state<T>(&self, f: impl FnOnce(&mut ClusterState) -> T) -> T {
        let mut inner = self.shared.lock();
        f(&mut inner.state)
    }

    /// Creates a topic with `partitions` partitions (replication: up to 3).
    pub fn create_topic(&self, name: &str, partitions: i32) -> Result<(), FakeError> {
        self.with_state(|s| {
            let rf = s.alive_brokers().count().clamp(1, 3) as i16;
            s.create_topic(name, partitions, rf)
        })
        .map_err(|(code, message)| FakeError::Refused {
            what: "create topic",
            code,
            message,
        })
    }

    /// Adds a fault rule after the existing ones (the first match wins).
    pub fn intercept(&self, rule: Rule) {
        self.shared
            .rules
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(rule);
    }

    /// Removes every fault rule.
    pub fn clear_rules(&self) {
        self.shared
            .rules
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clear();
    }

    /// How many requests each rule has acted on, in the order added.
    pub fn rule_hits(&self) -> Vec<usize> {
        self.shared
            .rules
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .hits()
    }

    /// Moves `topic`/`partition`'s leadership to broker `to`, bumping its
    /// leader epoch; returns the new epoch.
    pub fn move_leader(&self, topic: &str, partition: i32, to: i32) -> Result<i32, FakeError> {
        let epoch = self.with_state(|s| {
            if !s.brokers.iter().any(|b| b.id == to) {
                return Err((Code::LeaderNotAvailable, format!("no broker {to}")));
            }
            let log = s.partition_mut(topic, partition).ok_or((
                Code::UnknownTopicOrPartition,
                format!("{topic}-{partition}"),
            ))?;
            if !log.replicas.contains(&to) {
                log.replicas.push(to);
            }
            log.set_leader(to);
            Ok(log.leader_epoch)
        });
        self.shared.wake_fetches();
        epoch.map_err(|(code, message)| FakeError::Refused {
            what: "move leader",
            code,
            message,
        })
    }

    /// Stops broker `id`: its connections close, it leaves Metadata, and
    /// the partitions it led move to a live replica (epoch bumped).
    pub fn kill_broker(&self, id: i32) -> Result<(), FakeError> {
        let slots = self.slots();
        let slot = slots
            .iter()
            .find(|s| s.id == id)
            .ok_or_else(|| FakeError::Refused {
                what: "kill broker",
                code: Code::LeaderNotAvailable,
                message: format!("no broker {id}"),
            })?;
        let _ = slot.alive.send(false);
        slot.task.abort();
        drop(slots);
        self.with_state(|s| {
            for b in s.brokers.iter_mut().filter(|b| b.id == id) {
                b.alive = false;
            }
            let alive: Vec<i32> = s.alive_brokers().map(|b| b.id).collect();
            for topic in s.topics.values_mut() {
                for log in topic.partitions.iter_mut().filter(|l| l.leader == id) {
                    if let Some(next) = log.replicas.iter().find(|r| alive.contains(r)).copied() {
                        log.set_leader(next);
                    }
                }
            }
            s.sessions.forget_broker(id);
        });
        self.shared.wake_fetches();
        Ok(())
    }

    /// Restarts a killed broker on its old port. Leadership stays where the
    /// kill moved it.
    pub async fn restart_broker(&self, id: i32) -> Result<(), FakeError> {
        let (host, port) = {
            let slots = self.slots();
            let slot = slots
                .iter()
                .find(|s| s.id == id)
                .ok_or_else(|| FakeError::Refused {
                    what: "restart broker",
                    code: Code::LeaderNotAvailable,
                    message: format!("no broker {id}"),
                })?;
            (slot.host.clone(), slot.port)
        };
        let addr = format!("{host}:{port}");
        let listener = TcpListener::bind(&addr)
            .await
            .map_err(|source| FakeError::Bind {
                broker: id,
                addr,
                source,
            })?;
        let (alive, rx) = watch::channel(true);
        let task = tokio::spawn(server::listen(self.shared.clone(), id, listener, rx));
        {
            let mut slots = self.slots();
            if let Some(slot) = slots.iter_mut().find(|s| s.id == id) {
                slot.alive = alive;
                slot.task = task;
            }
        }
        self.with_state(|s| {
            for b in s.brokers.iter_mut().filter(|b| b.id == id) {
                b.alive = true;
            }
        });
        Ok(())
    }

    /// The records of `topic`/`partition` (data batches only, no markers).
    pub fn records(&self, topic: &str, partition: i32) -> Result<Vec<Record>, FakeError> {
        let batches: Vec<Bytes> = self
            .with_state(|s| {
                s.partition(topic, partition)
                    .map(|l| {
                        l.batches()
                            .iter()
                            .filter(|b| !b.control)
                            .map(|b| b.bytes.clone())
                            .collect()
                    })
                    .ok_or((
                        Code::UnknownTopicOrPartition,
                        format!("{topic}-{partition}"),
                    ))
            })
            .map_err(|(code, message)| FakeError::Refused {
                what: "read records",
                code,
                message,
            })?;
        let mut out = Vec::new();
        for bytes in batches {
            let decoded = decode_batches(bytes, &DecodeLimits::default()).map_err(|e| {
                FakeError::Refused {
                    what: "read records",
                    code: Code::CorruptMessage,
                    message: format!("{topic}-{partition}: {e}"),
                }
            })?;
            out.extend(decoded.batches.into_iter().flat_map(|b| b.records));
        }
        Ok(out)
    }

    /// The high watermark of `topic`/`partition`.
    pub fn high_watermark(&self, topic: &str, partition: i32) -> Option<i64> {
        self.with_state(|s| s.partition(topic, partition).map(|l| l.high_watermark()))
    }

    /// The offset `group` committed for `topic`/`partition`.
    pub fn committed_offset(&self, group: &str, topic: &str, partition: i32) -> Option<i64> {
        self.with_state(|s| {
            s.groups
                .committed(group, topic, partition)
                .map(|c| c.offset)
        })
    }

    /// The member ids of `group`, sorted.
    pub fn group_members(&self, group: &str) -> Vec<String> {
        self.with_state(|s| {
            s.groups
                .groups
                .get(group)
                .map(|g| g.members.keys().cloned().collect())
                .unwrap_or_default()
        })
    }

    /// `group`'s phase and generation.
    pub fn group_phase(&self, group: &str) -> Option<(GroupPhase, i32)> {
        self.with_state(|s| s.groups.groups.get(group).map(|g| (g.phase, g.generation)))
    }
}

impl Drop for FakeCluster {
    fn drop(&mut self) {
        for slot in self.slots().iter() {
            let _ = slot.alive.send(false);
            slot.task.abort();
        }
        self.ticker.abort();
    }
}
