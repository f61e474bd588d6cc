//! SASL authentication during connection setup.
//!
//! After ApiVersions and before a connection is handed to callers, the client
//! sends SaslHandshake v1 naming its mechanism (KIP-43), then one
//! SaslAuthenticate (v0-v2, KIP-152) per step of the mechanism's exchange.
//! Mechanisms: `PLAIN` (RFC 4616), `SCRAM-SHA-256` / `SCRAM-SHA-512`
//! (KIP-84, RFC 5802 and RFC 7677) and `OAUTHBEARER` (KIP-255, RFC 7628).
//!
//! The mechanisms are pure state machines ([`Exchange`]) with no I/O, so they
//! are unit-tested against the RFC vectors; [`authenticate`] drives one over
//! a [`Connection`].
//!
//! Re-authentication (KIP-368): when SaslAuthenticate returns a session
//! lifetime, the connection stops taking new requests at a random point
//! between 85% and 95% of that lifetime, answers what is in flight and
//! closes; the pool dials (and authenticates) a fresh connection on next use.
//! The broker therefore never sees an expired session, and no request is
//! ever interleaved with an authentication exchange.
//!
//! Secrets are held in [`Secret`], whose `Debug` prints `***`, and never
//! enter an error message or a log event.
//!
//! Token providers for managed clusters: Amazon MSK IAM (feature
//! `aws-msk-iam`, `msk_iam`) here, OIDC client credentials (KIP-768, feature
//! `oauth`) in `crate::oauth` (it needs the HTTP client, a layer up), both
//! configured through [`LoginConfig`] with the Java keys.

pub mod login;
#[cfg(feature = "aws-msk-iam")]
pub mod msk_iam;
mod oauthbearer;

mod plain;
pub mod scram;

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::messages::{SaslAuthenticateRequest, SaslHandshakeRequest};
use kafka_protocol::protocol::StrBytes;
use tracing::debug;

use super::Connection;
use crate::error::{Error, KafkaCode, Result};
use crate::protocol::versions::Versions;

pub use login::LoginConfig;
pub use oauthbearer::{unsecured_jwt, OAuthToken, TokenProvider, UnsecuredJwt};
pub use scram::ScramHash;

/// A secret string (password, token) that never shows in `Debug` output.
#[derive(Clone, PartialEq, Eq, Default)]
pub struct Secret(String);

impl Secret {
    /// Wraps a secret.
    pub fn new(s: impl Into<String>) -> Secret {
        Secret(s.into())
    }

    /// The secret itself; only for putting it on the wire.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// Whether the secret is empty.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("***")
    }
}

impl From<&str> for Secret {
    fn from(s: &str) -> Secret {
        Secret(s.to_owned())
    }
}

impl From<String> for Secret {
    fn from(s: String) -> Secret {
        Secret(s)
    }
}

/// A SASL mechanism (`sasl.mechanism`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum SaslMechanism {
    /// `PLAIN`: user name and password in clear (use with TLS).
    Plain,
    /// `SCRAM-SHA-256` (KIP-84).
    ScramSha256,
    /// `SCRAM-SHA-512` (KIP-84).
    ScramSha512,
    /// `OAUTHBEARER` (KIP-255): a bearer token from a [`TokenProvider`].
    OAuthBearer,
}

impl SaslMechanism {
    /// The mechanism's name as Kafka spells it.
    pub fn name(self) -> &'static str {
        match self {
            SaslMechanism::Plain => "PLAIN",
            SaslMechanism::ScramSha256 => "SCRAM-SHA-256",
            SaslMechanism::ScramSha512 => "SCRAM-SHA-512",
            SaslMechanism::OAuthBearer => "OAUTHBEARER",
        }
    }

    /// Parses a Kafka mechanism name (case-insensitive).
    pub fn parse(s: &str) -> Option<SaslMechanism> {
        [
            SaslMechanism::Plain,
            SaslMechanism::ScramSha256,
            SaslMechanism::ScramSha512,
            SaslMechanism::OAuthBearer,
        ]
        .into_iter()
        .find(|m| m.name().eq_ignore_ascii_case(s.trim()))
    }
}

impl std::fmt::Display for SaslMechanism {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// SASL settings: the mechanism and its credentials.
#[derive(Clone)]
pub struct SaslConfig {
    /// `sasl.mechanism`. Default `PLAIN` (as the Java client).
    pub mechanism: SaslMechanism,
    /// `sasl.username` (PLAIN and SCRAM).
    pub username: String,
    /// `sasl.password` (PLAIN and SCRAM).
    pub password: Secret,
    /// Where OAUTHBEARER tokens come from.
    pub token_provider: Option<Arc<dyn TokenProvider>>,
    /// `sasl.login.*` and `sasl.oauthbearer.*`: a token source built from
    /// settings (OIDC endpoint, MSK IAM) and its refresh rules.
    pub login: LoginConfig,
}

impl Default for SaslConfig {
    fn default() -> Self {
        SaslConfig {
            mechanism: SaslMechanism::Plain,
            username: String::new(),
            password: Secret::default(),
            token_provider: None,
            login: LoginConfig::default(),
        }
    }
}

impl std::fmt::Debug for SaslConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SaslConfig")
            .field("mechanism", &self.mechanism)
            .field("username", &self.username)
            .field("password", &self.password)
            .field("token_provider", &self.token_provider)
            .field("login", &self.login)
            .finish()
    }
}

impl PartialEq for SaslConfig {
    fn eq(&self, other: &Self) -> bool {
        let providers = match (&self.token_provider, &other.token_provider) {
            (None, None) => true,
            (Some(a), Some(b)) => Arc::ptr_eq(a, b),
            _ => false,
        };
        self.mechanism == other.mechanism
            && self.username == other.username
            && self.password == other.password
            && self.login == other.login
            && providers
    }
}

impl Eq for SaslConfig {}

impl SaslConfig {
    /// Checks that the mechanism has the credentials it needs; `Err` names
    /// the missing config key.
    pub fn validate(&self) -> Result<()> {
        match self.mechanism {
            SaslMechanism::Plain | SaslMechanism::ScramSha256 | SaslMechanism::ScramSha512 => {
                if self.username.is_empty() {
                    return Err(Error::config(
                        "sasl.username",
                        format!("required for sasl.mechanism={}", self.mechanism),
                    ));
                }
                if self.password.is_empty() {
                    return Err(Error::config(
                        "sasl.password",
                        format!("required for sasl.mechanism={}", self.mechanism),
                    ));
                }
            }
            SaslMechanism::OAuthBearer => {
                if self.token_provider.is_none() {
                    return Err(Error::config(
                        "sasl.jaas.config",
                        "OAUTHBEARER needs a token provider (ClientConfigBuilder::sasl_token_provider, sasl.oauthbearer.token.endpoint.url with the `oauth` feature, Amazon's IAMOAuthBearerLoginCallbackHandler with `aws-msk-iam`, or unsecuredLoginStringClaim_sub in sasl.jaas.config for tests)",
                    ));
                }
            }
        }
        Ok(())
    }
}

/// What a mechanism wants next.
#[derive(Debug, PartialEq, Eq)]
pub enum Step {
    /// Send these bytes in a SaslAuthenticate request.
    Send(Vec<u8>),
    /// The exchange succeeded.
    Done,
}

/// One client-side SASL exchange: fed each server message (`None` first),
/// it answers what to send next. No I/O. Errors are human-readable reasons
/// that never contain a secret.
pub trait Exchange: Send {
    /// The next step given the server's last message.
    fn step(&mut self, server: Option<&[u8]>) -> std::result::Result<Step, String>;

    /// What the server already said against us, when the broker then ends
    /// the exchange with an error code (OAUTHBEARER's error challenge,
    /// RFC 7628 3.2.2, followed by SASL_AUTHENTICATION_FAILED).
    fn refusal(&self) -> Option<&str> {
        None
    }
}

/// SaslAuthenticate rounds allowed before the exchange is abandoned: every
/// mechanism here needs at most three, so more means a confused broker.
const MAX_ROUNDS: usize = 8;

/// Authenticates `conn` (fresh, nothing else in flight). Returns the session
/// lifetime the broker granted (KIP-368), if any.
pub async fn authenticate(conn: &Connection, cfg: &SaslConfig) -> Result<Option<Duration>> {
    let mechanism = cfg.mechanism.name();
    let fail = |reason: String| Error::Authentication {
        broker: conn.origin().clone(),
        mechanism: mechanism.to_owned(),
        reason,
    };
    let version = conn.version_for::<SaslHandshakeRequest>(Versions::new(1, 1))?;
    let req = SaslHandshakeRequest::default().with_mechanism(StrBytes::from_static_str(mechanism));
    let resp = conn.send_at(&req, version).await?;
    if let Some(code) = KafkaCode::from_code(resp.error_code) {
        let enabled: Vec<&str> = resp.mechanisms.iter().map(|m| m.as_str()).collect();
        return Err(fail(format!(
            "SaslHandshake: {code}; the listener enables [{}]",
            enabled.join(", ")
        )));
    }
    let mut exchange: Box<dyn Exchange> = match cfg.mechanism {
        SaslMechanism::Plain => Box::new(plain::Plain::new(&cfg.username, &cfg.password)),
        SaslMechanism::ScramSha256 => Box::new(scram::Scram::new(
            ScramHash::Sha256,
            &cfg.username,
            &cfg.password,
        )),
        SaslMechanism::ScramSha512 => Box::new(scram::Scram::new(
            ScramHash::Sha512,
            &cfg.username,
            &cfg.password,
        )),
        SaslMechanism::OAuthBearer => {
            let provider = cfg
                .token_provider
                .as_ref()
                .ok_or_else(|| fail("no token provider configured".into()))?;
            let token = provider
                .token()
                .await
                .map_err(|e| fail(format!("the token provider failed: {e}")))?;
            Box::new(oauthbearer::OAuthBearer::new(token))
        }
    };
    let version = conn.version_for::<SaslAuthenticateRequest>(Versions::new(0, 2))?;
    let mut server: Option<Bytes> = None;
    let mut lifetime_ms = 0i64;
    for _ in 0..MAX_ROUNDS {
        let bytes = match exchange.step(server.as_deref()).map_err(&fail)? {
            Step::Done => {
                debug!(
                    broker = conn.broker(),
                    mechanism, lifetime_ms, "authenticated"
                );
                return Ok((lifetime_ms > 0).then(|| Duration::from_millis(lifetime_ms as u64)));
            }
            Step::Send(b) => b,
        };
        let req = SaslAuthenticateRequest::default().with_auth_bytes(Bytes::from(bytes));
        let resp = conn.send_at(&req, version).await?;
        if let Some(code) = KafkaCode::from_code(resp.error_code) {
            let msg = resp
                .error_message
                .as_ref()
                .map(|m| m.as_str().to_owned())
                .unwrap_or_default();
            let said = exchange
                .refusal()
                .map(|r| format!("; the server said {r}"))
                .unwrap_or_default();
            return Err(fail(format!("{code}: {msg}{said}")));
        }
        lifetime_ms = resp.session_lifetime_ms;
        server = Some(resp.auth_bytes);
    }
    Err(fail(format!(
        "no outcome after {MAX_ROUNDS} SaslAuthenticate rounds"
    )))
}

/// When to stop using a session of `lifetime` (KIP-368): a random point in
/// 85%..95% of it, so a fleet of connections does not reconnect at once.
pub fn reauth_after(lifetime: Duration) -> Duration {
    let fraction = 0.85 + 0.10 * fastrand::f64();
    lifetime.mul_f64(fraction)
}

/// Parses the user name and password out of a Java `sasl.jaas.config`
/// (`org.apache...PlainLoginModule required username="x" password="y";`).
/// Other options are ignored; errors never quote a value.
pub fn parse_jaas(value: &str) -> std::result::Result<JaasOptions, String> {
    let body = value.trim().trim_end_matches(';');
    let mut parts = body.splitn(3, char::is_whitespace);
    let module = parts.next().unwrap_or_default();
    if module.is_empty() {
        return Err("empty value".into());
    }
    let flag = parts.next().unwrap_or_default();
    if !matches!(flag, "required" | "requisite" | "sufficient" | "optional") {
        return Err("expected `<LoginModule> required key=\"value\" ...;`".into());
    }
    let mut rest = parts.next().unwrap_or_default().trim();
    let mut out = JaasOptions::default();
    while !rest.is_empty() {
        let (key, after) = rest
            .split_once('=')
            .ok_or_else(|| "expected key=\"value\" options".to_owned())?;
        let key = key.trim();
        let after = after.trim_start();
        let (val, remain) = if let Some(quoted) = after.strip_prefix('"') {
            let end = quoted
                .find('"')
                .ok_or_else(|| format!("option `{key}` has an unterminated quote"))?;
            (&quoted[..end], &quoted[end + 1..])
        } else {
            let end = after.find(char::is_whitespace).unwrap_or(after.len());
            (&after[..end], &after[end..])
        };
        match key {
            "username" => out.username = Some(val.to_owned()),
            "password" => out.password = Some(Secret::new(val)),
            "unsecuredLoginStringClaim_sub" => out.unsecured_sub = Some(val.to_owned()),
            "clientId" => out.client_id = Some(val.to_owned()),
            "clientSecret" => out.client_secret = Some(Secret::new(val)),
            "scope" => out.scope = Some(val.to_owned()),
            "awsProfileName" => out.aws_profile = Some(val.to_owned()),
            _ => {
                if let Some(name) = key.strip_prefix("extension_") {
                    out.extensions.push((name.to_owned(), val.to_owned()));
                }
            }
        }
        rest = remain.trim();
    }
    Ok(out)
}

/// The options of a `sasl.jaas.config` value that purekafka uses.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct JaasOptions {
    /// `username="..."`.
    pub username: Option<String>,
    /// `password="..."`.
    pub password: Option<Secret>,
    /// `unsecuredLoginStringClaim_sub="..."` (OAUTHBEARER, tests only).
    pub unsecured_sub: Option<String>,
    /// `clientId="..."` (OIDC client credentials, KIP-768).
    pub client_id: Option<String>,
    /// `clientSecret="..."` (OIDC client credentials).
    pub client_secret: Option<Secret>,
    /// `scope="..."` (OIDC client credentials).
    pub scope: Option<String>,
    /// `extension_NAME="value"` options: SASL extensions (KIP-342).
    pub extensions: Vec<(String, String)>,
    /// `awsProfileName="..."` (MSK IAM).
    pub aws_profile: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secret_debug_is_masked() {
        let s = Secret::new("hunter2");
        assert_eq!(format!("{s:?}"), "***");
        let cfg = SaslConfig {
            mechanism: SaslMechanism::ScramSha256,
            username: "alice".into(),
            password: s,
            token_provider: None,
            login: LoginConfig::default(),
        };
        let dbg = format!("{cfg:?}");
        assert!(!dbg.contains("hunter2"), "{dbg}");
        assert!(dbg.contains("alice"));
    }

    #[test]
    fn mechanisms_parse() {
        assert_eq!(
            SaslMechanism::parse("scram-sha-512"),
            Some(SaslMechanism::ScramSha512)
        );
        assert_eq!(SaslMechanism::parse("GSSAPI"), None);
    }

    #[test]
    fn jaas_config_parses() {
        let j = parse_jaas(
            r#"org.apache.kafka.common.security.scram.ScramLoginModule required username="alice" password="a b;c";"#,
        )
        .unwrap();
        assert_eq!(j.username.as_deref(), Some("alice"));
        assert_eq!(j.password.unwrap().expose(), "a b;c");
        let j = parse_jaas(
            "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required unsecuredLoginStringClaim_sub=\"bob\";",
        )
        .unwrap();
        assert_eq!(j.unsecured_sub.as_deref(), Some("bob"));
        let j = parse_jaas(
            r#"org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required clientId="app" clientSecret="shh" scope="kafka" extension_logicalCluster="lkc-1" extension_identityPoolId="pool-2";"#,
        )
        .unwrap();
        assert_eq!(j.client_id.as_deref(), Some("app"));
        assert_eq!(j.client_secret.unwrap().expose(), "shh");
        assert_eq!(j.scope.as_deref(), Some("kafka"));
        assert_eq!(
            j.extensions,
            vec![
                ("logicalCluster".to_owned(), "lkc-1".to_owned()),
                ("identityPoolId".to_owned(), "pool-2".to_owned())
            ]
        );
        assert!(parse_jaas("Module username=\"x\";").is_err());
        let e = parse_jaas("M required password=\"oops;").unwrap_err();
        assert!(!e.contains("oops"));
    }

    #[test]
    fn reauth_is_before_expiry() {
        for _ in 0..100 {
            let d = reauth_after(Duration::from_secs(100));
            assert!(d >= Duration::from_secs(85) && d <= Duration::from_secs(95));
        }
    }
}
