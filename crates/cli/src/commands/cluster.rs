//! `rill cluster …`

use std::collections::BTreeMap;

use anyhow::Context;
use clap::Subcommand;
use comfy_table::Table;
use serde_json::json;

use super::{connect, Output};

/// Cluster commands.
#[derive(Debug, Subcommand)]
pub enum ClusterCommand {
    /// Nodes, addresses and liveness.
    Status {
        /// Output format.
        #[arg(long, value_enum, default_value_t)]
        output: Output,
    },
    /// Admits a new node to join the cluster. A node started with `--join` joins only once its
    /// id is admitted (and its certificate, from the cluster's CA, names it).
    Admit {
        /// The new node's id.
        node_id: u64,
        /// Withdraw an admission that was not used yet.
        #[arg(long)]
        revoke: bool,
    },
}

/// Runs a cluster command.
pub async fn run(bootstrap: &[String], cmd: ClusterCommand) -> anyhow::Result<()> {
    let client = connect(bootstrap).await?;
    match cmd {
        ClusterCommand::Admit { node_id, revoke } => {
            client.admit_node(node_id, revoke).await.with_context(|| format!("cannot admit node {node_id}"))?;
            if revoke {
                println!("node {node_id}'s admission is withdrawn");
            } else {
                println!("node {node_id} is admitted: start it with --join (and its node-{node_id} certificate)");
            }
        }
        ClusterCommand::Status { output } => {
            let c = client.describe_cluster().await.context("cannot describe the cluster")?;
            // Internal topics count for health (leaderless, under-replicated), not as leaders.
            let topics = client.list_topics_with(true).await.context("cannot list topics")?;
            let mut leaders: BTreeMap<u64, u32> = BTreeMap::new();
            let mut internal_leaders: BTreeMap<u64, u32> = BTreeMap::new();
            let mut under_replicated = Vec::new();
            let mut leaderless = Vec::new();
            for t in &topics {
                let d = client.describe_topic(&t.name).await.with_context(|| format!("cannot describe {}", t.name))?;
                for p in &d.partitions {
                    match p.leader {
                        Some(l) if t.internal => *internal_leaders.entry(l).or_default() += 1,
                        Some(l) => *leaders.entry(l).or_default() += 1,
                        None => leaderless.push(format!("{}/{}: {}", t.name, p.partition, p.error_message)),
                    }
                    if p.leader.is_some() && p.isr.len() < p.replicas.len() {
                        under_replicated
                            .push(format!("{}/{} (isr {:?} of replicas {:?})", t.name, p.partition, p.isr, p.replicas));
                    }
                }
            }
            match output {
                Output::Json => {
                    let nodes: Vec<_> = c
                        .nodes
                        .iter()
                        .map(|n| json!({"node_id": n.node_id, "address": n.address, "alive": n.alive, "metadata_voter": n.metadata_voter, "storage_failure": (!n.storage_failure.is_empty()).then_some(&n.storage_failure), "leaders": leaders.get(&n.node_id).copied().unwrap_or(0), "internal_leaders": internal_leaders.get(&n.node_id).copied().unwrap_or(0)}))
                        .collect();
                    println!(
                        "{}",
                        json!({"nodes": nodes, "metadata_leader": c.metadata_leader, "under_replicated": under_replicated, "leaderless": leaderless})
                    );
                }
                Output::Table => {
                    let mut t = Table::new();
                    t.set_header(vec![
                        "NODE",
                        "ADDRESS",
                        "ALIVE",
                        "ROLE",
                        "PARTITION LEADERS",
                        "COORDINATOR LEADERS",
                        "METADATA LEADER",
                    ]);
                    for n in &c.nodes {
                        let meta = if c.metadata_leader == Some(n.node_id) { "yes" } else { "" };
                        t.add_row(vec![
                            n.node_id.to_string(),
                            n.address.clone(),
                            if n.alive { "yes" } else { "NO" }.to_string(),
                            if n.metadata_voter { "voter" } else { "broker" }.to_string(),
                            leaders.get(&n.node_id).copied().unwrap_or(0).to_string(),
                            internal_leaders.get(&n.node_id).copied().unwrap_or(0).to_string(),
                            meta.to_string(),
                        ]);
                    }
                    println!("{t}");
                    for n in c.nodes.iter().filter(|n| !n.storage_failure.is_empty()) {
                        println!("node {}: {}", n.node_id, n.storage_failure);
                    }
                    let user = topics.iter().filter(|t| !t.internal).count();
                    println!(
                        "{user} topic(s) and {} internal; under-replicated partitions: {}",
                        topics.len() - user,
                        under_replicated.len()
                    );
                    for u in &under_replicated {
                        println!("  under-replicated {u}");
                    }
                    for l in &leaderless {
                        println!("  NO LEADER {l}");
                    }
                }
            }
        }
    }
    Ok(())
}
