//! SASL on the fake's listeners, as a Kafka `SASL_PLAINTEXT` listener
//! does it: SaslHandshake v1 names the mechanism (KIP-43), then
//! SaslAuthenticate carries each step of the exchange (KIP-152). PLAIN
//! (RFC 4616) and SCRAM-SHA-256/512 (RFC 5802, RFC 7677; Kafka's KIP-84)
//! with credentials stored per mechanism, as Kafka stores them.
//!
//! Before authentication a connection may send only ApiVersions,
//! SaslHandshake and SaslAuthenticate, in that order; anything else closes
//! it (Kafka's `IllegalSaslStateException`). A failed authentication is
//! answered with `SASL_AUTHENTICATION_FAILED` and then the connection is
//! closed, as Kafka does. The per-connection state is a plain struct: a
//! request in, a [`Gate`] out.

use std::collections::BTreeMap;

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine;
use bytes::Bytes;
use hmac::{Hmac, Mac};
use kafka_protocol::messages::{SaslAuthenticateResponse, SaslHandshakeResponse};
use kafka_protocol::protocol::StrBytes;
use sha2::{Digest, Sha256, Sha512};

use super::errors::Code;
use super::wire::{FakeRequest, FakeResponse};

/// Iterations of the stored SCRAM credentials (Kafka's minimum, 4096).
pub const SCRAM_ITERATIONS: u32 = 4096;

/// A SASL mechanism the fake can enable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum SaslMechanism {
    /// `PLAIN`.
    Plain,
    /// `SCRAM-SHA-256`.
    ScramSha256,
    /// `SCRAM-SHA-512`.
    ScramSha512,
}

impl SaslMechanism {
    /// The mechanism's name on the wire.
    pub fn name(self) -> &'static str {
        match self {
            SaslMechanism::Plain => "PLAIN",
            SaslMechanism::ScramSha256 => "SCRAM-SHA-256",
            SaslMechanism::ScramSha512 => "SCRAM-SHA-512",
        }
    }

    /// The mechanism named `name` (case-sensitive, as Kafka).
    pub fn parse(name: &str) -> Option<SaslMechanism> {
        [
            SaslMechanism::Plain,
            SaslMechanism::ScramSha256,
            SaslMechanism::ScramSha512,
        ]
        .into_iter()
        .find(|m| m.name() == name)
    }

    fn hmac(self, key: &[u8], data: &[u8]) -> Vec<u8> {
        match self {
            SaslMechanism::ScramSha512 => {
                let mut m = <Hmac<Sha512> as Mac>::new_from_slice(key).expect("any key length");
                m.update(data);
                m.finalize().into_bytes().to_vec()
            }
            _ => {
                let mut m = <Hmac<Sha256> as Mac>::new_from_slice(key).expect("any key length");
                m.update(data);
                m.finalize().into_bytes().to_vec()
            }
        }
    }

    fn hash(self, data: &[u8]) -> Vec<u8> {
        match self {
            SaslMechanism::ScramSha512 => Sha512::digest(data).to_vec(),
            _ => Sha256::digest(data).to_vec(),
        }
    }

    fn salted_password(self, password: &[u8], salt: &[u8]) -> Vec<u8> {
        match self {
            SaslMechanism::ScramSha512 => {
                let mut out = vec![0u8; 64];
                pbkdf2::pbkdf2_hmac::<Sha512>(password, salt, SCRAM_ITERATIONS, &mut out);
                out
            }
            _ => {
                let mut out = vec![0u8; 32];
                pbkdf2::pbkdf2_hmac::<Sha256>(password, salt, SCRAM_ITERATIONS, &mut out);
                out
            }
        }
    }
}

/// A SCRAM credential as a broker stores it: never the password.
#[derive(Debug, Clone)]
struct ScramCredential {
    salt: Vec<u8>,
    stored_key: Vec<u8>,
    server_key: Vec<u8>,
}

/// The users of a SASL listener, per mechanism.
#[derive(Debug, Clone, Default)]
pub struct SaslUsers {
    plain: BTreeMap<String, String>,
    scram: BTreeMap<(SaslMechanism, String), ScramCredential>,
}

impl SaslUsers {
    /// Adds (or replaces) `user` for `mechanism`. SCRAM passwords are
    /// salted and hashed here, once, with a fresh salt.
    pub fn add(&mut self, mechanism: SaslMechanism, user: &str, password: &str) {
        match mechanism {
            SaslMechanism::Plain => {
                self.plain.insert(user.to_string(), password.to_string());
            }
            scram => {
                let mut salt = [0u8; 16];
                if getrandom::fill(&mut salt).is_err() {
                    salt = fastrand::u128(..).to_be_bytes();
                }
                let salted = scram.salted_password(password.as_bytes(), &salt);
                let client_key = scram.hmac(&salted, b"Client Key");
                self.scram.insert(
                    (scram, user.to_string()),
                    ScramCredential {
                        salt: salt.to_vec(),
                        stored_key: scram.hash(&client_key),
                        server_key: scram.hmac(&salted, b"Server Key"),
                    },
                );
            }
        }
    }

    /// The mechanisms with at least one user, in a fixed order.
    pub fn mechanisms(&self) -> Vec<SaslMechanism> {
        let mut out = Vec::new();
        if !self.plain.is_empty() {
            out.push(SaslMechanism::Plain);
        }
        for (m, _) in self.scram.keys() {
            if !out.contains(m) {
                out.push(*m);
            }
        }
        out
    }

    /// True when no user is configured (SASL is off).
    pub fn is_empty(&self) -> bool {
        self.plain.is_empty() && self.scram.is_empty()
    }
}

/// What the connection does with a request before authentication.
#[derive(Debug, Clone, PartialEq)]
pub enum Gate {
    /// Serve it as usual (ApiVersions, or any request once authenticated).
    Pass,
    /// Send this answer and keep going.
    Answer(FakeResponse),
    /// Send this answer, then close the connection (failed authentication).
    AnswerAndClose(FakeResponse),
    /// Close without an answer (a request out of turn).
    Close,
}

#[derive(Debug, Clone)]
enum Phase {
    Start,
    Handshaken(SaslMechanism),
    ScramFirstSent {
        mechanism: SaslMechanism,
        user: String,
        client_first_bare: String,
        server_first: String,
        nonce: String,
    },
    /// Authenticated as this user.
    Authenticated(String),
}

/// One connection's SASL state.
#[derive(Debug, Clone)]
pub struct SaslSession {
    phase: Phase,
}

impl Default for SaslSession {
    fn default() -> Self {
        SaslSession {
            phase: Phase::Start,
        }
    }
}

impl SaslSession {
    /// True once the client has authenticated.
    pub fn authenticated(&self) -> bool {
        matches!(self.phase, Phase::Authenticated(_))
    }

    /// The connection's principal as Kafka names it: `User:<name>` once
    /// authenticated, `User:ANONYMOUS` before (or without SASL).
    pub fn principal(&self) -> String {
        match &self.phase {
            Phase::Authenticated(user) => format!("User:{user}"),
            _ => "User:ANONYMOUS".into(),
        }
    }

    /// Decides what happens to `request` on this connection.
    pub fn on_request(&mut self, users: &SaslUsers, request: &FakeRequest) -> Gate {
        if self.authenticated() {
            return Gate::Pass;
        }
        match (request, &self.phase) {
            (FakeRequest::ApiVersions(_), Phase::Start) => Gate::Pass,
            (FakeRequest::SaslHandshake(r), Phase::Start) => {
                let enabled = users.mechanisms();
                let names = enabled
                    .iter()
                    .map(|m| StrBytes::from_static_str(m.name()))
                    .collect();
                let response = SaslHandshakeResponse::default().with_mechanisms(names);
                match SaslMechanism::parse(r.mechanism.as_str()).filter(|m| enabled.contains(m)) {
                    Some(m) => {
                        self.phase = Phase::Handshaken(m);
                        Gate::Answer(FakeResponse::SaslHandshake(response))
                    }
                    // Kafka answers and keeps the connection for another try.
                    None => Gate::Answer(FakeResponse::SaslHandshake(
                        response.with_error_code(Code::UnsupportedSaslMechanism.value()),
                    )),
                }
            }
            (FakeRequest::SaslAuthenticate(r), Phase::Handshaken(SaslMechanism::Plain)) => {
                match plain(users, &r.auth_bytes) {
                    Ok(user) => {
                        self.phase = Phase::Authenticated(user);
                        Gate::Answer(step(Bytes::new()))
                    }
                    Err(message) => failed(message),
                }
            }
            (FakeRequest::SaslAuthenticate(r), Phase::Handshaken(m)) => {
                match scram_first(users, *m, &r.auth_bytes) {
                    Ok((next, server_first)) => {
                        self.phase = next;
                        Gate::Answer(step(Bytes::from(server_first)))
                    }
                    Err(message) => failed(message),
                }
            }
            (
                FakeRequest::SaslAuthenticate(r),
                Phase::ScramFirstSent {
                    mechanism,
                    user,
                    client_first_bare,
                    server_first,
                    nonce,
                },
            ) => {
                let Some(cred) = users.scram.get(&(*mechanism, user.clone())) else {
                    return failed(scram_failure(*mechanism));
                };
                match scram_final(
                    *mechanism,
                    cred,
                    client_first_bare,
                    server_first,
                    nonce,
                    &r.auth_bytes,
                ) {
                    Ok(server_final) => {
                        self.phase = Phase::Authenticated(user.clone());
                        Gate::Answer(step(Bytes::from(server_final)))
                    }
                    Err(message) => failed(message),
                }
            }
            _ => Gate::Close,
        }
    }
}

fn step(bytes: Bytes) -> FakeResponse {
    FakeResponse::SaslAuthenticate(SaslAuthenticateResponse::default().with_auth_bytes(bytes))
}

fn failed(message: String) -> Gate {
    Gate::AnswerAndClose(FakeResponse::SaslAuthenticate(
        SaslAuthenticateResponse::default()
            .with_error_code(Code::SaslAuthenticationFailed.value())
            .with_error_message(Some(StrBytes::from_string(message))),
    ))
}

fn scram_failure(mechanism: SaslMechanism) -> String {
    format!(
        "Authentication failed during authentication due to invalid credentials with SASL \
         mechanism {}",
        mechanism.name()
    )
}

/// `[authzid] NUL authcid NUL passwd`; an authzid other than the user is
/// refused, as Kafka's PLAIN server does.
fn plain(users: &SaslUsers, token: &[u8]) -> Result<String, String> {
    let parts: Vec<&[u8]> = token.split(|b| *b == 0).collect();
    let [authzid, user, password] = parts[..] else {
        return Err(format!(
            "Invalid SASL/PLAIN response: expected 3 tokens, got {}",
            parts.len()
        ));
    };
    let text = |b: &[u8]| String::from_utf8(b.to_vec()).ok();
    let (Some(authzid), Some(user), Some(password)) = (text(authzid), text(user), text(password))
    else {
        return Err("Invalid SASL/PLAIN response: not UTF-8".into());
    };
    if user.is_empty() {
        return Err("Authentication failed: username not specified".into());
    }
    if !authzid.is_empty() && authzid != user {
        return Err(
            "Authentication failed: Client requested an authorization id that is different \
             from username"
                .into(),
        );
    }
    match users.plain.get(&user) {
        Some(p) if *p == password => Ok(user),
        _ => Err("Authentication failed: Invalid username or password".into()),
    }
}

/// Reads the client-first message (`n,,n=user,r=nonce`) and builds the
/// server-first one.
fn scram_first(
    users: &SaslUsers,
    mechanism: SaslMechanism,
    message: &[u8],
) -> Result<(Phase, String), String> {
    let message = std::str::from_utf8(message).map_err(|_| "client-first is not UTF-8")?;
    let invalid = || format!("Invalid SCRAM client first message: {message:?}");
    // gs2 header: channel binding flag, optional authzid, then the bare message.
    let mut fields = message.splitn(3, ',');
    let (Some(cbind), Some(_authzid), Some(bare)) = (fields.next(), fields.next(), fields.next())
    else {
        return Err(invalid());
    };
    if cbind != "n" && cbind != "y" {
        return Err(invalid());
    }
    let mut user = None;
    let mut client_nonce = None;
    for attr in bare.split(',') {
        match attr.split_once('=') {
            Some(("n", v)) => user = Some(v.replace("=2C", ",").replace("=3D", "=")),
            Some(("r", v)) => client_nonce = Some(v.to_string()),
            // Kafka accepts extensions (tokenauth) here; the fake has no
            // delegation tokens, so it ignores them.
            _ => {}
        }
    }
    let (Some(user), Some(client_nonce)) = (user, client_nonce) else {
        return Err(invalid());
    };
    let Some(cred) = users.scram.get(&(mechanism, user.clone())) else {
        return Err(scram_failure(mechanism));
    };
    let nonce = format!("{client_nonce}{:032x}", fastrand::u128(..));
    let server_first = format!(
        "r={nonce},s={},i={SCRAM_ITERATIONS}",
        B64.encode(&cred.salt)
    );
    Ok((
        Phase::ScramFirstSent {
            mechanism,
            user,
            client_first_bare: bare.to_string(),
            server_first: server_first.clone(),
            nonce,
        },
        server_first,
    ))
}

/// Checks the client-final message's nonce and proof; answers the
/// server-final message (`v=signature`).
fn scram_final(
    mechanism: SaslMechanism,
    cred: &ScramCredential,
    client_first_bare: &str,
    server_first: &str,
    nonce: &str,
    message: &[u8],
) -> Result<String, String> {
    let message = std::str::from_utf8(message).map_err(|_| "client-final is not UTF-8")?;
    let (without_proof, proof) = message
        .rsplit_once(",p=")
        .ok_or_else(|| format!("Invalid SCRAM client final message: {message:?}"))?;
    let sent_nonce = without_proof
        .split(',')
        .find_map(|a| a.strip_prefix("r="))
        .unwrap_or_default();
    if sent_nonce != nonce {
        return Err("Invalid client nonce in the final client message.".into());
    }
    let proof = B64.decode(proof).map_err(|_| scram_failure(mechanism))?;
    let auth_message = format!("{client_first_bare},{server_first},{without_proof}");
    let signature = mechanism.hmac(&cred.stored_key, auth_message.as_bytes());
    if proof.len() != signature.len() {
        return Err(scram_failure(mechanism));
    }
    let client_key: Vec<u8> = proof.iter().zip(&signature).map(|(p, s)| p ^ s).collect();
    if mechanism.hash(&client_key) != cred.stored_key {
        return Err(scram_failure(mechanism));
    }
    let server_signature = mechanism.hmac(&cred.server_key, auth_message.as_bytes());
    Ok(format!("v={}", B64.encode(server_signature)))
}

/// SaslHandshake on a connection that is not in a SASL exchange (a
/// listener without SASL, or a client already authenticated): Kafka answers
/// `ILLEGAL_SASL_STATE`.
pub fn illegal_handshake() -> FakeResponse {
    FakeResponse::SaslHandshake(
        SaslHandshakeResponse::default().with_error_code(Code::IllegalSaslState.value()),
    )
}

/// SaslAuthenticate outside a SASL exchange, answered as Kafka does.
pub fn illegal_authenticate() -> FakeResponse {
    FakeResponse::SaslAuthenticate(
        SaslAuthenticateResponse::default()
            .with_error_code(Code::IllegalSaslState.value())
            .with_error_message(Some(StrBytes::from_static_str(
                "SaslAuthenticate request received after successful authentication",
            ))),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::messages::{
        ApiVersionsRequest, MetadataRequest, SaslAuthenticateRequest, SaslHandshakeRequest,
    };

    fn users() -> SaslUsers {
        let mut u = SaslUsers::default();
        u.add(SaslMechanism::Plain, "alice", "alice-secret");
        u.add(SaslMechanism::ScramSha512, "bob", "bob-secret");
        u
    }

    fn handshake(m: &'static str) -> FakeRequest {
        FakeRequest::SaslHandshake(
            SaslHandshakeRequest::default().with_mechanism(StrBytes::from_static_str(m)),
        )
    }

    fn auth(bytes: impl Into<Vec<u8>>) -> FakeRequest {
        FakeRequest::SaslAuthenticate(
            SaslAuthenticateRequest::default().with_auth_bytes(Bytes::from(bytes.into())),
        )
    }

    fn code(gate: &Gate) -> i16 {
        match gate {
            Gate::Answer(FakeResponse::SaslHandshake(r))
            | Gate::AnswerAndClose(FakeResponse::SaslHandshake(r)) => r.error_code,
            Gate::Answer(FakeResponse::SaslAuthenticate(r))
            | Gate::AnswerAndClose(FakeResponse::SaslAuthenticate(r)) => r.error_code,
            other => panic!("not a SASL answer: {other:?}"),
        }
    }

    fn auth_bytes(gate: &Gate) -> String {
        match gate {
            Gate::Answer(FakeResponse::SaslAuthenticate(r)) => {
                String::from_utf8(r.auth_bytes.to_vec()).unwrap()
            }
            other => panic!("not a successful step: {other:?}"),
        }
    }

    #[test]
    fn plain_accepts_the_right_password_and_closes_on_a_wrong_one() {
        let u = users();
        let mut s = SaslSession::default();
        assert_eq!(
            s.on_request(&u, &FakeRequest::ApiVersions(ApiVersionsRequest::default())),
            Gate::Pass
        );
        assert_eq!(code(&s.on_request(&u, &handshake("PLAIN"))), 0);
        assert_eq!(code(&s.on_request(&u, &auth(*b"\0alice\0alice-secret"))), 0);
        assert!(s.authenticated());
        let md = FakeRequest::Metadata(MetadataRequest::default());
        assert_eq!(s.on_request(&u, &md), Gate::Pass);

        let mut s = SaslSession::default();
        s.on_request(&u, &handshake("PLAIN"));
        let g = s.on_request(&u, &auth(*b"\0alice\0wrong"));
        assert!(matches!(g, Gate::AnswerAndClose(_)), "{g:?}");
        assert_eq!(code(&g), Code::SaslAuthenticationFailed.value());
        assert!(!s.authenticated());

        let mut s = SaslSession::default();
        s.on_request(&u, &handshake("PLAIN"));
        let g = s.on_request(&u, &auth(*b"mallory\0alice\0alice-secret"));
        assert_eq!(code(&g), Code::SaslAuthenticationFailed.value());
    }

    #[test]
    fn unknown_mechanisms_and_requests_out_of_turn() {
        let u = users();
        let mut s = SaslSession::default();
        let g = s.on_request(&u, &handshake("SCRAM-SHA-256"));
        assert_eq!(code(&g), Code::UnsupportedSaslMechanism.value());
        match g {
            Gate::Answer(FakeResponse::SaslHandshake(r)) => {
                let names: Vec<&str> = r.mechanisms.iter().map(|m| m.as_str()).collect();
                assert_eq!(names, ["PLAIN", "SCRAM-SHA-512"]);
            }
            other => panic!("{other:?}"),
        }
        // The connection stays usable for another handshake.
        assert_eq!(code(&s.on_request(&u, &handshake("PLAIN"))), 0);
        let mut s = SaslSession::default();
        let md = FakeRequest::Metadata(MetadataRequest::default());
        assert_eq!(s.on_request(&u, &md), Gate::Close);
        assert_eq!(s.on_request(&u, &auth(*b"x")), Gate::Close);
    }

    /// A SCRAM client computed here by the RFC's formulas, independently
    /// of the server path.
    fn scram_login(u: &SaslUsers, m: SaslMechanism, user: &str, password: &str) -> Gate {
        let mut s = SaslSession::default();
        assert_eq!(code(&s.on_request(u, &handshake(m.name()))), 0);
        let bare = format!("n={user},r=clientnonce");
        let first = s.on_request(u, &auth(format!("n,,{bare}")));
        if code(&first) != 0 {
            return first;
        }
        let server_first = auth_bytes(&first);
        let mut attrs = server_first.split(',');
        let nonce = attrs
            .next()
            .unwrap()
            .strip_prefix("r=")
            .unwrap()
            .to_string();
        assert!(nonce.starts_with("clientnonce"));
        let salt = B64
            .decode(attrs.next().unwrap().strip_prefix("s=").unwrap())
            .unwrap();
        assert_eq!(attrs.next(), Some("i=4096"));
        let salted = m.salted_password(password.as_bytes(), &salt);
        let client_key = m.hmac(&salted, b"Client Key");
        let without_proof = format!("c=biws,r={nonce}");
        let auth_message = format!("{bare},{server_first},{without_proof}");
        let sig = m.hmac(&m.hash(&client_key), auth_message.as_bytes());
        let proof: Vec<u8> = client_key.iter().zip(&sig).map(|(a, b)| a ^ b).collect();
        let last = s.on_request(u, &auth(format!("{without_proof},p={}", B64.encode(proof))));
        if code(&last) == 0 {
            let server_key = m.hmac(&salted, b"Server Key");
            let want = B64.encode(m.hmac(&server_key, auth_message.as_bytes()));
            assert_eq!(auth_bytes(&last), format!("v={want}"));
            assert!(s.authenticated());
        }
        last
    }

    #[test]
    fn scram_verifies_the_proof_and_signs_the_server_final() {
        let u = users();
        let ok = scram_login(&u, SaslMechanism::ScramSha512, "bob", "bob-secret");
        assert_eq!(code(&ok), 0);
        let wrong = scram_login(&u, SaslMechanism::ScramSha512, "bob", "nope");
        assert!(matches!(wrong, Gate::AnswerAndClose(_)));
        assert_eq!(code(&wrong), Code::SaslAuthenticationFailed.value());
        let unknown = scram_login(&u, SaslMechanism::ScramSha512, "carol", "x");
        assert_eq!(code(&unknown), Code::SaslAuthenticationFailed.value());
    }
}
