//! The one place internal errors become wire error codes.

use rill_broker::PartitionError;
use rill_meta::{MetaError, MetaErrorKind};
use rill_proto::batch::BatchError;
use rill_proto::common::{ErrorCode, LeaderHint};

use crate::node::ProposeError;

/// A per-partition wire error: code, readable message, and the leader hint when known.
#[derive(Debug, Clone, PartialEq)]
pub struct WireError {
    /// The stable code.
    pub code: ErrorCode,
    /// What went wrong and what to do.
    pub message: String,
    /// Where the leader is, for NOT_LEADER_OR_FOLLOWER.
    pub leader: Option<LeaderHint>,
}

impl WireError {
    /// An error without a leader hint.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Self { code, message: message.into(), leader: None }
    }
}

/// Maps a partition error.
pub fn partition(e: &PartitionError) -> WireError {
    let message = e.to_string();
    match e {
        PartitionError::NotLeader { leader, addr, .. } => WireError {
            code: ErrorCode::NotLeaderOrFollower,
            message,
            leader: leader.map(|id| LeaderHint { node_id: id, address: addr.clone().unwrap_or_default() }),
        },
        PartitionError::NotEnoughReplicas { .. } => WireError::new(ErrorCode::NotEnoughReplicas, message),
        PartitionError::NotEnoughReplicasAfterAppend { .. } => {
            WireError::new(ErrorCode::NotEnoughReplicasAfterAppend, message)
        }
        PartitionError::Timeout { .. } => WireError::new(ErrorCode::RequestTimedOut, message),
        PartitionError::MessageTooLarge { .. } => WireError::new(ErrorCode::MessageTooLarge, message),
        PartitionError::InvalidBatch(BatchError::UnsupportedCompression(_)) => {
            WireError::new(ErrorCode::UnsupportedCompressionType, message)
        }
        PartitionError::InvalidBatch(_) => WireError::new(ErrorCode::CorruptMessage, message),
        PartitionError::OffsetOutOfRange { .. } => WireError::new(ErrorCode::OffsetOutOfRange, message),
        PartitionError::InvalidRequest(_) => WireError::new(ErrorCode::InvalidRequest, message),
        PartitionError::Storage(_) => WireError::new(ErrorCode::StorageError, message),
        PartitionError::ShuttingDown => WireError::new(ErrorCode::NodeShuttingDown, message),
        PartitionError::CatchingUp | PartitionError::LeaderMoving { .. } => {
            WireError::new(ErrorCode::LeaderNotAvailable, message)
        }
        PartitionError::OutOfOrderSequence { .. } => WireError::new(ErrorCode::OutOfOrderSequenceNumber, message),
        PartitionError::DuplicateSequence { .. } => WireError::new(ErrorCode::DuplicateSequenceNumber, message),
        PartitionError::InvalidProducerEpoch { .. } => WireError::new(ErrorCode::InvalidProducerEpoch, message),
        PartitionError::UnknownProducerId { .. } => WireError::new(ErrorCode::UnknownProducerId, message),
        PartitionError::TooManyProducers { .. } => WireError::new(ErrorCode::TooManyProducers, message),
    }
}

/// Maps a metadata refusal.
pub fn meta(e: &MetaError) -> WireError {
    let code = match e.kind {
        MetaErrorKind::InvalidTopic => ErrorCode::InvalidTopic,
        MetaErrorKind::TopicExists => ErrorCode::TopicAlreadyExists,
        MetaErrorKind::UnknownTopic => ErrorCode::UnknownTopicOrPartition,
        MetaErrorKind::InvalidPartitions => ErrorCode::InvalidPartitions,
        MetaErrorKind::InvalidReplicationFactor => ErrorCode::InvalidReplicationFactor,
        MetaErrorKind::InvalidConfig => ErrorCode::InvalidConfig,
    };
    WireError::new(code, e.message.clone())
}

/// Maps a failed metadata proposal.
pub fn propose(e: &ProposeError) -> WireError {
    let code = match e {
        ProposeError::NoLeader(_) => ErrorCode::LeaderNotAvailable,
        ProposeError::ShuttingDown => ErrorCode::NodeShuttingDown,
        ProposeError::Internal(_) => ErrorCode::UnknownServerError,
    };
    WireError::new(code, e.to_string())
}

/// The topic does not exist.
pub fn unknown_topic(topic: &str) -> WireError {
    WireError::new(
        ErrorCode::UnknownTopicOrPartition,
        format!("unknown topic {topic:?}; create it with `rill topic create {topic}`"),
    )
}

/// The partition number is out of range.
pub fn unknown_partition(topic: &str, partition: u32, count: usize) -> WireError {
    WireError::new(
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
        let e = partition(&PartitionError::NotLeader { node: 1, leader: Some(2), addr: Some("h:2".into()) });
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
        assert_eq!(ErrorCode::UnknownProducerId as i32, 59);
        assert_eq!(partition(&PartitionError::InvalidBatch(BatchError::Empty)).code, ErrorCode::CorruptMessage);
    }
}
