//! The leader's classic group engine: Kafka's JoinGroup / SyncGroup / Heartbeat / LeaveGroup
//! handling, sans IO. It holds every classic group of one `__consumer_offsets` partition in memory
//! ([`super::live`]), parks JoinGroups until a join phase completes and SyncGroups until the
//! generation's assignment is stored, and keeps every deadline; the caller carries out what it
//! asks ([`Effect`]) and tells it the time.
//!
//! ```text
//!  Empty ──join──► PreparingRebalance ──every member rejoined, or the deadline──► CompletingRebalance
//!    ▲              (JoinGroups parked)    (generation + 1, protocol selected,    (SyncGroups parked)
//!    │                    ▲                 parked joins answered)                      │
//!    │                    │                                          leader's SyncGroup ─► Persist
//!    │   join, leave,     │                                                             │ applied
//!    │   session or sync ─┴──────────────────────────── Stable ◄── syncs answered ◄─────┘
//!    └── the last member goes: generation + 1, Persist
//! ```
//!
//! Guarantees:
//! * **Nothing is answered from an assignment before it is stored.** Parked SyncGroups are
//!   answered only once the record carrying the generation's assignments is reported applied
//!   ([`ClassicEngine::persisted`]); a failed persist answers them with an error and rebalances.
//!   Likewise a static member replacing its predecessor without a rebalance is answered only once
//!   the replacement is stored.
//! * **Every handle is answered exactly once**, by an [`Effect::Respond`] from some later call or
//!   by [`ClassicEngine::resign`].
//! * **Time is the caller's**: every call takes `now_ms`; [`ClassicEngine::next_deadline`] says
//!   when to call [`ClassicEngine::tick`] next. Same calls, same effects.
//!
//! A new leader starts the engine from the replicated records ([`ClassicEngine::new`]): a group
//! with members is `Stable` at its stored generation and every member gets a full session, so a
//! failover never shortens anyone's session; join and sync phases in progress on the old leader
//! are lost, and their members' requests fail over to the new one like Kafka's do.

use std::collections::BTreeMap;

use bytes::Bytes;
use rill_proto::coordinator as pb;

use super::api::{
    Answer, Effect, Handle, Heartbeat, JoinAnswer, JoinGroup, LeaveGroup, LeaveOutcome, Left, Persist, PersistId,
    Replicated, SyncAnswer, SyncGroup,
};
use super::config::ClassicConfig;
use super::live::{member_bytes, protocols_bytes, ClassicState, JoinTimer, LiveGroup, RECORD_HEADER_BYTES};
use super::state::{ClassicGroup, ClassicGroups, ClassicMember, Protocol};
use super::timers::{TimerKind, Timers};
use crate::error::{CoordinatorError, Result};
use crate::groups::heartbeat::MAX_ID_BYTES;
use crate::groups::validate_group_id;

/// Most protocols one member may list: Kafka clients send one per configured assignor, a
/// handful; every member's list is stored in the group's record.
pub const MAX_PROTOCOLS_PER_MEMBER: usize = 64;
/// Longest prefix (client id or instance id) handed to the member id generator, so that with its
/// suffix (Kafka's `-` and a UUID: 37 bytes) a member id stays within [`MAX_ID_BYTES`].
pub const MAX_MEMBER_ID_PREFIX_BYTES: usize = MAX_ID_BYTES - 37;
/// Shortest rebalance timeout a member may send. A join phase waits this long for the members to
/// rejoin and a sync phase for them to sync, so a client that heartbeats every few seconds needs
/// at least about a second; 0 would make a join phase nobody rejoins re-arm at once, forever.
/// (JoinGroup v0 has no rebalance timeout: the client's session timeout is sent, at least
/// [`super::config::MIN_SESSION_TIMEOUT_MS`]; later versions send the consumer's
/// `max.poll.interval.ms`, five minutes by default.)
pub const MIN_REBALANCE_TIMEOUT_MS: u32 = 1_000;
/// Most metadata bytes one protocol of a member may carry. A Kafka consumer's is its
/// subscription (topics, owned partitions, user data, rack): kilobytes, some hundreds of
/// kilobytes for thousands of topics. Every member's metadata is stored in the group's record and
/// sent to the leader in one JoinGroup answer.
pub const MAX_PROTOCOL_METADATA_BYTES: usize = 1 << 20;
/// Most bytes one member's protocols may take together (names and metadata): room for two
/// assignors each carrying a full-size subscription (consumers list e.g. `range` and
/// `cooperative-sticky`, with the same subscription in each).
pub const MAX_MEMBER_METADATA_BYTES: usize = 2 << 20;
/// Most bytes of one member's assignment in the leader's SyncGroup. A consumer's is its
/// partitions (a few bytes each) and user data: a mebibyte holds hundreds of thousands of
/// partitions.
pub const MAX_ASSIGNMENT_BYTES: usize = 1 << 20;
/// Most bytes of a classic group's stored record: every member with its protocols and its
/// assignment, rewritten each generation as one Raft entry. Half the largest gRPC message
/// ([`rill_proto::MAX_GRPC_MESSAGE_BYTES`]), so an append carrying it always fits one message;
/// 32 times Kafka's default `max.message.bytes` of `__consumer_offsets` (1 MiB), which is what
/// bounds a Kafka group's stored metadata.
pub const MAX_GROUP_RECORD_BYTES: usize = rill_proto::MAX_GRPC_MESSAGE_BYTES / 2;
/// Most bytes of all assignments of the leader's SyncGroup together (member ids and contents):
/// half of the stored record, the other half being the members' ids and metadata.
pub const MAX_SYNC_ASSIGNMENTS_BYTES: usize = MAX_GROUP_RECORD_BYTES / 2;
/// Most bytes the members may take in the stored record besides their assignments' contents
/// (`super::live::member_bytes` summed): a JoinGroup that would pass it is refused, so that the
/// group's record with any assignments the leader may send stays within
/// [`MAX_GROUP_RECORD_BYTES`]. (With 255-byte ids a member takes about 1.1 KiB plus its metadata,
/// so even a group of `group.max.size` members has room for several KiB of metadata each.)
pub const MAX_GROUP_MEMBERS_BYTES: usize = MAX_GROUP_RECORD_BYTES - MAX_SYNC_ASSIGNMENTS_BYTES - RECORD_HEADER_BYTES;
/// How long after a failed attempt to store that a group became empty it is tried again. Until it
/// is stored the record still lists the members that left, which refuses standalone commits,
/// DeleteGroup, offsets expiry and a KIP-848 group taking the id; a failed proposal is usually a
/// timeout or a lost compare-and-set, gone a second later.
pub const EMPTY_PERSIST_RETRY_MS: u32 = 1_000;

/// Makes a member id from a prefix (the member's instance id, or its client id): Kafka's is
/// `prefix-UUID`. Injected so that tests get the same ids every run.
pub type MemberIds = Box<dyn FnMut(&str) -> String + Send>;

/// A persist the engine waits on, and what to do when it is reported.
#[derive(Debug, Clone)]
enum InFlight {
    /// The leader's assignments for `generation`: parked syncs are answered from them.
    Assignment { group_id: String, generation: i32, assignments: BTreeMap<String, Bytes> },
    /// A static member's new id (`new_id`) replacing `old` without a rebalance; `handle` is its
    /// parked JoinGroup.
    StaticRename { group_id: String, old: ClassicMember, new_id: String, handle: Handle },
    /// The group became empty.
    Empty { group_id: String },
}

impl InFlight {
    fn group_id(&self) -> &str {
        match self {
            Self::Assignment { group_id, .. } | Self::StaticRename { group_id, .. } | Self::Empty { group_id } => {
                group_id
            }
        }
    }
}

/// One engine call: its time, the state it decides against, and what it produced.
struct Call<'r> {
    now_ms: i64,
    replicated: Replicated<'r>,
    effects: Vec<Effect>,
}

impl<'r> Call<'r> {
    fn new(now_ms: i64, replicated: Replicated<'r>) -> Self {
        Self { now_ms, replicated, effects: Vec::new() }
    }

    fn join(&mut self, handle: Handle, answer: Result<JoinAnswer>) {
        self.effects.push(Effect::Respond(handle, Answer::Join(answer)));
    }

    fn sync(&mut self, handle: Handle, answer: Result<SyncAnswer>) {
        self.effects.push(Effect::Respond(handle, Answer::Sync(answer)));
    }

    fn after(&self, ms: u32) -> i64 {
        self.now_ms + i64::from(ms)
    }
}

/// One member of a group, as [`ClassicEngine::describe`] shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DescribedMember {
    /// Its id.
    pub member_id: String,
    /// Its static instance id.
    pub instance_id: Option<String>,
    /// The client's `client.id`.
    pub client_id: String,
    /// Where the client connected from.
    pub client_host: String,
    /// What it sent with the group's selected protocol (its subscription, for a consumer).
    pub metadata: Bytes,
    /// Its assignment for the generation.
    pub assignment: Bytes,
}

/// A classic group as the leader holds it now (Kafka's DescribeGroups).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClassicDescription {
    /// The group's id.
    pub group_id: String,
    /// Its state.
    pub state: ClassicState,
    /// Its generation.
    pub generation: i32,
    /// Its protocol type (empty when it never had a member).
    pub protocol_type: String,
    /// The selected protocol (empty without members, or during a join phase of a new group).
    pub protocol: String,
    /// The leader's member id (empty without members).
    pub leader: String,
    /// Its members, in the order they joined.
    pub members: Vec<DescribedMember>,
    /// Member ids handed out with `MEMBER_ID_REQUIRED` and not used yet.
    pub pending_members: usize,
}

/// The classic groups of one `__consumer_offsets` partition, on its leader.
pub struct ClassicEngine {
    config: ClassicConfig,
    groups: BTreeMap<String, LiveGroup>,
    timers: Timers,
    in_flight: BTreeMap<PersistId, InFlight>,
    next_persist: u64,
    member_ids: MemberIds,
}

impl std::fmt::Debug for ClassicEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClassicEngine")
            .field("config", &self.config)
            .field("groups", &self.groups.len())
            .field("in_flight", &self.in_flight.len())
            .finish()
    }
}

impl ClassicEngine {
    /// The engine of a new leader whose applied state holds `classic`: every group with members
    /// is `Stable` at its stored generation, each member's session starting at `now_ms` in full.
    pub fn new(config: ClassicConfig, classic: &ClassicGroups, now_ms: i64, member_ids: MemberIds) -> Self {
        let mut engine = Self {
            config,
            groups: BTreeMap::new(),
            timers: Timers::default(),
            in_flight: BTreeMap::new(),
            next_persist: 0,
            member_ids,
        };
        for record in classic.iter().filter(|r| r.has_members()) {
            let g = engine.load(now_ms, &record.group_id, Some(record));
            engine.groups.insert(record.group_id.clone(), g);
        }
        engine
    }

    /// The settings.
    pub fn config(&self) -> &ClassicConfig {
        &self.config
    }

    /// A JoinGroup. Its answer comes in an [`Effect::Respond`] for `handle`: at once (an error,
    /// `MEMBER_ID_REQUIRED`, or the current generation for a member whose protocols did not
    /// change), or from a later call when the join phase it starts or joins completes.
    pub fn join(&mut self, now_ms: i64, replicated: Replicated<'_>, handle: Handle, req: &JoinGroup) -> Vec<Effect> {
        let mut c = Call::new(now_ms, replicated);
        match self.validate_join(req, replicated) {
            Err(e) => c.join(handle, Err(e)),
            Ok(req) => self.with_group(&mut c, &req.group_id, |e, c, g| e.join_group(c, g, handle, &req)),
        }
        c.effects
    }

    /// A SyncGroup. Its answer comes in an [`Effect::Respond`] for `handle`: at once in a stable
    /// group (the member's assignment) or on an error; during `CompletingRebalance` once the
    /// leader's assignments are stored.
    pub fn sync(&mut self, now_ms: i64, replicated: Replicated<'_>, handle: Handle, req: &SyncGroup) -> Vec<Effect> {
        let mut c = Call::new(now_ms, replicated);
        match validate_sync(req) {
            Err(e) => c.sync(handle, Err(e)),
            Ok(()) => self.with_group(&mut c, &req.group_id, |e, c, g| e.sync_group(c, g, handle, req)),
        }
        c.effects
    }

    /// A Heartbeat: `Ok` in `CompletingRebalance` and `Stable`, `REBALANCE_IN_PROGRESS` while
    /// members rejoin; either way an accepted member's session starts again.
    pub fn heartbeat(&mut self, now_ms: i64, replicated: Replicated<'_>, req: &Heartbeat) -> Result<()> {
        validate_group_id(&req.group_id)?;
        let mut c = Call::new(now_ms, replicated);
        self.with_group(&mut c, &req.group_id, |e, c, g| {
            g.validate_member(&req.member_id, req.instance_id.as_deref())?;
            if req.generation != g.generation {
                return Err(illegal_generation(g, &req.member_id, req.generation));
            }
            match g.state {
                ClassicState::Empty => Err(g.unknown_member(&req.member_id)),
                ClassicState::PreparingRebalance => {
                    e.rearm_session(c, g, &req.member_id);
                    Err(rebalancing(g))
                }
                ClassicState::CompletingRebalance | ClassicState::Stable => {
                    e.rearm_session(c, g, &req.member_id);
                    Ok(())
                }
            }
        })
    }

    /// A LeaveGroup: each member named is removed (a static member may be named by its instance
    /// id alone) and a rebalance starts. A member id handed out and not used yet may leave too;
    /// as in Kafka, that alone starts no rebalance (the id was never in a generation, so nothing
    /// of the group's assignment changes) but may let a join phase that waited for it end.
    pub fn leave(&mut self, now_ms: i64, replicated: Replicated<'_>, req: &LeaveGroup) -> Result<LeaveOutcome> {
        validate_group_id(&req.group_id)?;
        let mut c = Call::new(now_ms, replicated);
        let members = self.with_group(&mut c, &req.group_id, |e, c, g| {
            let mut results = Vec::with_capacity(req.members.len());
            let (mut removed, mut released) = (false, false);
            for leaving in &req.members {
                let result = if leaving.member_id.is_empty() {
                    match leaving.instance_id.as_deref().and_then(|i| g.static_member(i)).map(str::to_string) {
                        Some(id) => {
                            e.remove_member(c, g, &id);
                            removed = true;
                            Ok(())
                        }
                        None => Err(g.unknown_member("")),
                    }
                } else if g.pending.remove(&leaving.member_id).is_some() {
                    e.timers.cancel(&g.group_id, TimerKind::Pending(leaving.member_id.clone()));
                    released = true;
                    Ok(())
                } else {
                    let valid = g.validate_member(&leaving.member_id, leaving.instance_id.as_deref());
                    if valid.is_ok() {
                        e.remove_member(c, g, &leaving.member_id);
                        removed = true;
                    }
                    valid
                };
                results.push(Left { member: leaving.clone(), result });
            }
            match g.state {
                ClassicState::Stable | ClassicState::CompletingRebalance if removed => e.maybe_rebalance(c, g),
                ClassicState::PreparingRebalance if removed || released => e.maybe_complete_join(c, g),
                _ => {}
            }
            results
        });
        Ok(LeaveOutcome { members, effects: c.effects })
    }

    /// The outcome of the [`Persist`] named `id`: `Ok` once its record is applied (committed on a
    /// majority), else why not (see `crate::offsets::membership::persist_classic`). Answers what waited on it.
    pub fn persisted(
        &mut self,
        now_ms: i64,
        replicated: Replicated<'_>,
        id: PersistId,
        result: Result<()>,
    ) -> Vec<Effect> {
        let mut c = Call::new(now_ms, replicated);
        let Some(flight) = self.in_flight.remove(&id) else { return c.effects };
        let group_id = flight.group_id().to_string();
        self.with_group(&mut c, &group_id, |e, c, g| {
            g.persists_in_flight = g.persists_in_flight.saturating_sub(1);
            e.on_persisted(c, g, flight, result);
        });
        c.effects
    }

    /// Fires every deadline due at `now_ms`: join phases that end, members that did not sync,
    /// sessions that ran out, member ids handed out and never used, and storing again that a
    /// group became empty.
    pub fn tick(&mut self, now_ms: i64, replicated: Replicated<'_>) -> Vec<Effect> {
        let mut c = Call::new(now_ms, replicated);
        for (at_ms, group_id, kind) in self.timers.due(now_ms) {
            let Some(mut g) = self.groups.remove(&group_id) else { continue };
            self.fire(&mut c, &mut g, at_ms, kind);
            self.put_back(&c, g);
        }
        c.effects
    }

    /// When [`Self::tick`] has something to do next (ms, the callers' clock); `None`: nothing is
    /// armed. Calling `tick` earlier does nothing; later delays what it does.
    pub fn next_deadline(&mut self) -> Option<i64> {
        loop {
            let armed = match self.timers.peek() {
                None => return None,
                Some((at_ms, group_id, kind)) => self.is_armed(*at_ms, group_id, kind).then_some(*at_ms),
            };
            if armed.is_some() {
                return armed;
            }
            self.timers.pop();
        }
    }

    /// Entries in the deadline queue (stale ones included).
    #[cfg(test)]
    pub(super) fn queued_deadlines(&self) -> usize {
        self.timers.len()
    }

    /// Whether a classic member may commit offsets now, by what only the leader's memory knows
    /// (Kafka's `validateOffsetCommit`): an empty member id with a negative generation commits
    /// only while the group is `Empty`; a member must be one, at the group's generation, and not
    /// in `CompletingRebalance` (`REBALANCE_IN_PROGRESS`: it is about to get a new assignment).
    /// During `PreparingRebalance` a member still commits at its generation, as Kafka allows, so
    /// an eager consumer can commit what it gives up. The commit is checked again against the
    /// stored record when it applies ([`crate::offsets::Committer::Classic`]).
    pub fn check_commit(
        &self,
        group_id: &str,
        member_id: &str,
        instance_id: Option<&str>,
        generation: i32,
    ) -> Result<()> {
        let Some(g) = self.groups.get(group_id) else {
            // Nothing in memory: no members, and the stored record decides.
            return Ok(());
        };
        if generation < 0 && g.state == ClassicState::Empty {
            return Ok(());
        }
        if generation >= 0 || !member_id.is_empty() || instance_id.is_some() {
            g.validate_member(member_id, instance_id)?;
            if generation != g.generation {
                return Err(illegal_generation(g, member_id, generation));
            }
        } else if g.state != ClassicState::Empty {
            return Err(g.unknown_member(member_id));
        }
        if g.state == ClassicState::CompletingRebalance {
            return Err(rebalancing(g));
        }
        Ok(())
    }

    /// True when the leader holds `group_id` in memory (a group with members, or one whose first
    /// generation is being formed): a classic group, whether or not it is stored yet.
    pub fn knows(&self, group_id: &str) -> bool {
        self.groups.contains_key(group_id)
    }

    /// The ids of the groups the leader holds in memory.
    pub fn group_ids(&self) -> Vec<String> {
        self.groups.keys().cloned().collect()
    }

    /// True when the leader's memory has members in `group_id` (some perhaps not stored yet: a
    /// group's first generation is stored only once its leader syncs). A server checks this
    /// before deleting a group or letting a KIP-848 member take the id.
    pub fn has_members(&self, group_id: &str) -> bool {
        self.groups.get(group_id).is_some_and(|g| !g.members.is_empty())
    }

    /// The group as the leader holds it (from its record when it has nothing in memory); `None`
    /// when it has neither.
    pub fn describe(&self, group_id: &str, classic: &ClassicGroups) -> Option<ClassicDescription> {
        let loaded;
        let g = match self.groups.get(group_id) {
            Some(g) => g,
            None => {
                loaded = LiveGroup::from_record(group_id, Some(classic.get(group_id)?));
                &loaded
            }
        };
        let mut members: Vec<_> = g.members.values().collect();
        members.sort_by_key(|m| m.seq);
        Some(ClassicDescription {
            group_id: g.group_id.clone(),
            state: g.state,
            generation: g.generation,
            protocol_type: g.protocol_type.clone().unwrap_or_default(),
            protocol: g.protocol.clone().unwrap_or_default(),
            leader: g.leader.clone().unwrap_or_default(),
            members: members
                .into_iter()
                .map(|m| DescribedMember {
                    member_id: m.record.member_id.clone(),
                    instance_id: m.record.instance_id.clone(),
                    client_id: m.record.client_id.clone(),
                    client_host: m.record.client_host.clone(),
                    metadata: m.record.metadata(g.protocol.as_deref().unwrap_or_default()),
                    assignment: m.record.assignment.clone(),
                })
                .collect(),
            pending_members: g.pending.len(),
        })
    }

    /// This node no longer leads the partition: every parked request is answered with `error`
    /// (`NOT_COORDINATOR`, so clients find the new leader, as Kafka answers on unloading a
    /// group) and the engine forgets everything. Persists still in flight are moot.
    pub fn resign(&mut self, error: &CoordinatorError) -> Vec<Effect> {
        let mut effects = Vec::new();
        for g in std::mem::take(&mut self.groups).into_values() {
            for m in g.members.into_values() {
                if let Some(h) = m.awaiting_join {
                    effects.push(Effect::Respond(h, Answer::Join(Err(error.clone()))));
                }
                if let Some(h) = m.awaiting_sync {
                    effects.push(Effect::Respond(h, Answer::Sync(Err(error.clone()))));
                }
            }
        }
        self.timers = Timers::default();
        self.in_flight.clear();
        effects
    }

    // ---- requests ----

    /// Checks what Kafka's coordinator service checks before the group is looked at, and that the
    /// id is not a KIP-848 group's; the request with its protocols de-duplicated.
    fn validate_join(&self, req: &JoinGroup, replicated: Replicated<'_>) -> Result<JoinGroup> {
        validate_group_id(&req.group_id)?;
        let (min_ms, max_ms) = (self.config.min_session_timeout_ms, self.config.max_session_timeout_ms);
        if !(min_ms..=max_ms).contains(&req.session_timeout_ms) {
            return Err(CoordinatorError::InvalidSessionTimeout { got_ms: req.session_timeout_ms, min_ms, max_ms });
        }
        let invalid = |why: String| Err(CoordinatorError::InvalidRequest(why));
        if req.rebalance_timeout_ms < MIN_REBALANCE_TIMEOUT_MS {
            return invalid(format!(
                "rebalance timeout {} ms; at least {MIN_REBALANCE_TIMEOUT_MS} ms (JoinGroup v0, which has none, \
                 sends the session timeout)",
                req.rebalance_timeout_ms
            ));
        }
        for (what, value) in [
            ("member id", Some(&req.member_id)),
            ("instance id", req.instance_id.as_ref()),
            ("client id", Some(&req.client_id)),
            ("client host", Some(&req.client_host)),
            ("protocol type", Some(&req.protocol_type)),
        ] {
            if let Some(v) = value.filter(|v| v.len() > MAX_ID_BYTES) {
                return invalid(format!("the {what} is {} bytes long; at most {MAX_ID_BYTES}", v.len()));
            }
        }
        if req.instance_id.as_deref() == Some("") {
            return invalid("an instance id, when sent, must not be empty".into());
        }
        if req.protocols.len() > MAX_PROTOCOLS_PER_MEMBER {
            return invalid(format!("{} protocols; at most {MAX_PROTOCOLS_PER_MEMBER}", req.protocols.len()));
        }
        if let Some(p) = req.protocols.iter().find(|p| p.name.is_empty() || p.name.len() > MAX_ID_BYTES) {
            return invalid(format!("protocol name {:?} is empty or longer than {MAX_ID_BYTES} bytes", p.name));
        }
        if let Some(p) = req.protocols.iter().find(|p| p.metadata.len() > MAX_PROTOCOL_METADATA_BYTES) {
            return invalid(format!(
                "protocol {:?} carries {} bytes of metadata; at most {MAX_PROTOCOL_METADATA_BYTES}",
                p.name,
                p.metadata.len()
            ));
        }
        if replicated.consumer.get(&req.group_id).is_some_and(|g| !g.members.is_empty()) {
            return Err(CoordinatorError::InconsistentGroupProtocol {
                group_id: req.group_id.clone(),
                reason: "the group id belongs to a consumer group of the KIP-848 protocol that has members; \
                         use group.protocol=consumer, or another group id"
                    .into(),
            });
        }
        let mut protocols: Vec<Protocol> = Vec::with_capacity(req.protocols.len());
        for p in &req.protocols {
            if !protocols.iter().any(|q| q.name == p.name) {
                protocols.push(p.clone());
            }
        }
        let metadata_bytes: usize = protocols.iter().map(|p| p.name.len() + p.metadata.len()).sum();
        if metadata_bytes > MAX_MEMBER_METADATA_BYTES {
            return invalid(format!(
                "the member's protocols take {metadata_bytes} bytes; at most {MAX_MEMBER_METADATA_BYTES}"
            ));
        }
        Ok(JoinGroup { protocols, ..req.clone() })
    }

    fn join_group(&mut self, c: &mut Call<'_>, g: &mut LiveGroup, handle: Handle, req: &JoinGroup) {
        if !self.accepts(g, &req.member_id) {
            // Kafka drops the member that asked (it may have been one) and refuses it.
            self.remove_member(c, g, &req.member_id);
            if g.pending.remove(&req.member_id).is_some() {
                self.timers.cancel(&g.group_id, TimerKind::Pending(req.member_id.clone()));
            }
            let max = self.config.max_size;
            return c.join(handle, Err(CoordinatorError::GroupMaxSizeReached { group_id: g.group_id.clone(), max }));
        }
        if let Some(reason) = g.inconsistency(&req.protocol_type, &req.protocols) {
            let group_id = g.group_id.clone();
            return c.join(handle, Err(CoordinatorError::InconsistentGroupProtocol { group_id, reason }));
        }
        if let Err(e) = check_record_room(g, req) {
            return c.join(handle, Err(e));
        }
        if req.member_id.is_empty() {
            self.join_new(c, g, handle, req);
        } else {
            self.join_known(c, g, handle, req);
        }
    }

    /// Kafka's `acceptJoiningMember`: during a join phase a member already rejoined is accepted,
    /// others only while fewer than the limit have rejoined (so a group over the limit sheds the
    /// last to rejoin); otherwise members are accepted, new ones up to the limit.
    fn accepts(&self, g: &LiveGroup, member_id: &str) -> bool {
        let max = self.config.max_size;
        match g.state {
            ClassicState::Empty => true,
            ClassicState::PreparingRebalance => {
                g.members.get(member_id).is_some_and(|m| m.awaiting_join.is_some())
                    || g.members.values().filter(|m| m.awaiting_join.is_some()).count() < max
            }
            ClassicState::CompletingRebalance | ClassicState::Stable => {
                g.members.contains_key(member_id) || g.members.len() < max
            }
        }
    }

    /// Whether another member id may be handed out: the ids handed out and not used yet, with the
    /// members [`Self::accepts`] counts in the group's state, stay below the size limit.
    fn accepts_pending(&self, g: &LiveGroup) -> bool {
        let members = match g.state {
            ClassicState::PreparingRebalance => g.members.values().filter(|m| m.awaiting_join.is_some()).count(),
            ClassicState::Empty | ClassicState::CompletingRebalance | ClassicState::Stable => g.members.len(),
        };
        members + g.pending.len() < self.config.max_size
    }

    /// A member joining without a member id.
    fn join_new(&mut self, c: &mut Call<'_>, g: &mut LiveGroup, handle: Handle, req: &JoinGroup) {
        let kip_394 = req.instance_id.is_none() && !req.legacy_member_id;
        // KIP-394: the member gets its id first, so a client whose JoinGroup times out and is
        // retried does not leave a member behind each time; the id expires unused after the
        // session timeout. Ids handed out count against the group's size limit as the members
        // they are about to become, so a client asking over and over cannot grow them unbounded.
        if kip_394 && !self.accepts_pending(g) {
            let (group_id, max) = (g.group_id.clone(), self.config.max_size);
            return c.join(handle, Err(CoordinatorError::GroupMaxSizeReached { group_id, max }));
        }
        let prefix = req.instance_id.as_deref().unwrap_or(&req.client_id);
        let new_id = (self.member_ids)(truncated(prefix, MAX_MEMBER_ID_PREFIX_BYTES));
        if let Some(instance) = &req.instance_id {
            return match g.static_member(instance).map(str::to_string) {
                Some(old_id) => self.rename_static(c, g, handle, req, &old_id, new_id),
                None => self.add_and_rebalance(c, g, handle, req, new_id),
            };
        }
        if !kip_394 {
            return self.add_and_rebalance(c, g, handle, req, new_id);
        }
        let at_ms = c.after(req.session_timeout_ms);
        g.pending.insert(new_id.clone(), at_ms);
        self.timers.arm(at_ms, &g.group_id, TimerKind::Pending(new_id.clone()));
        let group_id = g.group_id.clone();
        c.join(handle, Err(CoordinatorError::MemberIdRequired { group_id, member_id: new_id }));
    }

    /// A member joining with a member id.
    fn join_known(&mut self, c: &mut Call<'_>, g: &mut LiveGroup, handle: Handle, req: &JoinGroup) {
        let id = &req.member_id;
        if g.pending.contains_key(id) {
            if req.instance_id.is_some() {
                let why = format!("member id {id:?} was given to a dynamic member; a static member joins without one");
                return c.join(handle, Err(CoordinatorError::InvalidRequest(why)));
            }
            return self.add_and_rebalance(c, g, handle, req, id.clone());
        }
        if let Err(e) = g.validate_member(id, req.instance_id.as_deref()) {
            return c.join(handle, Err(e));
        }
        let unchanged = g.members.get(id).is_some_and(|m| m.record.protocols == req.protocols);
        let is_leader = g.leader.as_ref() == Some(id);
        match g.state {
            ClassicState::PreparingRebalance => self.update_and_rebalance(c, g, handle, req),
            // It missed its answer: the generation's answer again (the leader's with members).
            ClassicState::CompletingRebalance if unchanged => c.join(handle, Ok(current_answer(g, id, is_leader))),
            // A leader's JoinGroup in a stable group asks for a rebalance (its consumer saw
            // metadata change the assignment depends on).
            ClassicState::Stable if unchanged && !is_leader => c.join(handle, Ok(current_answer(g, id, false))),
            ClassicState::CompletingRebalance | ClassicState::Stable => self.update_and_rebalance(c, g, handle, req),
            ClassicState::Empty => c.join(handle, Err(g.unknown_member(id))),
        }
    }

    /// A member rejoins with (perhaps) new protocols and timeouts: its JoinGroup is parked.
    fn update_and_rebalance(&mut self, c: &mut Call<'_>, g: &mut LiveGroup, handle: Handle, req: &JoinGroup) {
        let superseded = rebalancing(g);
        g.update_member(&req.member_id, req.protocols.clone(), req.session_timeout_ms, req.rebalance_timeout_ms);
        if let Some(m) = g.members.get_mut(&req.member_id) {
            if let Some(earlier) = m.awaiting_join.replace(handle) {
                // The client gave up on its earlier JoinGroup and sent another.
                c.join(earlier, Err(superseded));
            }
        }
        self.maybe_rebalance(c, g);
    }

    /// A new member: added with its JoinGroup parked; it has the new-member join timeout, not its
    /// session, until the join phase answers it.
    fn add_and_rebalance(
        &mut self,
        c: &mut Call<'_>,
        g: &mut LiveGroup,
        handle: Handle,
        req: &JoinGroup,
        member_id: String,
    ) {
        let record = ClassicMember {
            member_id: member_id.clone(),
            instance_id: req.instance_id.clone(),
            client_id: req.client_id.clone(),
            client_host: req.client_host.clone(),
            session_timeout_ms: req.session_timeout_ms,
            rebalance_timeout_ms: req.rebalance_timeout_ms,
            protocols: req.protocols.clone(),
            assignment: Bytes::new(),
        };
        if g.state == ClassicState::PreparingRebalance && g.previous == ClassicState::Empty {
            g.new_member_added = true;
        }
        g.insert(record, &req.protocol_type, Some(handle), true);
        self.timers.cancel(&g.group_id, TimerKind::Pending(member_id.clone()));
        let at_ms = c.after(self.config.new_member_join_timeout_ms);
        self.arm_session(g, &member_id, at_ms);
        self.maybe_rebalance(c, g);
    }

    /// A static member restarted (a known instance id, no member id): it takes over its
    /// predecessor — assignment, leadership and all — under a new member id, and the old id is
    /// fenced. In a stable group whose selected protocol stays the same there is no rebalance:
    /// the replacement is stored and then the member gets the current generation (Kafka's
    /// `updateStaticMemberThenRebalanceOrCompleteJoin`).
    fn rename_static(
        &mut self,
        c: &mut Call<'_>,
        g: &mut LiveGroup,
        handle: Handle,
        req: &JoinGroup,
        old_id: &str,
        new_id: String,
    ) {
        let Some(old) = g.rename(old_id, &new_id) else { return c.join(handle, Err(g.unknown_member(old_id))) };
        self.timers.cancel(&g.group_id, TimerKind::Session(old_id.to_string()));
        let fenced = || CoordinatorError::FencedInstanceId {
            group_id: g.group_id.clone(),
            instance_id: old.record.instance_id.clone().unwrap_or_default(),
            member_id: old_id.to_string(),
        };
        if let Some(h) = old.awaiting_join {
            c.join(h, Err(fenced()));
        }
        if let Some(h) = old.awaiting_sync {
            c.sync(h, Err(fenced()));
        }
        g.update_member(&new_id, req.protocols.clone(), req.session_timeout_ms, req.rebalance_timeout_ms);
        if let Some(m) = g.members.get_mut(&new_id) {
            m.awaiting_join = Some(handle);
        }
        self.rearm_session(c, g, &new_id);
        match g.state {
            ClassicState::Stable if g.select_protocol() == g.protocol => {
                let record = g.to_record(c.now_ms, None);
                let group_id = g.group_id.clone();
                self.persist(c, g, record, InFlight::StaticRename { group_id, old: old.record, new_id, handle });
            }
            ClassicState::Stable => self.maybe_rebalance(c, g),
            // The leader may already have been sent the old id: only a new generation keeps the
            // assignment consistent with the member ids.
            ClassicState::CompletingRebalance => self.prepare_rebalance(c, g),
            ClassicState::PreparingRebalance => self.maybe_complete_join(c, g),
            ClassicState::Empty => {}
        }
    }

    fn sync_group(&mut self, c: &mut Call<'_>, g: &mut LiveGroup, handle: Handle, req: &SyncGroup) {
        if g.state == ClassicState::Empty {
            return c.sync(handle, Err(g.unknown_member(&req.member_id)));
        }
        if let Err(e) = g.validate_member(&req.member_id, req.instance_id.as_deref()) {
            return c.sync(handle, Err(e));
        }
        if req.generation != g.generation {
            return c.sync(handle, Err(illegal_generation(g, &req.member_id, req.generation)));
        }
        for (what, sent, group) in
            [("protocol type", &req.protocol_type, &g.protocol_type), ("protocol", &req.protocol_name, &g.protocol)]
        {
            if let (Some(sent), Some(group)) = (sent, group) {
                if sent != group {
                    let reason = format!("the member sent {what} {sent:?}; the group's is {group:?}");
                    let group_id = g.group_id.clone();
                    return c.sync(handle, Err(CoordinatorError::InconsistentGroupProtocol { group_id, reason }));
                }
            }
        }
        match g.state {
            ClassicState::Empty => {}
            ClassicState::PreparingRebalance => c.sync(handle, Err(rebalancing(g))),
            ClassicState::CompletingRebalance => {
                let superseded = rebalancing(g);
                if let Some(m) = g.members.get_mut(&req.member_id) {
                    if let Some(earlier) = m.awaiting_sync.replace(handle) {
                        c.sync(earlier, Err(superseded));
                    }
                }
                synced(g, &req.member_id);
                if g.leader.as_ref() == Some(&req.member_id) && g.assignment_in_flight == Some(g.generation) {
                    // The leader sent its SyncGroup again while its assignments are being
                    // stored: it is answered with those (what every member gets), and these are
                    // ignored — storing them too could hand members different ones.
                    tracing::debug!(group = %g.group_id, generation = g.generation, "second leader SyncGroup ignored");
                } else if g.leader.as_ref() == Some(&req.member_id) {
                    // The leader's assignments: stored first, then handed out. A member the
                    // leader left out gets an empty one; ids not in the group are ignored.
                    let assignments: BTreeMap<String, Bytes> = req
                        .assignments
                        .iter()
                        .filter(|(id, _)| g.members.contains_key(id))
                        .map(|(id, a)| (id.clone(), a.clone()))
                        .collect();
                    let record = g.to_record(c.now_ms, Some(&assignments));
                    let (group_id, generation) = (g.group_id.clone(), g.generation);
                    g.assignment_in_flight = Some(generation);
                    self.persist(c, g, record, InFlight::Assignment { group_id, generation, assignments });
                }
            }
            ClassicState::Stable => {
                synced(g, &req.member_id);
                let assignment = g.members.get(&req.member_id).map(|m| m.record.assignment.clone()).unwrap_or_default();
                c.sync(handle, Ok(sync_answer(g, assignment)));
            }
        }
    }

    // ---- outcomes of persists and deadlines ----

    fn on_persisted(&mut self, c: &mut Call<'_>, g: &mut LiveGroup, flight: InFlight, result: Result<()>) {
        match flight {
            InFlight::Assignment { generation, assignments, .. } => {
                if g.assignment_in_flight == Some(generation) {
                    g.assignment_in_flight = None;
                }
                // The group may have moved on meanwhile (a member joined or left): then a new
                // generation supersedes this one and its syncs were answered already.
                if g.state != ClassicState::CompletingRebalance || g.generation != generation {
                    return;
                }
                match result {
                    Ok(()) => {
                        let template = sync_answer(g, Bytes::new());
                        let ids: Vec<String> = g.members.keys().cloned().collect();
                        for id in ids {
                            let Some(m) = g.members.get_mut(&id) else { continue };
                            let mut assignment = assignments.get(&id).cloned().unwrap_or_default();
                            if rill_rt::mutation::active(rill_rt::mutation::Mutation::StaleSyncAssignment)
                                && !m.record.assignment.is_empty()
                            {
                                // Deliberate bug (simulation only): the previous generation's.
                                assignment = m.record.assignment.clone();
                            }
                            m.record.assignment = assignment.clone();
                            if let Some(h) = m.awaiting_sync.take() {
                                c.sync(h, Ok(SyncAnswer { assignment, ..template.clone() }));
                                self.rearm_session(c, g, &id);
                            }
                        }
                        g.transition(ClassicState::Stable);
                    }
                    Err(e) => {
                        self.fail_syncs(c, g, &persist_failure(e));
                        self.maybe_rebalance(c, g);
                    }
                }
            }
            InFlight::StaticRename { old, new_id, handle, .. } => {
                let parked = g.members.get(&new_id).is_some_and(|m| m.awaiting_join == Some(handle));
                if !parked || g.state != ClassicState::Stable {
                    // A rebalance took its JoinGroup over (it is answered with the next
                    // generation), or it is gone (answered then).
                    return;
                }
                match result {
                    Ok(()) => {
                        let is_leader = g.leader.as_ref() == Some(&new_id);
                        if let Some(m) = g.members.get_mut(&new_id) {
                            m.awaiting_join = None;
                        }
                        let mut answer = current_answer(g, &new_id, is_leader);
                        answer.skip_assignment = is_leader;
                        c.join(handle, Ok(answer));
                        // Its session may have run out while it was parked (then it was paused):
                        // it starts again with the answer, as Kafka's does on every response.
                        self.rearm_session(c, g, &new_id);
                    }
                    Err(e) => {
                        // Not stored: the predecessor is the member again, as before.
                        g.rename(&new_id, &old.member_id);
                        self.timers.cancel(&g.group_id, TimerKind::Session(new_id.clone()));
                        g.update_member(
                            &old.member_id,
                            old.protocols,
                            old.session_timeout_ms,
                            old.rebalance_timeout_ms,
                        );
                        self.rearm_session(c, g, &old.member_id);
                        c.join(handle, Err(persist_failure(e)));
                    }
                }
            }
            InFlight::Empty { group_id } => {
                if let Err(e) = result {
                    // Until it is stored, the record lists the members that left: standalone
                    // commits, DeleteGroup, offsets expiry and a KIP-848 group taking the id are
                    // refused. Tried again shortly (see `retry_empty`).
                    tracing::warn!(group = %group_id, error = %e, "storing a classic group that became empty failed; will retry");
                    self.arm_empty_retry(c, g);
                }
            }
        }
    }

    fn fire(&mut self, c: &mut Call<'_>, g: &mut LiveGroup, at_ms: i64, kind: TimerKind) {
        match kind {
            TimerKind::Join => {
                if g.join_timer.is_some_and(|t| t.at_ms() == at_ms) {
                    self.join_deadline(c, g);
                }
            }
            TimerKind::Sync => {
                if let Some((at, generation)) = g.sync_timer {
                    if at == at_ms {
                        g.sync_timer = None;
                        self.sync_deadline(c, g, generation);
                    }
                }
            }
            TimerKind::Session(id) => {
                if g.members.get(&id).is_some_and(|m| m.session_deadline_ms == Some(at_ms)) {
                    self.session_deadline(c, g, &id);
                }
            }
            TimerKind::Pending(id) => {
                if g.pending.get(&id) == Some(&at_ms) {
                    g.pending.remove(&id);
                    // Not the initial join phase: only its timer ends it (as Kafka's).
                    self.maybe_complete_join(c, g);
                }
            }
            TimerKind::EmptyRetry => {
                if g.empty_retry_ms == Some(at_ms) {
                    g.empty_retry_ms = None;
                    self.retry_empty(c, g);
                }
            }
        }
    }

    /// Storing that the group became empty is tried again in a while.
    fn arm_empty_retry(&mut self, c: &Call<'_>, g: &mut LiveGroup) {
        let at_ms = c.after(EMPTY_PERSIST_RETRY_MS);
        g.empty_retry_ms = Some(at_ms);
        self.timers.arm(at_ms, &g.group_id, TimerKind::EmptyRetry);
    }

    /// Stores again that the group is empty, if it still is in memory while its record lists
    /// members (a new generation, or a record without members, makes it moot). With another
    /// record of the group in flight it waits for that one to be reported, so the compare-and-set
    /// is decided against the version that record leaves.
    fn retry_empty(&mut self, c: &mut Call<'_>, g: &mut LiveGroup) {
        let moot =
            g.state != ClassicState::Empty || !g.members.is_empty() || !c.replicated.classic.has_members(&g.group_id);
        if moot {
            return;
        }
        if g.persists_in_flight > 0 {
            return self.arm_empty_retry(c, g);
        }
        let record = g.to_record(c.now_ms, None);
        let group_id = g.group_id.clone();
        self.persist(c, g, record, InFlight::Empty { group_id });
    }

    /// The join phase's deadline: the initial rebalance waits once more if a member joined
    /// meanwhile (never past the rebalance timeout), else the phase completes.
    fn join_deadline(&mut self, c: &mut Call<'_>, g: &mut LiveGroup) {
        match g.join_timer {
            Some(JoinTimer::Initial { delay_ms, remaining_ms, .. }) if g.new_member_added && remaining_ms > 0 => {
                g.new_member_added = false;
                let next_ms = self.config.initial_rebalance_delay_ms.min(remaining_ms);
                let at_ms = c.after(next_ms);
                g.join_timer = Some(JoinTimer::Initial {
                    at_ms,
                    delay_ms: next_ms,
                    remaining_ms: remaining_ms.saturating_sub(delay_ms),
                });
                self.timers.arm(at_ms, &g.group_id, TimerKind::Join);
            }
            _ => self.complete_join(c, g),
        }
    }

    /// Members that have not synced a rebalance timeout after the join phase are removed (Kafka's
    /// pending-sync expiry), and the group rebalances without them.
    fn sync_deadline(&mut self, c: &mut Call<'_>, g: &mut LiveGroup, generation: i32) {
        let live = matches!(g.state, ClassicState::CompletingRebalance | ClassicState::Stable);
        if generation != g.generation || !live || g.pending_sync.is_empty() {
            return;
        }
        let late: Vec<String> = g.pending_sync.iter().cloned().collect();
        tracing::info!(group = %g.group_id, generation, members = ?late, "classic members did not sync in time");
        for id in late {
            self.remove_member(c, g, &id);
        }
        self.prepare_rebalance(c, g);
    }

    /// A member's session ran out: it goes, unless it is parked (it cannot heartbeat then; its
    /// session starts again when it is answered) and not new.
    fn session_deadline(&mut self, c: &mut Call<'_>, g: &mut LiveGroup, member_id: &str) {
        let Some(m) = g.members.get_mut(member_id) else { return };
        if m.is_alive_without_heartbeat() {
            m.session_deadline_ms = None;
            return;
        }
        tracing::info!(group = %g.group_id, member = member_id, "classic member's session timed out");
        self.remove_member(c, g, member_id);
        match g.state {
            ClassicState::Stable | ClassicState::CompletingRebalance => self.maybe_rebalance(c, g),
            // Not the initial join phase: only its timer ends it (as Kafka's).
            ClassicState::PreparingRebalance => self.maybe_complete_join(c, g),
            ClassicState::Empty => {}
        }
    }

    // ---- rebalancing ----

    /// Kafka's `maybePrepareRebalanceOrCompleteJoin`.
    fn maybe_rebalance(&mut self, c: &mut Call<'_>, g: &mut LiveGroup) {
        match g.state {
            ClassicState::PreparingRebalance => self.maybe_complete_join(c, g),
            ClassicState::Empty | ClassicState::CompletingRebalance | ClassicState::Stable => {
                self.prepare_rebalance(c, g)
            }
        }
    }

    /// A join phase starts. Syncs parked for the generation being replaced are answered
    /// `REBALANCE_IN_PROGRESS`. An empty group's first join phase lasts the initial delay
    /// (members started together join one generation); any other ends when every member has
    /// rejoined, or at the group's rebalance timeout.
    fn prepare_rebalance(&mut self, c: &mut Call<'_>, g: &mut LiveGroup) {
        if g.state == ClassicState::CompletingRebalance {
            self.fail_syncs(c, g, &rebalancing(g));
        }
        g.pending_sync.clear();
        g.sync_timer = None;
        if g.state == ClassicState::Empty {
            let delay_ms = self.config.initial_rebalance_delay_ms;
            let remaining_ms = g.rebalance_timeout_ms().saturating_sub(delay_ms);
            let at_ms = c.after(delay_ms);
            g.join_timer = Some(JoinTimer::Initial { at_ms, delay_ms, remaining_ms });
            g.new_member_added = false;
            self.timers.arm(at_ms, &g.group_id, TimerKind::Join);
            g.transition(ClassicState::PreparingRebalance);
            return;
        }
        g.transition(ClassicState::PreparingRebalance);
        if g.all_joined() {
            self.complete_join(c, g);
        } else {
            let at_ms = c.after(g.rebalance_timeout_ms());
            g.join_timer = Some(JoinTimer::Regular { at_ms });
            self.timers.arm(at_ms, &g.group_id, TimerKind::Join);
        }
    }

    /// Completes the join phase if it may end early: not the initial one, and everyone is in.
    fn maybe_complete_join(&mut self, c: &mut Call<'_>, g: &mut LiveGroup) {
        if g.state == ClassicState::PreparingRebalance && g.previous != ClassicState::Empty && g.all_joined() {
            self.complete_join(c, g);
        }
    }

    /// The join phase ends: dynamic members that did not rejoin are removed (static ones stay,
    /// until their session or the sync deadline), the generation moves, the protocol is selected
    /// and every parked JoinGroup is answered — the leader's with every member's metadata. With
    /// nobody left the group is empty at the next generation, and that is stored. If members
    /// remain but none rejoined, the phase is extended by a rebalance timeout.
    fn complete_join(&mut self, c: &mut Call<'_>, g: &mut LiveGroup) {
        g.join_timer = None;
        let gone: Vec<String> = g
            .not_rejoined()
            .into_iter()
            .filter(|m| m.record.instance_id.is_none())
            .map(|m| m.record.member_id.clone())
            .collect();
        for id in &gone {
            self.remove_member(c, g, id);
        }
        if !gone.is_empty() {
            tracing::info!(group = %g.group_id, members = ?gone, "classic members did not rejoin in time");
        }
        if !g.elect_joined_leader() && !g.members.is_empty() {
            let at_ms = c.after(g.rebalance_timeout_ms());
            g.join_timer = Some(JoinTimer::Regular { at_ms });
            self.timers.arm(at_ms, &g.group_id, TimerKind::Join);
            return;
        }
        g.generation += 1;
        g.pending_sync.clear();
        if g.members.is_empty() {
            g.protocol = None;
            g.transition(ClassicState::Empty);
            let record = g.to_record(c.now_ms, None);
            let group_id = g.group_id.clone();
            self.persist(c, g, record, InFlight::Empty { group_id });
            return;
        }
        g.protocol = g.select_protocol();
        g.transition(ClassicState::CompletingRebalance);
        let ids: Vec<String> = g.members.keys().cloned().collect();
        for id in ids {
            let is_leader = g.leader.as_ref() == Some(&id);
            let answer = current_answer(g, &id, is_leader);
            if let Some(m) = g.members.get_mut(&id) {
                if let Some(h) = m.awaiting_join.take() {
                    c.join(h, Ok(answer));
                }
                m.is_new = false;
            }
            self.rearm_session(c, g, &id);
            g.pending_sync.insert(id);
        }
        let at_ms = c.after(g.rebalance_timeout_ms());
        g.sync_timer = Some((at_ms, g.generation));
        self.timers.arm(at_ms, &g.group_id, TimerKind::Sync);
    }

    /// Every member's assignment is cleared and every parked SyncGroup answered with `error`.
    fn fail_syncs(&mut self, c: &mut Call<'_>, g: &mut LiveGroup, error: &CoordinatorError) {
        let ids: Vec<String> = g.members.keys().cloned().collect();
        for id in ids {
            let Some(m) = g.members.get_mut(&id) else { continue };
            m.record.assignment = Bytes::new();
            if let Some(h) = m.awaiting_sync.take() {
                c.sync(h, Err(error.clone()));
                self.rearm_session(c, g, &id);
            }
        }
    }

    /// Removes a member; its parked requests are answered `UNKNOWN_MEMBER_ID` (a client still
    /// there joins again).
    fn remove_member(&mut self, c: &mut Call<'_>, g: &mut LiveGroup, member_id: &str) {
        let Some(m) = g.remove(member_id) else { return };
        self.timers.cancel(&g.group_id, TimerKind::Session(member_id.to_string()));
        self.timers.cancel(&g.group_id, TimerKind::Pending(member_id.to_string()));
        if let Some(h) = m.awaiting_join {
            c.join(h, Err(g.unknown_member(member_id)));
        }
        if let Some(h) = m.awaiting_sync {
            c.sync(h, Err(g.unknown_member(member_id)));
        }
    }

    // ---- bookkeeping ----

    /// Asks for `record` to be stored; `flight` says what to do when it is reported. Records of
    /// one group are proposed in order, each expecting the version the previous one makes.
    fn persist(&mut self, c: &mut Call<'_>, g: &mut LiveGroup, record: pb::ClassicGroupState, flight: InFlight) {
        let expect_version =
            if g.persists_in_flight == 0 { c.replicated.classic.version(&g.group_id) } else { g.next_version };
        g.next_version = expect_version + 1;
        g.persists_in_flight += 1;
        let id = PersistId(self.next_persist);
        self.next_persist += 1;
        self.in_flight.insert(id, flight);
        c.effects.push(Effect::Persist(Persist {
            id,
            group_id: g.group_id.clone(),
            record: pb::ClassicGroupRecord { expect_version, group: Some(record) },
        }));
    }

    /// Runs `f` on the group `group_id` — from memory, or loaded from its record — and keeps it
    /// in memory afterwards unless it is idle.
    fn with_group<'r, R>(
        &mut self,
        c: &mut Call<'r>,
        group_id: &str,
        f: impl FnOnce(&mut Self, &mut Call<'r>, &mut LiveGroup) -> R,
    ) -> R {
        let mut g = match self.groups.remove(group_id) {
            Some(g) => g,
            None => self.load(c.now_ms, group_id, c.replicated.classic.get(group_id)),
        };
        let result = f(self, c, &mut g);
        self.put_back(c, g);
        result
    }

    /// Keeps `g` in memory unless it is idle and its record says the same (no members): a group
    /// whose emptying could not be stored stays, so its stale record is not loaded back.
    fn put_back(&mut self, c: &Call<'_>, g: LiveGroup) {
        if !g.is_idle() || c.replicated.classic.has_members(&g.group_id) {
            self.groups.insert(g.group_id.clone(), g);
        } else {
            // Forgotten: whatever the queue still holds for it is stale.
            for kind in [TimerKind::Join, TimerKind::Sync, TimerKind::EmptyRetry] {
                self.timers.cancel(&g.group_id, kind);
            }
        }
    }

    /// The group from its record, every member's session armed in full from `now_ms`.
    fn load(&mut self, now_ms: i64, group_id: &str, record: Option<&ClassicGroup>) -> LiveGroup {
        let mut g = LiveGroup::from_record(group_id, record);
        let sessions: Vec<(String, u32)> =
            g.members.values().map(|m| (m.record.member_id.clone(), m.record.session_timeout_ms)).collect();
        for (id, session_ms) in sessions {
            self.arm_session(&mut g, &id, now_ms + i64::from(session_ms));
        }
        g
    }

    fn arm_session(&mut self, g: &mut LiveGroup, member_id: &str, at_ms: i64) {
        if let Some(m) = g.members.get_mut(member_id) {
            m.session_deadline_ms = Some(at_ms);
            self.timers.arm(at_ms, &g.group_id, TimerKind::Session(member_id.to_string()));
        }
    }

    /// The member's session starts again now.
    fn rearm_session(&mut self, c: &Call<'_>, g: &mut LiveGroup, member_id: &str) {
        if let Some(session_ms) = g.members.get(member_id).map(|m| m.record.session_timeout_ms) {
            self.arm_session(g, member_id, c.after(session_ms));
        }
    }

    /// True when the queue entry (`at_ms`, `group_id`, `kind`) is still a deadline the group holds.
    fn is_armed(&self, at_ms: i64, group_id: &str, kind: &TimerKind) -> bool {
        let Some(g) = self.groups.get(group_id) else { return false };
        match kind {
            TimerKind::Join => g.join_timer.is_some_and(|t| t.at_ms() == at_ms),
            TimerKind::Sync => g.sync_timer.is_some_and(|(at, _)| at == at_ms),
            TimerKind::Session(id) => g.members.get(id).is_some_and(|m| m.session_deadline_ms == Some(at_ms)),
            TimerKind::Pending(id) => g.pending.get(id) == Some(&at_ms),
            TimerKind::EmptyRetry => g.empty_retry_ms == Some(at_ms),
        }
    }
}

/// Checks a SyncGroup before the group is looked at: its group id, and the leader's assignments
/// within [`MAX_ASSIGNMENT_BYTES`] each and [`MAX_SYNC_ASSIGNMENTS_BYTES`] together.
fn validate_sync(req: &SyncGroup) -> Result<()> {
    validate_group_id(&req.group_id)?;
    let invalid = |why: String| Err(CoordinatorError::InvalidRequest(why));
    if let Some((id, a)) = req.assignments.iter().find(|(_, a)| a.len() > MAX_ASSIGNMENT_BYTES) {
        return invalid(format!("the assignment of {id:?} is {} bytes; at most {MAX_ASSIGNMENT_BYTES}", a.len()));
    }
    let total: usize = req.assignments.iter().map(|(id, a)| id.len() + a.len()).sum();
    if total > MAX_SYNC_ASSIGNMENTS_BYTES {
        return invalid(format!("the assignments take {total} bytes together; at most {MAX_SYNC_ASSIGNMENTS_BYTES}"));
    }
    Ok(())
}

/// Whether the group's stored record has room for `req`'s member (new, or replacing its own
/// protocols, or a static member's): its members may take at most [`MAX_GROUP_MEMBERS_BYTES`]
/// besides their assignments.
fn check_record_room(g: &LiveGroup, req: &JoinGroup) -> Result<()> {
    let existing = if req.member_id.is_empty() {
        req.instance_id.as_deref().and_then(|i| g.static_member(i))
    } else {
        Some(req.member_id.as_str())
    };
    let after = match existing.and_then(|id| g.members.get(id)) {
        Some(m) => {
            g.members_bytes.saturating_sub(protocols_bytes(&m.record.protocols)) + protocols_bytes(&req.protocols)
        }
        None => {
            let joining = ClassicMember {
                instance_id: req.instance_id.clone(),
                client_id: req.client_id.clone(),
                client_host: req.client_host.clone(),
                protocols: req.protocols.clone(),
                ..ClassicMember::default()
            };
            g.members_bytes + member_bytes(&joining)
        }
    };
    if after > MAX_GROUP_MEMBERS_BYTES {
        return Err(CoordinatorError::InvalidRequest(format!(
            "the group's stored record has no room for this member's metadata: its members would take {after} \
             bytes; at most {MAX_GROUP_MEMBERS_BYTES}"
        )));
    }
    Ok(())
}

/// The member has synced in this generation (the sync deadline stops once everyone has).
fn synced(g: &mut LiveGroup, member_id: &str) {
    g.pending_sync.remove(member_id);
    if g.pending_sync.is_empty() {
        g.sync_timer = None;
    }
}

/// The current generation's JoinGroup answer for `member_id` (with every member's metadata for
/// the leader).
fn current_answer(g: &LiveGroup, member_id: &str, with_members: bool) -> JoinAnswer {
    JoinAnswer {
        member_id: member_id.to_string(),
        generation: g.generation,
        protocol_type: g.protocol_type.clone().unwrap_or_default(),
        protocol_name: g.protocol.clone().unwrap_or_default(),
        leader: g.leader.clone().unwrap_or_default(),
        skip_assignment: false,
        members: if with_members { g.joined_members() } else { Vec::new() },
    }
}

fn sync_answer(g: &LiveGroup, assignment: Bytes) -> SyncAnswer {
    SyncAnswer {
        protocol_type: g.protocol_type.clone().unwrap_or_default(),
        protocol_name: g.protocol.clone().unwrap_or_default(),
        assignment,
    }
}

fn illegal_generation(g: &LiveGroup, member_id: &str, sent: i32) -> CoordinatorError {
    CoordinatorError::IllegalGeneration {
        group_id: g.group_id.clone(),
        member_id: member_id.to_string(),
        sent,
        current: g.generation,
    }
}

fn rebalancing(g: &LiveGroup) -> CoordinatorError {
    CoordinatorError::RebalanceInProgress { group_id: g.group_id.clone() }
}

/// What members waiting on a failed persist are told (Kafka's
/// `appendGroupMetadataErrorToResponseError`): "not the coordinator" stays so (the client looks
/// the coordinator up again), a refused record keeps its reason, and anything else — a timeout,
/// a lost compare-and-set, storage trouble — is `COORDINATOR_NOT_AVAILABLE`, after which Kafka's
/// clients also look the coordinator up again and retry.
pub fn persist_failure(e: CoordinatorError) -> CoordinatorError {
    match e {
        CoordinatorError::NotCoordinator { .. }
        | CoordinatorError::NotAvailable(_)
        | CoordinatorError::InconsistentGroupProtocol { .. } => e,
        other => CoordinatorError::NotAvailable(format!("the group's state could not be stored: {other}")),
    }
}

/// `s` cut to at most `max` bytes, at a character boundary.
fn truncated(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}
