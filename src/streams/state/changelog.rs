//! Changelog topics (Kafka Streams' naming and rules): one compacted topic
//! `<application.id>-<store>-changelog` per store, with as many partitions
//! as the input topic (a store's partition `p` is the state of input
//! partition `p`), created by the runtime at start; and the restore that
//! replays a changelog partition into a store (`read_committed` under
//! exactly-once, so aborted writes never come back).

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tracing::{debug, info};

use super::blocking::off_runtime;
use super::store::KeyValueStore;
use crate::admin::{Admin, NewTopic};
use crate::cluster::Cluster;
use crate::consumer::{Consumer, ConsumerConfig};
use crate::error::{Error, KafkaCode, Origin};
use crate::TopicPartition;

/// The changelog topic of `store` in application `application_id`:
/// `<application.id>-<store>-changelog`, as Kafka Streams names it.
pub fn changelog_topic(application_id: &str, store: &str) -> String {
    format!("{application_id}-{store}-changelog")
}

/// How long topic metadata may take to show a topic just created.
const METADATA_WAIT: Duration = Duration::from_secs(15);

/// The partition count of `topic`, waiting up to [`METADATA_WAIT`] for it
/// to appear.
pub(crate) async fn partition_count(
    cluster: &Cluster,
    topic: &str,
) -> Result<Option<usize>, Error> {
    let deadline = Instant::now() + METADATA_WAIT;
    loop {
        let m = cluster.refresh_metadata(Some(&[topic.to_owned()])).await?;
        let n = m
            .topics
            .get(topic)
            .map(|t| t.partitions.len())
            .filter(|n| *n > 0);
        if n.is_some() || Instant::now() >= deadline {
            return Ok(n);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Creates each changelog topic (compacted, the input's partition count),
/// or checks that an existing one has that partition count. Returns the
/// count.
pub(crate) async fn ensure_changelogs(
    cluster: &Cluster,
    source: &str,
    changelogs: &[String],
) -> Result<i32, Error> {
    let partitions = partition_count(cluster, source).await?.ok_or_else(|| {
        Error::invalid_state(
            Origin::Streams,
            format!(
                "source topic {source} does not exist: a stateful topology needs it to size its \
                 changelog topics; create it first"
            ),
        )
    })?;
    let partitions = i32::try_from(partitions).map_err(|_| {
        Error::invalid_state(
            Origin::Streams,
            format!("{source}: {partitions} partitions"),
        )
    })?;
    let admin = Admin::with_cluster(cluster.clone());
    let new: Vec<NewTopic> = changelogs
        .iter()
        .map(|t| NewTopic::new(t.clone(), partitions).config("cleanup.policy", "compact"))
        .collect();
    let created = if new.is_empty() {
        Default::default()
    } else {
        admin.create_topics(&new, false).await?
    };
    for (topic, result) in created {
        match result {
            Ok(_) => info!(topic = %topic, partitions, "created changelog topic"),
            Err(e) if e.kafka_code() == Some(KafkaCode::TOPIC_ALREADY_EXISTS) => {}
            Err(e) => return Err(e),
        }
    }
    for topic in changelogs {
        match partition_count(cluster, topic).await? {
            Some(n) if n as i64 == i64::from(partitions) => {}
            found => {
                return Err(Error::invalid_state(
                    Origin::Streams,
                    format!(
                        "changelog topic {topic} has {} partition(s) but source topic {source} \
                         has {partitions}: a store's partition p holds input partition p's \
                         state, so they must match; delete the changelog (its state is then \
                         lost) or restore the source's partition count",
                        found.map_or("no".to_owned(), |n| n.to_string())
                    ),
                ))
            }
        }
    }
    Ok(partitions)
}

/// Checks that `table`'s topic has the stream source's partition count
/// (`partitions`): a stream record of partition `p` is joined with the
/// table's partition `p`.
pub(crate) async fn check_copartitioned(
    cluster: &Cluster,
    source: &str,
    partitions: i32,
    table: &str,
) -> Result<(), Error> {
    match partition_count(cluster, table).await? {
        Some(n) if n as i64 == i64::from(partitions) => Ok(()),
        found => Err(Error::invalid_state(
            Origin::Streams,
            format!(
                "table topic {table} has {} partition(s) but stream topic {source} has \
                 {partitions}: a stream-table join reads the table's partition p for the \
                 stream's partition p, so the topics must be co-partitioned (same partition \
                 count and partitioner); repartition one of them",
                found.map_or("no".to_owned(), |n| n.to_string())
            ),
        )),
    }
}

/// What a restore did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Restored {
    /// Changelog records applied.
    pub records: u64,
    /// The changelog offset the store now holds everything below.
    pub end: i64,
    /// Entries in the store after the restore.
    pub entries: u64,
}

/// Longest a restore waits without any progress before it fails.
const RESTORE_STALL: Duration = Duration::from_secs(60);

/// Replays `changelog` into `store` from `from` (the log start when
/// `None`) up to its end offset (the last stable offset under
/// read_committed), as seen when the restore starts. A checkpoint past the
/// end (the topic was recreated) restarts from the log start after a
/// wipe. `progress` is called with the records applied so far. The store
/// is written off the runtime (`off_runtime`), a polled batch at a time.
pub(crate) async fn restore(
    cluster: &Cluster,
    mut config: ConsumerConfig,
    changelog: &TopicPartition,
    from: Option<i64>,
    store: &Arc<dyn KeyValueStore>,
    progress: &(dyn Fn(u64) + Send + Sync),
) -> Result<Restored, Error> {
    config.group_id = None;
    config.enable_auto_commit = false;
    let consumer = Consumer::with_cluster(cluster.clone(), config);
    let outcome = replay(&consumer, changelog, from, store, progress).await;
    let _ = consumer.close().await;
    outcome
}

async fn replay(
    consumer: &Consumer,
    changelog: &TopicPartition,
    from: Option<i64>,
    store: &Arc<dyn KeyValueStore>,
    progress: &(dyn Fn(u64) + Send + Sync),
) -> Result<Restored, Error> {
    let tps = [changelog.clone()];
    let end = *consumer
        .end_offsets(&tps)
        .await?
        .get(changelog)
        .ok_or_else(|| Error::UnknownPartition {
            topic: changelog.topic.to_string(),
            partition: changelog.partition,
        })?;
    let start = consumer
        .beginning_offsets(&tps)
        .await?
        .get(changelog)
        .copied()
        .unwrap_or(0);
    let store_err = |e: super::StoreError| Error::invalid_state(Origin::Streams, e.to_string());
    let join_err = |e: String| Error::invalid_state(Origin::Streams, e);
    let from = match from {
        Some(o) if o <= end => o,
        Some(o) => {
            debug!(%changelog, checkpoint = o, end, "checkpoint past the changelog's end; wiping");
            let s = store.clone();
            off_runtime("wiping a state store", move || s.wipe())
                .await
                .map_err(join_err)?
                .map_err(store_err)?;
            start
        }
        None => start,
    };
    if from >= end {
        let s = store.clone();
        let entries = off_runtime("counting a store's entries", move || s.len())
            .await
            .map_err(join_err)?
            .map_err(store_err)?;
        return Ok(Restored {
            records: 0,
            end,
            entries,
        });
    }
    consumer.assign(tps.to_vec());
    consumer.seek(changelog, from)?;
    let mut records = 0u64;
    let mut last_progress = Instant::now();
    loop {
        let batch = consumer.poll(Duration::from_millis(200)).await?;
        if !batch.is_empty() {
            last_progress = Instant::now();
        }
        let s = store.clone();
        records += off_runtime("restoring a state store", move || {
            let mut applied = 0u64;
            for r in batch {
                if r.offset >= end {
                    break;
                }
                let Some(key) = r.key else { continue };
                match r.value {
                    Some(v) => s.put(key, v)?,
                    None => s.delete(&key)?,
                }
                applied += 1;
            }
            Ok::<_, super::StoreError>(applied)
        })
        .await
        .map_err(join_err)?
        .map_err(store_err)?;
        progress(records);
        // Under read_committed the position passes control records and
        // aborted ones without returning them.
        if consumer.position(changelog).await? >= end {
            break;
        }
        if last_progress.elapsed() > RESTORE_STALL {
            return Err(Error::Timeout {
                broker: Origin::Streams,
                api: format!("restoring {changelog} (at {records} records, end {end})"),
                after: RESTORE_STALL,
                config_key: "request.timeout.ms",
            });
        }
    }
    let s = store.clone();
    let entries = off_runtime("flushing a restored store", move || {
        s.flush()?;
        s.len()
    })
    .await
    .map_err(join_err)?
    .map_err(store_err)?;
    Ok(Restored {
        records,
        end,
        entries,
    })
}
