//! `fake-schema-registry`: the in-process fake schema registry as a
//! standalone server, for the integration tests and for clients in any
//! language.
//!
//! ```text
//! fake-schema-registry [--port P]
//! ```
//!
//! Prints its URL as the first line of stdout, then serves until SIGTERM
//! or Ctrl-C. `--port 0` (the default) lets the OS pick a free port.

use std::io::Write;
use std::process::ExitCode;

use purekafka_testkit::registry::FakeRegistry;

const USAGE: &str = "usage: fake-schema-registry [--port P]";

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let mut port: u16 = 0;
    while let Some(arg) = args.next() {
        match (arg.as_str(), args.next().map(|v| v.parse::<u16>())) {
            ("--port", Some(Ok(p))) => port = p,
            _ => {
                eprintln!("{USAGE}");
                return ExitCode::from(2);
            }
        }
    }
    let registry = match FakeRegistry::bind(&format!("127.0.0.1:{port}"), None).await {
        Ok(r) => r,
        Err(e) => {
            eprintln!("fake-schema-registry: cannot listen on 127.0.0.1:{port}: {e}");
            return ExitCode::FAILURE;
        }
    };
    println!("{}", registry.url());
    let _ = std::io::stdout().flush();
    let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("fake-schema-registry: cannot watch SIGTERM: {e}");
            return ExitCode::FAILURE;
        }
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
    ExitCode::SUCCESS
}
