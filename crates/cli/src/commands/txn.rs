//! `rill txn`: transactional ids at their coordinator.

use anyhow::Context;
use clap::Subcommand;
use serde_json::json;

use super::{connect, Output};

/// `rill txn` subcommands.
#[derive(Debug, Subcommand)]
pub enum TxnCommand {
    /// Every transactional id: state, producer, how long its transaction has been open.
    List {
        /// Only these states (repeatable): Empty, Ongoing, PrepareCommit, PrepareAbort,
        /// CompleteCommit, CompleteAbort.
        #[arg(long = "state")]
        states: Vec<String>,
        /// Only transactions open at least this long (e.g. 30s, 5m): the ones holding back a
        /// partition's last stable offset.
        #[arg(long, value_parser = humantime::parse_duration)]
        open_longer_than: Option<std::time::Duration>,
        #[arg(long, value_enum, default_value_t)]
        output: Output,
    },
    /// Aborts a transactional id's open transaction (its producer is fenced; what it wrote in
    /// the transaction is never visible to read_committed consumers).
    Abort {
        /// The transactional id.
        transactional_id: String,
    },
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
        TxnCommand::List { states, open_longer_than, output } => {
            let listed =
                client.list_transactions(&states, open_longer_than).await.context("cannot list transactions")?;
            match output {
                Output::Json => println!(
                    "{}",
                    json!(listed
                        .iter()
                        .map(|t| json!({
                            "transactional_id": t.transactional_id,
                            "state": t.state,
                            "producer_id": t.producer_id,
                            "producer_epoch": t.producer_epoch,
                            "open_ms": (t.open_ms >= 0).then_some(t.open_ms),
                            "partitions": t.partitions,
                        }))
                        .collect::<Vec<_>>())
                ),
                Output::Table => {
                    println!(
                        "{:<32} {:<15} {:>12} {:>6} {:>10} {:>10}",
                        "TRANSACTIONAL ID", "STATE", "PRODUCER", "EPOCH", "OPEN MS", "PARTITIONS"
                    );
                    for t in &listed {
                        let open = if t.open_ms >= 0 { t.open_ms.to_string() } else { "-".into() };
                        println!(
                            "{:<32} {:<15} {:>12} {:>6} {:>10} {:>10}",
                            t.transactional_id, t.state, t.producer_id, t.producer_epoch, open, t.partitions
                        );
                    }
                }
            }
        }
        TxnCommand::Abort { transactional_id } => {
            client
                .abort_open_transaction(&transactional_id)
                .await
                .with_context(|| format!("cannot abort the transaction of {transactional_id:?}"))?;
            println!("aborting the open transaction of {transactional_id}: its producer is fenced, its markers are being written");
        }
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
