//! The `consumer-offsets` kind: every consumer group's committed offsets, in the partition of
//! `__consumer_offsets` the group id hashes to, with the groups' membership records.
//!
//! A committed offset is "the next offset to read" of one partition, with free metadata, the
//! topic's id at commit time (so a topic deleted and re-created under the same name does not
//! inherit the old one's offsets) and the coordinator's clock at commit. Committing is a command
//! decided on the coordinator (validation, the time) and replicated; reading is served by the
//! caught-up coordinator from its state.
//!
//! * [`state`]: the committed offsets ([`OffsetsState`]) and the rules a commit or a deletion
//!   must pass ([`check_commit`], [`check_delete_group`], [`check_delete_offsets`]), checked on
//!   the leader before proposing and again when applying.
//! * [`machine`]: [`OffsetsMachine`], the replicated state machine — offsets, KIP-848 groups and
//!   classic groups — and the one hook through which the leader observes the groups' changes.
//! * [`requests`]: the coordinator's operations on its leader — commit, delete, expire, read —
//!   each a command proposed (or a read served) on the caught-up leader.

pub mod machine;
pub mod requests;
pub mod state;

pub use machine::{ChangeHook, OffsetsMachine};
pub use requests::{commit, delete_group, delete_offsets, expire, read};
pub use state::{
    check_commit, check_delete_group, check_delete_offsets, CommittedOffset, Committer, OffsetCommit, OffsetsState,
};

pub(crate) use machine::{APPLIED, REFUSED};
pub(crate) use requests::prepare_commit;
pub(crate) use state::committed_to;

use crate::error::{CoordinatorError, Result};

/// Longest group id accepted (bytes): ids are keys in the coordinator's state and its snapshot.
pub const MAX_GROUP_ID_BYTES: usize = 255;
/// Longest metadata stored with an offset (Kafka's `offset.metadata.max.bytes`).
pub const MAX_OFFSET_METADATA_BYTES: usize = 4096;
/// Most offsets one commit may carry: a commit is one Raft entry.
pub const MAX_OFFSETS_PER_COMMIT: usize = 10_000;

/// Checks a group id: 1–255 bytes.
pub fn validate_group_id(group: &str) -> Result<()> {
    if group.is_empty() {
        return Err(CoordinatorError::InvalidGroupId("it is empty".into()));
    }
    if group.len() > MAX_GROUP_ID_BYTES {
        return Err(CoordinatorError::InvalidGroupId(format!(
            "it is {} bytes long; at most {MAX_GROUP_ID_BYTES}",
            group.len()
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests;
