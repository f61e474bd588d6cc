//! A test OIDC identity provider: a token endpoint for the client
//! credentials grant (RFC 6749 section 4.4) that issues signed JWTs, and
//! the JWKS (RFC 7517) a Kafka broker validates them against
//! (`sasl.oauthbearer.jwks.endpoint.url`, KIP-768).
//!
//! Tokens are ES256 (ECDSA P-256 with SHA-256, RFC 7518 section 3.4) with
//! a fresh key per server, the `kid` in the header, and the claims `sub`
//! (the client id), `iss`, `aud`, `iat`, `exp` and `scope` (when asked). ES256
//! rather than RS256 because the test kit already signs with RustCrypto's
//! pure-Rust P-256 (secure containers), so no RSA crate is needed; Kafka's
//! validator (jose4j) accepts both.
//!
//! The HTTP side is a deliberately small HTTP/1.1 server (one request per
//! connection, bounded head and body): for tests on loopback only.
//!
//! Endpoints:
//! - `POST /token`: HTTP Basic client id and secret, form
//!   `grant_type=client_credentials[&scope=...]`; answers
//!   `{"access_token","token_type":"Bearer","expires_in"}`, or 401
//!   `{"error":"invalid_client"}` / 400 `{"error":"unsupported_grant_type"}`.
//! - `GET /jwks`: `{"keys":[{...EC P-256 public key...}]}`.
//! - `GET /issued/CLIENT`: how many tokens CLIENT got (plain number).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::engine::general_purpose::{STANDARD as B64, URL_SAFE_NO_PAD as B64URL};
use base64::Engine;
use p256::ecdsa::signature::Signer;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

/// Largest request head and body read.
const MAX_HEAD: usize = 16 * 1024;
const MAX_BODY: usize = 16 * 1024;
/// A client that sends nothing for this long is dropped.
const IO_TIMEOUT: Duration = Duration::from_secs(10);

/// A client the token endpoint knows.
#[derive(Debug, Clone)]
pub struct OidcClient {
    /// The client id; also the tokens' `sub`.
    pub id: String,
    /// The client secret.
    pub secret: String,
    /// Lifetime of the tokens issued to this client.
    pub lifetime: Duration,
}

impl OidcClient {
    /// Parses `id:secret:lifetime_seconds`.
    pub fn parse(s: &str) -> Result<OidcClient, String> {
        let mut parts = s.splitn(3, ':');
        let (Some(id), Some(secret), Some(secs)) = (parts.next(), parts.next(), parts.next())
        else {
            return Err(format!("`{s}`: expected id:secret:lifetime_seconds"));
        };
        let secs: u64 = secs
            .parse()
            .map_err(|_| format!("`{secs}` is not a number of seconds"))?;
        Ok(OidcClient {
            id: id.into(),
            secret: secret.into(),
            lifetime: Duration::from_secs(secs),
        })
    }
}

/// What the identity provider issues.
#[derive(Debug, Clone)]
pub struct OidcConfig {
    /// Known clients.
    pub clients: Vec<OidcClient>,
    /// The `iss` claim.
    pub issuer: String,
    /// The `aud` claim (the broker's `sasl.oauthbearer.expected.audience`).
    pub audience: String,
}

struct State {
    config: OidcConfig,
    key: p256::ecdsa::SigningKey,
    kid: String,
    issued: Mutex<HashMap<String, u64>>,
}

/// A running identity provider; stops when dropped.
pub struct OidcServer {
    addr: SocketAddr,
    state: Arc<State>,
    task: JoinHandle<()>,
}

impl std::fmt::Debug for OidcServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OidcServer")
            .field("addr", &self.addr)
            .finish()
    }
}

impl OidcServer {
    /// Binds `addr` (port 0: any free port) and serves until dropped.
    pub async fn start(addr: SocketAddr, config: OidcConfig) -> std::io::Result<OidcServer> {
        let key = random_key()?;
        let mut kid_bytes = [0u8; 8];
        getrandom::fill(&mut kid_bytes).map_err(std::io::Error::other)?;
        let state = Arc::new(State {
            config,
            key,
            kid: B64URL.encode(kid_bytes),
            issued: Mutex::new(HashMap::new()),
        });
        let listener = TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let serving = state.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let state = serving.clone();
                tokio::spawn(async move {
                    let _ = tokio::time::timeout(IO_TIMEOUT, serve(stream, &state)).await;
                });
            }
        });
        Ok(OidcServer { addr, state, task })
    }

    /// The address served.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://ADDR/token`.
    pub fn token_url(&self) -> String {
        format!("http://{}/token", self.addr)
    }

    /// `http://ADDR/jwks`.
    pub fn jwks_url(&self) -> String {
        format!("http://{}/jwks", self.addr)
    }

    /// How many tokens `client` was issued.
    pub fn issued(&self, client: &str) -> u64 {
        issued(&self.state, client)
    }
}

impl Drop for OidcServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn issued(state: &State, client: &str) -> u64 {
    state
        .issued
        .lock()
        .map(|m| m.get(client).copied().unwrap_or(0))
        .unwrap_or(0)
}

fn random_key() -> std::io::Result<p256::ecdsa::SigningKey> {
    // A random scalar; the rare value outside the curve order is redrawn.
    for _ in 0..16 {
        let mut bytes = [0u8; 32];
        getrandom::fill(&mut bytes).map_err(std::io::Error::other)?;
        if let Ok(key) = p256::ecdsa::SigningKey::from_slice(&bytes) {
            return Ok(key);
        }
    }
    Err(std::io::Error::other("could not draw a P-256 key"))
}

/// A parsed request: method, path, headers (lower-case names), body.
struct Request {
    method: String,
    path: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Request {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

async fn read_request(stream: &mut TcpStream) -> Option<Request> {
    let mut buf = Vec::with_capacity(1024);
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i;
        }
        if buf.len() > MAX_HEAD {
            return None;
        }
        let mut chunk = [0u8; 1024];
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = std::str::from_utf8(&buf[..head_end]).ok()?;
    let mut lines = head.split("\r\n");
    let mut first = lines.next()?.split(' ');
    let method = first.next()?.to_owned();
    let path = first.next()?.to_owned();
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    let len: usize = headers
        .iter()
        .find(|(n, _)| n == "content-length")
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0);
    if len > MAX_BODY {
        return None;
    }
    let mut body = buf[head_end + 4..].to_vec();
    while body.len() < len {
        let mut chunk = [0u8; 1024];
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        body.extend_from_slice(&chunk[..n]);
    }
    body.truncate(len);
    Some(Request {
        method,
        path,
        headers,
        body,
    })
}

async fn serve(mut stream: TcpStream, state: &State) {
    let Some(req) = read_request(&mut stream).await else {
        return;
    };
    let (status, content_type, body) = route(&req, state);
    let reason = match status {
        200 => "OK",
        400 => "Bad Request",
        401 => "Unauthorized",
        _ => "Not Found",
    };
    let mut out = format!(
        "HTTP/1.1 {status} {reason}\r\ncontent-type: {content_type}\r\ncontent-length: {}\r\nconnection: close\r\n",
        body.len()
    );
    if status == 401 {
        out.push_str("www-authenticate: Basic realm=\"purekafka-test\"\r\n");
    }
    out.push_str("\r\n");
    let mut bytes = out.into_bytes();
    bytes.extend_from_slice(body.as_bytes());
    let _ = stream.write_all(&bytes).await;
    let _ = stream.shutdown().await;
}

fn route(req: &Request, state: &State) -> (u16, &'static str, String) {
    const JSON: &str = "application/json";
    match (req.method.as_str(), req.path.as_str()) {
        ("POST", "/token") => token(req, state),
        ("GET", "/jwks") => (200, JSON, jwks(state)),
        ("GET", p) if p.starts_with("/issued/") => (
            200,
            "text/plain",
            issued(state, &p["/issued/".len()..]).to_string(),
        ),
        _ => (404, JSON, r#"{"error":"not_found"}"#.into()),
    }
}

fn token(req: &Request, state: &State) -> (u16, &'static str, String) {
    const JSON: &str = "application/json";
    let form = parse_form(&req.body);
    let field = |k: &str| form.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
    if field("grant_type") != Some("client_credentials") {
        return (400, JSON, r#"{"error":"unsupported_grant_type"}"#.into());
    }
    let client = req
        .header("authorization")
        .and_then(|h| h.strip_prefix("Basic "))
        .and_then(|b| B64.decode(b.trim()).ok())
        .and_then(|b| String::from_utf8(b).ok())
        .and_then(|pair| {
            let (id, secret) = pair.split_once(':')?;
            state
                .config
                .clients
                .iter()
                .find(|c| c.id == id && c.secret == secret)
                .cloned()
        });
    let Some(client) = client else {
        return (
            401,
            JSON,
            r#"{"error":"invalid_client","error_description":"unknown client or wrong secret"}"#
                .into(),
        );
    };
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs();
    let exp = now + client.lifetime.as_secs();
    let mut claims = format!(
        r#"{{"sub":{},"iss":{},"aud":{},"iat":{now},"exp":{exp}"#,
        json_str(&client.id),
        json_str(&state.config.issuer),
        json_str(&state.config.audience)
    );
    if let Some(scope) = field("scope") {
        claims.push_str(&format!(r#","scope":{}"#, json_str(scope)));
    }
    claims.push('}');
    let header = format!(
        r#"{{"alg":"ES256","typ":"JWT","kid":{}}}"#,
        json_str(&state.kid)
    );
    let signing_input = format!("{}.{}", B64URL.encode(header), B64URL.encode(claims));
    let sig: p256::ecdsa::Signature = state.key.sign(signing_input.as_bytes());
    let jwt = format!("{signing_input}.{}", B64URL.encode(sig.to_bytes()));
    if let Ok(mut m) = state.issued.lock() {
        *m.entry(client.id.clone()).or_insert(0) += 1;
    }
    (
        200,
        JSON,
        format!(
            r#"{{"access_token":"{jwt}","token_type":"Bearer","expires_in":{}}}"#,
            client.lifetime.as_secs()
        ),
    )
}

fn jwks(state: &State) -> String {
    let point = state.key.verifying_key().to_encoded_point(false);
    let (x, y) = match (point.x(), point.y()) {
        (Some(x), Some(y)) => (B64URL.encode(x), B64URL.encode(y)),
        _ => (String::new(), String::new()),
    };
    format!(
        r#"{{"keys":[{{"kty":"EC","crv":"P-256","use":"sig","alg":"ES256","kid":{},"x":"{x}","y":"{y}"}}]}}"#,
        json_str(&state.kid)
    )
}

/// `application/x-www-form-urlencoded` pairs (`+` is a space, `%XX` a byte).
fn parse_form(body: &[u8]) -> Vec<(String, String)> {
    fn decode(s: &str) -> String {
        let bytes = s.as_bytes();
        let mut out = Vec::with_capacity(bytes.len());
        let mut i = 0;
        while i < bytes.len() {
            match bytes[i] {
                b'+' => out.push(b' '),
                b'%' if i + 2 < bytes.len() => {
                    let hex = |b: u8| (b as char).to_digit(16);
                    match (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                        (Some(h), Some(l)) => {
                            out.push((h * 16 + l) as u8);
                            i += 2;
                        }
                        _ => out.push(b'%'),
                    }
                }
                b => out.push(b),
            }
            i += 1;
        }
        String::from_utf8_lossy(&out).into_owned()
    }
    String::from_utf8_lossy(body)
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| match p.split_once('=') {
            Some((k, v)) => (decode(k), decode(v)),
            None => (decode(p), String::new()),
        })
        .collect()
}

fn json_str(s: &str) -> String {
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

#[cfg(test)]
mod tests {
    use super::*;
    use p256::ecdsa::signature::Verifier;

    #[test]
    fn forms_decode() {
        assert_eq!(
            parse_form(b"grant_type=client_credentials&scope=a+b%2Fc&x"),
            vec![
                ("grant_type".into(), "client_credentials".into()),
                ("scope".into(), "a b/c".into()),
                ("x".into(), String::new())
            ]
        );
        // A truncated escape stays as it is.
        assert_eq!(parse_form(b"a=%4"), vec![("a".into(), "%4".into())]);
    }

    #[tokio::test]
    async fn issues_tokens_that_verify_against_the_jwks_key() {
        let server = OidcServer::start(
            "127.0.0.1:0".parse().unwrap(),
            OidcConfig {
                clients: vec![OidcClient::parse("app:pw:30").unwrap()],
                issuer: "iss".into(),
                audience: "aud".into(),
            },
        )
        .await
        .unwrap();
        let ok = Request {
            method: "POST".into(),
            path: "/token".into(),
            headers: vec![(
                "authorization".into(),
                format!("Basic {}", B64.encode("app:pw")),
            )],
            body: b"grant_type=client_credentials&scope=kafka".to_vec(),
        };
        let (status, _, body) = route(&ok, &server.state);
        assert_eq!(status, 200, "{body}");
        let jwt = body.split('"').nth(3).unwrap();
        let parts: Vec<&str> = jwt.split('.').collect();
        let claims = String::from_utf8(B64URL.decode(parts[1]).unwrap()).unwrap();
        assert!(
            claims.contains(r#""sub":"app""#) && claims.contains(r#""scope":"kafka""#),
            "{claims}"
        );
        let sig = p256::ecdsa::Signature::from_slice(&B64URL.decode(parts[2]).unwrap()).unwrap();
        let input = format!("{}.{}", parts[0], parts[1]);
        server
            .state
            .key
            .verifying_key()
            .verify(input.as_bytes(), &sig)
            .unwrap();
        assert_eq!(server.issued("app"), 1);
        let mut bad = ok;
        bad.headers = vec![(
            "authorization".into(),
            format!("Basic {}", B64.encode("app:nope")),
        )];
        assert_eq!(route(&bad, &server.state).0, 401);
        assert_eq!(server.issued("app"), 1);
    }
}
