//! The openraft type configuration shared by every group.

use bytes::Bytes;

/// A node id. Ids start at 1; 0 is never a node.
pub type NodeId = u64;

/// A Raft group id. Group 0 is the cluster metadata; partitions get ids from the metadata.
pub type GroupId = u64;

/// The payload of a normal Raft entry: opaque bytes for the group's state machine, plus how many
/// dense *positions* the entry occupies (for a partition: its record count).
///
/// `proposal` is a leader-local tag so the proposer can learn when its entry became durable on
/// the leader; it is not stored, so replicas and restarted nodes see 0.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Payload {
    /// Positions this entry occupies in the group's position space.
    pub units: u32,
    /// The state machine command.
    pub body: Bytes,
    /// Leader-local proposal tag (0 = none). Not persisted or replicated.
    pub proposal: u64,
}

impl std::fmt::Display for Payload {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "payload(units={}, {} bytes)", self.units, self.body.len())
    }
}

/// What applying an entry returned: opaque bytes for the proposer.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Response(pub Bytes);

openraft::declare_raft_types!(
    /// Rill's Raft types: u64 node ids, gRPC addresses as node info, [`Payload`] entries.
    pub TypeConfig:
        D = Payload,
        R = Response,
        NodeId = NodeId,
        Node = openraft::BasicNode,
        Entry = openraft::Entry<TypeConfig>,
        SnapshotData = crate::transfer::SnapshotStream,
        AsyncRuntime = crate::runtime::RtRuntime,
        Responder = openraft::impls::OneshotResponder<TypeConfig>,
);

/// A running group.
pub type Raft = openraft::Raft<TypeConfig>;
/// A log id.
pub type LogId = openraft::LogId<NodeId>;
/// A vote.
pub type Vote = openraft::Vote<NodeId>;
/// An entry.
pub type Entry = openraft::Entry<TypeConfig>;
/// Membership.
pub type Membership = openraft::Membership<NodeId, openraft::BasicNode>;
/// Stored membership.
pub type StoredMembership = openraft::StoredMembership<NodeId, openraft::BasicNode>;
/// Snapshot metadata.
pub type SnapshotMeta = openraft::SnapshotMeta<NodeId, openraft::BasicNode>;
/// A storage error as openraft wants it.
pub type StorageError = openraft::StorageError<NodeId>;

/// Builders shared by this crate's unit tests.
#[cfg(test)]
pub(crate) mod test_entries {
    use super::*;

    /// A normal entry of term 1 at `index` whose body is `body_len` bytes, one position wide.
    pub(crate) fn normal(index: u64, body_len: usize) -> Entry {
        let payload = Payload { units: 1, body: Bytes::from(vec![7u8; body_len]), proposal: 0 };
        Entry {
            log_id: openraft::LogId::new(openraft::CommittedLeaderId::new(1, 1), index),
            payload: openraft::EntryPayload::Normal(payload),
        }
    }
}
