//! The cluster's state as one plain struct: a decoded request in, a reply
//! out. No socket, no clock (the caller passes `now_ms`), no task: every
//! rule is unit-testable by scripting requests.
//!
//! Requests that must wait (a JoinGroup until the group has formed, a
//! SyncGroup until the leader's assignment arrives) answer
//! [`Reply::Deferred`] with a ticket; their responses come out later from
//! [`ClusterState::take_completed`], after another request or a
//! [`ClusterState::tick`]. A Fetch with nothing to return answers
//! [`Reply::WaitForData`]; the caller retries it when data arrives or
//! the deadline passes, and the last try answers whatever there is.

use std::collections::BTreeMap;

use super::acls::AclEntry;
use super::authz::Authorizer;
use super::fetch_session::FetchSessions;
use super::groups::Groups;
use super::log::PartitionLog;
use super::txn::Transactions;
use super::wire::{api_versions_with, FakeRequest, FakeResponse, Header};

/// Identifies a deferred answer.
pub type Ticket = u64;

/// What the state answers to one request.
// One Reply lives per request in flight, moved once: boxing the response
// would add an allocation per request to save stack bytes.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    /// Send this response now.
    Respond(FakeResponse),
    /// Send nothing (Produce with acks=0).
    Nothing,
    /// The response comes later from [`ClusterState::take_completed`].
    Deferred(Ticket),
    /// A Fetch found too little data: retry it when data arrives or at
    /// `until_ms`, then with `final_try`.
    WaitForData {
        /// Deadline of the fetch's max wait.
        until_ms: i64,
    },
}

/// A broker of the fake cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrokerInfo {
    /// Node id.
    pub id: i32,
    /// Advertised host.
    pub host: String,
    /// Advertised port.
    pub port: u16,
    /// Whether it is up (killed brokers are absent from Metadata).
    pub alive: bool,
}

/// A topic.
#[derive(Debug, Clone)]
pub struct Topic {
    /// Its id (KIP-516).
    pub id: uuid::Uuid,
    /// Its partitions' logs, by index.
    pub partitions: Vec<PartitionLog>,
    /// Topic configs set at creation (only `max.message.bytes` is enforced).
    pub configs: BTreeMap<String, String>,
}

/// Kafka's default `max.message.bytes`.
pub const DEFAULT_MAX_MESSAGE_BYTES: usize = 1_048_588;

impl Topic {
    /// The largest batch the topic accepts.
    pub fn max_message_bytes(&self) -> usize {
        self.configs
            .get("max.message.bytes")
            .and_then(|v| v.parse().ok())
            .unwrap_or(DEFAULT_MAX_MESSAGE_BYTES)
    }
}

/// Settings of the state that clients cannot change.
#[derive(Debug, Clone)]
pub struct StateConfig {
    /// The cluster id in Metadata.
    pub cluster_id: String,
    /// Create unknown topics on Metadata/Produce when the client allows it.
    pub auto_create_topics: bool,
    /// Partitions of an auto-created topic.
    pub default_partitions: i32,
    /// `group.initial.rebalance.delay.ms`.
    pub initial_rebalance_delay_ms: i64,
    /// The finalized `transaction.version`: 1 (default) or 2 (KIP-890).
    pub transaction_version: i16,
    /// Requests are checked against the ACLs (None: no authorizer).
    pub authorizer: Option<Authorizer>,
}

impl Default for StateConfig {
    fn default() -> Self {
        StateConfig {
            cluster_id: "purekafka-fake".into(),
            auto_create_topics: false,
            default_partitions: 1,
            initial_rebalance_delay_ms: 0,
            transaction_version: 1,
            authorizer: None,
        }
    }
}

/// The whole cluster.
#[derive(Debug)]
pub struct ClusterState {
    /// Settings.
    pub config: StateConfig,
    /// Brokers by id.
    pub brokers: Vec<BrokerInfo>,
    /// Topics by name.
    pub topics: BTreeMap<String, Topic>,
    /// Consumer groups and their committed offsets.
    pub groups: Groups,
    /// Fetch sessions, per broker.
    pub sessions: FetchSessions,
    /// Transactional ids and their open transactions.
    pub txns: Transactions,
    /// The next producer id InitProducerId hands out.
    pub next_producer_id: i64,
    /// Topic ids handed out so far (ids are sequential, so runs replay).
    pub topic_ids: u64,
    /// KIP-848 member ids handed out so far.
    pub next_member_id: u64,
    /// ACL bindings (enforced when [`StateConfig::authorizer`] is set).
    pub acls: Vec<AclEntry>,
}

impl ClusterState {
    /// A cluster of `brokers`, with no topic.
    pub fn new(config: StateConfig, brokers: Vec<BrokerInfo>) -> ClusterState {
        ClusterState {
            config,
            brokers,
            topics: BTreeMap::new(),
            groups: Groups::default(),
            sessions: FetchSessions::default(),
            txns: Transactions::default(),
            next_producer_id: 1000,
            topic_ids: 0,
            next_member_id: 0,
            acls: Vec::new(),
        }
    }

    /// Answers one request that arrived at broker `broker`.
    pub fn handle(
        &mut self,
        broker: i32,
        header: &Header,
        request: FakeRequest,
        now_ms: i64,
        final_try: bool,
    ) -> Reply {
        let v = header.version;
        let mut request = request;
        self.name_topics(&mut request);
        match request {
            FakeRequest::ApiVersions(_) => Reply::Respond(FakeResponse::ApiVersions(
                api_versions_with(0, self.config.transaction_version),
            )),
            FakeRequest::Metadata(r) => Reply::Respond(FakeResponse::Metadata(self.metadata(r, v))),
            FakeRequest::CreateTopics(r) => {
                Reply::Respond(FakeResponse::CreateTopics(self.create_topics(r)))
            }
            FakeRequest::DeleteTopics(r) => {
                Reply::Respond(FakeResponse::DeleteTopics(self.delete_topics(r)))
            }
            FakeRequest::CreatePartitions(r) => {
                Reply::Respond(FakeResponse::CreatePartitions(self.create_partitions(r)))
            }
            FakeRequest::Produce(r) => self.produce(broker, r, v, now_ms),
            FakeRequest::InitProducerId(r) => Reply::Respond(FakeResponse::InitProducerId(
                self.init_producer_id(broker, r, now_ms),
            )),
            FakeRequest::AddPartitionsToTxn(r) => Reply::Respond(FakeResponse::AddPartitionsToTxn(
                self.add_partitions_to_txn(broker, r, now_ms),
            )),
            FakeRequest::AddOffsetsToTxn(r) => Reply::Respond(FakeResponse::AddOffsetsToTxn(
                self.add_offsets_to_txn(broker, r, now_ms),
            )),
            FakeRequest::TxnOffsetCommit(r) => Reply::Respond(FakeResponse::TxnOffsetCommit(
                self.txn_offset_commit(broker, r, v, now_ms),
            )),
            FakeRequest::ConsumerGroupHeartbeat(r) => {
                Reply::Respond(FakeResponse::ConsumerGroupHeartbeat(
                    self.consumer_group_heartbeat(broker, r, now_ms),
                ))
            }
            FakeRequest::ConsumerGroupDescribe(r) => Reply::Respond(
                FakeResponse::ConsumerGroupDescribe(self.consumer_group_describe(broker, r)),
            ),
            FakeRequest::ElectLeaders(r) => {
                let response = self.elect_leaders(r, v);
                Reply::Respond(FakeResponse::ElectLeaders(response))
            }
            FakeRequest::StreamsGroupHeartbeat(r) => {
                let client_id = header.client_id.as_deref().unwrap_or_default();
                Reply::Respond(FakeResponse::StreamsGroupHeartbeat(
                    self.streams_group_heartbeat(broker, client_id, v, r, now_ms),
                ))
            }
            FakeRequest::StreamsGroupDescribe(r) => Reply::Respond(
                FakeResponse::StreamsGroupDescribe(self.streams_group_describe(broker, r)),
            ),
            FakeRequest::DescribeConfigs(r) => Reply::Respond(FakeResponse::DescribeConfigs(
                self.describe_configs(broker, r),
            )),
            FakeRequest::IncrementalAlterConfigs(r) => Reply::Respond(
                FakeResponse::IncrementalAlterConfigs(self.incremental_alter_configs(r)),
            ),
            FakeRequest::DescribeCluster(_) => {
                Reply::Respond(FakeResponse::DescribeCluster(self.describe_cluster()))
            }
            FakeRequest::EndTxn(r) => {
                Reply::Respond(FakeResponse::EndTxn(self.end_txn(broker, r, v, now_ms)))
            }
            FakeRequest::Fetch(r) => self.fetch(broker, r, v, now_ms, final_try),
            FakeRequest::ListOffsets(r) => {
                Reply::Respond(FakeResponse::ListOffsets(self.list_offsets(broker, r)))
            }
            FakeRequest::OffsetForLeaderEpoch(r) => Reply::Respond(
                FakeResponse::OffsetForLeaderEpoch(self.offset_for_leader_epoch(broker, r)),
            ),
            FakeRequest::DeleteRecords(r) => {
                Reply::Respond(FakeResponse::DeleteRecords(self.delete_records(broker, r)))
            }
            FakeRequest::FindCoordinator(r) => {
                Reply::Respond(FakeResponse::FindCoordinator(self.find_coordinator(r, v)))
            }
            FakeRequest::JoinGroup(r) => self.join_group(broker, header, r, now_ms),
            FakeRequest::SyncGroup(r) => self.sync_group(broker, r, now_ms),
            FakeRequest::Heartbeat(r) => {
                Reply::Respond(FakeResponse::Heartbeat(self.heartbeat(broker, r, now_ms)))
            }
            FakeRequest::LeaveGroup(r) => Reply::Respond(FakeResponse::LeaveGroup(
                self.leave_group(broker, r, v, now_ms),
            )),
            FakeRequest::OffsetCommit(r) => {
                Reply::Respond(FakeResponse::OffsetCommit(self.offset_commit(broker, r)))
            }
            FakeRequest::OffsetFetch(r) => {
                Reply::Respond(FakeResponse::OffsetFetch(self.offset_fetch(broker, r, v)))
            }
            FakeRequest::DescribeGroups(r) => Reply::Respond(FakeResponse::DescribeGroups(
                self.describe_groups(broker, r),
            )),
            FakeRequest::ListGroups(r) => {
                Reply::Respond(FakeResponse::ListGroups(self.list_groups(broker, r)))
            }
            FakeRequest::DeleteGroups(r) => {
                Reply::Respond(FakeResponse::DeleteGroups(self.delete_groups(broker, r)))
            }
            FakeRequest::OffsetDelete(r) => {
                Reply::Respond(FakeResponse::OffsetDelete(self.offset_delete(broker, r)))
            }
            FakeRequest::DescribeProducers(r) => Reply::Respond(FakeResponse::DescribeProducers(
                self.describe_producers(broker, r),
            )),
            FakeRequest::ListTransactions(r) => Reply::Respond(FakeResponse::ListTransactions(
                self.list_transactions(broker, r, now_ms),
            )),
            FakeRequest::DescribeTransactions(r) => Reply::Respond(
                FakeResponse::DescribeTransactions(self.describe_transactions(broker, r)),
            ),
            FakeRequest::CreateAcls(r) => {
                Reply::Respond(FakeResponse::CreateAcls(self.create_acls(r)))
            }
            FakeRequest::DescribeAcls(r) => {
                Reply::Respond(FakeResponse::DescribeAcls(self.describe_acls(r)))
            }
            FakeRequest::DeleteAcls(r) => {
                Reply::Respond(FakeResponse::DeleteAcls(self.delete_acls(r)))
            }
            // The SASL exchange is the connection's (server.rs); one that
            // reaches the cluster is out of place.
            FakeRequest::SaslHandshake(_) => Reply::Respond(super::sasl::illegal_handshake()),
            FakeRequest::SaslAuthenticate(_) => Reply::Respond(super::sasl::illegal_authenticate()),
        }
    }

    /// Advances timers: session timeouts and rebalance deadlines. It runs
    /// every tick (10 ms) for the cluster's whole life, so it
    /// allocates nothing unless a timer fired (the topic view copies every
    /// topic name).
    pub fn tick(&mut self, now_ms: i64) {
        self.groups.tick(now_ms);
        if self.groups.consumer.values().any(|g| g.has_expired(now_ms)) {
            let view = self.topic_view();
            for g in self.groups.consumer.values_mut() {
                g.expire(now_ms, &view);
            }
        }
        for g in self.groups.streams.values_mut() {
            g.expire(now_ms);
        }
        self.expire_transactions(now_ms);
    }

    /// Responses of deferred requests that are now complete.
    pub fn take_completed(&mut self) -> Vec<(Ticket, FakeResponse)> {
        self.groups.take_completed()
    }

    /// The live broker ids.
    pub fn alive_brokers(&self) -> impl Iterator<Item = &BrokerInfo> {
        self.brokers.iter().filter(|b| b.alive)
    }

    /// The partition `topic`/`partition`, if it exists.
    pub fn partition(&self, topic: &str, partition: i32) -> Option<&PartitionLog> {
        let idx = usize::try_from(partition).ok()?;
        self.topics.get(topic)?.partitions.get(idx)
    }

    /// The partition, mutably.
    pub fn partition_mut(&mut self, topic: &str, partition: i32) -> Option<&mut PartitionLog> {
        let idx = usize::try_from(partition).ok()?;
        self.topics.get_mut(topic)?.partitions.get_mut(idx)
    }
}
