//! `rill group list | describe`: consumer groups, their members and their lag.
//!
//! Lag per partition: in messages, the high watermark minus the committed offset; in seconds,
//! now minus the append time of the record at the committed offset (the oldest record not yet
//! processed), 0 when caught up.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use anyhow::Context;
use clap::Subcommand;
use comfy_table::Table;
use rill_client::{Client, OffsetSpec};
use rill_proto::groups::{DescribeGroupResponse, OwnedPartitions};
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

fn describe_json(d: &DescribeGroupResponse, lags: &[PartitionLag]) -> serde_json::Value {
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
