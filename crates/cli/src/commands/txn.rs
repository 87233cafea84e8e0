//! `rill txn`: transactional ids at their coordinator.

use anyhow::Context;
use clap::Subcommand;
use serde_json::json;

use super::{connect, Output};

/// `rill txn` subcommands.
#[derive(Debug, Subcommand)]
pub enum TxnCommand {
    /// A transactional id's state (Kafka's names: Empty, Ongoing, PrepareCommit, PrepareAbort,
    /// CompleteCommit, CompleteAbort), producer id and epoch, timeout, and the partitions of its
    /// open transaction with how long it has been open.
    Describe {
        /// The transactional id.
        transactional_id: String,
        #[arg(long, value_enum, default_value_t)]
        output: Output,
    },
}

/// Runs `rill txn`.
pub async fn run(bootstrap: &[String], cmd: TxnCommand) -> anyhow::Result<()> {
    let client = connect(bootstrap).await?;
    match cmd {
        TxnCommand::Describe { transactional_id, output } => {
            let d = client
                .describe_transaction(&transactional_id)
                .await
                .with_context(|| format!("cannot describe transactional id {transactional_id:?}"))?;
            let partitions: Vec<String> =
                d.topics.iter().flat_map(|t| t.partitions.iter().map(move |p| format!("{}/{p}", t.topic))).collect();
            let now_ms = std::time::SystemTime::UNIX_EPOCH.elapsed().map_or(0, |d| d.as_millis() as i64);
            let open_ms = (d.transaction_start_ms >= 0).then(|| now_ms.saturating_sub(d.transaction_start_ms));
            match output {
                Output::Json => println!(
                    "{}",
                    json!({
                        "transactional_id": d.transactional_id,
                        "state": d.state,
                        "producer_id": d.producer_id,
                        "producer_epoch": d.producer_epoch,
                        "transaction_timeout_ms": d.transaction_timeout_ms,
                        "open_ms": open_ms,
                        "partitions": partitions,
                        "protocol_version": d.protocol_version,
                    })
                ),
                Output::Table => {
                    println!("transactional id  {}", d.transactional_id);
                    println!("state             {}", d.state);
                    println!("producer          id {} epoch {}", d.producer_id, d.producer_epoch);
                    println!("timeout           {} ms", d.transaction_timeout_ms);
                    println!("protocol          v{}", d.protocol_version);
                    if let Some(ms) = open_ms {
                        println!("open for          {ms} ms");
                    }
                    if !partitions.is_empty() {
                        println!("partitions        {}", partitions.join(" "));
                    }
                }
            }
        }
    }
    Ok(())
}
