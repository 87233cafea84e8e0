//! `rill group list | describe | reset-offsets | delete-offsets | delete`: consumer groups,
//! their members and their lag, and managing an inactive group's offsets.
//!
//! Lag per partition: in messages, the high watermark minus the committed offset; in seconds,
//! now minus the append time of the record at the committed offset (the oldest record not yet
//! processed), 0 when caught up.
//!
//! A classic group's members (Kafka's JoinGroup / SyncGroup) are shown with their generation's
//! assignment, decoded when the group uses Kafka's consumer protocol (`protocol_type`
//! `consumer`, as every Kafka consumer's does); other protocols' assignments are opaque bytes,
//! shown as their size.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use anyhow::Context;
use clap::Subcommand;
use comfy_table::Table;
use kafka_protocol::messages::ConsumerProtocolAssignment;
use kafka_protocol::protocol::Decodable;
use rill_client::{Client, OffsetSpec, TopicPartition};
use rill_proto::groups::{ClassicMemberDescription, DescribeGroupResponse, OwnedPartitions};
use serde_json::json;

use super::{connect, Output};

/// `rill group` subcommands.
#[derive(Debug, Subcommand)]
pub enum GroupCommand {
    /// List every group: its protocol (consumer or simple), state and member count.
    List {
        #[arg(long, value_enum, default_value_t)]
        output: Output,
    },
    /// A group's state, epochs, members and per-partition committed offsets with lag.
    Describe {
        /// The group id.
        group: String,
        #[arg(long, value_enum, default_value_t)]
        output: Output,
    },
    /// Moves a group's committed offsets of a topic (the group must have no members). Shows
    /// the change and does nothing unless --execute is given.
    ResetOffsets {
        /// The group id.
        group: String,
        /// The topic.
        #[arg(long)]
        topic: String,
        /// Only these partitions (default: all).
        #[arg(long)]
        partition: Vec<u32>,
        #[command(flatten)]
        to: ResetTo,
        /// Commit the new offsets (without it: a dry run).
        #[arg(long)]
        execute: bool,
    },
    /// Deletes a group's committed offsets of a topic (no member may subscribe to it).
    DeleteOffsets {
        /// The group id.
        group: String,
        /// The topic.
        #[arg(long)]
        topic: String,
        /// Only these partitions (default: all).
        #[arg(long)]
        partition: Vec<u32>,
    },
    /// Deletes a group: its committed offsets and membership (the group must have no members).
    Delete {
        /// The group id.
        group: String,
    },
}

/// Where `reset-offsets` moves each partition: exactly one of these.
#[derive(Debug, clap::Args)]
#[group(required = true, multiple = false)]
pub struct ResetTo {
    /// The partition's log start offset.
    #[arg(long)]
    to_earliest: bool,
    /// The partition's high watermark (skip everything stored).
    #[arg(long)]
    to_latest: bool,
    /// This offset (clamped to the partition's log start and high watermark).
    #[arg(long)]
    to_offset: Option<u64>,
    /// The first record appended at or after this time (ms since the epoch, or a duration ago
    /// like 10m); the high watermark when there is none.
    #[arg(long, value_parser = super::consume::parse_time)]
    to_timestamp: Option<i64>,
    /// The committed offset moved by N (negative: back), clamped; from the log start when the
    /// group committed none.
    #[arg(long, allow_hyphen_values = true)]
    shift_by: Option<i64>,
}

/// One partition's committed offset and lag.
struct PartitionLag {
    topic: String,
    partition: u32,
    committed: Option<u64>,
    high_watermark: u64,
    lag: Option<u64>,
    lag_seconds: Option<f64>,
    owner: Option<String>,
}

/// Runs a group command.
pub async fn run(bootstrap: &[String], cmd: GroupCommand) -> anyhow::Result<()> {
    let client = connect(bootstrap).await?;
    match cmd {
        GroupCommand::List { output } => {
            let groups = client.list_groups().await.context("cannot list groups")?;
            match output {
                Output::Json => println!(
                    "{}",
                    json!(groups
                        .iter()
                        .map(|g| json!({"group": g.group_id, "protocol": g.protocol, "state": g.state, "members": g.members}))
                        .collect::<Vec<_>>())
                ),
                Output::Table => {
                    let mut t = Table::new();
                    t.set_header(vec!["GROUP", "PROTOCOL", "STATE", "MEMBERS"]);
                    for g in &groups {
                        t.add_row(vec![g.group_id.clone(), g.protocol.clone(), g.state.clone(), g.members.to_string()]);
                    }
                    println!("{t}");
                }
            }
        }
        GroupCommand::ResetOffsets { group, topic, partition, to, execute } => {
            reset_offsets(&client, &group, &topic, &partition, &to, execute).await?;
        }
        GroupCommand::DeleteOffsets { group, topic, partition } => {
            let tps = partitions_of(&client, &topic, &partition).await?;
            client.delete_offsets(&group, &tps).await.with_context(|| format!("cannot delete offsets of {group:?}"))?;
            println!("deleted the committed offsets of {} partition(s) of {topic} for group {group}", tps.len());
        }
        GroupCommand::Delete { group } => {
            client.delete_group(&group).await.with_context(|| format!("cannot delete group {group:?}"))?;
            println!("deleted group {group}");
        }
        GroupCommand::Describe { group, output } => {
            let d = client.describe_group(&group).await.with_context(|| format!("cannot describe group {group:?}"))?;
            let lags = lags(&client, &d).await?;
            match output {
                Output::Json => println!("{}", describe_json(&d, &lags)),
                Output::Table => print_description(&d, &lags),
            }
        }
    }
    Ok(())
}

/// The partitions of `topic` named in `only` (all of them when empty), checked to exist.
async fn partitions_of(client: &Client, topic: &str, only: &[u32]) -> anyhow::Result<Vec<TopicPartition>> {
    let count = client.partition_count(topic).await.with_context(|| format!("cannot find topic {topic:?}"))?;
    if let Some(p) = only.iter().find(|p| **p >= count) {
        anyhow::bail!("partition {p} does not exist: topic {topic:?} has {count} partition(s)");
    }
    let chosen: BTreeSet<u32> = if only.is_empty() { (0..count).collect() } else { only.iter().copied().collect() };
    Ok(chosen.into_iter().map(|p| TopicPartition::new(topic, p)).collect())
}

/// `rill group reset-offsets`: shows (and with `execute` commits) the new offsets.
async fn reset_offsets(
    client: &Client,
    group: &str,
    topic: &str,
    only: &[u32],
    to: &ResetTo,
    execute: bool,
) -> anyhow::Result<()> {
    let tps = partitions_of(client, topic, only).await?;
    // Kafka's rule: a group's offsets move only while no member could be committing over them
    // (the coordinator refuses a commit without membership to a group with members anyway).
    match client.describe_group(group).await {
        Ok(d) if member_count(&d) > 0 => {
            anyhow::bail!("group {group:?} has {} member(s): stop them before resetting its offsets", member_count(&d))
        }
        Ok(_) => {}
        Err(e) if e.code() == Some(rill_client::ErrorCode::GroupIdNotFound) => {}
        Err(e) => return Err(e).with_context(|| format!("cannot describe group {group:?}")),
    }
    let committed = client.committed_offsets(group, &tps).await.context("cannot read the committed offsets")?;
    let mut moves = Vec::new();
    for tp in &tps {
        let earliest = client.list_offset(&tp.topic, tp.partition, OffsetSpec::Earliest).await?;
        let latest = client.list_offset(&tp.topic, tp.partition, OffsetSpec::Latest).await?;
        let current = committed.get(tp).cloned().flatten().map(|c| c.offset);
        let target = if to.to_earliest {
            earliest
        } else if to.to_latest {
            latest
        } else if let Some(o) = to.to_offset {
            o.clamp(earliest, latest)
        } else if let Some(ts) = to.to_timestamp {
            client.list_offset(&tp.topic, tp.partition, OffsetSpec::Timestamp(ts)).await?
        } else if let Some(n) = to.shift_by {
            let from = current.unwrap_or(earliest) as i128 + i128::from(n);
            (from.max(0) as u64).clamp(earliest, latest)
        } else {
            anyhow::bail!("say where to: --to-earliest, --to-latest, --to-offset, --to-timestamp or --shift-by");
        };
        moves.push((tp.clone(), current, target));
    }
    let mut t = Table::new();
    t.set_header(vec!["TOPIC", "PARTITION", "CURRENT", "NEW"]);
    for (tp, current, target) in &moves {
        t.add_row(vec![
            tp.topic.clone(),
            tp.partition.to_string(),
            current.map_or_else(|| "-".to_string(), |c| c.to_string()),
            target.to_string(),
        ]);
    }
    println!("{t}");
    if !execute {
        eprintln!("dry run: nothing changed; add --execute to commit these offsets");
        return Ok(());
    }
    let offsets: Vec<(TopicPartition, u64, String)> =
        moves.into_iter().map(|(tp, _, target)| (tp, target, String::new())).collect();
    client.commit_offsets(group, &offsets).await.with_context(|| format!("cannot commit {group:?}'s new offsets"))?;
    eprintln!("committed {} offset(s) for group {group}", offsets.len());
    Ok(())
}

fn pairs(p: &Option<OwnedPartitions>) -> Vec<(String, u32)> {
    p.iter().flat_map(|o| o.topics.iter().flat_map(|t| t.partitions.iter().map(|p| (t.topic.clone(), *p)))).collect()
}

fn partitions_text(p: &Option<OwnedPartitions>) -> String {
    let list: Vec<String> = pairs(p).iter().map(|(t, p)| format!("{t}-{p}")).collect();
    if list.is_empty() {
        "(idle)".into()
    } else {
        list.join(",")
    }
}

/// Committed offsets and lag of every partition the group committed or a member owns.
async fn lags(client: &Client, d: &DescribeGroupResponse) -> anyhow::Result<Vec<PartitionLag>> {
    let mut committed: BTreeMap<(String, u32), u64> = BTreeMap::new();
    for t in &d.offsets {
        for p in &t.partitions {
            if let Ok(o) = u64::try_from(p.offset) {
                committed.insert((t.topic.clone(), p.partition), o);
            }
        }
    }
    let mut owners: BTreeMap<(String, u32), String> = BTreeMap::new();
    for m in &d.members {
        for tp in pairs(&m.assignment).into_iter().chain(pairs(&m.revoking)) {
            owners.insert(tp, m.member_id.clone());
        }
    }
    for m in d.classic.iter().flat_map(|c| &c.members) {
        for tp in classic_assignment(d, m).into_iter().flatten() {
            owners.insert(tp, m.member_id.clone());
        }
    }
    let all: BTreeSet<(String, u32)> = committed.keys().chain(owners.keys()).cloned().collect();
    let now_ms = std::time::SystemTime::UNIX_EPOCH.elapsed().map(|d| d.as_millis() as i64).unwrap_or(0);
    let mut out = Vec::new();
    for (topic, partition) in all {
        let hw = client
            .list_offset(&topic, partition, OffsetSpec::Latest)
            .await
            .with_context(|| format!("cannot read the high watermark of {topic}-{partition}"))?;
        let c = committed.get(&(topic.clone(), partition)).copied();
        let lag = c.map(|c| hw.saturating_sub(c));
        let lag_seconds = match (c, lag) {
            (Some(c), Some(l)) if l > 0 => {
                let fetched = client.fetch_with(&topic, partition, c, Duration::ZERO, 1).await.ok();
                fetched.and_then(|f| f.records.first().map(|r| (now_ms - r.append_time_ms).max(0) as f64 / 1000.0))
            }
            (Some(_), Some(_)) => Some(0.0),
            _ => None,
        };
        let owner = owners.get(&(topic.clone(), partition)).cloned();
        out.push(PartitionLag { topic, partition, committed: c, high_watermark: hw, lag, lag_seconds, owner });
    }
    Ok(out)
}

/// Members of either protocol.
fn member_count(d: &DescribeGroupResponse) -> usize {
    d.members.len() + d.classic.as_ref().map_or(0, |c| c.members.len())
}

/// A classic member's partitions for its generation, when its group uses Kafka's consumer
/// protocol and the leader's assignment decodes; `None` otherwise (another protocol's bytes, or
/// none yet).
fn classic_assignment(d: &DescribeGroupResponse, m: &ClassicMemberDescription) -> Option<Vec<(String, u32)>> {
    let classic = d.classic.as_ref()?;
    if classic.protocol_type != "consumer" || m.assignment.len() < 2 {
        return None;
    }
    let mut bytes = bytes::Bytes::copy_from_slice(&m.assignment);
    let version = i16::from_be_bytes([bytes[0], bytes[1]]);
    // Versions 0 to 3 exist; a newer one is read as the newest known.
    let assignment = ConsumerProtocolAssignment::decode(&mut bytes.split_off(2), version.clamp(0, 3)).ok()?;
    let mut out = Vec::new();
    for t in assignment.assigned_partitions {
        out.extend(t.partitions.iter().filter_map(|&p| u32::try_from(p).ok()).map(|p| (t.topic.0.to_string(), p)));
    }
    Some(out)
}

/// A classic member's assignment as text: `topic-p,…`, or the size of bytes it cannot decode.
fn classic_assignment_text(d: &DescribeGroupResponse, m: &ClassicMemberDescription) -> String {
    match classic_assignment(d, m) {
        Some(tps) => tps.iter().map(|(t, p)| format!("{t}-{p}")).collect::<Vec<_>>().join(","),
        None if m.assignment.is_empty() => "-".into(),
        None => format!("({} bytes)", m.assignment.len()),
    }
}

fn describe_json(d: &DescribeGroupResponse, lags: &[PartitionLag]) -> serde_json::Value {
    let classic = d.classic.as_ref().map(|c| {
        json!({
            "generation": c.generation_id,
            "protocol_type": c.protocol_type,
            "protocol": c.protocol_name,
            "leader": c.leader,
            "members": c.members.iter().map(|m| json!({
                "member_id": m.member_id,
                "instance_id": m.instance_id,
                "client_id": m.client_id,
                "host": m.client_host,
                "assignment": classic_assignment(d, m).map(|tps| tps.iter().map(|(t, p)| json!({"topic": t, "partition": p})).collect::<Vec<_>>()),
                "assignment_bytes": m.assignment.len(),
            })).collect::<Vec<_>>(),
        })
    });
    json!({
        "group": d.group_id,
        "protocol": d.protocol,
        "state": d.state,
        "assignor": d.assignor,
        "rebalance_mode": d.rebalance_mode,
        "group_epoch": d.group_epoch,
        "target_epoch": d.target_epoch,
        "members": d.members.iter().map(|m| json!({
            "member_id": m.member_id,
            "instance_id": m.instance_id,
            "client_id": m.client_id,
            "host": m.client_host,
            "member_epoch": m.member_epoch,
            "state": m.state,
            "subscribed": m.subscribed_topics,
            "assignment": pairs(&m.assignment).iter().map(|(t, p)| json!({"topic": t, "partition": p})).collect::<Vec<_>>(),
            "revoking": pairs(&m.revoking).iter().map(|(t, p)| json!({"topic": t, "partition": p})).collect::<Vec<_>>(),
            "target": pairs(&m.target).iter().map(|(t, p)| json!({"topic": t, "partition": p})).collect::<Vec<_>>(),
        })).collect::<Vec<_>>(),
        "classic": classic,
        "partitions": lags.iter().map(|l| json!({
            "topic": l.topic,
            "partition": l.partition,
            "committed_offset": l.committed,
            "high_watermark": l.high_watermark,
            "lag": l.lag,
            "lag_seconds": l.lag_seconds,
            "member_id": l.owner,
        })).collect::<Vec<_>>(),
    })
}

fn print_description(d: &DescribeGroupResponse, lags: &[PartitionLag]) {
    println!(
        "group {} protocol {} state {} assignor {} mode {} group epoch {} target epoch {}",
        d.group_id,
        d.protocol,
        d.state,
        if d.assignor.is_empty() { "-" } else { &d.assignor },
        if d.rebalance_mode.is_empty() { "-" } else { &d.rebalance_mode },
        d.group_epoch,
        d.target_epoch
    );
    if !d.members.is_empty() {
        let mut t = Table::new();
        t.set_header(vec!["MEMBER", "INSTANCE", "CLIENT", "HOST", "EPOCH", "STATE", "ASSIGNMENT", "REVOKING"]);
        for m in &d.members {
            t.add_row(vec![
                m.member_id.clone(),
                m.instance_id.clone().unwrap_or_else(|| "-".into()),
                m.client_id.clone(),
                m.client_host.clone(),
                m.member_epoch.to_string(),
                m.state.clone(),
                partitions_text(&m.assignment),
                pairs(&m.revoking).iter().map(|(t, p)| format!("{t}-{p}")).collect::<Vec<_>>().join(","),
            ]);
        }
        println!("{t}");
    }
    if let Some(c) = d.classic.as_ref().filter(|c| !c.members.is_empty()) {
        println!(
            "classic generation {} protocol {} {} leader {}",
            c.generation_id,
            if c.protocol_type.is_empty() { "-" } else { &c.protocol_type },
            if c.protocol_name.is_empty() { "-" } else { &c.protocol_name },
            if c.leader.is_empty() { "-" } else { &c.leader }
        );
        let mut t = Table::new();
        t.set_header(vec!["MEMBER", "INSTANCE", "CLIENT", "HOST", "ASSIGNMENT"]);
        for m in &c.members {
            t.add_row(vec![
                m.member_id.clone(),
                m.instance_id.clone().unwrap_or_else(|| "-".into()),
                m.client_id.clone(),
                m.client_host.clone(),
                classic_assignment_text(d, m),
            ]);
        }
        println!("{t}");
    }
    let mut t = Table::new();
    t.set_header(vec!["TOPIC", "PARTITION", "COMMITTED", "HIGH WATERMARK", "LAG", "LAG SECONDS", "MEMBER"]);
    let dash = || "-".to_string();
    for l in lags {
        t.add_row(vec![
            l.topic.clone(),
            l.partition.to_string(),
            l.committed.map_or_else(dash, |c| c.to_string()),
            l.high_watermark.to_string(),
            l.lag.map_or_else(dash, |c| c.to_string()),
            l.lag_seconds.map_or_else(dash, |s| format!("{s:.1}")),
            l.owner.clone().unwrap_or_else(dash),
        ]);
    }
    println!("{t}");
}
