//! `source.group`: whether an application reads its source through a
//! consumer group (the default) or a share group (KIP-932,
//! <https://cwiki.apache.org/confluence/display/KAFKA/KIP-932%3A+Queues+for+Kafka>),
//! what a share-group source refuses, and the delivery count a processor
//! can read under one. The runtime's side is `runtime/share_group.rs`;
//! DESIGN.md "streams on a share group" gives the reasons.

use super::config::{CommitMode, GroupProtocol, StreamsConfig};
use super::scheduler::OrderingMode;
use crate::error::{Error, Result};

/// `source.group`: how the instances of an application share its input.
/// Not a Kafka Streams setting (Kafka Streams has no share-group source).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum SourceGroup {
    /// `consumer`: a consumer group (or a streams group, as
    /// `group.protocol` says): each partition belongs to one instance,
    /// offsets are committed (the default).
    #[default]
    Consumer,
    /// `share`: a share group named `application.id`: any number of
    /// instances read the same partitions, the broker hands each record
    /// to one of them and each record is acknowledged (accepted, released
    /// for a retry, rejected). Needs [`OrderingMode::Unordered`], commit
    /// mode `Sync` (at-least-once) and a stateless topology.
    Share,
}

impl std::str::FromStr for SourceGroup {
    type Err = Error;

    /// `consumer` or `share`, in any case.
    fn from_str(s: &str) -> Result<SourceGroup> {
        match s.trim().to_ascii_lowercase().as_str() {
            "consumer" => Ok(SourceGroup::Consumer),
            "share" => Ok(SourceGroup::Share),
            other => Err(Error::config(
                "source.group",
                format!("`{other}` is not consumer or share"),
            )),
        }
    }
}

/// What a share-group source cannot honour, found when the config is
/// built (stateful stages are refused at start, once the topology is
/// known).
pub(crate) fn check(c: &StreamsConfig) -> Result<()> {
    if c.source_group != SourceGroup::Share {
        return Ok(());
    }
    if c.ordering != OrderingMode::Unordered {
        return Err(Error::config(
            "ordering",
            "source.group=share hands one partition's records to many instances, so no \
             per-key or per-partition order can hold: use OrderingMode::Unordered",
        ));
    }
    match c.commit_mode {
        CommitMode::Sync => {}
        CommitMode::ExactlyOnce => {
            return Err(Error::config(
                "commit.mode",
                "source.group=share is at-least-once: share-group acknowledgements cannot join \
                 a transaction (KIP-932); use CommitMode::Sync",
            ))
        }
        _ => {
            return Err(Error::config(
                "commit.mode",
                "source.group=share acknowledges records instead of committing offsets, so an \
                 async commit callback would have nothing to report; use CommitMode::Sync",
            ))
        }
    }
    if c.group_protocol != GroupProtocol::Classic {
        return Err(Error::config(
            "group.protocol",
            "source.group=share reads through a share group, which cannot also be a streams \
             group (KIP-1071); leave group.protocol at classic",
        ));
    }
    if c.consumer.is_some() {
        return Err(Error::config(
            "consumer",
            "source.group=share reads with a share consumer: set its properties with \
             consumer_property (e.g. max.poll.records, fetch.max.wait.ms), not a typed \
             ConsumerConfig",
        ));
    }
    Ok(())
}

/// Why a topology with stateful stages or tables cannot run on a share
/// group, if it has them.
pub(crate) fn check_stateless(c: &StreamsConfig) -> Result<()> {
    if c.source_group == SourceGroup::Share && !c.stores.specs().is_empty() {
        return Err(Error::config(
            "source.group",
            "a stateful stage or a table keeps a store per input partition, which needs all \
             of that partition's records in one instance; a share group spreads them over \
             every instance: use source.group=consumer",
        ));
    }
    Ok(())
}

tokio::task_local! {
    /// The delivery count of the record being processed (share source).
    pub(crate) static DELIVERY_COUNT: i16;
}

/// Inside a processor of an application with `source.group=share`: how
/// many times the broker has delivered the record being processed (1 the
/// first time, more after a release for a retry or a lapsed lock).
/// `None` under a consumer group, or outside the runtime's own task (in a
/// task the processor spawned, say).
///
/// ```
/// use purekafka::streams::ProcessingError;
///
/// fn check(value: &str) -> Result<(), ProcessingError> {
///     if value.is_empty() && purekafka::streams::delivery_count().unwrap_or(1) < 3 {
///         return Err(ProcessingError::new("empty value; maybe later"));
///     }
///     Ok(())
/// }
/// assert!(check("x").is_ok());
/// ```
pub fn delivery_count() -> Option<i16> {
    DELIVERY_COUNT.try_with(|n| *n).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::streams::state::StoreSpec;

    fn share() -> crate::streams::StreamsConfigBuilder {
        StreamsConfig::builder("app", "x:1")
            .source_group(SourceGroup::Share)
            .ordering(OrderingMode::Unordered)
    }

    fn refused(b: crate::streams::StreamsConfigBuilder, key: &str) {
        let e = b.build().unwrap_err().to_string();
        assert!(e.contains(key) && e.contains("source.group=share"), "{e}");
    }

    #[test]
    fn a_share_source_needs_unordered_sync_commits_and_the_classic_protocol() {
        assert!(share().build().is_ok());
        refused(share().ordering(OrderingMode::Key), "ordering");
        refused(share().ordering(OrderingMode::Partition), "ordering");
        refused(share().commit_mode(CommitMode::ExactlyOnce), "commit.mode");
        let callback: crate::streams::CommitCallback = std::sync::Arc::new(|_| {});
        refused(
            share().commit_mode(CommitMode::Async(callback)),
            "commit.mode",
        );
        refused(
            share().group_protocol(GroupProtocol::Streams),
            "group.protocol",
        );
        refused(
            share().consumer(crate::consumer::ConsumerConfig::default()),
            "consumer",
        );
        // The consumer-group source keeps its own rules.
        assert!(StreamsConfig::builder("app", "x:1")
            .ordering(OrderingMode::Key)
            .build()
            .is_ok());
    }

    #[test]
    fn stateful_stages_and_tables_are_refused_on_a_share_source() {
        let c = share().build().unwrap();
        assert!(check_stateless(&c).is_ok());
        c.stores
            .register(StoreSpec::in_memory("customers").following("customers"));
        let e = check_stateless(&c).unwrap_err().to_string();
        assert!(e.contains("source.group") && e.contains("table"), "{e}");
        let consumer = StreamsConfig::builder("app", "x:1")
            .ordering(OrderingMode::Key)
            .build()
            .unwrap();
        consumer.stores.register(StoreSpec::in_memory("counts"));
        assert!(check_stateless(&consumer).is_ok());
    }

    #[test]
    fn source_group_parses_and_names_its_key() {
        assert_eq!("share".parse::<SourceGroup>().unwrap(), SourceGroup::Share);
        assert_eq!(
            " Consumer ".parse::<SourceGroup>().unwrap(),
            SourceGroup::Consumer
        );
        assert_eq!(SourceGroup::default(), SourceGroup::Consumer);
        let e = "queue".parse::<SourceGroup>().unwrap_err().to_string();
        assert!(e.contains("source.group"), "{e}");
    }

    #[tokio::test]
    async fn the_delivery_count_is_seen_inside_its_scope_only() {
        assert_eq!(delivery_count(), None);
        let seen = DELIVERY_COUNT
            .scope(3, async {
                tokio::task::yield_now().await;
                delivery_count()
            })
            .await;
        assert_eq!(seen, Some(3));
        assert_eq!(delivery_count(), None);
    }
}
