//! One consumer group's replicated state (KIP-848): the group epoch, the target assignment and
//! its epoch, and every member with its epoch and current assignment — and how a
//! [`pb::ConsumerGroupChange`] is applied to it.
//!
//! Three epochs, as in Kafka:
//! * the **group epoch** moves whenever what the assignment depends on moves: a member joins or
//!   leaves, a subscription changes, a subscribed topic gains partitions;
//! * the **target epoch** is the group epoch the target assignment was last computed at; the
//!   group is *assigning* while it is behind;
//! * a **member epoch** reaches the target epoch only once the member has revoked every partition
//!   outside its target, so two members never own one partition in overlapping epochs.
//!
//! Applying is bookkeeping only: every decision was made on the coordinator and is carried in the
//! change, which applies only if the group is still at the version it was decided from.

use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;
use rill_proto::coordinator as pb;

use super::assignor::{Assignor, TopicPartitions};
use super::pattern::TopicPattern;

/// The member epoch a member sends to leave the group.
pub const LEAVE_EPOCH: i32 = -1;
/// The member epoch a static member sends to leave for a while: its partitions are kept for it
/// until its session times out.
pub const STATIC_LEAVE_EPOCH: i32 = -2;

/// How a group moves partitions between members.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RebalanceMode {
    /// Only the partitions that move are revoked (KIP-848).
    #[default]
    Cooperative,
    /// Every member revokes everything before any gets its new assignment.
    Eager,
}

impl RebalanceMode {
    /// The mode's name in requests and the CLI.
    pub fn name(self) -> &'static str {
        match self {
            Self::Cooperative => "cooperative",
            Self::Eager => "eager",
        }
    }

    /// The mode named `name`.
    pub fn parse(name: &str) -> Option<Self> {
        match name {
            "cooperative" => Some(Self::Cooperative),
            "eager" => Some(Self::Eager),
            _ => None,
        }
    }

    fn from_proto(v: i32) -> Self {
        if v == pb::RebalanceMode::Eager as i32 {
            Self::Eager
        } else {
            Self::Cooperative
        }
    }

    fn to_proto(self) -> i32 {
        match self {
            Self::Cooperative => pb::RebalanceMode::Cooperative as i32,
            Self::Eager => pb::RebalanceMode::Eager as i32,
        }
    }
}

/// Where a member is in reconciling its current assignment with its target.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MemberState {
    /// Owns its whole target at the target epoch.
    #[default]
    Stable,
    /// Must revoke its `revoking` partitions before its epoch can advance.
    UnrevokedPartitions,
    /// At the target epoch, waiting for partitions that other members still own.
    UnreleasedPartitions,
}

impl MemberState {
    /// The state's name, for describe.
    pub fn name(self) -> &'static str {
        match self {
            Self::Stable => "stable",
            Self::UnrevokedPartitions => "unrevoked-partitions",
            Self::UnreleasedPartitions => "unreleased-partitions",
        }
    }

    fn from_proto(v: i32) -> Self {
        if v == pb::MemberState::UnrevokedPartitions as i32 {
            Self::UnrevokedPartitions
        } else if v == pb::MemberState::UnreleasedPartitions as i32 {
            Self::UnreleasedPartitions
        } else {
            Self::Stable
        }
    }

    fn to_proto(self) -> i32 {
        match self {
            Self::Stable => pb::MemberState::Stable as i32,
            Self::UnrevokedPartitions => pb::MemberState::UnrevokedPartitions as i32,
            Self::UnreleasedPartitions => pb::MemberState::UnreleasedPartitions as i32,
        }
    }
}

/// A topic as the target assignment saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SubscribedTopic {
    /// The topic's id (a topic re-created under its name is another topic).
    pub topic_id: [u8; 16],
    /// Its partition count.
    pub partitions: u32,
}

/// One member of a consumer group.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Member {
    /// Its id (chosen by the client, or by the coordinator on a first join without one).
    pub member_id: String,
    /// A static member's `group.instance.id`.
    pub instance_id: Option<String>,
    /// Its rack, for rack-aware assignors.
    pub rack_id: Option<String>,
    /// The client's `client.id`.
    pub client_id: String,
    /// Where the client connected from.
    pub client_host: String,
    /// The topics it subscribes to by name.
    pub subscribed: BTreeSet<String>,
    /// The pattern subscribing it to every topic whose whole name it matches, besides those
    /// named ([`super::pattern`]; checked when the member sent it).
    pub subscribed_regex: Option<String>,
    /// The assignor it asked for (`None`: the group's default).
    pub server_assignor: Option<Assignor>,
    /// The rebalance mode it asked for.
    pub mode: RebalanceMode,
    /// How long it may take to revoke partitions before it is fenced.
    pub rebalance_timeout_ms: u32,
    /// Its epoch ([`STATIC_LEAVE_EPOCH`] while a static member is away).
    pub epoch: i32,
    /// Its epoch before the last change: a heartbeat whose answer was lost may still carry it.
    pub previous_epoch: i32,
    /// Where it is in reconciliation.
    pub state: MemberState,
    /// The partitions it owns (may consume and commit).
    pub assigned: TopicPartitions,
    /// Partitions it still owns but must give up before its epoch advances.
    pub revoking: TopicPartitions,
}

impl Member {
    /// True for a static member that left and may come back.
    pub fn is_away(&self) -> bool {
        self.epoch == STATIC_LEAVE_EPOCH
    }

    /// True when it owns `topic`/`partition` now: assigned, or still being revoked.
    pub fn owns(&self, topic: &str, partition: u32) -> bool {
        contains(&self.assigned, topic, partition) || contains(&self.revoking, topic, partition)
    }
}

/// True when `set` holds `topic`/`partition`.
pub fn contains(set: &TopicPartitions, topic: &str, partition: u32) -> bool {
    set.get(topic).is_some_and(|p| p.contains(&partition))
}

/// The number of partitions in `set`.
pub fn count(set: &TopicPartitions) -> usize {
    set.values().map(BTreeSet::len).sum()
}

/// The group's state as describe shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GroupState {
    /// No members.
    Empty,
    /// The target assignment is behind the group epoch.
    Assigning,
    /// Some member has not reached the target epoch with its whole target.
    Reconciling,
    /// Every member owns its whole target at the target epoch.
    Stable,
}

impl GroupState {
    /// The state's name, for describe.
    pub fn name(self) -> &'static str {
        match self {
            Self::Empty => "empty",
            Self::Assigning => "assigning",
            Self::Reconciling => "reconciling",
            Self::Stable => "stable",
        }
    }
}

/// One consumer group.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ConsumerGroup {
    /// The group's id.
    pub group_id: String,
    /// Bumped by every applied change: the compare-and-set key of the next change.
    pub version: u64,
    /// The group epoch.
    pub epoch: i32,
    /// The group epoch the target assignment was computed at.
    pub target_epoch: i32,
    /// The assignor the target was computed with.
    pub assignor: Assignor,
    /// How partitions move.
    pub mode: RebalanceMode,
    /// The subscribed topics as the target saw them.
    pub subscribed_topics: BTreeMap<String, SubscribedTopic>,
    /// The coordinator's clock when the group was created.
    pub created_ms: i64,
    /// The coordinator's clock when the group lost its last member; 0 while it has members.
    pub empty_since_ms: i64,
    /// Members by id.
    pub members: BTreeMap<String, Member>,
    /// The target assignment by member id.
    pub target: BTreeMap<String, TopicPartitions>,
}

impl ConsumerGroup {
    /// The topics `member` subscribes to as the group's assignment sees them: those it names,
    /// and those of the group's subscribed topics its pattern matches.
    pub fn subscription_of(&self, member: &Member) -> BTreeSet<String> {
        let mut topics = member.subscribed.clone();
        if let Some(pattern) = member.subscribed_regex.as_deref().and_then(|p| TopicPattern::cached(p).ok()) {
            topics.extend(self.subscribed_topics.keys().filter(|t| pattern.matches(t)).cloned());
        }
        topics
    }

    /// True when some member subscribes to `topic` (by name, or by a pattern that matched it
    /// at the group's last assignment).
    pub fn is_subscribed(&self, topic: &str) -> bool {
        self.members.values().any(|m| self.subscription_of(m).contains(topic))
    }

    /// The group's state.
    pub fn state(&self) -> GroupState {
        if self.members.is_empty() {
            GroupState::Empty
        } else if self.target_epoch < self.epoch {
            GroupState::Assigning
        } else if self
            .members
            .values()
            .any(|m| !m.is_away() && (m.epoch != self.target_epoch || m.state != MemberState::Stable))
        {
            GroupState::Reconciling
        } else {
            GroupState::Stable
        }
    }

    /// The member with static instance id `instance_id`.
    pub fn member_by_instance(&self, instance_id: &str) -> Option<&Member> {
        self.members.values().find(|m| m.instance_id.as_deref() == Some(instance_id))
    }

    /// The member's target assignment (empty when it has none).
    pub fn target_of(&self, member_id: &str) -> TopicPartitions {
        self.target.get(member_id).cloned().unwrap_or_default()
    }

    /// Who owns each partition now (assigned or being revoked), except `except`: a partition is
    /// free for a member only when no other member owns it.
    pub fn owners(&self, except: &str) -> BTreeMap<(String, u32), String> {
        let mut owners = BTreeMap::new();
        for m in self.members.values().filter(|m| m.member_id != except) {
            for set in [&m.assigned, &m.revoking] {
                for (topic, partitions) in set {
                    for p in partitions {
                        owners.insert((topic.clone(), *p), m.member_id.clone());
                    }
                }
            }
        }
        owners
    }

    /// The group's metadata as stored.
    pub fn meta_to_proto(&self) -> pb::ConsumerGroupMeta {
        pb::ConsumerGroupMeta {
            group_id: self.group_id.clone(),
            epoch: self.epoch,
            target_epoch: self.target_epoch,
            assignor: self.assignor.name().to_string(),
            mode: self.mode.to_proto(),
            subscribed_topics: self
                .subscribed_topics
                .iter()
                .map(|(topic, t)| pb::SubscribedTopic {
                    topic: topic.clone(),
                    topic_id: Bytes::copy_from_slice(&t.topic_id),
                    partitions: t.partitions,
                })
                .collect(),
            created_ms: self.created_ms,
            empty_since_ms: self.empty_since_ms,
        }
    }

    fn set_meta(&mut self, meta: &pb::ConsumerGroupMeta) {
        self.epoch = meta.epoch;
        self.target_epoch = meta.target_epoch;
        self.assignor = Assignor::parse(&meta.assignor).unwrap_or_default();
        self.mode = RebalanceMode::from_proto(meta.mode);
        self.created_ms = meta.created_ms;
        self.empty_since_ms = meta.empty_since_ms;
        self.subscribed_topics = meta
            .subscribed_topics
            .iter()
            .filter_map(|t| {
                let topic_id = <[u8; 16]>::try_from(&t.topic_id[..]).ok()?;
                Some((t.topic.clone(), SubscribedTopic { topic_id, partitions: t.partitions }))
            })
            .collect();
    }

    /// The whole group as stored in a snapshot.
    pub fn to_proto(&self) -> pb::ConsumerGroupState {
        pb::ConsumerGroupState {
            version: self.version,
            meta: Some(self.meta_to_proto()),
            members: self.members.values().map(member_to_proto).collect(),
            targets: self.target.iter().map(|(id, t)| target_to_proto(id, t)).collect(),
        }
    }

    /// A group read back from a snapshot.
    pub fn from_proto(s: &pb::ConsumerGroupState) -> Option<Self> {
        let meta = s.meta.as_ref()?;
        let mut g = ConsumerGroup { group_id: meta.group_id.clone(), version: s.version, ..Default::default() };
        g.set_meta(meta);
        g.members = s.members.iter().map(|m| (m.member_id.clone(), member_from_proto(m))).collect();
        g.target = s.targets.iter().map(|t| (t.member_id.clone(), partitions_from_proto(&t.partitions))).collect();
        Some(g)
    }
}

/// What applying a compare-and-set change to a group (KIP-848 or classic) did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Applied {
    /// The change took effect.
    Changed,
    /// The group was not at the version the change was decided from: nothing changed.
    Conflict,
}

/// Every consumer group of one `__consumer_offsets` partition.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ConsumerGroups {
    groups: BTreeMap<String, ConsumerGroup>,
}

impl ConsumerGroups {
    /// The group `group_id`.
    pub fn get(&self, group_id: &str) -> Option<&ConsumerGroup> {
        self.groups.get(group_id)
    }

    /// Every group, by id.
    pub fn iter(&self) -> impl Iterator<Item = &ConsumerGroup> {
        self.groups.values()
    }

    /// Number of groups.
    pub fn len(&self) -> usize {
        self.groups.len()
    }

    /// True when there are none.
    pub fn is_empty(&self) -> bool {
        self.groups.is_empty()
    }

    /// True when `group_id` exists with members.
    pub fn has_members(&self, group_id: &str) -> bool {
        self.groups.get(group_id).is_some_and(|g| !g.members.is_empty())
    }

    /// Forgets the group `group_id` (deleted while it had no members).
    pub(crate) fn remove(&mut self, group_id: &str) {
        self.groups.remove(group_id);
    }

    /// Applies `change` if the group is at the version it was decided from.
    pub fn apply(&mut self, change: &pb::ConsumerGroupChange) -> Applied {
        let current = self.groups.get(&change.group_id).map_or(0, |g| g.version);
        if current != change.expect_version {
            return Applied::Conflict;
        }
        if change.delete_group {
            self.groups.remove(&change.group_id);
            return Applied::Changed;
        }
        let group = self
            .groups
            .entry(change.group_id.clone())
            .or_insert_with(|| ConsumerGroup { group_id: change.group_id.clone(), ..Default::default() });
        if let Some(meta) = &change.meta {
            group.set_meta(meta);
        }
        for id in &change.removed_members {
            group.members.remove(id);
        }
        for m in &change.upsert_members {
            group.members.insert(m.member_id.clone(), member_from_proto(m));
        }
        for id in &change.removed_targets {
            group.target.remove(id);
        }
        for t in &change.upsert_targets {
            group.target.insert(t.member_id.clone(), partitions_from_proto(&t.partitions));
        }
        group.version = current + 1;
        Applied::Changed
    }

    /// Every group as stored in a snapshot.
    pub fn to_proto(&self) -> Vec<pb::ConsumerGroupState> {
        self.groups.values().map(ConsumerGroup::to_proto).collect()
    }

    /// The groups of a snapshot (a group without metadata is skipped, on every replica alike).
    pub fn from_proto(groups: &[pb::ConsumerGroupState]) -> Self {
        Self { groups: groups.iter().filter_map(ConsumerGroup::from_proto).map(|g| (g.group_id.clone(), g)).collect() }
    }
}

/// A member as stored.
pub fn member_to_proto(m: &Member) -> pb::ConsumerMember {
    pb::ConsumerMember {
        member_id: m.member_id.clone(),
        instance_id: m.instance_id.clone(),
        rack_id: m.rack_id.clone(),
        client_id: m.client_id.clone(),
        client_host: m.client_host.clone(),
        subscribed_topics: m.subscribed.iter().cloned().collect(),
        subscribed_regex: m.subscribed_regex.clone(),
        server_assignor: m.server_assignor.map(|a| a.name().to_string()).unwrap_or_default(),
        mode: m.mode.to_proto(),
        rebalance_timeout_ms: m.rebalance_timeout_ms,
        epoch: m.epoch,
        previous_epoch: m.previous_epoch,
        state: m.state.to_proto(),
        assigned: partitions_to_proto(&m.assigned),
        revoking: partitions_to_proto(&m.revoking),
    }
}

fn member_from_proto(m: &pb::ConsumerMember) -> Member {
    Member {
        member_id: m.member_id.clone(),
        instance_id: m.instance_id.clone(),
        rack_id: m.rack_id.clone(),
        client_id: m.client_id.clone(),
        client_host: m.client_host.clone(),
        subscribed: m.subscribed_topics.iter().cloned().collect(),
        subscribed_regex: m.subscribed_regex.clone(),
        server_assignor: Assignor::parse(&m.server_assignor),
        mode: RebalanceMode::from_proto(m.mode),
        rebalance_timeout_ms: m.rebalance_timeout_ms,
        epoch: m.epoch,
        previous_epoch: m.previous_epoch,
        state: MemberState::from_proto(m.state),
        assigned: partitions_from_proto(&m.assigned),
        revoking: partitions_from_proto(&m.revoking),
    }
}

/// A member's target as stored.
pub fn target_to_proto(member_id: &str, t: &TopicPartitions) -> pb::MemberTarget {
    pb::MemberTarget { member_id: member_id.to_string(), partitions: partitions_to_proto(t) }
}

/// Partitions as stored (topics without partitions are left out).
pub fn partitions_to_proto(set: &TopicPartitions) -> Vec<pb::TopicPartitionSet> {
    set.iter()
        .filter(|(_, p)| !p.is_empty())
        .map(|(topic, p)| pb::TopicPartitionSet { topic: topic.clone(), partitions: p.iter().copied().collect() })
        .collect()
}

/// Partitions read back (topics without partitions are left out).
pub fn partitions_from_proto(sets: &[pb::TopicPartitionSet]) -> TopicPartitions {
    let mut out = TopicPartitions::new();
    for s in sets.iter().filter(|s| !s.partitions.is_empty()) {
        out.entry(s.topic.clone()).or_default().extend(s.partitions.iter().copied());
    }
    out
}
