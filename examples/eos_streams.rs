//! An exactly-once streams application (KIP-447: one transactional producer
//! per instance, consumed offsets committed inside the transaction, the
//! group generation fencing a zombie), run as a child process by the
//! process-level fault tests: they SIGKILL it, or SIGSTOP it while another
//! instance takes over and SIGCONT it later.
//!
//! ```sh
//! cargo run --example eos_streams -- --bootstrap 127.0.0.1:19092 \
//!     --input in --output out --app copier \
//!     [--session-timeout-ms 6000] [--transaction-timeout-ms 5000] \
//!     [--delay-ms 40]
//! ```
//!
//! Every input value `v` becomes output value `out-v` (same key). Each
//! processor invocation prints `seen <v>` on its own line, so a test can
//! tell which instance processed what, and how often. Each invocation waits
//! 0-2 ms, or exactly `--delay-ms` when given (a slower pipeline keeps a
//! transaction open for a test to pause it in). The application runs
//! until SIGTERM or SIGINT, then shuts down (drain, commit) and prints
//! `stopped`; it exits with status 1 if the runtime stops on an error.
//!
//! A line `stall` on its stdin makes the next invocation print
//! `stalling <v>` and wait until a line `go`: the next commit's drain
//! waits for it, so every record done since the last commit stays in the
//! open transaction (a test kills the instance there, knowing it has
//! uncommitted work).

use std::collections::HashMap;
use std::io::{BufRead, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use purekafka::producer::serializer::StringSerializer;
use purekafka::streams::{CommitMode, OrderingMode, Streams, StreamsConfig, StringDeserializer};

struct Options {
    bootstrap: String,
    input: String,
    output: String,
    app: String,
    session_timeout_ms: String,
    transaction_timeout_ms: String,
    delay_ms: Option<u64>,
}

fn options() -> Result<Options, String> {
    let mut args: HashMap<String, String> = HashMap::new();
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let name = flag
            .strip_prefix("--")
            .ok_or_else(|| format!("unexpected argument {flag:?}"))?;
        let value = it.next().ok_or_else(|| format!("{flag} needs a value"))?;
        args.insert(name.to_owned(), value);
    }
    let get = |k: &str| {
        args.get(k)
            .cloned()
            .ok_or_else(|| format!("--{k} is required"))
    };
    let or = |k: &str, d: &str| args.get(k).cloned().unwrap_or_else(|| d.to_owned());
    Ok(Options {
        bootstrap: or("bootstrap", "127.0.0.1:19092"),
        input: get("input")?,
        output: get("output")?,
        app: get("app")?,
        session_timeout_ms: or("session-timeout-ms", "6000"),
        transaction_timeout_ms: or("transaction-timeout-ms", "5000"),
        delay_ms: match args.get("delay-ms") {
            Some(v) => Some(v.parse().map_err(|e| format!("--delay-ms {v}: {e}"))?),
            None => None,
        },
    })
}

/// Completes on SIGTERM or SIGINT.
async fn stop_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).ok();
    let term = async {
        match term.as_mut() {
            Some(t) => drop(t.recv().await),
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term => {}
    }
}

#[tokio::main]
async fn main() {
    let o = match options() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("eos_streams: {e}");
            std::process::exit(2);
        }
    };
    let config = StreamsConfig::builder(&o.app, &o.bootstrap)
        .commit_mode(CommitMode::ExactlyOnce)
        .ordering(OrderingMode::Key)
        .max_in_flight(32, 64)
        .commit_interval(Duration::from_millis(100))
        .consumer_property("session.timeout.ms", &o.session_timeout_ms)
        .consumer_property("heartbeat.interval.ms", "500")
        .producer_property("transaction.timeout.ms", &o.transaction_timeout_ms)
        .build();
    let config = match config {
        Ok(c) => c,
        Err(e) => {
            eprintln!("eos_streams: {e}");
            std::process::exit(2);
        }
    };
    let delay_ms = o.delay_ms;
    static STALL_NEXT: AtomicBool = AtomicBool::new(false);
    static STALLED: AtomicBool = AtomicBool::new(false);
    std::thread::spawn(|| {
        for line in std::io::stdin().lock().lines() {
            match line.as_deref().map(str::trim) {
                Ok("stall") => STALL_NEXT.store(true, Ordering::Release),
                Ok("go") => STALLED.store(false, Ordering::Release),
                Ok(_) => {}
                Err(_) => return,
            }
        }
    });
    let running = Streams::topology(config)
        .source(o.input.as_str(), StringDeserializer, StringDeserializer)
        .map_async(move |rec| async move {
            if STALL_NEXT.swap(false, Ordering::AcqRel) {
                STALLED.store(true, Ordering::Release);
                let _ = writeln!(std::io::stdout(), "stalling {}", rec.value);
                while STALLED.load(Ordering::Acquire) {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            }
            let wait = delay_ms.unwrap_or_else(|| fastrand::u64(0..3));
            tokio::time::sleep(Duration::from_millis(wait)).await;
            // One line per invocation, written whole (stdout is line
            // buffered), so a SIGKILL never leaves half a line.
            let _ = writeln!(std::io::stdout(), "seen {}", rec.value);
            let v = format!("out-{}", rec.value);
            Ok(rec.with_value(v))
        })
        .to(o.output.as_str(), StringSerializer, StringSerializer)
        .build()
        .start()
        .await;
    let running = match running {
        Ok(r) => r,
        Err(e) => {
            eprintln!("eos_streams: start: {e}");
            std::process::exit(1);
        }
    };
    match running.shutdown_on(stop_signal()).await {
        Ok(()) => println!("stopped"),
        Err(e) => {
            eprintln!("eos_streams: {e}");
            std::process::exit(1);
        }
    }
}
