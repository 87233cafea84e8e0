//! Metadata errors: refusals a caller can act on, each with a readable message.

/// What kind of refusal (mapped to wire error codes in one place, the server's `errors`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetaErrorKind {
    /// The topic name is not valid.
    InvalidTopic,
    /// A topic with this name exists.
    TopicExists,
    /// No topic with this name.
    UnknownTopic,
    /// Bad partition count.
    InvalidPartitions,
    /// Bad replication factor.
    InvalidReplicationFactor,
    /// Bad topic configuration.
    InvalidConfig,
}

/// A refused metadata command.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct MetaError {
    /// The kind of refusal.
    pub kind: MetaErrorKind,
    /// What is wrong and how to fix it.
    pub message: String,
}

impl MetaError {
    /// A refusal of `kind`.
    pub fn new(kind: MetaErrorKind, message: impl Into<String>) -> Self {
        Self { kind, message: message.into() }
    }
}
