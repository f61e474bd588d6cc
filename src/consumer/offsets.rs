//! Offset lookups with ListOffsets
//! (<https://kafka.apache.org/protocol#The_Messages_ListOffsets>): earliest
//! (-2), latest (-1, the last stable offset under read_committed), or the
//! earliest offset whose timestamp is at least `t`. Requests go to each
//! partition's leader with its current leader epoch (KIP-320); stale
//! leadership refreshes metadata and retries, bounded by
//! `default.api.timeout.ms`.

use std::collections::BTreeMap;

use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::{ListOffsetsRequest, TopicName};
use kafka_protocol::protocol::StrBytes;
use tracing::debug;

use super::config::IsolationLevel;
use super::record::OffsetAndTimestamp;
use crate::cluster::Cluster;
use crate::error::{Error, KafkaCode, Result};
use crate::net::{BrokerAddr, Workload};
use crate::protocol::versions::Versions;
use crate::TopicPartition;

/// ListOffsets versions this client implements (v2: isolation level; v4:
/// current leader epoch; v10: timeout).
const LIST_OFFSETS_VERSIONS: Versions = Versions::new(2, 10);
/// The earliest offset.
pub(crate) const EARLIEST: i64 = -2;
/// The latest offset (high watermark or last stable offset).
pub(crate) const LATEST: i64 = -1;

/// Looks up an offset for each partition at the given timestamp (or
/// [`EARLIEST`] / [`LATEST`]). `None`: no record at or after the timestamp.
pub(crate) async fn list_offsets(
    cluster: &Cluster,
    isolation: IsolationLevel,
    query: BTreeMap<TopicPartition, i64>,
) -> Result<BTreeMap<TopicPartition, Option<OffsetAndTimestamp>>> {
    let timeout = cluster.config().default_api_timeout;
    // The retry loop records its latest retriable failure here, so the
    // timeout can say why the lookups kept failing.
    let mut last = None;
    let done = list_offsets_until_done(cluster, isolation, query, &mut last);
    tokio::time::timeout(timeout, done).await.map_err(|_| {
        Error::retries_timed_out(
            crate::error::Origin::Cluster,
            "ListOffsets",
            timeout,
            "default.api.timeout.ms",
            last.as_ref(),
        )
    })?
}

async fn list_offsets_until_done(
    cluster: &Cluster,
    isolation: IsolationLevel,
    mut remaining: BTreeMap<TopicPartition, i64>,
    last: &mut Option<Error>,
) -> Result<BTreeMap<TopicPartition, Option<OffsetAndTimestamp>>> {
    let mut found = BTreeMap::new();
    let mut backoff = cluster.config().retry_backoff;
    loop {
        let mut by_leader: BTreeMap<(String, u16), LeaderQuery> = BTreeMap::new();
        let mut retry = Vec::new();
        for (tp, ts) in &remaining {
            match cluster.leader(&tp.topic, tp.partition).await {
                Ok(addr) => by_leader
                    .entry((addr.host.clone(), addr.port))
                    .or_insert_with(|| (addr, Vec::new()))
                    .1
                    .push((tp.clone(), *ts)),
                Err(e) if e.is_retriable() => retry.push((tp.clone(), e)),
                Err(e) => return Err(e),
            }
        }
        for (addr, parts) in by_leader.into_values() {
            match list_at(cluster, &addr, isolation, &parts).await {
                Ok(answers) => {
                    for (tp, answer) in answers {
                        match answer {
                            Ok(v) => {
                                remaining.remove(&tp);
                                found.insert(tp, v);
                            }
                            Err(e) if e.is_retriable() => retry.push((tp, e)),
                            Err(e) => return Err(e),
                        }
                    }
                }
                Err(e) if e.is_retriable() => {
                    retry.extend(parts.into_iter().map(|(tp, _)| (tp, e.clone())));
                }
                Err(e) => return Err(e),
            }
        }
        if remaining.is_empty() {
            return Ok(found);
        }
        for (tp, e) in &retry {
            debug!(partition = %tp, error = %e, "ListOffsets will be retried");
        }
        if let Some((_, e)) = retry.pop() {
            *last = Some(e);
        }
        let topics: Vec<String> = remaining.keys().map(|tp| tp.topic.to_string()).collect();
        cluster.track_topics(topics.iter().cloned());
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(cluster.config().retry_backoff_max);
        if let Err(e) = cluster.refresh_metadata(Some(&topics)).await {
            debug!(error = %e, "metadata refresh before ListOffsets retry failed");
        }
    }
}

/// One leader's address and the partitions (with timestamps) to ask it.
type LeaderQuery = (BrokerAddr, Vec<(TopicPartition, i64)>);

type Answer = (TopicPartition, Result<Option<OffsetAndTimestamp>>);

async fn list_at(
    cluster: &Cluster,
    addr: &BrokerAddr,
    isolation: IsolationLevel,
    parts: &[(TopicPartition, i64)],
) -> Result<Vec<Answer>> {
    let metadata = cluster.metadata();
    let mut topics: BTreeMap<&str, Vec<ListOffsetsPartition>> = BTreeMap::new();
    for (tp, ts) in parts {
        let epoch = metadata
            .partition(&tp.topic, tp.partition)
            .map_or(-1, |p| p.leader_epoch);
        topics.entry(&tp.topic).or_default().push(
            ListOffsetsPartition::default()
                .with_partition_index(tp.partition)
                .with_current_leader_epoch(epoch)
                .with_timestamp(*ts),
        );
    }
    let request_timeout = cluster.config().request_timeout;
    let req = ListOffsetsRequest::default()
        .with_replica_id((-1).into())
        .with_isolation_level(isolation.code())
        .with_timeout_ms(i32::try_from(request_timeout.as_millis()).unwrap_or(i32::MAX))
        .with_topics(
            topics
                .into_iter()
                .map(|(name, partitions)| {
                    ListOffsetsTopic::default()
                        .with_name(TopicName(StrBytes::from_string(name.to_owned())))
                        .with_partitions(partitions)
                })
                .collect(),
        );
    let resp = cluster
        .send(addr, Workload::Admin, &req, LIST_OFFSETS_VERSIONS)
        .await?;
    let mut out = Vec::new();
    for t in &resp.topics {
        for p in &t.partitions {
            let tp = TopicPartition::new(t.name.0.as_str(), p.partition_index);
            if !parts.iter().any(|(asked, _)| *asked == tp) {
                continue;
            }
            let answer = match KafkaCode::from_code(p.error_code) {
                Some(code) => {
                    if code.invalidates_metadata() {
                        cluster.request_refresh();
                    }
                    Err(Error::Kafka {
                        code,
                        context: format!("ListOffsets for {tp} on {addr}"),
                    })
                }
                None if p.offset < 0 => Ok(None),
                None => Ok(Some(OffsetAndTimestamp {
                    offset: p.offset,
                    timestamp: p.timestamp,
                    leader_epoch: (p.leader_epoch >= 0).then_some(p.leader_epoch),
                })),
            };
            out.push((tp, answer));
        }
    }
    for (tp, _) in parts {
        if !out.iter().any(|(answered, _)| answered == tp) {
            out.push((
                tp.clone(),
                Err(Error::Kafka {
                    code: KafkaCode::UNKNOWN_TOPIC_OR_PARTITION,
                    context: format!("ListOffsets response from {addr} omits {tp}"),
                }),
            ));
        }
    }
    Ok(out)
}
