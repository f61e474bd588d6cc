//! Apache Kafka in a container for tests (issue #14), started through
//! [testcontainers](https://docs.rs/testcontainers): one KRaft node by
//! default, a secure node (SASL PLAIN and SCRAM, KIP-84/KIP-554, and a TLS
//! listener), or a cluster of nodes on a user-defined network with fault
//! injection (`kill`, `pause`, `restart`).
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use purekafka_testkit::KafkaContainer;
//!
//! let kafka = KafkaContainer::builder().start().await?;
//! let producer = purekafka::producer::Producer::connect(kafka.producer_config().build()?).await?;
//! # drop(producer);
//! # Ok(()) }
//! ```
//!
//! - Image: `apache/kafka:4.4.0`; `PUREKAFKA_KAFKA_IMAGE=name:tag` or
//!   [`KafkaContainerBuilder::image`] overrides it. Where no registry is
//!   reachable, purekafka's `scripts/kafka-image` builds
//!   `localhost/purekafka/kafka:<version>`, which reads the same `KAFKA_*`
//!   variables.
//! - Advertised listeners are the host ports the engine mapped, written into
//!   the container after it started and before the broker does (see
//!   `image.rs` and DESIGN.md).
//! - Ready means purekafka answered ApiVersions and Metadata from every node.
//! - Dropping a [`KafkaContainer`] removes its containers (and network).

mod builder;
mod engine;
mod error;
mod image;
mod ready;
mod secure;

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use purekafka::config::{SaslMechanism, SecurityProtocol, TlsConfig};
use purekafka::consumer::ConsumerConfigBuilder;
use purekafka::producer::ProducerConfigBuilder;
use purekafka::{ClientConfig, ClientConfigBuilder, ConsumerConfig};
use testcontainers::ContainerAsync;
use tokio::time::Instant;

pub use builder::KafkaContainerBuilder;
pub use error::{Error, Result};
pub use secure::{BROKER_DNS_NAME, SCRAM_PASSWORD, SCRAM_USER, SECURE_PASSWORD, SECURE_USER};

use image::{KafkaImage, EXTERNAL_PORT};

/// The image users pull: Apache Kafka's own.
pub const DEFAULT_IMAGE: &str = "apache/kafka";
/// The default image's tag: the Kafka version purekafka is tested against.
pub const DEFAULT_TAG: &str = "4.4.0";
/// Environment variable that overrides the image: `name:tag`.
pub const IMAGE_ENV: &str = "PUREKAFKA_KAFKA_IMAGE";
/// Most nodes a cluster may have (each is a JVM with a 512 MiB heap).
pub const MAX_NODES: usize = 5;

/// The client side of the test PKI as files (`ca.pem`, `client.pem`,
/// `client.key`), for [`TlsConfig`]; removed with the container.
#[derive(Debug)]
struct TlsDir {
    dir: PathBuf,
}

impl TlsDir {
    fn write(run_id: &str, m: &secure::TlsMaterial) -> Result<TlsDir> {
        let dir = std::env::temp_dir().join(format!("purekafka-testkit-{run_id}"));
        std::fs::create_dir_all(&dir).map_err(|source| Error::Io {
            path: dir.display().to_string(),
            source,
        })?;
        let tls = TlsDir { dir };
        for (name, text) in [
            ("ca.pem", &m.ca_pem),
            ("client.pem", &m.client_pem),
            ("client.key", &m.client_key_pem),
        ] {
            let path = tls.dir.join(name);
            std::fs::write(&path, text).map_err(|source| Error::Io {
                path: path.display().to_string(),
                source,
            })?;
        }
        Ok(tls)
    }
}

impl Drop for TlsDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// One node: its id and container.
struct Node {
    id: i32,
    container: ContainerAsync<KafkaImage>,
}

/// Where one node's listeners are reached from the host.
#[derive(Debug, Clone, Default)]
struct NodeAddrs {
    plain: String,
    sasl: Option<String>,
    tls: Option<String>,
    mtls: Option<String>,
}

/// A running Kafka cluster in containers. Dropping it removes them.
pub struct KafkaContainer {
    nodes: Vec<Node>,
    addrs: Mutex<Vec<NodeAddrs>>,
    tls: Option<TlsDir>,
    image: String,
    startup_timeout: Duration,
}

impl std::fmt::Debug for KafkaContainer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KafkaContainer")
            .field("image", &self.image)
            .field("nodes", &self.nodes.len())
            .field("bootstrap", &self.bootstrap_servers())
            .finish_non_exhaustive()
    }
}

impl KafkaContainer {
    /// A builder: one node, image `apache/kafka:4.4.0` unless overridden.
    pub fn builder() -> KafkaContainerBuilder {
        KafkaContainerBuilder::default()
    }

    /// The image the containers run (`name:tag`).
    pub fn image(&self) -> &str {
        &self.image
    }

    /// How many nodes the cluster has.
    pub fn nodes(&self) -> usize {
        self.nodes.len()
    }

    fn addrs(&self) -> Vec<NodeAddrs> {
        self.addrs
            .lock()
            .map(|a| a.clone())
            .unwrap_or_else(|poisoned| poisoned.into_inner().clone())
    }

    /// `bootstrap.servers` for the PLAINTEXT listeners of every node
    /// (`127.0.0.1:<mapped port>,...`).
    pub fn bootstrap_servers(&self) -> String {
        self.addrs()
            .iter()
            .map(|a| a.plain.as_str())
            .collect::<Vec<_>>()
            .join(",")
    }

    /// Node `node`'s PLAINTEXT address (nodes are numbered from 1).
    pub fn node_bootstrap_server(&self, node: i32) -> Result<String> {
        let i = self.index(node)?;
        Ok(self
            .addrs()
            .get(i)
            .map(|a| a.plain.clone())
            .unwrap_or_default())
    }

    /// The SASL_PLAINTEXT listeners (secure mode).
    pub fn sasl_bootstrap_servers(&self) -> Result<String> {
        self.secure_addrs("sasl_bootstrap_servers", |a| a.sasl.clone())
    }

    /// The SASL_SSL listeners (secure mode).
    pub fn tls_bootstrap_servers(&self) -> Result<String> {
        self.secure_addrs("tls_bootstrap_servers", |a| a.tls.clone())
    }

    fn secure_addrs(
        &self,
        what: &'static str,
        pick: impl Fn(&NodeAddrs) -> Option<String>,
    ) -> Result<String> {
        self.addrs()
            .iter()
            .map(&pick)
            .collect::<Option<Vec<_>>>()
            .filter(|v| !v.is_empty())
            .map(|v| v.join(","))
            .ok_or(Error::NotSecure { what })
    }

    /// The SSL listeners that require a client certificate (secure mode;
    /// `client.pem` and `client.key` in [`KafkaContainer::tls_dir`]).
    pub fn mtls_bootstrap_servers(&self) -> Result<String> {
        self.secure_addrs("mtls_bootstrap_servers", |a| a.mtls.clone())
    }

    /// The directory of the client side of the test PKI (secure mode):
    /// `ca.pem` (the CA that signed the broker's and the client's
    /// certificates), `client.pem` and `client.key` (PKCS#8). Removed with
    /// the container.
    pub fn tls_dir(&self) -> Result<&Path> {
        self.tls
            .as_ref()
            .map(|t| t.dir.as_path())
            .ok_or(Error::NotSecure { what: "tls_dir" })
    }

    /// The PEM file of the test CA (secure mode), for `ssl.ca.location`.
    pub fn ca_certificate_path(&self) -> Result<PathBuf> {
        self.tls
            .as_ref()
            .map(|t| t.dir.join("ca.pem"))
            .ok_or(Error::NotSecure {
                what: "ca_certificate_path",
            })
    }

    /// Client settings for the PLAINTEXT listeners: bootstrap servers and a
    /// client id; add anything else.
    pub fn client_config(&self) -> ClientConfigBuilder {
        ClientConfig::builder()
            .bootstrap_servers(self.bootstrap_servers())
            .client_id("purekafka-testkit")
    }

    /// A producer builder on [`KafkaContainer::client_config`].
    pub fn producer_config(&self) -> ProducerConfigBuilder {
        purekafka::producer::ProducerConfig::builder().client(self.client_config())
    }

    /// A consumer builder on [`KafkaContainer::client_config`]; set a group
    /// id for subscriptions.
    pub fn consumer_config(&self) -> ConsumerConfigBuilder {
        let client = self.client_config();
        ConsumerConfig::builder().client(|_| client)
    }

    /// Client settings for the SASL_PLAINTEXT listeners as
    /// [`SECURE_USER`] with `mechanism` (secure mode).
    pub fn sasl_client_config(&self, mechanism: SaslMechanism) -> Result<ClientConfigBuilder> {
        Ok(ClientConfig::builder()
            .bootstrap_servers(self.sasl_bootstrap_servers()?)
            .client_id("purekafka-testkit")
            .security_protocol(SecurityProtocol::SaslPlaintext)
            .sasl_mechanism(mechanism)
            .sasl_credentials(SECURE_USER, SECURE_PASSWORD))
    }

    /// Client settings for the SASL_SSL listeners as [`SECURE_USER`] with
    /// `mechanism`, trusting the test CA (secure mode; connecting needs
    /// purekafka's `tls` feature, which this crate's `tls` feature enables).
    pub fn tls_client_config(&self, mechanism: SaslMechanism) -> Result<ClientConfigBuilder> {
        let tls = TlsConfig {
            ca_location: Some(self.ca_certificate_path()?),
            ..TlsConfig::default()
        };
        Ok(ClientConfig::builder()
            .bootstrap_servers(self.tls_bootstrap_servers()?)
            .client_id("purekafka-testkit")
            .security_protocol(SecurityProtocol::SaslSsl)
            .sasl_mechanism(mechanism)
            .sasl_credentials(SECURE_USER, SECURE_PASSWORD)
            .tls(tls))
    }

    /// The engine's id of node `node`'s container.
    pub fn container_id(&self, node: i32) -> Result<&str> {
        Ok(self.node(node)?.container.id())
    }

    fn index(&self, node: i32) -> Result<usize> {
        let i = usize::try_from(node).ok().and_then(|n| n.checked_sub(1));
        i.filter(|&i| i < self.nodes.len())
            .ok_or(Error::NoSuchNode {
                node,
                nodes: self.nodes.len(),
            })
    }

    fn node(&self, node: i32) -> Result<&Node> {
        let i = self.index(node)?;
        self.nodes.get(i).ok_or(Error::NoSuchNode {
            node,
            nodes: self.nodes.len(),
        })
    }

    /// Kills node `node` at once (SIGKILL, no clean shutdown). Its data stays;
    /// [`KafkaContainer::restart`] brings it back.
    pub async fn kill(&self, node: i32) -> Result<()> {
        self.node(node)?
            .container
            .stop_with_timeout(Some(0))
            .await?;
        Ok(())
    }

    /// Freezes node `node`'s processes (cgroup freezer): its connections stay
    /// open and silent, as with a long GC pause or a network partition.
    pub async fn pause(&self, node: i32) -> Result<()> {
        self.node(node)?.container.pause().await?;
        Ok(())
    }

    /// Resumes a paused node.
    pub async fn unpause(&self, node: i32) -> Result<()> {
        self.node(node)?.container.unpause().await?;
        Ok(())
    }

    /// Stops node `node` cleanly if it runs (killed nodes too), starts it
    /// again with its data, and waits until it serves and Metadata lists
    /// every node. Its host port may change (docker reallocates); the
    /// advertised listener follows and [`KafkaContainer::bootstrap_servers`]
    /// reports the new one.
    pub async fn restart(&self, node: i32) -> Result<()> {
        let n = self.node(node)?;
        if n.container.is_running().await? {
            n.container.stop_with_timeout(Some(30)).await?;
        }
        n.container.start().await?;
        self.refresh_addrs().await?;
        let deadline = Instant::now() + self.startup_timeout;
        self.wait_ready(Some(node), deadline).await
    }

    /// Stops and removes every container (dropping does the same).
    pub async fn stop(self) -> Result<()> {
        let KafkaContainer { nodes, .. } = self;
        let mut first_error = None;
        for node in nodes {
            if let Err(e) = node.container.rm().await {
                first_error.get_or_insert(e);
            }
        }
        first_error.map_or(Ok(()), |e| Err(e.into()))
    }

    async fn refresh_addrs(&self) -> Result<()> {
        let mut out = Vec::with_capacity(self.nodes.len());
        for node in &self.nodes {
            let c = &node.container;
            let host = &c.image().client_host;
            let mapped = |port: u16| async move { c.get_host_port_ipv4(port).await };
            let mut a = NodeAddrs {
                plain: format!("{host}:{}", mapped(EXTERNAL_PORT).await?),
                ..NodeAddrs::default()
            };
            if c.image().external.len() > 1 {
                a.sasl = Some(format!("{host}:{}", mapped(image::SASL_PORT).await?));
                a.tls = Some(format!("{host}:{}", mapped(image::TLS_PORT).await?));
                a.mtls = Some(format!("{host}:{}", mapped(image::MTLS_PORT).await?));
            }
            out.push(a);
        }
        if let Ok(mut addrs) = self.addrs.lock() {
            *addrs = out;
        }
        Ok(())
    }

    /// Waits until `only` (or every node) serves and Metadata lists them all.
    async fn wait_ready(&self, only: Option<i32>, deadline: Instant) -> Result<()> {
        let watched: Vec<(i32, &ContainerAsync<KafkaImage>)> = self
            .nodes
            .iter()
            .filter(|n| only.is_none_or(|o| o == n.id))
            .map(|n| (n.id, &n.container))
            .collect();
        let bootstrap = match only {
            Some(n) => self.node_bootstrap_server(n)?,
            None => self.bootstrap_servers(),
        };
        ready::wait_until_ready(
            &watched,
            || ClientConfig::builder().bootstrap_servers(&bootstrap),
            self.nodes.len(),
            deadline,
            self.startup_timeout,
        )
        .await
    }

    /// Waits until the SCRAM credentials written after start authenticate.
    async fn wait_scram(&self, deadline: Instant) -> Result<()> {
        let watched: Vec<(i32, &ContainerAsync<KafkaImage>)> =
            self.nodes.iter().map(|n| (n.id, &n.container)).collect();
        let client = self.sasl_client_config(SaslMechanism::ScramSha512)?;
        ready::wait_until_ready(
            &watched,
            || client.clone(),
            self.nodes.len(),
            deadline,
            self.startup_timeout,
        )
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accessors_of_a_missing_node_name_it() {
        let e = Error::NoSuchNode { node: 4, nodes: 3 };
        assert_eq!(
            e.to_string(),
            "node 4 does not exist: the cluster has nodes 1 to 3"
        );
    }
}
