//! Producer settings, with the Java client's property names and Kafka 4.x
//! defaults (<https://kafka.apache.org/documentation/#producerconfigs>).

use std::time::Duration;

use crate::config::{parse_bool, parse_ms, parse_num, ClientConfig, ClientConfigBuilder};
use crate::error::{Error, Result};
use crate::protocol::compression::Compression;

/// The least `metadata.max.idle.ms` accepted, as by the Java client.
const METADATA_MAX_IDLE_MIN: Duration = Duration::from_millis(5_000);

/// The default `batch.max.size` with zstd: how far a backlogged
/// partition's zstd batch grows (KIP-782). Measured with 100 B records at
/// acks=all (docs/benchmarks.md, "Peers (issue #21)"): against 1 MiB, on a
/// quiet machine, as fast on one partition at less CPU per record and 1.14x
/// on six, with a fifth to a third of the p99; batches grown toward 1 MiB
/// cost more CPU in the zstd encoder and the broker, and waited longer.
/// Caps of 256 KiB and 64 KiB were slower than 128 KiB.
pub const ZSTD_BATCH_MAX_SIZE: usize = 128 << 10;

/// `acks`: how many replicas must have a record before it counts as sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Acks {
    /// `acks=0`: fire and forget; no response, no offsets, no retries of lost data.
    None,
    /// `acks=1`: the leader has written it.
    Leader,
    /// `acks=all` (`-1`): every in-sync replica has it. The default.
    All,
}

impl Acks {
    /// The wire value of the Produce request's `acks` field.
    pub fn wire(self) -> i16 {
        match self {
            Acks::None => 0,
            Acks::Leader => 1,
            Acks::All => -1,
        }
    }

    fn parse(key: &str, value: &str) -> Result<Acks> {
        match value.trim() {
            "0" => Ok(Acks::None),
            "1" => Ok(Acks::Leader),
            "all" | "-1" => Ok(Acks::All),
            other => Err(Error::config(
                key,
                format!("{other:?}: expected 0, 1, all or -1"),
            )),
        }
    }
}

/// Settings of a [`Producer`](super::Producer).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProducerConfig {
    /// Connection and metadata settings shared with other clients.
    pub client: ClientConfig,
    /// `acks`. Default `all`.
    pub acks: Acks,
    /// `enable.idempotence`. Default true; turned off implicitly (as in the
    /// Java client) when `acks` or `max.in.flight.requests.per.connection`
    /// conflict and idempotence was not set explicitly.
    pub enable_idempotence: bool,
    /// `batch.size`: bytes of records at which a partition's batch is ready
    /// to send. Default 16384.
    pub batch_size: usize,
    /// `batch.max.size` (KIP-782): how far a ready batch may keep growing
    /// while its partition cannot send it yet (every request slot busy).
    /// Default 1 MiB (128 KiB with zstd, see [`ZSTD_BATCH_MAX_SIZE`]), or
    /// `batch.size` when that was set and this was not (a
    /// Java user's `batch.size` keeps its meaning: the largest batch). The
    /// effective cap is at least `batch.size` and at most
    /// `max.request.size`.
    pub batch_max_size: usize,
    /// `linger.ms`: how long a batch waits for more records. Default 5 ms
    /// (Kafka 4.0, KIP-1030).
    pub linger: Duration,
    /// `buffer.memory`: bytes of records buffered before `send` waits.
    /// Default 32 MiB.
    pub buffer_memory: usize,
    /// `max.request.size`: largest Produce request, and so the largest record.
    /// Default 1 MiB.
    pub max_request_size: usize,
    /// `max.in.flight.requests.per.connection`. Default 5 (at most 5 with idempotence).
    pub max_in_flight: usize,
    /// `delivery.timeout.ms`: bound from `send` to success or failure of a
    /// record, retries included. Default 120 s.
    pub delivery_timeout: Duration,
    /// `max.block.ms`: how long `send` waits for buffer space or topic
    /// metadata. Default 60 s.
    pub max_block: Duration,
    /// `metadata.max.idle.ms` (KIP-526): a topic no send used for this long
    /// is dropped from the metadata refreshes and its metadata forgotten;
    /// the next send to it waits for its metadata as a first send does.
    /// Default 5 minutes; at least 5 s (as the Java client).
    pub metadata_max_idle: Duration,
    /// `retries`: retry attempts per batch, bounded anyway by
    /// `delivery.timeout.ms`. Default `i32::MAX`.
    pub retries: u32,
    /// `compression.type`. Default none.
    pub compression: Compression,
    /// `compression.gzip.level` / `compression.lz4.level` /
    /// `compression.zstd.level` (KIP-390) for the chosen codec. gzip and
    /// zstd levels change the output; lz4 levels are validated and recorded.
    pub compression_level: Option<i32>,
    /// `partitioner.ignore.keys`: spread keyed records like null-key ones.
    /// Default false.
    pub partitioner_ignore_keys: bool,
    /// `partitioner.adaptive.partitioning.enable` (KIP-794): the sticky
    /// partitioner favours partitions with shorter queues. Default true.
    pub partitioner_adaptive: bool,
    /// `transactional.id` (issue #5: transactions). Default none.
    pub transactional_id: Option<String>,
    /// `transaction.timeout.ms`. Default 60 s.
    pub transaction_timeout: Duration,
    /// `purekafka.transaction.version.max`: highest transaction protocol to
    /// use, 2 (KIP-890, when the broker finalizes it) or 1. Default 2.
    pub transaction_version_max: i16,
    idempotence_explicit: bool,
    batch_size_explicit: bool,
    batch_max_explicit: bool,
    level_gzip: Option<i32>,
    level_lz4: Option<i32>,
    level_zstd: Option<i32>,
}

impl ProducerConfig {
    /// The largest a batch may grow while its partition waits to send:
    /// `batch.max.size`, at least `batch.size`, at most `max.request.size`.
    pub(crate) fn batch_cap(&self) -> usize {
        self.batch_max_size
            .min(self.max_request_size)
            .max(self.batch_size)
    }

    /// A builder with every default set.
    pub fn builder() -> ProducerConfigBuilder {
        ProducerConfigBuilder {
            client: ClientConfig::builder(),
            config: ProducerConfig {
                client: ClientConfig::default(),
                acks: Acks::All,
                enable_idempotence: true,
                batch_size: 16_384,
                batch_max_size: 1 << 20,
                linger: Duration::from_millis(5),
                buffer_memory: 32 * 1024 * 1024,
                max_request_size: 1024 * 1024,
                max_in_flight: 5,
                delivery_timeout: Duration::from_millis(120_000),
                max_block: Duration::from_millis(60_000),
                metadata_max_idle: Duration::from_millis(300_000),
                retries: i32::MAX as u32,
                compression: Compression::None,
                compression_level: None,
                partitioner_ignore_keys: false,
                partitioner_adaptive: true,
                transactional_id: None,
                transaction_timeout: Duration::from_millis(60_000),
                transaction_version_max: 2,
                idempotence_explicit: false,
                batch_size_explicit: false,
                batch_max_explicit: false,
                level_gzip: None,
                level_lz4: None,
                level_zstd: None,
            },
        }
    }

    /// Builds a config from Kafka property names; unknown keys are errors.
    pub fn from_properties<K, V>(props: impl IntoIterator<Item = (K, V)>) -> Result<ProducerConfig>
    where
        K: AsRef<str>,
        V: AsRef<str>,
    {
        let mut b = ProducerConfig::builder();
        for (k, v) in props {
            b = b.set(k.as_ref(), v.as_ref())?;
        }
        b.build()
    }
}

/// Builder for [`ProducerConfig`]; [`build`](Self::build) validates.
#[derive(Debug, Clone)]
pub struct ProducerConfigBuilder {
    client: ClientConfigBuilder,
    config: ProducerConfig,
}

impl ProducerConfigBuilder {
    /// `bootstrap.servers`.
    pub fn bootstrap_servers(mut self, servers: impl AsRef<str>) -> Self {
        self.client = self.client.bootstrap_servers(servers);
        self
    }

    /// Replaces the shared client settings (bootstrap servers, timeouts).
    pub fn client(mut self, client: ClientConfigBuilder) -> Self {
        self.client = client;
        self
    }

    /// `acks`.
    pub fn acks(mut self, acks: Acks) -> Self {
        self.config.acks = acks;
        self
    }

    /// `enable.idempotence`, set explicitly.
    pub fn idempotence(mut self, on: bool) -> Self {
        self.config.enable_idempotence = on;
        self.config.idempotence_explicit = true;
        self
    }

    /// `linger.ms`.
    pub fn linger(mut self, d: Duration) -> Self {
        self.config.linger = d;
        self
    }

    /// `batch.size`.
    pub fn batch_size(mut self, bytes: usize) -> Self {
        self.config.batch_size = bytes;
        self.config.batch_size_explicit = true;
        self
    }

    /// `batch.max.size` (KIP-782).
    pub fn batch_max_size(mut self, bytes: usize) -> Self {
        self.config.batch_max_size = bytes;
        self.config.batch_max_explicit = true;
        self
    }

    /// `compression.type`, with the codec's level (None for its default).
    pub fn compression(mut self, codec: Compression, level: Option<i32>) -> Self {
        self.config.compression = codec;
        match codec {
            Compression::Gzip => self.config.level_gzip = level,
            Compression::Lz4 => self.config.level_lz4 = level,
            Compression::Zstd => self.config.level_zstd = level,
            Compression::None | Compression::Snappy => {}
        }
        self
    }

    /// `transactional.id`: makes this a transactional producer (KIP-98).
    pub fn transactional_id(mut self, id: impl Into<String>) -> Self {
        self.config.transactional_id = Some(id.into()).filter(|v| !v.is_empty());
        self
    }

    /// `delivery.timeout.ms`.
    pub fn delivery_timeout(mut self, d: Duration) -> Self {
        self.config.delivery_timeout = d;
        self
    }

    /// `max.block.ms`.
    pub fn max_block(mut self, d: Duration) -> Self {
        self.config.max_block = d;
        self
    }

    /// `metadata.max.idle.ms` (KIP-526); at least 5 s.
    pub fn metadata_max_idle(mut self, d: Duration) -> Self {
        self.config.metadata_max_idle = d;
        self
    }

    /// `buffer.memory`.
    pub fn buffer_memory(mut self, bytes: usize) -> Self {
        self.config.buffer_memory = bytes;
        self
    }

    /// Sets one property by its Kafka name; shared client keys are accepted
    /// too. Unknown keys and malformed values are errors naming the key.
    pub fn set(mut self, key: &str, value: &str) -> Result<Self> {
        if let Some(r) = self.client.clone().try_set(key, value) {
            self.client = r?;
            return Ok(self);
        }
        let c = &mut self.config;
        match key {
            "acks" => c.acks = Acks::parse(key, value)?,
            "enable.idempotence" => {
                c.enable_idempotence = parse_bool(key, value)?;
                c.idempotence_explicit = true;
            }
            "batch.size" => {
                c.batch_size = parse_num(key, value)?;
                c.batch_size_explicit = true;
            }
            "batch.max.size" => {
                c.batch_max_size = parse_num(key, value)?;
                c.batch_max_explicit = true;
            }
            "linger.ms" => c.linger = parse_ms(key, value)?,
            "buffer.memory" => c.buffer_memory = parse_num(key, value)?,
            "max.request.size" => c.max_request_size = parse_num(key, value)?,
            "max.in.flight.requests.per.connection" => c.max_in_flight = parse_num(key, value)?,
            "delivery.timeout.ms" => c.delivery_timeout = parse_ms(key, value)?,
            "max.block.ms" => c.max_block = parse_ms(key, value)?,
            "metadata.max.idle.ms" => c.metadata_max_idle = parse_ms(key, value)?,
            "retries" => {
                let n: i64 = parse_num(key, value)?;
                c.retries = n.clamp(0, i32::MAX as i64) as u32;
            }
            "compression.type" => {
                c.compression = value.trim().parse().map_err(
                    |e: crate::protocol::compression::UnknownCompression| {
                        Error::config(key, e.to_string())
                    },
                )?
            }
            "compression.gzip.level" => c.level_gzip = Some(parse_num(key, value)?),
            "compression.lz4.level" => c.level_lz4 = Some(parse_num(key, value)?),
            "compression.zstd.level" => c.level_zstd = Some(parse_num(key, value)?),
            "partitioner.ignore.keys" => c.partitioner_ignore_keys = parse_bool(key, value)?,
            "partitioner.adaptive.partitioning.enable" => {
                c.partitioner_adaptive = parse_bool(key, value)?
            }
            "transactional.id" => {
                c.transactional_id = Some(value.to_owned()).filter(|v| !v.is_empty())
            }
            "transaction.timeout.ms" => c.transaction_timeout = parse_ms(key, value)?,
            "purekafka.transaction.version.max" => {
                c.transaction_version_max = match value.trim() {
                    "1" => 1,
                    "2" => 2,
                    other => return Err(Error::config(key, format!("{other:?}: expected 1 or 2"))),
                }
            }
            _ => return Err(Error::config(key, "unknown producer property")),
        }
        Ok(self)
    }

    /// Validates and returns the config.
    pub fn build(self) -> Result<ProducerConfig> {
        let mut c = self.config;
        c.client = self.client.build()?;
        c.compression_level = match c.compression {
            Compression::Gzip => c.level_gzip,
            Compression::Lz4 => c.level_lz4,
            Compression::Zstd => c.level_zstd,
            Compression::None | Compression::Snappy => None,
        };
        if let Some(level) = c.compression_level {
            c.compression.validate_level(Some(level)).map_err(|e| {
                Error::config(
                    match c.compression {
                        Compression::Gzip => "compression.gzip.level",
                        Compression::Lz4 => "compression.lz4.level",
                        _ => "compression.zstd.level",
                    },
                    format!("{level}: {e}"),
                )
            })?;
        }
        // Java: idempotence needs acks=all, retries > 0 and at most 5 in
        // flight. If the user did not ask for it explicitly, a conflicting
        // setting turns it off; if they did, the conflict is an error.
        let conflict = if c.acks != Acks::All {
            Some(("acks", "idempotence requires acks=all"))
        } else if c.max_in_flight > 5 {
            Some((
                "max.in.flight.requests.per.connection",
                "idempotence allows at most 5",
            ))
        } else if c.retries == 0 {
            Some(("retries", "idempotence requires retries > 0"))
        } else {
            None
        };
        if let (true, Some((key, reason))) = (c.enable_idempotence, conflict) {
            if c.idempotence_explicit || c.transactional_id.is_some() {
                return Err(Error::config(
                    key,
                    format!("{reason} (enable.idempotence=true)"),
                ));
            }
            c.enable_idempotence = false;
        }
        if c.transactional_id.is_some() && !c.enable_idempotence {
            return Err(Error::config(
                "enable.idempotence",
                "transactional.id requires idempotence",
            ));
        }
        for (key, n, min) in [
            ("batch.size", c.batch_size, 1),
            ("batch.max.size", c.batch_max_size, 1),
            ("buffer.memory", c.buffer_memory, 1024),
            ("max.request.size", c.max_request_size, 1024),
            ("max.in.flight.requests.per.connection", c.max_in_flight, 1),
        ] {
            if n < min {
                return Err(Error::config(key, format!("must be at least {min}")));
            }
        }
        if c.metadata_max_idle < METADATA_MAX_IDLE_MIN {
            return Err(Error::config(
                "metadata.max.idle.ms",
                format!(
                    "{} ms: must be at least {} ms",
                    c.metadata_max_idle.as_millis(),
                    METADATA_MAX_IDLE_MIN.as_millis()
                ),
            ));
        }
        if c.batch_size_explicit && !c.batch_max_explicit {
            c.batch_max_size = c.batch_size;
        } else if !c.batch_max_explicit && c.compression == Compression::Zstd {
            c.batch_max_size = ZSTD_BATCH_MAX_SIZE;
        }
        if c.max_request_size > i32::MAX as usize {
            return Err(Error::config("max.request.size", "must fit in an i32"));
        }
        // Java: delivery.timeout.ms >= linger.ms + request.timeout.ms.
        if c.delivery_timeout < c.linger + c.client.request_timeout {
            return Err(Error::config(
                "delivery.timeout.ms",
                "must be at least linger.ms + request.timeout.ms",
            ));
        }
        Ok(c)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn base() -> ProducerConfigBuilder {
        ProducerConfig::builder().bootstrap_servers("127.0.0.1:9092")
    }

    #[test]
    fn defaults_follow_the_java_client() {
        let c = base().build().unwrap();
        assert_eq!(c.acks, Acks::All);
        assert!(c.enable_idempotence);
        assert_eq!(c.batch_size, 16_384);
        assert_eq!(c.batch_max_size, 1 << 20);
        assert_eq!(c.linger, Duration::from_millis(5));
        assert_eq!(c.buffer_memory, 33_554_432);
        assert_eq!(c.max_in_flight, 5);
        assert_eq!(c.delivery_timeout, Duration::from_secs(120));
        assert_eq!(c.metadata_max_idle, Duration::from_secs(300));
    }

    #[test]
    fn metadata_max_idle_is_at_least_5_seconds() {
        let c = base()
            .set("metadata.max.idle.ms", "5000")
            .unwrap()
            .build()
            .unwrap();
        assert_eq!(c.metadata_max_idle, Duration::from_secs(5));
        let err = base()
            .metadata_max_idle(Duration::from_millis(4_999))
            .build()
            .unwrap_err();
        assert!(
            err.to_string().contains("metadata.max.idle.ms")
                && err.to_string().contains("at least 5000 ms"),
            "{err}"
        );
        let err = base().set("metadata.max.idle.ms", "-1").unwrap_err();
        assert!(err.to_string().contains("metadata.max.idle.ms"), "{err}");
    }

    /// zstd batches grow to 128 KiB by default; an explicit
    /// `batch.max.size` or `batch.size` is kept as it is.
    #[test]
    fn zstd_batches_grow_to_128_kib_unless_told_otherwise() {
        let zstd = || base().compression(Compression::Zstd, None);
        assert_eq!(zstd().build().unwrap().batch_cap(), 128 << 10);
        let c = base()
            .set("compression.type", "zstd")
            .unwrap()
            .build()
            .unwrap();
        assert_eq!(c.batch_cap(), 128 << 10);
        let c = zstd().batch_max_size(1 << 20).build().unwrap();
        assert_eq!(c.batch_cap(), 1 << 20);
        let c = zstd().batch_size(512).build().unwrap();
        assert_eq!(c.batch_cap(), 512);
        let c = base().compression(Compression::Lz4, None).build().unwrap();
        assert_eq!(c.batch_cap(), 1 << 20);
    }

    /// KIP-782 growth is the default; a `batch.size` set without
    /// `batch.max.size` keeps Java's meaning, the largest batch.
    #[test]
    fn batches_grow_to_batch_max_size_unless_only_batch_size_was_set() {
        let c = base().build().unwrap();
        assert_eq!(c.batch_cap(), 1 << 20);
        let c = base().set("batch.size", "512").unwrap().build().unwrap();
        assert_eq!((c.batch_max_size, c.batch_cap()), (512, 512));
        let c = base()
            .batch_size(512)
            .batch_max_size(64 << 10)
            .build()
            .unwrap();
        assert_eq!(c.batch_cap(), 64 << 10);
        let c = base()
            .set("batch.max.size", "4194304")
            .unwrap()
            .build()
            .unwrap();
        assert_eq!(c.batch_cap(), 1 << 20, "capped by max.request.size");
        let c = base()
            .set("batch.size", "65536")
            .unwrap()
            .set("batch.max.size", "1024")
            .unwrap()
            .build()
            .unwrap();
        assert_eq!(c.batch_cap(), 65536, "never below batch.size");
    }

    #[test]
    fn conflicting_acks_turn_implicit_idempotence_off() {
        let c = base().set("acks", "1").unwrap().build().unwrap();
        assert!(!c.enable_idempotence);
        let err = base()
            .set("acks", "1")
            .unwrap()
            .set("enable.idempotence", "true")
            .unwrap()
            .build()
            .unwrap_err();
        assert!(err.to_string().contains("acks"), "{err}");
    }

    #[test]
    fn keys_are_validated_by_name() {
        let err = base().set("linger.ms", "soon").unwrap_err();
        assert!(err.to_string().contains("linger.ms"), "{err}");
        let err = base().set("no.such.key", "1").unwrap_err();
        assert!(err.to_string().contains("no.such.key"), "{err}");
        let err = base()
            .set("compression.type", "gzip")
            .unwrap()
            .set("compression.gzip.level", "12")
            .unwrap()
            .build()
            .unwrap_err();
        assert!(err.to_string().contains("compression.gzip.level"), "{err}");
        let c = base()
            .set("compression.type", "lz4")
            .unwrap()
            .set("request.timeout.ms", "1000")
            .unwrap()
            .build()
            .unwrap();
        assert_eq!(c.compression, Compression::Lz4);
        assert_eq!(c.client.request_timeout, Duration::from_secs(1));
    }
}
