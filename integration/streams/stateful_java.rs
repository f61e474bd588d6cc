//! Side by side with Kafka Streams (issue #16 item 5): a Java Kafka Streams
//! app (`benches/streams-stateful/StatefulCount.java`, run through
//! `benches/streams-stateful/java`, which fetches `kafka-streams` from
//! Maven Central once) and ours count the same input in tumbling windows
//! with grace; their outputs must match record for record, and both must
//! match the reference computed from the input. Java, javac and the jars
//! are required: the test fails (never skips) without them.

use std::process::Command;

use super::windows::{finals, written, Shape, WindowFixture};
use super::*;
use purekafka::streams::state::StoreSpec;

/// Runs the Java peer in `windowed` mode; panics with its stderr when it
/// fails (no java, no jars, a Kafka Streams error).
fn kafka_streams_windowed(args: &[&str]) {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/benches/streams-stateful/java");
    let out = Command::new("bash")
        .arg(script)
        .arg("windowed")
        .args(args)
        .env(
            crate::support::java::QUICK_JIT.0,
            crate::support::java::QUICK_JIT.1,
        )
        .output()
        .unwrap_or_else(|e| panic!("running {script}: {e}"));
    assert!(
        out.status.success(),
        "Kafka Streams ({script} windowed {args:?}) failed ({}):\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

/// 900 records over 12 keys in 3 partitions, one in ten up to 20 s late;
/// 10 s tumbling windows with 5 s grace, every update forwarded (Kafka
/// Streams' record cache off). Per `key@start` the sequence of counts is
/// the same in both outputs, so the final per-window counts are too.
#[tokio::test]
async fn windowed_count_matches_kafka_streams_java_record_for_record() {
    let shape = Shape {
        size: 10_000,
        advance: 10_000,
        grace: 5_000,
    };
    let Some(f) = WindowFixture::new("streams_windowed_java", shape, 900, 12).await else {
        return;
    };
    let (bootstrap, input, records, expected, late) =
        (&f.bootstrap, &f.input, &f.records, &f.expected, f.late);
    let (ours_out, java_out) = (&f.out, format!("{input}-java"));
    support::create_topic(&f.cluster, &java_out, 3).await;
    assert!(late > 10, "the input has late records ({late})");

    let java_dir = std::env::temp_dir().join(support::unique_topic("streams_java_state"));
    let java = {
        let args: Vec<String> = vec![
            bootstrap.clone(),
            support::unique_topic("streams_windowed_java_app"),
            input.clone(),
            java_out.clone(),
            records.len().to_string(),
            shape.size.to_string(),
            shape.grace.to_string(),
            java_dir.display().to_string(),
        ];
        tokio::task::spawn_blocking(move || {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            kafka_streams_windowed(&args)
        })
    };

    let running = f
        .counting(
            0,
            &support::unique_topic("streams_windowed_ours"),
            ours_out,
            (StoreSpec::in_memory("window-counts"), false),
        )
        .build()
        .start()
        .await
        .expect("start");
    wait_for(&running, |r| r.metrics().processed >= records.len() as u64).await;
    assert_eq!(running.dropped_late_records(), late);
    running.shutdown().await.expect("clean shutdown");
    java.await.expect("the Java run");

    let ours = written(bootstrap, ours_out).await;
    let theirs = written(bootstrap, &java_out).await;
    assert_eq!(
        ours.len(),
        theirs.len(),
        "windows: ours {}, Kafka Streams {}",
        ours.len(),
        theirs.len()
    );
    for (window, updates) in &theirs {
        assert_eq!(ours.get(window), Some(updates), "updates of {window}");
    }
    assert_eq!(finals(&ours), finals(&theirs));
    assert_eq!(&ours, expected, "both match the reference");
    let _ = std::fs::remove_dir_all(java_dir);
}
