//! What can go wrong while starting or driving a Kafka container, each
//! variant saying what to do about it.

use std::time::Duration;

/// An error from the container testkit.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// No container engine answers. Retrying helps only once an engine runs.
    #[error(
        "no container engine reachable at {docker_host} ({reason}); set DOCKER_HOST to a \
         Docker-compatible API socket: start podman's with `podman system service --time=0 \
         unix:///run/purekafka/podman.sock` and `export DOCKER_HOST=unix:///run/purekafka/podman.sock` \
         (purekafka's `scripts/container-engine up` does both), or start dockerd"
    )]
    EngineUnreachable {
        /// The address tried (`DOCKER_HOST`, or the default socket).
        docker_host: String,
        /// Why the connection failed.
        reason: String,
    },
    /// The image is neither present nor pullable. A retry does not help.
    #[error(
        "Kafka image {image} is not available to the container engine and could not be pulled \
         ({reason}); where no registry is reachable, build it with purekafka's \
         `scripts/kafka-image` and set PUREKAFKA_KAFKA_IMAGE=localhost/purekafka/kafka:<version>"
    )]
    ImageMissing {
        /// `name:tag` of the image.
        image: String,
        /// The engine's answer.
        reason: String,
    },
    /// A broker container exited before it served. A retry with the same
    /// settings fails the same way: read the log.
    #[error("Kafka container {container} (node {node}) exited during start; last lines of its log:\n{log}")]
    DiedDuringStart {
        /// Node id (1-based).
        node: i32,
        /// Container id.
        container: String,
        /// The last 50 lines of the container's output.
        log: String,
    },
    /// The brokers did not answer ApiVersions and Metadata in time. A longer
    /// `startup_timeout` may help on a loaded machine.
    #[error(
        "Kafka container(s) not ready within {timeout:?}: {last_error}; last lines of node {node}'s log:\n{log}"
    )]
    NotReady {
        /// The startup timeout.
        timeout: Duration,
        /// The last readiness probe's error.
        last_error: String,
        /// The node whose log follows.
        node: i32,
        /// The last 50 lines of that node's output.
        log: String,
    },
    /// `kill(n)`, `pause(n)`, ... named a node the cluster does not have.
    #[error("node {node} does not exist: the cluster has nodes 1 to {nodes}")]
    NoSuchNode {
        /// The node asked for.
        node: i32,
        /// How many nodes the cluster has.
        nodes: usize,
    },
    /// A setting of the builder is invalid.
    #[error("invalid testkit setting {key}: {reason}")]
    Config {
        /// The builder method or environment variable.
        key: &'static str,
        /// What is wrong.
        reason: String,
    },
    /// A secure-mode accessor was used on a container started without
    /// `.secure()`.
    #[error("{what} needs a container started with `.secure()`")]
    NotSecure {
        /// The accessor called.
        what: &'static str,
    },
    /// The container engine refused an operation.
    #[error("container engine: {0}")]
    Engine(#[from] testcontainers::TestcontainersError),
    /// The purekafka client failed (readiness probe, SCRAM user set-up).
    #[error("purekafka: {0}")]
    Client(#[from] purekafka::Error),
    /// A local file (the CA certificate for clients) could not be written.
    #[error("writing {path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The I/O error.
        source: std::io::Error,
    },
}

/// `Result` with the testkit's [`Error`].
pub type Result<T> = std::result::Result<T, Error>;
