//! The one place internal errors become Rill's error codes.
//!
//! Every per-entry [`Refusal`] a service function answers (a partition of a produce, a topic of
//! a metadata request, a transactional id of a describe) is built here, from an internal error
//! ([`partition`], [`meta`], [`propose`], [`coordinator`]) or by a named constructor for a refusal
//! the service layer makes itself (an unknown topic, a malformed field, a denied resource). Each
//! listener encodes a refusal in its own wire shape (whole-request failures,
//! `crate::service::RequestError`, become gRPC statuses in `crate::api::request_status`, the
//! gRPC listener's one mapping); the internal services' statuses are built here too. [`kafka_code`] states,
//! for every code, the Kafka error code the Kafka-protocol listener answers with.

use rill_broker::PartitionError;
use rill_meta::{MetaError, MetaErrorKind};
use rill_proto::common::{ErrorCode, LeaderHint};
use rill_raft::NodeId;
use rill_records::BatchError;

use rill_coordinator::CoordinatorError;

use crate::node::ProposeError;

/// Why one entry of a request (a partition, a topic, a group, a transactional id) was not served:
/// a stable code (Kafka's number where the meaning is the same), a readable message saying what
/// to do, and where the leader or coordinator is when that is the reason.
#[derive(Debug, Clone, PartialEq)]
pub struct Refusal {
    /// The stable code.
    pub code: ErrorCode,
    /// What went wrong and what to do.
    pub message: String,
    /// Where the leader is, for NOT_LEADER_OR_FOLLOWER.
    pub leader: Option<LeaderHint>,
    /// For `INVALID_RECORD`: the positions in the batch of the records that may not be stored
    /// (KIP-467), each with why; empty when the batch as a whole is at fault.
    pub records: Vec<RecordError>,
}

/// One record a produced batch was refused for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordError {
    /// Its position in the batch (Kafka's `batch_index`).
    pub index: u32,
    /// Why it may not be stored.
    pub message: String,
}

impl Refusal {
    /// An error without a leader hint.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Self { code, message: message.into(), leader: None, records: Vec::new() }
    }
}

/// Maps a partition error; `client_addr` gives a node's client address for the leader hint.
pub fn partition(e: &PartitionError, client_addr: impl Fn(NodeId) -> Option<String>) -> Refusal {
    let message = e.to_string();
    match e {
        PartitionError::NotLeader { leader, .. } => {
            let address = leader.and_then(&client_addr);
            Refusal {
                code: ErrorCode::NotLeaderOrFollower,
                // The broker's text ends "the leader is node N".
                message: match &address {
                    Some(a) => format!("{message} at {a}"),
                    None => message,
                },
                leader: leader.map(|id| LeaderHint { node_id: id, address: address.unwrap_or_default() }),
                records: Vec::new(),
            }
        }
        PartitionError::NotEnoughReplicas { .. } => Refusal::new(ErrorCode::NotEnoughReplicas, message),
        PartitionError::NotEnoughReplicasAfterAppend { .. } => {
            Refusal::new(ErrorCode::NotEnoughReplicasAfterAppend, message)
        }
        PartitionError::Timeout { .. } | PartitionError::OpenTransactionBelow { .. } => {
            Refusal::new(ErrorCode::RequestTimedOut, message)
        }
        PartitionError::MessageTooLarge { .. } => Refusal::new(ErrorCode::MessageTooLarge, message),
        PartitionError::InvalidBatch(BatchError::UnsupportedCompression(_)) => {
            Refusal::new(ErrorCode::UnsupportedCompressionType, message)
        }
        PartitionError::InvalidBatch(BatchError::TooLargeDecompressed { .. }) => {
            Refusal::new(ErrorCode::MessageTooLarge, message)
        }
        PartitionError::InvalidBatch(b) if b.is_invalid_record() => Refusal::new(ErrorCode::InvalidRecord, message),
        PartitionError::InvalidBatch(_) => Refusal::new(ErrorCode::CorruptMessage, message),
        PartitionError::InvalidRecord(_) => Refusal::new(ErrorCode::InvalidRecord, message),
        PartitionError::InvalidRecords { reason, records } => Refusal {
            records: records.iter().map(|&index| RecordError { index, message: reason.clone() }).collect(),
            ..Refusal::new(ErrorCode::InvalidRecord, message)
        },
        PartitionError::InvalidTxnState(_) => Refusal::new(ErrorCode::InvalidTxnState, message),
        PartitionError::OffsetOutOfRange { .. } => Refusal::new(ErrorCode::OffsetOutOfRange, message),
        PartitionError::InvalidRequest(_) => Refusal::new(ErrorCode::InvalidRequest, message),
        PartitionError::Storage(_) => Refusal::new(ErrorCode::StorageError, message),
        PartitionError::ShuttingDown => Refusal::new(ErrorCode::NodeShuttingDown, message),
        PartitionError::CatchingUp | PartitionError::LeaderMoving { .. } => {
            Refusal::new(ErrorCode::LeaderNotAvailable, message)
        }
        PartitionError::OutOfOrderSequence { .. } => Refusal::new(ErrorCode::OutOfOrderSequenceNumber, message),
        PartitionError::DuplicateSequence { .. } => Refusal::new(ErrorCode::DuplicateSequenceNumber, message),
        PartitionError::InvalidProducerEpoch { .. } => Refusal::new(ErrorCode::InvalidProducerEpoch, message),
        PartitionError::CoordinatorFenced { .. } => Refusal::new(ErrorCode::TransactionCoordinatorFenced, message),
        PartitionError::ConcurrentTransactions(_) => Refusal::new(ErrorCode::ConcurrentTransactions, message),
        PartitionError::TransactionFenced(_) => Refusal::new(ErrorCode::ProducerFenced, message),
        PartitionError::CoordinatorNotAvailable(_) => Refusal::new(ErrorCode::CoordinatorNotAvailable, message),
        PartitionError::UnknownProducerId { .. } => Refusal::new(ErrorCode::UnknownProducerId, message),
        PartitionError::TooManyProducers { .. } => Refusal::new(ErrorCode::TooManyProducers, message),
        PartitionError::Reconfiguring(_) => Refusal::new(ErrorCode::LeaderNotAvailable, message),
    }
}

/// Maps a metadata refusal.
pub fn meta(e: &MetaError) -> Refusal {
    let code = match e.kind {
        MetaErrorKind::InvalidTopic => ErrorCode::InvalidTopic,
        MetaErrorKind::TopicExists => ErrorCode::TopicAlreadyExists,
        MetaErrorKind::UnknownTopic => ErrorCode::UnknownTopicOrPartition,
        MetaErrorKind::InvalidPartitions => ErrorCode::InvalidPartitions,
        MetaErrorKind::InvalidReplicationFactor => ErrorCode::InvalidReplicationFactor,
        MetaErrorKind::InvalidConfig => ErrorCode::InvalidConfig,
    };
    Refusal::new(code, e.message.clone())
}

/// Maps a failed metadata proposal.
pub fn propose(e: &ProposeError) -> Refusal {
    let code = match e {
        ProposeError::NoLeader(_) => ErrorCode::LeaderNotAvailable,
        ProposeError::ShuttingDown => ErrorCode::NodeShuttingDown,
        ProposeError::Internal(_) => ErrorCode::UnknownServerError,
    };
    Refusal::new(code, e.to_string())
}

/// A malformed request field (one per-request answer can carry).
pub fn invalid_request(message: impl Into<String>) -> Refusal {
    Refusal::new(ErrorCode::InvalidRequest, message)
}

/// The internal topic a coordinator lives in is not created yet (the cluster is starting).
pub fn coordinator_not_created(topic: &str) -> Refusal {
    Refusal::new(
        ErrorCode::CoordinatorNotAvailable,
        format!("{topic} is not created yet (the cluster creates it once its members are registered); retry shortly"),
    )
}

/// No leader is known for the coordinator's partition.
pub fn coordinator_without_leader(topic: &str, partition: u32) -> Refusal {
    Refusal::new(
        ErrorCode::CoordinatorNotAvailable,
        format!("{topic}/{partition} has no leader right now (an election is in progress, or too many replicas are down); retry"),
    )
}

/// Maps a coordinator failure (the coordinator's address comes with `NOT_COORDINATOR`).
pub fn coordinator(e: &CoordinatorError) -> Refusal {
    let message = e.to_string();
    match e {
        CoordinatorError::NotCoordinator { leader, addr, .. } => Refusal {
            code: ErrorCode::NotCoordinator,
            message,
            leader: leader.map(|id| LeaderHint { node_id: id, address: addr.clone().unwrap_or_default() }),
            records: Vec::new(),
        },
        CoordinatorError::LoadInProgress => Refusal::new(ErrorCode::CoordinatorLoadInProgress, message),
        CoordinatorError::NotAvailable(_) => Refusal::new(ErrorCode::CoordinatorNotAvailable, message),
        CoordinatorError::Timeout { .. } => Refusal::new(ErrorCode::RequestTimedOut, message),
        CoordinatorError::InvalidGroupId(_) => Refusal::new(ErrorCode::InvalidGroupId, message),
        CoordinatorError::InvalidTransactionTimeout { .. } => {
            Refusal::new(ErrorCode::InvalidTransactionTimeout, message)
        }
        CoordinatorError::InvalidRequest(_) => Refusal::new(ErrorCode::InvalidRequest, message),
        CoordinatorError::UnknownMemberId { .. } => Refusal::new(ErrorCode::UnknownMemberId, message),
        CoordinatorError::FencedMemberEpoch { .. } => Refusal::new(ErrorCode::FencedMemberEpoch, message),
        CoordinatorError::UnreleasedInstanceId { .. } => Refusal::new(ErrorCode::UnreleasedInstanceId, message),
        CoordinatorError::StaleMemberEpoch { .. } => Refusal::new(ErrorCode::StaleMemberEpoch, message),
        CoordinatorError::GroupNotEmpty { .. } => Refusal::new(ErrorCode::GroupNotEmpty, message),
        CoordinatorError::GroupSubscribedToTopic { .. } => Refusal::new(ErrorCode::GroupSubscribedToTopic, message),
        CoordinatorError::GroupIdNotFound(_) => Refusal::new(ErrorCode::GroupIdNotFound, message),
        CoordinatorError::UnsupportedAssignor(_) => Refusal::new(ErrorCode::UnsupportedAssignor, message),
        CoordinatorError::InvalidRegularExpression { .. } => Refusal::new(ErrorCode::InvalidRegularExpression, message),
        CoordinatorError::GroupMaxSizeReached { .. } => Refusal::new(ErrorCode::GroupMaxSizeReached, message),
        CoordinatorError::IllegalGeneration { .. } => Refusal::new(ErrorCode::IllegalGeneration, message),
        CoordinatorError::InconsistentGroupProtocol { .. } => {
            Refusal::new(ErrorCode::InconsistentGroupProtocol, message)
        }
        CoordinatorError::InvalidSessionTimeout { .. } => Refusal::new(ErrorCode::InvalidSessionTimeout, message),
        CoordinatorError::RebalanceInProgress { .. } => Refusal::new(ErrorCode::RebalanceInProgress, message),
        CoordinatorError::MemberIdRequired { .. } => Refusal::new(ErrorCode::MemberIdRequired, message),
        CoordinatorError::FencedInstanceId { .. } => Refusal::new(ErrorCode::FencedInstanceId, message),
        CoordinatorError::ConcurrentTransactions { .. } => Refusal::new(ErrorCode::ConcurrentTransactions, message),
        CoordinatorError::InvalidProducerIdMapping { .. } => Refusal::new(ErrorCode::InvalidProducerIdMapping, message),
        CoordinatorError::ProducerFenced { .. } => Refusal::new(ErrorCode::ProducerFenced, message),
        CoordinatorError::InvalidTxnState { .. } => Refusal::new(ErrorCode::InvalidTxnState, message),
        CoordinatorError::TransactionalIdNotFound(_) => Refusal::new(ErrorCode::TransactionalIdNotFound, message),
        CoordinatorError::TransactionCoordinatorFenced { .. } => {
            Refusal::new(ErrorCode::TransactionCoordinatorFenced, message)
        }
        CoordinatorError::Storage(_) => Refusal::new(ErrorCode::StorageError, message),
    }
}

/// Offset metadata longer than the limit.
pub fn offset_metadata_too_large(len: usize, max: usize) -> Refusal {
    Refusal::new(
        ErrorCode::OffsetMetadataTooLarge,
        format!("offset metadata of {len} bytes is longer than the {max} allowed"),
    )
}

/// A transactional offset commit of the partition is pending (FetchOffsets with
/// `require_stable`).
pub fn unstable_offset_commit(group: &str, topic: &str, partition: u32) -> Refusal {
    Refusal::new(
        ErrorCode::UnstableOffsetCommit,
        format!(
            "group {group:?} has a transactional commit of {topic}/{partition} pending (its transaction has not ended); retry shortly"
        ),
    )
}

/// A negative committed offset.
pub fn negative_offset(offset: i64) -> Refusal {
    Refusal::new(ErrorCode::InvalidRequest, format!("offset {offset} is negative; commit the next offset to read"))
}

/// A produce, fetch or list-offsets request names an internal topic (its partitions hold a
/// coordinator's state, written by the cluster, and have no records).
pub fn internal_topic(topic: &str, kind: &str) -> Refusal {
    Refusal::new(
        ErrorCode::InvalidTopic,
        format!("{topic} is an internal topic ({kind} state, written by the cluster): it cannot be produced to or read as records"),
    )
}

/// A produce request names a partition without a record batch.
pub fn missing_batch(partition: u32) -> Refusal {
    Refusal::new(ErrorCode::InvalidRequest, format!("partition {partition} has no record batch"))
}

/// A group with neither members nor committed offsets.
pub fn group_not_found(group_id: &str) -> Refusal {
    Refusal::new(ErrorCode::GroupIdNotFound, format!("group {group_id:?} has no members and no committed offsets"))
}

/// A request names the same partition twice.
pub fn duplicate_partition(topic: &str, partition: u32) -> Refusal {
    Refusal::new(
        ErrorCode::InvalidRequest,
        format!("topic {topic:?} partition {partition} appears twice in one request; the second entry was ignored"),
    )
}

/// The produce request's acks value is not one Rill knows.
pub fn invalid_acks(raw: i32) -> Refusal {
    Refusal::new(
        ErrorCode::InvalidRequiredAcks,
        format!("acks value {raw} is not one of ALL (0), LEADER (1), NONE (2)"),
    )
}

/// This node is assigned a replica of the partition but has not started it yet.
pub fn replica_starting(topic: &str, partition: u32, node: u64) -> Refusal {
    Refusal::new(
        ErrorCode::LeaderNotAvailable,
        format!("the replica of {topic}/{partition} on node {node} is still starting; retry shortly"),
    )
}

/// This node's storage failed: it leads and acknowledges nothing until it has restarted from
/// what is durable (see `crate::recovery`). Answered `NOT_LEADER_OR_FOLLOWER` — which is what
/// the node now is, refused before anything was done — so every client retries on the new
/// leader at once, non-idempotent writes included (`STORAGE_ERROR` is also what a write that
/// failed midway gets, whose outcome is unknown). The message says why.
/// `leader` is the partition's leader elsewhere with its client address, when known.
pub fn storage_failed(
    topic: &str,
    partition: u32,
    node: u64,
    reason: &str,
    leader: Option<(NodeId, Option<String>)>,
) -> Refusal {
    let mut e = Refusal::new(
        ErrorCode::NotLeaderOrFollower,
        format!(
            "node {node}'s storage failed ({reason}): it serves no replica of {topic}/{partition} until it has restarted \
             from its durable state; nothing was appended here; refresh metadata and retry on the new leader"
        ),
    );
    e.leader = leader.map(|(id, addr)| LeaderHint { node_id: id, address: addr.unwrap_or_default() });
    e
}

/// This node holds no replica of the partition.
pub fn not_hosted(topic: &str, partition: u32, node: u64, replicas: &[u64]) -> Refusal {
    Refusal::new(
        ErrorCode::NotLeaderOrFollower,
        format!(
            "node {node} does not host {topic}/{partition} (its replicas are on nodes {replicas:?}); refresh metadata"
        ),
    )
}

/// The metadata has no registered nodes yet (the cluster is still forming).
pub fn metadata_not_ready() -> Refusal {
    Refusal::new(
        ErrorCode::LeaderNotAvailable,
        "the cluster metadata is not ready yet (no nodes registered); is a majority of nodes up?",
    )
}

/// The metadata group answered a command with a result of the wrong kind.
pub fn unexpected_meta_answer(answer: &impl std::fmt::Debug) -> Refusal {
    Refusal::new(ErrorCode::UnknownServerError, format!("unexpected metadata answer {answer:?}"))
}

/// The topic was deleted while a change to it was being applied.
pub fn topic_vanished(topic: &str, during: &str) -> Refusal {
    Refusal::new(ErrorCode::UnknownServerError, format!("topic {topic:?} vanished while {during}"))
}

/// A whole request is malformed (a field no per-partition answer can carry).
pub fn invalid_request_status(message: impl Into<String>) -> tonic::Status {
    tonic::Status::invalid_argument(message.into())
}

/// A produced batch names a producer id the cluster never issued.
pub fn unissued_producer_id(producer_id: i64) -> Refusal {
    Refusal::new(
        ErrorCode::UnknownProducerId,
        format!("producer id {producer_id} was never issued by this cluster; get one with InitProducerId"),
    )
}

/// A request names more entries than one request may (see `service::limits`).
pub fn too_many_entries_status(rpc: &str, what: &str, count: usize, max: usize) -> tonic::Status {
    tonic::Status::invalid_argument(format!("{rpc} names {count} {what}; one request may name at most {max}: split it"))
}

/// An internal RPC named a Raft group this node does not host (the caller backs off).
pub fn group_not_hosted_status(group: u64, node: u64) -> tonic::Status {
    tonic::Status::not_found(format!("group {group} is not hosted on node {node}"))
}

/// A resource the caller may not use for `what` (its type's `*_AUTHORIZATION_FAILED` code,
/// Kafka's numbers: `code` is the one of the resource's type).
pub fn not_authorized(code: ErrorCode, what: String) -> Refusal {
    Refusal::new(code, what)
}

/// An internal request that names a node other than the one whose certificate sent it.
pub fn impersonation_status(e: &rill_tls::Impersonation) -> tonic::Status {
    tonic::Status::permission_denied(e.to_string())
}

/// An internal request from a certified node that is not one of the cluster's nodes.
pub fn not_a_member_status(node: u64, rpc: &str) -> tonic::Status {
    tonic::Status::permission_denied(format!("{rpc} from node {node}, which is not a node of this cluster"))
}

/// What a node whose storage failed answers its pings with (it no longer counts as alive).
const STORAGE_FAILED_PREFIX: &str = "storage failed: ";

/// A node whose storage failed answers its pings so (it no longer counts as alive).
pub fn storage_failed_status(node: u64, reason: &str) -> tonic::Status {
    tonic::Status::unavailable(format!("node {node}'s {STORAGE_FAILED_PREFIX}{reason}"))
}

/// True for [`storage_failed_status`]'s answer.
pub fn is_storage_failed_status(status: &tonic::Status) -> bool {
    status.code() == tonic::Code::Unavailable && status.message().contains(STORAGE_FAILED_PREFIX)
}

/// An internal RPC reached a node that is stopping.
pub fn shutting_down_status() -> tonic::Status {
    tonic::Status::unavailable("node is shutting down")
}

/// An internal RPC cannot be answered now; the caller retries (`problem` says why).
pub fn retry_later_status(problem: impl Into<String>) -> tonic::Status {
    tonic::Status::unavailable(problem.into())
}

/// An internal RPC failed in a way the caller cannot fix by retrying.
pub fn internal_status(problem: impl Into<String>) -> tonic::Status {
    tonic::Status::internal(problem.into())
}

/// The Kafka error code that means what `code` means, for the Kafka-protocol listener.
///
/// Codes below 1000 are Kafka's own numbers and map to themselves. Rill's own codes (1000 and
/// up) have no Kafka number of their own; each maps to the Kafka code whose client behaviour
/// fits: a stopping node is "not the leader" (Kafka clients refresh metadata and retry
/// elsewhere), an unexpected failure is Kafka's `UNKNOWN_SERVER_ERROR` (-1), and a partition
/// that tracks too many producers is `NOT_ENOUGH_REPLICAS`: nothing was written and the write
/// may succeed later, which is what that code tells librdkafka and the Java client (they retry
/// it). KIP-936's `THROTTLING_QUOTA_EXCEEDED` (89) would say the same to a person, but
/// librdkafka's produce path treats 89 as permanent and drops the records.
pub fn kafka_code(code: ErrorCode) -> i16 {
    match code {
        ErrorCode::NodeShuttingDown => ErrorCode::NotLeaderOrFollower as i16,
        ErrorCode::UnknownServerError => KAFKA_UNKNOWN_SERVER_ERROR,
        ErrorCode::TooManyProducers => ErrorCode::NotEnoughReplicas as i16,
        other => other as i16,
    }
}

/// Kafka's `UNKNOWN_SERVER_ERROR`.
pub const KAFKA_UNKNOWN_SERVER_ERROR: i16 = -1;

/// No replica of `topic`/`partition` reports leading it: an election is in progress, or the
/// replicas in `unreachable` (of `replicas`) did not answer.
pub fn no_leader_heard(
    topic: &str,
    partition: u32,
    unreachable: &std::collections::BTreeSet<NodeId>,
    replicas: usize,
) -> Refusal {
    let message = if unreachable.is_empty() {
        format!("no leader for {topic}/{partition} yet: an election is in progress")
    } else {
        format!(
            "no leader for {topic}/{partition}: {} of {replicas} replicas unreachable (nodes {unreachable:?})",
            unreachable.len()
        )
    };
    Refusal::new(ErrorCode::LeaderNotAvailable, message)
}

/// The topic does not exist.
pub fn unknown_topic(topic: &str) -> Refusal {
    Refusal::new(
        ErrorCode::UnknownTopicOrPartition,
        format!("unknown topic {topic:?}; create it with `rill topic create {topic}`"),
    )
}

/// The request names a topic by an id alone, and no topic has it (deleted, or never made).
pub fn no_topic_with_id(topic_id: &[u8]) -> Refusal {
    let id = uuid::Uuid::from_slice(topic_id).map_or_else(|_| format!("{topic_id:02x?}"), |id| id.to_string());
    Refusal::new(ErrorCode::UnknownTopicId, format!("no topic has the id {id}: it was deleted; refresh metadata"))
}

/// The request names `topic` by an id it no longer has (deleted, perhaps re-created).
pub fn unknown_topic_id(topic: &str) -> Refusal {
    Refusal::new(
        ErrorCode::UnknownTopicId,
        format!("topic {topic:?} does not have the id this request names: it was deleted (and perhaps re-created); refresh metadata"),
    )
}

/// The partition number is out of range.
pub fn unknown_partition(topic: &str, partition: u32, count: usize) -> Refusal {
    Refusal::new(
        ErrorCode::UnknownTopicOrPartition,
        format!(
            "partition {partition} does not exist: topic {topic:?} has {count} partition(s), numbered 0 to {}",
            count.saturating_sub(1)
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn not_leader_carries_the_hint() {
        let e = partition(&PartitionError::NotLeader { node: 1, leader: Some(2) }, |id| Some(format!("h:{id}")));
        assert_eq!(e.code, ErrorCode::NotLeaderOrFollower);
        assert_eq!(e.leader, Some(LeaderHint { node_id: 2, address: "h:2".into() }));
        assert!(e.message.contains("node 2 at h:2"));
    }

    #[test]
    fn codes_keep_kafka_numbers() {
        assert_eq!(ErrorCode::OffsetOutOfRange as i32, 1);
        assert_eq!(ErrorCode::NotLeaderOrFollower as i32, 6);
        assert_eq!(ErrorCode::RequestTimedOut as i32, 7);
        assert_eq!(ErrorCode::MessageTooLarge as i32, 10);
        assert_eq!(ErrorCode::NotEnoughReplicas as i32, 19);
        assert_eq!(ErrorCode::NotEnoughReplicasAfterAppend as i32, 20);
        assert_eq!(ErrorCode::OutOfOrderSequenceNumber as i32, 45);
        assert_eq!(ErrorCode::DuplicateSequenceNumber as i32, 46);
        assert_eq!(ErrorCode::InvalidProducerEpoch as i32, 47);
        assert_eq!(ErrorCode::InvalidTxnState as i32, 48);
        assert_eq!(ErrorCode::InvalidProducerIdMapping as i32, 49);
        assert_eq!(ErrorCode::ConcurrentTransactions as i32, 51);
        assert_eq!(ErrorCode::TransactionCoordinatorFenced as i32, 52);
        assert_eq!(ErrorCode::ProducerFenced as i32, 90);
        assert_eq!(ErrorCode::TransactionalIdNotFound as i32, 105);
        assert_eq!(ErrorCode::UnknownProducerId as i32, 59);
        assert_eq!(ErrorCode::InvalidRecord as i32, 87);
        assert_eq!(ErrorCode::UnknownTopicId as i32, 100);
        let damaged = BatchError::Checksum { expected: 1, actual: 2 };
        assert_eq!(partition(&PartitionError::InvalidBatch(damaged), |_| None).code, ErrorCode::CorruptMessage);
        assert_eq!(
            partition(&PartitionError::InvalidBatch(BatchError::Empty), |_| None).code,
            ErrorCode::InvalidRecord
        );
        let bomb = BatchError::TooLargeDecompressed { limit: 1 };
        assert_eq!(partition(&PartitionError::InvalidBatch(bomb), |_| None).code, ErrorCode::MessageTooLarge);
    }

    #[test]
    fn every_code_has_a_kafka_equivalent_in_kafkas_range() {
        let codes: Vec<ErrorCode> = (0..2000).filter_map(|n| ErrorCode::try_from(n).ok()).collect();
        assert!(codes.len() > 20, "the code list was read: {codes:?}");
        for code in codes {
            let k = kafka_code(code);
            if (code as i32) < 1000 {
                assert_eq!(i32::from(k), code as i32, "{code:?} keeps Kafka's number");
            } else {
                assert!((-1..1000).contains(&k), "{code:?} maps to a Kafka code, got {k}");
                assert_ne!(i32::from(k), code as i32);
            }
        }
    }

    #[test]
    fn a_membership_change_is_not_a_storage_failure() {
        let e = partition(&PartitionError::Reconfiguring("changing".into()), |_| None);
        assert_eq!(e.code, ErrorCode::LeaderNotAvailable);
    }
}
