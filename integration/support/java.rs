//! Runs the Java Kafka tools (same download as the broker) as an independent
//! second client, through `scripts/kafka tool`.

use std::io::Write;
use std::process::{Command, Stdio};

/// Runs `class` with `args`, feeding `stdin`; returns stdout. Panics with
/// the tool's stderr when it fails.
pub fn run(class: &str, args: &[&str], stdin: Option<&str>) -> String {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/kafka");
    let mut child = Command::new("bash")
        .arg(script)
        .arg("tool")
        .arg(class)
        .args(args)
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
