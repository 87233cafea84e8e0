//! [`SnapshotIntake`]: the bounds an incoming snapshot must keep before openraft sees a chunk.
//!
//! openraft writes each `InstallSnapshot` chunk at the offset the chunk states into the
//! snapshot being received (an in-memory buffer: see `TypeConfig::SnapshotData`). Trusting that
//! offset lets one message make a node zero-fill memory up to it. So every chunk is checked here
//! first:
//!
//! * it comes from the group's leader: its vote is a committed (leader's) vote naming a node;
//! * its data is at most [`MAX_SNAPSHOT_CHUNK_BYTES`];
//! * chunks are contiguous: a snapshot starts at offset 0, and each further chunk of the same
//!   snapshot (same id, same vote) starts exactly where the previous one ended;
//! * the running total stays within [`MAX_SNAPSHOT_BYTES`].
//!
//! A chunk that breaks a rule is refused and the transfer is forgotten; the leader starts it
//! again from offset 0 (openraft retries a failed snapshot from the start). At most one
//! transfer per group is tracked, so the bookkeeping is bounded by the groups a node hosts.

use std::collections::HashMap;
use std::sync::Mutex;

use openraft::Vote;

use crate::types::{GroupId, NodeId};

/// The largest chunk accepted. Senders use [`SNAPSHOT_CHUNK_BYTES`]; the margin lets nodes
/// with a different setting talk during an upgrade.
pub const MAX_SNAPSHOT_CHUNK_BYTES: usize = 16 * 1024 * 1024;
/// The chunk size this node sends snapshots in (openraft's `snapshot_max_chunk_size`).
pub const SNAPSHOT_CHUNK_BYTES: u64 = 3 * 1024 * 1024;
/// How long a sender waits for one chunk's answer (openraft's `install_snapshot_timeout`).
pub const SNAPSHOT_CHUNK_TIMEOUT_MS: u64 = 10_000;
/// The largest snapshot accepted. A record partition's snapshot carries its retained records
/// (streamed to storage as they arrive, see [`crate::transfer`]; the stream declares its size
/// in its first chunk and the receiver refuses anything past it), so this bounds disk, not
/// memory.
pub const MAX_SNAPSHOT_BYTES: u64 = 256 << 30;

/// What one chunk claims, as the intake needs it.
#[derive(Debug, Clone, Copy)]
pub struct Chunk<'a> {
    /// The sender's vote.
    pub vote: &'a Vote<NodeId>,
    /// The snapshot's id.
    pub snapshot_id: &'a str,
    /// Where the chunk's data goes.
    pub offset: u64,
    /// How many bytes of data it carries.
    pub len: usize,
    /// The last chunk of the snapshot.
    pub done: bool,
}

/// Why a chunk was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ChunkRefused {
    /// The vote is not a leader's.
    #[error("snapshot chunk of group {group} not sent by a leader (vote {vote})")]
    NotLeader {
        /// The group.
        group: GroupId,
        /// The vote, displayed.
        vote: String,
    },
    /// The chunk's data is too large.
    #[error("snapshot chunk of group {group} carries {len} bytes; the limit is {MAX_SNAPSHOT_CHUNK_BYTES}")]
    ChunkTooLarge {
        /// The group.
        group: GroupId,
        /// The chunk's size.
        len: usize,
    },
    /// The chunk does not continue the transfer in progress.
    #[error(
        "snapshot chunk of group {group} at offset {offset}; expected offset {expected} of the transfer in progress"
    )]
    NotContiguous {
        /// The group.
        group: GroupId,
        /// The chunk's offset.
        offset: u64,
        /// Where the next chunk must start (0: no transfer in progress).
        expected: u64,
    },
    /// The snapshot grows past the limit.
    #[error("snapshot of group {group} would exceed {MAX_SNAPSHOT_BYTES} bytes")]
    TooLarge {
        /// The group.
        group: GroupId,
    },
}

/// A transfer in progress.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Transfer {
    snapshot_id: String,
    vote: Vote<NodeId>,
    next: u64,
    /// Where the last admitted chunk began (it ended at `next`).
    last: u64,
    /// The last admitted chunk ended the transfer (kept to recognise it if it is sent again).
    done: bool,
}

/// What to do with an admitted chunk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admitted {
    /// Hand it to openraft.
    Apply,
    /// The last chunk again, already applied: a sender whose answer was lost (a timeout)
    /// sends the same chunk again, and openraft's sender keeps resending it rather than
    /// starting over, so refusing it would stall the transfer. Answer it as accepted.
    Repeated,
}

/// Per-group receive progress of incoming snapshots.
#[derive(Debug, Default)]
pub struct SnapshotIntake {
    transfers: Mutex<HashMap<GroupId, Transfer>>,
}

impl SnapshotIntake {
    /// Checks `chunk` of group `group` and records its progress; `Err` refuses it (and
    /// forgets the transfer).
    pub fn admit(&self, group: GroupId, chunk: Chunk<'_>) -> Result<Admitted, ChunkRefused> {
        let mut transfers = self.transfers.lock().unwrap_or_else(|p| p.into_inner());
        let current = transfers.get(&group);
        if current.is_some_and(|t| {
            t.snapshot_id == chunk.snapshot_id
                && t.vote == *chunk.vote
                && t.last == chunk.offset
                && t.next == chunk.offset.saturating_add(chunk.len as u64)
                && chunk.len > 0
        }) {
            return Ok(Admitted::Repeated);
        }
        let verdict = check(current, group, chunk);
        match verdict {
            Ok(next) => {
                let snapshot_id = chunk.snapshot_id.to_string();
                let done = chunk.done;
                transfers.insert(group, Transfer { snapshot_id, vote: *chunk.vote, next, last: chunk.offset, done });
            }
            Err(_) => {
                transfers.remove(&group);
            }
        }
        verdict.map(|_| Admitted::Apply)
    }

    /// Forgets group `group`'s transfer (the group stopped, or openraft refused a chunk).
    pub fn forget(&self, group: GroupId) {
        self.transfers.lock().unwrap_or_else(|p| p.into_inner()).remove(&group);
    }
}

/// The offset the chunk after `chunk` must start at, or why `chunk` is refused.
fn check(current: Option<&Transfer>, group: GroupId, chunk: Chunk<'_>) -> Result<u64, ChunkRefused> {
    if !chunk.vote.is_committed() || chunk.vote.leader_id().voted_for().is_none() {
        return Err(ChunkRefused::NotLeader { group, vote: chunk.vote.to_string() });
    }
    if chunk.len > MAX_SNAPSHOT_CHUNK_BYTES {
        return Err(ChunkRefused::ChunkTooLarge { group, len: chunk.len });
    }
    let continues = current
        .filter(|t| !t.done && t.snapshot_id == chunk.snapshot_id && t.vote == *chunk.vote && t.next == chunk.offset);
    // Offset 0 always starts a transfer (a leader that restarts one begins there).
    if chunk.offset != 0 && continues.is_none() {
        let expected = current.filter(|t| !t.done && t.snapshot_id == chunk.snapshot_id).map_or(0, |t| t.next);
        return Err(ChunkRefused::NotContiguous { group, offset: chunk.offset, expected });
    }
    let next = chunk.offset.saturating_add(chunk.len as u64);
    if next > MAX_SNAPSHOT_BYTES {
        return Err(ChunkRefused::TooLarge { group });
    }
    Ok(next)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn leader(term: u64, node: NodeId) -> Vote<NodeId> {
        Vote::new_committed(term, node)
    }

    fn chunk<'a>(vote: &'a Vote<NodeId>, id: &'a str, offset: u64, len: usize, done: bool) -> Chunk<'a> {
        Chunk { vote, snapshot_id: id, offset, len, done }
    }

    #[test]
    fn contiguous_chunks_of_one_snapshot_are_admitted() {
        let intake = SnapshotIntake::default();
        let v = leader(3, 1);
        assert_eq!(intake.admit(7, chunk(&v, "s", 0, 100, false)), Ok(Admitted::Apply));
        assert_eq!(intake.admit(7, chunk(&v, "s", 100, 50, false)), Ok(Admitted::Apply));
        assert_eq!(intake.admit(7, chunk(&v, "s", 150, 0, true)), Ok(Admitted::Apply));
        // Done: the next transfer starts from 0 again.
        assert!(matches!(
            intake.admit(7, chunk(&v, "s", 150, 1, false)),
            Err(ChunkRefused::NotContiguous { expected: 0, .. })
        ));
    }

    #[test]
    fn a_chunk_far_beyond_the_received_bytes_is_refused_and_the_transfer_forgotten() {
        let intake = SnapshotIntake::default();
        let v = leader(3, 1);
        intake.admit(7, chunk(&v, "s", 0, 100, false)).unwrap();
        assert_eq!(
            intake.admit(7, chunk(&v, "s", 1 << 40, 10, false)),
            Err(ChunkRefused::NotContiguous { group: 7, offset: 1 << 40, expected: 100 })
        );
        assert!(intake.admit(7, chunk(&v, "s", 100, 10, false)).is_err(), "the refused transfer is gone");
        assert_eq!(intake.admit(7, chunk(&v, "s", 0, 10, false)), Ok(Admitted::Apply), "a restart from 0 is fine");
    }

    #[test]
    fn the_last_chunk_sent_again_is_answered_without_being_applied_twice() {
        let intake = SnapshotIntake::default();
        let v = leader(3, 1);
        assert_eq!(intake.admit(7, chunk(&v, "s", 0, 100, false)), Ok(Admitted::Apply));
        assert_eq!(intake.admit(7, chunk(&v, "s", 0, 100, false)), Ok(Admitted::Repeated), "its answer was lost");
        assert_eq!(intake.admit(7, chunk(&v, "s", 100, 50, false)), Ok(Admitted::Apply));
        assert_eq!(intake.admit(7, chunk(&v, "s", 100, 50, false)), Ok(Admitted::Repeated));
        assert!(intake.admit(7, chunk(&v, "s", 0, 100, false)).is_ok(), "an older chunk restarts the transfer");
        assert_eq!(intake.admit(7, chunk(&v, "s", 100, 10, true)), Ok(Admitted::Apply));
        assert_eq!(intake.admit(7, chunk(&v, "s", 100, 10, true)), Ok(Admitted::Repeated), "the last one too");
        assert!(intake.admit(7, chunk(&v, "s", 110, 5, false)).is_err(), "nothing continues a finished transfer");
        let other = leader(4, 2);
        assert_eq!(intake.admit(7, chunk(&other, "s", 0, 100, false)), Ok(Admitted::Apply), "another leader's");
    }

    #[test]
    fn a_first_chunk_not_at_zero_is_refused() {
        let intake = SnapshotIntake::default();
        let v = leader(1, 2);
        assert!(matches!(intake.admit(1, chunk(&v, "s", 4096, 1, true)), Err(ChunkRefused::NotContiguous { .. })));
    }

    #[test]
    fn chunks_of_another_snapshot_or_vote_do_not_continue_a_transfer() {
        let intake = SnapshotIntake::default();
        let (v, newer) = (leader(1, 2), leader(2, 3));
        intake.admit(1, chunk(&v, "a", 0, 10, false)).unwrap();
        assert!(intake.admit(1, chunk(&v, "b", 10, 10, false)).is_err());
        intake.admit(1, chunk(&v, "a", 0, 10, false)).unwrap();
        assert!(intake.admit(1, chunk(&newer, "a", 10, 10, false)).is_err());
        // Other groups are independent.
        intake.admit(1, chunk(&v, "a", 0, 10, false)).unwrap();
        intake.admit(2, chunk(&v, "a", 0, 5, false)).unwrap();
        assert_eq!(intake.admit(1, chunk(&v, "a", 10, 1, true)), Ok(Admitted::Apply));
    }

    #[test]
    fn sizes_and_leadership_are_bounded() {
        let intake = SnapshotIntake::default();
        let v = leader(1, 2);
        assert!(matches!(
            intake.admit(1, chunk(&v, "s", 0, MAX_SNAPSHOT_CHUNK_BYTES + 1, false)),
            Err(ChunkRefused::ChunkTooLarge { .. })
        ));
        // Grow a transfer to just below the total limit, then one chunk more.
        let step = MAX_SNAPSHOT_CHUNK_BYTES as u64;
        let mut offset = 0;
        while offset + step <= MAX_SNAPSHOT_BYTES {
            intake.admit(1, chunk(&v, "s", offset, step as usize, false)).unwrap();
            offset += step;
        }
        assert_eq!(intake.admit(1, chunk(&v, "s", offset, 1, false)), Err(ChunkRefused::TooLarge { group: 1 }));
        let candidate = Vote::new(4, 2);
        assert!(matches!(intake.admit(1, chunk(&candidate, "s", 0, 1, true)), Err(ChunkRefused::NotLeader { .. })));
    }
}
