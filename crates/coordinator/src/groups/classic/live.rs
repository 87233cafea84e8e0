//! One classic group as the coordinator's leader holds it in memory: its state, generation,
//! members with their parked requests and deadlines, the member ids handed out but not yet used,
//! and who still has to sync. The membership rules Kafka's `ClassicGroup` keeps — who leads,
//! which protocols the group supports, which protocol it selects — live here; what the engine does
//! with them (answer, rebalance, persist) lives in [`super::engine`].

use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;
use rill_proto::coordinator as pb;

use super::api::{Handle, JoinedMember};
use super::state::{member_to_proto, ClassicGroup, ClassicMember, Protocol};
use crate::error::{CoordinatorError, Result};
use crate::groups::heartbeat::MAX_ID_BYTES;

/// The most protobuf spends on a string, bytes or message field besides its contents: a tag (1–2
/// bytes) and a length varint (at most 5 bytes for anything under 32 GiB).
const FIELD_OVERHEAD_BYTES: usize = 8;
/// The most a number field takes: a tag and a varint of at most 10 bytes (a negative `i32` too).
const NUMBER_FIELD_BYTES: usize = 12;
/// The most a classic group record takes besides its members: group id, protocol type,
/// selected protocol and leader (each at most 255 bytes, with overhead) and three numbers.
pub(super) const RECORD_HEADER_BYTES: usize = 4 * 1024;

/// Bytes the protocols take in a member's stored record, at most (names, metadata, overhead).
pub(super) fn protocols_bytes(protocols: &[Protocol]) -> usize {
    protocols.iter().map(|p| p.name.len() + p.metadata.len() + 3 * FIELD_OVERHEAD_BYTES).sum()
}

/// Bytes a member takes in the group's stored record, at most, *without* its assignment's
/// contents (whose field overhead is counted). Its member id is counted at the longest an id may
/// be, as a static member's restart replaces it with another.
pub(super) fn member_bytes(m: &ClassicMember) -> usize {
    let strings =
        MAX_ID_BYTES + m.instance_id.as_ref().map_or(0, String::len) + m.client_id.len() + m.client_host.len();
    // The member's own wrapper, its four strings and its assignment: one overhead each.
    strings + 6 * FIELD_OVERHEAD_BYTES + 2 * NUMBER_FIELD_BYTES + protocols_bytes(&m.protocols)
}

/// A classic group's state (Kafka's `ClassicGroupState`, without `Dead`: a group this node stops
/// leading is simply dropped).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClassicState {
    /// No members (perhaps member ids handed out and not used yet).
    Empty,
    /// A join phase: members (re)join; their JoinGroups are parked until it completes.
    PreparingRebalance,
    /// The join phase completed: the generation waits for the leader's assignment.
    CompletingRebalance,
    /// Every member has its assignment for the generation.
    Stable,
}

impl ClassicState {
    /// The state's name, as Kafka's DescribeGroups and ListGroups show it.
    pub fn name(self) -> &'static str {
        match self {
            Self::Empty => "Empty",
            Self::PreparingRebalance => "PreparingRebalance",
            Self::CompletingRebalance => "CompletingRebalance",
            Self::Stable => "Stable",
        }
    }
}

/// A member in memory: its stored fields and the leader's soft state about it.
#[derive(Debug, Clone)]
pub(super) struct LiveMember {
    /// What is stored of it (the assignment is the one of the group's generation).
    pub(super) record: ClassicMember,
    /// Its parked JoinGroup.
    pub(super) awaiting_join: Option<Handle>,
    /// Its parked SyncGroup.
    pub(super) awaiting_sync: Option<Handle>,
    /// When its session ends (`None`: a deadline passed while it was parked; re-armed when its
    /// parked request is answered).
    pub(super) session_deadline_ms: Option<i64>,
    /// Joined and not yet answered: the join timeout for new members holds it, not the rule that
    /// a parked member is alive.
    pub(super) is_new: bool,
    /// The order members were added in (the first is the first leader).
    pub(super) seq: u64,
}

impl LiveMember {
    pub(super) fn id(&self) -> &str {
        &self.record.member_id
    }

    /// Kafka's `hasSatisfiedHeartbeat`: a member with a parked request needs no heartbeat (it
    /// cannot send one), unless it is new.
    pub(super) fn is_alive_without_heartbeat(&self) -> bool {
        !self.is_new && (self.awaiting_join.is_some() || self.awaiting_sync.is_some())
    }
}

/// When the join phase ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum JoinTimer {
    /// At the group's rebalance timeout.
    Regular { at_ms: i64 },
    /// The first rebalance of an empty group (Kafka's `InitialDelayedJoin`): at `at_ms`, unless
    /// a member joined meanwhile; then it waits another `min(initial delay, remaining_ms)`.
    Initial { at_ms: i64, delay_ms: u32, remaining_ms: u32 },
}

impl JoinTimer {
    pub(super) fn at_ms(self) -> i64 {
        match self {
            Self::Regular { at_ms } | Self::Initial { at_ms, .. } => at_ms,
        }
    }
}

/// One classic group in the leader's memory.
#[derive(Debug, Clone)]
pub(super) struct LiveGroup {
    pub(super) group_id: String,
    pub(super) state: ClassicState,
    /// The state before the current one (a join phase that started from `Empty` is the initial
    /// rebalance, which only its timer ends).
    pub(super) previous: ClassicState,
    pub(super) generation: i32,
    pub(super) protocol_type: Option<String>,
    pub(super) protocol: Option<String>,
    pub(super) leader: Option<String>,
    pub(super) members: BTreeMap<String, LiveMember>,
    /// Member ids handed out with `MEMBER_ID_REQUIRED`, with their deadlines.
    pub(super) pending: BTreeMap<String, i64>,
    /// Members that have not synced in the generation yet.
    pub(super) pending_sync: BTreeSet<String>,
    pub(super) join_timer: Option<JoinTimer>,
    /// When members that have not synced are removed, and the generation that is for.
    pub(super) sync_timer: Option<(i64, i32)>,
    /// A member joined during the initial rebalance since its timer was last armed.
    pub(super) new_member_added: bool,
    /// Storing that the group became empty failed; it is tried again then.
    pub(super) empty_retry_ms: Option<i64>,
    /// The generation whose leader's assignments are being stored (a second SyncGroup from the
    /// leader meanwhile is not stored again).
    pub(super) assignment_in_flight: Option<i32>,
    /// What the members take in the stored record, at most, without their assignments'
    /// contents: the sum of [`member_bytes`].
    pub(super) members_bytes: usize,
    next_seq: u64,
    /// Records proposed and not yet reported.
    pub(super) persists_in_flight: u32,
    /// The version the next record expects while others are in flight.
    pub(super) next_version: u64,
}

impl LiveGroup {
    /// The group as its record has it: with members it is `Stable` at the stored generation;
    /// otherwise `Empty` (no record: generation 0). Sessions are not armed here.
    pub(super) fn from_record(group_id: &str, record: Option<&ClassicGroup>) -> Self {
        let mut g = LiveGroup {
            group_id: group_id.to_string(),
            state: ClassicState::Empty,
            previous: ClassicState::Empty,
            generation: 0,
            protocol_type: None,
            protocol: None,
            leader: None,
            members: BTreeMap::new(),
            pending: BTreeMap::new(),
            pending_sync: BTreeSet::new(),
            join_timer: None,
            sync_timer: None,
            new_member_added: false,
            empty_retry_ms: None,
            assignment_in_flight: None,
            members_bytes: 0,
            next_seq: 0,
            persists_in_flight: 0,
            next_version: 0,
        };
        let Some(r) = record else { return g };
        g.generation = r.generation;
        g.protocol_type = (!r.protocol_type.is_empty()).then(|| r.protocol_type.clone());
        if !r.has_members() {
            return g;
        }
        g.state = ClassicState::Stable;
        g.protocol = r.protocol.clone();
        // The leader first, so it stays the first in line.
        let leader = r.leader.as_ref().and_then(|l| r.members.get(l));
        for m in leader.into_iter().chain(r.members.values().filter(|m| Some(&m.member_id) != r.leader.as_ref())) {
            g.insert(m.clone(), &r.protocol_type, None, false);
        }
        g.leader = r.leader.clone().filter(|l| g.members.contains_key(l)).or_else(|| g.first_member());
        g
    }

    /// True when nothing about the group needs memory: its record (if any) says all.
    pub(super) fn is_idle(&self) -> bool {
        self.state == ClassicState::Empty
            && self.pending.is_empty()
            && self.persists_in_flight == 0
            && self.join_timer.is_none()
            && self.empty_retry_ms.is_none()
    }

    fn first_member(&self) -> Option<String> {
        self.members.values().min_by_key(|m| m.seq).map(|m| m.id().to_string())
    }

    /// Adds `record` as a member with `protocol_type` (the group takes it when this is its first
    /// member; the member leads when nobody does). The caller has checked
    /// [`Self::inconsistency`].
    pub(super) fn insert(
        &mut self,
        record: ClassicMember,
        protocol_type: &str,
        awaiting_join: Option<Handle>,
        is_new: bool,
    ) {
        if self.members.is_empty() {
            self.protocol_type = Some(protocol_type.to_string());
        }
        let id = record.member_id.clone();
        self.members_bytes += member_bytes(&record);
        let member = LiveMember {
            record,
            awaiting_join,
            awaiting_sync: None,
            session_deadline_ms: None,
            is_new,
            seq: self.next_seq,
        };
        self.next_seq += 1;
        self.pending.remove(&id);
        self.leader.get_or_insert_with(|| id.clone());
        if let Some(replaced) = self.members.insert(id, member) {
            self.members_bytes = self.members_bytes.saturating_sub(member_bytes(&replaced.record));
        }
    }

    /// Member `member_id` rejoined (or restarted, if static) with `protocols` and timeouts.
    pub(super) fn update_member(
        &mut self,
        member_id: &str,
        protocols: Vec<Protocol>,
        session_timeout_ms: u32,
        rebalance_timeout_ms: u32,
    ) {
        let Some(m) = self.members.get_mut(member_id) else { return };
        self.members_bytes =
            self.members_bytes.saturating_sub(protocols_bytes(&m.record.protocols)) + protocols_bytes(&protocols);
        m.record.protocols = protocols;
        m.record.session_timeout_ms = session_timeout_ms;
        m.record.rebalance_timeout_ms = rebalance_timeout_ms;
    }

    /// Removes member `member_id` (a new leader is the earliest member left).
    pub(super) fn remove(&mut self, member_id: &str) -> Option<LiveMember> {
        let removed = self.members.remove(member_id);
        if let Some(m) = &removed {
            self.members_bytes = self.members_bytes.saturating_sub(member_bytes(&m.record));
        }
        self.pending.remove(member_id);
        self.pending_sync.remove(member_id);
        if self.leader.as_deref() == Some(member_id) {
            self.leader = self.first_member();
        }
        removed
    }

    /// Gives static member `old_id` the id `new_id`, keeping everything else (its assignment,
    /// its place in line, its leadership); it has no parked requests and is not new (as Kafka's
    /// `replaceStaticMember`). Returns the member as it was.
    pub(super) fn rename(&mut self, old_id: &str, new_id: &str) -> Option<LiveMember> {
        let old = self.members.remove(old_id)?;
        let mut renamed = old.clone();
        renamed.record.member_id = new_id.to_string();
        renamed.awaiting_join = None;
        renamed.awaiting_sync = None;
        renamed.is_new = false;
        if self.leader.as_deref() == Some(old_id) {
            self.leader = Some(new_id.to_string());
        }
        if self.pending_sync.remove(old_id) {
            self.pending_sync.insert(new_id.to_string());
        }
        self.members.insert(new_id.to_string(), renamed);
        Some(old)
    }

    /// The member id holding static instance id `instance_id`.
    pub(super) fn static_member(&self, instance_id: &str) -> Option<&str> {
        self.members.values().find(|m| m.record.instance_id.as_deref() == Some(instance_id)).map(LiveMember::id)
    }

    /// Kafka's `validateMember`: an instance id must be held by `member_id`, and `member_id` must
    /// be a member.
    pub(super) fn validate_member(&self, member_id: &str, instance_id: Option<&str>) -> Result<()> {
        if let Some(instance) = instance_id {
            match self.static_member(instance) {
                None => return Err(self.unknown_member(member_id)),
                Some(holder) if holder != member_id => {
                    return Err(CoordinatorError::FencedInstanceId {
                        group_id: self.group_id.clone(),
                        instance_id: instance.to_string(),
                        member_id: member_id.to_string(),
                    })
                }
                Some(_) => {}
            }
        }
        if self.members.contains_key(member_id) {
            Ok(())
        } else {
            Err(self.unknown_member(member_id))
        }
    }

    pub(super) fn unknown_member(&self, member_id: &str) -> CoordinatorError {
        CoordinatorError::UnknownMemberId { group_id: self.group_id.clone(), member_id: member_id.to_string() }
    }

    /// Why a member with `protocol_type` and `protocols` cannot be in the group (`None`: it can).
    /// An empty group takes any non-empty protocol type and protocol list; otherwise the type must
    /// be the group's and one of the protocols supported by every member (Kafka's
    /// `supportsProtocols`; a rejoining member's old protocols count among the members').
    pub(super) fn inconsistency(&self, protocol_type: &str, protocols: &[Protocol]) -> Option<String> {
        if protocol_type.is_empty() {
            return Some("a member must name its protocol type (consumer, connect, ...)".into());
        }
        if protocols.is_empty() {
            return Some("a member must list at least one protocol".into());
        }
        if self.state == ClassicState::Empty {
            return None;
        }
        let group_type = self.protocol_type.as_deref().unwrap_or_default();
        if group_type != protocol_type {
            return Some(format!(
                "the group's members use protocol type {group_type:?}; this member uses {protocol_type:?}"
            ));
        }
        if protocols.iter().any(|p| self.supported_by_all(&p.name)) {
            return None;
        }
        let names: Vec<&str> = protocols.iter().map(|p| p.name.as_str()).collect();
        Some(format!("none of the member's protocols {names:?} is supported by every member of the group"))
    }

    fn supported_by_all(&self, name: &str) -> bool {
        self.members.values().all(|m| m.record.protocols.iter().any(|p| p.name == name))
    }

    /// The protocol for the next generation (Kafka's `selectProtocol`): among the protocols every
    /// member supports, each member votes for the one it prefers most, and the most votes win.
    /// Kafka breaks a tie arbitrarily (hash order); here the leader's preference breaks it, so
    /// every replay of the same joins selects the same protocol.
    pub(super) fn select_protocol(&self) -> Option<String> {
        let mut votes: BTreeMap<&str, usize> = BTreeMap::new();
        for m in self.members.values() {
            if let Some(p) = m.record.protocols.iter().find(|p| self.supported_by_all(&p.name)) {
                *votes.entry(p.name.as_str()).or_default() += 1;
            }
        }
        let leader = self.leader.as_ref().and_then(|l| self.members.get(l)).or_else(|| self.members.values().next())?;
        let mut best: Option<(&str, usize)> = None;
        for p in &leader.record.protocols {
            let n = votes.get(p.name.as_str()).copied().unwrap_or(0);
            if n > 0 && best.is_none_or(|(_, most)| n > most) {
                best = Some((p.name.as_str(), n));
            }
        }
        best.map(|(name, _)| name.to_string())
    }

    /// The largest rebalance timeout of the members (Kafka's group rebalance timeout).
    pub(super) fn rebalance_timeout_ms(&self) -> u32 {
        self.members.values().map(|m| m.record.rebalance_timeout_ms).max().unwrap_or(0)
    }

    /// Every member has rejoined and no handed-out member id is still unused.
    pub(super) fn all_joined(&self) -> bool {
        self.pending.is_empty() && self.members.values().all(|m| m.awaiting_join.is_some())
    }

    /// Members that have not rejoined, in the order they were added.
    pub(super) fn not_rejoined(&self) -> Vec<&LiveMember> {
        let mut v: Vec<&LiveMember> = self.members.values().filter(|m| m.awaiting_join.is_none()).collect();
        v.sort_by_key(|m| m.seq);
        v
    }

    /// Kafka's `maybeElectNewJoinedLeader`: keeps the leader if it rejoined, else makes the
    /// earliest rejoined member the leader. False when the group has no leader or nobody rejoined.
    pub(super) fn elect_joined_leader(&mut self) -> bool {
        let Some(leader) = &self.leader else { return false };
        if self.members.get(leader).is_some_and(|m| m.awaiting_join.is_some()) {
            return true;
        }
        let joined =
            self.members.values().filter(|m| m.awaiting_join.is_some()).min_by_key(|m| m.seq).map(LiveMember::id);
        match joined {
            Some(id) => {
                self.leader = Some(id.to_string());
                true
            }
            None => false,
        }
    }

    /// Every member with its metadata for the selected protocol, for the leader's answer.
    pub(super) fn joined_members(&self) -> Vec<JoinedMember> {
        let protocol = self.protocol.as_deref().unwrap_or_default();
        let mut members: Vec<&LiveMember> = self.members.values().collect();
        members.sort_by_key(|m| m.seq);
        members
            .into_iter()
            .map(|m| JoinedMember {
                member_id: m.id().to_string(),
                instance_id: m.record.instance_id.clone(),
                metadata: m.record.metadata(protocol),
            })
            .collect()
    }

    /// The group as a record, at `now_ms`; with `assignments`, every member's assignment is taken
    /// from it (empty when missing), else it is the member's current one.
    pub(super) fn to_record(
        &self,
        now_ms: i64,
        assignments: Option<&BTreeMap<String, Bytes>>,
    ) -> pb::ClassicGroupState {
        let members = self
            .members
            .values()
            .map(|m| {
                let mut record = member_to_proto(&m.record);
                if let Some(a) = assignments {
                    record.assignment = a.get(m.id()).cloned().unwrap_or_default();
                }
                record
            })
            .collect();
        pb::ClassicGroupState {
            group_id: self.group_id.clone(),
            version: 0,
            generation: self.generation,
            protocol_type: self.protocol_type.clone().unwrap_or_default(),
            protocol: self.protocol.clone().unwrap_or_default(),
            leader: self.leader.clone().unwrap_or_default(),
            members,
            updated_ms: now_ms,
        }
    }

    /// Moves to `state`, remembering the one before.
    pub(super) fn transition(&mut self, state: ClassicState) {
        self.previous = self.state;
        self.state = state;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(id: &str, protocols: &[&str]) -> ClassicMember {
        ClassicMember {
            member_id: id.into(),
            protocols: protocols.iter().map(|p| Protocol { name: p.to_string(), metadata: Bytes::new() }).collect(),
            rebalance_timeout_ms: 1_000,
            ..Default::default()
        }
    }

    fn group(members: &[(&str, &[&str])]) -> LiveGroup {
        let mut g = LiveGroup::from_record("g", None);
        for (id, protocols) in members {
            g.insert(member(id, protocols), "consumer", None, false);
        }
        g.state = ClassicState::Stable;
        g
    }

    #[test]
    fn the_protocol_with_most_first_votes_among_the_common_ones_is_selected() {
        // c is not supported by b: a and b vote range, x votes roundrobin.
        let g = group(&[
            ("a", &["c", "range", "roundrobin"]),
            ("b", &["range", "roundrobin"]),
            ("x", &["roundrobin", "range", "c"]),
        ]);
        assert_eq!(g.select_protocol().as_deref(), Some("range"));
        // A tie goes to the leader's preference (a leads: it was added first).
        let g = group(&[("a", &["roundrobin", "range"]), ("b", &["range", "roundrobin"])]);
        assert_eq!(g.select_protocol().as_deref(), Some("roundrobin"));
        let p = |n: &str| Protocol { name: n.into(), metadata: Bytes::new() };
        assert!(g.inconsistency("consumer", &[p("sticky"), p("range")]).is_none());
        assert!(g.inconsistency("consumer", &[p("sticky")]).is_some(), "no protocol in common");
        assert!(g.inconsistency("connect", &[p("range")]).is_some(), "another protocol type");
        assert!(g.inconsistency("", &[p("range")]).is_some());
        assert!(g.inconsistency("consumer", &[]).is_some());
    }

    #[test]
    fn the_byte_count_follows_the_members_and_bounds_the_stored_record() {
        use prost::Message;
        let long = |c: char| c.to_string().repeat(MAX_ID_BYTES);
        let mut g = group(&[("a", &["range"]), ("b", &["range", "sticky"]), ("c", &["range"])]);
        let sum = |g: &LiveGroup| g.members.values().map(|m| member_bytes(&m.record)).sum::<usize>();
        assert_eq!(g.members_bytes, sum(&g));
        let big = Protocol { name: long('p'), metadata: Bytes::from(vec![1; 100_000]) };
        g.update_member("a", vec![big.clone(), Protocol { name: "range".into(), metadata: Bytes::new() }], 1, 1);
        g.rename("b", &long('b'));
        g.remove("c");
        assert_eq!(g.members_bytes, sum(&g), "kept up to date");
        // Every field at its longest.
        g.group_id = long('g');
        g.protocol_type = Some(long('t'));
        g.protocol = Some(long('p'));
        g.leader = Some(long('b'));
        g.generation = -1;
        for m in g.members.values_mut() {
            m.record.instance_id = Some(long('i'));
            m.record.client_id = long('c');
            m.record.client_host = long('h');
            m.record.session_timeout_ms = u32::MAX;
            m.record.rebalance_timeout_ms = u32::MAX;
        }
        let assignments: BTreeMap<String, Bytes> =
            g.members.keys().map(|id| (id.clone(), Bytes::from(vec![2; 70_000]))).collect();
        let record = g.to_record(i64::MIN, Some(&assignments));
        let bound = RECORD_HEADER_BYTES + sum(&g) + 2 * 70_000;
        assert!(record.encoded_len() <= bound, "{} > {bound}", record.encoded_len());
    }

    #[test]
    fn the_leader_moves_to_the_earliest_member_left() {
        let mut g = group(&[("z", &["range"]), ("a", &["range"]), ("m", &["range"])]);
        assert_eq!(g.leader.as_deref(), Some("z"));
        g.remove("z");
        assert_eq!(g.leader.as_deref(), Some("a"), "a was added before m");
        g.members.get_mut("m").unwrap().awaiting_join = Some(Handle(1));
        assert!(g.elect_joined_leader());
        assert_eq!(g.leader.as_deref(), Some("m"), "a did not rejoin, m did");
        assert_eq!(g.not_rejoined().len(), 1);
    }
}
