//! `rill cluster …`

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
}

/// Runs a cluster command.
pub async fn run(bootstrap: &[String], cmd: ClusterCommand) -> anyhow::Result<()> {
    let client = connect(bootstrap).await?;
    match cmd {
        ClusterCommand::Status { output } => {
            let c = client.describe_cluster().await.context("cannot describe the cluster")?;
            match output {
                Output::Json => {
                    let nodes: Vec<_> = c
                        .nodes
                        .iter()
                        .map(|n| json!({"node_id": n.node_id, "address": n.address, "alive": n.alive}))
                        .collect();
                    println!("{}", json!({"nodes": nodes, "metadata_leader": c.metadata_leader}));
                }
                Output::Table => {
                    let mut t = Table::new();
                    t.set_header(vec!["NODE", "ADDRESS", "ALIVE", "METADATA LEADER"]);
                    for n in &c.nodes {
                        let leader = if c.metadata_leader == Some(n.node_id) { "yes" } else { "" };
                        t.add_row(vec![
                            n.node_id.to_string(),
                            n.address.clone(),
                            if n.alive { "yes" } else { "NO" }.to_string(),
                            leader.to_string(),
                        ]);
                    }
                    println!("{t}");
                }
            }
        }
    }
    Ok(())
}
