//! The `sasl.login.*` and `sasl.oauthbearer.*` client settings of the Java
//! client, with its defaults and ranges: where OAUTHBEARER tokens come from
//! (an OIDC token endpoint, KIP-768 and KIP-1139; or Amazon MSK IAM) and
//! when a token is refreshed (KIP-368's `ExpiringCredentialRefreshingLogin`
//! settings).
//!
//! These are plain settings with no I/O; the providers that use them live
//! in `oidc` (feature `oauth`) and `msk_iam` (feature `aws-msk-iam`).

use std::time::Duration;

use super::Secret;

/// The Java class name of Amazon's MSK IAM login callback handler
/// (`aws-msk-iam-auth`); as `sasl.login.callback.handler.class` it selects
/// [`MskIamTokenProvider`](super::msk_iam::MskIamTokenProvider)
/// (feature `aws-msk-iam`).
pub const MSK_IAM_CALLBACK_HANDLER: &str =
    "software.amazon.msk.auth.iam.IAMOAuthBearerLoginCallbackHandler";

/// Java's OIDC login callback handlers (4.x and the older `secured`
/// package); as `sasl.login.callback.handler.class` they need
/// `sasl.oauthbearer.token.endpoint.url` (feature `oauth`).
pub const OIDC_CALLBACK_HANDLERS: [&str; 2] = [
    "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginCallbackHandler",
    "org.apache.kafka.common.security.oauthbearer.secured.OAuthBearerLoginCallbackHandler",
];

/// Token source and refresh settings (Java names and defaults).
#[derive(Clone, PartialEq)]
pub struct LoginConfig {
    /// `sasl.oauthbearer.token.endpoint.url`: the OIDC token endpoint
    /// (client credentials grant). Feature `oauth`.
    pub token_endpoint_url: Option<String>,
    /// `sasl.oauthbearer.client.credentials.client.id` (or JAAS `clientId`).
    pub client_id: String,
    /// `sasl.oauthbearer.client.credentials.client.secret` (or JAAS
    /// `clientSecret`).
    pub client_secret: Secret,
    /// `sasl.oauthbearer.scope` (or JAAS `scope`): sent as `scope=` when set.
    pub scope: Option<String>,
    /// SASL extensions sent with every token (JAAS `extension_NAME="v"`),
    /// e.g. Confluent Cloud's `logicalCluster` and `identityPoolId` (KIP-342).
    pub extensions: Vec<(String, String)>,
    /// `sasl.oauthbearer.sub.claim.name`: the JWT claim naming the
    /// principal. Default `sub`.
    pub sub_claim_name: String,
    /// `sasl.login.callback.handler.class`, when set.
    pub callback_handler: Option<String>,
    /// JAAS `awsProfileName` (MSK IAM): the shared-files profile to use.
    pub aws_profile: Option<String>,
    /// `sasl.login.refresh.window.factor`: refresh when this fraction of the
    /// token's lifetime has passed (0.5..=1.0). Default 0.8.
    pub refresh_window_factor: f64,
    /// `sasl.login.refresh.window.jitter`: random extra fraction added to
    /// the factor (0.0..=0.25). Default 0.05.
    pub refresh_window_jitter: f64,
    /// `sasl.login.refresh.min.period.seconds`: least time between a
    /// token's issue and its refresh (0..=900 s). Default 60 s.
    pub refresh_min_period: Duration,
    /// `sasl.login.refresh.buffer.seconds`: time kept before expiry when
    /// refreshing (0..=3600 s). Default 300 s.
    pub refresh_buffer: Duration,
    /// `sasl.login.retry.backoff.ms`: first wait after a failed token
    /// request. Default 100 ms.
    pub retry_backoff: Duration,
    /// `sasl.login.retry.backoff.max.ms`: the backoff cap, and the bound on
    /// the time spent retrying one token request. Default 10 s.
    pub retry_backoff_max: Duration,
    /// `sasl.login.connect.timeout.ms`: connecting to the token endpoint.
    /// Java has no default (no bound); purekafka bounds it, default 10 s.
    pub connect_timeout: Duration,
    /// `sasl.login.read.timeout.ms`: reading its answer. Java has no
    /// default; purekafka: 10 s. The HTTP client applies connect + read
    /// timeouts as one bound on the whole request.
    pub read_timeout: Duration,
}

impl Default for LoginConfig {
    fn default() -> Self {
        LoginConfig {
            token_endpoint_url: None,
            client_id: String::new(),
            client_secret: Secret::default(),
            scope: None,
            extensions: Vec::new(),
            sub_claim_name: "sub".into(),
            callback_handler: None,
            aws_profile: None,
            refresh_window_factor: 0.8,
            refresh_window_jitter: 0.05,
            refresh_min_period: Duration::from_secs(60),
            refresh_buffer: Duration::from_secs(300),
            retry_backoff: Duration::from_millis(100),
            retry_backoff_max: Duration::from_millis(10_000),
            connect_timeout: Duration::from_millis(10_000),
            read_timeout: Duration::from_millis(10_000),
        }
    }
}

impl std::fmt::Debug for LoginConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoginConfig")
            .field("token_endpoint_url", &self.token_endpoint_url)
            .field("client_id", &self.client_id)
            .field("client_secret", &self.client_secret)
            .field("scope", &self.scope)
            .field("extensions", &self.extensions)
            .field("callback_handler", &self.callback_handler)
            .field("refresh_window_factor", &self.refresh_window_factor)
            .field("refresh_window_jitter", &self.refresh_window_jitter)
            .field("refresh_min_period", &self.refresh_min_period)
            .field("refresh_buffer", &self.refresh_buffer)
            .field("retry_backoff", &self.retry_backoff)
            .field("retry_backoff_max", &self.retry_backoff_max)
            .finish_non_exhaustive()
    }
}

impl LoginConfig {
    /// Sets one of the keys above from its string form; `None` for other
    /// keys, `Err` (a reason that never quotes a secret) for a bad value.
    pub fn set(&mut self, key: &str, value: &str) -> Option<Result<(), String>> {
        let secs = |lo: u64, hi: u64| -> Result<Duration, String> {
            let n: u64 = value
                .trim()
                .parse()
                .map_err(|_| format!("`{value}` is not a whole number of seconds"))?;
            if !(lo..=hi).contains(&n) {
                return Err(format!("must be in {lo}..={hi}"));
            }
            Ok(Duration::from_secs(n))
        };
        let ms = || -> Result<Duration, String> {
            let n: u64 = value
                .trim()
                .parse()
                .map_err(|_| format!("`{value}` is not a whole number of milliseconds"))?;
            Ok(Duration::from_millis(n))
        };
        let fraction = |lo: f64, hi: f64| -> Result<f64, String> {
            let x: f64 = value
                .trim()
                .parse()
                .map_err(|_| format!("`{value}` is not a number"))?;
            if !(lo..=hi).contains(&x) {
                return Err(format!("must be in {lo}..={hi}"));
            }
            Ok(x)
        };
        Some(match key {
            "sasl.oauthbearer.token.endpoint.url" => {
                self.token_endpoint_url = Some(value.trim().to_owned());
                Ok(())
            }
            "sasl.oauthbearer.client.credentials.client.id" => {
                self.client_id = value.to_owned();
                Ok(())
            }
            "sasl.oauthbearer.client.credentials.client.secret" => {
                self.client_secret = Secret::new(value);
                Ok(())
            }
            "sasl.oauthbearer.scope" => {
                self.scope = Some(value.to_owned()).filter(|s| !s.is_empty());
                Ok(())
            }
            "sasl.oauthbearer.sub.claim.name" => {
                self.sub_claim_name = value.trim().to_owned();
                Ok(())
            }
            "sasl.login.callback.handler.class" => {
                self.callback_handler = Some(value.trim().to_owned());
                Ok(())
            }
            "sasl.login.refresh.window.factor" => {
                fraction(0.5, 1.0).map(|x| self.refresh_window_factor = x)
            }
            "sasl.login.refresh.window.jitter" => {
                fraction(0.0, 0.25).map(|x| self.refresh_window_jitter = x)
            }
            "sasl.login.refresh.min.period.seconds" => {
                secs(0, 900).map(|d| self.refresh_min_period = d)
            }
            "sasl.login.refresh.buffer.seconds" => secs(0, 3600).map(|d| self.refresh_buffer = d),
            "sasl.login.retry.backoff.ms" => ms().map(|d| self.retry_backoff = d),
            "sasl.login.retry.backoff.max.ms" => ms().map(|d| self.retry_backoff_max = d),
            "sasl.login.connect.timeout.ms" => ms().map(|d| self.connect_timeout = d),
            "sasl.login.read.timeout.ms" => ms().map(|d| self.read_timeout = d),
            _ => return None,
        })
    }
}

/// When to refresh a token valid from `issued` to `expires` (seconds since
/// any epoch), with `random` in `0.0..1.0`: the Java client's rule
/// (`ExpiringCredentialRefreshingLogin`):
///
/// - at `factor + jitter * random` of the lifetime;
/// - if the token lives less than the minimum period, the minimum period
///   and the buffer are ignored (refresh at that fraction anyway);
/// - otherwise never sooner than `issued + min_period`, and moved earlier
///   to keep `buffer` before expiry, as far as the minimum period allows.
#[cfg(any(feature = "oauth", test))]
pub fn refresh_at(cfg: &LoginConfig, issued: f64, expires: f64, random: f64) -> f64 {
    let lifetime = (expires - issued).max(0.0);
    let fraction = cfg.refresh_window_factor + cfg.refresh_window_jitter * random;
    let proposed = issued + lifetime * fraction;
    let min_period = cfg.refresh_min_period.as_secs_f64();
    if lifetime < min_period {
        return proposed;
    }
    let earliest = issued + min_period;
    let buffer_start = expires - cfg.refresh_buffer.as_secs_f64();
    proposed.min(buffer_start).max(earliest)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_parse_with_java_ranges() {
        let mut c = LoginConfig::default();
        assert_eq!(
            c.set("sasl.login.refresh.window.factor", "0.9"),
            Some(Ok(()))
        );
        assert!(c
            .set("sasl.login.refresh.window.factor", "0.4")
            .unwrap()
            .is_err());
        assert!(c
            .set("sasl.login.refresh.window.jitter", "0.3")
            .unwrap()
            .is_err());
        assert!(c
            .set("sasl.login.refresh.min.period.seconds", "901")
            .unwrap()
            .is_err());
        assert!(c
            .set("sasl.login.refresh.buffer.seconds", "3601")
            .unwrap()
            .is_err());
        assert_eq!(
            c.set("sasl.login.retry.backoff.max.ms", "2500"),
            Some(Ok(()))
        );
        assert_eq!(c.retry_backoff_max, Duration::from_millis(2500));
        assert_eq!(
            c.set(
                "sasl.oauthbearer.client.credentials.client.secret",
                "s3cret"
            ),
            Some(Ok(()))
        );
        assert!(!format!("{c:?}").contains("s3cret"));
        assert_eq!(c.set("sasl.mechanism", "PLAIN"), None);
    }

    #[track_caller]
    fn close(a: f64, b: f64) {
        assert!((a - b).abs() < 1e-6, "{a} != {b}");
    }

    #[test]
    fn refresh_follows_factor_buffer_and_min_period() {
        let c = LoginConfig::default();
        // One hour token: 80%..85% = 2880..3060 s, buffer 300 s leaves
        // up to 3300 s, so the factor decides.
        close(refresh_at(&c, 0.0, 3600.0, 0.0), 2880.0);
        close(refresh_at(&c, 0.0, 3600.0, 1.0), 3060.0);
        // Ten minutes: 480 s proposed, the buffer moves it to 300 s.
        close(refresh_at(&c, 0.0, 600.0, 0.0), 300.0);
        // Two minutes: the buffer would say before issue, the minimum
        // period (60 s) holds.
        close(refresh_at(&c, 0.0, 120.0, 0.0), 60.0);
        // 25 s, below the minimum period: the fraction alone (20..21.25 s).
        close(refresh_at(&c, 100.0, 125.0, 0.0), 120.0);
        close(refresh_at(&c, 100.0, 125.0, 1.0), 121.25);
    }
}
