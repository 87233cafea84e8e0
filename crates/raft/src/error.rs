//! Errors of the multi-raft layer.

use crate::types::{GroupId, NodeId};

/// A multi-raft failure.
#[derive(Debug, Clone, thiserror::Error)]
pub enum Error {
    /// The group is not running on this node (not assigned here, or not started yet).
    #[error("raft group {0} is not hosted on this node")]
    UnknownGroup(GroupId),
    /// This node does not lead the group.
    #[error("node is not the leader of group {group}")]
    NotLeader { group: GroupId, leader: Option<NodeId>, leader_addr: Option<String> },
    /// The group is shutting down or has failed fatally.
    #[error("raft group {group} stopped: {reason}")]
    Stopped { group: GroupId, reason: String },
    /// Storage failed underneath the group.
    #[error(transparent)]
    Storage(#[from] rill_storage::Error),
    /// Stored bytes could not be decoded.
    #[error("corrupt raft data in group {group}: {reason}")]
    Corrupt { group: GroupId, reason: String },
    /// Any other openraft failure.
    #[error("raft error in group {group}: {reason}")]
    Raft { group: GroupId, reason: String },
}

/// Result alias.
pub type Result<T, E = Error> = std::result::Result<T, E>;
