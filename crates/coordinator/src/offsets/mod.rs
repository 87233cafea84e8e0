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
//! * [`membership`]: the groups' membership decided on the leader (`crate::groups`) and
//!   proposed here: KIP-848 heartbeats (held as long polls), expired members removed, classic
//!   groups' records stored.
//! * [`txn`]: offsets committed inside transactions (KIP-447) — pending in the group's partition
//!   until the transaction's marker commits or drops them.
//!
//! ```text
//!  groups (pure decisions: heartbeats, assignors, classic engine) ◄── offsets: state, machine,
//!                                                                     requests, membership, txn
//! ```
//! The groups' own module decides and knows nothing of this partition; this module holds their
//! records and proposes their decisions.

pub mod machine;
pub mod membership;
pub mod requests;
pub mod state;
pub mod txn;

pub use machine::{ChangeHook, OffsetsMachine};
pub use requests::{commit, delete_group, delete_offsets, expire, read};
pub use state::{
    check_commit, check_delete_group, check_delete_offsets, CommittedOffset, Committer, OffsetCommit, OffsetsState,
};

#[cfg(test)]
pub(crate) use machine::APPLIED;
pub(crate) use machine::REFUSED;
pub(crate) use requests::prepare_commit;
pub(crate) use state::{committed_from, committed_to};

pub use crate::groups::{validate_group_id, MAX_GROUP_ID_BYTES};

/// Longest metadata stored with an offset (Kafka's `offset.metadata.max.bytes`).
pub const MAX_OFFSET_METADATA_BYTES: usize = 4096;
/// Most offsets one commit may carry: a commit is one Raft entry.
pub const MAX_OFFSETS_PER_COMMIT: usize = 10_000;

#[cfg(test)]
mod tests;
