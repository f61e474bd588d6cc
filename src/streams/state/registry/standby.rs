//! Standby tasks (`num.standby.replicas`): a copy of another instance's
//! active task's stores, kept current from their changelogs without
//! processing, so that a fail-over to this instance restores only the
//! tail. Under `group.protocol=streams` the group coordinator places them
//! (KIP-1071,
//! <https://cwiki.apache.org/confluence/display/KAFKA/KIP-1071%3A+Streams+Rebalance+Protocol>:
//! standby and warm-up tasks, which Kafka Streams runs alike); the
//! member publishes its target tasks, which this module follows.
//!
//! - A task that becomes a standby here opens its stores (a persistent
//!   one from its checkpoint), restores them to the changelog's end and
//!   starts a [`Follower`](super::super::table::Follower) per store
//!   (`read_committed` under exactly-once), which checkpoints every so
//!   often so a restarted standby resumes.
//! - *Promotion*: the active task's first use of a store takes the
//!   standby's (no fresh open), stops its follower and restores from the
//!   follower's position to the changelog's end (the tail).
//! - *Demotion*: an active task revoked cleanly while its target is a
//!   standby here checkpoints its store and follows on from where it is.
//! - A standby no longer assigned closes (a persistent store keeps its
//!   file and a checkpoint); one assigned active here waits for its
//!   promotion.
//!
//! The decisions are [`plan`], a pure function of the target tasks and
//! the stores open in each role.

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use tokio::sync::{watch, Notify};
use tokio::time::Instant;
use tracing::{debug, info, warn};

use super::super::blocking::off_runtime;
use super::super::table::Follower;
use super::{lock, restore_store, Slot, StoreSpec, Stores, StoresRuntime, TaskStore};
use crate::consumer::group::streams::TaskAssignment;
use crate::streams::error::ProcessingError;

/// The standby stores of this instance and what it follows.
#[derive(Default)]
pub(super) struct Standbys {
    /// Per store name, per partition.
    open: Mutex<HashMap<String, HashMap<i32, Arc<TaskStore>>>>,
    /// The subtopology the stores belong to (the topology's last: `"0"`
    /// without `group_by`) and the member's target tasks (set under
    /// `group.protocol=streams`).
    targets: OnceLock<(String, watch::Receiver<TaskAssignment>)>,
    /// Changelog records applied by standbys (catch-up and following).
    records: Arc<AtomicU64>,
    /// Active stores being demoted: out of the active stores, not yet
    /// among the standbys (changed under the active stores' lock).
    pub(super) demoting: Mutex<BTreeSet<(String, i32)>>,
    /// One [`Stores::sync_standbys`] at a time.
    sync: tokio::sync::Mutex<()>,
    /// Asks the standby loop to sync again (a store closed).
    resync: Notify,
    closed: AtomicBool,
}

/// What the target tasks ask of the standby stores.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct Plan {
    /// (store, partition) to open as standbys.
    pub open: Vec<(String, i32)>,
    /// (store, partition) standbys to close.
    pub close: Vec<(String, i32)>,
}

/// The standby (and warm-up) and active partitions of `target`'s tasks of
/// `subtopology`.
fn partitions(subtopology: &str, target: &TaskAssignment) -> (BTreeSet<i32>, BTreeSet<i32>) {
    let of = |tasks: &BTreeSet<crate::consumer::group::streams::TaskId>| -> BTreeSet<i32> {
        tasks
            .iter()
            .filter(|t| t.subtopology == subtopology && t.partition >= 0)
            .map(|t| t.partition)
            .collect()
    };
    let mut standby = of(&target.standby);
    standby.extend(of(&target.warmup));
    let active = of(&target.active);
    // A task is never both; if the coordinator said so, it is active.
    standby.retain(|p| !active.contains(p));
    (standby, active)
}

/// Which standby stores to open and close, from the standby and active
/// partitions of the target, the stores `names`, the standbys open
/// (`standing`) and the active stores open (`active_open`): a standby
/// partition opens each store not open in either role (an active one
/// still open is demoted by its close instead); a standby no longer
/// wanted closes unless its task is active here now (its promotion takes
/// it).
pub(super) fn plan(
    (standby, active): (&BTreeSet<i32>, &BTreeSet<i32>),
    names: &[String],
    standing: &BTreeSet<(String, i32)>,
    active_open: &BTreeSet<(String, i32)>,
) -> Plan {
    let mut out = Plan::default();
    for p in standby {
        for name in names {
            let key = (name.clone(), *p);
            if !standing.contains(&key) && !active_open.contains(&key) {
                out.open.push(key);
            }
        }
    }
    for (name, p) in standing {
        if !standby.contains(p) && !active.contains(p) {
            out.close.push((name.clone(), *p));
        }
    }
    out
}

impl Stores {
    /// Follows the member's target tasks in `targets` (under
    /// `group.protocol=streams`): runs their standby and warm-up tasks of
    /// `subtopology` (the one whose tasks own the stores) until the member
    /// ends (its sender is dropped) or the stores close.
    pub(crate) async fn run_standbys(
        self,
        subtopology: String,
        mut targets: watch::Receiver<TaskAssignment>,
    ) {
        let _ = self.0.standbys.targets.set((subtopology, targets.clone()));
        loop {
            self.sync_standbys().await;
            tokio::select! {
                changed = targets.changed() => if changed.is_err() { break },
                _ = self.0.standbys.resync.notified() => {}
            }
            if self.0.standbys.closed.load(Ordering::Acquire) {
                break;
            }
        }
        debug!("standby tasks: the streams group member ended");
    }

    /// Standby tasks' stores open now (one per store and partition).
    pub(crate) fn standby_stores(&self) -> usize {
        lock(&self.0.standbys.open).values().map(HashMap::len).sum()
    }

    /// Changelog records applied to standby stores so far (their
    /// catch-up and following).
    pub(crate) fn standby_records(&self) -> u64 {
        self.0.standbys.records.load(Ordering::Relaxed)
    }

    /// The partitions whose tasks are standbys here in the member's
    /// target (none without a streams group).
    pub(super) fn standby_partitions(&self) -> BTreeSet<i32> {
        match self.0.standbys.targets.get() {
            Some((subtopology, rx)) => partitions(subtopology, &rx.borrow()).0,
            None => BTreeSet::new(),
        }
    }

    /// The standby store `name` of `partition`, taken out of the standbys
    /// (its promotion).
    pub(super) fn take_standby(&self, name: &str, partition: i32) -> Option<Arc<TaskStore>> {
        lock(&self.0.standbys.open)
            .get_mut(name)
            .and_then(|m| m.remove(&partition))
    }

    /// Opens and closes standby stores as the target asks (see [`plan`]).
    async fn sync_standbys(&self) {
        let _one = self.0.standbys.sync.lock().await;
        if self.0.standbys.closed.load(Ordering::Acquire) {
            return;
        }
        let Some((subtopology, rx)) = self.0.standbys.targets.get() else {
            return;
        };
        let target = partitions(subtopology, &rx.borrow());
        let names: Vec<String> = self.specs().iter().map(|s| s.name().to_owned()).collect();
        // Active (and demoting) first, standbys second: a demotion moves
        // a store from the first to the second, so it is seen in one.
        let active_open: BTreeSet<(String, i32)> = {
            let open = lock(&self.0.open);
            let mut keys: BTreeSet<(String, i32)> = open
                .iter()
                .flat_map(|(n, m)| m.keys().map(move |p| (n.clone(), *p)))
                .collect();
            keys.extend(lock(&self.0.standbys.demoting).iter().cloned());
            keys
        };
        let standing: BTreeSet<(String, i32)> = lock(&self.0.standbys.open)
            .iter()
            .flat_map(|(n, m)| m.keys().map(move |p| (n.clone(), *p)))
            .collect();
        let plan = plan((&target.0, &target.1), &names, &standing, &active_open);
        let closing: Vec<Arc<TaskStore>> = {
            let mut open = lock(&self.0.standbys.open);
            plan.close
                .iter()
                .filter_map(|(n, p)| open.get_mut(n).and_then(|m| m.remove(p)))
                .collect()
        };
        if !closing.is_empty() {
            info!(
                stores = closing.len(),
                "closing standby stores no longer assigned"
            );
            close_standbys(closing).await;
        }
        for (name, p) in plan.open {
            match self.open_standby(&name, p).await {
                Ok(store) => {
                    lock(&self.0.standbys.open)
                        .entry(name)
                        .or_default()
                        .insert(p, store);
                }
                Err(e) => {
                    warn!(store = %name, partition = p, error = %e,
                        "standby store not opened; tried again at the next assignment change")
                }
            }
        }
    }

    /// Opens store `name` of `partition` as a standby: from its checkpoint
    /// (a persistent store), restored to the changelog's end, then
    /// followed.
    async fn open_standby(
        &self,
        name: &str,
        partition: i32,
    ) -> Result<Arc<TaskStore>, ProcessingError> {
        let (rt, spec) = self.runtime_and_spec(name)?;
        let opened = super::open_store(rt, &spec, partition).await?;
        let started = Instant::now();
        let restored =
            restore_store(rt, name, &opened.changelog, opened.from, &opened.store).await?;
        self.0
            .standbys
            .records
            .fetch_add(restored.records, Ordering::Relaxed);
        info!(store = name, changelog = %opened.changelog, records = restored.records,
            end = restored.end, took_ms = started.elapsed().as_millis() as u64,
            "standby store caught up; following its changelog");
        Ok(self.follow(rt, &spec, opened, restored.end))
    }

    /// A standby task store of `opened`, followed from `end`.
    fn follow(
        &self,
        rt: &StoresRuntime,
        spec: &StoreSpec,
        opened: super::Opened,
        end: i64,
    ) -> Arc<TaskStore> {
        let follower = Follower::standby(self.0.standbys.records.clone());
        let store = TaskStore::assemble(rt, spec, opened, end, Some(follower));
        if let Some(f) = &store.follower {
            f.start(&store, rt, end);
        }
        store
    }

    /// Promotion: the active task's store from its standby's, whose
    /// follower stops; the tail from the follower's position to the
    /// changelog's end is restored (and counted as restored records).
    pub(super) async fn promote(
        &self,
        rt: &StoresRuntime,
        spec: &StoreSpec,
        standby: Arc<TaskStore>,
    ) -> Result<Arc<TaskStore>, ProcessingError> {
        let name = spec.name();
        if let Some(f) = &standby.follower {
            f.stop_and_wait().await.map_err(|e| {
                ProcessingError::new(format!(
                    "promoting the standby of store {name} ({}): {e}",
                    standby.changelog
                ))
            })?;
        }
        let opened = standby.reopened();
        // From here the store takes writes no checkpoint covers.
        if let Some(cp) = opened.checkpoint.clone() {
            let path = cp.path().to_path_buf();
            off_runtime("removing a promoted store's checkpoint", move || {
                cp.remove()
            })
            .await
            .map_err(|e| super::StoreError::io(path, e))??;
        }
        let started = Instant::now();
        info!(store = name, changelog = %opened.changelog, from = ?opened.from,
            "promoting a standby store; restoring the tail");
        let restored =
            restore_store(rt, name, &opened.changelog, opened.from, &opened.store).await?;
        self.0
            .restored_records
            .fetch_add(restored.records, Ordering::Relaxed);
        info!(store = name, changelog = %opened.changelog, records = restored.records,
            end = restored.end, took_ms = started.elapsed().as_millis() as u64,
            "promoted a standby store");
        let follower = spec.source_topic().map(|_| Follower::default());
        let store = TaskStore::assemble(rt, spec, opened, restored.end, follower);
        if let Some(f) = &store.follower {
            f.start(&store, rt, restored.end);
        }
        Ok(store)
    }

    /// Demotion: the active stores of `slots` (closed cleanly: their
    /// offsets are committed) stay here as standbys, checkpointed and
    /// followed from where they are. Then the standby loop syncs (stores
    /// closed meanwhile may be standbys to open).
    pub(super) async fn demote(&self, slots: Vec<(String, i32, Slot)>) {
        let Some(rt) = self.0.runtime.get() else {
            lock(&self.0.standbys.demoting).clear();
            return;
        };
        for (name, p, slot) in slots {
            let Some(active) = slot.get().cloned() else {
                lock(&self.0.standbys.demoting).remove(&(name, p));
                continue;
            };
            drop(slot);
            if let Some(f) = &active.follower {
                if let Err(e) = f.stop_and_wait().await {
                    warn!(store = %name, partition = p, error = %e, "demoting a table store");
                }
            }
            let a = active.clone();
            if let Err(e) =
                off_runtime("checkpointing a demoted store", move || a.close(true)).await
            {
                warn!(store = %name, error = %e, "demoted store not checkpointed");
            }
            let Some(spec) = self.specs().into_iter().find(|s| s.name() == name) else {
                lock(&self.0.standbys.demoting).remove(&(name, p));
                continue;
            };
            let opened = active.reopened();
            let end = opened.from.unwrap_or(0);
            info!(store = %name, changelog = %opened.changelog, from = end,
                "active task now a standby here; following its changelog");
            let standby = self.follow(rt, &spec, opened, end);
            lock(&self.0.standbys.open)
                .entry(name.clone())
                .or_default()
                .insert(p, standby);
            lock(&self.0.standbys.demoting).remove(&(name, p));
            // The last reference of the active task store: dropped off the
            // runtime (its inner store lives on in the standby).
            let _ = off_runtime("dropping a demoted store", move || drop(active)).await;
        }
        self.0.standbys.resync.notify_one();
    }

    /// Closes every standby store (shutdown), checkpointed.
    pub(super) async fn close_standbys(&self) {
        self.0.standbys.closed.store(true, Ordering::Release);
        let _one = self.0.standbys.sync.lock().await;
        let closing: Vec<Arc<TaskStore>> = lock(&self.0.standbys.open)
            .drain()
            .flat_map(|(_, m)| m.into_values())
            .collect();
        self.0.standbys.resync.notify_one();
        close_standbys(closing).await;
    }
}

/// Stops the standbys' followers and closes their stores, checkpointed
/// (a standby holds only changelog records, so its close is always
/// clean), off the runtime.
async fn close_standbys(stores: Vec<Arc<TaskStore>>) {
    if stores.is_empty() {
        return;
    }
    for s in &stores {
        if let Some(f) = &s.follower {
            if let Err(e) = f.stop_and_wait().await {
                warn!(store = %s.name, error = %e, "closing a standby store");
            }
        }
    }
    let closed = off_runtime("closing standby stores", move || {
        for s in &stores {
            s.close(true);
        }
        drop(stores);
    })
    .await;
    if let Err(e) = closed {
        warn!(error = %e, "standby stores not closed cleanly; the next open restores from the changelog");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::consumer::group::streams::TaskId;

    fn set(ps: &[i32]) -> BTreeSet<i32> {
        ps.iter().copied().collect()
    }

    fn keys(ks: &[(&str, i32)]) -> BTreeSet<(String, i32)> {
        ks.iter().map(|(n, p)| ((*n).to_owned(), *p)).collect()
    }

    fn names() -> Vec<String> {
        vec!["counts".to_owned()]
    }

    #[test]
    fn a_new_standby_opens_each_store_and_nothing_closes() {
        let p = plan(
            (&set(&[1]), &set(&[0])),
            &["a".to_owned(), "b".to_owned()],
            &BTreeSet::new(),
            &keys(&[("a", 0)]),
        );
        assert_eq!(p.open, vec![("a".into(), 1), ("b".into(), 1)]);
        assert!(p.close.is_empty());
    }

    #[test]
    fn standby_to_active_keeps_the_store_for_its_promotion() {
        // Task 0_1 was a standby here and is active now: neither opened
        // nor closed (the first record's open takes it).
        let p = plan(
            (&set(&[]), &set(&[0, 1])),
            &names(),
            &keys(&[("counts", 1)]),
            &keys(&[("counts", 0)]),
        );
        assert_eq!(p, Plan::default());
    }

    #[test]
    fn active_to_standby_waits_for_the_close_that_demotes_it() {
        // Still open as active (its revocation not done): the close
        // demotes it; the plan does not open a second copy.
        let p = plan(
            (&set(&[0]), &set(&[])),
            &names(),
            &BTreeSet::new(),
            &keys(&[("counts", 0)]),
        );
        assert_eq!(p, Plan::default());
        // Closed without demotion (a lost task): opened as a standby.
        let p = plan(
            (&set(&[0]), &set(&[])),
            &names(),
            &BTreeSet::new(),
            &BTreeSet::new(),
        );
        assert_eq!(p.open, vec![("counts".into(), 0)]);
    }

    #[test]
    fn a_revoked_standby_closes() {
        let p = plan(
            (&set(&[2]), &set(&[0])),
            &names(),
            &keys(&[("counts", 1), ("counts", 2)]),
            &BTreeSet::new(),
        );
        assert!(p.open.is_empty());
        assert_eq!(p.close, vec![("counts".into(), 1)]);
    }

    #[test]
    fn warmups_run_as_standbys_and_other_subtopologies_are_ignored() {
        let target = TaskAssignment {
            active: [TaskId::new("0", 0)].into(),
            standby: [
                TaskId::new("0", 1),
                TaskId::new("1", 5),
                TaskId::new("0", 0),
            ]
            .into(),
            warmup: [TaskId::new("0", 2), TaskId::new("0", -1)].into(),
        };
        let (standby, active) = partitions("0", &target);
        assert_eq!(standby, set(&[1, 2]));
        assert_eq!(active, set(&[0]));
        // After a group_by the stores are the second subtopology's.
        let (standby, active) = partitions("1", &target);
        assert_eq!(standby, set(&[5]));
        assert!(active.is_empty());
    }
}
