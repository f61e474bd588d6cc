//! Readiness: a Kafka node is ready when purekafka itself connects (the
//! connection's ApiVersions exchange) and Metadata lists every broker of the
//! cluster. No log line is trusted: they differ between images and versions.
//! While waiting, a container that exited ends the wait with its log.

use std::time::Duration;

use purekafka::{ClientConfigBuilder, Cluster};
use testcontainers::ContainerAsync;
use tokio::time::Instant;

use super::engine::log_tail;
use super::error::{Error, Result};
use super::image::KafkaImage;

/// Pause between two probes.
const PROBE_INTERVAL: Duration = Duration::from_millis(250);

/// One probe: connect with `client` (short timeouts) and read Metadata;
/// `Ok` when it lists at least `brokers` brokers.
pub(crate) async fn probe(
    client: ClientConfigBuilder,
    brokers: usize,
) -> std::result::Result<(), String> {
    let config = client
        .client_id("purekafka-testkit-probe")
        .connection_setup_timeout(Duration::from_secs(2))
        .request_timeout(Duration::from_secs(5))
        .default_api_timeout(Duration::from_secs(5))
        .build()
        .map_err(|e| e.to_string())?;
    let cluster = Cluster::connect(config).await.map_err(|e| e.to_string())?;
    let seen = cluster.metadata().brokers.len();
    if seen >= brokers {
        Ok(())
    } else {
        Err(format!("Metadata lists {seen} of {brokers} brokers"))
    }
}

/// Probes with `client()` until it succeeds, a watched node's container
/// exits, or `deadline` passes.
pub(crate) async fn wait_until_ready(
    nodes: &[(i32, &ContainerAsync<KafkaImage>)],
    client: impl Fn() -> ClientConfigBuilder,
    brokers: usize,
    deadline: Instant,
    timeout: Duration,
) -> Result<()> {
    loop {
        let last_error = match probe(client(), brokers).await {
            Ok(()) => return Ok(()),
            Err(e) => e,
        };
        for (node, container) in nodes {
            // An engine error here is not a verdict on the container.
            if container.is_running().await.ok() == Some(false) {
                return Err(Error::DiedDuringStart {
                    node: *node,
                    container: container.id().to_owned(),
                    log: log_tail(container).await,
                });
            }
        }
        if Instant::now() >= deadline {
            let (node, log) = match nodes.first() {
                Some((node, container)) => (*node, log_tail(container).await),
                None => (0, String::new()),
            };
            return Err(Error::NotReady {
                timeout,
                last_error,
                node,
                log,
            });
        }
        tokio::time::sleep(PROBE_INTERVAL).await;
    }
}
