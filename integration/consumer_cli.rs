//! The `purekafka` CLI's `produce` and `consume` against the real broker,
//! run as the built binary. Compiled only with feature `cli`: Cargo builds
//! the binary for this package's integration tests then, and names it in
//! `CARGO_BIN_EXE_purekafka`.

use std::io::Write;
use std::process::{Command, Output, Stdio};

use purekafka::Cluster;

use crate::support;

const CLI: &str = env!("CARGO_BIN_EXE_purekafka");

async fn setup(test: &str, partitions: i32) -> Option<(String, String)> {
    let bootstrap = support::bootstrap(test)?;
    let cluster = Cluster::connect(support::config(&bootstrap))
        .await
        .expect("connect");
    let topic = support::unique_topic(test);
    support::create_topic(&cluster, &topic, partitions).await;
    Some((bootstrap, topic))
}

/// Runs the CLI with `args` (and `stdin`, if any) and returns its output.
fn cli(args: &[&str], stdin: Option<&str>) -> Output {
    let mut child = Command::new(CLI)
        .args(args)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the purekafka binary");
    if let Some(text) = stdin {
        let mut pipe = child.stdin.take().expect("stdin pipe");
        pipe.write_all(text.as_bytes()).expect("write stdin");
    }
    child.wait_with_output().expect("purekafka output")
}

fn assert_success(out: &Output, what: &str) {
    assert!(
        out.status.success(),
        "{what} exited with {}: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test]
async fn produce_then_consume_prints_keys_and_values() {
    let Some((bootstrap, topic)) = setup("cli-roundtrip", 1).await else {
        return;
    };
    let b = bootstrap.as_str();
    let lines = "k1:v1\nk2:v2\nk3:value:with:colons\nk4:v4\nk5:v5\n";
    let out = cli(
        &[
            "produce",
            "--bootstrap-server",
            b,
            "--topic",
            &topic,
            "--key-separator",
            ":",
        ],
        Some(lines),
    );
    assert_success(&out, "produce");

    let out = cli(
        &[
            "consume",
            "--bootstrap-server",
            b,
            "--topic",
            &topic,
            "--from-beginning",
            "--max-messages",
            "5",
            "--print-key",
            "--timeout-ms",
            "30000",
        ],
        None,
    );
    assert_success(&out, "consume");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "k1\tv1\nk2\tv2\nk3\tvalue:with:colons\nk4\tv4\nk5\tv5\n"
    );

    // --max-messages stops early; --print-offset leads the line.
    let out = cli(
        &[
            "consume",
            "--bootstrap-server",
            b,
            "--topic",
            &topic,
            "--from-beginning",
            "--max-messages",
            "2",
            "--print-offset",
            "--timeout-ms",
            "30000",
        ],
        None,
    );
    assert_success(&out, "consume --print-offset");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "0\tv1\n1\tv2\n");
}

#[tokio::test]
async fn consume_times_out_cleanly() {
    let Some((bootstrap, topic)) = setup("cli-timeout", 2).await else {
        return;
    };
    let b = bootstrap.as_str();
    let out = cli(
        &[
            "consume",
            "--bootstrap-server",
            b,
            "--topic",
            &topic,
            "--from-beginning",
            "--timeout-ms",
            "500",
        ],
        None,
    );
    assert_success(&out, "consume on an empty topic");
    assert!(out.stdout.is_empty(), "{:?}", out.stdout);

    let out = cli(
        &[
            "consume",
            "--bootstrap-server",
            b,
            "--topic",
            &topic,
            "--partition",
            "7",
        ],
        None,
    );
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("no partition 7"), "{stderr}");
}

/// `--group` subscribes and commits exactly what was printed: a second run
/// in the same group continues after the first one's last line.
#[tokio::test]
async fn consume_in_a_group_resumes_after_the_printed_records() {
    let Some((bootstrap, topic)) = setup("cli-group", 1).await else {
        return;
    };
    let b = bootstrap.as_str();
    let out = cli(
        &["produce", "--bootstrap-server", b, "--topic", &topic],
        Some("a\nb\nc\nd\ne\n"),
    );
    assert_success(&out, "produce");
    let group = support::unique_topic("cli-group-g");
    let run = |n: &str| {
        cli(
            &[
                "consume",
                "--bootstrap-server",
                b,
                "--topic",
                &topic,
                "--group",
                &group,
                "--from-beginning",
                "--max-messages",
                n,
                "--timeout-ms",
                "30000",
            ],
            None,
        )
    };
    let out = run("2");
    assert_success(&out, "consume --group");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "a\nb\n");
    let out = run("3");
    assert_success(&out, "consume --group again");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "c\nd\ne\n");
}
