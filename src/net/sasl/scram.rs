//! SASL `SCRAM-SHA-256` and `SCRAM-SHA-512` (KIP-84; RFC 5802, RFC 7677),
//! client side, without channel binding (`n,,`), as Kafka speaks it.
//!
//! The server is checked as much as the client is: its nonce must extend
//! ours, its iteration count must be within [`MIN_ITERATIONS`] and
//! [`MAX_ITERATIONS`], and its final signature is compared in constant time.

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine;
use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256, Sha512};
use subtle::ConstantTimeEq;

use super::{Exchange, Secret, Step};

/// Kafka's lowest accepted iteration count (and RFC 7677's recommendation).
pub const MIN_ITERATIONS: u32 = 4096;
/// A bound on the work a hostile server can ask for; Kafka itself caps
/// credentials at 16384 iterations.
pub const MAX_ITERATIONS: u32 = 65_536;
/// Random bytes in the client nonce.
const NONCE_BYTES: usize = 24;

/// The hash of a SCRAM mechanism.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScramHash {
    /// SHA-256 (RFC 7677).
    Sha256,
    /// SHA-512.
    Sha512,
}

impl ScramHash {
    fn hmac(self, key: &[u8], data: &[u8]) -> Vec<u8> {
        match self {
            ScramHash::Sha256 => {
                let mut m = <Hmac<Sha256> as Mac>::new_from_slice(key).expect("any key length");
                m.update(data);
                m.finalize().into_bytes().to_vec()
            }
            ScramHash::Sha512 => {
                let mut m = <Hmac<Sha512> as Mac>::new_from_slice(key).expect("any key length");
                m.update(data);
                m.finalize().into_bytes().to_vec()
            }
        }
    }

    fn hash(self, data: &[u8]) -> Vec<u8> {
        match self {
            ScramHash::Sha256 => Sha256::digest(data).to_vec(),
            ScramHash::Sha512 => Sha512::digest(data).to_vec(),
        }
    }

    /// `Hi()` of RFC 5802: PBKDF2 with HMAC and one output block.
    fn salted_password(self, password: &[u8], salt: &[u8], iterations: u32) -> Vec<u8> {
        match self {
            ScramHash::Sha256 => {
                let mut out = [0u8; 32];
                pbkdf2::pbkdf2_hmac::<Sha256>(password, salt, iterations, &mut out);
                out.to_vec()
            }
            ScramHash::Sha512 => {
                let mut out = [0u8; 64];
                pbkdf2::pbkdf2_hmac::<Sha512>(password, salt, iterations, &mut out);
                out.to_vec()
            }
        }
    }
}

enum State {
    Initial,
    /// Client-first sent.
    SentFirst,
    /// Client-final sent; the server's signature is expected.
    SentFinal {
        server_signature: Vec<u8>,
    },
    Finished,
}

pub(super) struct Scram {
    hash: ScramHash,
    username: String,
    password: Secret,
    client_nonce: String,
    client_first_bare: String,
    state: State,
}

impl Scram {
    pub(super) fn new(hash: ScramHash, username: &str, password: &Secret) -> Scram {
        let mut raw = [0u8; NONCE_BYTES];
        // The OS random source failing is not recoverable; an all-zero nonce
        // would still be unique per server nonce, but say so loudly.
        if getrandom::fill(&mut raw).is_err() {
            tracing::error!("no OS randomness for the SCRAM nonce; using a weak nonce");
            raw.iter_mut().for_each(|b| *b = fastrand::u8(..));
        }
        Scram::with_nonce(hash, username, password, B64.encode(raw))
    }

    fn with_nonce(hash: ScramHash, username: &str, password: &Secret, nonce: String) -> Scram {
        let client_first_bare = format!("n={},r={nonce}", sasl_name(username));
        Scram {
            hash,
            username: username.to_owned(),
            password: password.clone(),
            client_nonce: nonce,
            client_first_bare,
            state: State::Initial,
        }
    }

    fn client_final(&self, server_first: &[u8]) -> Result<(Vec<u8>, Vec<u8>), String> {
        let ServerFirst {
            message: server_first,
            nonce,
            salt,
            iterations,
        } = parse_server_first(server_first, &self.client_nonce)?;
        let h = self.hash;
        let salted = h.salted_password(self.password.expose().as_bytes(), &salt, iterations);
        let client_key = h.hmac(&salted, b"Client Key");
        let stored_key = h.hash(&client_key);
        // "biws" = base64("n,,"): no channel binding, no authzid.
        let without_proof = format!("c=biws,r={nonce}");
        let auth_message = format!("{},{server_first},{without_proof}", self.client_first_bare);
        let client_signature = h.hmac(&stored_key, auth_message.as_bytes());
        let proof: Vec<u8> = client_key
            .iter()
            .zip(&client_signature)
            .map(|(k, s)| k ^ s)
            .collect();
        let server_key = h.hmac(&salted, b"Server Key");
        let server_signature = h.hmac(&server_key, auth_message.as_bytes());
        let message = format!("{without_proof},p={}", B64.encode(proof));
        Ok((message.into_bytes(), server_signature))
    }
}

impl Exchange for Scram {
    fn step(&mut self, server: Option<&[u8]>) -> Result<Step, String> {
        match (std::mem::replace(&mut self.state, State::Finished), server) {
            (State::Initial, None) => {
                self.state = State::SentFirst;
                Ok(Step::Send(
                    format!("n,,{}", self.client_first_bare).into_bytes(),
                ))
            }
            (State::SentFirst, Some(server_first)) => {
                let (message, server_signature) = self.client_final(server_first)?;
                self.state = State::SentFinal { server_signature };
                Ok(Step::Send(message))
            }
            (State::SentFinal { server_signature }, Some(server_final)) => {
                let got = parse_server_final(server_final)?;
                if bool::from(got.ct_eq(&server_signature)) {
                    Ok(Step::Done)
                } else {
                    Err(format!(
                        "the server's signature is wrong: it does not know the credentials of `{}`",
                        self.username
                    ))
                }
            }
            _ => Err("unexpected SCRAM exchange state".into()),
        }
    }
}

/// What a server-first-message carries (RFC 5802 section 5.1), checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerFirst<'a> {
    /// The whole message as text (it is part of the signed AuthMessage).
    pub message: &'a str,
    /// The combined nonce: the client's, extended by the server.
    pub nonce: &'a str,
    /// The salt, base64-decoded.
    pub salt: Vec<u8>,
    /// The iteration count, within [`MIN_ITERATIONS`]..=[`MAX_ITERATIONS`].
    pub iterations: u32,
}

/// Parses and checks a server-first-message against the client's nonce.
/// `Err` is a human-readable reason (an `e=` server error is quoted).
pub fn parse_server_first<'a>(
    message: &'a [u8],
    client_nonce: &str,
) -> Result<ServerFirst<'a>, String> {
    let message =
        std::str::from_utf8(message).map_err(|_| "server-first-message is not UTF-8".to_owned())?;
    let (mut nonce, mut salt, mut iterations) = (None, None, None);
    for attr in message.split(',') {
        match attr.split_once('=') {
            Some(("r", v)) => nonce = Some(v),
            Some(("s", v)) => salt = Some(v),
            Some(("i", v)) => iterations = Some(v),
            Some(("m", _)) => return Err("server requires an unsupported extension".into()),
            Some(("e", v)) => return Err(format!("server error: {v}")),
            _ => {}
        }
    }
    let nonce = nonce.ok_or("server-first-message has no nonce")?;
    if !nonce.starts_with(client_nonce) || nonce.len() <= client_nonce.len() {
        return Err("server nonce does not extend the client nonce".into());
    }
    let salt = B64
        .decode(salt.ok_or("server-first-message has no salt")?)
        .map_err(|_| "server salt is not base64".to_owned())?;
    let iterations: u32 = iterations
        .ok_or("server-first-message has no iteration count")?
        .parse()
        .map_err(|_| "server iteration count is not a number".to_owned())?;
    if iterations < MIN_ITERATIONS {
        return Err(format!(
            "server asks for {iterations} iterations, below the minimum {MIN_ITERATIONS}"
        ));
    }
    if iterations > MAX_ITERATIONS {
        return Err(format!(
            "server asks for {iterations} iterations, above the maximum {MAX_ITERATIONS}"
        ));
    }
    Ok(ServerFirst {
        message,
        nonce,
        salt,
        iterations,
    })
}

/// Parses a server-final-message (RFC 5802 section 5.1) into the server
/// signature it carries (`v=`, base64-decoded); an `e=` server error is
/// an `Err` quoting it. The caller compares the signature.
pub fn parse_server_final(message: &[u8]) -> Result<Vec<u8>, String> {
    let text =
        std::str::from_utf8(message).map_err(|_| "server-final-message is not UTF-8".to_owned())?;
    if let Some(e) = text.strip_prefix("e=") {
        return Err(format!("server error: {e}"));
    }
    let verifier = text
        .split(',')
        .find_map(|a| a.strip_prefix("v="))
        .ok_or("server-final-message has no verifier")?;
    B64.decode(verifier)
        .map_err(|_| "server verifier is not base64".to_owned())
}

/// `saslname` of RFC 5802: `=` and `,` escaped.
fn sasl_name(user: &str) -> String {
    user.replace('=', "=3D").replace(',', "=2C")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 7677 section 3 example.
    #[test]
    fn rfc7677_sha256_vector() {
        let mut s = Scram::with_nonce(
            ScramHash::Sha256,
            "user",
            &Secret::new("pencil"),
            "rOprNGfwEbeRWgbNEkqO".into(),
        );
        assert_eq!(
            s.step(None).unwrap(),
            Step::Send(b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO".to_vec())
        );
        let server_first =
            b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096";
        assert_eq!(
            s.step(Some(server_first)).unwrap(),
            Step::Send(
                b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
                    .to_vec()
            )
        );
        assert_eq!(
            s.step(Some(b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="))
                .unwrap(),
            Step::Done
        );
    }

    fn after_first(server_first: &[u8]) -> Result<Step, String> {
        let mut s = Scram::with_nonce(
            ScramHash::Sha512,
            "user",
            &Secret::new("pencil"),
            "abc".into(),
        );
        s.step(None).unwrap();
        s.step(Some(server_first))
    }

    #[test]
    fn hostile_servers_are_refused() {
        let e = after_first(b"r=xyz123,s=QUJD,i=4096").unwrap_err();
        assert!(e.contains("nonce"), "{e}");
        let e = after_first(b"r=abc,s=QUJD,i=4096").unwrap_err();
        assert!(e.contains("nonce"), "{e}");
        let e = after_first(b"r=abcdef,s=QUJD,i=4095").unwrap_err();
        assert!(e.contains("minimum"), "{e}");
        let e = after_first(b"r=abcdef,s=QUJD,i=100000000").unwrap_err();
        assert!(e.contains("maximum"), "{e}");
        let e = after_first(b"r=abcdef,s=!!,i=4096").unwrap_err();
        assert!(e.contains("salt"), "{e}");
        assert!(after_first(b"e=unknown-user").is_err());
        assert!(after_first(b"\xff").is_err());
    }

    #[test]
    fn wrong_server_signature_is_refused() {
        let mut s = Scram::with_nonce(
            ScramHash::Sha256,
            "user",
            &Secret::new("pencil"),
            "rOprNGfwEbeRWgbNEkqO".into(),
        );
        s.step(None).unwrap();
        s.step(Some(
            b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096",
        ))
        .unwrap();
        let e = s
            .step(Some(b"v=AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA="))
            .unwrap_err();
        assert!(e.contains("signature"), "{e}");
        assert!(!e.contains("pencil"));
    }

    #[test]
    fn user_names_are_escaped() {
        assert_eq!(sasl_name("a=b,c"), "a=3Db=2Cc");
    }

    #[test]
    fn random_nonces_differ() {
        let a = Scram::new(ScramHash::Sha256, "u", &Secret::new("p"));
        let b = Scram::new(ScramHash::Sha256, "u", &Secret::new("p"));
        assert_ne!(a.client_nonce, b.client_nonce);
        assert!(!a.client_nonce.contains(','));
    }

    #[test]
    fn server_messages_parse_or_say_why() {
        let first = parse_server_first(b"r=abcdef,s=QUJD,i=4096,x=ignored", "abc").unwrap();
        assert_eq!(first.nonce, "abcdef");
        assert_eq!(first.salt, b"ABC");
        assert_eq!(first.iterations, 4096);
        let e = parse_server_first(b"r=abcdef,s=QUJD", "abc").unwrap_err();
        assert!(e.contains("iteration"), "{e}");
        let e = parse_server_first(b"r=abcdef,s=QUJD,i=-1", "abc").unwrap_err();
        assert!(e.contains("number"), "{e}");
        let e = parse_server_first(b"m=ext,r=abcdef", "abc").unwrap_err();
        assert!(e.contains("extension"), "{e}");
        assert_eq!(parse_server_final(b"v=QUJD").unwrap(), b"ABC");
        let e = parse_server_final(b"e=invalid-proof").unwrap_err();
        assert!(e.contains("invalid-proof"), "{e}");
        assert!(parse_server_final(b"x=1").is_err());
        assert!(parse_server_final(b"v=!!").is_err());
    }
}
