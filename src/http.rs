//! A small HTTP/1.1 client for the features that speak HTTP beside Kafka:
//! the schema registry (Confluent's REST API) and, later, OAuth token
//! endpoints (OIDC client credentials, RFC 6749 section 4.4).
//!
//! Pure Rust: hyper 1's client connection over a tokio `TcpStream`, and for
//! `https` URLs (feature `tls`) rustls with the graviola provider, built from
//! the same [`TlsConfig`](crate::TlsConfig) the Kafka connections use.
//!
//! One connection per request, closed after it: the callers (a registry
//! lookup on a cache miss, a token refresh) are rare and cached, so pooling
//! would add state without a gain. Every request is bounded: one
//! [`HttpConfig::timeout`] covers connecting, the TLS handshake, sending and
//! reading the whole body, and the body may not exceed
//! [`HttpConfig::max_response_bytes`]. Errors name the URL (never a
//! credential) and say whether a retry can help.

use std::fmt;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::header::{HeaderValue, ACCEPT, AUTHORIZATION, CONTENT_TYPE, HOST, USER_AGENT};
use hyper::{Method, Request, Uri};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;

use crate::config::Secret;

/// Settings shared by every request of an [`HttpClient`].
#[derive(Debug, Clone)]
pub struct HttpConfig {
    /// Bound on one whole request: connect, TLS handshake, send, and read
    /// the full response. Default 30 s.
    pub timeout: Duration,
    /// Largest response body accepted. Default 16 MiB.
    pub max_response_bytes: usize,
    /// TLS settings for `https` URLs (feature `tls`).
    #[cfg(feature = "tls")]
    pub tls: crate::TlsConfig,
}

impl Default for HttpConfig {
    fn default() -> Self {
        HttpConfig {
            timeout: Duration::from_secs(30),
            max_response_bytes: 16 << 20,
            #[cfg(feature = "tls")]
            tls: crate::TlsConfig::default(),
        }
    }
}

/// Credentials sent in the `Authorization` header.
#[derive(Clone, Default)]
pub enum HttpAuth {
    /// No header.
    #[default]
    None,
    /// `Basic base64(user:password)` (RFC 7617).
    Basic {
        /// The user name.
        user: String,
        /// The password.
        password: Secret,
    },
    /// `Bearer token` (RFC 6750).
    Bearer(Secret),
}

impl fmt::Debug for HttpAuth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HttpAuth::None => f.write_str("None"),
            HttpAuth::Basic { user, .. } => write!(f, "Basic({user}, ***)"),
            HttpAuth::Bearer(_) => f.write_str("Bearer(***)"),
        }
    }
}

/// A request body.
#[derive(Debug, Clone, Default)]
pub enum HttpBody {
    /// No body.
    #[default]
    Empty,
    /// Bytes sent with `content_type` (for example a JSON document and
    /// `application/json`).
    Bytes {
        /// The `Content-Type` header.
        content_type: &'static str,
        /// The body.
        body: Bytes,
    },
    /// `application/x-www-form-urlencoded` pairs.
    Form(Vec<(String, String)>),
}

/// A response: any status, the caller decides what is an error (see
/// [`HttpError::status`]).
#[derive(Debug, Clone)]
pub struct HttpResponse {
    /// The status code.
    pub status: u16,
    /// The `Content-Type` header, when present and readable.
    pub content_type: Option<String>,
    /// The whole body.
    pub body: Bytes,
}

impl HttpResponse {
    /// Whether the status is 2xx.
    pub fn is_success(&self) -> bool {
        (200..300).contains(&self.status)
    }
}

/// What went wrong with a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum HttpErrorKind {
    /// The URL cannot be used (syntax, scheme, `https` without `tls`).
    InvalidUrl,
    /// TCP connect failed.
    Connect,
    /// The TLS handshake failed.
    Tls,
    /// The request did not complete within [`HttpConfig::timeout`].
    Timeout,
    /// The connection broke or the server spoke invalid HTTP.
    Io,
    /// The body was larger than [`HttpConfig::max_response_bytes`].
    TooLarge,
    /// The server answered with a status the caller treats as an error.
    Status(u16),
}

/// A failed HTTP request. The message names the URL and never a
/// credential.
#[derive(Debug, Clone, thiserror::Error)]
#[error("HTTP {method} {url}: {reason} ({})", if self.is_retriable() { "retriable" } else { "not retriable" })]
pub struct HttpError {
    /// The method.
    pub method: String,
    /// The URL requested.
    pub url: String,
    /// The class of failure.
    pub kind: HttpErrorKind,
    /// What went wrong.
    pub reason: String,
}

impl HttpError {
    fn new(method: &Method, url: &str, kind: HttpErrorKind, reason: impl ToString) -> Self {
        HttpError {
            method: method.to_string(),
            url: url.to_owned(),
            kind,
            reason: reason.to_string(),
        }
    }

    /// An error for a response whose status the caller rejects; `reason`
    /// is what the server said (a bounded excerpt is kept).
    pub fn status(method: &str, url: &str, status: u16, reason: &str) -> Self {
        let mut reason: String = reason.chars().take(512).collect();
        if reason.is_empty() {
            reason = format!("status {status}");
        } else {
            reason = format!("status {status}: {reason}");
        }
        HttpError {
            method: method.to_owned(),
            url: url.to_owned(),
            kind: HttpErrorKind::Status(status),
            reason,
        }
    }

    /// Whether the same request may succeed later: connection failures,
    /// timeouts, broken connections, and the statuses 408, 429 and 5xx.
    pub fn is_retriable(&self) -> bool {
        match self.kind {
            HttpErrorKind::Connect | HttpErrorKind::Timeout | HttpErrorKind::Io => true,
            HttpErrorKind::Status(s) => s == 408 || s == 429 || (500..600).contains(&s),
            HttpErrorKind::InvalidUrl | HttpErrorKind::Tls | HttpErrorKind::TooLarge => false,
        }
    }
}

/// The HTTP client: cheap to clone.
#[derive(Clone)]
pub struct HttpClient {
    config: HttpConfig,
    #[cfg(feature = "tls")]
    tls: std::sync::Arc<rustls::ClientConfig>,
}

impl fmt::Debug for HttpClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HttpClient")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl HttpClient {
    /// A client with `config`; fails when the TLS settings cannot be used
    /// (the error names the `ssl.*` key).
    pub fn new(config: HttpConfig) -> crate::Result<Self> {
        #[cfg(feature = "tls")]
        let tls = std::sync::Arc::new(crate::net::tls::client_config(&config.tls)?);
        Ok(HttpClient {
            config,
            #[cfg(feature = "tls")]
            tls,
        })
    }

    /// The settings.
    pub fn config(&self) -> &HttpConfig {
        &self.config
    }

    /// `GET url`, asking for `accept`.
    pub async fn get(
        &self,
        url: &str,
        accept: &'static str,
        auth: &HttpAuth,
    ) -> Result<HttpResponse, HttpError> {
        self.send(Method::GET, url, accept, auth, HttpBody::Empty)
            .await
    }

    /// `POST url` with `body`, asking for `accept`.
    pub async fn post(
        &self,
        url: &str,
        accept: &'static str,
        auth: &HttpAuth,
        body: HttpBody,
    ) -> Result<HttpResponse, HttpError> {
        self.send(Method::POST, url, accept, auth, body).await
    }

    /// Sends one request and reads the whole response, within
    /// [`HttpConfig::timeout`].
    pub async fn send(
        &self,
        method: Method,
        url: &str,
        accept: &'static str,
        auth: &HttpAuth,
        body: HttpBody,
    ) -> Result<HttpResponse, HttpError> {
        let timeout = self.config.timeout;
        match tokio::time::timeout(
            timeout,
            self.send_unbounded(&method, url, accept, auth, body),
        )
        .await
        {
            Ok(result) => result,
            Err(_) => Err(HttpError::new(
                &method,
                url,
                HttpErrorKind::Timeout,
                format!("no complete response within {timeout:?}"),
            )),
        }
    }

    async fn send_unbounded(
        &self,
        method: &Method,
        url: &str,
        accept: &'static str,
        auth: &HttpAuth,
        body: HttpBody,
    ) -> Result<HttpResponse, HttpError> {
        let err = |kind, reason: String| HttpError::new(method, url, kind, reason);
        let target = Target::parse(url).map_err(|r| err(HttpErrorKind::InvalidUrl, r))?;
        let request = build_request(method, &target, accept, auth, body)
            .map_err(|r| err(HttpErrorKind::InvalidUrl, r))?;
        #[cfg(not(feature = "tls"))]
        if target.https {
            return Err(err(
                HttpErrorKind::InvalidUrl,
                "https needs the `tls` feature".into(),
            ));
        }
        let tcp = TcpStream::connect((target.host.as_str(), target.port))
            .await
            .map_err(|e| err(HttpErrorKind::Connect, e.to_string()))?;
        // Small request/response exchanges: do not wait for ACKs.
        let _ = tcp.set_nodelay(true);
        #[cfg(feature = "tls")]
        if target.https {
            let name = rustls_pki_types::ServerName::try_from(target.host.clone())
                .map_err(|_| err(HttpErrorKind::InvalidUrl, "not a TLS server name".into()))?;
            let stream = tokio_rustls::TlsConnector::from(self.tls.clone())
                .connect(name, tcp)
                .await
                .map_err(|e| err(HttpErrorKind::Tls, e.to_string()))?;
            return self.exchange(stream, request, method, url).await;
        }
        self.exchange(tcp, request, method, url).await
    }

    async fn exchange<S>(
        &self,
        stream: S,
        request: Request<Full<Bytes>>,
        method: &Method,
        url: &str,
    ) -> Result<HttpResponse, HttpError>
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let io_err = |e: hyper::Error| HttpError::new(method, url, HttpErrorKind::Io, e);
        let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(io_err)?;
        // The connection task drives the socket; it is aborted when this
        // request ends or is dropped (timeout), so nothing outlives it.
        let _driver = AbortOnDrop(tokio::spawn(connection));
        let response = sender.send_request(request).await.map_err(io_err)?;
        let status = response.status().as_u16();
        let content_type = response
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let limit = self.config.max_response_bytes;
        let too_large = || {
            HttpError::new(
                method,
                url,
                HttpErrorKind::TooLarge,
                format!("response body exceeds {limit} bytes"),
            )
        };
        if let Some(len) = response
            .headers()
            .get(hyper::header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok())
        {
            if len > limit as u64 {
                return Err(too_large());
            }
        }
        let body = Limited::new(response.into_body(), limit)
            .collect()
            .await
            .map_err(|e| {
                if e.is::<http_body_util::LengthLimitError>() {
                    too_large()
                } else {
                    HttpError::new(method, url, HttpErrorKind::Io, e)
                }
            })?
            .to_bytes();
        Ok(HttpResponse {
            status,
            content_type,
            body,
        })
    }
}

struct AbortOnDrop<T>(tokio::task::JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Where a URL points.
#[derive(Debug, PartialEq, Eq)]
struct Target {
    https: bool,
    host: String,
    port: u16,
    /// `host[:port]` as written, for the `Host` header.
    authority: String,
    path_and_query: String,
}

impl Target {
    fn parse(url: &str) -> Result<Target, String> {
        let uri: Uri = url.parse().map_err(|e| format!("invalid URL: {e}"))?;
        let https = match uri.scheme_str() {
            Some("http") => false,
            Some("https") => true,
            Some(other) => return Err(format!("scheme `{other}` is not http or https")),
            None => return Err("the URL has no scheme (http:// or https://)".into()),
        };
        let authority = uri.authority().ok_or("the URL has no host")?;
        if authority.as_str().contains('@') {
            return Err("credentials in the URL are not supported; use the auth settings".into());
        }
        let host = authority
            .host()
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_owned();
        if host.is_empty() {
            return Err("the URL has no host".into());
        }
        let port = authority.port_u16().unwrap_or(if https { 443 } else { 80 });
        let path_and_query = uri
            .path_and_query()
            .map(|p| p.as_str())
            .filter(|p| !p.is_empty())
            .unwrap_or("/")
            .to_owned();
        Ok(Target {
            https,
            host,
            port,
            authority: authority.as_str().to_owned(),
            path_and_query,
        })
    }
}

fn build_request(
    method: &Method,
    target: &Target,
    accept: &'static str,
    auth: &HttpAuth,
    body: HttpBody,
) -> Result<Request<Full<Bytes>>, String> {
    let mut builder = Request::builder()
        .method(method.clone())
        .uri(target.path_and_query.as_str())
        .header(HOST, target.authority.as_str())
        .header(ACCEPT, accept)
        .header(USER_AGENT, concat!("purekafka/", env!("CARGO_PKG_VERSION")));
    match auth {
        HttpAuth::None => {}
        HttpAuth::Basic { user, password } => {
            use base64::Engine;
            let pair = format!("{user}:{}", password.expose());
            let value = format!(
                "Basic {}",
                base64::engine::general_purpose::STANDARD.encode(pair)
            );
            builder = builder.header(AUTHORIZATION, sensitive(value)?);
        }
        HttpAuth::Bearer(token) => {
            builder = builder.header(
                AUTHORIZATION,
                sensitive(format!("Bearer {}", token.expose()))?,
            );
        }
    }
    let body = match body {
        HttpBody::Empty => Bytes::new(),
        HttpBody::Bytes { content_type, body } => {
            builder = builder.header(CONTENT_TYPE, content_type);
            body
        }
        HttpBody::Form(pairs) => {
            builder = builder.header(CONTENT_TYPE, "application/x-www-form-urlencoded");
            let encoded = form_urlencoded::Serializer::new(String::new())
                .extend_pairs(pairs)
                .finish();
            Bytes::from(encoded)
        }
    };
    builder
        .body(Full::new(body))
        .map_err(|e| format!("cannot build the request: {e}"))
}

fn sensitive(value: String) -> Result<HeaderValue, String> {
    let mut value = HeaderValue::try_from(value)
        .map_err(|_| "the credentials contain characters a header cannot carry".to_owned())?;
    value.set_sensitive(true);
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    #[test]
    fn urls_parse_into_host_port_and_path() {
        let t = Target::parse("http://127.0.0.1:8081/subjects?deleted=true").unwrap();
        assert_eq!(
            t,
            Target {
                https: false,
                host: "127.0.0.1".into(),
                port: 8081,
                authority: "127.0.0.1:8081".into(),
                path_and_query: "/subjects?deleted=true".into(),
            }
        );
        let t = Target::parse("https://[::1]").unwrap();
        assert_eq!(
            (t.host.as_str(), t.port, t.path_and_query.as_str()),
            ("::1", 443, "/")
        );
        assert!(Target::parse("ftp://x/").unwrap_err().contains("ftp"));
        assert!(Target::parse("/no/scheme").is_err());
        assert!(Target::parse("http://u:p@host/")
            .unwrap_err()
            .contains("credentials"));
    }

    #[test]
    fn retriable_statuses() {
        for (status, retriable) in [
            (404, false),
            (409, false),
            (408, true),
            (429, true),
            (503, true),
        ] {
            assert_eq!(
                HttpError::status("GET", "http://h/", status, "").is_retriable(),
                retriable,
                "{status}"
            );
        }
    }

    /// A one-shot server: reads one request (headers and a body of
    /// `Content-Length`), answers `response`, returns what it read.
    async fn serve_once(response: Vec<u8>) -> (String, tokio::task::JoinHandle<String>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let task = tokio::spawn(async move {
            let (mut socket, _) = listener.accept().await.unwrap();
            let mut seen = Vec::new();
            let mut buf = [0u8; 4096];
            loop {
                let n = socket.read(&mut buf).await.unwrap();
                seen.extend_from_slice(&buf[..n]);
                let text = String::from_utf8_lossy(&seen).to_string();
                if let Some(end) = text.find("\r\n\r\n") {
                    let len = text
                        .lines()
                        .find_map(|l| {
                            l.to_ascii_lowercase()
                                .strip_prefix("content-length: ")
                                .map(|v| v.trim().parse::<usize>().unwrap())
                        })
                        .unwrap_or(0);
                    if seen.len() >= end + 4 + len || n == 0 {
                        break;
                    }
                }
                if n == 0 {
                    break;
                }
            }
            socket.write_all(&response).await.unwrap();
            socket.shutdown().await.unwrap();
            String::from_utf8_lossy(&seen).to_string()
        });
        (url, task)
    }

    #[tokio::test]
    async fn post_form_with_basic_auth_sends_headers_and_body() {
        let (url, server) = serve_once(
            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"
                .to_vec(),
        )
        .await;
        let client = HttpClient::new(HttpConfig::default()).unwrap();
        let auth = HttpAuth::Basic {
            user: "alice".into(),
            password: Secret::new("s3cret"),
        };
        let body = HttpBody::Form(vec![
            ("grant_type".into(), "client_credentials".into()),
            ("scope".into(), "a b".into()),
        ]);
        let response = client
            .post(&format!("{url}/token"), "application/json", &auth, body)
            .await
            .unwrap();
        assert_eq!(response.status, 200);
        assert_eq!(response.content_type.as_deref(), Some("application/json"));
        assert_eq!(&response.body[..], b"{}");
        let seen = server.await.unwrap();
        assert!(seen.starts_with("POST /token HTTP/1.1\r\n"), "{seen}");
        // base64("alice:s3cret")
        assert!(
            seen.contains("authorization: Basic YWxpY2U6czNjcmV0\r\n"),
            "{seen}"
        );
        assert!(
            seen.contains("content-type: application/x-www-form-urlencoded\r\n"),
            "{seen}"
        );
        assert!(
            seen.ends_with("grant_type=client_credentials&scope=a+b"),
            "{seen}"
        );
    }

    #[tokio::test]
    async fn bearer_header_and_error_status_are_returned() {
        let (url, server) =
            serve_once(b"HTTP/1.1 404 Not Found\r\nContent-Length: 9\r\n\r\nnot found".to_vec())
                .await;
        let client = HttpClient::new(HttpConfig::default()).unwrap();
        let response = client
            .get(
                &format!("{url}/x"),
                "*/*",
                &HttpAuth::Bearer(Secret::new("tok")),
            )
            .await
            .unwrap();
        assert_eq!((response.status, response.is_success()), (404, false));
        assert!(server
            .await
            .unwrap()
            .contains("authorization: Bearer tok\r\n"));
    }

    #[tokio::test]
    async fn a_body_over_the_limit_is_refused_with_or_without_a_length() {
        for response in [
            b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n"
                .iter()
                .chain([b'x'; 100].iter())
                .copied()
                .collect::<Vec<u8>>(),
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n64\r\n"
                .iter()
                .chain([b'x'; 100].iter())
                .chain(b"\r\n0\r\n\r\n".iter())
                .copied()
                .collect(),
        ] {
            let (url, _server) = serve_once(response).await;
            let client = HttpClient::new(HttpConfig {
                max_response_bytes: 50,
                ..HttpConfig::default()
            })
            .unwrap();
            let err = client.get(&url, "*/*", &HttpAuth::None).await.unwrap_err();
            assert_eq!(err.kind, HttpErrorKind::TooLarge, "{err}");
            assert!(!err.is_retriable());
            assert!(err.to_string().contains(&url), "{err}");
        }
    }

    #[tokio::test]
    async fn a_silent_server_times_out_and_the_error_is_retriable() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/slow", listener.local_addr().unwrap());
        let _hold = tokio::spawn(async move {
            let (socket, _) = listener.accept().await.unwrap();
            tokio::time::sleep(Duration::from_secs(30)).await;
            drop(socket);
        });
        let client = HttpClient::new(HttpConfig {
            timeout: Duration::from_millis(200),
            ..HttpConfig::default()
        })
        .unwrap();
        let err = client.get(&url, "*/*", &HttpAuth::None).await.unwrap_err();
        assert_eq!(err.kind, HttpErrorKind::Timeout);
        assert!(err.is_retriable());
        assert!(err.to_string().contains("/slow"), "{err}");
    }

    #[tokio::test]
    async fn a_refused_connection_is_retriable_and_names_the_url() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/gone", listener.local_addr().unwrap());
        drop(listener);
        let client = HttpClient::new(HttpConfig::default()).unwrap();
        let err = client.get(&url, "*/*", &HttpAuth::None).await.unwrap_err();
        assert_eq!(err.kind, HttpErrorKind::Connect, "{err}");
        assert!(err.is_retriable());
        assert!(err.to_string().contains(&url));
    }

    #[cfg(not(feature = "tls"))]
    #[tokio::test]
    async fn https_without_tls_is_refused() {
        let client = HttpClient::new(HttpConfig::default()).unwrap();
        let err = client
            .get("https://127.0.0.1:1/", "*/*", &HttpAuth::None)
            .await
            .unwrap_err();
        assert_eq!(err.kind, HttpErrorKind::InvalidUrl);
    }

    #[cfg(feature = "tls")]
    mod https {
        use super::*;
        use rustls_pki_types::pem::PemObject;
        use rustls_pki_types::{CertificateDer, PrivateKeyDer};
        use std::sync::Arc;

        fn testdata(name: &str) -> std::path::PathBuf {
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("src/http/testdata")
                .join(name)
        }

        /// A TLS server on loopback (the test CA's certificate for
        /// 127.0.0.1) answering one request with 200 and `ok`.
        async fn tls_server() -> String {
            let certs: Vec<CertificateDer<'static>> =
                CertificateDer::pem_file_iter(testdata("server.pem"))
                    .unwrap()
                    .collect::<std::result::Result<_, _>>()
                    .unwrap();
            let key = PrivateKeyDer::from_pem_file(testdata("server-key.pem")).unwrap();
            let config = rustls::ServerConfig::builder_with_provider(Arc::new(
                rustls_graviola::default_provider(),
            ))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(certs, key)
            .unwrap();
            let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
            let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
            let url = format!("https://{}/subjects", listener.local_addr().unwrap());
            tokio::spawn(async move {
                while let Ok((tcp, _)) = listener.accept().await {
                    let Ok(mut tls) = acceptor.accept(tcp).await else {
                        continue;
                    };
                    let mut buf = [0u8; 4096];
                    let _ = tls.read(&mut buf).await;
                    let _ = tls
                        .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
                        .await;
                    let _ = tls.shutdown().await;
                }
            });
            url
        }

        #[tokio::test]
        async fn https_verifies_the_server_against_the_configured_ca() {
            let url = tls_server().await;
            let trusted = HttpClient::new(HttpConfig {
                tls: crate::TlsConfig {
                    ca_location: Some(testdata("ca.pem")),
                    ..crate::TlsConfig::default()
                },
                ..HttpConfig::default()
            })
            .unwrap();
            let response = trusted.get(&url, "*/*", &HttpAuth::None).await.unwrap();
            assert_eq!((response.status, &response.body[..]), (200, &b"ok"[..]));

            // The bundled roots do not know the test CA: a TLS error, not
            // retriable, naming the URL.
            let default_roots = HttpClient::new(HttpConfig::default()).unwrap();
            let err = default_roots
                .get(&url, "*/*", &HttpAuth::None)
                .await
                .unwrap_err();
            assert_eq!(err.kind, HttpErrorKind::Tls, "{err}");
            assert!(!err.is_retriable());
            assert!(err.to_string().contains(&url), "{err}");
        }
    }
}
