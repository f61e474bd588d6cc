//! OIDC client credentials for SASL `OAUTHBEARER` (KIP-768, with KIP-1139's
//! `sasl.oauthbearer.client.credentials.*` keys; feature `oauth`).
//!
//! Beside `config` and `http` in the layers: it uses the HTTP client, and
//! `ClientConfigBuilder::build` makes the provider from the settings.
//!
//! Like the Java client's `OAuthBearerLoginCallbackHandler`: POST
//! `grant_type=client_credentials` (and `scope` when set) to
//! `sasl.oauthbearer.token.endpoint.url` with the client id and secret as
//! HTTP Basic credentials (RFC 6749 section 4.4), read `access_token` from
//! the JSON answer, and take the principal (`sub`, or
//! `sasl.oauthbearer.sub.claim.name`) and the expiry (`exp`) from the JWT's
//! claims without checking its signature (the broker does that).
//!
//! The token is cached and fetched again once the refresh point of
//! `login::refresh_at` has passed (`sasl.login.refresh.*`, Java's rule);
//! a failed request is retried with exponential backoff
//! (`sasl.login.retry.backoff.ms` doubling up to `.max.ms`, which also
//! bounds the whole series), and while the cached token has not expired it
//! is used in the meantime. Connections ask for a token when they
//! authenticate, including KIP-368 re-authentication: the broker caps a
//! session at the token's expiry, and the connection is replaced before.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64URL;
use base64::Engine;
use tokio::sync::Mutex;

use crate::error::{Error, Result};
use crate::http::{HttpAuth, HttpBody, HttpClient, HttpConfig};
use crate::net::sasl::login::{self, LoginConfig};
use crate::net::sasl::{OAuthToken, Secret, TokenProvider};

/// The largest token endpoint answer read (an access token plus metadata).
const MAX_RESPONSE_BYTES: usize = 1 << 20;

/// A token and when to replace it.
#[derive(Debug, Clone)]
struct Cached {
    token: Secret,
    /// Seconds since the Unix epoch.
    expires: f64,
    refresh_at: f64,
}

/// A [`TokenProvider`] for OIDC client credentials (KIP-768), built from
/// the Java keys: `sasl.oauthbearer.token.endpoint.url`,
/// `sasl.oauthbearer.client.credentials.client.id` / `.client.secret`
/// (or JAAS `clientId` / `clientSecret`), `sasl.oauthbearer.scope`, JAAS
/// `extension_*` options, and the `sasl.login.*` refresh, retry and timeout
/// settings.
#[derive(Debug)]
pub struct OidcTokenProvider {
    config: LoginConfig,
    url: String,
    http: HttpClient,
    /// Bound on one token fetch, retries included: below the connection
    /// setup timeout the fetch runs under, so this provider's error (naming
    /// the endpoint) is what the user sees, not a bare setup timeout.
    budget: Duration,
    cache: Mutex<Option<Cached>>,
}

impl OidcTokenProvider {
    /// Checks the settings and makes the HTTP client. `Err` names the key.
    /// `setup_timeout` is the connection setup bound
    /// (`socket.connection.setup.timeout.ms`) a token fetch runs under: a
    /// fetch gives up at 80% of it.
    pub fn new(config: LoginConfig, setup_timeout: Duration) -> Result<OidcTokenProvider> {
        let url = config
            .token_endpoint_url
            .clone()
            .ok_or_else(|| Error::config("sasl.oauthbearer.token.endpoint.url", "required"))?;
        if !(url.starts_with("http://") || url.starts_with("https://")) {
            return Err(Error::config(
                "sasl.oauthbearer.token.endpoint.url",
                format!("`{url}` is not an http(s) URL"),
            ));
        }
        if config.client_id.is_empty() {
            return Err(Error::config(
                "sasl.oauthbearer.client.credentials.client.id",
                "required with sasl.oauthbearer.token.endpoint.url (or clientId in sasl.jaas.config)",
            ));
        }
        if config.client_secret.is_empty() {
            return Err(Error::config(
                "sasl.oauthbearer.client.credentials.client.secret",
                "required with sasl.oauthbearer.token.endpoint.url (or clientSecret in sasl.jaas.config)",
            ));
        }
        let http = HttpClient::new(HttpConfig {
            timeout: config.connect_timeout + config.read_timeout,
            max_response_bytes: MAX_RESPONSE_BYTES,
            ..HttpConfig::default()
        })?;
        Ok(OidcTokenProvider {
            config,
            url,
            http,
            budget: setup_timeout.mul_f64(0.8),
            cache: Mutex::new(None),
        })
    }

    /// One token request; `Err` says what went wrong and whether a retry
    /// can help.
    async fn request(&self) -> std::result::Result<Cached, (String, bool)> {
        let mut form = vec![("grant_type".to_owned(), "client_credentials".to_owned())];
        if let Some(scope) = &self.config.scope {
            form.push(("scope".to_owned(), scope.clone()));
        }
        let auth = HttpAuth::Basic {
            user: self.config.client_id.clone(),
            password: self.config.client_secret.clone(),
        };
        let resp = self
            .http
            .post(&self.url, "application/json", &auth, HttpBody::Form(form))
            .await
            .map_err(|e| (e.to_string(), e.is_retriable()))?;
        if !resp.is_success() {
            let retriable = resp.status == 408 || resp.status == 429 || resp.status >= 500;
            return Err((
                format!(
                    "the token endpoint {} answered HTTP {}{}",
                    self.url,
                    resp.status,
                    describe_error(&resp.body)
                ),
                retriable,
            ));
        }
        let access_token = parse_access_token(&resp.body)
            .map_err(|e| (format!("the token endpoint {}: {e}", self.url), false))?;
        let claims = jwt_claims(&access_token, &self.config.sub_claim_name)
            .map_err(|e| (format!("the token from {}: {e}", self.url), false))?;
        let issued = now_secs();
        let refresh_at = login::refresh_at(&self.config, issued, claims.exp, fastrand::f64());
        Ok(Cached {
            token: Secret::new(access_token),
            expires: claims.exp,
            refresh_at,
        })
    }

    /// Requests until success, a non-retriable failure, or the retry budget
    /// (`sasl.login.retry.backoff.max.ms`, and 80% of the connection setup
    /// timeout) is spent.
    async fn fetch(&self) -> std::result::Result<Cached, String> {
        let started = Instant::now();
        let limit = self.config.retry_backoff_max.min(self.budget);
        let mut backoff = self.config.retry_backoff;
        let mut attempts = 0u32;
        loop {
            attempts += 1;
            let left = self.budget.saturating_sub(started.elapsed());
            let outcome = match tokio::time::timeout(left, self.request()).await {
                Ok(outcome) => outcome,
                Err(_) => Err((
                    format!(
                        "the token endpoint {} did not answer within {:?} (80% of socket.connection.setup.timeout.ms, which bounds sign-in)",
                        self.url, self.budget
                    ),
                    true,
                )),
            };
            match outcome {
                Ok(c) => return Ok(c),
                Err((reason, retriable)) => {
                    let spent = started.elapsed();
                    if !retriable || spent + backoff > limit {
                        let hint = if retriable {
                            format!(
                                "; gave up after {attempts} attempt(s) in {spent:?} (sasl.login.retry.backoff.max.ms, socket.connection.setup.timeout.ms)"
                            )
                        } else {
                            " (not retriable: check the client id and secret, the scope and sasl.oauthbearer.token.endpoint.url)".to_owned()
                        };
                        return Err(format!("{reason}{hint}"));
                    }
                    tracing::debug!(url = %self.url, attempts, ?backoff, %reason, "token request failed; retrying");
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(self.config.retry_backoff_max);
                }
            }
        }
    }
}

#[async_trait::async_trait]
impl TokenProvider for OidcTokenProvider {
    async fn token(&self) -> std::result::Result<OAuthToken, String> {
        // One request at a time: connections that ask together share it.
        let mut cache = self.cache.lock().await;
        let now = now_secs();
        let current = cache.as_ref().filter(|c| now < c.expires).cloned();
        let token = match current {
            Some(c) if now < c.refresh_at => c.token,
            _ => match self.fetch().await {
                Ok(fresh) => {
                    let token = fresh.token.clone();
                    *cache = Some(fresh);
                    token
                }
                // Java keeps a credential until it expires when a refresh
                // fails; so does this provider.
                Err(reason) => match current {
                    Some(c) => {
                        tracing::warn!(url = %self.url, %reason, "token refresh failed; using the current token until it expires");
                        c.token
                    }
                    None => return Err(reason),
                },
            },
        };
        Ok(OAuthToken {
            value: token,
            extensions: self.config.extensions.clone(),
        })
    }
}

fn now_secs() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or(Duration::ZERO)
        .as_secs_f64()
}

/// ` (error: reason)` from an RFC 6749 section 5.2 error body, else a short
/// printable prefix of the body, else nothing.
fn describe_error(body: &[u8]) -> String {
    if let Ok(v) = serde_json::from_slice::<serde_json::Value>(body) {
        let field = |k: &str| v.get(k).and_then(|x| x.as_str()).map(str::to_owned);
        if let Some(code) = field("error") {
            return match field("error_description") {
                Some(d) => format!(" ({code}: {})", truncate(&d)),
                None => format!(" ({code})"),
            };
        }
    }
    let text = String::from_utf8_lossy(body);
    let text = text.trim();
    if text.is_empty() {
        String::new()
    } else {
        format!(" ({})", truncate(text))
    }
}

fn truncate(s: &str) -> String {
    const MAX: usize = 200;
    let cleaned: String = s.chars().filter(|c| !c.is_control()).take(MAX).collect();
    if s.chars().count() > MAX {
        format!("{cleaned}...")
    } else {
        cleaned
    }
}

/// `access_token` of a token endpoint's JSON answer.
fn parse_access_token(body: &[u8]) -> std::result::Result<String, String> {
    let v: serde_json::Value =
        serde_json::from_slice(body).map_err(|e| format!("the answer is not JSON: {e}"))?;
    match v.get("access_token").and_then(|t| t.as_str()) {
        Some(t) if !t.is_empty() => Ok(t.to_owned()),
        _ => Err("the answer has no access_token".into()),
    }
}

/// The claims purekafka needs from a JWT.
#[derive(Debug, PartialEq)]
struct Claims {
    sub: String,
    exp: f64,
}

/// Reads `exp` and the subject claim from a compact JWS (header.payload.sig)
/// without verifying it, as Java's `LoginAccessTokenValidator` does.
fn jwt_claims(token: &str, sub_claim: &str) -> std::result::Result<Claims, String> {
    let parts: Vec<&str> = token.split('.').collect();
    if parts.len() != 3 {
        return Err(format!(
            "not a JWT (expected 3 dot-separated parts, found {})",
            parts.len()
        ));
    }
    let payload = B64URL
        .decode(parts[1].trim_end_matches('='))
        .map_err(|_| "the JWT payload is not base64url".to_owned())?;
    let v: serde_json::Value =
        serde_json::from_slice(&payload).map_err(|_| "the JWT payload is not JSON".to_owned())?;
    let exp = v
        .get("exp")
        .and_then(|e| e.as_f64())
        .ok_or_else(|| "the JWT has no numeric `exp` claim".to_owned())?;
    let sub = match v.get(sub_claim).and_then(|s| s.as_str()) {
        Some(s) if !s.trim().is_empty() => s.to_owned(),
        _ => {
            return Err(format!(
                "the JWT has no `{sub_claim}` claim (sasl.oauthbearer.sub.claim.name)"
            ))
        }
    };
    if exp <= now_secs() {
        return Err(format!("the JWT expired already (exp {exp})"));
    }
    Ok(Claims { sub, exp })
}

#[cfg(test)]
mod tests {
    use super::*;

    const SETUP: Duration = Duration::from_secs(10);

    fn jwt(claims: &str) -> String {
        format!(
            "{}.{}.c2ln",
            B64URL.encode(br#"{"alg":"ES256","typ":"JWT"}"#),
            B64URL.encode(claims)
        )
    }

    #[test]
    fn claims_are_read_from_the_payload() {
        // Whole seconds, as identity providers write `exp`: a fraction's
        // decimal form need not parse back to the same f64 bits.
        let exp = (now_secs() + 60.0).floor();
        let c = jwt_claims(&jwt(&format!(r#"{{"sub":"app-1","exp":{exp}}}"#)), "sub").unwrap();
        assert_eq!(c.sub, "app-1");
        assert_eq!(c.exp, exp);
        let c = jwt_claims(
            &jwt(&format!(r#"{{"client_id":"x","exp":{exp}}}"#)),
            "client_id",
        );
        assert_eq!(c.unwrap().sub, "x");
    }

    #[test]
    fn bad_tokens_are_refused_with_a_reason() {
        let exp = now_secs() + 60.0;
        assert!(jwt_claims("opaque-token", "sub")
            .unwrap_err()
            .contains("not a JWT"));
        assert!(jwt_claims("a.%%%.c", "sub")
            .unwrap_err()
            .contains("base64url"));
        assert!(jwt_claims(&jwt(r#"{"sub":"a"}"#), "sub")
            .unwrap_err()
            .contains("exp"));
        let e = jwt_claims(&jwt(&format!(r#"{{"exp":{exp}}}"#)), "sub").unwrap_err();
        assert!(e.contains("`sub`"), "{e}");
        let e = jwt_claims(&jwt(r#"{"sub":"a","exp":1000}"#), "sub").unwrap_err();
        assert!(e.contains("expired"), "{e}");
    }

    #[test]
    fn endpoint_answers_are_parsed_and_errors_described() {
        assert_eq!(
            parse_access_token(br#"{"access_token":"t","token_type":"Bearer","expires_in":30}"#),
            Ok("t".to_owned())
        );
        assert!(parse_access_token(b"<html>").is_err());
        assert!(parse_access_token(br#"{"token_type":"Bearer"}"#).is_err());
        assert_eq!(
            describe_error(br#"{"error":"invalid_client","error_description":"bad secret"}"#),
            " (invalid_client: bad secret)"
        );
        assert_eq!(describe_error(b""), "");
        assert_eq!(describe_error(&[b'x'; 500]).len(), 2 + 200 + 3 + 1);
    }

    #[test]
    fn settings_are_checked() {
        let mut c = LoginConfig {
            token_endpoint_url: Some("ftp://x".into()),
            ..LoginConfig::default()
        };
        let e = OidcTokenProvider::new(c.clone(), SETUP).unwrap_err();
        assert!(
            e.to_string()
                .contains("sasl.oauthbearer.token.endpoint.url"),
            "{e}"
        );
        c.token_endpoint_url = Some("http://127.0.0.1:1/token".into());
        let e = OidcTokenProvider::new(c.clone(), SETUP).unwrap_err();
        assert!(e.to_string().contains("client.id"), "{e}");
        c.client_id = "id".into();
        let e = OidcTokenProvider::new(c.clone(), SETUP).unwrap_err();
        assert!(e.to_string().contains("client.secret"), "{e}");
        c.client_secret = Secret::new("s");
        assert!(OidcTokenProvider::new(c, SETUP).is_ok());
    }

    #[tokio::test]
    async fn unreachable_endpoint_fails_within_the_retry_budget() {
        // A port nothing listens on: connection refused, retriable, so the
        // provider retries until sasl.login.retry.backoff.max.ms is spent.
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        drop(listener);
        let p = OidcTokenProvider::new(
            LoginConfig {
                token_endpoint_url: Some(format!("http://127.0.0.1:{port}/token")),
                client_id: "id".into(),
                client_secret: Secret::new("s"),
                retry_backoff: Duration::from_millis(50),
                retry_backoff_max: Duration::from_millis(400),
                ..LoginConfig::default()
            },
            SETUP,
        )
        .unwrap();
        let started = Instant::now();
        let e = p.token().await.unwrap_err();
        let took = started.elapsed();
        assert!(e.contains(&format!("127.0.0.1:{port}")), "{e}");
        assert!(e.contains("gave up after"), "{e}");
        assert!(took < Duration::from_secs(3), "{took:?}");
        assert!(took >= Duration::from_millis(150), "{took:?}");
    }

    #[tokio::test]
    async fn a_silent_endpoint_is_cut_below_the_setup_timeout() {
        // Accepts and never answers; Java-sized timeouts (10 s + 10 s) would
        // outlast a 1 s connection setup, so the setup budget cuts it.
        let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/token", silent.local_addr().unwrap());
        let p = OidcTokenProvider::new(
            LoginConfig {
                token_endpoint_url: Some(url.clone()),
                client_id: "id".into(),
                client_secret: Secret::new("s"),
                ..LoginConfig::default()
            },
            Duration::from_secs(1),
        )
        .unwrap();
        let started = Instant::now();
        let e = p.token().await.unwrap_err();
        let took = started.elapsed();
        assert!(e.contains(&url) && e.contains("did not answer"), "{e}");
        assert!(
            took >= Duration::from_millis(750) && took < Duration::from_millis(1500),
            "{took:?}"
        );
    }
}
