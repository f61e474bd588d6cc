//! An in-process fake schema registry: the Confluent Schema Registry REST
//! API subset purekafka's client uses, served over HTTP/1.1 on loopback,
//! state in memory.
//!
//! Served: `GET /subjects`, `GET /subjects/{s}/versions`,
//! `GET /subjects/{s}/versions/{v|latest}`, `POST /subjects/{s}/versions`,
//! `POST /subjects/{s}`, `GET /schemas/ids/{id}`,
//! `POST /compatibility/subjects/{s}/versions/{v|latest}`, with the
//! registry's error bodies (`{"error_code": 40401, "message": ...}`).
//! Ids are global (the same schema text and type under two subjects has
//! one id); compatibility is BACKWARD against the latest version, checked
//! for Avro with apache-avro's schema resolution rules (other types are
//! accepted). Optional auth: every request must carry one exact
//! `Authorization` header. Every request line is logged, so tests can
//! assert what a client's cache saved.
//!
//! ```no_run
//! # async fn demo() -> std::io::Result<()> {
//! let registry = purekafka_testkit::registry::FakeRegistry::start().await?;
//! println!("schema.registry.url={}", registry.url());
//! # Ok(())
//! # }
//! ```

mod state;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

use state::{Reply, State};

/// Largest request body the fake reads.
const MAX_BODY: usize = 1 << 20;

/// A running fake registry; stops when dropped.
pub struct FakeRegistry {
    addr: SocketAddr,
    shared: Arc<Shared>,
    accept: JoinHandle<()>,
}

struct Shared {
    state: Mutex<State>,
    authorization: Option<String>,
    log: Mutex<Vec<String>>,
}

impl FakeRegistry {
    /// Starts a registry without auth on an ephemeral loopback port.
    pub async fn start() -> std::io::Result<FakeRegistry> {
        FakeRegistry::start_with_auth(None).await
    }

    /// Starts a registry that answers 401 unless a request's
    /// `Authorization` header equals `authorization` (for example
    /// `Basic dXNlcjpwYXNz`).
    pub async fn start_with_auth(authorization: Option<String>) -> std::io::Result<FakeRegistry> {
        FakeRegistry::bind("127.0.0.1:0", authorization).await
    }

    /// Starts on `addr` (for the `fake-schema-registry` binary).
    pub async fn bind(addr: &str, authorization: Option<String>) -> std::io::Result<FakeRegistry> {
        let listener = TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            state: Mutex::new(State::default()),
            authorization,
            log: Mutex::new(Vec::new()),
        });
        let accept_shared = shared.clone();
        let accept = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    // Out of file descriptors or similar: back off instead
                    // of spinning.
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    continue;
                };
                let shared = accept_shared.clone();
                tokio::spawn(async move {
                    let service = service_fn(move |req| {
                        let shared = shared.clone();
                        async move { Ok::<_, Infallible>(handle(&shared, req).await) }
                    });
                    if let Err(e) = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await
                    {
                        tracing::debug!(error = %e, "fake registry connection ended");
                    }
                });
            }
        });
        Ok(FakeRegistry {
            addr,
            shared,
            accept,
        })
    }

    /// The base URL, for `schema.registry.url`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The request lines served so far (`GET /schemas/ids/1`).
    pub fn requests(&self) -> Vec<String> {
        self.shared
            .log
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Stops answering; runs on drop too.
    pub fn stop(&self) {
        self.accept.abort();
    }
}

impl Drop for FakeRegistry {
    fn drop(&mut self) {
        self.stop();
    }
}

async fn handle(shared: &Shared, req: Request<Incoming>) -> Response<Full<Bytes>> {
    let method = req.method().as_str().to_owned();
    let path = req.uri().path().to_owned();
    shared
        .log
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .push(format!("{method} {path}"));
    if let Some(expected) = &shared.authorization {
        let given = req
            .headers()
            .get(hyper::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok());
        if given != Some(expected.as_str()) {
            return respond(Reply::error(401, 40101, "Unauthorized"));
        }
    }
    let body = match Limited::new(req.into_body(), MAX_BODY).collect().await {
        Ok(b) => b.to_bytes(),
        Err(_) => {
            return respond(Reply::error(
                400,
                400,
                "request body unreadable or too large",
            ))
        }
    };
    let segments: Vec<String> = path
        .split('/')
        .filter(|s| !s.is_empty())
        .map(|s| {
            percent_encoding::percent_decode_str(s)
                .decode_utf8_lossy()
                .into_owned()
        })
        .collect();
    let segments: Vec<&str> = segments.iter().map(String::as_str).collect();
    let reply = shared
        .state
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .serve(&method, &segments, &body);
    respond(reply)
}

fn respond(reply: Reply) -> Response<Full<Bytes>> {
    Response::builder()
        .status(reply.status)
        .header("content-type", "application/vnd.schemaregistry.v1+json")
        .body(Full::new(Bytes::from(reply.body.to_string())))
        .unwrap_or_else(|_| Response::new(Full::new(Bytes::new())))
}
