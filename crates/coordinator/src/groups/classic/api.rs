//! What goes into the classic group engine and what comes out: the four requests (Kafka's
//! JoinGroup, SyncGroup, Heartbeat, LeaveGroup as the coordinator sees them), their answers, and
//! the effects the caller carries out.
//!
//! JoinGroup and SyncGroup may be *parked* (answered later, when a join phase completes or the
//! group's assignment is stored), so they carry a caller-chosen [`Handle`] and are answered by an
//! [`Effect::Respond`]. Heartbeat and LeaveGroup are answered at once.

use bytes::Bytes;
use rill_proto::coordinator as pb;

use super::state::{ClassicGroups, Protocol};
use crate::error::Result;
use crate::groups::group::ConsumerGroups;

/// The caller's name for a JoinGroup or SyncGroup it waits on: every handle given to the engine
/// is answered exactly once by an [`Effect::Respond`] (or by [`super::ClassicEngine::resign`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Handle(pub u64);

/// The engine's name for a record it asked to persist; reported back through
/// [`super::ClassicEngine::persisted`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PersistId(pub u64);

/// The applied replicated state the engine decides against (the caught-up leader's).
#[derive(Debug, Clone, Copy)]
pub struct Replicated<'a> {
    /// The classic groups' records.
    pub classic: &'a ClassicGroups,
    /// The KIP-848 consumer groups: a group id used by one protocol is refused to the other.
    pub consumer: &'a ConsumerGroups,
}

/// A JoinGroup request.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JoinGroup {
    /// The group.
    pub group_id: String,
    /// The member's id; empty for a member joining for the first time.
    pub member_id: String,
    /// A static member's `group.instance.id`.
    pub instance_id: Option<String>,
    /// The protocol type (`consumer`, `connect`, ...); every member of a group has the same.
    pub protocol_type: String,
    /// The protocols it supports, most preferred first (a repeated name counts once, where it
    /// first appears).
    pub protocols: Vec<Protocol>,
    /// How long it may go without a heartbeat.
    pub session_timeout_ms: u32,
    /// How long a join or sync phase waits for it (JoinGroup v0 has none: send the session
    /// timeout, as Kafka does).
    pub rebalance_timeout_ms: u32,
    /// The client's `client.id`.
    pub client_id: String,
    /// Where the client connected from.
    pub client_host: String,
    /// JoinGroup v0–v3: a new dynamic member joins at once instead of first being given its
    /// member id with `MEMBER_ID_REQUIRED` (KIP-394, v4 and later).
    pub legacy_member_id: bool,
}

/// One member as the leader's JoinGroup answer lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JoinedMember {
    /// Its id.
    pub member_id: String,
    /// Its static instance id.
    pub instance_id: Option<String>,
    /// Its metadata for the selected protocol.
    pub metadata: Bytes,
}

/// The answer to a JoinGroup.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JoinAnswer {
    /// The member's id.
    pub member_id: String,
    /// The generation it joined.
    pub generation: i32,
    /// The group's protocol type.
    pub protocol_type: String,
    /// The selected protocol.
    pub protocol_name: String,
    /// The leader's member id.
    pub leader: String,
    /// True for a static leader that rejoined without a rebalance: it must not compute a new
    /// assignment (the group keeps the current one) but sync for its own (JoinGroup v9).
    pub skip_assignment: bool,
    /// Every member with its metadata, for the leader to compute the assignment; empty for the
    /// other members.
    pub members: Vec<JoinedMember>,
}

/// A SyncGroup request.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SyncGroup {
    /// The group.
    pub group_id: String,
    /// The member's id.
    pub member_id: String,
    /// A static member's instance id.
    pub instance_id: Option<String>,
    /// The generation it joined.
    pub generation: i32,
    /// The protocol type it expects (SyncGroup v5; `None`: not checked).
    pub protocol_type: Option<String>,
    /// The protocol it expects (SyncGroup v5; `None`: not checked).
    pub protocol_name: Option<String>,
    /// The leader's assignment, by member id (empty from the other members).
    pub assignments: Vec<(String, Bytes)>,
}

/// The answer to a SyncGroup.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SyncAnswer {
    /// The group's protocol type.
    pub protocol_type: String,
    /// The selected protocol.
    pub protocol_name: String,
    /// The member's assignment (empty when the leader gave it nothing).
    pub assignment: Bytes,
}

/// A Heartbeat request.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Heartbeat {
    /// The group.
    pub group_id: String,
    /// The member's id.
    pub member_id: String,
    /// A static member's instance id.
    pub instance_id: Option<String>,
    /// The generation it is in.
    pub generation: i32,
}

/// One member a LeaveGroup removes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Leaving {
    /// Its id; empty to name a static member by its instance id (an administrator's removal).
    pub member_id: String,
    /// Its static instance id.
    pub instance_id: Option<String>,
}

/// A LeaveGroup request (v3 and later: a batch).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LeaveGroup {
    /// The group.
    pub group_id: String,
    /// The members leaving.
    pub members: Vec<Leaving>,
}

/// What a LeaveGroup did for one member.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Left {
    /// The member as named in the request.
    pub member: Leaving,
    /// Whether it was removed.
    pub result: Result<()>,
}

/// The answer to a LeaveGroup, and what removing the members set off.
#[derive(Debug, Clone)]
pub struct LeaveOutcome {
    /// One result per member of the request, in its order.
    pub members: Vec<Left>,
    /// Parked requests answered and records to persist because of the removals.
    pub effects: Vec<Effect>,
}

/// The answer to a parked request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// To a JoinGroup. `MEMBER_ID_REQUIRED` is an error carrying the id to join with.
    Join(Result<JoinAnswer>),
    /// To a SyncGroup.
    Sync(Result<SyncAnswer>),
}

/// A classic group record to propose; the caller reports its outcome with
/// [`super::ClassicEngine::persisted`] (see `crate::offsets::membership::persist_classic`).
#[derive(Debug, Clone, PartialEq)]
pub struct Persist {
    /// The engine's name for it.
    pub id: PersistId,
    /// The group it writes.
    pub group_id: String,
    /// The command: the whole group, compare-and-set on its version.
    pub record: pb::ClassicGroupRecord,
}

/// What the caller does after an engine call, in order.
#[derive(Debug, Clone, PartialEq)]
pub enum Effect {
    /// Answer the request the caller named `Handle`.
    Respond(Handle, Answer),
    /// Propose a record, then report the outcome.
    Persist(Persist),
}
