//! The share-group side of `purekafka groups` (KIP-932), as Kafka's
//! `kafka-share-groups.sh`: `describe` shows members with their assignments
//! and each partition's share-partition start offset and lag, and
//! `reset-offsets` moves the start offsets (AlterShareGroupOffsets) of an
//! empty share group. `list` and `delete` need nothing of their own:
//! ListGroups reports the type and DeleteGroups deletes share groups too.

use std::collections::BTreeMap;

use purekafka::admin::{OffsetSpec, ResetSpec, ShareGroupDescription};
use purekafka::error::KafkaCode;
use purekafka::{Admin, Error, TopicPartition};
use serde_json::json;

use crate::groups::{print_reset_plan, ResetOf};
use crate::output::{print_json, Failures, Format, Table};

/// `group` described as a share group; `None` when it is none (the
/// coordinator answers GROUP_ID_NOT_FOUND for other types and unknown ids)
/// or the broker has no share groups (before Kafka 4.1: no
/// ShareGroupDescribe).
pub async fn find(admin: &Admin, group: &str) -> purekafka::Result<Option<ShareGroupDescription>> {
    let mut d = admin.describe_share_groups(&[group.to_owned()]).await?;
    match d.swap_remove(group) {
        Some(Ok(d)) => Ok(Some(d)),
        Some(Err(e)) if e.kafka_code() == KafkaCode::from_code(GROUP_ID_NOT_FOUND) => Ok(None),
        Some(Err(Error::UnsupportedVersion { .. })) => Ok(None),
        Some(Err(e)) => Err(e),
        None => Ok(None),
    }
}

const GROUP_ID_NOT_FOUND: i16 = 69;

/// Prints a described share group, its start offsets and their lag (the
/// log end offset minus the start offset: acquired and in-flight records
/// count as lag, as in `kafka-share-groups.sh --describe`).
pub async fn describe(
    admin: &Admin,
    d: &ShareGroupDescription,
    format: Format,
) -> purekafka::Result<()> {
    let starts = admin.describe_share_group_offsets(&d.group_id).await?;
    let tps: Vec<(TopicPartition, OffsetSpec)> = starts
        .keys()
        .map(|tp| (tp.clone(), OffsetSpec::Latest))
        .collect();
    let ends = admin.list_offsets(&tps).await?;
    let mut failures = Failures::default();
    let rows: Vec<_> = starts
        .into_iter()
        .filter_map(|(tp, r)| {
            let start = failures.take(r)?;
            let start = (start >= 0).then_some(start);
            let end = ends
                .get(&tp)
                .and_then(|r| r.as_ref().ok())
                .map(|o| o.offset);
            let lag = match (start, end) {
                (Some(s), Some(e)) => Some((e - s).max(0)),
                _ => None,
            };
            Some((tp, start, end, lag))
        })
        .collect();
    if format.json {
        print_json(&json!({
            "group": d.group_id,
            "type": "share",
            "state": d.state,
            "assignor": d.assignor,
            "group_epoch": d.group_epoch,
            "members": d.members.iter().map(|m| json!({
                "member_id": m.member_id,
                "client_id": m.client_id,
                "host": m.client_host,
                "member_epoch": m.member_epoch,
                "subscribed_topics": m.subscribed_topics,
                "assignment": m.assignment.iter().map(ToString::to_string).collect::<Vec<_>>(),
            })).collect::<Vec<_>>(),
            "offsets": rows.iter().map(|(tp, s, e, lag)| json!({
                "topic": &*tp.topic,
                "partition": tp.partition,
                "start_offset": s,
                "log_end_offset": e,
                "lag": lag,
            })).collect::<Vec<_>>(),
        }));
        return failures.finish();
    }
    println!(
        "Group: {}  Type: share  State: {}  Assignor: {}  Epoch: {}",
        d.group_id, d.state, d.assignor, d.group_epoch
    );
    let mut members = Table::new(&["MEMBER-ID", "CLIENT-ID", "HOST", "ASSIGNMENT"]);
    for m in &d.members {
        let mut assignment = m.assignment.clone();
        assignment.sort();
        members.row(vec![
            m.member_id.clone(),
            m.client_id.clone(),
            m.client_host.clone(),
            crate::output::list(&assignment),
        ]);
    }
    members.print();
    let mut offsets = Table::new(&[
        "TOPIC",
        "PARTITION",
        "START-OFFSET",
        "LOG-END-OFFSET",
        "LAG",
    ]);
    let opt = |o: Option<i64>| o.map_or("-".to_owned(), |v| v.to_string());
    for (tp, s, e, lag) in &rows {
        offsets.row(vec![
            tp.topic.to_string(),
            tp.partition.to_string(),
            opt(*s),
            opt(*e),
            opt(*lag),
        ]);
    }
    offsets.print();
    failures.finish()
}

/// Plans, and with `execute` applies, a reset of the share group's start
/// offsets on `tps`. Executing needs the group to be empty, as
/// `kafka-share-groups.sh` requires.
pub async fn reset(
    admin: &Admin,
    d: &ShareGroupDescription,
    tps: &[TopicPartition],
    spec: ResetSpec,
    execute: bool,
    format: Format,
) -> purekafka::Result<()> {
    let group = d.group_id.as_str();
    if execute && !matches!(d.state.as_str(), "Empty" | "Dead") {
        return Err(Error::config(
            "--execute",
            format!(
                "share group {group} must be empty to reset its offsets, but its state is {} with {} member(s)",
                d.state,
                d.members.len()
            ),
        ));
    }
    let plan = admin
        .plan_share_group_offset_reset(group, tps, spec)
        .await?;
    let mut failures = Failures::default();
    if execute {
        let offsets: Vec<_> = plan
            .iter()
            .map(|p| (p.partition.clone(), p.target))
            .collect();
        let results: BTreeMap<_, _> = admin.alter_share_group_offsets(group, &offsets).await?;
        for (_, r) in results {
            failures.take(r);
        }
    }
    print_reset_plan(group, &plan, execute, format, ResetOf::ShareStart);
    failures.finish()
}
