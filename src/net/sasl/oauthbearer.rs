//! SASL `OAUTHBEARER` (KIP-255, RFC 7628): the client sends
//! `n,,\x01auth=Bearer <token>\x01[key=value\x01]*\x01`. The broker answers
//! success with no bytes; on failure it sends a JSON error as a challenge,
//! the client answers `\x01`, and the broker then fails the exchange.
//!
//! Tokens come from a [`TokenProvider`], asked once per connection. For
//! tests against Kafka's default (unsecured) validator, [`UnsecuredJwt`]
//! makes the `alg: none` tokens of Kafka's `unsecuredLoginStringClaim_sub`.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64URL;
use base64::Engine;

use super::{Exchange, Secret, Step};

/// A bearer token and its SASL extensions (KIP-342).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OAuthToken {
    /// The compact token (usually a JWT).
    pub value: Secret,
    /// `key=value` SASL extensions sent with the token.
    pub extensions: Vec<(String, String)>,
}

/// Supplies OAUTHBEARER tokens; asked once for every new connection, so a
/// provider should cache and refresh tokens itself. Errors are shown to the
/// user: they must not contain the token.
///
/// Written with [`async_trait`](async_trait::async_trait), so an
/// implementation is a plain `async fn` and the trait stays object-safe
/// (`Arc<dyn TokenProvider>`); the one box per call is irrelevant on a path
/// taken once per connection.
///
/// ```
/// use purekafka::net::sasl::{OAuthToken, Secret, TokenProvider};
///
/// #[derive(Debug)]
/// struct Fixed(String);
///
/// #[purekafka::async_trait]
/// impl TokenProvider for Fixed {
///     async fn token(&self) -> Result<OAuthToken, String> {
///         Ok(OAuthToken { value: Secret::new(self.0.clone()), extensions: Vec::new() })
///     }
/// }
/// ```
#[async_trait::async_trait]
pub trait TokenProvider: Send + Sync + std::fmt::Debug {
    /// A currently valid token, or why none can be had (shown to the user).
    ///
    /// Written as `async fn token(&self) -> Result<OAuthToken, String>` (rustdoc
    /// shows the boxed form `#[async_trait]` expands it to).
    async fn token(&self) -> std::result::Result<OAuthToken, String>;
}

/// Unsecured JWTs (`{"alg":"none"}`, empty signature) for Kafka's default
/// OAUTHBEARER validator. **For tests only**: anyone can mint these.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnsecuredJwt {
    /// The `sub` claim: the principal name.
    pub subject: String,
    /// Lifetime of each token (`exp` - `iat`).
    pub lifetime: Duration,
}

#[async_trait::async_trait]
impl TokenProvider for UnsecuredJwt {
    async fn token(&self) -> std::result::Result<OAuthToken, String> {
        Ok(OAuthToken {
            value: unsecured_jwt(&self.subject, self.lifetime),
            extensions: Vec::new(),
        })
    }
}

/// An unsecured JWT for `subject`, issued now, valid for `lifetime`.
pub fn unsecured_jwt(subject: &str, lifetime: Duration) -> Secret {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs_f64();
    let exp = now + lifetime.as_secs_f64();
    let header = B64URL.encode(br#"{"alg":"none"}"#);
    let claims = format!(
        r#"{{"iat":{now:.3},"exp":{exp:.3},"sub":{}}}"#,
        json_string(subject)
    );
    Secret::new(format!("{header}.{}.", B64URL.encode(claims)))
}

fn json_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

enum State {
    Initial(OAuthToken),
    Sent,
    /// The server sent an error challenge; we answered `\x01`.
    Failed(String),
    Finished,
}

pub(super) struct OAuthBearer {
    state: State,
}

impl OAuthBearer {
    pub(super) fn new(token: OAuthToken) -> OAuthBearer {
        OAuthBearer {
            state: State::Initial(token),
        }
    }
}

impl Exchange for OAuthBearer {
    fn step(&mut self, server: Option<&[u8]>) -> Result<Step, String> {
        match (std::mem::replace(&mut self.state, State::Finished), server) {
            (State::Initial(token), None) => {
                let mut m = format!("n,,\x01auth=Bearer {}\x01", token.value.expose());
                for (k, v) in &token.extensions {
                    m.push_str(&format!("{k}={v}\x01"));
                }
                m.push('\x01');
                self.state = State::Sent;
                Ok(Step::Send(m.into_bytes()))
            }
            (State::Sent, Some([])) => Ok(Step::Done),
            (State::Sent, Some(challenge)) => {
                // RFC 7628 3.2.2: acknowledge the error with a single %x01.
                let reason = String::from_utf8_lossy(challenge).into_owned();
                self.state = State::Failed(reason);
                Ok(Step::Send(vec![1]))
            }
            (State::Failed(reason), _) => Err(format!("the broker refused the token: {reason}")),
            _ => Err("unexpected OAUTHBEARER exchange state".into()),
        }
    }

    fn refusal(&self) -> Option<&str> {
        match &self.state {
            State::Failed(challenge) => Some(challenge),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unsecured_token_shape() {
        let t = unsecured_jwt("ali\"ce", Duration::from_secs(60));
        let parts: Vec<&str> = t.expose().split('.').collect();
        assert_eq!(parts.len(), 3);
        assert_eq!(parts[2], "");
        assert_eq!(B64URL.decode(parts[0]).unwrap(), br#"{"alg":"none"}"#);
        let claims = String::from_utf8(B64URL.decode(parts[1]).unwrap()).unwrap();
        assert!(claims.contains(r#""sub":"ali\"ce""#), "{claims}");
        assert!(claims.contains(r#""exp":"#));
    }

    #[test]
    fn exchange_success_and_failure() {
        let token = OAuthToken {
            value: Secret::new("tok"),
            extensions: vec![("k".into(), "v".into())],
        };
        let mut ok = OAuthBearer::new(token.clone());
        assert_eq!(
            ok.step(None).unwrap(),
            Step::Send(b"n,,\x01auth=Bearer tok\x01k=v\x01\x01".to_vec())
        );
        assert_eq!(ok.step(Some(b"")).unwrap(), Step::Done);
        let mut bad = OAuthBearer::new(token);
        bad.step(None).unwrap();
        assert_eq!(
            bad.step(Some(br#"{"status":"invalid_token"}"#)).unwrap(),
            Step::Send(vec![1])
        );
        assert!(bad.step(Some(b"")).unwrap_err().contains("invalid_token"));
    }

    #[test]
    fn any_server_challenge_ends_in_a_refusal() {
        let token = OAuthToken {
            value: Secret::new("tok"),
            extensions: Vec::new(),
        };
        for challenge in [&b"\xff\xfe"[..], b"{", &[0u8; 4096][..]] {
            let mut x = OAuthBearer::new(token.clone());
            x.step(None).unwrap();
            assert_eq!(x.step(Some(challenge)).unwrap(), Step::Send(vec![1]));
            assert!(x.step(Some(b"")).is_err());
            // The exchange is over; nothing the server says revives it.
            assert!(x.step(Some(b"")).is_err());
        }
    }
}
