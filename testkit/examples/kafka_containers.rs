//! Starts Kafka containers through the testkit and keeps them until SIGTERM
//! or SIGINT arrives, then removes them. Prints the
//! addresses as shell `export` lines once every node serves, so a script can
//! run other test suites against them (purekafka's `scripts/test` does).
//!
//! ```text
//! cargo run -p purekafka-testkit --example kafka_containers -- \
//!     [--nodes N] [--secure] [--prefix VAR] [--env KAFKA_NAME=value]...
//! ```
//!
//! `--prefix PUREKAFKA_BOOTSTRAP` prints `PUREKAFKA_BOOTSTRAP=...`; secure
//! mode also prints `<prefix>_TLS`, `<prefix>_MTLS` and
//! `PUREKAFKA_SECURE_TLS_DIR`.

use purekafka_testkit::KafkaContainer;
use tokio::signal::unix::{signal, SignalKind};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut builder = KafkaContainer::builder();
    let mut prefix = "PUREKAFKA_BOOTSTRAP".to_owned();
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--nodes" => {
                let n = args.next().ok_or("--nodes needs a number")?;
                builder = builder.nodes(
                    n.parse()
                        .map_err(|_| format!("--nodes {n}: not a number"))?,
                );
            }
            "--secure" => builder = builder.secure(),
            "--prefix" => prefix = args.next().ok_or("--prefix needs a name")?,
            "--env" => {
                let kv = args.next().ok_or("--env needs KAFKA_NAME=value")?;
                let (k, v) = kv
                    .split_once('=')
                    .ok_or(format!("--env {kv}: not NAME=value"))?;
                builder = builder.env(k, v);
            }
            other => return Err(format!("unknown argument {other}").into()),
        }
    }
    // Handlers first: a signal that arrives once "ready" is printed must
    // remove the containers, not kill the process.
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    let started = std::time::Instant::now();
    let kafka = builder.start().await?;
    eprintln!(
        "kafka_containers: {} node(s) of {} ready in {:.1} s",
        kafka.nodes(),
        kafka.image(),
        started.elapsed().as_secs_f64()
    );
    if let (Ok(sasl), Ok(tls), Ok(mtls), Ok(dir)) = (
        kafka.sasl_bootstrap_servers(),
        kafka.tls_bootstrap_servers(),
        kafka.mtls_bootstrap_servers(),
        kafka.tls_dir(),
    ) {
        println!("export {prefix}={sasl}");
        println!("export {prefix}_TLS={tls}");
        println!("export {prefix}_MTLS={mtls}");
        println!("export PUREKAFKA_SECURE_TLS_DIR={}", dir.display());
        println!("export {prefix}_PLAINTEXT={}", kafka.bootstrap_servers());
    } else {
        println!("export {prefix}={}", kafka.bootstrap_servers());
    }
    println!("# ready");

    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
    kafka.stop().await?;
    eprintln!("kafka_containers: stopped");
    Ok(())
}
