//! The registry client: Confluent Schema Registry's REST API (the API
//! Karapace and Apicurio's `ccompat` endpoint also serve), with caches so a
//! serializer or deserializer asks the registry once per schema.
//!
//! Endpoints used: `GET /subjects`, `GET /subjects/{s}/versions`,
//! `GET /subjects/{s}/versions/{v}`, `POST /subjects/{s}/versions`
//! (register), `POST /subjects/{s}` (look a schema up),
//! `GET /schemas/ids/{id}`, `POST /compatibility/subjects/{s}/versions/{v}`,
//! `GET`/`PUT /config` and `/config/{s}` (compatibility levels).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use hyper::Method;
use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};
use serde::{Deserialize, Serialize};

use crate::config::Secret;
use crate::http::{HttpAuth, HttpBody, HttpClient, HttpConfig, HttpError, HttpResponse};

/// Characters escaped in a path segment: all but RFC 3986's unreserved.
const SEGMENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// The registry's media type, sent as `Accept` and `Content-Type`.
const MEDIA_TYPE: &str = "application/vnd.schemaregistry.v1+json";

/// How a schema is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
#[non_exhaustive]
pub enum SchemaType {
    /// Apache Avro (the registry's default when `schemaType` is absent).
    #[default]
    Avro,
    /// Protocol Buffers.
    Protobuf,
    /// JSON Schema.
    Json,
}

/// A reference from one schema to another registered one.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct SchemaReference {
    /// The name the referring schema uses (a type name or file name).
    pub name: String,
    /// The subject the referenced schema is registered under.
    pub subject: String,
    /// Its version.
    pub version: i32,
}

/// A schema as the registry stores it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Schema {
    /// The schema text.
    pub schema: String,
    /// Its type.
    #[serde(rename = "schemaType", default)]
    pub schema_type: SchemaType,
    /// Other schemas it refers to.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub references: Vec<SchemaReference>,
}

impl Schema {
    /// An Avro schema from its JSON text.
    pub fn avro(text: impl Into<String>) -> Schema {
        Schema {
            schema: text.into(),
            schema_type: SchemaType::Avro,
            references: Vec::new(),
        }
    }
}

/// A compatibility level: which earlier versions a new version of a subject
/// must be compatible with, and in which direction (the registry's
/// `compatibility` / `compatibilityLevel` values).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
#[non_exhaustive]
pub enum Compatibility {
    /// No check.
    None,
    /// Readers of the new version read data written with the latest one.
    Backward,
    /// As `Backward`, against every earlier version.
    BackwardTransitive,
    /// Readers of the latest version read data written with the new one.
    Forward,
    /// As `Forward`, against every earlier version.
    ForwardTransitive,
    /// Both `Backward` and `Forward`.
    Full,
    /// As `Full`, against every earlier version.
    FullTransitive,
}

/// A schema registered under a subject.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct RegisteredSchema {
    /// The subject.
    pub subject: String,
    /// The schema id (global across subjects).
    pub id: u32,
    /// The version within the subject.
    pub version: i32,
    /// The schema.
    #[serde(flatten)]
    pub schema: Schema,
}

/// Which version of a subject.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    /// The newest.
    Latest,
    /// A version number.
    Number(i32),
}

impl std::fmt::Display for Version {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Version::Latest => f.write_str("latest"),
            Version::Number(n) => write!(f, "{n}"),
        }
    }
}

/// A registry failure.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum RegistryError {
    /// The request did not get an answer, or got a status outside the
    /// registry's error format; see [`HttpError::is_retriable`].
    #[error(transparent)]
    Http(#[from] HttpError),
    /// The registry refused the request with its own error code (for
    /// example 40401 subject not found, 40403 schema not found, 409
    /// incompatible schema, 42201 invalid schema).
    #[error("schema registry {url}: error {error_code}: {message}")]
    Registry {
        /// The URL requested.
        url: String,
        /// The HTTP status.
        status: u16,
        /// The registry's error code.
        error_code: i32,
        /// The registry's message.
        message: String,
    },
    /// The answer was not what the API documents.
    #[error("schema registry {url}: unexpected answer: {reason}")]
    Decode {
        /// The URL requested.
        url: String,
        /// What was wrong.
        reason: String,
    },
    /// A setting is missing or malformed; not retriable: fix `key`.
    #[error("schema registry config `{key}`: {reason}")]
    Config {
        /// The config key.
        key: String,
        /// What is wrong.
        reason: String,
    },
}

impl RegistryError {
    /// Whether the same call may succeed later: transport failures,
    /// timeouts, and the registry's 5xx answers (50001-50003: store or
    /// forwarding errors).
    pub fn is_retriable(&self) -> bool {
        match self {
            RegistryError::Http(e) => e.is_retriable(),
            RegistryError::Registry { status, .. } => *status >= 500 || *status == 429,
            RegistryError::Decode { .. } | RegistryError::Config { .. } => false,
        }
    }

    /// Whether the registry said the subject, version or schema does not
    /// exist (HTTP 404).
    pub fn is_not_found(&self) -> bool {
        matches!(self, RegistryError::Registry { status: 404, .. })
    }

    fn config(key: &str, reason: impl ToString) -> Self {
        RegistryError::Config {
            key: key.to_owned(),
            reason: reason.to_string(),
        }
    }
}

/// Connection settings for [`SchemaRegistryClient`]; the keys are those of
/// Confluent's Java client.
#[derive(Debug, Clone)]
pub struct RegistryConfig {
    /// `schema.registry.url`: one or more base URLs (comma-separated in the
    /// property); each request tries them in order while the failure is
    /// retriable.
    pub urls: Vec<String>,
    /// `basic.auth.user.info` (`user:password`, with
    /// `basic.auth.credentials.source=USER_INFO`) or `bearer.auth.token`
    /// (with `bearer.auth.credentials.source=STATIC_TOKEN`).
    pub auth: HttpAuth,
    /// Timeout, response bound and (feature `tls`) TLS settings of every
    /// request. `schema.registry.request.timeout.ms` sets the timeout
    /// (purekafka's key; default 30 s).
    pub http: HttpConfig,
    /// Most schemas kept in each cache (`schema.registry.cache.capacity`,
    /// default 1000, as the Java client's identity map); past it, answers
    /// are still returned but not kept.
    pub cache_capacity: usize,
}

impl RegistryConfig {
    /// Settings for one registry URL, no auth, default timeouts.
    pub fn new(url: impl Into<String>) -> Self {
        RegistryConfig {
            urls: vec![url.into()],
            auth: HttpAuth::None,
            http: HttpConfig::default(),
            cache_capacity: 1000,
        }
    }

    /// Reads the Java client's property names (others are ignored, so the
    /// same map can carry serializer settings).
    pub fn from_properties<'a>(
        props: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> Result<Self, RegistryError> {
        let props: HashMap<&str, &str> = props.into_iter().collect();
        let urls: Vec<String> = props
            .get("schema.registry.url")
            .ok_or_else(|| RegistryError::config("schema.registry.url", "missing"))?
            .split(',')
            .map(|u| u.trim().trim_end_matches('/').to_owned())
            .filter(|u| !u.is_empty())
            .collect();
        if urls.is_empty() {
            return Err(RegistryError::config("schema.registry.url", "no URL"));
        }
        let mut config = RegistryConfig::new(String::new());
        config.urls = urls;
        let basic_source = props
            .get("basic.auth.credentials.source")
            .copied()
            .unwrap_or("USER_INFO");
        if let Some(info) = props.get("basic.auth.user.info").filter(|s| !s.is_empty()) {
            if basic_source != "USER_INFO" {
                return Err(RegistryError::config(
                    "basic.auth.credentials.source",
                    format!("`{basic_source}` is not supported; use USER_INFO"),
                ));
            }
            let (user, password) = info.split_once(':').ok_or_else(|| {
                RegistryError::config("basic.auth.user.info", "expected `user:password`")
            })?;
            config.auth = HttpAuth::Basic {
                user: user.to_owned(),
                password: Secret::new(password),
            };
        }
        if let Some(token) = props.get("bearer.auth.token").filter(|s| !s.is_empty()) {
            if matches!(config.auth, HttpAuth::Basic { .. }) {
                return Err(RegistryError::config(
                    "bearer.auth.token",
                    "set either basic.auth.user.info or bearer.auth.token, not both",
                ));
            }
            match props.get("bearer.auth.credentials.source").copied() {
                None | Some("STATIC_TOKEN") => {}
                Some(other) => {
                    return Err(RegistryError::config(
                        "bearer.auth.credentials.source",
                        format!("`{other}` is not supported; use STATIC_TOKEN"),
                    ))
                }
            }
            config.auth = HttpAuth::Bearer(Secret::new(*token));
        }
        if let Some(ms) = props.get("schema.registry.request.timeout.ms") {
            let ms: u64 = ms.parse().map_err(|_| {
                RegistryError::config("schema.registry.request.timeout.ms", "not a number")
            })?;
            config.http.timeout = Duration::from_millis(ms);
        }
        if let Some(n) = props.get("schema.registry.cache.capacity") {
            config.cache_capacity = n.parse().map_err(|_| {
                RegistryError::config("schema.registry.cache.capacity", "not a number")
            })?;
        }
        Ok(config)
    }
}

#[derive(Default)]
struct Cache {
    by_id: HashMap<u32, Arc<Schema>>,
    ids: HashMap<(String, Schema), u32>,
}

/// A schema registry client; cheap to clone (clones share the caches).
#[derive(Clone)]
pub struct SchemaRegistryClient {
    inner: Arc<Inner>,
}

struct Inner {
    config: RegistryConfig,
    http: HttpClient,
    cache: Mutex<Cache>,
}

impl std::fmt::Debug for SchemaRegistryClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SchemaRegistryClient")
            .field("urls", &self.inner.config.urls)
            .finish_non_exhaustive()
    }
}

#[derive(Deserialize)]
struct IdAnswer {
    id: u32,
}

#[derive(Deserialize)]
struct CompatibilityAnswer {
    is_compatible: bool,
}

#[derive(Serialize)]
struct CompatibilityConfig {
    compatibility: Compatibility,
}

/// `GET /config` answers `compatibilityLevel`, `PUT /config` answers
/// `compatibility`; either is accepted.
#[derive(Deserialize)]
struct CompatibilityConfigAnswer {
    #[serde(alias = "compatibilityLevel")]
    compatibility: Compatibility,
}

#[derive(Deserialize)]
struct ErrorAnswer {
    error_code: i32,
    message: String,
}

impl SchemaRegistryClient {
    /// A client for `config`; fails when its TLS settings cannot be used.
    pub fn new(config: RegistryConfig) -> Result<Self, RegistryError> {
        if config.urls.is_empty() {
            return Err(RegistryError::config("schema.registry.url", "no URL"));
        }
        let http = HttpClient::new(config.http.clone()).map_err(|e| RegistryError::Config {
            key: "ssl.*".into(),
            reason: e.to_string(),
        })?;
        Ok(SchemaRegistryClient {
            inner: Arc::new(Inner {
                config,
                http,
                cache: Mutex::new(Cache::default()),
            }),
        })
    }

    /// The settings.
    pub fn config(&self) -> &RegistryConfig {
        &self.inner.config
    }

    /// All subjects.
    pub async fn subjects(&self) -> Result<Vec<String>, RegistryError> {
        self.call(Method::GET, &["subjects"], None::<&Schema>).await
    }

    /// The versions registered under `subject`.
    pub async fn versions(&self, subject: &str) -> Result<Vec<i32>, RegistryError> {
        self.call(
            Method::GET,
            &["subjects", subject, "versions"],
            None::<&Schema>,
        )
        .await
    }

    /// One version of `subject`.
    pub async fn version(
        &self,
        subject: &str,
        version: Version,
    ) -> Result<RegisteredSchema, RegistryError> {
        let v = version.to_string();
        let found: RegisteredSchema = self
            .call(
                Method::GET,
                &["subjects", subject, "versions", &v],
                None::<&Schema>,
            )
            .await?;
        self.remember(subject, &found.schema, found.id);
        Ok(found)
    }

    /// Registers `schema` under `subject` (a no-op answering the existing
    /// id when it is already there); cached, so a second call for the same
    /// subject and schema does not ask the registry.
    pub async fn register(&self, subject: &str, schema: &Schema) -> Result<u32, RegistryError> {
        if let Some(id) = self.cached_id(subject, schema) {
            return Ok(id);
        }
        let answer: IdAnswer = self
            .call(
                Method::POST,
                &["subjects", subject, "versions"],
                Some(schema),
            )
            .await?;
        self.remember(subject, schema, answer.id);
        Ok(answer.id)
    }

    /// Looks `schema` up under `subject` without registering it; a
    /// [`RegistryError::is_not_found`] error when it is not there. Cached.
    pub async fn lookup(
        &self,
        subject: &str,
        schema: &Schema,
    ) -> Result<RegisteredSchema, RegistryError> {
        let found: RegisteredSchema = self
            .call(Method::POST, &["subjects", subject], Some(schema))
            .await?;
        self.remember(subject, schema, found.id);
        Ok(found)
    }

    /// The schema with `id`, from the cache or the registry.
    pub async fn schema_by_id(&self, id: u32) -> Result<Arc<Schema>, RegistryError> {
        if let Some(schema) = self.cached_schema(id) {
            return Ok(schema);
        }
        let id_text = id.to_string();
        let schema: Schema = self
            .call(Method::GET, &["schemas", "ids", &id_text], None::<&Schema>)
            .await?;
        let schema = Arc::new(schema);
        let mut cache = self.lock();
        if cache.by_id.len() < self.inner.config.cache_capacity {
            cache.by_id.insert(id, schema.clone());
        }
        Ok(schema)
    }

    /// The schema with `id` if it is cached (no I/O): the synchronous
    /// deserializers read this.
    pub fn cached_schema(&self, id: u32) -> Option<Arc<Schema>> {
        self.lock().by_id.get(&id).cloned()
    }

    /// Whether `schema` is compatible with `version` of `subject` under the
    /// subject's compatibility level.
    pub async fn is_compatible(
        &self,
        subject: &str,
        version: Version,
        schema: &Schema,
    ) -> Result<bool, RegistryError> {
        let v = version.to_string();
        let answer: CompatibilityAnswer = self
            .call(
                Method::POST,
                &["compatibility", "subjects", subject, "versions", &v],
                Some(schema),
            )
            .await?;
        Ok(answer.is_compatible)
    }

    /// Sets the compatibility level of `subject`, or the registry's default
    /// when `subject` is `None` (`PUT /config[/{subject}]`).
    pub async fn set_compatibility(
        &self,
        subject: Option<&str>,
        level: Compatibility,
    ) -> Result<(), RegistryError> {
        let path: &[&str] = match subject {
            Some(s) => &["config", s],
            None => &["config"],
        };
        let _: CompatibilityConfigAnswer = self
            .call(
                Method::PUT,
                path,
                Some(&CompatibilityConfig {
                    compatibility: level,
                }),
            )
            .await?;
        Ok(())
    }

    /// The compatibility level of `subject` (a [`RegistryError::is_not_found`]
    /// error when it has none of its own), or the registry's default when
    /// `subject` is `None` (`GET /config[/{subject}]`).
    pub async fn compatibility(
        &self,
        subject: Option<&str>,
    ) -> Result<Compatibility, RegistryError> {
        let path: &[&str] = match subject {
            Some(s) => &["config", s],
            None => &["config"],
        };
        let answer: CompatibilityConfigAnswer =
            self.call(Method::GET, path, None::<&Schema>).await?;
        Ok(answer.compatibility)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Cache> {
        // The cache holds plain maps; a panic elsewhere cannot leave them
        // half-updated, so a poisoned lock is still usable.
        self.inner
            .cache
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn cached_id(&self, subject: &str, schema: &Schema) -> Option<u32> {
        self.lock()
            .ids
            .get(&(subject.to_owned(), schema.clone()))
            .copied()
    }

    fn remember(&self, subject: &str, schema: &Schema, id: u32) {
        let capacity = self.inner.config.cache_capacity;
        let mut cache = self.lock();
        if cache.ids.len() < capacity {
            cache.ids.insert((subject.to_owned(), schema.clone()), id);
        }
        if cache.by_id.len() < capacity {
            cache
                .by_id
                .entry(id)
                .or_insert_with(|| Arc::new(schema.clone()));
        }
    }

    /// One request to the first URL that answers; retriable failures move
    /// on to the next URL, the last failure is returned.
    async fn call<T: serde::de::DeserializeOwned, B: Serialize>(
        &self,
        method: Method,
        path: &[&str],
        body: Option<&B>,
    ) -> Result<T, RegistryError> {
        let path: String = path
            .iter()
            .map(|segment| format!("/{}", utf8_percent_encode(segment, SEGMENT)))
            .collect();
        let body = match body {
            Some(body) => Some(Bytes::from(serde_json::to_vec(body).map_err(|e| {
                RegistryError::Decode {
                    url: path.clone(),
                    reason: format!("cannot encode the request body: {e}"),
                }
            })?)),
            None => None,
        };
        let mut last = None;
        for base in &self.inner.config.urls {
            let url = format!("{}{path}", base.trim_end_matches('/'));
            let body = match &body {
                Some(bytes) => HttpBody::Bytes {
                    content_type: MEDIA_TYPE,
                    body: bytes.clone(),
                },
                None => HttpBody::Empty,
            };
            let result = self
                .inner
                .http
                .send(
                    method.clone(),
                    &url,
                    MEDIA_TYPE,
                    &self.inner.config.auth,
                    body,
                )
                .await;
            let outcome = result
                .map_err(RegistryError::from)
                .and_then(|response| decode(method.as_str(), &url, response));
            match outcome {
                Err(e) if e.is_retriable() => {
                    tracing::debug!(url = %url, error = %e, "schema registry request failed; trying the next URL");
                    last = Some(e);
                }
                other => return other,
            }
        }
        Err(last.unwrap_or_else(|| RegistryError::config("schema.registry.url", "no URL")))
    }
}

fn decode<T: serde::de::DeserializeOwned>(
    method: &str,
    url: &str,
    response: HttpResponse,
) -> Result<T, RegistryError> {
    if response.is_success() {
        return serde_json::from_slice(&response.body).map_err(|e| RegistryError::Decode {
            url: url.to_owned(),
            reason: e.to_string(),
        });
    }
    match serde_json::from_slice::<ErrorAnswer>(&response.body) {
        Ok(err) => Err(RegistryError::Registry {
            url: url.to_owned(),
            status: response.status,
            error_code: err.error_code,
            message: err.message,
        }),
        Err(_) => Err(RegistryError::Http(HttpError::status(
            method,
            url,
            response.status,
            &String::from_utf8_lossy(&response.body),
        ))),
    }
}
