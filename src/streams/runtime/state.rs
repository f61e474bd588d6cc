//! The runtime's side of state stores (issue #16): at start, refuse what a
//! stateful stage cannot honour, create or check the changelog topics, and
//! hand the stores the producer they write their changelogs through (so a
//! changelog write is an output of its record: acknowledged before the
//! record is done under at-least-once, inside the record's transaction
//! under exactly-once). Revocations and shutdown close the stores (see
//! `commit.rs` and `dispatch_loop`).

use std::collections::BTreeSet;

use crate::cluster::Cluster;
use crate::consumer::ConsumerConfig;
use crate::error::Error;
use crate::producer::Producer;
use crate::streams::config::{FailurePolicy, StreamsConfig};
use crate::streams::scheduler::OrderingMode;
use crate::streams::state::{changelog_topic, StoresRuntime};

/// Why `config` cannot run a topology with stateful stages, if it cannot.
pub(super) fn check(config: &StreamsConfig) -> Result<(), Error> {
    let specs = config.stores.specs();
    if specs.is_empty() {
        return Ok(());
    }
    // A table's store is only read by its joins (its follower writes it):
    // a join needs no per-key order.
    let writes = specs.iter().any(|s| s.source_topic().is_none());
    if writes && config.ordering == OrderingMode::Unordered {
        return Err(Error::config(
            "ordering",
            "a stateful stage (count, reduce, aggregate) needs one record per key at a time, in \
             offset order, which OrderingMode::Unordered does not give; use OrderingMode::Key \
             (keys run concurrently) or OrderingMode::Partition",
        ));
    }
    if matches!(config.failure_policy, FailurePolicy::RetryLane(_)) {
        return Err(Error::config(
            "failure.policy",
            "the parallel retry lane cannot be combined with a stateful stage: a retried record \
             would update the store late, out of order, and possibly on an instance that no \
             longer owns the partition's store; use FailurePolicy::Retry (in place) or Fail",
        ));
    }
    let mut names = BTreeSet::new();
    for s in &specs {
        if s.name().is_empty() || !s.name().chars().all(legal) {
            return Err(Error::config(
                "store name",
                format!(
                    "store {:?}: a store name names a topic and a file, so it takes only \
                     ASCII letters, digits, '.', '_' and '-'",
                    s.name()
                ),
            ));
        }
        if !names.insert(s.name()) {
            return Err(Error::config(
                "store name",
                format!(
                    "two stateful stages use store {:?}; give each its own",
                    s.name()
                ),
            ));
        }
    }
    Ok(())
}

fn legal(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')
}

/// Creates (or checks) the changelog topics and connects the stores.
pub(super) async fn prepare(
    config: &StreamsConfig,
    source: &str,
    cluster: &Cluster,
    producer: &Producer,
    restore_config: ConsumerConfig,
) -> Result<(), Error> {
    let specs = config.stores.specs();
    if specs.is_empty() {
        return Ok(());
    }
    // A table's topic is its changelog: nothing to create, but it must
    // be co-partitioned with the source.
    let changelogs: Vec<String> = specs
        .iter()
        .filter(|s| s.source_topic().is_none())
        .map(|s| changelog_topic(&config.application_id, s.name()))
        .collect();
    let partitions = crate::streams::state::ensure_changelogs(cluster, source, &changelogs).await?;
    for table in specs.iter().filter_map(|s| s.source_topic()) {
        crate::streams::state::check_copartitioned(cluster, source, partitions, table).await?;
    }
    config.stores.start(StoresRuntime {
        cluster: cluster.clone(),
        producer: producer.clone(),
        restore_config,
        application_id: config.application_id.clone(),
        state_dir: config.state_dir.clone(),
        retries_in_place: matches!(config.failure_policy, FailurePolicy::Retry(_)),
        cache_budget: std::sync::Arc::new(crate::streams::state::CacheBudget::new(
            config.cache_max_bytes,
        )),
    });
    Ok(())
}

impl super::RunningStreams {
    /// Changelog records this instance's state stores applied while
    /// restoring, so far (restore progress is also traced: `restoring
    /// state store` / `restored state store`, with the store, changelog
    /// partition, records and time taken).
    pub fn restored_records(&self) -> u64 {
        self.shared.config.stores.restored_records()
    }

    /// Standby task stores open in this instance now (one per store and
    /// partition; `num.standby.replicas` under `group.protocol=streams`).
    /// A standby is traced as `standby store caught up; following its
    /// changelog`, and its promotion as `promoting a standby store` /
    /// `promoted a standby store` with the tail's records.
    pub fn standby_stores(&self) -> usize {
        self.shared.config.stores.standby_stores()
    }

    /// Changelog records applied to standby stores so far (catching up,
    /// then following); a promotion's tail counts in
    /// [`restored_records`](Self::restored_records).
    pub fn standby_records(&self) -> u64 {
        self.shared.config.stores.standby_records()
    }

    /// Records windowed stages dropped because their window had closed
    /// (stream time past its end plus grace), so far.
    pub fn dropped_late_records(&self) -> u64 {
        self.shared.config.stores.dropped_late_records()
    }

    /// Interactive query: a read-only view of store `name` (a stateful
    /// stage's [`StoreSpec`](crate::streams::state::StoreSpec) name) over
    /// the partitions this instance has open, typed as the stage's key and
    /// value (an error names other types, or a name no stage uses).
    ///
    /// ```no_run
    /// # fn demo(running: &purekafka::streams::RunningStreams) -> purekafka::Result<()> {
    /// let counts = running.store::<String, i64>("counts")?;
    /// println!("alice: {:?}", counts.get(&"alice".to_owned())?);
    /// # Ok(())
    /// # }
    /// ```
    pub fn store<K: 'static, V: 'static>(
        &self,
        name: &str,
    ) -> crate::error::Result<crate::streams::state::ReadOnlyKeyValueStore<K, V>> {
        crate::streams::state::ReadOnlyKeyValueStore::new(&self.shared.config.stores, name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::streams::state::StoreSpec;
    use crate::streams::{Backoff, RetryLane};
    use std::time::Duration;

    fn with_store(b: crate::streams::StreamsConfigBuilder, name: &str) -> StreamsConfig {
        let c = b.build().unwrap();
        c.stores.register(StoreSpec::in_memory(name));
        c
    }

    #[test]
    fn stateful_stages_refuse_unordered_the_retry_lane_and_bad_or_shared_names() {
        let base = || StreamsConfig::builder("app", "x:1");
        assert!(check(&base().build().unwrap()).is_ok());
        assert!(check(&with_store(base().ordering(OrderingMode::Key), "counts")).is_ok());
        let e = check(&with_store(
            base().ordering(OrderingMode::Unordered),
            "counts",
        ))
        .unwrap_err();
        assert!(e.to_string().contains("Unordered"), "{e}");
        let lane = FailurePolicy::RetryLane(RetryLane::new(
            "r",
            "d",
            Backoff::fixed(Duration::from_millis(1), 3),
        ));
        let e = check(&with_store(base().failure_policy(lane), "counts")).unwrap_err();
        assert!(e.to_string().contains("retry lane"), "{e}");
        let e = check(&with_store(base(), "a/b")).unwrap_err();
        assert!(e.to_string().contains("a/b"), "{e}");
        // A table's joins only read: Unordered is fine with tables alone.
        let tables = base().ordering(OrderingMode::Unordered).build().unwrap();
        tables
            .stores
            .register(StoreSpec::in_memory("customers").following("customers"));
        assert!(check(&tables).is_ok());
        tables.stores.register(StoreSpec::in_memory("counts"));
        assert!(check(&tables).is_err());
        let c = with_store(base(), "counts");
        c.stores.register(StoreSpec::persistent("counts"));
        let e = check(&c).unwrap_err();
        assert!(e.to_string().contains("two stateful stages"), "{e}");
    }
}
