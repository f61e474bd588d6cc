//! The `purekafka` admin commands as a user runs them: golden output for
//! tables and `--json` (volatile fields such as topic ids, and the unique
//! topic and group names, normalised), exit codes and one-line reasons.

use std::process::Command;

use purekafka::{Admin, Cluster, TopicPartition};
use serde_json::{json, Value};

use crate::support::{self, records};

/// Runs the CLI; returns (exit code, stdout, stderr).
fn cli(bootstrap: &str, args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_purekafka"))
        .args(args)
        .env("PUREKAFKA_BOOTSTRAP", bootstrap)
        .output()
        .expect("run purekafka");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn ok(bootstrap: &str, args: &[&str]) -> String {
    let (code, out, err) = cli(bootstrap, args);
    assert_eq!(code, 0, "purekafka {args:?} failed:\n{err}");
    out
}

/// Replaces names with placeholders and runs of spaces with one space, so
/// goldens do not depend on name lengths (alignment itself is unit-tested
/// in `output.rs`).
fn normalise(text: &str, names: &[(&str, &str)]) -> String {
    let mut t = text.to_owned();
    for (from, to) in names {
        t = t.replace(from, to);
    }
    t.lines()
        .map(|l| {
            l.split(' ')
                .filter(|w| !w.is_empty())
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect::<Vec<_>>()
        .join("\n")
}

const DESCRIBE_GOLDEN: &str = "\
Topic: <TOPIC> Id: <ID> Partitions: 2 Internal: false
Configs: retention.ms=3600000
PARTITION LEADER EPOCH REPLICAS ISR ERROR
0 1 0 1 1
1 1 0 1 1";

#[tokio::test]
async fn cli_topics_describe_golden_table_and_json() {
    let Some(bootstrap) = support::bootstrap("cli_topics_describe_golden_table_and_json") else {
        return;
    };
    let topic = support::unique_topic("cli-describe");
    let created = ok(
        &bootstrap,
        &[
            "topics",
            "create",
            &topic,
            "--partitions",
            "2",
            "--config",
            "retention.ms=3600000",
        ],
    );
    assert_eq!(created.trim(), format!("created topic {topic}"));

    let json_text = ok(&bootstrap, &["topics", "describe", &topic, "--json"]);
    let mut doc: Value = serde_json::from_str(&json_text).expect("JSON output");
    let id = doc[0]["id"].as_str().expect("id").to_owned();
    assert_eq!(id.len(), 22);
    doc[0]["id"] = json!("<ID>");
    doc[0]["name"] = json!("<TOPIC>");
    let partition = |p: i32| json!({"partition": p, "leader": 1, "leader_epoch": 0, "replicas": [1], "isr": [1], "error": null});
    assert_eq!(
        doc,
        json!([{"name": "<TOPIC>", "id": "<ID>", "internal": false,
                "partitions": [partition(0), partition(1)]}])
    );

    let table = ok(&bootstrap, &["topics", "describe", &topic, "--configs"]);
    assert_eq!(
        normalise(&table, &[(&topic, "<TOPIC>"), (&id, "<ID>")]),
        DESCRIBE_GOLDEN
    );

    let listed = ok(&bootstrap, &["topics", "list", "--json"]);
    let list: Value = serde_json::from_str(&listed).unwrap();
    assert!(list
        .as_array()
        .unwrap()
        .iter()
        .any(|t| t["name"] == json!(topic) && t["partitions"] == json!(2)));

    // A missing topic: exit 1 and a one-line reason naming it.
    let missing = support::unique_topic("cli-missing");
    let (code, _, err) = cli(&bootstrap, &["topics", "describe", &missing]);
    assert_eq!(code, 1);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains(&missing) && err.contains("UnknownTopicOrPartition"),
        "{err}"
    );

    // Creating it again fails for that topic only, with a typed reason.
    let (code, _, err) = cli(&bootstrap, &["topics", "create", &topic]);
    assert_eq!(code, 1);
    assert!(err.contains("TopicAlreadyExists"), "{err}");

    let deleted = ok(&bootstrap, &["topics", "delete", &topic]);
    assert_eq!(deleted.trim(), format!("deleted topic {topic}"));
}

const RESET_DRY_RUN_GOLDEN: &str = "\
GROUP TOPIC PARTITION CURRENT-OFFSET NEW-OFFSET
<GROUP> <TOPIC> 0 4 1
<GROUP> <TOPIC> 1 4 1
(dry run: nothing changed; add --execute to commit)";

fn committed(bootstrap: &str, group: &str) -> Vec<(i64, i64)> {
    let text = ok(bootstrap, &["groups", "describe", group, "--json"]);
    let doc: Value = serde_json::from_str(&text).unwrap();
    doc["offsets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| {
            (
                o["partition"].as_i64().unwrap(),
                o["current_offset"].as_i64().unwrap(),
            )
        })
        .collect()
}

#[tokio::test]
async fn cli_groups_reset_offsets_dry_run_then_execute() {
    let Some(bootstrap) = support::bootstrap("cli_groups_reset_offsets_dry_run_then_execute")
    else {
        return;
    };
    let cluster = Cluster::connect(support::config(&bootstrap)).await.unwrap();
    let topic = support::unique_topic("cli-reset");
    support::create_topic(&cluster, &topic, 2).await;
    for p in 0..2 {
        records::produce(&cluster, &topic, p, &records::values("r", 6)).await;
    }
    let group = support::unique_topic("cli-reset-g");
    let admin = Admin::with_cluster(cluster);
    let tps: Vec<_> = (0..2)
        .map(|p| (TopicPartition::new(topic.as_str(), p), 4))
        .collect();
    admin.alter_group_offsets(&group, &tps).await.unwrap();
    let names = [(group.as_str(), "<GROUP>"), (topic.as_str(), "<TOPIC>")];

    let dry = ok(
        &bootstrap,
        &[
            "groups",
            "reset-offsets",
            &group,
            "--topic",
            &topic,
            "--shift-by",
            "-3",
        ],
    );
    assert_eq!(normalise(&dry, &names), RESET_DRY_RUN_GOLDEN);
    assert_eq!(committed(&bootstrap, &group), vec![(0, 4), (1, 4)]);

    let exec = ok(
        &bootstrap,
        &[
            "groups",
            "reset-offsets",
            &group,
            "--topic",
            &format!("{topic}:1"),
            "--to-earliest",
            "--execute",
            "--json",
        ],
    );
    let mut doc: Value = serde_json::from_str(&exec).unwrap();
    doc["group"] = json!("<GROUP>");
    doc["partitions"][0]["topic"] = json!("<TOPIC>");
    assert_eq!(
        doc,
        json!({"group": "<GROUP>", "executed": true, "partitions": [
            {"topic": "<TOPIC>", "partition": 1, "current_offset": 4, "new_offset": 0}
        ]})
    );
    assert_eq!(committed(&bootstrap, &group), vec![(0, 4), (1, 0)]);

    let table = ok(&bootstrap, &["groups", "describe", &group]);
    assert_eq!(
        normalise(&table, &names),
        "Group: <GROUP> Type: classic State: Empty Assignor: Coordinator: 1\n\
         MEMBER-ID CLIENT-ID HOST ASSIGNMENT\n\
         TOPIC PARTITION CURRENT-OFFSET LOG-END-OFFSET LAG MEMBER-ID\n\
         <TOPIC> 0 4 6 2 -\n\
         <TOPIC> 1 0 6 6 -"
    );

    let (code, _, err) = cli(
        &bootstrap,
        &[
            "groups",
            "reset-offsets",
            &group,
            "--topic",
            &topic,
            "--to-datetime",
            "2024-02-30T00:00:00",
        ],
    );
    assert_eq!(code, 1);
    assert!(
        err.contains("--to-datetime") && err.contains("day out of range"),
        "{err}"
    );

    let deleted = ok(&bootstrap, &["groups", "delete", &group]);
    assert_eq!(deleted.trim(), format!("deleted group {group}"));
    records::delete_topic(admin.cluster(), &topic).await;
}

#[tokio::test]
async fn cli_cluster_offsets_and_acls() {
    let Some(bootstrap) = support::bootstrap("cli_cluster_offsets_and_acls") else {
        return;
    };
    let doc: Value = serde_json::from_str(&ok(&bootstrap, &["cluster", "--json"])).unwrap();
    assert!(doc["brokers"].as_array().is_some_and(|b| !b.is_empty()));
    assert!(doc["features"]
        .as_array()
        .unwrap()
        .iter()
        .any(|f| f["name"] == "metadata.version"));

    let topic = support::unique_topic("cli-offsets");
    ok(
        &bootstrap,
        &["topics", "create", &topic, "--partitions", "1"],
    );
    let cluster = Cluster::connect(support::config(&bootstrap)).await.unwrap();
    records::produce(&cluster, &topic, 0, &records::values("o", 3)).await;
    let table = ok(&bootstrap, &["offsets", &topic]);
    assert_eq!(
        normalise(&table, &[(&topic, "<TOPIC>")]),
        "TOPIC PARTITION EARLIEST LATEST\n<TOPIC> 0 0 3"
    );

    // Without an authorizer the broker's typed error is the one-line reason.
    let (code, out, err) = cli(&bootstrap, &["acls", "list", "--json"]);
    if code != 0 {
        assert_eq!(code, 1);
        assert!(err.contains("SecurityDisabled (54)"), "{err}");
        assert_eq!(err.lines().count(), 1, "{err}");
    } else {
        serde_json::from_str::<Value>(&out).expect("JSON ACL list");
    }
    records::delete_topic(&cluster, &topic).await;
}

#[tokio::test]
async fn cli_reset_offsets_execute_refuses_an_active_group() {
    let Some(bootstrap) = support::bootstrap("cli_reset_offsets_execute_refuses_an_active_group")
    else {
        return;
    };
    use purekafka::consumer::group::{GroupConfig, GroupEvent, GroupMember};
    let cluster = Cluster::connect(support::config(&bootstrap)).await.unwrap();
    let topic = support::unique_topic("cli-active");
    support::create_topic(&cluster, &topic, 1).await;
    let group = support::unique_topic("cli-active-g");
    let mut config = GroupConfig::new(&group);
    for (k, v) in [
        ("session.timeout.ms", "10000"),
        ("heartbeat.interval.ms", "300"),
    ] {
        config.try_set(k, v).expect("known").expect("valid");
    }
    let (member, mut events) =
        GroupMember::join(&cluster, config, vec![topic.clone()]).expect("join");
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        assert!(tokio::time::Instant::now() < deadline, "never assigned");
        member.notify_poll();
        match events
            .recv_timeout(std::time::Duration::from_millis(200))
            .await
        {
            Some(GroupEvent::Assigned(p)) if !p.is_empty() => break,
            Some(GroupEvent::Fatal(e)) => panic!("{e}"),
            _ => {}
        }
    }
    tokio::spawn(async move {
        while let Some(e) = events.recv().await {
            if let GroupEvent::Revoked(_, ack) = e {
                ack.ack();
            }
        }
    });
    let args = [
        "groups",
        "reset-offsets",
        &group,
        "--topic",
        &topic,
        "--to-earliest",
    ];
    // The dry run works on an active group; --execute is refused.
    ok(&bootstrap, &args);
    let mut exec = args.to_vec();
    exec.push("--execute");
    let (code, _, err) = cli(&bootstrap, &exec);
    assert_eq!(code, 1);
    assert!(err.contains("inactive") && err.contains("Stable"), "{err}");
    member.close().await.expect("leave");
    records::delete_topic(&cluster, &topic).await;
}
