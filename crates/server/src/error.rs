//! Errors of a node's lifecycle (startup, serving). Request-level failures are wire error codes,
//! mapped in [`crate::errors`].

/// A node failure.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The configuration is invalid.
    #[error("invalid configuration: {0}")]
    Config(String),
    /// Storage failed.
    #[error(transparent)]
    Storage(#[from] rill_storage::Error),
    /// Raft failed.
    #[error(transparent)]
    Raft(#[from] rill_raft::Error),
    /// The cluster refused to add this node (`--join`).
    #[error("the cluster refused to add this node: {0}")]
    JoinRefused(String),
    /// The gRPC server failed.
    #[error("gRPC server failed: {0}")]
    Serve(String),
}

/// Result alias.
pub type Result<T, E = Error> = std::result::Result<T, E>;
