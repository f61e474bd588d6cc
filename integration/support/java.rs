//! Runs the Java Kafka tools (same download as the broker) as an independent
//! second client, through `scripts/kafka tool`.

use std::io::Write;
use std::process::{Command, Stdio};

/// What the tests' Java tools run with: C1 only and the serial GC
/// (`scripts/kafka`'s `PUREKAFKA_TOOL_JIT=quick`). Their runs are short, and
/// a JVM with G1 and the full JIT took 8-11 s to start on a loaded 2-core
/// machine against 1.3-2.6 s this way.
pub const QUICK_JIT: (&str, &str) = ("PUREKAFKA_TOOL_JIT", "quick");

/// Runs `class` with `args`, feeding `stdin`; returns stdout. Panics with
/// the tool's stderr when it fails.
pub fn run(class: &str, args: &[&str], stdin: Option<&str>) -> String {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/kafka");
    let mut child = Command::new("bash")
        .arg(script)
        .arg("tool")
        .arg(class)
        .args(args)
        .env(QUICK_JIT.0, QUICK_JIT.1)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("starting {class}: {e}"));
    let mut input = child.stdin.take().expect("stdin");
    if let Some(text) = stdin {
        input
            .write_all(text.as_bytes())
            .unwrap_or_else(|e| panic!("writing to {class}: {e}"));
    }
    drop(input);
    let out = child
        .wait_with_output()
        .unwrap_or_else(|e| panic!("running {class}: {e}"));
    assert!(
        out.status.success(),
        "{class} {args:?} failed ({}):\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}
