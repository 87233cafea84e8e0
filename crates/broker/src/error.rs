//! Per-partition errors. Each maps to one wire error code (in the server's `errors` module).

use openraft::error::{CheckIsLeaderError, ClientWriteError, RaftError};
use rill_raft::NodeId;
use rill_records::BatchError;

/// Why a partition operation failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PartitionError {
    /// This node does not lead the partition. (The leader's client address is the API layer's
    /// to add: Raft knows only the nodes' internal addresses.)
    #[error("node {node} is not the leader of this partition{}", leader_text(*leader))]
    NotLeader { node: NodeId, leader: Option<NodeId> },
    /// The in-sync replica set is too small; nothing was appended.
    #[error("in-sync replicas {isr:?} are fewer than min.insync.replicas={min}; nothing was written")]
    NotEnoughReplicas { isr: Vec<NodeId>, min: u32 },
    /// Committed, but the ISR condition could not be met while waiting.
    #[error("the batch was committed but {reason}; it may be visible, and retrying may duplicate it")]
    NotEnoughReplicasAfterAppend { reason: String },
    /// The operation did not finish in time.
    #[error("timed out after {waited_ms} ms waiting for {what}; the outcome is unknown")]
    Timeout { waited_ms: u64, what: &'static str },
    /// A deletion reached into a transaction still open when its time ran out; nothing was
    /// deleted (the log start never passes the last stable offset).
    #[error("records below offset {before} include a transaction still open at offset {stable}; waited {waited_ms} ms for it to be decided and deleted nothing (an open transaction ends at its timeout, or by `rill txn abort`)")]
    OpenTransactionBelow { before: u64, stable: u64, waited_ms: u64 },
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
    /// Leadership is being handed to another replica (preferred-leader balancing).
    #[error("leadership of this partition is moving to node {to}; retry shortly")]
    LeaderMoving { to: NodeId },
    /// A new leader has not yet applied its whole log; idempotent batches must wait for it.
    #[error("the new leader is still applying its log; retry shortly")]
    CatchingUp,
    /// An idempotent batch skipped sequence numbers.
    #[error(
        "producer {producer_id}: batch starts at sequence {got}, expected {expected}; an earlier batch is missing"
    )]
    OutOfOrderSequence { producer_id: i64, expected: i32, got: i32 },
    /// An idempotent batch was stored too long ago for its offsets to be remembered.
    #[error("producer {producer_id}: the batch at sequence {first_seq} was already stored")]
    DuplicateSequence { producer_id: i64, first_seq: i32 },
    /// An idempotent batch carries an older epoch than the partition has seen.
    #[error("producer {producer_id}: epoch {got} is older than the current epoch {current}; a newer instance of this producer exists")]
    InvalidProducerEpoch { producer_id: i64, current: i16, got: i16 },
    /// An intact batch whose content is not acceptable (a control batch from a client, ...).
    #[error("invalid record batch: {0}")]
    InvalidRecord(String),
    /// Records of an intact batch that may not be stored, each with its position in the batch
    /// (Kafka's `batch_index`, KIP-467) and why; the batch is refused whole.
    #[error("{reason}: {} of the batch's records (the first at index {})", .records.len(), .records.first().copied().unwrap_or_default())]
    InvalidRecords {
        /// Why, for every record listed.
        reason: String,
        /// The positions of the records in the batch.
        records: Vec<u32>,
    },
    /// A transactional batch for a partition that is in no ongoing transaction of its producer.
    #[error("{0}")]
    InvalidTxnState(String),
    /// A transaction marker from a coordinator older than the one whose marker this partition
    /// applied last for the producer: that coordinator was deposed.
    #[error("transaction marker of coordinator epoch {got} refused: a coordinator of epoch {current} has written markers for this producer")]
    CoordinatorFenced { current: i32, got: i32 },
    /// A transactional batch met a transaction marker of its producer during its verification,
    /// or the transaction's coordinator is busy with its markers: retry.
    #[error("{0}")]
    ConcurrentTransactions(String),
    /// The transaction's coordinator refused the producer: another producer id or epoch holds
    /// the transactional id now (a newer instance, a timeout).
    #[error("the transaction coordinator refused the producer: {0}")]
    TransactionFenced(String),
    /// The transaction's coordinator could not verify the partition (not reachable, moving).
    #[error("the transaction coordinator could not verify this partition: {0}; retry")]
    CoordinatorNotAvailable(String),
    /// The partition does not know this producer (its state expired) and the batch does not
    /// start a sequence.
    #[error("producer {producer_id} is unknown to this partition (its state may have expired); get a new producer id")]
    UnknownProducerId { producer_id: i64 },
    /// The partition tracks as many producers as it may.
    #[error("the partition already tracks {max} idempotent producers; a new one must wait until idle ones expire")]
    TooManyProducers { max: usize },
    /// The partition's Raft group is changing its membership and refused the proposal.
    #[error("the partition's replica set is being reconfigured ({0}); retry shortly")]
    Reconfiguring(String),
}

impl PartitionError {
    /// Why Raft refused a proposal made on node `node`.
    pub fn from_write(e: ClientWriteError<NodeId, openraft::BasicNode>, node: NodeId) -> Self {
        match e {
            ClientWriteError::ForwardToLeader(f) => Self::NotLeader { node, leader: f.leader_id },
            ClientWriteError::ChangeMembershipError(e) => Self::Reconfiguring(e.to_string()),
        }
    }

    /// Why node `node` could not confirm with a quorum that it still leads (a linearizable
    /// read); `not_leader` is the refusal naming the leader this node knows of.
    pub fn from_leader_check(
        e: RaftError<NodeId, CheckIsLeaderError<NodeId, openraft::BasicNode>>,
        node: NodeId,
        not_leader: impl FnOnce() -> Self,
    ) -> Self {
        match e {
            RaftError::APIError(CheckIsLeaderError::ForwardToLeader(f)) => {
                Self::NotLeader { node, leader: f.leader_id }
            }
            RaftError::APIError(CheckIsLeaderError::QuorumNotEnough(_)) => not_leader(),
            RaftError::Fatal(_) => Self::ShuttingDown,
        }
    }
}

fn leader_text(leader: Option<NodeId>) -> String {
    match leader {
        Some(l) => format!("; the leader is node {l}"),
        None => "; no leader is known right now".to_string(),
    }
}

/// Result alias.
pub type Result<T, E = PartitionError> = std::result::Result<T, E>;
