//! One module per top-level command.

pub mod cluster;
pub mod consume;
pub mod dev;
pub mod group;
pub mod produce;
pub mod share;
pub mod tls;
pub mod topic;
pub mod txn;

use anyhow::Context;
use rill_client::Client;

/// Connects, with an error that says what to check.
pub async fn connect(bootstrap: &[String]) -> anyhow::Result<Client> {
    Client::connect(bootstrap).await.with_context(|| {
        format!(
            "cannot reach the cluster at {} (check --bootstrap / RILL_BOOTSTRAP and that the nodes are running)",
            bootstrap.join(",")
        )
    })
}

/// Output style for commands that print data.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Default)]
pub enum Output {
    /// A human-readable table.
    #[default]
    Table,
    /// JSON.
    Json,
}
