//! A table's store kept current from its topic (Kafka Streams'
//! `builder.table(topic)` with the source-topic optimisation: the topic is
//! the table's changelog). When the store of partition `p` opens it is
//! restored from the topic's partition `p` like any changelog; then a
//! [`Follower`] reads on from the restored end while the store is open,
//! applying each record (a null value deletes its key), and the store's
//! changelog offset, which checkpoints record, follows the reader.
//!
//! The follower reads with the main consumer's config without its group
//! (so `read_committed` under exactly-once: a table never shows an
//! aborted write) and holds the store weakly, so a closed store is
//! dropped (and its file unlocked) without waiting for it.
//!
//! A standby task's store (`standby`) is kept current by the same
//! follower from its changelog, counting what it applies and writing the
//! store's checkpoint every so often, so a restarted standby resumes.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use tracing::{debug, warn};

use super::blocking::off_runtime;
use super::registry::{StoresRuntime, TaskStore};
use crate::cluster::Cluster;
use crate::consumer::{Consumer, ConsumerConfig};
use crate::TopicPartition;

/// How long one poll of a table's topic waits for records; also the
/// longest a closed store's follower runs on.
const POLL: Duration = Duration::from_millis(200);

/// The reader of a table store's topic partition, from the end of its
/// restore until the store closes.
#[derive(Default)]
pub(crate) struct Follower {
    stop: Arc<AtomicBool>,
    /// Why it stopped reading, if it failed.
    error: Arc<Mutex<Option<String>>>,
    /// A standby's: where the records it applies are counted; it also
    /// checkpoints the store every so often.
    standby: Option<Arc<AtomicU64>>,
    /// The reader's task, awaited by [`stop_and_wait`](Self::stop_and_wait).
    job: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

/// How long [`Follower::stop_and_wait`] waits for the reader to end (one
/// poll and the apply of its batch).
const STOP_WAIT: Duration = Duration::from_secs(30);

impl Follower {
    /// A standby task's follower, counting the records it applies in
    /// `applied`.
    pub(crate) fn standby(applied: Arc<AtomicU64>) -> Follower {
        Follower {
            standby: Some(applied),
            ..Follower::default()
        }
    }

    /// Starts reading `store`'s topic partition at `from`.
    pub(crate) fn start(&self, store: &Arc<TaskStore>, rt: &StoresRuntime, from: i64) {
        let job = Job {
            cluster: rt.cluster.clone(),
            config: rt.restore_config.clone(),
            tp: store.changelog().clone(),
            store: Arc::downgrade(store),
            stop: self.stop.clone(),
            error: self.error.clone(),
            standby: self.standby.clone(),
        };
        *self.job.lock().unwrap_or_else(|p| p.into_inner()) = Some(tokio::spawn(job.run(from)));
    }

    /// Stops reading (the store is closing); the reader ends within one
    /// poll.
    pub(crate) fn stop(&self) {
        self.stop.store(true, Ordering::Release);
    }

    /// Stops reading and waits until the reader ended, so nothing it read
    /// is applied after this returns (the store changes hands: a standby
    /// promoted). Fails if it has not ended within 30 s.
    pub(crate) async fn stop_and_wait(&self) -> Result<(), String> {
        self.stop();
        let job = self.job.lock().unwrap_or_else(|p| p.into_inner()).take();
        let Some(job) = job else { return Ok(()) };
        match tokio::time::timeout(STOP_WAIT, job).await {
            Ok(_) => Ok(()),
            Err(_) => Err(format!(
                "the follower did not stop within {} s",
                STOP_WAIT.as_secs()
            )),
        }
    }

    /// Why the reader stopped, if it failed.
    pub(crate) fn error(&self) -> Option<String> {
        self.error.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

struct Job {
    cluster: Cluster,
    config: ConsumerConfig,
    tp: TopicPartition,
    store: Weak<TaskStore>,
    stop: Arc<AtomicBool>,
    error: Arc<Mutex<Option<String>>>,
    standby: Option<Arc<AtomicU64>>,
}

impl Job {
    async fn run(self, from: i64) {
        let mut config = self.config.clone();
        config.group_id = None;
        config.enable_auto_commit = false;
        let consumer = Consumer::with_cluster(self.cluster.clone(), config);
        consumer.assign(vec![self.tp.clone()]);
        let failed = match consumer.seek(&self.tp, from) {
            Ok(()) => self.follow(&consumer).await,
            Err(e) => Some(e.to_string()),
        };
        if let Some(reason) = &failed {
            if self.standby.is_some() {
                // Its store holds what it applied: a promotion restores
                // the rest.
                warn!(changelog = %self.tp, %reason,
                    "a standby task stopped following its changelog; it falls behind until \
                     it is promoted or reassigned");
            } else {
                warn!(table = %self.tp, %reason,
                    "a table stopped following its topic; joins with it now fail");
            }
        }
        if let Some(reason) = failed {
            *self.error.lock().unwrap_or_else(|p| p.into_inner()) = Some(format!(
                "table topic {}: {reason} (the table no longer follows its topic; restart \
                 the application)",
                self.tp
            ));
        }
        let _ = consumer.close().await;
        debug!(table = %self.tp, "table follower ended");
    }

    /// Polls and applies until stopped (`None`) or a fatal error.
    async fn follow(&self, consumer: &Consumer) -> Option<String> {
        while !self.stop.load(Ordering::Acquire) {
            let batch = match consumer.poll(POLL).await {
                Ok(batch) => batch,
                Err(e) if e.is_retriable() => {
                    debug!(table = %self.tp, error = %e, "table poll failed; polling again");
                    tokio::time::sleep(POLL).await;
                    continue;
                }
                Err(e) => return Some(e.to_string()),
            };
            let Some(next) = batch.last().map(|r| r.offset + 1) else {
                continue;
            };
            // Checked under the same flag as the poll: a store closed while
            // it polled gets nothing more.
            if self.stop.load(Ordering::Acquire) {
                break;
            }
            let Some(store) = self.store.upgrade() else {
                break;
            };
            // Off the runtime: a persistent store's batch commit is file
            // I/O; the store (maybe its last reference, if it closed
            // meanwhile) is dropped there too.
            let standby = self.standby.clone();
            match off_runtime("applying a table's records", move || {
                let n = batch.len() as u64;
                store.apply_followed(batch, next)?;
                if let Some(applied) = standby {
                    applied.fetch_add(n, Ordering::Relaxed);
                    // The store holds every record below `next`: a
                    // restarted standby resumes from here.
                    store.write_checkpoint(false);
                }
                Ok::<(), super::StoreError>(())
            })
            .await
            {
                Ok(Ok(())) => {}
                Ok(Err(e)) => return Some(e.to_string()),
                Err(e) => return Some(e),
            }
        }
        None
    }
}
