//! Consumer groups, kept by the group's coordinator: the leader of the `__consumer_offsets`
//! partition the group id hashes to, beside the group's committed offsets. Two protocols, one per
//! group id: server-side assignment (KIP-848, this module's top level) and Kafka's classic
//! JoinGroup / SyncGroup protocol ([`classic`]).
//!
//! ```text
//!  heartbeat ─► read the applied group ─► heartbeat::heartbeat (pure: validate, epochs, target,
//!              (caught-up leader)          reconcile) ─► change? ─► propose (compare-and-set on
//!                                                                    the group's version)
//!                                                                 ─► applied: answer
//!                                                                 ─► conflict: decide again
//! ```
//!
//! This module decides; proposing its decisions to the group's `__consumer_offsets` partition
//! is `crate::offsets::membership`'s (the partition's machine holds the groups' records).
//!
//! * [`group`]: the replicated state — group epoch, target assignment and its epoch, members with
//!   their epochs and current assignments — and how a change applies.
//! * [`assignor`]: the server-side assignors (`uniform`, `range`), run on the leader only.
//! * [`pattern`]: subscriptions by regular expression, matched against whole topic names.
//! * [`reconcile`]: how a member's current assignment moves toward its target without two
//!   members ever owning one partition.
//! * [`heartbeat`]: the coordinator's decisions for a heartbeat (join, heartbeat, leave) and for
//!   an expired session or rebalance timer.
//! * [`sessions`]: the leader's session and rebalance timers (soft state, never replicated).
//! * [`held`] and [`turns`]: heartbeats held as long polls — which changes wake which held
//!   member, and one writing decision at a time per group.
//! * [`classic`]: classic groups (JoinGroup / SyncGroup / Heartbeat / LeaveGroup): their
//!   replicated record and the leader's sans-IO engine for join and sync phases.
//!
//! **Only changes are replicated.** A heartbeat that changes nothing is answered from the
//! applied state and never written; session timers are the leader's soft state (a new leader
//! re-arms them, starting every member's session afresh). The target assignment is computed on
//! the leader and its result replicated, never recomputed in `apply`.

pub mod assignor;
pub mod classic;
pub mod group;
pub mod heartbeat;
pub mod held;
pub mod pattern;
pub mod reconcile;
pub mod sessions;
pub mod turns;

pub use assignor::{Assignor, TopicPartitions};
pub use group::{ConsumerGroup, GroupState, Member, MemberState, RebalanceMode, SubscribedTopic};
pub use heartbeat::{Decision, HeartbeatAnswer, HeartbeatRequest, Timeouts, TopicLookup, TopicSource};
pub use pattern::TopicPattern;
pub use turns::GroupTurns;

use crate::error::{CoordinatorError, Result};

/// Longest group id accepted (bytes): ids are keys in the coordinator's state and its snapshot.
pub const MAX_GROUP_ID_BYTES: usize = 255;

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
