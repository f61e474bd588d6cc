//! `fake-start-time [ROUNDS]`: measures how long a 1- and a 3-broker
//! [`FakeCluster`] takes to start (bind every port, spawn every task) and
//! answer a first ApiVersions request on each broker, interleaving the two
//! sizes over ROUNDS rounds (default 5). Prints every round, then the
//! median and the spread (min..max) per size. A measurement, not a test.

use std::time::{Duration, Instant};

use purekafka_testkit::fake::FakeCluster;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// ApiVersions v0, correlation id 1, no client id.
const API_VERSIONS_V0: [u8; 14] = [0, 0, 0, 10, 0, 18, 0, 0, 0, 0, 0, 1, 0xff, 0xff];

async fn first_answer(port: u16) -> std::io::Result<()> {
    let mut sock = TcpStream::connect(("127.0.0.1", port)).await?;
    sock.write_all(&API_VERSIONS_V0).await?;
    let size = sock.read_i32().await?;
    let mut body = vec![0u8; usize::try_from(size).unwrap_or(0).min(1 << 16)];
    sock.read_exact(&mut body).await?;
    Ok(())
}

async fn one(brokers: usize) -> Result<Duration, String> {
    let start = Instant::now();
    let cluster = FakeCluster::start(brokers)
        .await
        .map_err(|e| e.to_string())?;
    for (_, port) in cluster.brokers() {
        first_answer(port)
            .await
            .map_err(|e| format!("port {port}: {e}"))?;
    }
    let took = start.elapsed();
    drop(cluster);
    Ok(took)
}

fn summary(label: &str, mut samples: Vec<Duration>) {
    samples.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let (Some(min), Some(max)) = (samples.first(), samples.last()) else {
        return;
    };
    let median = samples[samples.len() / 2];
    println!(
        "{label}: median {:.2} ms, spread {:.2}..{:.2} ms over {} rounds",
        ms(median),
        ms(*min),
        ms(*max),
        samples.len()
    );
}

fn main() -> std::process::ExitCode {
    let rounds: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(5)
        .max(1);
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("fake-start-time: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async {
        let (mut one_broker, mut three) = (Vec::new(), Vec::new());
        for round in 1..=rounds {
            let a = one(1).await?;
            let b = one(3).await?;
            println!(
                "round {round}: 1 broker {:.2} ms, 3 brokers {:.2} ms",
                a.as_secs_f64() * 1000.0,
                b.as_secs_f64() * 1000.0
            );
            one_broker.push(a);
            three.push(b);
        }
        summary("1 broker", one_broker);
        summary("3 brokers", three);
        Ok::<(), String>(())
    });
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("fake-start-time: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
