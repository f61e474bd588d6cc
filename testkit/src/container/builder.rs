//! Configuring and starting a [`KafkaContainer`]: the image, the broker
//! environment each node gets, the port bindings and the start sequence.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

use testcontainers::bollard::models::{HostConfig, PortBinding};
use testcontainers::runners::AsyncRunner;
use testcontainers::ImageExt;
use tokio::time::Instant;

use super::error::{Error, Result};
use super::image::{
    self, ExternalListener, KafkaImage, BROKER_PORT, CONTROLLER_PORT, EXTERNAL_PORT,
};
use super::{
    engine, secure, KafkaContainer, Node, TlsDir, BROKER_DNS_NAME, DEFAULT_IMAGE, DEFAULT_TAG,
    IMAGE_ENV, MAX_NODES,
};

/// Configures and starts a [`KafkaContainer`].
#[derive(Debug, Clone)]
pub struct KafkaContainerBuilder {
    image: Option<(String, String)>,
    nodes: usize,
    secure: bool,
    env: BTreeMap<String, String>,
    startup_timeout: Duration,
}

impl Default for KafkaContainerBuilder {
    fn default() -> Self {
        KafkaContainerBuilder {
            image: None,
            nodes: 1,
            secure: false,
            env: BTreeMap::new(),
            startup_timeout: Duration::from_secs(180),
        }
    }
}

impl KafkaContainerBuilder {
    /// The image to run (default `apache/kafka:4.4.0`, or `PUREKAFKA_KAFKA_IMAGE`).
    pub fn image(mut self, name: impl Into<String>, tag: impl Into<String>) -> Self {
        self.image = Some((name.into(), tag.into()));
        self
    }

    /// How many KRaft nodes (each broker and controller), 1 to [`MAX_NODES`](super::MAX_NODES);
    /// default 1. With more than one, the nodes share a user-defined network
    /// and internal topics are replicated 3 ways (`min.insync.replicas` 2).
    pub fn nodes(mut self, nodes: usize) -> Self {
        self.nodes = nodes;
        self
    }

    /// Adds SASL_PLAINTEXT and SASL_SSL listeners (mechanisms PLAIN,
    /// SCRAM-SHA-256, SCRAM-SHA-512 and OAUTHBEARER with Kafka's unsecured
    /// tokens) and an SSL listener requiring client certificates. Users:
    /// [`SECURE_USER`](super::SECURE_USER) / [`SECURE_PASSWORD`](super::SECURE_PASSWORD) (every mechanism, super user) and
    /// [`SCRAM_USER`](super::SCRAM_USER) / [`SCRAM_PASSWORD`](super::SCRAM_PASSWORD) (SCRAM only). ACLs are enforced
    /// (StandardAuthorizer), open where a resource has none. TLS uses a test
    /// CA made for this container ([`KafkaContainer::tls_dir`]). The
    /// PLAINTEXT listener stays (ANONYMOUS, super user) for set-up.
    pub fn secure(mut self) -> Self {
        self.secure = true;
        self
    }

    /// Sets a broker property the apache/kafka way
    /// (`KAFKA_AUTO_CREATE_TOPICS_ENABLE=false` is `auto.create.topics.enable`),
    /// or a JVM option variable (`KAFKA_HEAP_OPTS`). Overrides the testkit's own.
    pub fn env(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.env.insert(key.into(), value.into());
        self
    }

    /// How long `start` waits for the cluster to serve (default 180 s: three
    /// nodes took up to 119 s on a 2-core machine under a load average of 30).
    pub fn startup_timeout(mut self, timeout: Duration) -> Self {
        self.startup_timeout = timeout;
        self
    }

    fn resolve_image(&self) -> Result<(String, String)> {
        if let Some(image) = &self.image {
            return Ok(image.clone());
        }
        match std::env::var(IMAGE_ENV) {
            Ok(v) if !v.trim().is_empty() => parse_image(v.trim()).ok_or(Error::Config {
                key: IMAGE_ENV,
                reason: format!("'{v}' is not name:tag"),
            }),
            _ => Ok((DEFAULT_IMAGE.into(), DEFAULT_TAG.into())),
        }
    }

    /// Starts the containers and waits until every node serves.
    pub async fn start(self) -> Result<KafkaContainer> {
        let started = Instant::now();
        let deadline = started + self.startup_timeout;
        if self.nodes == 0 || self.nodes > MAX_NODES {
            return Err(Error::Config {
                key: "nodes",
                reason: format!("{} nodes; 1 to {MAX_NODES} are supported", self.nodes),
            });
        }
        let (name, tag) = self.resolve_image()?;
        engine::check_reachable().await?;

        let run_id = run_id()?;
        let network = (self.nodes > 1).then(|| format!("purekafka-{run_id}"));
        let container_name = |n: usize| format!("purekafka-{run_id}-{n}");
        let internal_host = |n: usize| {
            if network.is_some() {
                container_name(n)
            } else {
                "localhost".to_owned()
            }
        };
        let tls = if self.secure {
            Some(secure::tls_material(&tls_hosts())?)
        } else {
            None
        };
        let base_env = self.base_env(&cluster_id()?, &internal_host);

        let mut nodes = Vec::with_capacity(self.nodes);
        for n in 1..=self.nodes {
            let mut env = base_env.clone();
            env.insert("KAFKA_NODE_ID".into(), n.to_string());
            env.extend(self.env.clone());
            let mut external = vec![ExternalListener {
                name: "PLAINTEXT",
                port: EXTERNAL_PORT,
            }];
            if self.secure {
                external.extend(
                    secure::SECURE_LISTENERS
                        .iter()
                        .map(|&(name, port, _)| ExternalListener { name, port }),
                );
            }
            let ports: Vec<u16> = external.iter().map(|l| l.port).collect();
            let img = KafkaImage::new(name.clone(), tag.clone(), env, internal_host(n), external);
            let host_ip = if img.client_host == "127.0.0.1" {
                "127.0.0.1"
            } else {
                "0.0.0.0"
            };
            let mut request = img
                .with_container_name(container_name(n))
                .with_startup_timeout(deadline.saturating_duration_since(Instant::now()))
                .with_host_config_modifier(move |hc| bind_ports(hc, host_ip, &ports));
            if let Some(net) = &network {
                request = request.with_network(net.clone());
            }
            if let Some(m) = &tls {
                request = request
                    .with_copy_to(secure::KEYSTORE_PATH, m.keystore_pem.clone().into_bytes())
                    .with_copy_to(secure::TRUSTSTORE_PATH, m.ca_pem.clone().into_bytes());
            }
            let image_ref = format!("{name}:{tag}");
            let container = request
                .start()
                .await
                .map_err(|e| engine::classify_start_error(&image_ref, e))?;
            nodes.push(Node {
                id: n as i32,
                container,
            });
        }

        let tls_dir = match &tls {
            Some(m) => Some(TlsDir::write(&run_id, m)?),
            None => None,
        };
        let kafka = KafkaContainer {
            addrs: Mutex::new(Vec::new()),
            nodes,
            tls: tls_dir,
            image: format!("{name}:{tag}"),
            startup_timeout: self.startup_timeout,
        };
        kafka.refresh_addrs().await?;
        kafka.wait_ready(None, deadline).await?;
        if self.secure {
            secure::create_scram_users(&kafka.bootstrap_servers()).await?;
            kafka.wait_scram(deadline).await?;
        }
        tracing::info!(
            image = %kafka.image,
            nodes = kafka.nodes.len(),
            bootstrap = %kafka.bootstrap_servers(),
            elapsed_ms = started.elapsed().as_millis() as u64,
            "Kafka container ready"
        );
        Ok(kafka)
    }

    fn base_env(
        &self,
        cluster_id: &str,
        internal_host: &dyn Fn(usize) -> String,
    ) -> BTreeMap<String, String> {
        let n = self.nodes;
        let voters: Vec<String> = (1..=n)
            .map(|i| format!("{i}@{}:{CONTROLLER_PORT}", internal_host(i)))
            .collect();
        let (rf, min_isr) = if n >= 3 { ("3", "2") } else { ("1", "1") };
        let mut listeners = vec![
            format!("PLAINTEXT://0.0.0.0:{EXTERNAL_PORT}"),
            format!("CONTROLLER://0.0.0.0:{CONTROLLER_PORT}"),
            format!("BROKER://0.0.0.0:{BROKER_PORT}"),
        ];
        let mut protocols = vec![
            "PLAINTEXT:PLAINTEXT".to_owned(),
            "CONTROLLER:PLAINTEXT".to_owned(),
            "BROKER:PLAINTEXT".to_owned(),
        ];
        if self.secure {
            for (name, port, protocol) in secure::SECURE_LISTENERS {
                listeners.push(format!("{name}://0.0.0.0:{port}"));
                protocols.push(format!("{name}:{protocol}"));
            }
        }
        let mut env: BTreeMap<String, String> = [
            ("CLUSTER_ID", cluster_id.to_owned()),
            ("KAFKA_PROCESS_ROLES", "broker,controller".into()),
            ("KAFKA_CONTROLLER_QUORUM_VOTERS", voters.join(",")),
            ("KAFKA_LISTENERS", listeners.join(",")),
            ("KAFKA_LISTENER_SECURITY_PROTOCOL_MAP", protocols.join(",")),
            ("KAFKA_CONTROLLER_LISTENER_NAMES", "CONTROLLER".into()),
            ("KAFKA_INTER_BROKER_LISTENER_NAME", "BROKER".into()),
            ("KAFKA_LOG_DIRS", "/tmp/kraft-combined-logs".into()),
            ("KAFKA_DEFAULT_REPLICATION_FACTOR", rf.into()),
            ("KAFKA_MIN_INSYNC_REPLICAS", min_isr.into()),
            ("KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR", rf.into()),
            // Fewer partitions than the default 50: the first group or
            // transaction is ready sooner on a small machine.
            ("KAFKA_OFFSETS_TOPIC_NUM_PARTITIONS", "10".into()),
            ("KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR", rf.into()),
            ("KAFKA_TRANSACTION_STATE_LOG_MIN_ISR", min_isr.into()),
            ("KAFKA_TRANSACTION_STATE_LOG_NUM_PARTITIONS", "10".into()),
            (
                "KAFKA_SHARE_COORDINATOR_STATE_TOPIC_REPLICATION_FACTOR",
                rf.into(),
            ),
            (
                "KAFKA_SHARE_COORDINATOR_STATE_TOPIC_MIN_ISR",
                min_isr.into(),
            ),
            ("KAFKA_GROUP_INITIAL_REBALANCE_DELAY_MS", "0".into()),
            ("KAFKA_HEAP_OPTS", "-Xmx512m -Xms256m".into()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect();
        if self.secure {
            secure::broker_env(&mut env);
        }
        env
    }
}

/// `name:tag`, the tag being what follows the last `:` after the last `/`
/// (a registry host may carry a port).
fn parse_image(s: &str) -> Option<(String, String)> {
    let slash = s.rfind('/').map_or(0, |i| i + 1);
    let colon = s[slash..].rfind(':')? + slash;
    let (name, tag) = (&s[..colon], &s[colon + 1..]);
    (!name.is_empty() && !tag.is_empty()).then(|| (name.to_owned(), tag.to_owned()))
}

/// Publishes `ports` on `host_ip` with host ports the engine picks.
/// Explicit bindings, because podman 4.3 reports ports published by
/// "publish all" with an empty `HostIp`, which testcontainers cannot map
/// (`PortNotExposed`). The address is 127.0.0.1 for a local engine, because
/// netavark 1.4 turns `0.0.0.0` into a DNAT rule matching destination
/// 0.0.0.0/32 only, so nothing reaches the container; a remote engine
/// (`tcp://` `DOCKER_HOST`) gets 0.0.0.0.
fn bind_ports(hc: &mut HostConfig, host_ip: &str, ports: &[u16]) {
    hc.publish_all_ports = Some(false);
    hc.port_bindings = Some(
        ports
            .iter()
            .map(|p| {
                (
                    format!("{p}/tcp"),
                    Some(vec![PortBinding {
                        host_ip: Some(host_ip.to_owned()),
                        host_port: Some(String::new()),
                    }]),
                )
            })
            .collect(),
    );
}

/// Names the broker certificate holds: 127.0.0.1, [`BROKER_DNS_NAME`], and
/// the host clients dial when that is another ([`image::client_host`]).
fn tls_hosts() -> Vec<String> {
    let mut hosts = vec!["127.0.0.1".to_owned(), BROKER_DNS_NAME.to_owned()];
    let client = image::client_host();
    if !hosts.contains(&client) {
        hosts.push(client);
    }
    hosts
}

fn random_bytes<const N: usize>() -> Result<[u8; N]> {
    let mut bytes = [0u8; N];
    getrandom::fill(&mut bytes).map_err(|e| Error::Config {
        key: "cluster id",
        reason: format!("no randomness: {e}"),
    })?;
    Ok(bytes)
}

/// A Kafka cluster id: a random `Uuid` as Kafka prints it (16 bytes,
/// URL-safe base64 without padding), never starting with `-`.
fn cluster_id() -> Result<String> {
    use base64::Engine;
    loop {
        let id = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(random_bytes::<16>()?);
        if !id.starts_with('-') {
            return Ok(id);
        }
    }
}

/// A run id for container, network and directory names: 8 lower-case hex digits.
fn run_id() -> Result<String> {
    Ok(random_bytes::<4>()?
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn image_names_split_at_the_last_colon_of_the_last_segment() {
        assert_eq!(
            parse_image("apache/kafka:4.4.0"),
            Some(("apache/kafka".into(), "4.4.0".into()))
        );
        assert_eq!(
            parse_image("localhost:5000/purekafka/kafka:4.4.0"),
            Some(("localhost:5000/purekafka/kafka".into(), "4.4.0".into()))
        );
        assert_eq!(parse_image("localhost:5000/kafka"), None);
        assert_eq!(parse_image("kafka:"), None);
    }

    #[test]
    fn a_cluster_of_three_replicates_internal_topics_three_ways() {
        let b = KafkaContainer::builder().nodes(3);
        let env = b.base_env("id", &|n| format!("purekafka-r-{n}"));
        assert_eq!(
            env["KAFKA_CONTROLLER_QUORUM_VOTERS"],
            "1@purekafka-r-1:9093,2@purekafka-r-2:9093,3@purekafka-r-3:9093"
        );
        assert_eq!(env["KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR"], "3");
        assert_eq!(env["KAFKA_TRANSACTION_STATE_LOG_MIN_ISR"], "2");
        assert!(!env.contains_key("KAFKA_SASL_ENABLED_MECHANISMS"));
    }

    #[test]
    fn secure_mode_adds_the_three_listeners() {
        let env = KafkaContainer::builder()
            .secure()
            .base_env("id", &|_| "localhost".into());
        assert!(env["KAFKA_LISTENERS"].contains("SASL://0.0.0.0:9095"));
        assert!(env["KAFKA_LISTENERS"].contains("TLS://0.0.0.0:9096"));
        assert!(env["KAFKA_LISTENER_SECURITY_PROTOCOL_MAP"].contains("TLS:SASL_SSL"));
        assert!(env["KAFKA_LISTENER_SECURITY_PROTOCOL_MAP"].contains("MTLS:SSL"));
    }

    #[test]
    fn cluster_ids_are_kafka_uuids_and_run_ids_suit_names() {
        use base64::Engine;
        let id = cluster_id().expect("randomness");
        assert_eq!(id.len(), 22);
        assert!(!id.starts_with('-'));
        let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(&id)
            .expect("base64url");
        assert_eq!(bytes.len(), 16);
        let run = run_id().expect("randomness");
        assert_eq!(run.len(), 8);
        assert!(run
            .chars()
            .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase()));
    }

    #[test]
    fn ports_are_bound_explicitly_on_ipv4() {
        let mut hc = HostConfig::default();
        bind_ports(&mut hc, "127.0.0.1", &[9092, 9095]);
        let b = hc.port_bindings.expect("bindings");
        assert_eq!(b.len(), 2);
        let binding = b["9092/tcp"].as_ref().and_then(|v| v.first()).expect("one");
        assert_eq!(binding.host_ip.as_deref(), Some("127.0.0.1"));
        assert_eq!(binding.host_port.as_deref(), Some(""));
        assert_eq!(hc.publish_all_ports, Some(false));
    }

    #[tokio::test]
    async fn zero_nodes_is_refused_before_any_engine_call() {
        let err = KafkaContainer::builder()
            .nodes(0)
            .start()
            .await
            .expect_err("zero nodes");
        assert!(matches!(err, Error::Config { key: "nodes", .. }), "{err:?}");
    }
}
