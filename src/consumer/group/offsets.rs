//! Committed offsets: OffsetCommit and OffsetFetch on the group connection
//! (<https://kafka.apache.org/protocol#The_Messages_OffsetCommit>).
//!
//! Every commit, synchronous or not, goes through one lane (a task reading a
//! queue), so commits reach the coordinator in the order they were made and
//! their results are reported in that order. An asynchronous commit is not
//! retried: a later commit supersedes it, as in the Java client. A
//! synchronous commit retries retriable errors (coordinator moved or
//! loading, disconnects) within `default.api.timeout.ms`, but never for a
//! partition revoked from the member since the commit began: that fails it
//! (`CommitFailed`, as Java's `commitSync`), since the retry would carry the
//! new generation or member epoch and overwrite the new owner's offsets.
//!
//! Commits carry the generation (classic) or member epoch (KIP-848) and the
//! member id, so a member that was fenced cannot overwrite the offsets of
//! the partitions' new owner: REBALANCE_IN_PROGRESS, ILLEGAL_GENERATION,
//! UNKNOWN_MEMBER_ID and FENCED_MEMBER_EPOCH fail the commit with
//! [`Error::is_commit_failed`] true. Fetches ask for stable offsets (KIP-447) and
//! retry UNSTABLE_OFFSET_COMMIT while a transaction is pending.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use kafka_protocol::messages::offset_commit_request::{
    OffsetCommitRequestPartition, OffsetCommitRequestTopic,
};
use kafka_protocol::messages::offset_fetch_request::{
    OffsetFetchRequestGroup, OffsetFetchRequestTopic, OffsetFetchRequestTopics,
};
use kafka_protocol::messages::{GroupId, OffsetCommitRequest, OffsetFetchRequest, TopicName};
use kafka_protocol::protocol::StrBytes;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;
use tracing::debug;

use super::events::OffsetAndMetadata;
use super::member::{coordinator, needs_rediscovery, Shared};
use crate::cluster::{Cluster, CoordinatorKind};
use crate::error::{Error, KafkaCode, Result};
use crate::protocol::versions::Versions;
use crate::TopicPartition;

const OFFSET_COMMIT_VERSIONS: Versions = Versions::new(2, 9);
/// v7+: require_stable (KIP-447).
const OFFSET_FETCH_VERSIONS: Versions = Versions::new(7, 9);
/// Commits queued before `commit_async` waits.
const LANE_DEPTH: usize = 128;

const UNSTABLE_OFFSET_COMMIT: i16 = 88;
const STALE_MEMBER_EPOCH: i16 = 113;

/// Offsets to commit, by partition.
pub type Offsets = HashMap<TopicPartition, OffsetAndMetadata>;

/// The result callback of an asynchronous commit.
pub type CommitCallback = Box<dyn FnOnce(Result<()>) + Send + 'static>;

enum Reply {
    Sync(oneshot::Sender<Result<()>>),
    Async(CommitCallback),
}

struct Job {
    offsets: Offsets,
    reply: Reply,
}

/// The ordered commit queue.
#[derive(Debug, Clone)]
pub(crate) struct CommitLane {
    tx: mpsc::Sender<Job>,
}

impl CommitLane {
    pub fn start(cluster: Cluster, shared: Arc<Shared>) -> CommitLane {
        let (tx, mut rx) = mpsc::channel::<Job>(LANE_DEPTH);
        tokio::spawn(async move {
            while let Some(job) = rx.recv().await {
                match job.reply {
                    Reply::Sync(reply) => {
                        let r = commit_with_retry(&cluster, &shared, &job.offsets).await;
                        let _ = reply.send(r);
                    }
                    Reply::Async(callback) => {
                        callback(commit_once(&cluster, &shared, &job.offsets).await);
                    }
                }
            }
        });
        CommitLane { tx }
    }

    pub async fn commit(&self, offsets: Offsets) -> Result<()> {
        let (reply, rx) = oneshot::channel();
        self.tx
            .send(Job {
                offsets,
                reply: Reply::Sync(reply),
            })
            .await
            .map_err(|_| Error::Closed)?;
        rx.await.map_err(|_| Error::Closed)?
    }

    pub async fn commit_async(&self, offsets: Offsets, callback: CommitCallback) {
        let job = Job {
            offsets,
            reply: Reply::Async(callback),
        };
        if let Err(mpsc::error::SendError(job)) = self.tx.send(job).await {
            if let Reply::Async(cb) = job.reply {
                cb(Err(Error::Closed));
            }
        }
    }
}

fn retriable(e: &Error) -> bool {
    let code = e.kafka_code().map(KafkaCode::code);
    !e.is_commit_failed() && (e.is_retriable() || code == Some(STALE_MEMBER_EPOCH))
}

/// The partitions of `offsets` this member owns now.
fn owned(shared: &Shared, offsets: &Offsets) -> Vec<TopicPartition> {
    let s = shared.state();
    let mut owned: Vec<TopicPartition> = offsets
        .keys()
        .filter(|tp| s.assignment.contains(*tp))
        .cloned()
        .collect();
    owned.sort();
    owned
}

/// Before a retry: the partitions the member owned when the commit began
/// and no longer owns (revoked while the commit was in flight or backing
/// off) fail the commit, since the retry would carry the new generation or
/// member epoch and the coordinator, which checks that and not ownership,
/// would let it overwrite the new owner's offsets. As Java's `commitSync`
/// (`CommitFailedException`): `CommitFailed` with the code of the attempt
/// that failed, or `NotAssigned` when the attempt got no answer.
fn revoked_since(
    shared: &Shared,
    owned_at_start: &[TopicPartition],
    last: &Error,
) -> Option<Error> {
    let revoked: Vec<&TopicPartition> = {
        let s = shared.state();
        owned_at_start
            .iter()
            .filter(|tp| !s.assignment.contains(*tp))
            .collect()
    };
    let first = (*revoked.first()?).clone();
    let names = revoked
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", ");
    Some(match last.kafka_code() {
        Some(code) => Error::CommitFailed {
            code,
            context: format!(
                "OffsetCommit of {names} for {}: revoked from this member while the commit was \
                 being retried after {code}, so it is not retried at the new member epoch",
                shared.describe()
            ),
        },
        None => Error::NotAssigned { partition: first },
    })
}

async fn commit_with_retry(cluster: &Cluster, shared: &Shared, offsets: &Offsets) -> Result<()> {
    let deadline = Instant::now() + cluster.config().default_api_timeout;
    let mut backoff = cluster.config().retry_backoff;
    let owned_at_start = owned(shared, offsets);
    loop {
        match commit_once(cluster, shared, offsets).await {
            Err(e) if retriable(&e) && Instant::now() + backoff < deadline => {
                debug!(group = %shared.group_id, error = %e, "retrying OffsetCommit");
                if needs_rediscovery(&e) {
                    cluster.invalidate_coordinator(CoordinatorKind::Group, &shared.group_id);
                }
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(cluster.config().retry_backoff_max);
                if let Some(failed) = revoked_since(shared, &owned_at_start, &e) {
                    return Err(failed);
                }
            }
            r => return r,
        }
    }
}

/// Groups offsets by topic, sorted, as the wire wants them.
fn by_topic(offsets: &Offsets) -> BTreeMap<&str, Vec<(i32, &OffsetAndMetadata)>> {
    let mut m: BTreeMap<&str, Vec<(i32, &OffsetAndMetadata)>> = BTreeMap::new();
    for (tp, o) in offsets {
        m.entry(&tp.topic).or_default().push((tp.partition, o));
    }
    for v in m.values_mut() {
        v.sort_by_key(|(p, _)| *p);
    }
    m
}

async fn commit_once(cluster: &Cluster, shared: &Shared, offsets: &Offsets) -> Result<()> {
    if offsets.is_empty() {
        return Ok(());
    }
    let (_, conn) = coordinator(cluster, shared).await?;
    let version = conn.version_for::<OffsetCommitRequest>(OFFSET_COMMIT_VERSIONS)?;
    let (member_id, generation) = {
        let s = shared.state();
        (s.member_id.clone(), s.generation)
    };
    let topics = by_topic(offsets)
        .into_iter()
        .map(|(topic, parts)| {
            OffsetCommitRequestTopic::default()
                .with_name(TopicName(StrBytes::from_string(topic.to_owned())))
                .with_partitions(
                    parts
                        .into_iter()
                        .map(|(p, o)| {
                            OffsetCommitRequestPartition::default()
                                .with_partition_index(p)
                                .with_committed_offset(o.offset)
                                .with_committed_leader_epoch(o.leader_epoch.unwrap_or(-1))
                                .with_committed_metadata(Some(StrBytes::from_string(
                                    o.metadata.clone(),
                                )))
                        })
                        .collect(),
                )
        })
        .collect();
    let req = OffsetCommitRequest::default()
        .with_group_id(GroupId(StrBytes::from_string(shared.group_id.clone())))
        .with_generation_id_or_member_epoch(generation)
        .with_member_id(StrBytes::from_string(member_id))
        .with_group_instance_id(shared.instance_id.clone().map(StrBytes::from_string))
        .with_topics(topics);
    let sent = tokio::time::Instant::now();
    let resp = conn.send_at(&req, version).await?;
    shared.metrics.committed(sent.elapsed());
    for t in &resp.topics {
        for p in &t.partitions {
            if let Some(code) = KafkaCode::from_code(p.error_code) {
                let context = format!(
                    "OffsetCommit of {}-{} for {}",
                    t.name.0.as_str(),
                    p.partition_index,
                    shared.describe()
                );
                return Err(if code.is_commit_failed() {
                    Error::CommitFailed { code, context }
                } else {
                    Error::Kafka { code, context }
                });
            }
        }
    }
    Ok(())
}

/// Reads committed offsets; partitions with none are left out.
pub(crate) async fn fetch_committed(
    cluster: &Cluster,
    shared: &Shared,
    partitions: &[TopicPartition],
) -> Result<HashMap<TopicPartition, OffsetAndMetadata>> {
    let deadline = Instant::now() + cluster.config().default_api_timeout;
    let mut backoff = cluster.config().retry_backoff;
    loop {
        match fetch_once(cluster, shared, partitions).await {
            Err(e)
                if (e.is_retriable()
                    || e.kafka_code().map(KafkaCode::code) == Some(UNSTABLE_OFFSET_COMMIT))
                    && Instant::now() + backoff < deadline =>
            {
                debug!(group = %shared.group_id, error = %e, "retrying OffsetFetch");
                if needs_rediscovery(&e) {
                    cluster.invalidate_coordinator(CoordinatorKind::Group, &shared.group_id);
                }
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(cluster.config().retry_backoff_max);
            }
            r => return r,
        }
    }
}

async fn fetch_once(
    cluster: &Cluster,
    shared: &Shared,
    partitions: &[TopicPartition],
) -> Result<HashMap<TopicPartition, OffsetAndMetadata>> {
    let mut out = HashMap::new();
    if partitions.is_empty() {
        return Ok(out);
    }
    let (_, conn) = coordinator(cluster, shared).await?;
    let version = conn.version_for::<OffsetFetchRequest>(OFFSET_FETCH_VERSIONS)?;
    let mut grouped: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
    for tp in partitions {
        grouped.entry(&tp.topic).or_default().push(tp.partition);
    }
    let group_id = GroupId(StrBytes::from_string(shared.group_id.clone()));
    let name = |t: &str| TopicName(StrBytes::from_string(t.to_owned()));
    let mut req = OffsetFetchRequest::default().with_require_stable(true);
    if version >= 8 {
        let topics = grouped
            .iter()
            .map(|(t, ps)| {
                OffsetFetchRequestTopics::default()
                    .with_name(name(t))
                    .with_partition_indexes(ps.clone())
            })
            .collect();
        req = req.with_groups(vec![OffsetFetchRequestGroup::default()
            .with_group_id(group_id)
            .with_topics(Some(topics))]);
    } else {
        let topics = grouped
            .iter()
            .map(|(t, ps)| {
                OffsetFetchRequestTopic::default()
                    .with_name(name(t))
                    .with_partition_indexes(ps.clone())
            })
            .collect();
        req = req.with_group_id(group_id).with_topics(Some(topics));
    }
    let resp = conn.send_at(&req, version).await?;
    let check = |code: i16, what: &str| {
        Error::check(code, || {
            format!("OffsetFetch of {what} for {}", shared.describe())
        })
    };
    let mut take = |topic: &str, p: i32, offset: i64, epoch: i32, meta: Option<&StrBytes>| {
        if offset >= 0 {
            out.insert(
                TopicPartition::new(topic, p),
                OffsetAndMetadata {
                    offset,
                    leader_epoch: (epoch >= 0).then_some(epoch),
                    metadata: meta.map(|m| m.as_str().to_owned()).unwrap_or_default(),
                },
            );
        }
    };
    if version >= 8 {
        for g in &resp.groups {
            check(g.error_code, "the group")?;
            for t in &g.topics {
                for p in &t.partitions {
                    check(
                        p.error_code,
                        &format!("{}-{}", t.name.0.as_str(), p.partition_index),
                    )?;
                    take(
                        t.name.0.as_str(),
                        p.partition_index,
                        p.committed_offset,
                        p.committed_leader_epoch,
                        p.metadata.as_ref(),
                    );
                }
            }
        }
    } else {
        check(resp.error_code, "the group")?;
        for t in &resp.topics {
            for p in &t.partitions {
                check(
                    p.error_code,
                    &format!("{}-{}", t.name.0.as_str(), p.partition_index),
                )?;
                take(
                    t.name.0.as_str(),
                    p.partition_index,
                    p.committed_offset,
                    p.committed_leader_epoch,
                    p.metadata.as_ref(),
                );
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commit_failed_codes_are_not_retried() {
        let e = |code: i16| Error::Kafka {
            code: KafkaCode::from_code(code).unwrap(),
            context: "OffsetCommit".into(),
        };
        for code in [22, 25, 27, 110] {
            assert!(e(code).is_commit_failed(), "{code}");
            let typed = Error::CommitFailed {
                code: KafkaCode::from_code(code).unwrap(),
                context: "OffsetCommit".into(),
            };
            assert!(typed.is_commit_failed() && !retriable(&typed), "{code}");
            assert!(!retriable(&e(code)), "{code}");
        }
        for code in [14, 15, 16, 113] {
            assert!(!e(code).is_commit_failed(), "{code}");
            assert!(retriable(&e(code)), "{code}");
        }
        assert!(!retriable(&e(12)), "OFFSET_METADATA_TOO_LARGE is final");
    }

    #[test]
    fn offsets_are_grouped_by_topic_in_partition_order() {
        let mut o = Offsets::new();
        o.insert(TopicPartition::new("b", 1), OffsetAndMetadata::new(5));
        o.insert(TopicPartition::new("a", 2), OffsetAndMetadata::new(7));
        o.insert(TopicPartition::new("a", 0), OffsetAndMetadata::new(3));
        let g = by_topic(&o);
        assert_eq!(g.keys().copied().collect::<Vec<_>>(), vec!["a", "b"]);
        assert_eq!(
            g["a"]
                .iter()
                .map(|(p, o)| (*p, o.offset))
                .collect::<Vec<_>>(),
            vec![(0, 3), (2, 7)]
        );
    }
}
