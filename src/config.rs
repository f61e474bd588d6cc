//! Typed client configuration with documented defaults, and an adapter that
//! accepts the Java client's property names (`bootstrap.servers`,
//! `request.timeout.ms`, ...) with the same meaning.
//!
//! Defaults follow the Kafka 4.x Java client
//! (<https://kafka.apache.org/documentation/#producerconfigs>).

use std::sync::Arc;
use std::time::Duration;

use crate::error::{Error, Result};
use crate::net::sasl;
/// The security settings a [`ClientConfig`] holds, at a stable path (the
/// `net` module is internal).
pub use crate::net::sasl::{
    unsecured_jwt, LoginConfig, OAuthToken, SaslConfig, SaslMechanism, ScramHash, Secret,
    TokenProvider, UnsecuredJwt,
};
use crate::net::ConnectionConfig;
pub use crate::net::{SecurityConfig, SecurityProtocol, TlsConfig};

/// Settings shared by every client: how to reach and talk to brokers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientConfig {
    /// `bootstrap.servers`: initial `host:port` list. Required.
    pub bootstrap_servers: Vec<String>,
    /// `client.id`: sent with every request and the `client_id` of the
    /// client's metrics. Default empty: each client generates one as the
    /// Java client does (`producer-N` or `producer-<transactional.id>`,
    /// `consumer-<group.id>-N` or `consumer-<group.id>-<group.instance.id>`
    /// (`consumer-null-N` without a group), `adminclient-N`; N counts the
    /// clients of each kind in the process from 1). A [`Cluster`](crate::Cluster)
    /// connected directly sends it as it is.
    pub client_id: String,
    /// `request.timeout.ms`: how long to wait for one response. Default 30 s.
    pub request_timeout: Duration,
    /// `socket.connection.setup.timeout.ms`: TCP connect plus the ApiVersions
    /// handshake. Default 10 s.
    pub connection_setup_timeout: Duration,
    /// `reconnect.backoff.ms`: first wait before reconnecting to a broker. Default 50 ms.
    pub reconnect_backoff: Duration,
    /// `reconnect.backoff.max.ms`: cap of the exponential reconnect backoff. Default 1 s.
    pub reconnect_backoff_max: Duration,
    /// `retry.backoff.ms`: first wait before retrying a failed request. Default 100 ms.
    pub retry_backoff: Duration,
    /// `retry.backoff.max.ms`: cap of the exponential retry backoff. Default 1 s.
    pub retry_backoff_max: Duration,
    /// `metadata.max.age.ms`: metadata is refreshed at least this often. Default 5 min.
    pub metadata_max_age: Duration,
    /// `metadata.recovery.strategy` (KIP-1102): what to do when no known
    /// broker answers. Default [`MetadataRecoveryStrategy::Rebootstrap`].
    pub metadata_recovery_strategy: MetadataRecoveryStrategy,
    /// `metadata.recovery.rebootstrap.trigger.ms` (KIP-1102): with the
    /// `rebootstrap` strategy, go back to `bootstrap.servers` when no
    /// metadata could be obtained for this long, even if known brokers
    /// still accept connections. Default 5 min.
    pub metadata_recovery_rebootstrap_trigger: Duration,
    /// `default.api.timeout.ms`: bound on operations spanning several requests
    /// (metadata bootstrap, coordinator lookup). Default 60 s.
    pub default_api_timeout: Duration,
    /// `purekafka.max.response.bytes`: largest response frame accepted from a
    /// broker; larger frames close the connection. Default 100 MiB.
    pub max_response_size: usize,
    /// `security.protocol`, `sasl.*` and `ssl.*`: how connections are
    /// secured. Default `PLAINTEXT`. Secrets print as `***` in `Debug`.
    pub security: SecurityConfig,
    /// `enable.metrics.push` (KIP-714): producers and consumers push the
    /// metrics a broker subscribes to. Default `true`, as in Java.
    pub enable_metrics_push: bool,
}

impl Default for ClientConfig {
    fn default() -> Self {
        ClientConfig {
            bootstrap_servers: Vec::new(),
            client_id: String::new(),
            request_timeout: Duration::from_millis(30_000),
            connection_setup_timeout: Duration::from_millis(10_000),
            reconnect_backoff: Duration::from_millis(50),
            reconnect_backoff_max: Duration::from_millis(1_000),
            retry_backoff: Duration::from_millis(100),
            retry_backoff_max: Duration::from_millis(1_000),
            metadata_max_age: Duration::from_millis(300_000),
            metadata_recovery_strategy: MetadataRecoveryStrategy::Rebootstrap,
            metadata_recovery_rebootstrap_trigger: Duration::from_millis(300_000),
            default_api_timeout: Duration::from_millis(60_000),
            max_response_size: 100 * 1024 * 1024,
            security: SecurityConfig::default(),
            enable_metrics_push: true,
        }
    }
}

impl ClientConfig {
    /// Starts a builder with every default set.
    pub fn builder() -> ClientConfigBuilder {
        ClientConfigBuilder {
            config: ClientConfig::default(),
        }
    }

    /// Builds a config from Kafka property names; unknown keys are errors.
    pub fn from_properties<K, V>(props: impl IntoIterator<Item = (K, V)>) -> Result<ClientConfig>
    where
        K: AsRef<str>,
        V: AsRef<str>,
    {
        let mut b = ClientConfig::builder();
        for (k, v) in props {
            b = b.set(k.as_ref(), v.as_ref())?;
        }
        b.build()
    }
}

/// `metadata.recovery.strategy` (KIP-1102): how a client recovers when
/// every broker it learned from metadata is gone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum MetadataRecoveryStrategy {
    /// `rebootstrap` (the default, as in Java since Kafka 4.0): forget the
    /// learned brokers and resolve `bootstrap.servers` again (DNS
    /// included), when no known broker answers Metadata or none has for
    /// `metadata.recovery.rebootstrap.trigger.ms`.
    Rebootstrap,
    /// `none`: after the first metadata, talk only to the brokers it
    /// listed; when none answers, requests fail naming them.
    None,
}

/// Builder for [`ClientConfig`]; [`ClientConfigBuilder::build`] validates.
#[derive(Debug, Clone)]
pub struct ClientConfigBuilder {
    config: ClientConfig,
}

/// The kinds of client whose `client.id` defaults as Java's does.
pub(crate) enum ClientKind<'a> {
    Producer {
        transactional_id: Option<&'a str>,
    },
    /// Consumers and share consumers (Java's share consumer config is a
    /// consumer config, and they share one sequence).
    Consumer {
        group_id: Option<&'a str>,
        group_instance_id: Option<&'a str>,
    },
    Admin,
}

impl ClientConfig {
    /// `client.id`, or when it is empty the one Java would generate for
    /// `kind` (its `ProducerConfig`/`ConsumerConfig`'s `maybeOverrideClientId`
    /// and the admin client's `generateClientId`). Each call without a
    /// `client.id` takes the next number of the kind's sequence.
    pub(crate) fn client_id_for(&self, kind: ClientKind<'_>) -> String {
        use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
        static PRODUCERS: AtomicU64 = AtomicU64::new(1);
        static CONSUMERS: AtomicU64 = AtomicU64::new(1);
        static ADMINS: AtomicU64 = AtomicU64::new(1);
        if !self.client_id.is_empty() {
            return self.client_id.clone();
        }
        match kind {
            ClientKind::Producer {
                transactional_id: Some(t),
            } => format!("producer-{t}"),
            ClientKind::Producer { .. } => format!("producer-{}", PRODUCERS.fetch_add(1, Relaxed)),
            ClientKind::Consumer {
                group_id,
                group_instance_id,
            } => {
                let group = group_id.unwrap_or("null");
                match group_instance_id {
                    Some(i) => format!("consumer-{group}-{i}"),
                    None => format!("consumer-{group}-{}", CONSUMERS.fetch_add(1, Relaxed)),
                }
            }
            ClientKind::Admin => format!("adminclient-{}", ADMINS.fetch_add(1, Relaxed)),
        }
    }
}

impl ConnectionConfig {
    /// The connection settings of a client config. Lives here, not in `net`,
    /// so the net layer never imports the client config.
    pub fn from_client(cfg: &ClientConfig) -> ConnectionConfig {
        ConnectionConfig {
            client_id: cfg.client_id.clone(),
            request_timeout: cfg.request_timeout,
            setup_timeout: cfg.connection_setup_timeout,
            max_response_size: cfg.max_response_size,
            security: cfg.security.clone(),
        }
    }
}

impl ClientConfigBuilder {
    /// `bootstrap.servers`, comma-separated `host:port` list.
    pub fn bootstrap_servers(mut self, servers: impl AsRef<str>) -> Self {
        self.config.bootstrap_servers = split_list(servers.as_ref());
        self
    }

    /// `client.id`.
    pub fn client_id(mut self, id: impl Into<String>) -> Self {
        self.config.client_id = id.into();
        self
    }

    /// `request.timeout.ms`.
    pub fn request_timeout(mut self, d: Duration) -> Self {
        self.config.request_timeout = d;
        self
    }

    /// `socket.connection.setup.timeout.ms`.
    pub fn connection_setup_timeout(mut self, d: Duration) -> Self {
        self.config.connection_setup_timeout = d;
        self
    }

    /// `metadata.max.age.ms`.
    pub fn metadata_max_age(mut self, d: Duration) -> Self {
        self.config.metadata_max_age = d;
        self
    }

    /// `enable.metrics.push` (KIP-714 client telemetry).
    pub fn enable_metrics_push(mut self, on: bool) -> Self {
        self.config.enable_metrics_push = on;
        self
    }

    /// `metadata.recovery.strategy`.
    pub fn metadata_recovery_strategy(mut self, s: MetadataRecoveryStrategy) -> Self {
        self.config.metadata_recovery_strategy = s;
        self
    }

    /// `metadata.recovery.rebootstrap.trigger.ms`.
    pub fn metadata_recovery_rebootstrap_trigger(mut self, d: Duration) -> Self {
        self.config.metadata_recovery_rebootstrap_trigger = d;
        self
    }

    /// `default.api.timeout.ms`.
    pub fn default_api_timeout(mut self, d: Duration) -> Self {
        self.config.default_api_timeout = d;
        self
    }

    /// `purekafka.max.response.bytes`.
    pub fn max_response_size(mut self, bytes: usize) -> Self {
        self.config.max_response_size = bytes;
        self
    }

    /// `security.protocol`.
    pub fn security_protocol(mut self, protocol: SecurityProtocol) -> Self {
        self.config.security.protocol = protocol;
        self
    }

    /// `sasl.mechanism`.
    pub fn sasl_mechanism(mut self, mechanism: SaslMechanism) -> Self {
        self.config.security.sasl.mechanism = mechanism;
        self
    }

    /// `sasl.username` and `sasl.password` (PLAIN, SCRAM).
    pub fn sasl_credentials(
        mut self,
        username: impl Into<String>,
        password: impl Into<Secret>,
    ) -> Self {
        self.config.security.sasl.username = username.into();
        self.config.security.sasl.password = password.into();
        self
    }

    /// Where OAUTHBEARER tokens come from.
    pub fn sasl_token_provider(mut self, provider: Arc<dyn TokenProvider>) -> Self {
        self.config.security.sasl.token_provider = Some(provider);
        self
    }

    /// TLS settings (`ssl.*`).
    pub fn tls(mut self, tls: TlsConfig) -> Self {
        self.config.security.tls = tls;
        self
    }

    /// Sets one property by its Kafka name. Unknown keys and malformed values
    /// are errors naming the key.
    pub fn set(self, key: &str, value: &str) -> Result<Self> {
        match self.try_set(key, value) {
            Some(r) => r,
            None => Err(Error::config(key, "unknown property")),
        }
    }

    /// Like [`set`](Self::set) but `None` for keys this config does not own,
    /// so that producer/consumer configs can chain to it.
    pub fn try_set(mut self, key: &str, value: &str) -> Option<Result<Self>> {
        let c = &mut self.config;
        let r = set_connection(c, key, value)
            .or_else(|| set_sasl(c, key, value))
            .or_else(|| set_tls(c, key, value))?;
        Some(r.map(|()| self))
    }

    /// Validates and returns the config.
    pub fn build(self) -> Result<ClientConfig> {
        let c = self.config;
        if c.bootstrap_servers.is_empty() {
            return Err(Error::config(
                "bootstrap.servers",
                "required: a comma-separated host:port list",
            ));
        }
        for server in &c.bootstrap_servers {
            parse_host_port(server).map_err(|reason| Error::config("bootstrap.servers", reason))?;
        }
        for (key, d) in [
            ("request.timeout.ms", c.request_timeout),
            (
                "socket.connection.setup.timeout.ms",
                c.connection_setup_timeout,
            ),
            ("default.api.timeout.ms", c.default_api_timeout),
            ("metadata.max.age.ms", c.metadata_max_age),
            (
                "metadata.recovery.rebootstrap.trigger.ms",
                c.metadata_recovery_rebootstrap_trigger,
            ),
        ] {
            if d.is_zero() {
                return Err(Error::config(key, "must be greater than 0"));
            }
        }
        if c.reconnect_backoff > c.reconnect_backoff_max {
            return Err(Error::config(
                "reconnect.backoff.ms",
                "must not exceed reconnect.backoff.max.ms",
            ));
        }
        // As the Java client does, a base backoff above its cap is clamped.
        let mut c = c;
        c.retry_backoff = c.retry_backoff.min(c.retry_backoff_max);
        if c.max_response_size < 1024 {
            return Err(Error::config(
                "purekafka.max.response.bytes",
                "must be at least 1024",
            ));
        }
        if c.security.protocol.uses_sasl() {
            resolve_login(&mut c.security.sasl, c.connection_setup_timeout)?;
            c.security.sasl.validate()?;
        }
        if c.security.protocol.uses_tls() {
            if !cfg!(feature = "tls") {
                return Err(Error::config(
                    "security.protocol",
                    format!(
                        "{} needs TLS: build purekafka with the `tls` feature",
                        c.security.protocol
                    ),
                ));
            }
            let t = &c.security.tls;
            if t.certificate_location.is_some() != t.key_location.is_some() {
                return Err(Error::config(
                    "ssl.key.location",
                    "ssl.certificate.location and ssl.key.location go together (mTLS)",
                ));
            }
        }
        Ok(c)
    }
}

/// Builds the OAUTHBEARER token provider that the `sasl.login.*` and
/// `sasl.oauthbearer.*` settings name, unless one was set in code:
/// MSK IAM for Amazon's callback handler class (feature `aws-msk-iam`),
/// the OIDC client credentials provider when a token endpoint URL is set
/// (feature `oauth`). `Err` names the key and the missing feature.
///
/// `setup_timeout` (`socket.connection.setup.timeout.ms`) bounds each
/// connection's sign-in, token fetch included.
fn resolve_login(sasl: &mut sasl::SaslConfig, setup_timeout: Duration) -> Result<()> {
    if sasl.mechanism != SaslMechanism::OAuthBearer || sasl.token_provider.is_some() {
        return Ok(());
    }
    const HANDLER_KEY: &str = "sasl.login.callback.handler.class";
    let handler = sasl.login.callback_handler.clone();
    if handler.as_deref() == Some(sasl::login::MSK_IAM_CALLBACK_HANDLER) {
        #[cfg(feature = "aws-msk-iam")]
        {
            let p = sasl::msk_iam::MskIamTokenProvider::from_environment(
                sasl.login.aws_profile.clone(),
            )?;
            sasl.token_provider = Some(Arc::new(p));
            return Ok(());
        }
        #[cfg(not(feature = "aws-msk-iam"))]
        return Err(Error::config(
            HANDLER_KEY,
            "MSK IAM needs purekafka built with the `aws-msk-iam` feature",
        ));
    }
    if sasl.login.token_endpoint_url.is_some() {
        #[cfg(feature = "oauth")]
        {
            let p = crate::oauth::OidcTokenProvider::new(sasl.login.clone(), setup_timeout)?;
            sasl.token_provider = Some(Arc::new(p));
            return Ok(());
        }
        #[cfg(not(feature = "oauth"))]
        let _ = setup_timeout;
        #[cfg(not(feature = "oauth"))]
        return Err(Error::config(
            "sasl.oauthbearer.token.endpoint.url",
            "OIDC client credentials need purekafka built with the `oauth` feature",
        ));
    }
    match handler {
        Some(h) if sasl::login::OIDC_CALLBACK_HANDLERS.contains(&h.as_str()) => Err(Error::config(
            "sasl.oauthbearer.token.endpoint.url",
            format!("required with {HANDLER_KEY}={h}"),
        )),
        Some(h) => Err(Error::config(
            HANDLER_KEY,
            format!(
                "`{h}` is not a class purekafka knows (it knows Kafka's OAuthBearerLoginCallbackHandler and {})",
                sasl::login::MSK_IAM_CALLBACK_HANDLER
            ),
        )),
        None => Ok(()),
    }
}

/// Splits `host:port` (or `[v6]:port`) into its parts.
pub fn parse_host_port(s: &str) -> std::result::Result<(String, u16), String> {
    let (host, port) = s
        .rsplit_once(':')
        .ok_or_else(|| format!("`{s}` is not host:port"))?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    if host.is_empty() {
        return Err(format!("`{s}` has an empty host"));
    }
    let port: u16 = port
        .parse()
        .map_err(|_| format!("`{s}` has an invalid port"))?;
    Ok((host.to_owned(), port))
}

/// Connection, timeout and metadata keys; `None` for other keys.
fn set_connection(c: &mut ClientConfig, key: &str, value: &str) -> Option<Result<()>> {
    Some(match key {
        "bootstrap.servers" => {
            c.bootstrap_servers = split_list(value);
            Ok(())
        }
        "client.id" => {
            c.client_id = value.to_owned();
            Ok(())
        }
        "request.timeout.ms" => parse_ms(key, value).map(|d| c.request_timeout = d),
        "socket.connection.setup.timeout.ms" => {
            parse_ms(key, value).map(|d| c.connection_setup_timeout = d)
        }
        "reconnect.backoff.ms" => parse_ms(key, value).map(|d| c.reconnect_backoff = d),
        "reconnect.backoff.max.ms" => parse_ms(key, value).map(|d| c.reconnect_backoff_max = d),
        "retry.backoff.ms" => parse_ms(key, value).map(|d| c.retry_backoff = d),
        "retry.backoff.max.ms" => parse_ms(key, value).map(|d| c.retry_backoff_max = d),
        "metadata.max.age.ms" => parse_ms(key, value).map(|d| c.metadata_max_age = d),
        "metadata.recovery.strategy" => match value.trim().to_ascii_lowercase().as_str() {
            "rebootstrap" => {
                c.metadata_recovery_strategy = MetadataRecoveryStrategy::Rebootstrap;
                Ok(())
            }
            "none" => {
                c.metadata_recovery_strategy = MetadataRecoveryStrategy::None;
                Ok(())
            }
            _ => Err(Error::config(
                key,
                format!("`{value}` is not one of rebootstrap, none"),
            )),
        },
        "metadata.recovery.rebootstrap.trigger.ms" => {
            parse_ms(key, value).map(|d| c.metadata_recovery_rebootstrap_trigger = d)
        }
        "default.api.timeout.ms" => parse_ms(key, value).map(|d| c.default_api_timeout = d),
        "enable.metrics.push" => parse_bool(key, value).map(|b| c.enable_metrics_push = b),
        "purekafka.max.response.bytes" => {
            parse_num::<usize>(key, value).map(|n| c.max_response_size = n)
        }
        _ => return None,
    })
}

/// `security.protocol` and the SASL keys; `None` for other keys.
fn set_sasl(c: &mut ClientConfig, key: &str, value: &str) -> Option<Result<()>> {
    // `sasl.login.*` and `sasl.oauthbearer.*`: token sources and refresh.
    if let Some(r) = c.security.sasl.login.set(key, value) {
        return Some(r.map_err(|reason| Error::config(key, reason)));
    }
    Some(match key {
        "security.protocol" => match SecurityProtocol::parse(value) {
            Some(p) => {
                c.security.protocol = p;
                Ok(())
            }
            None => Err(Error::config(
                key,
                format!("`{value}` is not one of PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL"),
            )),
        },
        "sasl.mechanism" => match SaslMechanism::parse(value) {
            Some(m) => {
                c.security.sasl.mechanism = m;
                Ok(())
            }
            None => Err(Error::config(
                key,
                format!("`{value}` is not one of PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER"),
            )),
        },
        "sasl.username" => {
            c.security.sasl.username = value.to_owned();
            Ok(())
        }
        "sasl.password" => {
            c.security.sasl.password = Secret::new(value);
            Ok(())
        }
        // Never quote the value in errors: it holds a password.
        "sasl.jaas.config" => match sasl::parse_jaas(value) {
            Ok(j) => {
                if let Some(u) = j.username {
                    c.security.sasl.username = u;
                }
                if let Some(p) = j.password {
                    c.security.sasl.password = p;
                }
                let login = &mut c.security.sasl.login;
                if let Some(id) = j.client_id {
                    login.client_id = id;
                }
                if let Some(secret) = j.client_secret {
                    login.client_secret = secret;
                }
                if j.scope.is_some() {
                    login.scope = j.scope;
                }
                if j.aws_profile.is_some() {
                    login.aws_profile = j.aws_profile;
                }
                login.extensions.extend(j.extensions);
                if let Some(sub) = j.unsecured_sub {
                    c.security.sasl.token_provider = Some(Arc::new(UnsecuredJwt {
                        subject: sub,
                        lifetime: Duration::from_secs(3600),
                    }));
                }
                Ok(())
            }
            Err(reason) => Err(Error::config(key, reason)),
        },
        _ => return None,
    })
}

/// The `ssl.*` keys (PEM files, host name checks); `None` for other keys.
fn set_tls(c: &mut ClientConfig, key: &str, value: &str) -> Option<Result<()>> {
    Some(match key {
        "ssl.ca.location" => {
            c.security.tls.ca_location = Some(value.into());
            Ok(())
        }
        "ssl.certificate.location" => {
            c.security.tls.certificate_location = Some(value.into());
            Ok(())
        }
        "ssl.key.location" => {
            c.security.tls.key_location = Some(value.into());
            Ok(())
        }
        "ssl.key.password" => {
            c.security.tls.key_password = Some(Secret::new(value));
            Ok(())
        }
        // The Java client's names for PEM stores (KIP-651): a truststore
        // of CA certificates, a keystore holding the key and its chain.
        "ssl.truststore.location" => {
            c.security.tls.ca_location = Some(value.into());
            Ok(())
        }
        "ssl.keystore.location" => {
            c.security.tls.certificate_location = Some(value.into());
            c.security.tls.key_location = Some(value.into());
            Ok(())
        }
        "ssl.truststore.type" | "ssl.keystore.type" => {
            if value.trim().eq_ignore_ascii_case("PEM") {
                Ok(())
            } else {
                Err(Error::config(
                    key,
                    format!(
                        "`{value}` stores are not supported, only PEM; convert with \
                         keytool -importkeystore and openssl"
                    ),
                ))
            }
        }
        "ssl.endpoint.identification.algorithm" => match value.trim() {
            "" => {
                c.security.tls.verify_hostname = false;
                Ok(())
            }
            v if v.eq_ignore_ascii_case("https") => {
                c.security.tls.verify_hostname = true;
                Ok(())
            }
            _ => Err(Error::config(
                key,
                format!("`{value}` is not `https` or empty"),
            )),
        },
        "purekafka.ssl.danger.skip.certificate.verification" => {
            parse_bool(key, value).map(|b| c.security.tls.danger_skip_verification = b)
        }
        _ => return None,
    })
}

/// Splits a comma-separated property list, dropping blanks.
pub(crate) fn split_list(s: &str) -> Vec<String> {
    s.split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(str::to_owned)
        .collect()
}

/// Parses a millisecond property into a `Duration`.
/// `true` or `false` (any case, surrounding blanks ignored), or an error
/// naming `key`.
pub(crate) fn parse_bool(key: &str, value: &str) -> Result<bool> {
    match value.trim().to_ascii_lowercase().as_str() {
        "true" => Ok(true),
        "false" => Ok(false),
        _ => Err(Error::config(
            key,
            format!("`{value}` is not true or false"),
        )),
    }
}

pub(crate) fn parse_ms(key: &str, value: &str) -> Result<Duration> {
    parse_num::<u64>(key, value).map(Duration::from_millis)
}

/// Parses a numeric property, naming the key on failure.
pub(crate) fn parse_num<T: std::str::FromStr>(key: &str, value: &str) -> Result<T> {
    value
        .trim()
        .parse()
        .map_err(|_| Error::config(key, format!("`{value}` is not a valid number")))
}

/// Parses a Java `.properties` text: `key=value` or `key: value` lines;
/// `#` and `!` start comments.
pub fn parse_properties(text: &str) -> Result<Vec<(String, String)>> {
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with('!') {
            continue;
        }
        let idx = line
            .find(['=', ':'])
            .ok_or_else(|| Error::config(line, format!("line {}: expected key=value", n + 1)))?;
        let (k, v) = line.split_at(idx);
        out.push((k.trim().to_owned(), v[1..].trim().to_owned()));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_match_java_client() {
        let c = ClientConfig::builder()
            .bootstrap_servers("127.0.0.1:9092")
            .build()
            .unwrap();
        assert_eq!(c.request_timeout, Duration::from_secs(30));
        assert_eq!(c.metadata_max_age, Duration::from_secs(300));
        assert_eq!(c.max_response_size, 100 << 20);
        assert_eq!(
            c.metadata_recovery_strategy,
            MetadataRecoveryStrategy::Rebootstrap
        );
        assert_eq!(
            c.metadata_recovery_rebootstrap_trigger,
            Duration::from_secs(300)
        );
        assert!(c.enable_metrics_push);
        let off = ClientConfig::from_properties([
            ("bootstrap.servers", "a:1"),
            ("enable.metrics.push", "false"),
        ])
        .unwrap();
        assert!(!off.enable_metrics_push);
    }

    #[test]
    fn an_unset_client_id_is_generated_as_java_does() {
        let unset = ClientConfig::default();
        assert_eq!(unset.client_id, "");
        let number = |id: String, prefix: &str| -> u64 {
            id.strip_prefix(prefix)
                .and_then(|n| n.parse().ok())
                .unwrap_or_else(|| panic!("{id} is not {prefix}N"))
        };
        let producer = || ClientKind::Producer {
            transactional_id: None,
        };
        // Each client takes the next number (other tests may take some).
        let p1 = number(unset.client_id_for(producer()), "producer-");
        let p2 = number(unset.client_id_for(producer()), "producer-");
        assert!(p1 >= 1 && p2 > p1, "{p1} then {p2}");
        assert_eq!(
            unset.client_id_for(ClientKind::Producer {
                transactional_id: Some("tx")
            }),
            "producer-tx"
        );
        let consumer = |group, instance| ClientKind::Consumer {
            group_id: group,
            group_instance_id: instance,
        };
        let c1 = number(
            unset.client_id_for(consumer(Some("g"), None)),
            "consumer-g-",
        );
        let c2 = number(unset.client_id_for(consumer(None, None)), "consumer-null-");
        assert!(c2 > c1, "{c1} then {c2}");
        assert_eq!(
            unset.client_id_for(consumer(Some("g"), Some("i"))),
            "consumer-g-i"
        );
        let a1 = number(unset.client_id_for(ClientKind::Admin), "adminclient-");
        assert!(a1 >= 1);
        // A client.id that is set wins, and takes no number.
        let set = ClientConfig {
            client_id: "mine".into(),
            ..ClientConfig::default()
        };
        assert_eq!(set.client_id_for(producer()), "mine");
        assert_eq!(set.client_id_for(ClientKind::Admin), "mine");
    }

    #[test]
    fn metadata_recovery_keys_parse_as_in_java() {
        let c = ClientConfig::from_properties([
            ("bootstrap.servers", "a:1"),
            ("metadata.recovery.strategy", "NONE"),
            ("metadata.recovery.rebootstrap.trigger.ms", "2500"),
        ])
        .unwrap();
        assert_eq!(c.metadata_recovery_strategy, MetadataRecoveryStrategy::None);
        assert_eq!(
            c.metadata_recovery_rebootstrap_trigger,
            Duration::from_millis(2500)
        );
        let e = ClientConfig::from_properties([
            ("bootstrap.servers", "a:1"),
            ("metadata.recovery.strategy", "sometimes"),
        ])
        .unwrap_err();
        assert!(e.to_string().contains("metadata.recovery.strategy"), "{e}");
        let e = ClientConfig::from_properties([
            ("bootstrap.servers", "a:1"),
            ("metadata.recovery.rebootstrap.trigger.ms", "0"),
        ])
        .unwrap_err();
        assert!(
            e.to_string()
                .contains("metadata.recovery.rebootstrap.trigger.ms"),
            "{e}"
        );
    }

    #[test]
    fn properties_adapter() {
        let c = ClientConfig::from_properties([
            ("bootstrap.servers", "a:1, b:2"),
            ("client.id", "me"),
            ("request.timeout.ms", "1500"),
        ])
        .unwrap();
        assert_eq!(c.bootstrap_servers, vec!["a:1", "b:2"]);
        assert_eq!(c.client_id, "me");
        assert_eq!(c.request_timeout, Duration::from_millis(1500));
    }

    #[test]
    fn bad_properties_name_the_key() {
        let e = ClientConfig::from_properties([("bootstrap.servers", "a:1"), ("linger.msx", "1")])
            .unwrap_err();
        assert_eq!(e.to_string(), "config `linger.msx`: unknown property");
        let e = ClientConfig::from_properties([("request.timeout.ms", "soon")]).unwrap_err();
        assert!(e.to_string().starts_with("config `request.timeout.ms`"));
        let e = ClientConfig::from_properties([("bootstrap.servers", "nohost")]).unwrap_err();
        assert!(e.to_string().contains("bootstrap.servers"));
        let e = ClientConfig::builder().build().unwrap_err();
        assert!(e.to_string().contains("bootstrap.servers"));
    }

    // SSL needs the `tls` feature: without it the config is refused.
    #[cfg(feature = "tls")]
    #[test]
    fn java_pem_store_keys_map_onto_the_tls_settings() {
        let c = ClientConfig::from_properties([
            ("bootstrap.servers", "a:1"),
            ("security.protocol", "SSL"),
            ("ssl.truststore.type", "PEM"),
            ("ssl.truststore.location", "/etc/kafka/ca.pem"),
            ("ssl.keystore.type", "pem"),
            ("ssl.keystore.location", "/etc/kafka/client.pem"),
            ("ssl.key.password", "key-pw"),
        ])
        .unwrap();
        let tls = &c.security.tls;
        assert_eq!(
            tls.ca_location.as_deref(),
            Some("/etc/kafka/ca.pem".as_ref())
        );
        assert_eq!(tls.certificate_location, tls.key_location);
        assert_eq!(
            tls.key_location.as_deref(),
            Some("/etc/kafka/client.pem".as_ref())
        );
        assert_eq!(
            tls.key_password.as_ref().map(|p| p.expose()),
            Some("key-pw")
        );
        assert!(!format!("{c:?}").contains("key-pw"));
        let e = ClientConfig::from_properties([
            ("bootstrap.servers", "a:1"),
            ("ssl.keystore.type", "JKS"),
        ])
        .unwrap_err();
        assert!(e.to_string().contains("ssl.keystore.type"), "{e}");
        assert!(e.to_string().contains("PEM"), "{e}");
    }

    #[test]
    fn security_properties() {
        let c = ClientConfig::from_properties([
            ("bootstrap.servers", "a:1"),
            ("security.protocol", "sasl_plaintext"),
            ("sasl.mechanism", "SCRAM-SHA-512"),
            ("sasl.username", "alice"),
            ("sasl.password", "s3cr3t-pw"),
        ])
        .unwrap();
        assert_eq!(c.security.protocol, SecurityProtocol::SaslPlaintext);
        assert_eq!(c.security.sasl.mechanism, SaslMechanism::ScramSha512);
        assert_eq!(c.security.sasl.password.expose(), "s3cr3t-pw");
        assert!(!format!("{c:?}").contains("s3cr3t-pw"));

        let c = ClientConfig::from_properties([
            ("bootstrap.servers", "a:1"),
            ("security.protocol", "SASL_PLAINTEXT"),
            (
                "sasl.jaas.config",
                r#"org.apache.kafka.common.security.plain.PlainLoginModule required username="bob" password="jaas-pw";"#,
            ),
        ])
        .unwrap();
        assert_eq!(c.security.sasl.username, "bob");
        assert!(!format!("{c:?}").contains("jaas-pw"));

        let e = ClientConfig::from_properties([
            ("bootstrap.servers", "a:1"),
            ("security.protocol", "SASL_PLAINTEXT"),
            ("sasl.username", "bob"),
        ])
        .unwrap_err();
        assert!(e.to_string().contains("sasl.password"), "{e}");
        let e = ClientConfig::from_properties([
            ("bootstrap.servers", "a:1"),
            ("security.protocol", "SASL_PLAINTEXT"),
            ("sasl.mechanism", "OAUTHBEARER"),
        ])
        .unwrap_err();
        assert!(e.to_string().contains("token provider"), "{e}");
        let e =
            ClientConfig::from_properties([("sasl.jaas.config", "M required password=\"x1y2z3")])
                .unwrap_err();
        assert!(!e.to_string().contains("x1y2z3"), "{e}");
        assert!(ClientConfig::from_properties([("security.protocol", "TLS")]).is_err());
    }

    #[test]
    fn properties_file() {
        let p = parse_properties("# c\nbootstrap.servers=a:1\n\nclient.id : x\n").unwrap();
        assert_eq!(
            p,
            vec![
                ("bootstrap.servers".into(), "a:1".into()),
                ("client.id".into(), "x".into())
            ]
        );
        assert!(parse_properties("novalue").is_err());
    }

    #[test]
    fn login_settings_pick_or_refuse_a_provider() {
        let mut cfg = sasl::SaslConfig {
            mechanism: SaslMechanism::OAuthBearer,
            ..sasl::SaslConfig::default()
        };
        assert!(resolve_login(&mut cfg, Duration::from_secs(10)).is_ok());
        assert!(cfg.validate().is_err());
        cfg.login.callback_handler = Some("com.example.Handler".into());
        let e = resolve_login(&mut cfg, Duration::from_secs(10))
            .unwrap_err()
            .to_string();
        assert!(e.contains("sasl.login.callback.handler.class"), "{e}");
        cfg.login.callback_handler = Some(sasl::login::OIDC_CALLBACK_HANDLERS[0].into());
        let e = resolve_login(&mut cfg, Duration::from_secs(10))
            .unwrap_err()
            .to_string();
        assert!(e.contains("sasl.oauthbearer.token.endpoint.url"), "{e}");
        #[cfg(not(feature = "aws-msk-iam"))]
        {
            cfg.login.callback_handler = Some(sasl::login::MSK_IAM_CALLBACK_HANDLER.into());
            let e = resolve_login(&mut cfg, Duration::from_secs(10))
                .unwrap_err()
                .to_string();
            assert!(e.contains("aws-msk-iam"), "{e}");
        }
        cfg.login.callback_handler = None;
        cfg.login.token_endpoint_url = Some("http://127.0.0.1:1/token".into());
        cfg.login.client_id = "app".into();
        cfg.login.client_secret = Secret::new("pw");
        let r = resolve_login(&mut cfg, Duration::from_secs(10));
        #[cfg(feature = "oauth")]
        {
            r.unwrap();
            let provider = format!("{:?}", cfg.token_provider.take().unwrap());
            assert!(
                provider.contains("OidcTokenProvider") && !provider.contains("pw"),
                "{provider}"
            );
        }
        #[cfg(not(feature = "oauth"))]
        assert!(r.unwrap_err().to_string().contains("`oauth` feature"));
        // A provider given in code wins over every setting.
        cfg.token_provider = Some(Arc::new(UnsecuredJwt {
            subject: "a".into(),
            lifetime: Duration::from_secs(60),
        }));
        assert!(resolve_login(&mut cfg, Duration::from_secs(10)).is_ok());
    }

    #[test]
    fn oauth_keys_and_jaas_options_fill_the_login_settings() {
        let b = ClientConfig::builder()
            .set("sasl.oauthbearer.token.endpoint.url", "https://idp.example/token")
            .unwrap()
            .set(
                "sasl.jaas.config",
                r#"org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required clientId="app" clientSecret="pw" scope="kafka" extension_logicalCluster="lkc-1";"#,
            )
            .unwrap()
            .set("sasl.login.refresh.buffer.seconds", "120")
            .unwrap();
        let login = &b.config.security.sasl.login;
        assert_eq!(
            login.token_endpoint_url.as_deref(),
            Some("https://idp.example/token")
        );
        assert_eq!(login.client_id, "app");
        assert_eq!(login.client_secret.expose(), "pw");
        assert_eq!(login.scope.as_deref(), Some("kafka"));
        assert_eq!(
            login.extensions,
            vec![("logicalCluster".to_owned(), "lkc-1".to_owned())]
        );
        assert_eq!(login.refresh_buffer, Duration::from_secs(120));
        let e = ClientConfig::builder()
            .set("sasl.login.refresh.window.factor", "2")
            .unwrap_err();
        assert!(
            e.to_string().contains("sasl.login.refresh.window.factor"),
            "{e}"
        );
    }
}
