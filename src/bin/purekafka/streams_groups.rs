//! The streams-group side of `purekafka groups describe` (KIP-1071), as
//! Kafka's `kafka-streams-groups.sh --describe --members`: the group's
//! state and epochs, the subtopologies the coordinator initialized, and each
//! member with its active, standby and warm-up tasks. `list` shows streams
//! groups with their type already (ListGroups).

use purekafka::admin::{StreamsGroupDescription, TasksBySubtopology};
use purekafka::error::KafkaCode;
use purekafka::{Admin, Error};
use serde_json::json;

use crate::output::{print_json, Format, Table};

const GROUP_ID_NOT_FOUND: i16 = 69;

/// `group` described as a streams group; `None` when it is none (the
/// coordinator answers GROUP_ID_NOT_FOUND for other types and unknown ids)
/// or the broker has no streams groups (before Kafka 4.2: no
/// StreamsGroupDescribe).
pub async fn find(
    admin: &Admin,
    group: &str,
) -> purekafka::Result<Option<StreamsGroupDescription>> {
    let mut d = admin.describe_streams_groups(&[group.to_owned()]).await?;
    match d.swap_remove(group) {
        Some(Ok(d)) => Ok(Some(d)),
        Some(Err(e)) if e.kafka_code() == KafkaCode::from_code(GROUP_ID_NOT_FOUND) => Ok(None),
        Some(Err(Error::UnsupportedVersion { .. })) => Ok(None),
        Some(Err(e)) => Err(e),
        None => Ok(None),
    }
}

/// Tasks as `subtopology:partition,...` lists, e.g. `0:0,2 1:1`.
fn tasks(t: &TasksBySubtopology) -> String {
    if t.is_empty() {
        return "-".to_owned();
    }
    t.iter()
        .map(|(st, ps)| {
            let ps: Vec<String> = ps.iter().map(ToString::to_string).collect();
            format!("{st}:{}", ps.join(","))
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Prints a described streams group.
pub fn describe(d: &StreamsGroupDescription, format: Format) {
    if format.json {
        print_json(&json!({
            "group": d.group_id,
            "type": "streams",
            "state": d.state,
            "group_epoch": d.group_epoch,
            "assignment_epoch": d.assignment_epoch,
            "topology_epoch": d.topology_epoch,
            "subtopologies": d.subtopologies.iter().map(|s| json!({
                "id": s.id,
                "source_topics": s.source_topics,
                "repartition_sink_topics": s.repartition_sink_topics,
                "state_changelog_topics": s.state_changelog_topics,
                "repartition_source_topics": s.repartition_source_topics,
            })).collect::<Vec<_>>(),
            "members": d.members.iter().map(|m| json!({
                "member_id": m.member_id,
                "member_epoch": m.member_epoch,
                "process_id": m.process_id,
                "client_id": m.client_id,
                "host": m.client_host,
                "active_tasks": m.assignment.active,
                "standby_tasks": m.assignment.standby,
                "warmup_tasks": m.assignment.warmup,
                "target_active_tasks": m.target_assignment.active,
            })).collect::<Vec<_>>(),
        }));
        return;
    }
    println!(
        "Group: {}  Type: streams  State: {}  Group epoch: {}  Assignment epoch: {}  Topology epoch: {}",
        d.group_id,
        d.state,
        d.group_epoch,
        d.assignment_epoch,
        d.topology_epoch.map_or("-".to_owned(), |e| e.to_string())
    );
    let mut subs = Table::new(&["SUBTOPOLOGY", "SOURCE-TOPICS", "CHANGELOG-TOPICS"]);
    for s in &d.subtopologies {
        subs.row(vec![
            s.id.clone(),
            s.source_topics.join(","),
            s.state_changelog_topics
                .iter()
                .map(|(t, p)| format!("{t}({p})"))
                .collect::<Vec<_>>()
                .join(","),
        ]);
    }
    subs.print();
    let mut members = Table::new(&[
        "MEMBER-ID",
        "EPOCH",
        "PROCESS-ID",
        "CLIENT-ID",
        "HOST",
        "ACTIVE-TASKS",
        "STANDBY-TASKS",
        "WARMUP-TASKS",
    ]);
    for m in &d.members {
        members.row(vec![
            m.member_id.clone(),
            m.member_epoch.to_string(),
            m.process_id.clone(),
            m.client_id.clone(),
            m.client_host.clone(),
            tasks(&m.assignment.active),
            tasks(&m.assignment.standby),
            tasks(&m.assignment.warmup),
        ]);
    }
    members.print();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tasks_print_by_subtopology() {
        let mut t = TasksBySubtopology::new();
        assert_eq!(tasks(&t), "-");
        t.insert("0".into(), vec![0, 2]);
        t.insert("1".into(), vec![1]);
        assert_eq!(tasks(&t), "0:0,2 1:1");
    }
}
