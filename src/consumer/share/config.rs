//! Share consumer settings with the Java `KafkaShareConsumer`'s names
//! (<https://kafka.apache.org/documentation/#consumerconfigs>); client
//! settings (`bootstrap.servers`, `request.timeout.ms`, ...) chain to
//! [`ClientConfigBuilder::try_set`].

use std::time::Duration;

use crate::config::{parse_bool, parse_ms, parse_num, ClientConfig, ClientConfigBuilder};
use crate::error::{Error, Result};

/// `share.acknowledgement.mode`: how records are acknowledged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum AcknowledgementMode {
    /// Every record a `poll` returned is accepted by the next `poll`,
    /// `commit_sync`/`commit_async` or `close` (the default).
    #[default]
    Implicit,
    /// The application acknowledges each record with
    /// [`acknowledge`](super::ShareConsumer::acknowledge) before the next
    /// `poll`.
    Explicit,
}

fn parse_mode(value: &str) -> Result<AcknowledgementMode> {
    match value.to_ascii_lowercase().as_str() {
        "implicit" => Ok(AcknowledgementMode::Implicit),
        "explicit" => Ok(AcknowledgementMode::Explicit),
        _ => Err(Error::config(
            "share.acknowledgement.mode",
            "expected `implicit` or `explicit`",
        )),
    }
}

/// Share consumer configuration. Build with [`ShareConsumerConfig::builder`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShareConsumerConfig {
    /// Settings shared by every client.
    pub client: ClientConfig,
    /// `group.id`: the share group. Required.
    pub group_id: String,
    /// `share.acknowledgement.mode`. Default `implicit`.
    pub acknowledgement_mode: AcknowledgementMode,
    /// `max.poll.records`: most records one ShareFetch asks for and one
    /// `poll` returns. Default 500.
    pub max_poll_records: usize,
    /// `fetch.min.bytes`: the broker waits for this much data. Default 1.
    pub fetch_min_bytes: i32,
    /// `fetch.max.bytes`: bound on one ShareFetch response. Default 50 MiB.
    pub fetch_max_bytes: i32,
    /// `fetch.max.wait.ms`: how long the broker may hold a ShareFetch
    /// (bounded further by the `poll` timeout). Default 500 ms.
    pub fetch_max_wait: Duration,
    /// `check.crcs`: verify each batch's CRC-32C. Default true.
    pub check_crcs: bool,
    /// `purekafka.max.decompressed.bytes`: most bytes one partition's
    /// records may inflate to. Default 64 MiB.
    pub max_decompressed_size: usize,
    /// `client.rack`: sent with the heartbeat. Default none.
    pub client_rack: Option<String>,
}

impl Default for ShareConsumerConfig {
    fn default() -> Self {
        ShareConsumerConfig {
            client: ClientConfig::default(),
            group_id: String::new(),
            acknowledgement_mode: AcknowledgementMode::Implicit,
            max_poll_records: 500,
            fetch_min_bytes: 1,
            fetch_max_bytes: 52_428_800,
            fetch_max_wait: Duration::from_millis(500),
            check_crcs: true,
            max_decompressed_size: 64 << 20,
            client_rack: None,
        }
    }
}

impl ShareConsumerConfig {
    /// A builder with every default set.
    pub fn builder() -> ShareConsumerConfigBuilder {
        ShareConsumerConfigBuilder {
            client: ClientConfig::builder(),
            config: ShareConsumerConfig::default(),
        }
    }

    /// Builds from Kafka property names; unknown keys are errors naming
    /// the key.
    pub fn from_properties<K, V>(
        props: impl IntoIterator<Item = (K, V)>,
    ) -> Result<ShareConsumerConfig>
    where
        K: AsRef<str>,
        V: AsRef<str>,
    {
        let mut b = ShareConsumerConfig::builder();
        for (k, v) in props {
            b = b.set(k.as_ref(), v.as_ref())?;
        }
        b.build()
    }
}

/// Builder for [`ShareConsumerConfig`]; [`build`](Self::build) validates.
#[derive(Debug, Clone)]
pub struct ShareConsumerConfigBuilder {
    client: ClientConfigBuilder,
    config: ShareConsumerConfig,
}

impl ShareConsumerConfigBuilder {
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

    /// `group.id`.
    pub fn group_id(mut self, id: impl Into<String>) -> Self {
        self.config.group_id = id.into();
        self
    }

    /// `share.acknowledgement.mode`.
    pub fn acknowledgement_mode(mut self, mode: AcknowledgementMode) -> Self {
        self.config.acknowledgement_mode = mode;
        self
    }

    /// `max.poll.records`.
    pub fn max_poll_records(mut self, n: usize) -> Self {
        self.config.max_poll_records = n;
        self
    }

    /// `fetch.max.wait.ms`.
    pub fn fetch_max_wait(mut self, d: Duration) -> Self {
        self.config.fetch_max_wait = d;
        self
    }

    /// Sets a client or share consumer property by its Kafka name. Unknown
    /// keys and malformed values are errors naming the key.
    pub fn set(mut self, key: &str, value: &str) -> Result<Self> {
        let c = &mut self.config;
        let r = match key {
            "group.id" => {
                c.group_id = value.to_owned();
                Ok(())
            }
            "share.acknowledgement.mode" => parse_mode(value).map(|m| c.acknowledgement_mode = m),
            "max.poll.records" => parse_num(key, value).map(|n| c.max_poll_records = n),
            "fetch.min.bytes" => parse_num(key, value).map(|n| c.fetch_min_bytes = n),
            "fetch.max.bytes" => parse_num(key, value).map(|n| c.fetch_max_bytes = n),
            "fetch.max.wait.ms" => parse_ms(key, value).map(|d| c.fetch_max_wait = d),
            "check.crcs" => parse_bool(key, value).map(|b| c.check_crcs = b),
            "purekafka.max.decompressed.bytes" => {
                parse_num(key, value).map(|n| c.max_decompressed_size = n)
            }
            "client.rack" => {
                c.client_rack = Some(value.to_owned());
                Ok(())
            }
            _ => {
                let client = self.client.try_set(key, value);
                return match client {
                    Some(r) => r.map(|client| ShareConsumerConfigBuilder {
                        client,
                        config: self.config,
                    }),
                    None => Err(Error::config(key, "unknown share consumer property")),
                };
            }
        };
        r.map(|()| self)
    }

    /// Validates and returns the config.
    pub fn build(self) -> Result<ShareConsumerConfig> {
        let mut c = self.config;
        c.client = self.client.build()?;
        if c.group_id.is_empty() {
            return Err(Error::config(
                "group.id",
                "a share consumer needs a share group id",
            ));
        }
        if c.max_poll_records == 0 || i32::try_from(c.max_poll_records).is_err() {
            return Err(Error::config(
                "max.poll.records",
                "must be between 1 and 2^31-1",
            ));
        }
        if c.fetch_min_bytes < 0 {
            return Err(Error::config("fetch.min.bytes", "must not be negative"));
        }
        if c.fetch_max_bytes < 1 {
            return Err(Error::config("fetch.max.bytes", "must be at least 1"));
        }
        if i32::try_from(c.fetch_max_wait.as_millis()).is_err() {
            return Err(Error::config("fetch.max.wait.ms", "must fit in an i32"));
        }
        if c.max_decompressed_size < 1024 {
            return Err(Error::config(
                "purekafka.max.decompressed.bytes",
                "must be at least 1024",
            ));
        }
        Ok(c)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn java_property_names_set_the_share_settings() {
        let c = ShareConsumerConfig::from_properties([
            ("bootstrap.servers", "h:9092"),
            ("group.id", "g"),
            ("share.acknowledgement.mode", "explicit"),
            ("max.poll.records", "10"),
            ("request.timeout.ms", "1234"),
        ])
        .unwrap();
        assert_eq!(c.group_id, "g");
        assert_eq!(c.acknowledgement_mode, AcknowledgementMode::Explicit);
        assert_eq!(c.max_poll_records, 10);
        assert_eq!(c.client.request_timeout, Duration::from_millis(1234));
    }

    #[test]
    fn bad_settings_name_their_key() {
        let err = |props: &[(&str, &str)]| {
            ShareConsumerConfig::from_properties(props.iter().copied())
                .unwrap_err()
                .to_string()
        };
        assert!(err(&[("bootstrap.servers", "h:1")]).contains("group.id"));
        assert!(err(&[("share.acknowledgement.mode", "sometimes")])
            .contains("share.acknowledgement.mode"));
        assert!(err(&[
            ("bootstrap.servers", "h:1"),
            ("group.id", "g"),
            ("max.poll.records", "0")
        ])
        .contains("max.poll.records"));
        assert!(err(&[("no.such.key", "1")]).contains("no.such.key"));
    }
}
