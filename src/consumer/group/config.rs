//! Group membership settings, with the Java consumer's property names and
//! Kafka 4.x defaults
//! (<https://kafka.apache.org/documentation/#consumerconfigs>).

use std::time::Duration;

use crate::config::{parse_ms, split_list};
use crate::error::{Error, Result};

/// `group.protocol`: which rebalance protocol the member speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum GroupProtocol {
    /// JoinGroup / SyncGroup / Heartbeat, client-side assignment (the default).
    Classic,
    /// ConsumerGroupHeartbeat with a server-side assignor (KIP-848).
    Consumer,
}

/// A client-side assignor for the classic protocol
/// (`partition.assignment.strategy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum AssignmentStrategy {
    /// `range`: per topic, contiguous partition ranges (eager).
    Range,
    /// `roundrobin`: all partitions dealt round-robin (eager).
    RoundRobin,
    /// `cooperative-sticky`: balanced, sticky, incremental (KIP-429).
    CooperativeSticky,
}

impl AssignmentStrategy {
    /// The protocol name sent in JoinGroup, as the Java assignors name themselves.
    pub fn name(self) -> &'static str {
        match self {
            AssignmentStrategy::Range => "range",
            AssignmentStrategy::RoundRobin => "roundrobin",
            AssignmentStrategy::CooperativeSticky => "cooperative-sticky",
        }
    }

    /// Parses a protocol name or the Java class name of a built-in assignor.
    pub fn from_name(name: &str) -> Option<AssignmentStrategy> {
        let short = name.rsplit('.').next().unwrap_or(name);
        match short {
            "range" | "RangeAssignor" => Some(AssignmentStrategy::Range),
            "roundrobin" | "RoundRobinAssignor" => Some(AssignmentStrategy::RoundRobin),
            "cooperative-sticky" | "CooperativeStickyAssignor" => {
                Some(AssignmentStrategy::CooperativeSticky)
            }
            _ => None,
        }
    }

    /// Whether the assignor supports the cooperative rebalance protocol.
    pub fn is_cooperative(self) -> bool {
        matches!(self, AssignmentStrategy::CooperativeSticky)
    }
}

/// Consumer-group membership settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupConfig {
    /// `group.id`. Required.
    pub group_id: String,
    /// `group.instance.id`: makes the member static (KIP-345). Default none.
    pub group_instance_id: Option<String>,
    /// `session.timeout.ms` (classic): the coordinator evicts a member that
    /// does not heartbeat for this long. Default 45 s.
    pub session_timeout: Duration,
    /// `heartbeat.interval.ms` (classic; under KIP-848 the broker sets it).
    /// Default 3 s.
    pub heartbeat_interval: Duration,
    /// `max.poll.interval.ms`: a member whose application does not poll for
    /// this long leaves the group; also the rebalance timeout. Default 5 min.
    pub max_poll_interval: Duration,
    /// `partition.assignment.strategy` (classic), in preference order.
    /// Default `range, cooperative-sticky` as in the Java 4.x client.
    pub assignment_strategies: Vec<AssignmentStrategy>,
    /// `group.protocol`. Default classic.
    pub protocol: GroupProtocol,
    /// `group.remote.assignor` (KIP-848): `uniform` or `range`; `None` lets
    /// the broker choose. Default none.
    pub remote_assignor: Option<String>,
}

impl GroupConfig {
    /// A config for `group_id` with every default set.
    pub fn new(group_id: impl Into<String>) -> GroupConfig {
        GroupConfig {
            group_id: group_id.into(),
            group_instance_id: None,
            session_timeout: Duration::from_millis(45_000),
            heartbeat_interval: Duration::from_millis(3_000),
            max_poll_interval: Duration::from_millis(300_000),
            assignment_strategies: vec![
                AssignmentStrategy::Range,
                AssignmentStrategy::CooperativeSticky,
            ],
            protocol: GroupProtocol::Classic,
            remote_assignor: None,
        }
    }

    /// The rebalance timeout: how long the coordinator waits for members to
    /// rejoin (the Java client uses `max.poll.interval.ms`).
    pub fn rebalance_timeout(&self) -> Duration {
        self.max_poll_interval
    }

    /// Whether rebalances are incremental (KIP-429): true only when every
    /// configured assignor is cooperative, as in the Java client.
    pub fn is_cooperative(&self) -> bool {
        !self.assignment_strategies.is_empty()
            && self
                .assignment_strategies
                .iter()
                .all(|s| s.is_cooperative())
    }

    /// Sets one property by its Kafka name; `None` for keys this config does
    /// not own, so that the consumer config can chain to it.
    pub fn try_set(&mut self, key: &str, value: &str) -> Option<Result<()>> {
        let r = match key {
            "group.id" => {
                self.group_id = value.trim().to_owned();
                Ok(())
            }
            "group.instance.id" => {
                let v = value.trim();
                self.group_instance_id = (!v.is_empty()).then(|| v.to_owned());
                Ok(())
            }
            "session.timeout.ms" => parse_ms(key, value).map(|d| self.session_timeout = d),
            "heartbeat.interval.ms" => parse_ms(key, value).map(|d| self.heartbeat_interval = d),
            "max.poll.interval.ms" => parse_ms(key, value).map(|d| self.max_poll_interval = d),
            "partition.assignment.strategy" => split_list(value)
                .iter()
                .map(|n| {
                    AssignmentStrategy::from_name(n).ok_or_else(|| {
                        Error::config(
                            key,
                            format!(
                                "unknown assignor `{n}` (range, roundrobin, cooperative-sticky)"
                            ),
                        )
                    })
                })
                .collect::<Result<Vec<_>>>()
                .map(|s| self.assignment_strategies = s),
            "group.protocol" => match value.trim().to_ascii_lowercase().as_str() {
                "classic" => {
                    self.protocol = GroupProtocol::Classic;
                    Ok(())
                }
                "consumer" => {
                    self.protocol = GroupProtocol::Consumer;
                    Ok(())
                }
                other => Err(Error::config(
                    key,
                    format!("`{other}` is not classic or consumer"),
                )),
            },
            "group.remote.assignor" => {
                let v = value.trim();
                self.remote_assignor = (!v.is_empty()).then(|| v.to_owned());
                Ok(())
            }
            _ => return None,
        };
        Some(r)
    }

    /// Checks the settings, naming the offending key.
    pub fn validate(&self) -> Result<()> {
        if self.group_id.is_empty() {
            return Err(Error::config("group.id", "required for group membership"));
        }
        if self.group_instance_id.as_deref() == Some("") {
            return Err(Error::config("group.instance.id", "must not be empty"));
        }
        for (key, d) in [
            ("session.timeout.ms", self.session_timeout),
            ("heartbeat.interval.ms", self.heartbeat_interval),
            ("max.poll.interval.ms", self.max_poll_interval),
        ] {
            if d.is_zero() {
                return Err(Error::config(key, "must be greater than 0"));
            }
            if d.as_millis() > i32::MAX as u128 {
                return Err(Error::config(key, "must fit in 32 bits of milliseconds"));
            }
        }
        if self.protocol == GroupProtocol::Classic {
            if self.heartbeat_interval >= self.session_timeout {
                return Err(Error::config(
                    "heartbeat.interval.ms",
                    "must be lower than session.timeout.ms",
                ));
            }
            if self.assignment_strategies.is_empty() {
                return Err(Error::config(
                    "partition.assignment.strategy",
                    "at least one assignor is required",
                ));
            }
        }
        if let Some(a) = &self.remote_assignor {
            if self.protocol != GroupProtocol::Consumer {
                return Err(Error::config(
                    "group.remote.assignor",
                    "only applies to group.protocol=consumer",
                ));
            }
            if a != "uniform" && a != "range" {
                return Err(Error::config(
                    "group.remote.assignor",
                    format!("`{a}` is not uniform or range"),
                ));
            }
        }
        Ok(())
    }
}

/// Milliseconds as the i32 the wire carries (validated to fit).
pub(crate) fn wire_ms(d: Duration) -> i32 {
    i32::try_from(d.as_millis()).unwrap_or(i32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_match_java_4x() {
        let c = GroupConfig::new("g");
        assert_eq!(c.session_timeout, Duration::from_secs(45));
        assert_eq!(c.heartbeat_interval, Duration::from_secs(3));
        assert_eq!(c.rebalance_timeout(), Duration::from_secs(300));
        assert_eq!(
            c.assignment_strategies,
            vec![
                AssignmentStrategy::Range,
                AssignmentStrategy::CooperativeSticky
            ]
        );
        assert!(!c.is_cooperative());
        assert_eq!(c.protocol, GroupProtocol::Classic);
        c.validate().unwrap();
    }

    #[test]
    fn properties_and_validation_name_keys() {
        let mut c = GroupConfig::new("");
        assert!(c.try_set("linger.ms", "1").is_none());
        c.try_set("group.id", "orders").unwrap().unwrap();
        c.try_set(
            "partition.assignment.strategy",
            "org.apache.kafka.clients.consumer.CooperativeStickyAssignor",
        )
        .unwrap()
        .unwrap();
        assert!(c.is_cooperative());
        c.try_set("group.protocol", "CONSUMER").unwrap().unwrap();
        c.try_set("group.remote.assignor", "uniform")
            .unwrap()
            .unwrap();
        c.validate().unwrap();
        let e = c.try_set("group.protocol", "eager").unwrap().unwrap_err();
        assert!(e.to_string().contains("group.protocol"));
        let e = c
            .try_set("partition.assignment.strategy", "sticky-ish")
            .unwrap()
            .unwrap_err();
        assert!(e.to_string().contains("partition.assignment.strategy"));
        let mut c = GroupConfig::new("g");
        c.try_set("heartbeat.interval.ms", "50000")
            .unwrap()
            .unwrap();
        assert!(c
            .validate()
            .unwrap_err()
            .to_string()
            .contains("heartbeat.interval.ms"));
        assert!(GroupConfig::new("")
            .validate()
            .unwrap_err()
            .to_string()
            .contains("group.id"));
    }
}
