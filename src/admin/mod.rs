//! The admin client: topics, partitions, configs, consumer groups and their
//! offsets, log offsets and record deletion, cluster description and
//! features, ACLs, producers and transactions.
//!
//! Implements the admin APIs of KIP-4 (CreateTopics, DeleteTopics,
//! DescribeConfigs), KIP-117 (the `AdminClient` shape: batched calls with
//! one result per resource), KIP-195 (CreatePartitions), KIP-339
//! (IncrementalAlterConfigs), KIP-496 (OffsetDelete), KIP-107
//! (DeleteRecords), KIP-140 (ACLs), KIP-664 (DescribeProducers,
//! ListTransactions, DescribeTransactions), KIP-919 (DescribeCluster routed
//! to brokers), KIP-848 (ConsumerGroupDescribe) and KIP-1071
//! (StreamsGroupDescribe); wire formats per
//! <https://kafka.apache.org/protocol#protocol_api_keys>.
//!
//! # Results per resource
//!
//! Every batched call returns one [`Result`] per resource (an
//! [`IndexMap`] in request order), so one bad topic never hides the
//! others. Errors name the API, the resource and the broker's message.
//! Only failures that affect the whole call (no broker reachable, no common
//! API version) fail the call itself.
//!
//! # Routing
//!
//! - topic, partition-count and ACL changes, and topic configs, go to the
//!   controller id from metadata (in KRaft, any broker forwards to the
//!   quorum: KIP-590), falling back to any live broker;
//! - ListOffsets, DeleteRecords and DescribeProducers fan out per partition
//!   leader, and retry once after a metadata refresh when leadership moved;
//! - group calls go to each group's coordinator, rediscovered on
//!   NOT_COORDINATOR / COORDINATOR_NOT_AVAILABLE;
//! - broker configs go to that broker.
//!
//! Admin traffic uses the pool's `Workload::Admin` connections.

mod acls;
mod cluster;
mod configs;
mod groups;
mod offsets;
mod share_groups;
mod streams_groups;
mod topics;
mod transactions;

use std::collections::BTreeMap;

use indexmap::IndexMap;
use kafka_protocol::protocol::{Request, StrBytes};

use crate::cluster::{Cluster, CoordinatorKind};
use crate::config::ClientConfig;
use crate::error::{Error, KafkaCode, Result};
use crate::net::{BrokerAddr, Workload};
use crate::protocol::versions::Versions;
use crate::TopicPartition;

pub use acls::{AclBinding, AclFilter, AclOperation, AclPermission, AclResourceType, PatternType};
pub use cluster::{BrokerDescription, ClusterDescription, Feature, Features};
pub use configs::{AlterConfigOp, ConfigEntry, ConfigResource, ConfigSource};
pub use groups::{CommittedOffset, GroupDescription, GroupListing, GroupType, MemberDescription};
pub use offsets::{plan_reset, ListedOffset, OffsetSpec, ResetPlan, ResetSpec};
pub use share_groups::{ShareGroupDescription, ShareMemberDescription};
pub use streams_groups::{
    StreamsGroupDescription, StreamsMemberDescription, StreamsSubtopologyDescription, StreamsTasks,
    TasksBySubtopology,
};
pub use topics::{ElectionType, NewTopic, PartitionDescription, TopicDescription, TopicListing};
pub use transactions::{ProducerState, TransactionDescription, TransactionListing};

/// One result per resource, in request order.
pub type PerResource<K, T> = IndexMap<K, Result<T>>;

/// The admin client: a thin, cheaply cloned layer over a [`Cluster`].
#[derive(Clone, Debug)]
pub struct Admin {
    cluster: Cluster,
}

impl Admin {
    /// Sends `req` to every broker in fresh metadata (for listings each
    /// broker holds a share of) and returns each broker's id and answer; a
    /// non-zero top-level code (`code_of`) fails the call, naming `api` and
    /// the broker.
    async fn every_broker<R: Request>(
        &self,
        req: &R,
        versions: Versions,
        api: &str,
        code_of: impl Fn(&R::Response) -> i16,
    ) -> Result<Vec<(i32, R::Response)>> {
        let m = self.cluster.refresh_metadata(None).await?;
        let mut out = Vec::new();
        for b in m.brokers.values() {
            let addr = b.addr();
            let resp = self
                .cluster
                .send(&addr, Workload::Admin, req, versions)
                .await?;
            check(code_of(&resp), None, api, &addr.to_string())?;
            out.push((b.id, resp));
        }
        Ok(out)
    }

    /// Connects to the cluster (see [`Cluster::connect`]).
    /// Without a `client.id` it is `adminclient-N`, as Java's.
    pub async fn connect(mut config: ClientConfig) -> Result<Admin> {
        config.client_id = config.client_id_for(crate::config::ClientKind::Admin);
        Ok(Admin::with_cluster(Cluster::connect(config).await?))
    }

    /// An admin client sharing `cluster`'s metadata and connections (as
    /// `Consumer::with_cluster` and `Producer::with_cluster` do). The admin
    /// client has no settings of its own: it uses the cluster's
    /// [`ClientConfig`] (`request.timeout.ms` bounds each request).
    pub fn with_cluster(cluster: Cluster) -> Admin {
        Admin { cluster }
    }

    /// The old name of [`Admin::with_cluster`].
    #[deprecated(note = "renamed Admin::with_cluster")]
    pub fn new(cluster: Cluster) -> Admin {
        Admin::with_cluster(cluster)
    }

    /// The underlying cluster handle.
    pub fn cluster(&self) -> &Cluster {
        &self.cluster
    }

    /// `request.timeout.ms` as the broker-side timeout of admin requests.
    fn timeout_ms(&self) -> i32 {
        i32::try_from(self.cluster.config().request_timeout.as_millis()).unwrap_or(i32::MAX)
    }

    /// The controller from metadata, else any known broker.
    fn controller(&self) -> Option<BrokerAddr> {
        let m = self.cluster.metadata();
        m.brokers
            .get(&m.controller_id)
            .or_else(|| m.brokers.values().next())
            .map(|b| b.addr())
    }

    /// Sends to the controller; on a connection failure, refreshes metadata
    /// and tries any live broker (which forwards in KRaft).
    async fn send_controller<R: Request>(&self, req: &R, v: Versions) -> Result<R::Response> {
        if let Some(addr) = self.controller() {
            match self.cluster.send(&addr, Workload::Admin, req, v).await {
                Ok(resp) => return Ok(resp),
                Err(e) if e.is_retriable() => {
                    tracing::debug!(broker = %addr, error = %e, "controller unreachable; trying another broker");
                    let _ = self.cluster.refresh_metadata(None).await;
                }
                Err(e) => return Err(e),
            }
        }
        self.send_any(req, v).await
    }

    /// Sends to any live broker.
    async fn send_any<R: Request>(&self, req: &R, v: Versions) -> Result<R::Response> {
        let conn = self.cluster.any_connection(Workload::Admin).await?;
        conn.send(req, v).await
    }

    /// Sends to a group's (or transactional id's) coordinator, rediscovering
    /// it while `code_of` reports a coordinator error, within
    /// `default.api.timeout.ms`.
    async fn send_coordinator<R: Request>(
        &self,
        kind: CoordinatorKind,
        key: &str,
        req: &R,
        v: Versions,
        code_of: impl Fn(&R::Response) -> i16,
    ) -> Result<(BrokerAddr, R::Response)> {
        let cfg = self.cluster.config();
        let deadline = tokio::time::Instant::now() + cfg.default_api_timeout;
        let mut backoff = cfg.retry_backoff;
        loop {
            let attempt = async {
                let addr = self.cluster.coordinator(kind, key).await?;
                let resp = self.cluster.send(&addr, Workload::Admin, req, v).await?;
                Ok::<_, Error>((addr, resp))
            }
            .await;
            let retry = match &attempt {
                Ok((_, resp)) => KafkaCode::from_code(code_of(resp))
                    .is_some_and(|c| c.invalidates_coordinator() || c.code() == 14),
                Err(e) => e.is_retriable(),
            };
            if !retry || tokio::time::Instant::now() + backoff > deadline {
                return attempt;
            }
            self.cluster.invalidate_coordinator(kind, key);
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(cfg.retry_backoff_max);
        }
    }
}

/// A per-resource error: `code` with the API, the resource and the broker's
/// message, or `Ok(())` for 0.
fn check(code: i16, message: Option<&StrBytes>, api: &str, resource: &str) -> Result<()> {
    Error::check(code, || match message.map(|m| m.as_str()) {
        Some(m) if !m.is_empty() => format!("{api} {resource}: {m}"),
        _ => format!("{api} {resource}"),
    })
}

fn str_bytes(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_owned())
}

/// Groups (topic, per-partition request entry) pairs under their topic
/// names (in name order), for the requests that nest partitions under topics.
fn by_topic<'a, P>(entries: impl IntoIterator<Item = (&'a str, P)>) -> BTreeMap<&'a str, Vec<P>> {
    let mut out: BTreeMap<&str, Vec<P>> = BTreeMap::new();
    for (topic, entry) in entries {
        out.entry(topic).or_default().push(entry);
    }
    out
}

/// One result per asked partition from a response that nests partition
/// error codes under topics: `error_of` finds a partition's code and
/// message, a partition the broker left out is a [`missing`] error. Errors
/// name `api` and "`tp` of `resource`".
fn partition_results<'a, 'r>(
    tps: impl IntoIterator<Item = &'a TopicPartition>,
    api: &str,
    resource: &str,
    error_of: impl Fn(&TopicPartition) -> Option<(i16, Option<&'r StrBytes>)>,
) -> BTreeMap<TopicPartition, Result<()>> {
    tps.into_iter()
        .map(|tp| {
            let what = format!("{tp} of {resource}");
            let r = error_of(tp)
                .ok_or_else(|| missing(api, &what))
                .and_then(|(code, message)| check(code, message, api, &what));
            (tp.clone(), r)
        })
        .collect()
}

/// An error for a resource the broker left out of its response.
fn missing(api: &str, resource: &str) -> Error {
    Error::Protocol {
        broker: crate::error::Origin::Cluster,
        api: api.to_owned(),
        source: crate::protocol::ProtocolError::Invalid {
            what: "admin response",
            reason: format!("no result for {resource}"),
        },
    }
}
