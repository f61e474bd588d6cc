//! `purekafka groups list|describe|delete|reset-offsets`, as
//! `kafka-consumer-groups.sh` (and `kafka-share-groups.sh` for share groups,
//! which `describe` and `reset-offsets` recognise by asking
//! ShareGroupDescribe first: see `share_groups.rs`; `describe` then asks
//! StreamsGroupDescribe for streams groups: see `streams_groups.rs`). `reset-offsets` is a
//! dry run unless `--execute`, and executing needs the group to be inactive
//! (no members), as Kafka's tools require.

use std::collections::BTreeMap;

use clap::{Args, Subcommand};
use purekafka::admin::{GroupType, OffsetSpec, ResetPlan, ResetSpec};
use purekafka::{Admin, Error, TopicPartition};
use serde_json::json;

use crate::output::{print_json, Failures, Format, Table};
use crate::{share_groups, streams_groups, Connect};

/// Where `reset-offsets` moves the offsets (exactly one).
#[derive(Args, Debug, Clone)]
#[group(required = true, multiple = false)]
pub struct ResetTo {
    /// To the log start.
    #[arg(long)]
    to_earliest: bool,
    /// To the log end.
    #[arg(long)]
    to_latest: bool,
    /// To this offset (clamped into the log).
    #[arg(long, value_name = "N")]
    to_offset: Option<i64>,
    /// By N from the committed offset (negative: back), clamped.
    #[arg(long, value_name = "N", allow_hyphen_values = true)]
    shift_by: Option<i64>,
    /// To the first offset at or after YYYY-MM-DDTHH:MM:SS[.sss][Z|±HH:MM]
    /// (UTC when no zone is given).
    #[arg(long, value_name = "ISO8601")]
    to_datetime: Option<String>,
}

impl ResetTo {
    fn spec(&self) -> purekafka::Result<ResetSpec> {
        Ok(if self.to_earliest {
            ResetSpec::Earliest
        } else if self.to_latest {
            ResetSpec::Latest
        } else if let Some(o) = self.to_offset {
            ResetSpec::ToOffset(o)
        } else if let Some(n) = self.shift_by {
            ResetSpec::ShiftBy(n)
        } else {
            let text = self.to_datetime.as_deref().unwrap_or_default();
            let ms = parse_datetime(text)
                .map_err(|r| Error::config("--to-datetime", format!("{text:?}: {r}")))?;
            ResetSpec::ToTimestamp(ms)
        })
    }
}

/// Group commands.
#[derive(Subcommand, Debug)]
pub enum GroupsCommand {
    /// List groups with their type and state.
    List {
        #[command(flatten)]
        connect: Connect,
        /// Only groups in this state (repeatable): Stable, Empty, ...
        #[arg(long)]
        state: Vec<String>,
        /// Only groups of this type (repeatable): classic, consumer, share, ...
        #[arg(long = "type")]
        group_type: Vec<String>,
        #[command(flatten)]
        format: Format,
    },
    /// Describe a group: state, members and their assignments, committed
    /// offsets (share groups: share-partition start offsets) and lag
    /// (streams groups: subtopologies and each member's tasks).
    Describe {
        #[command(flatten)]
        connect: Connect,
        /// Group id.
        group: String,
        #[command(flatten)]
        format: Format,
    },
    /// Delete groups of any type, share groups too (they must be empty).
    Delete {
        #[command(flatten)]
        connect: Connect,
        /// Group ids.
        #[arg(required = true)]
        groups: Vec<String>,
    },
    /// Move a group's committed offsets, or a share group's start offsets
    /// (dry run unless --execute).
    ResetOffsets {
        #[command(flatten)]
        connect: Connect,
        /// Group id.
        group: String,
        /// Topic, or topic:p1,p2 for some partitions (repeatable).
        #[arg(long, required = true)]
        topic: Vec<String>,
        #[command(flatten)]
        to: ResetTo,
        /// Print the plan only (the default).
        #[arg(long, conflicts_with = "execute")]
        dry_run: bool,
        /// Commit the plan; the group must have no active members.
        #[arg(long)]
        execute: bool,
        #[command(flatten)]
        format: Format,
    },
}

/// Runs a groups command.
pub async fn run(cmd: GroupsCommand) -> purekafka::Result<()> {
    match cmd {
        GroupsCommand::List {
            connect,
            state,
            group_type,
            format,
        } => {
            let admin = Admin::connect(connect.client()?).await?;
            let groups = admin.list_groups(&state, &group_type).await?;
            if format.json {
                print_json(&json!(groups
                    .iter()
                    .map(|g| json!({
                        "group": g.group_id,
                        "type": g.group_type,
                        "state": g.state,
                        "protocol_type": g.protocol_type,
                        "coordinator": g.coordinator,
                    }))
                    .collect::<Vec<_>>()));
            } else {
                let mut t = Table::new(&["GROUP", "TYPE", "STATE", "PROTOCOL-TYPE", "COORDINATOR"]);
                for g in &groups {
                    t.row(vec![
                        g.group_id.clone(),
                        g.group_type.clone(),
                        g.state.clone(),
                        g.protocol_type.clone(),
                        g.coordinator.to_string(),
                    ]);
                }
                t.print();
            }
            Ok(())
        }
        GroupsCommand::Describe {
            connect,
            group,
            format,
        } => {
            let admin = Admin::connect(connect.client()?).await?;
            if let Some(d) = share_groups::find(&admin, &group).await? {
                return share_groups::describe(&admin, &d, format).await;
            }
            if let Some(d) = streams_groups::find(&admin, &group).await? {
                streams_groups::describe(&d, format);
                return Ok(());
            }
            describe(&admin, &group, format).await
        }
        GroupsCommand::Delete { connect, groups } => {
            let admin = Admin::connect(connect.client()?).await?;
            let mut failures = Failures::default();
            for (g, r) in admin.delete_groups(&groups).await? {
                if failures.take(r).is_some() {
                    println!("deleted group {g}");
                }
            }
            failures.finish()
        }
        GroupsCommand::ResetOffsets {
            connect,
            group,
            topic,
            to,
            dry_run: _,
            execute,
            format,
        } => {
            let spec = to.spec()?;
            let admin = Admin::connect(connect.client()?).await?;
            match share_groups::find(&admin, &group).await? {
                Some(d) => {
                    let tps = partitions(&admin, &topic).await?;
                    share_groups::reset(&admin, &d, &tps, spec, execute, format).await
                }
                None => reset(&admin, &group, &topic, spec, execute, format).await,
            }
        }
    }
}

async fn describe(admin: &Admin, group: &str, format: Format) -> purekafka::Result<()> {
    let mut res = admin.describe_groups(&[group.to_owned()]).await?;
    let d = res
        .swap_remove(group)
        .unwrap_or_else(|| Err(Error::config("group", "no result")))?;
    let committed = admin.list_group_offsets(group, None).await?;
    let tps: Vec<(TopicPartition, OffsetSpec)> = committed
        .keys()
        .map(|tp| (tp.clone(), OffsetSpec::Latest))
        .collect();
    let ends = admin.list_offsets(&tps).await?;
    let owner: BTreeMap<&TopicPartition, &str> = d
        .members
        .iter()
        .flat_map(|m| {
            m.assignment
                .iter()
                .map(move |tp| (tp, m.member_id.as_str()))
        })
        .collect();
    let rows: Vec<_> = committed
        .iter()
        .map(|(tp, c)| {
            let current = c.as_ref().map(|c| c.offset);
            let end = ends.get(tp).and_then(|r| r.as_ref().ok()).map(|o| o.offset);
            let lag = match (current, end) {
                (Some(c), Some(e)) => Some((e - c).max(0)),
                _ => None,
            };
            (tp, current, end, lag, owner.get(tp).copied())
        })
        .collect();
    let group_type = match d.group_type {
        GroupType::Classic => "classic",
        GroupType::Consumer => "consumer",
        _ => "unknown",
    };
    if format.json {
        print_json(&json!({
            "group": d.group_id,
            "type": group_type,
            "state": d.state,
            "protocol_type": d.protocol_type,
            "assignor": d.assignor,
            "coordinator": d.coordinator,
            "members": d.members.iter().map(|m| json!({
                "member_id": m.member_id,
                "instance_id": m.instance_id,
                "client_id": m.client_id,
                "host": m.host,
                "assignment": m.assignment.iter().map(ToString::to_string).collect::<Vec<_>>(),
            })).collect::<Vec<_>>(),
            "offsets": rows.iter().map(|(tp, c, e, lag, m)| json!({
                "topic": &*tp.topic,
                "partition": tp.partition,
                "current_offset": c,
                "log_end_offset": e,
                "lag": lag,
                "member_id": m,
            })).collect::<Vec<_>>(),
        }));
        return Ok(());
    }
    println!(
        "Group: {}  Type: {}  State: {}  Assignor: {}  Coordinator: {}",
        d.group_id, group_type, d.state, d.assignor, d.coordinator
    );
    let mut members = Table::new(&["MEMBER-ID", "CLIENT-ID", "HOST", "ASSIGNMENT"]);
    for m in &d.members {
        members.row(vec![
            m.member_id.clone(),
            m.client_id.clone(),
            m.host.clone(),
            crate::output::list(&m.assignment),
        ]);
    }
    members.print();
    let mut offsets = Table::new(&[
        "TOPIC",
        "PARTITION",
        "CURRENT-OFFSET",
        "LOG-END-OFFSET",
        "LAG",
        "MEMBER-ID",
    ]);
    let opt = |o: Option<i64>| o.map_or("-".to_owned(), |v| v.to_string());
    for (tp, c, e, lag, m) in &rows {
        offsets.row(vec![
            tp.topic.to_string(),
            tp.partition.to_string(),
            opt(*c),
            opt(*e),
            opt(*lag),
            m.unwrap_or("-").to_owned(),
        ]);
    }
    offsets.print();
    Ok(())
}

/// `topic` or `topic:0,2` into partitions, using metadata for whole topics.
async fn partitions(admin: &Admin, specs: &[String]) -> purekafka::Result<Vec<TopicPartition>> {
    let mut out = Vec::new();
    for s in specs {
        match s.split_once(':') {
            Some((t, ps)) => {
                for p in ps.split(',') {
                    let p: i32 = p.trim().parse().map_err(|_| {
                        Error::config("--topic", format!("{s:?}: bad partition {p:?}"))
                    })?;
                    out.push(TopicPartition::new(t, p));
                }
            }
            None => {
                let mut d = admin.describe_topics(std::slice::from_ref(s)).await?;
                let t = d
                    .swap_remove(s)
                    .unwrap_or_else(|| Err(Error::config("--topic", "no result")))?;
                out.extend(
                    t.partitions
                        .iter()
                        .map(|p| TopicPartition::new(s.as_str(), p.partition)),
                );
            }
        }
    }
    out.sort();
    out.dedup();
    Ok(out)
}

async fn reset(
    admin: &Admin,
    group: &str,
    topics: &[String],
    spec: ResetSpec,
    execute: bool,
    format: Format,
) -> purekafka::Result<()> {
    let tps = partitions(admin, topics).await?;
    if execute {
        let mut d = admin.describe_groups(&[group.to_owned()]).await?;
        if let Some(Ok(d)) = d.swap_remove(group) {
            if !matches!(d.state.as_str(), "Empty" | "Dead" | "") {
                return Err(Error::config(
                    "--execute",
                    format!(
                        "assignments can only be reset if group {group} is inactive, but its state is {}",
                        d.state
                    ),
                ));
            }
        }
    }
    let plan = admin.plan_offset_reset(group, &tps, spec).await?;
    let mut failures = Failures::default();
    if execute {
        let offsets: Vec<_> = plan
            .iter()
            .map(|p| (p.partition.clone(), p.target))
            .collect();
        for (_, r) in admin.alter_group_offsets(group, &offsets).await? {
            failures.take(r);
        }
    }
    print_reset_plan(group, &plan, execute, format, ResetOf::Committed);
    failures.finish()
}

/// Which offsets a reset moves: a consumer group's committed offsets or a
/// share group's start offsets (the labels differ, the plan does not).
#[derive(Clone, Copy, PartialEq)]
pub(crate) enum ResetOf {
    Committed,
    ShareStart,
}

/// Prints a reset plan (dry run or executed) as a table or JSON.
pub(crate) fn print_reset_plan(
    group: &str,
    plan: &[ResetPlan],
    execute: bool,
    format: Format,
    of: ResetOf,
) {
    let (current_key, target_key, current_col, target_col, verb) = match of {
        ResetOf::Committed => (
            "current_offset",
            "new_offset",
            "CURRENT-OFFSET",
            "NEW-OFFSET",
            "commit",
        ),
        ResetOf::ShareStart => (
            "start_offset",
            "new_start_offset",
            "START-OFFSET",
            "NEW-START-OFFSET",
            "apply",
        ),
    };
    if format.json {
        let mut out = json!({
            "group": group,
            "executed": execute,
            "partitions": plan.iter().map(|p| json!({
                "topic": &*p.partition.topic,
                "partition": p.partition.partition,
                current_key: p.current,
                target_key: p.target,
            })).collect::<Vec<_>>(),
        });
        if of == ResetOf::ShareStart {
            out["type"] = json!("share");
        }
        print_json(&out);
    } else {
        let mut t = Table::new(&["GROUP", "TOPIC", "PARTITION", current_col, target_col]);
        for p in plan {
            t.row(vec![
                group.to_owned(),
                p.partition.topic.to_string(),
                p.partition.partition.to_string(),
                p.current.map_or("-".to_owned(), |c| c.to_string()),
                p.target.to_string(),
            ]);
        }
        t.print();
        if !execute {
            println!("(dry run: nothing changed; add --execute to {verb})");
        }
    }
}

/// Parses `YYYY-MM-DDTHH:MM:SS[.sss][Z|±HH:MM]` into milliseconds since
/// the Unix epoch; no zone means UTC.
pub fn parse_datetime(s: &str) -> Result<i64, String> {
    let b = s.as_bytes();
    let num = |from: usize, len: usize| -> Result<i64, String> {
        let part = s.get(from..from + len).ok_or("too short")?;
        if !part.bytes().all(|c| c.is_ascii_digit()) {
            return Err(format!("expected digits at position {from}"));
        }
        part.parse::<i64>().map_err(|e| e.to_string())
    };
    let sep = |at: usize, c: u8| -> Result<(), String> {
        match b.get(at) {
            Some(x) if *x == c || (c == b'T' && *x == b't') => Ok(()),
            _ => Err(format!("expected {:?} at position {at}", c as char)),
        }
    };
    let year = num(0, 4)?;
    sep(4, b'-')?;
    let month = num(5, 2)?;
    sep(7, b'-')?;
    let day = num(8, 2)?;
    sep(10, b'T')?;
    let hour = num(11, 2)?;
    sep(13, b':')?;
    let minute = num(14, 2)?;
    sep(16, b':')?;
    let second = num(17, 2)?;
    let mut i = 19;
    let mut millis = 0;
    if b.get(i) == Some(&b'.') {
        let digits = b[i + 1..].iter().take_while(|c| c.is_ascii_digit()).count();
        if digits == 0 {
            return Err("expected fraction digits after '.'".into());
        }
        let frac = &s[i + 1..i + 1 + digits.min(3)];
        millis =
            frac.parse::<i64>().map_err(|e| e.to_string())? * 10_i64.pow(3 - frac.len() as u32);
        i += 1 + digits;
    }
    let offset_min = match b.get(i) {
        None => 0,
        Some(b'Z' | b'z') if i + 1 == b.len() => 0,
        Some(c @ (b'+' | b'-')) if i + 6 == b.len() => {
            let h = num(i + 1, 2)?;
            sep(i + 3, b':')?;
            let m = num(i + 4, 2)?;
            if h > 23 || m > 59 {
                return Err("zone offset out of range".into());
            }
            let sign = if *c == b'-' { -1 } else { 1 };
            sign * (h * 60 + m)
        }
        Some(_) => return Err(format!("unexpected text at position {i}")),
    };
    let leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
    let days_in_month = [
        31,
        if leap { 29 } else { 28 },
        31,
        30,
        31,
        30,
        31,
        31,
        30,
        31,
        30,
        31,
    ];
    if !(1..=12).contains(&month) {
        return Err("month out of range".into());
    }
    if day < 1 || day > days_in_month[(month - 1) as usize] {
        return Err("day out of range".into());
    }
    if hour > 23 || minute > 59 || second > 59 {
        return Err("time out of range".into());
    }
    let days = days_from_civil(year, month, day);
    let secs = days * 86_400 + hour * 3600 + minute * 60 + second - offset_min * 60;
    Ok(secs * 1000 + millis)
}

/// Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's
/// `days_from_civil`).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::parse_datetime;

    #[test]
    fn datetimes_parse_to_epoch_millis() {
        assert_eq!(parse_datetime("1970-01-01T00:00:00"), Ok(0));
        assert_eq!(parse_datetime("1970-01-01T00:00:00Z"), Ok(0));
        assert_eq!(
            parse_datetime("2024-02-29T12:34:56.789Z"),
            Ok(1_709_210_096_789)
        );
        assert_eq!(
            parse_datetime("2024-02-29T14:34:56.789+02:00"),
            Ok(1_709_210_096_789)
        );
        assert_eq!(
            parse_datetime("2024-02-29T07:04:56.789-05:30"),
            Ok(1_709_210_096_789)
        );
        assert_eq!(parse_datetime("2000-03-01T00:00:00.5"), Ok(951_868_800_500));
        assert_eq!(parse_datetime("1969-12-31T23:59:59Z"), Ok(-1000));
    }

    #[test]
    fn bad_datetimes_say_why() {
        for bad in [
            "",
            "2024-02-30T00:00:00",
            "2023-02-29T00:00:00",
            "2024-13-01T00:00:00",
            "2024-01-01 00:00:00",
            "2024-01-01T24:00:00",
            "2024-01-01T00:00:00.",
            "2024-01-01T00:00:00+0200",
            "2024-01-01T00:00:00Zjunk",
            "20x4-01-01T00:00:00",
        ] {
            assert!(parse_datetime(bad).is_err(), "{bad:?} parsed");
        }
    }
}
