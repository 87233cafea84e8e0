//! Coordinator errors. Each maps to one wire error code (in the server's `errors` module).

use rill_broker::PartitionError;
use rill_raft::NodeId;

/// Why a coordinator request failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CoordinatorError {
    /// This node does not lead the id's partition.
    #[error("node {node} is not the coordinator{}", leader_text(*leader, addr))]
    NotCoordinator { node: NodeId, leader: Option<NodeId>, addr: Option<String> },
    /// The coordinator's new leader is still applying its log.
    #[error("the coordinator is loading its state (a new leader applying its log); retry shortly")]
    LoadInProgress,
    /// The coordinator cannot answer now (no leader, stopping, leadership moving).
    #[error("the coordinator is not available: {0}")]
    NotAvailable(String),
    /// The command was not committed in time; its outcome is unknown.
    #[error("timed out after {waited_ms} ms waiting for {what}; the outcome is unknown")]
    Timeout { waited_ms: u64, what: &'static str },
    /// The group id is not acceptable.
    #[error("invalid group id: {0}")]
    InvalidGroupId(String),
    /// A transaction timeout out of range.
    #[error("transaction timeout {got_ms} ms is out of range (1 ms to {max_ms} ms)")]
    InvalidTransactionTimeout { got_ms: u64, max_ms: u64 },
    /// A malformed request field.
    #[error("invalid request: {0}")]
    InvalidRequest(String),
    /// The group has no member with this id (never joined, left, or removed after its session).
    #[error(
        "group {group_id:?} has no member {member_id:?}; join again (member epoch 0, or a JoinGroup with an empty member id)"
    )]
    UnknownMemberId { group_id: String, member_id: String },
    /// The member's epoch is not its current one: it was fenced (removed, or replaced) and must
    /// rejoin with epoch 0, owning nothing.
    #[error("member {member_id:?} sent epoch {sent}, its epoch is {current}: it is fenced; rejoin with epoch 0")]
    FencedMemberEpoch { member_id: String, sent: i32, current: i32 },
    /// Another member holds this static instance id and has not left.
    #[error("instance id {instance_id:?} is held by member {member_id:?}, which has not left the group")]
    UnreleasedInstanceId { instance_id: String, member_id: String },
    /// A member's commit for partitions it does not own at its epoch.
    #[error(
        "member {member_id:?} does not own {partition} at epoch {sent} (its epoch is {current}): nothing was committed"
    )]
    StaleMemberEpoch { member_id: String, sent: i32, current: i32, partition: String },
    /// The group has members (deleting it, resetting its offsets).
    #[error("group {group_id:?} has {members} member(s); stop them first")]
    GroupNotEmpty { group_id: String, members: usize },
    /// A member of the group subscribes to the topic whose offsets are to be deleted.
    #[error("a member of group {group_id:?} subscribes to {topic:?}: its offsets cannot be deleted")]
    GroupSubscribedToTopic { group_id: String, topic: String },
    /// The group has neither members nor committed offsets.
    #[error("group {0:?} has no members and no committed offsets")]
    GroupIdNotFound(String),
    /// A subscription pattern that is empty, too long, or not a regular expression.
    #[error("invalid subscription pattern {pattern:?}: {reason}")]
    InvalidRegularExpression { pattern: String, reason: String },
    /// The server-side assignor asked for does not exist.
    #[error("unknown server assignor {0:?}: uniform or range")]
    UnsupportedAssignor(String),
    /// The group has as many members as it may.
    #[error("group {group_id:?} already has {max} members, the most a group may have")]
    GroupMaxSizeReached { group_id: String, max: usize },
    /// A classic group member's generation is not the group's: the group moved on without it.
    #[error(
        "member {member_id:?} of group {group_id:?} sent generation {sent}, the group is at generation {current}; rejoin the group"
    )]
    IllegalGeneration { group_id: String, member_id: String, sent: i32, current: i32 },
    /// A classic member's protocol type or protocols do not fit the group, or the group id is in
    /// use by the other group protocol.
    #[error("group {group_id:?}: {reason}")]
    InconsistentGroupProtocol { group_id: String, reason: String },
    /// A classic member's session timeout is outside the coordinator's range.
    #[error(
        "session timeout {got_ms} ms is out of range: the coordinator accepts {min_ms} to {max_ms} ms (group.min.session.timeout.ms, group.max.session.timeout.ms)"
    )]
    InvalidSessionTimeout { got_ms: u32, min_ms: u32, max_ms: u32 },
    /// The classic group is rebalancing; the member takes part by joining again.
    #[error("group {group_id:?} is rebalancing; join again (JoinGroup) to take part in the next generation")]
    RebalanceInProgress { group_id: String },
    /// A new dynamic member of a classic group was given a member id: it joins again with it.
    #[error("group {group_id:?} gave the new member the id {member_id:?}; join again with that member id")]
    MemberIdRequired { group_id: String, member_id: String },
    /// Another member id holds this static member's instance id now.
    #[error(
        "instance id {instance_id:?} of group {group_id:?} belongs to another member id than {member_id:?}: a process started later with the same instance id replaced this one; stop one of the two"
    )]
    FencedInstanceId { group_id: String, instance_id: String, member_id: String },
    /// The transactional id's markers are being written (or it is busy otherwise): retry.
    #[error("transactional id {transactional_id:?} is {state}: its markers are being written; retry shortly")]
    ConcurrentTransactions { transactional_id: String, state: &'static str },
    /// The request's producer id is not the transactional id's.
    #[error(
        "transactional id {transactional_id:?} has producer id {current}, the request names {producer_id}; initialise the producer (InitProducerId)"
    )]
    InvalidProducerIdMapping { transactional_id: String, producer_id: i64, current: i64 },
    /// The request's producer epoch is not the transactional id's: a newer instance (or a
    /// timeout) fenced it.
    #[error(
        "transactional id {transactional_id:?} is at epoch {current}, the request has epoch {epoch}: this producer was fenced by a newer instance or a transaction timeout"
    )]
    ProducerFenced { transactional_id: String, epoch: i16, current: i16 },
    /// The transaction is not in a state that allows the request.
    #[error("transactional id {transactional_id:?}: {reason}")]
    InvalidTxnState { transactional_id: String, reason: String },
    /// The transactional id has no record (no producer ever initialised it, or it expired).
    #[error("transactional id {0:?} is unknown to its coordinator")]
    TransactionalIdNotFound(String),
    /// A transaction marker from a coordinator that has been replaced: a newer one already
    /// wrote a marker for this producer.
    #[error("a marker of producer {producer_id} came from coordinator epoch {sent}, and a newer coordinator has written one since")]
    TransactionCoordinatorFenced { producer_id: i64, sent: i32 },
    /// Storage failed, or a stored state is corrupt.
    #[error("coordinator storage failure: {0}")]
    Storage(String),
}

impl From<PartitionError> for CoordinatorError {
    fn from(e: PartitionError) -> Self {
        match e {
            PartitionError::NotLeader { node, leader } => Self::NotCoordinator { node, leader, addr: None },
            PartitionError::CatchingUp => Self::LoadInProgress,
            PartitionError::Timeout { waited_ms, what } => Self::Timeout { waited_ms, what },
            PartitionError::Storage(s) => Self::Storage(s),
            other => Self::NotAvailable(other.to_string()),
        }
    }
}

impl CoordinatorError {
    /// A linearizable read's failure: a leadership no quorum confirmed in time is
    /// `NotAvailable` — the client asks the coordinator again, wherever it is now — rather than
    /// a timeout of the read itself (which clients do not retry).
    pub fn from_linearizable_read(e: PartitionError) -> Self {
        match e {
            PartitionError::Timeout { waited_ms, .. } => Self::NotAvailable(format!(
                "no quorum confirmed within {waited_ms} ms that this node still coordinates; retry"
            )),
            other => other.into(),
        }
    }
}

fn leader_text(leader: Option<NodeId>, addr: &Option<String>) -> String {
    match (leader, addr) {
        (Some(l), Some(a)) => format!("; the coordinator is node {l} at {a}"),
        (Some(l), None) => format!("; the coordinator is node {l}"),
        _ => "; no coordinator is known right now".to_string(),
    }
}

/// Result alias.
pub type Result<T, E = CoordinatorError> = std::result::Result<T, E>;
