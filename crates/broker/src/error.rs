//! Per-partition errors. Each maps to one wire error code (in the server's `errors` module).

use rill_proto::batch::BatchError;
use rill_raft::NodeId;

/// Why a partition operation failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PartitionError {
    /// This node does not lead the partition.
    #[error("node {node} is not the leader of this partition{}", leader_text(*leader, addr))]
    NotLeader { node: NodeId, leader: Option<NodeId>, addr: Option<String> },
    /// The in-sync replica set is too small; nothing was appended.
    #[error("in-sync replicas {isr:?} are fewer than min.insync.replicas={min}; nothing was written")]
    NotEnoughReplicas { isr: Vec<NodeId>, min: u32 },
    /// Committed, but the ISR condition could not be met while waiting.
    #[error("the batch was committed but {reason}; it may be visible, and retrying may duplicate it")]
    NotEnoughReplicasAfterAppend { reason: String },
    /// The operation did not finish in time.
    #[error("timed out after {waited_ms} ms waiting for {what}; the outcome is unknown")]
    Timeout { waited_ms: u64, what: &'static str },
    /// The batch is larger than `max.message.bytes`.
    #[error("record batch of {size} bytes exceeds max.message.bytes={max}")]
    MessageTooLarge { size: usize, max: u32 },
    /// The batch failed validation.
    #[error("invalid record batch: {0}")]
    InvalidBatch(BatchError),
    /// The requested offset is outside the stored range.
    #[error("offset {offset} is out of range [{start}, {end}]")]
    OffsetOutOfRange { offset: i64, start: u64, end: u64 },
    /// A request field is malformed.
    #[error("invalid request: {0}")]
    InvalidRequest(String),
    /// Storage failed or stored data is corrupt.
    #[error("storage failure: {0}")]
    Storage(String),
    /// The replica is stopping.
    #[error("the partition replica is shutting down")]
    ShuttingDown,
}

fn leader_text(leader: Option<NodeId>, addr: &Option<String>) -> String {
    match (leader, addr) {
        (Some(l), Some(a)) => format!("; the leader is node {l} at {a}"),
        (Some(l), None) => format!("; the leader is node {l}"),
        _ => "; no leader is known right now".to_string(),
    }
}

/// Result alias.
pub type Result<T, E = PartitionError> = std::result::Result<T, E>;
