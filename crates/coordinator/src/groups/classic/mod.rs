//! Classic consumer groups: Kafka's JoinGroup / SyncGroup / Heartbeat / LeaveGroup protocol, in
//! which the group's leader (a client) computes the assignment and the coordinator hands it out.
//! Kept by the group's coordinator — the leader of the `__consumer_offsets` partition the group
//! id hashes to — beside the group's offsets and the KIP-848 groups.
//!
//! ```text
//!  JoinGroup / SyncGroup ─► ClassicEngine (the leader's memory: states, parked requests, timers)
//!  Heartbeat / LeaveGroup        │ decides against the applied records (Replicated)
//!  tick (next_deadline)          ▼
//!                             effects ─► Respond(handle, answer) ─► the waiting request
//!                                     └► Persist(record) ─► propose (compare-and-set on the
//!                                           group's version) ─► applied / failed ─► persisted()
//! ```
//!
//! * [`state`]: the replicated record of a group — what Kafka writes of it — and how it applies.
//! * [`live`]: one group in the leader's memory: state, members, who leads, which protocol.
//! * [`engine`]: the leader's decisions for requests, persists and deadlines.
//! * [`api`]: the engine's requests, answers and effects.
//! * [`timers`]: the engine's queue of deadlines.
//! * [`config`]: the settings, with Kafka's defaults.
//!
//! **Driving it.** The server's group coordinator shard drives it (`rill_server`'s
//! `coordinators::classic`; the unit tests in `tests.rs` drive it the same way): one
//! [`ClassicEngine`] per `__consumer_offsets` partition the node leads, built with
//! [`ClassicEngine::new`] from the caught-up leader's applied state and dropped (after
//! [`ClassicEngine::resign`]) when it stops leading. Each request gets a fresh [`Handle`]; the
//! engine is called under its lock with the applied state ([`crate::OffsetsMachine::replicated`])
//! and the clock, and the effects are carried out in order: a `Respond` answers the request
//! waiting on that handle; a `Persist` is proposed with `crate::offsets::membership::persist_classic` and its outcome
//! reported with
//! [`ClassicEngine::persisted`] (whose effects are carried out the same way).
//! [`ClassicEngine::tick`] is called when [`ClassicEngine::next_deadline`] (asked after every
//! call) comes. Offset commits of classic members are checked with
//! [`ClassicEngine::check_commit`] and then committed as [`crate::offsets::Committer::Classic`].
//!
//! **Bounds.** The engine's memory follows the groups, members and member ids handed out, not
//! the request rate: the deadline queue holds at most one entry per deadline ([`timers`]), member
//! ids handed out count against the group's size limit, and requests are refused
//! (`INVALID_REQUEST`) past the limits on metadata, assignments and the stored record's size
//! ([`engine::MAX_GROUP_RECORD_BYTES`] and the constants beside it).
//!
//! **Only what Kafka writes is replicated**: a generation's assignments once its leader syncs, a
//! group becoming empty, a static member's id replaced. Join phases, parked requests and timers
//! are the leader's soft state; a new leader finds every group with members `Stable` at its stored
//! generation, gives every member a full session, and clients whose join or sync was in flight
//! retry against it, as with Kafka.

pub mod api;
pub mod config;
pub mod engine;
pub mod live;
pub mod state;
pub mod timers;

#[cfg(test)]
use crate::offsets::membership::classic_applied as applied;
pub use api::{
    Answer, Effect, Handle, Heartbeat, JoinAnswer, JoinGroup, JoinedMember, LeaveGroup, LeaveOutcome, Leaving, Left,
    Persist, PersistId, Replicated, SyncAnswer, SyncGroup,
};
pub use config::ClassicConfig;
pub use engine::{persist_failure, ClassicDescription, ClassicEngine, DescribedMember, MemberIds};
pub use live::ClassicState;
pub use state::{ClassicGroup, ClassicGroups, ClassicMember, Protocol};

/// A member id as Kafka makes them: `prefix-UUID` (the prefix is the member's instance id, or
/// its client id), random through `rill_rt`.
pub fn random_member_id(prefix: &str) -> String {
    let (a, b) = (rill_rt::random_u64(), rill_rt::random_u64());
    format!(
        "{prefix}-{:08x}-{:04x}-{:04x}-{:04x}-{:012x}",
        a >> 32,
        (a >> 16) & 0xffff,
        a & 0xffff,
        b >> 48,
        b & 0xffff_ffff_ffff
    )
}

#[cfg(test)]
mod tests;
