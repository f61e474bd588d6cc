//! The Kafka image as testcontainers sees it: apache/kafka (or the offline
//! image `scripts/kafka-image` builds, which reads the same `KAFKA_*`
//! variables) started in two stages, so the broker advertises the host port
//! the engine mapped.
//!
//! Stage one: the container starts a shell that waits for a file. Stage two
//! ([`Image::exec_after_start`], which testcontainers runs after every start,
//! restarts included): with the mapped ports now known, an exec writes
//! `advertised.listeners` into that file; the shell reads it, deletes it, and
//! execs the image's own entrypoint `/etc/kafka/docker/run`, which formats the
//! log directory on the first start and runs the broker.

use std::borrow::Cow;
use std::collections::BTreeMap;

use testcontainers::core::{ContainerPort, ContainerState, ExecCommand, WaitFor};
use testcontainers::Image;

/// The listener clients on the host use: PLAINTEXT, advertised as the mapped port.
pub(crate) const EXTERNAL_PORT: u16 = 9092;
/// KRaft controller listener (inside the engine's network only).
pub(crate) const CONTROLLER_PORT: u16 = 9093;
/// Inter-broker listener (inside the engine's network only).
pub(crate) const BROKER_PORT: u16 = 9094;
/// Secure mode: SASL_PLAINTEXT listener, advertised as its mapped port.
pub(crate) const SASL_PORT: u16 = 9095;
/// Secure mode: SASL_SSL listener, advertised as its mapped port.
pub(crate) const TLS_PORT: u16 = 9096;
/// Secure mode: SSL listener requiring client certificates.
pub(crate) const MTLS_PORT: u16 = 9097;

/// Stage one (the file is `/tmp/purekafka-advertised`). Waits (bounded: 120 s) for the advertised listeners, consumes
/// the file so a restart waits for fresh ones, then runs the image's entrypoint.
const WAIT_THEN_RUN: &str = "i=0; \
while [ ! -s /tmp/purekafka-advertised ]; do \
  i=$((i+1)); \
  if [ $i -gt 1200 ]; then echo 'purekafka-testkit: advertised listeners never written (120 s)' >&2; exit 1; fi; \
  sleep 0.1; \
done; \
KAFKA_ADVERTISED_LISTENERS=$(cat /tmp/purekafka-advertised); export KAFKA_ADVERTISED_LISTENERS; \
rm -f /tmp/purekafka-advertised; \
exec /etc/kafka/docker/run";

/// Stage two: `$1` is the advertised listeners, written atomically.
const WRITE_ADVERTISED: &str =
    "printf '%s' \"$1\" > /tmp/purekafka-advertised.tmp && mv /tmp/purekafka-advertised.tmp /tmp/purekafka-advertised";

/// A listener reached from the host through a mapped port.
#[derive(Debug, Clone)]
pub(crate) struct ExternalListener {
    /// Listener name (`PLAINTEXT`, `SASL`, `TLS`).
    pub name: &'static str,
    /// Port inside the container.
    pub port: u16,
}

/// One Kafka node's image, environment and advertised-listener recipe.
#[derive(Debug, Clone)]
pub(crate) struct KafkaImage {
    pub name: String,
    pub tag: String,
    pub env: BTreeMap<String, String>,
    /// The host name other nodes reach this one by (inside the engine).
    pub internal_host: String,
    /// The host clients reach published ports on ([`client_host`]).
    pub client_host: String,
    pub external: Vec<ExternalListener>,
    ports: Vec<ContainerPort>,
    cmd: Vec<String>,
}

impl KafkaImage {
    pub(crate) fn new(
        name: String,
        tag: String,
        env: BTreeMap<String, String>,
        internal_host: String,
        external: Vec<ExternalListener>,
    ) -> KafkaImage {
        let ports = external
            .iter()
            .map(|l| ContainerPort::Tcp(l.port))
            .collect();
        KafkaImage {
            name,
            tag,
            env,
            internal_host,
            client_host: client_host(),
            external,
            ports,
            cmd: vec!["sh".into(), "-c".into(), WAIT_THEN_RUN.into()],
        }
    }

    /// `advertised.listeners` for a container whose external ports are
    /// mapped to `host` by `mapped(port)`.
    pub(crate) fn advertised_listeners(
        &self,
        host: &str,
        mapped: impl Fn(u16) -> testcontainers::core::error::Result<u16>,
    ) -> testcontainers::core::error::Result<String> {
        let mut out = Vec::with_capacity(self.external.len() + 2);
        for l in &self.external {
            out.push(format!("{}://{host}:{}", l.name, mapped(l.port)?));
        }
        out.push(format!("BROKER://{}:{BROKER_PORT}", self.internal_host));
        out.push(format!(
            "CONTROLLER://{}:{CONTROLLER_PORT}",
            self.internal_host
        ));
        Ok(out.join(","))
    }
}

/// The address clients dial for published ports: `PUREKAFKA_CONTAINER_HOST`
/// or `TESTCONTAINERS_HOST_OVERRIDE` when set, the host of a `tcp://`
/// `DOCKER_HOST`, else 127.0.0.1 (a local socket publishes on this machine).
/// testcontainers' own guess is not used: inside a container (`/.dockerenv`)
/// it picks the bridge gateway, which is wrong when the engine runs in the
/// same container, as podman does on CI. `localhost` becomes 127.0.0.1: the
/// engine publishes on IPv4, and a client trying `::1` first is refused.
pub(crate) fn client_host() -> String {
    let var = |k: &str| std::env::var(k).ok().filter(|v| !v.trim().is_empty());
    let host = var("PUREKAFKA_CONTAINER_HOST")
        .or_else(|| var("TESTCONTAINERS_HOST_OVERRIDE"))
        .or_else(|| {
            let docker_host = var("DOCKER_HOST")?;
            let rest = docker_host.strip_prefix("tcp://")?;
            let authority = rest.split('/').next().unwrap_or(rest);
            let host = authority.rsplit_once(':').map_or(authority, |(h, _)| h);
            (!host.is_empty()).then(|| host.to_owned())
        })
        .unwrap_or_else(|| "127.0.0.1".to_owned());
    ipv4_loopback(host.trim())
}

/// `localhost` as 127.0.0.1; any other host unchanged.
fn ipv4_loopback(host: &str) -> String {
    if host.eq_ignore_ascii_case("localhost") {
        "127.0.0.1".to_owned()
    } else {
        host.to_owned()
    }
}

impl Image for KafkaImage {
    fn name(&self) -> &str {
        &self.name
    }

    fn tag(&self) -> &str {
        &self.tag
    }

    /// None: readiness is purekafka answering ApiVersions and Metadata,
    /// checked by the caller (log lines differ between images and versions).
    fn ready_conditions(&self) -> Vec<WaitFor> {
        Vec::new()
    }

    fn env_vars(
        &self,
    ) -> impl IntoIterator<Item = (impl Into<Cow<'_, str>>, impl Into<Cow<'_, str>>)> {
        self.env.iter()
    }

    fn cmd(&self) -> impl IntoIterator<Item = impl Into<Cow<'_, str>>> {
        self.cmd.iter()
    }

    fn expose_ports(&self) -> &[ContainerPort] {
        &self.ports
    }

    fn exec_after_start(
        &self,
        cs: ContainerState,
    ) -> testcontainers::core::error::Result<Vec<ExecCommand>> {
        let listeners = self.advertised_listeners(&self.client_host, |p| {
            cs.host_port_ipv4(ContainerPort::Tcp(p))
        })?;
        Ok(vec![ExecCommand::new([
            "sh".to_owned(),
            "-c".to_owned(),
            WRITE_ADVERTISED.to_owned(),
            "sh".to_owned(),
            listeners,
        ])])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn image(external: Vec<ExternalListener>) -> KafkaImage {
        KafkaImage::new(
            "apache/kafka".into(),
            "4.4.0".into(),
            BTreeMap::new(),
            "purekafka-x-2".into(),
            external,
        )
    }

    #[test]
    fn advertised_listeners_use_the_mapped_ports_and_internal_names() {
        let img = image(vec![
            ExternalListener {
                name: "PLAINTEXT",
                port: EXTERNAL_PORT,
            },
            ExternalListener {
                name: "SASL",
                port: SASL_PORT,
            },
        ]);
        let got = img
            .advertised_listeners("127.0.0.1", |p| Ok(p + 30000))
            .expect("mapped");
        assert_eq!(
            got,
            "PLAINTEXT://127.0.0.1:39092,SASL://127.0.0.1:39095,\
             BROKER://purekafka-x-2:9094,CONTROLLER://purekafka-x-2:9093"
        );
        assert_eq!(
            img.expose_ports(),
            &[ContainerPort::Tcp(9092), ContainerPort::Tcp(9095)]
        );
    }

    #[test]
    fn an_unmapped_port_is_an_error_not_a_guess() {
        let img = image(vec![ExternalListener {
            name: "PLAINTEXT",
            port: EXTERNAL_PORT,
        }]);
        let got = img.advertised_listeners("127.0.0.1", |p| {
            Err(testcontainers::TestcontainersError::PortNotExposed {
                id: "c".into(),
                port: ContainerPort::Tcp(p),
            })
        });
        assert!(got.is_err());
    }

    #[test]
    fn localhost_is_dialled_as_ipv4() {
        assert_eq!(ipv4_loopback("localhost"), "127.0.0.1");
        assert_eq!(ipv4_loopback("LOCALHOST"), "127.0.0.1");
        assert_eq!(ipv4_loopback("docker.example"), "docker.example");
    }

    #[test]
    fn stage_one_waits_for_the_file_stage_two_writes() {
        const ADVERTISED_FILE: &str = "/tmp/purekafka-advertised";
        assert!(WAIT_THEN_RUN.contains(ADVERTISED_FILE));
        assert!(WRITE_ADVERTISED.contains(ADVERTISED_FILE));
        assert!(WAIT_THEN_RUN.ends_with("exec /etc/kafka/docker/run"));
    }
}
