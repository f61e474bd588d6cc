//! Consumer settings with the Java client's names and Kafka 4.x defaults
//! (<https://kafka.apache.org/documentation/#consumerconfigs>).
//!
//! Group settings (`group.instance.id`, `session.timeout.ms`,
//! `partition.assignment.strategy`, `group.protocol`, ...) are chained to
//! [`GroupConfig::try_set`] and client settings (`bootstrap.servers`,
//! `request.timeout.ms`, ...) to [`ClientConfigBuilder::try_set`], so one
//! property list configures all three.

use std::time::Duration;

use super::group::{AssignmentStrategy, GroupConfig, GroupProtocol};
use crate::config::{parse_bool, parse_ms, parse_num, ClientConfig, ClientConfigBuilder};
use crate::error::{Error, Result};

/// `auto.offset.reset`: where to start when a partition has no position or
/// its position is outside the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
#[non_exhaustive]
pub enum AutoOffsetReset {
    /// Start at the log start offset.
    Earliest,
    /// Start at the log end offset (the default).
    #[default]
    Latest,
    /// Do not reset: `poll` fails with [`Error::NoOffset`] or
    /// [`Error::OffsetOutOfRange`] naming the partition.
    None,
}

/// `isolation.level`: which records a fetch may return.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum IsolationLevel {
    /// Everything up to the high watermark, aborted transactions included
    /// (the default).
    #[default]
    ReadUncommitted,
    /// Only up to the last stable offset, without aborted transactions (KIP-98).
    ReadCommitted,
}

impl IsolationLevel {
    /// The wire value (0 or 1).
    pub fn code(self) -> i8 {
        match self {
            IsolationLevel::ReadUncommitted => 0,
            IsolationLevel::ReadCommitted => 1,
        }
    }
}

/// Consumer configuration. Build with [`ConsumerConfig::builder`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsumerConfig {
    /// Settings shared by every client.
    pub client: ClientConfig,
    /// `fetch.min.bytes`: the broker waits for this much data. Default 1.
    pub fetch_min_bytes: i32,
    /// `fetch.max.wait.ms`: how long the broker may hold a fetch. Default 500 ms.
    pub fetch_max_wait: Duration,
    /// `fetch.max.bytes`: bound on one fetch response. Default 50 MiB.
    pub fetch_max_bytes: i32,
    /// `max.partition.fetch.bytes`: bound per partition in one fetch
    /// response, and the buffered-bytes bound above which a partition is not
    /// fetched. Default 1 MiB.
    pub max_partition_fetch_bytes: i32,
    /// `max.poll.records`: most records one `poll` returns. Default 500.
    pub max_poll_records: usize,
    /// `auto.offset.reset`. Default `latest`.
    pub auto_offset_reset: AutoOffsetReset,
    /// `check.crcs`: verify each batch's CRC-32C. Default true.
    pub check_crcs: bool,
    /// `purekafka.max.decompressed.bytes`: most bytes one partition's
    /// fetched records may inflate to; a larger (or hostile) compressed
    /// batch is a [`RecordDecode`](crate::Error::RecordDecode) error, not
    /// an allocation. Must exceed the largest uncompressed batch producers
    /// write. Default 64 MiB.
    pub max_decompressed_size: usize,
    /// `isolation.level`. Default `read_uncommitted`.
    pub isolation_level: IsolationLevel,
    /// `client.rack`: sent in fetches (KIP-392). Default none.
    pub client_rack: Option<String>,
    /// `group.id`: needed by [`subscribe`](super::Consumer::subscribe) and
    /// by commits. Default none.
    pub group_id: Option<String>,
    /// `enable.auto.commit`: commit the positions of records already
    /// returned by `poll` every `auto.commit.interval.ms` (and on revoke
    /// and close). Only with a `group.id`. Default true.
    pub enable_auto_commit: bool,
    /// `auto.commit.interval.ms`. Default 5 s.
    pub auto_commit_interval: Duration,
    /// Membership settings (`group.instance.id`, `session.timeout.ms`,
    /// `heartbeat.interval.ms`, `max.poll.interval.ms`,
    /// `partition.assignment.strategy`, `group.protocol`,
    /// `group.remote.assignor`); `build` copies `group_id` into it.
    pub group: GroupConfig,
}

impl Default for ConsumerConfig {
    fn default() -> Self {
        ConsumerConfig {
            client: ClientConfig::default(),
            fetch_min_bytes: 1,
            fetch_max_wait: Duration::from_millis(500),
            fetch_max_bytes: 52_428_800,
            max_partition_fetch_bytes: 1_048_576,
            max_poll_records: 500,
            auto_offset_reset: AutoOffsetReset::Latest,
            check_crcs: true,
            max_decompressed_size: 64 << 20,
            isolation_level: IsolationLevel::ReadUncommitted,
            client_rack: None,
            group_id: None,
            enable_auto_commit: true,
            auto_commit_interval: Duration::from_millis(5_000),
            group: GroupConfig::new(""),
        }
    }
}

impl ConsumerConfig {
    /// A builder with every default set.
    pub fn builder() -> ConsumerConfigBuilder {
        ConsumerConfigBuilder {
            client: ClientConfig::builder(),
            config: ConsumerConfig::default(),
        }
    }

    /// Builds from Kafka property names (client and consumer keys); unknown
    /// keys are errors naming the key.
    pub fn from_properties<K, V>(props: impl IntoIterator<Item = (K, V)>) -> Result<ConsumerConfig>
    where
        K: AsRef<str>,
        V: AsRef<str>,
    {
        let mut b = ConsumerConfig::builder();
        for (k, v) in props {
            b = b.set(k.as_ref(), v.as_ref())?;
        }
        b.build()
    }
}

/// Builder for [`ConsumerConfig`]; [`build`](Self::build) validates.
#[derive(Debug, Clone)]
pub struct ConsumerConfigBuilder {
    client: ClientConfigBuilder,
    config: ConsumerConfig,
}

impl ConsumerConfigBuilder {
    /// `bootstrap.servers`.
    pub fn bootstrap_servers(mut self, servers: impl AsRef<str>) -> Self {
        self.client = self.client.bootstrap_servers(servers);
        self
    }

    /// Replaces the client settings with `f(builder)`.
    pub fn client(mut self, f: impl FnOnce(ClientConfigBuilder) -> ClientConfigBuilder) -> Self {
        self.client = f(self.client);
        self
    }

    /// `fetch.min.bytes`.
    pub fn fetch_min_bytes(mut self, n: i32) -> Self {
        self.config.fetch_min_bytes = n;
        self
    }

    /// `fetch.max.wait.ms`.
    pub fn fetch_max_wait(mut self, d: Duration) -> Self {
        self.config.fetch_max_wait = d;
        self
    }

    /// `fetch.max.bytes`.
    pub fn fetch_max_bytes(mut self, n: i32) -> Self {
        self.config.fetch_max_bytes = n;
        self
    }

    /// `max.partition.fetch.bytes`.
    pub fn max_partition_fetch_bytes(mut self, n: i32) -> Self {
        self.config.max_partition_fetch_bytes = n;
        self
    }

    /// `max.poll.records`.
    pub fn max_poll_records(mut self, n: usize) -> Self {
        self.config.max_poll_records = n;
        self
    }

    /// `auto.offset.reset`.
    pub fn auto_offset_reset(mut self, r: AutoOffsetReset) -> Self {
        self.config.auto_offset_reset = r;
        self
    }

    /// `check.crcs`.
    pub fn check_crcs(mut self, check: bool) -> Self {
        self.config.check_crcs = check;
        self
    }

    /// `purekafka.max.decompressed.bytes`.
    pub fn max_decompressed_size(mut self, bytes: usize) -> Self {
        self.config.max_decompressed_size = bytes;
        self
    }

    /// `isolation.level`.
    pub fn isolation_level(mut self, level: IsolationLevel) -> Self {
        self.config.isolation_level = level;
        self
    }

    /// `client.rack`.
    pub fn client_rack(mut self, rack: impl Into<String>) -> Self {
        self.config.client_rack = Some(rack.into());
        self
    }

    /// `group.id`.
    pub fn group_id(mut self, id: impl Into<String>) -> Self {
        self.config.group_id = Some(id.into());
        self
    }

    /// `enable.auto.commit`.
    pub fn enable_auto_commit(mut self, enable: bool) -> Self {
        self.config.enable_auto_commit = enable;
        self
    }

    /// `auto.commit.interval.ms`.
    pub fn auto_commit_interval(mut self, d: Duration) -> Self {
        self.config.auto_commit_interval = d;
        self
    }

    /// `group.instance.id`: a static member (KIP-345).
    pub fn group_instance_id(mut self, id: impl Into<String>) -> Self {
        self.config.group.group_instance_id = Some(id.into());
        self
    }

    /// `group.protocol`: classic or consumer (KIP-848).
    pub fn group_protocol(mut self, protocol: GroupProtocol) -> Self {
        self.config.group.protocol = protocol;
        self
    }

    /// `partition.assignment.strategy` (classic protocol), in preference order.
    pub fn assignment_strategies(mut self, strategies: Vec<AssignmentStrategy>) -> Self {
        self.config.group.assignment_strategies = strategies;
        self
    }

    /// `group.remote.assignor` (KIP-848): `uniform` or `range`.
    pub fn remote_assignor(mut self, assignor: impl Into<String>) -> Self {
        self.config.group.remote_assignor = Some(assignor.into());
        self
    }

    /// `session.timeout.ms` (classic protocol).
    pub fn session_timeout(mut self, d: Duration) -> Self {
        self.config.group.session_timeout = d;
        self
    }

    /// `heartbeat.interval.ms` (classic protocol).
    pub fn heartbeat_interval(mut self, d: Duration) -> Self {
        self.config.group.heartbeat_interval = d;
        self
    }

    /// `max.poll.interval.ms`.
    pub fn max_poll_interval(mut self, d: Duration) -> Self {
        self.config.group.max_poll_interval = d;
        self
    }

    /// Sets a client or consumer property by its Kafka name. Unknown keys
    /// and malformed values are errors naming the key.
    pub fn set(self, key: &str, value: &str) -> Result<Self> {
        match self.try_set(key, value) {
            Some(r) => r,
            None => Err(Error::config(key, "unknown property")),
        }
    }

    /// Like [`set`](Self::set) but `None` for keys neither this config,
    /// [`GroupConfig`] nor [`ClientConfig`] owns, so a wrapping config can
    /// chain to it.
    pub fn try_set(mut self, key: &str, value: &str) -> Option<Result<Self>> {
        let c = &mut self.config;
        let r = match key {
            "fetch.min.bytes" => parse_num(key, value).map(|n| c.fetch_min_bytes = n),
            "fetch.max.wait.ms" => parse_ms(key, value).map(|d| c.fetch_max_wait = d),
            "fetch.max.bytes" => parse_num(key, value).map(|n| c.fetch_max_bytes = n),
            "max.partition.fetch.bytes" => {
                parse_num(key, value).map(|n| c.max_partition_fetch_bytes = n)
            }
            "max.poll.records" => parse_num(key, value).map(|n| c.max_poll_records = n),
            "auto.offset.reset" => parse_reset(value).map(|r| c.auto_offset_reset = r),
            "check.crcs" => parse_bool(key, value).map(|b| c.check_crcs = b),
            "purekafka.max.decompressed.bytes" => {
                parse_num(key, value).map(|n| c.max_decompressed_size = n)
            }
            "isolation.level" => parse_isolation(value).map(|l| c.isolation_level = l),
            "client.rack" => {
                c.client_rack = Some(value.to_owned()).filter(|r| !r.is_empty());
                Ok(())
            }
            "group.id" => {
                c.group_id = Some(value.to_owned()).filter(|g| !g.is_empty());
                Ok(())
            }
            "enable.auto.commit" => parse_bool(key, value).map(|b| c.enable_auto_commit = b),
            "auto.commit.interval.ms" => parse_ms(key, value).map(|d| c.auto_commit_interval = d),
            _ => {
                if let Some(r) = c.group.try_set(key, value) {
                    return Some(r.map(|()| self));
                }
                let ConsumerConfigBuilder { client, config } = self;
                return client
                    .try_set(key, value)
                    .map(|r| r.map(|client| ConsumerConfigBuilder { client, config }));
            }
        };
        Some(r.map(|()| self))
    }

    /// Validates and returns the config.
    pub fn build(self) -> Result<ConsumerConfig> {
        let mut c = self.config;
        c.client = self.client.build()?;
        if c.fetch_min_bytes < 0 {
            return Err(Error::config("fetch.min.bytes", "must not be negative"));
        }
        if c.fetch_max_bytes < 1 {
            return Err(Error::config("fetch.max.bytes", "must be at least 1"));
        }
        if c.max_partition_fetch_bytes < 1 {
            return Err(Error::config(
                "max.partition.fetch.bytes",
                "must be at least 1",
            ));
        }
        if c.max_decompressed_size < 1024 {
            return Err(Error::config(
                "purekafka.max.decompressed.bytes",
                "must be at least 1024",
            ));
        }
        if c.max_poll_records == 0 {
            return Err(Error::config("max.poll.records", "must be at least 1"));
        }
        if i32::try_from(c.fetch_max_wait.as_millis()).is_err() {
            return Err(Error::config("fetch.max.wait.ms", "must fit in an i32"));
        }
        c.group.group_id = c.group_id.clone().unwrap_or_default();
        if c.group_id.is_some() {
            c.group.validate()?;
        }
        if c.enable_auto_commit && c.auto_commit_interval.is_zero() {
            return Err(Error::config(
                "auto.commit.interval.ms",
                "must be greater than 0",
            ));
        }
        // A response that cannot hold one maximal partition would be refused.
        let limit = u64::try_from(c.client.max_response_size).unwrap_or(u64::MAX);
        if u64::try_from(c.fetch_max_bytes).unwrap_or(0) > limit {
            return Err(Error::config(
                "fetch.max.bytes",
                format!("must not exceed purekafka.max.response.bytes ({limit})"),
            ));
        }
        Ok(c)
    }
}

fn parse_reset(value: &str) -> Result<AutoOffsetReset> {
    match value.trim().to_ascii_lowercase().as_str() {
        "earliest" => Ok(AutoOffsetReset::Earliest),
        "latest" => Ok(AutoOffsetReset::Latest),
        "none" => Ok(AutoOffsetReset::None),
        _ => Err(Error::config(
            "auto.offset.reset",
            format!("`{value}` is not earliest, latest or none"),
        )),
    }
}

fn parse_isolation(value: &str) -> Result<IsolationLevel> {
    match value.trim().to_ascii_lowercase().as_str() {
        "read_uncommitted" => Ok(IsolationLevel::ReadUncommitted),
        "read_committed" => Ok(IsolationLevel::ReadCommitted),
        _ => Err(Error::config(
            "isolation.level",
            format!("`{value}` is not read_uncommitted or read_committed"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_match_java_client() {
        let c = ConsumerConfig::builder()
            .bootstrap_servers("h:1")
            .build()
            .unwrap();
        assert_eq!(c.fetch_min_bytes, 1);
        assert_eq!(c.fetch_max_wait, Duration::from_millis(500));
        assert_eq!(c.fetch_max_bytes, 52_428_800);
        assert_eq!(c.max_partition_fetch_bytes, 1_048_576);
        assert_eq!(c.max_poll_records, 500);
        assert_eq!(c.auto_offset_reset, AutoOffsetReset::Latest);
        assert!(c.check_crcs);
        assert_eq!(c.max_decompressed_size, 64 << 20);
        assert_eq!(c.isolation_level, IsolationLevel::ReadUncommitted);
        assert!(c.enable_auto_commit);
        assert_eq!(c.auto_commit_interval, Duration::from_secs(5));
    }

    #[test]
    fn properties_chain_to_client_keys() {
        let c = ConsumerConfig::from_properties([
            ("bootstrap.servers", "a:1"),
            ("request.timeout.ms", "1234"),
            ("auto.offset.reset", "earliest"),
            ("isolation.level", "read_committed"),
            ("max.poll.records", "7"),
            ("group.id", "g"),
            ("client.rack", "r1"),
            ("group.instance.id", "i1"),
            ("session.timeout.ms", "10000"),
            ("partition.assignment.strategy", "roundrobin"),
            ("group.protocol", "classic"),
            ("purekafka.max.decompressed.bytes", "4096"),
        ])
        .unwrap();
        assert_eq!(c.max_decompressed_size, 4096);
        let e = ConsumerConfig::from_properties([
            ("bootstrap.servers", "a:1"),
            ("purekafka.max.decompressed.bytes", "10"),
        ])
        .unwrap_err();
        assert!(
            e.to_string().contains("purekafka.max.decompressed.bytes"),
            "{e}"
        );
        assert_eq!(c.group.group_id, "g");
        assert_eq!(c.group.group_instance_id.as_deref(), Some("i1"));
        assert_eq!(c.group.session_timeout, Duration::from_secs(10));
        assert_eq!(
            c.group.assignment_strategies,
            vec![AssignmentStrategy::RoundRobin]
        );
        let e = ConsumerConfig::from_properties([
            ("bootstrap.servers", "a:1"),
            ("group.id", "g"),
            ("heartbeat.interval.ms", "60000"),
        ])
        .unwrap_err();
        assert!(e.to_string().contains("heartbeat.interval.ms"), "{e}");
        assert_eq!(c.client.request_timeout, Duration::from_millis(1234));
        assert_eq!(c.auto_offset_reset, AutoOffsetReset::Earliest);
        assert_eq!(c.isolation_level, IsolationLevel::ReadCommitted);
        assert_eq!(c.max_poll_records, 7);
        assert_eq!(c.group_id.as_deref(), Some("g"));
        assert_eq!(c.client_rack.as_deref(), Some("r1"));
    }

    #[test]
    fn errors_name_the_key() {
        let e = ConsumerConfig::from_properties([("bootstrap.servers", "a:1"), ("fetch.mni", "1")])
            .unwrap_err();
        assert_eq!(e.to_string(), "config `fetch.mni`: unknown property");
        let e = ConsumerConfig::from_properties([("auto.offset.reset", "smallest")]).unwrap_err();
        assert!(e.to_string().contains("auto.offset.reset"), "{e}");
        let e = ConsumerConfig::from_properties([
            ("bootstrap.servers", "a:1"),
            ("max.poll.records", "0"),
        ])
        .unwrap_err();
        assert!(e.to_string().contains("max.poll.records"), "{e}");
        let e = ConsumerConfig::builder().build().unwrap_err();
        assert!(e.to_string().contains("bootstrap.servers"), "{e}");
    }
}
