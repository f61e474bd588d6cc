//! Amazon MSK IAM sign-in over SASL `OAUTHBEARER` (feature `aws-msk-iam`).
//!
//! The token is what AWS's `aws-msk-iam-sasl-signer-*` libraries make: a
//! SigV4-presigned URL `https://kafka.<region>.amazonaws.com/?Action=kafka-cluster%3AConnect`
//! (service `kafka-cluster`, `X-Amz-Expires=900`, signed header `host`), to
//! which a `User-Agent` query parameter is appended after signing, encoded
//! as URL-safe base64 without padding. The broker checks the signature and
//! the IAM policy for `kafka-cluster:Connect`; the session lifetime it grants
//! is the token's (KIP-368 re-authentication then dials a new connection with
//! a fresh token).
//!
//! The signer is hand-written (about 150 lines over `sha2`/`hmac`, already
//! dependencies) rather than the `aws-sigv4` crate, which would bring the
//! AWS smithy runtime and `http` types for one presigned GET.
//!
//! Tested against AWS's SigV4 test suite and against tokens made by
//! botocore for a fixed clock and fixed credentials (`testdata/README.md`);
//! not tested against a real MSK cluster.

mod credentials;
pub mod sigv4;

use std::time::{Duration, SystemTime};

use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64URL;
use base64::Engine;

pub use credentials::AwsCredentials;
use credentials::Sources;

use super::{OAuthToken, Secret, TokenProvider};

/// How long an MSK IAM token is valid (`X-Amz-Expires`), as the AWS signers.
pub const TOKEN_LIFETIME: Duration = Duration::from_secs(900);

/// The signing service name of MSK IAM.
const SERVICE: &str = "kafka-cluster";

/// The `User-Agent` parameter: names this client to the broker's logs.
const USER_AGENT: &str = concat!("purekafka/", env!("CARGO_PKG_VERSION"));

/// An MSK IAM token for `region`, signed with `creds` at `now` (the
/// presigned URL's `X-Amz-Date`), and the instant it expires.
pub fn msk_iam_token(
    region: &str,
    creds: &AwsCredentials,
    now: SystemTime,
) -> Result<(Secret, SystemTime), String> {
    let url = presigned_url(region, creds, now, USER_AGENT)?;
    Ok((Secret::new(B64URL.encode(url)), now + TOKEN_LIFETIME))
}

/// The presigned URL before base64: query parameters in the order botocore
/// emits them (the order does not matter to the broker; it lets tests
/// compare whole strings with botocore's).
fn presigned_url(
    region: &str,
    creds: &AwsCredentials,
    now: SystemTime,
    user_agent: &str,
) -> Result<String, String> {
    check_region(region)?;
    if creds.access_key_id.is_empty() || creds.secret_access_key.is_empty() {
        return Err("the AWS access key id or secret access key is empty".into());
    }
    let host = format!("kafka.{region}.amazonaws.com");
    let amz_date = sigv4::amz_date(now);
    let date = &amz_date[..8];
    let scope = sigv4::scope(date, region, SERVICE);
    let credential = format!("{}/{scope}", creds.access_key_id);
    let expires = TOKEN_LIFETIME.as_secs().to_string();
    let mut params: Vec<(&str, &str)> = vec![
        ("Action", "kafka-cluster:Connect"),
        ("X-Amz-Algorithm", sigv4::ALGORITHM),
        ("X-Amz-Credential", &credential),
        ("X-Amz-Date", &amz_date),
        ("X-Amz-Expires", &expires),
        ("X-Amz-SignedHeaders", "host"),
    ];
    if let Some(token) = &creds.session_token {
        params.push(("X-Amz-Security-Token", token.expose()));
    }
    let headers = [("host", host.as_str())];
    let creq = sigv4::canonical_request("GET", "/", &params, &headers, &sigv4::sha256_hex(b""));
    let sts = sigv4::string_to_sign(&amz_date, &scope, &creq);
    let signature = sigv4::signature(
        creds.secret_access_key.expose(),
        date,
        region,
        SERVICE,
        &sts,
    );
    params.push(("X-Amz-Signature", &signature));
    params.push(("User-Agent", user_agent));
    let query = params
        .iter()
        .map(|(k, v)| format!("{}={}", sigv4::uri_encode(k), sigv4::uri_encode(v)))
        .collect::<Vec<_>>()
        .join("&");
    Ok(format!("https://{host}/?{query}"))
}

/// A region goes into a host name: only `[a-z0-9-]` is accepted.
fn check_region(region: &str) -> Result<(), String> {
    if region.is_empty()
        || !region
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
    {
        return Err(format!(
            "`{region}` is not an AWS region name (like us-east-1)"
        ));
    }
    Ok(())
}

/// Where an [`MskIamTokenProvider`] takes its credentials from.
#[derive(Debug, Clone)]
enum Source {
    /// The environment, then the shared files' profile (re-read for every
    /// token, so rotated files are picked up).
    Chain { profile: Option<String> },
    /// Fixed credentials.
    Static(AwsCredentials),
}

/// A [`TokenProvider`] for Amazon MSK IAM access control: signs a fresh
/// token for every new connection (HMAC only, no network call).
///
/// ```
/// use std::sync::Arc;
/// use purekafka::{ClientConfig, MskIamTokenProvider, SaslMechanism, SecurityProtocol};
///
/// # fn main() -> purekafka::Result<()> {
/// let config = ClientConfig::builder()
///     .bootstrap_servers("b-1.example.kafka.us-east-1.amazonaws.com:9098")
///     .security_protocol(SecurityProtocol::SaslSsl)
///     .sasl_mechanism(SaslMechanism::OAuthBearer)
///     .sasl_token_provider(Arc::new(MskIamTokenProvider::new("us-east-1")?));
/// # let _ = config;
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct MskIamTokenProvider {
    region: String,
    source: Source,
}

impl MskIamTokenProvider {
    /// Signs for `region` with credentials from the environment, then the
    /// shared files' profile (`AWS_PROFILE`, default `default`).
    pub fn new(region: impl Into<String>) -> crate::Result<MskIamTokenProvider> {
        let region = region.into();
        check_region(&region).map_err(|r| crate::Error::config("aws region", r))?;
        Ok(MskIamTokenProvider {
            region,
            source: Source::Chain { profile: None },
        })
    }

    /// Region from `AWS_REGION`, `AWS_DEFAULT_REGION` or the profile's
    /// `region`; credentials from the chain, with `profile` (else
    /// `AWS_PROFILE`) for the shared files.
    pub fn from_environment(profile: Option<String>) -> crate::Result<MskIamTokenProvider> {
        let sources = Sources::process();
        let region = sources.region(profile.as_deref()).ok_or_else(|| {
            crate::Error::config(
                "sasl.login.callback.handler.class",
                "MSK IAM needs a region: set AWS_REGION (or AWS_DEFAULT_REGION, or `region` in the profile of ~/.aws/config)",
            )
        })?;
        check_region(&region).map_err(|r| crate::Error::config("AWS_REGION", r))?;
        Ok(MskIamTokenProvider {
            region,
            source: Source::Chain { profile },
        })
    }

    /// Uses the shared files' `profile` instead of `AWS_PROFILE` (the
    /// environment's keys are then skipped, as in the AWS SDKs).
    pub fn with_profile(mut self, profile: impl Into<String>) -> Self {
        self.source = Source::Chain {
            profile: Some(profile.into()),
        };
        self
    }

    /// Uses fixed credentials.
    pub fn with_credentials(mut self, credentials: AwsCredentials) -> Self {
        self.source = Source::Static(credentials);
        self
    }

    /// The region tokens are signed for.
    pub fn region(&self) -> &str {
        &self.region
    }
}

#[async_trait::async_trait]
impl TokenProvider for MskIamTokenProvider {
    async fn token(&self) -> Result<OAuthToken, String> {
        let creds = match &self.source {
            Source::Static(c) => c.clone(),
            // A few small local files, read once per new connection.
            Source::Chain { profile } => Sources::process().credentials(profile.as_deref())?,
        };
        let (value, _expires) = msk_iam_token(&self.region, &creds, SystemTime::now())
            .map_err(|e| format!("MSK IAM token for region {}: {e}", self.region))?;
        Ok(OAuthToken {
            value,
            extensions: Vec::new(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::UNIX_EPOCH;

    const PYTHON_AGENT: &str = "aws-msk-iam-sasl-signer-python/1.0.1";

    fn fixture_creds(session: Option<&str>) -> AwsCredentials {
        AwsCredentials {
            access_key_id: "AKIDEXAMPLE".into(),
            secret_access_key: Secret::new("wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"),
            session_token: session.map(Secret::new),
        }
    }

    /// 2026-11-30T12:00:00Z, the clock the fixtures were made at.
    fn fixture_time() -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(1_796_040_000)
    }

    #[test]
    fn same_url_as_botocore_without_session_token() {
        let url = presigned_url(
            "us-west-2",
            &fixture_creds(None),
            fixture_time(),
            PYTHON_AGENT,
        )
        .unwrap();
        assert_eq!(url, include_str!("testdata/msk-token.url").trim_end());
    }

    #[test]
    fn same_token_as_botocore_with_session_token() {
        let creds = fixture_creds(Some("TEST-SESSION-TOKEN/with+slash="));
        let url = presigned_url("us-west-2", &creds, fixture_time(), PYTHON_AGENT).unwrap();
        assert_eq!(
            url,
            include_str!("testdata/msk-token-session.url").trim_end()
        );
        assert_eq!(
            B64URL.encode(&url),
            include_str!("testdata/msk-token-session.b64").trim_end()
        );
    }

    #[test]
    fn token_is_unpadded_base64url_with_our_agent_and_expiry() {
        let (token, expires) =
            msk_iam_token("eu-central-1", &fixture_creds(None), fixture_time()).unwrap();
        assert!(!token.expose().contains(['=', '+', '/']));
        let url = String::from_utf8(B64URL.decode(token.expose()).unwrap()).unwrap();
        assert!(url.starts_with(
            "https://kafka.eu-central-1.amazonaws.com/?Action=kafka-cluster%3AConnect&"
        ));
        assert!(url.ends_with(&format!(
            "&User-Agent=purekafka%2F{}",
            env!("CARGO_PKG_VERSION")
        )));
        assert!(url.contains(
            "X-Amz-Credential=AKIDEXAMPLE%2F20261130%2Feu-central-1%2Fkafka-cluster%2Faws4_request"
        ));
        assert_eq!(expires, fixture_time() + Duration::from_secs(900));
    }

    #[test]
    fn bad_inputs_are_refused_without_quoting_secrets() {
        let e = presigned_url(
            "us-east-1.evil.com/x",
            &fixture_creds(None),
            fixture_time(),
            "a",
        )
        .unwrap_err();
        assert!(e.contains("region"), "{e}");
        let mut c = fixture_creds(None);
        c.secret_access_key = Secret::default();
        assert!(presigned_url("us-east-1", &c, fixture_time(), "a").is_err());
        assert!(MskIamTokenProvider::new("US_EAST").is_err());
    }

    #[tokio::test]
    async fn provider_signs_with_static_credentials() {
        let p = MskIamTokenProvider::new("us-west-2")
            .unwrap()
            .with_credentials(fixture_creds(Some("tok")));
        let t = p.token().await.unwrap();
        let url = String::from_utf8(B64URL.decode(t.value.expose()).unwrap()).unwrap();
        assert!(url.contains("X-Amz-Security-Token=tok&"), "{url}");
        assert!(t.extensions.is_empty());
        assert!(!format!("{p:?}").contains("wJalr"));
    }
}
