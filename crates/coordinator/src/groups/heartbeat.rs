//! The coordinator's decisions for a consumer group: what a `ConsumerGroupHeartbeat` (join,
//! heartbeat, leave) or an expired timer changes, as a [`pb::ConsumerGroupChange`] to propose,
//! and what to answer.
//!
//! Pure functions of the group's applied state, the request and the topics' metadata: the
//! coordinator's leader calls them, proposes the change (if any) and answers once it is
//! committed. A heartbeat that changes nothing proposes nothing. The target assignment is
//! computed here, on the leader, and its result is what gets replicated.
//!
//! ```text
//!  request ─► validate ─► leave? ─► remove the member (static: keep it away, partitions kept)
//!                      └► join / heartbeat: find or create the member, check its epoch
//!                          ─► new subscription, member, assignor or topic size? bump the group epoch
//!                          ─► group epoch ahead of the target? run the assignor: a new target
//!                          ─► reconcile the member toward its target ─► change + answer
//! ```

use std::collections::{BTreeMap, BTreeSet};

use rill_proto::coordinator as pb;

use super::assignor::{AssignmentSpec, Assignor, MemberSpec, TopicPartitions};
use super::classic::ClassicGroup;
use super::group::{
    contains, member_to_proto, target_to_proto, ConsumerGroup, Member, MemberState, RebalanceMode, SubscribedTopic,
    LEAVE_EPOCH, STATIC_LEAVE_EPOCH,
};
use super::pattern::TopicPattern;
use super::reconcile::reconcile;
use crate::error::{CoordinatorError, Result};
use crate::groups::validate_group_id;

/// How long a member may go without a heartbeat before it is removed, by default (Kafka's
/// `group.consumer.session.timeout.ms` default).
pub const SESSION_TIMEOUT_MS: u32 = 45_000;
/// How often members are asked to heartbeat, by default (Kafka's
/// `group.consumer.heartbeat.interval.ms`).
pub const HEARTBEAT_INTERVAL_MS: u32 = 5_000;

/// The coordinator's member timeouts (the node's `[groups]` settings).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timeouts {
    /// A member not heard from for this long is removed.
    pub session_ms: u32,
    /// How often members are asked to heartbeat.
    pub heartbeat_interval_ms: u32,
}

impl Default for Timeouts {
    fn default() -> Self {
        Self { session_ms: SESSION_TIMEOUT_MS, heartbeat_interval_ms: HEARTBEAT_INTERVAL_MS }
    }
}

/// Shortest interval asked of a member waiting for partitions (see [`Timeouts::interval_for`]).
pub const MIN_PENDING_HEARTBEAT_INTERVAL_MS: u32 = 100;

impl Timeouts {
    /// The heartbeat interval to ask of `member`. A member waiting for partitions that others
    /// still own (`unreleased-partitions`) learns they are free only by asking again, so it is
    /// asked to come back after a tenth of the interval (at least
    /// [`MIN_PENDING_HEARTBEAT_INTERVAL_MS`], never more than the interval): a moved partition
    /// then waits for its old owner's next heartbeat and a fraction of an interval, instead of
    /// up to one more whole interval. Only while it waits; the extra heartbeats are not
    /// replicated (nothing changes until the partitions are free).
    pub fn interval_for(&self, member: &Member) -> u32 {
        if member.state == MemberState::UnreleasedPartitions {
            (self.heartbeat_interval_ms / 10).max(MIN_PENDING_HEARTBEAT_INTERVAL_MS).min(self.heartbeat_interval_ms)
        } else {
            self.heartbeat_interval_ms
        }
    }
}
/// Longest rebalance timeout accepted: a member may take this long to revoke partitions.
pub const MAX_REBALANCE_TIMEOUT_MS: u32 = 60 * 60 * 1000;
/// Most members of one group: each is a record in the coordinator's state and its snapshot.
pub const MAX_MEMBERS_PER_GROUP: usize = 10_000;
/// Most topics one member may subscribe to.
pub const MAX_SUBSCRIBED_TOPICS: usize = 10_000;
/// Longest member id, instance id, rack id, client id or host accepted (bytes).
pub const MAX_ID_BYTES: usize = 255;

/// A `ConsumerGroupHeartbeat` as the coordinator sees it. Optional fields are `None` when the
/// member did not send them (unchanged since its last heartbeat).
#[derive(Debug, Clone, Default)]
pub struct HeartbeatRequest {
    /// The group.
    pub group_id: String,
    /// The member's id; empty on a first join lets the coordinator choose one.
    pub member_id: String,
    /// 0 to join, the current epoch to heartbeat, [`LEAVE_EPOCH`] or [`STATIC_LEAVE_EPOCH`] to leave.
    pub member_epoch: i32,
    /// `group.instance.id` of a static member.
    pub instance_id: Option<String>,
    /// The member's rack.
    pub rack_id: Option<String>,
    /// How long it may take to revoke partitions (required to join).
    pub rebalance_timeout_ms: Option<u32>,
    /// The topics it subscribes to by name (this or a pattern is required to join).
    pub subscribed_topics: Option<Vec<String>>,
    /// The pattern it subscribes by besides the names ([`super::pattern`]); `Some("")`: none
    /// any more.
    pub subscribed_regex: Option<String>,
    /// The server-side assignor it asks for.
    pub server_assignor: Option<String>,
    /// The rebalance mode it asks for.
    pub rebalance_mode: Option<String>,
    /// The partitions it owns now (required to join; sent again after each change).
    pub owned: Option<TopicPartitions>,
    /// The client's `client.id`.
    pub client_id: String,
    /// Where the client connected from.
    pub client_host: String,
}

/// The answer to a heartbeat.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeartbeatAnswer {
    /// The member's id (chosen by the coordinator on a first join without one).
    pub member_id: String,
    /// Its epoch now; [`LEAVE_EPOCH`] / [`STATIC_LEAVE_EPOCH`] after a leave.
    pub member_epoch: i32,
    /// When to heartbeat next.
    pub heartbeat_interval_ms: u32,
    /// The partitions it owns now — everything else it holds must be revoked — when that changed
    /// or it reported what it owns; `None`: unchanged.
    pub assignment: Option<TopicPartitions>,
}

/// What a request or a timer decided.
#[derive(Debug, Clone)]
pub struct Decision {
    /// The change to propose; `None` when nothing changed.
    pub change: Option<pb::ConsumerGroupChange>,
    /// The answer, once the change is committed.
    pub answer: HeartbeatAnswer,
    /// The member after the change (`None` when it left): the coordinator arms its timers from
    /// it (a member revoking partitions must finish within its rebalance timeout).
    pub member: Option<Member>,
}

/// The topics a group's members may be subscribed to, as the cluster's metadata has them at the
/// decision: record topics only (internal topics are never assigned to consumers).
pub trait TopicSource: Sync {
    /// The topic named `name`, when there is one.
    fn topic(&self, name: &str) -> Option<SubscribedTopic>;
    /// Every topic whose whole name `pattern` matches.
    fn matching(&self, pattern: &TopicPattern) -> Vec<(String, SubscribedTopic)>;
}

/// Topics by name: a fixed set of them (tests, tools).
impl TopicSource for BTreeMap<String, SubscribedTopic> {
    fn topic(&self, name: &str) -> Option<SubscribedTopic> {
        self.get(name).copied()
    }

    fn matching(&self, pattern: &TopicPattern) -> Vec<(String, SubscribedTopic)> {
        self.iter().filter(|(name, _)| pattern.matches(name)).map(|(name, t)| (name.clone(), *t)).collect()
    }
}

/// The topics a decision reads.
pub type TopicLookup<'a> = &'a dyn TopicSource;

/// Decides a `ConsumerGroupHeartbeat` against `group` (its applied state; `None` when it does
/// not exist). `now_ms` is the coordinator's clock; `new_member_id` makes an id for a member that
/// joins without one.
pub fn heartbeat(
    group: Option<&ConsumerGroup>,
    req: &HeartbeatRequest,
    topics: TopicLookup<'_>,
    timeouts: Timeouts,
    now_ms: i64,
    new_member_id: &mut dyn FnMut() -> String,
) -> Result<Decision> {
    validate(req)?;
    if req.member_epoch == LEAVE_EPOCH || req.member_epoch == STATIC_LEAVE_EPOCH {
        return leave(group, req, now_ms);
    }
    let mut g = match group {
        Some(g) => g.clone(),
        None if req.member_epoch == 0 => {
            ConsumerGroup { group_id: req.group_id.clone(), created_ms: now_ms, ..Default::default() }
        }
        None => return Err(unknown_member(req)),
    };
    let before = g.clone();
    let (mut member, mut bump) =
        if req.member_epoch == 0 { joining(&mut g, req, new_member_id)? } else { (current(&g, req)?, false) };

    // What the member says about itself.
    if let Some(topics) = &req.subscribed_topics {
        let subscribed: BTreeSet<String> = topics.iter().cloned().collect();
        bump |= subscribed != member.subscribed;
        member.subscribed = subscribed;
    }
    if let Some(source) = &req.subscribed_regex {
        let pattern = (!source.is_empty()).then(|| source.clone());
        if let Some(p) = &pattern {
            TopicPattern::cached(p)?;
        }
        bump |= pattern != member.subscribed_regex;
        member.subscribed_regex = pattern;
    }
    if let Some(name) = &req.server_assignor {
        let assignor = Assignor::parse(name).ok_or_else(|| CoordinatorError::UnsupportedAssignor(name.clone()))?;
        member.server_assignor = Some(assignor);
    }
    if let Some(name) = &req.rebalance_mode {
        member.mode = RebalanceMode::parse(name).ok_or_else(|| {
            CoordinatorError::InvalidRequest(format!("unknown rebalance mode {name:?}: cooperative or eager"))
        })?;
    }
    if let Some(ms) = req.rebalance_timeout_ms {
        member.rebalance_timeout_ms = ms;
    }
    if req.rack_id.is_some() {
        member.rack_id = req.rack_id.clone();
    }
    if !req.client_id.is_empty() {
        member.client_id = req.client_id.clone();
    }
    if !req.client_host.is_empty() {
        member.client_host = req.client_host.clone();
    }
    g.members.insert(member.member_id.clone(), member.clone());

    // What the group's assignment depends on.
    let subscribed_topics = subscribed_topics(&g, topics);
    bump |= subscribed_topics != g.subscribed_topics;
    g.subscribed_topics = subscribed_topics;
    let (assignor, mode) = preferred(&g);
    bump |= assignor != g.assignor || mode != g.mode;
    g.assignor = assignor;
    g.mode = mode;
    if bump {
        g.epoch += 1;
    }
    if g.target_epoch < g.epoch {
        g.target = assign(&g);
        g.target_epoch = g.epoch;
    }

    // The member moves toward its target.
    let owners = g.owners(&member.member_id);
    member = reconcile(&member, g.target_epoch, &g.target_of(&member.member_id), &owners, req.owned.as_ref(), g.mode);
    g.members.insert(member.member_id.clone(), member.clone());

    let previous = before.members.get(&member.member_id);
    let member_changed = previous != Some(&member);
    let answer = HeartbeatAnswer {
        member_id: member.member_id.clone(),
        member_epoch: member.epoch,
        heartbeat_interval_ms: timeouts.interval_for(&member),
        assignment: (member_changed || req.owned.is_some()).then(|| member.assigned.clone()),
    };
    let change = diff(group, &before, &g, now_ms);
    Ok(Decision { change, answer, member: Some(member) })
}

/// Whether a `ConsumerGroupHeartbeat` may use `group_id`, whose classic record is `classic`: not
/// while a classic group with members holds the id (`INCONSISTENT_GROUP_PROTOCOL`, as Kafka
/// answers a consumer of the other protocol). An empty classic group is taken over.
pub fn check_not_classic(classic: Option<&ClassicGroup>, group_id: &str) -> Result<()> {
    match classic {
        Some(g) if g.has_members() => Err(CoordinatorError::InconsistentGroupProtocol {
            group_id: group_id.to_string(),
            reason: format!(
                "the group id belongs to a classic group ({} protocol) with {} member(s); \
                 use group.protocol=classic, or another group id",
                if g.protocol_type.is_empty() { "unknown" } else { &g.protocol_type },
                g.members.len()
            ),
        }),
        _ => Ok(()),
    }
}

/// Decides what an expired timer does: the member `member_id`, if it is still at `epoch`, is
/// removed from the group (its session timed out, or it did not revoke within its rebalance
/// timeout) and the group epoch moves so its partitions are reassigned. `None`: nothing to do
/// (it heartbeated, left or moved on meanwhile). `now_ms` is the coordinator's clock.
pub fn fence(group: &ConsumerGroup, member_id: &str, epoch: i32, now_ms: i64) -> Option<pb::ConsumerGroupChange> {
    let member = group.members.get(member_id)?;
    if member.epoch != epoch {
        return None;
    }
    let mut g = group.clone();
    g.members.remove(member_id);
    g.epoch += 1;
    diff(Some(group), group, &g, now_ms)
}

/// A member leaving: [`LEAVE_EPOCH`] removes it at once (its partitions are reassigned);
/// [`STATIC_LEAVE_EPOCH`] keeps a static member's partitions for it until its session times out.
/// Leaving twice answers the same (a retried leave whose first answer was lost).
fn leave(group: Option<&ConsumerGroup>, req: &HeartbeatRequest, now_ms: i64) -> Result<Decision> {
    let answer = HeartbeatAnswer {
        member_id: req.member_id.clone(),
        member_epoch: req.member_epoch,
        heartbeat_interval_ms: 0,
        assignment: None,
    };
    let Some(group) = group else { return Ok(Decision { change: None, answer, member: None }) };
    let Some(member) = group.members.get(&req.member_id) else {
        return Ok(Decision { change: None, answer, member: None });
    };
    let mut g = group.clone();
    if req.member_epoch == STATIC_LEAVE_EPOCH {
        if member.instance_id.is_none() || member.instance_id != req.instance_id {
            return Err(CoordinatorError::InvalidRequest(format!(
                "member {:?} is not the static member {:?}: only a static member may leave with epoch -2",
                req.member_id, req.instance_id
            )));
        }
        if member.is_away() {
            // A retried static leave: already away, its reservation running.
            return Ok(Decision { change: None, answer, member: Some(member.clone()) });
        }
        let mut away = member.clone();
        away.previous_epoch = away.epoch;
        away.epoch = STATIC_LEAVE_EPOCH;
        g.members.insert(away.member_id.clone(), away.clone());
        return Ok(Decision { change: diff(Some(group), group, &g, now_ms), answer, member: Some(away) });
    }
    g.members.remove(&req.member_id);
    g.epoch += 1;
    Ok(Decision { change: diff(Some(group), group, &g, now_ms), answer, member: None })
}

/// The member joining with epoch 0, and whether that bumps the group epoch.
fn joining(
    g: &mut ConsumerGroup,
    req: &HeartbeatRequest,
    new_member_id: &mut dyn FnMut() -> String,
) -> Result<(Member, bool)> {
    if (req.subscribed_topics.is_none() && req.subscribed_regex.is_none()) || req.rebalance_timeout_ms.is_none() {
        return Err(CoordinatorError::InvalidRequest(
            "a member joining (epoch 0) must send its subscription (topic names or a pattern) and its rebalance timeout"
                .into(),
        ));
    }
    let member_id = if req.member_id.is_empty() { new_member_id() } else { req.member_id.clone() };
    if let Some(instance) = &req.instance_id {
        if let Some(old) = g.member_by_instance(instance).cloned() {
            if old.is_away() {
                // A static member back within its session: it takes over its predecessor's
                // partitions and target, so nothing is reassigned.
                let mut member = old.clone();
                member.member_id = member_id.clone();
                member.epoch = old.previous_epoch.max(0);
                if old.member_id != member_id {
                    g.members.remove(&old.member_id);
                    if let Some(target) = g.target.remove(&old.member_id) {
                        g.target.insert(member_id, target);
                    }
                }
                return Ok((member, false));
            }
            if old.member_id != member_id {
                return Err(CoordinatorError::UnreleasedInstanceId {
                    instance_id: instance.clone(),
                    member_id: old.member_id,
                });
            }
        }
    }
    if let Some(existing) = g.members.get(&member_id) {
        // The same member id joining again (a client restarted with it, or one that declared
        // its membership lost by its own clock while the coordinator still had it): it owns
        // nothing now, and it is a new incarnation. The group epoch moves, so the member's next
        // epoch is above every epoch it held before and anything stamped with one of those — a
        // background commit still in flight — is refused as stale. Without that, it would get
        // its old epoch back, and a commit of positions from before the loss could land after
        // the new incarnation read its committed offsets, moving them back.
        if existing.instance_id.is_some() && existing.instance_id != req.instance_id {
            return Err(CoordinatorError::InvalidRequest(format!(
                "member {member_id:?} is the static member {:?}",
                existing.instance_id
            )));
        }
        let mut member = existing.clone();
        member.previous_epoch = member.epoch;
        member.epoch = 0;
        member.assigned.clear();
        member.revoking.clear();
        member.state = MemberState::Stable;
        return Ok((member, true));
    }
    if g.members.len() >= MAX_MEMBERS_PER_GROUP {
        return Err(CoordinatorError::GroupMaxSizeReached { group_id: g.group_id.clone(), max: MAX_MEMBERS_PER_GROUP });
    }
    let member = Member { member_id, instance_id: req.instance_id.clone(), ..Default::default() };
    Ok((member, true))
}

/// The member sending a heartbeat at epoch > 0, after checking its epoch.
fn current(g: &ConsumerGroup, req: &HeartbeatRequest) -> Result<Member> {
    let member = g.members.get(&req.member_id).ok_or_else(|| unknown_member(req))?;
    if member.is_away() || (req.instance_id.is_some() && req.instance_id != member.instance_id) {
        return Err(fenced(req, member));
    }
    if req.member_epoch == member.epoch {
        return Ok(member.clone());
    }
    // The answer that moved it to its epoch was lost: it may heartbeat with the one before, if
    // what it owns shows it never acted on a later answer.
    let lost_answer = req.member_epoch == member.previous_epoch
        && req.owned.as_ref().is_some_and(|owned| {
            owned.iter().all(|(topic, ps)| ps.iter().all(|&p| contains(&member.assigned, topic, p)))
        });
    if lost_answer {
        Ok(member.clone())
    } else {
        Err(fenced(req, member))
    }
}

fn unknown_member(req: &HeartbeatRequest) -> CoordinatorError {
    CoordinatorError::UnknownMemberId { group_id: req.group_id.clone(), member_id: req.member_id.clone() }
}

fn fenced(req: &HeartbeatRequest, member: &Member) -> CoordinatorError {
    CoordinatorError::FencedMemberEpoch {
        member_id: req.member_id.clone(),
        sent: req.member_epoch,
        current: member.epoch,
    }
}

/// Every topic some member subscribes to that exists, by name or by pattern, as the metadata
/// has it now.
pub(crate) fn subscribed_topics(g: &ConsumerGroup, topics: TopicLookup<'_>) -> BTreeMap<String, SubscribedTopic> {
    let names: BTreeSet<&String> = g.members.values().flat_map(|m| m.subscribed.iter()).collect();
    let mut subscribed: BTreeMap<String, SubscribedTopic> =
        names.into_iter().filter_map(|name| Some((name.clone(), topics.topic(name)?))).collect();
    let patterns: BTreeSet<&str> = g.members.values().filter_map(|m| m.subscribed_regex.as_deref()).collect();
    for pattern in patterns.into_iter().filter_map(|p| TopicPattern::cached(p).ok()) {
        subscribed.extend(topics.matching(&pattern));
    }
    subscribed
}

/// The assignor and mode most members ask for (ties go to the default).
fn preferred(g: &ConsumerGroup) -> (Assignor, RebalanceMode) {
    let mut assignors: BTreeMap<&'static str, (usize, Assignor)> = BTreeMap::new();
    let mut eager = 0usize;
    for m in g.members.values() {
        let a = m.server_assignor.unwrap_or_default();
        assignors.entry(a.name()).or_insert((0, a)).0 += 1;
        if m.mode == RebalanceMode::Eager {
            eager += 1;
        }
    }
    let default = Assignor::default();
    let default_votes = assignors.get(default.name()).map_or(0, |(n, _)| *n);
    let assignor =
        assignors.values().filter(|(n, _)| *n > default_votes).max_by_key(|(n, _)| *n).map_or(default, |(_, a)| *a);
    let mode = if eager * 2 > g.members.len() { RebalanceMode::Eager } else { RebalanceMode::Cooperative };
    (assignor, mode)
}

/// The new target assignment of every member (away static members included: their partitions
/// wait for them).
fn assign(g: &ConsumerGroup) -> BTreeMap<String, TopicPartitions> {
    let spec = AssignmentSpec {
        members: g
            .members
            .values()
            .map(|m| {
                (
                    m.member_id.clone(),
                    MemberSpec {
                        instance_id: m.instance_id.clone(),
                        subscribed: g.subscription_of(m),
                        current: g.target_of(&m.member_id),
                    },
                )
            })
            .collect(),
        topics: g.subscribed_topics.iter().map(|(name, t)| (name.clone(), t.partitions)).collect(),
    };
    g.assignor.assign(&spec)
}

/// The change that turns `before` into `after` (`None` when they are equal); `existing` is the
/// applied group it was decided from (`None`: the change creates it). A group losing its last
/// member records `now_ms` as the time it became empty (its offsets' retention runs from there).
fn diff(
    existing: Option<&ConsumerGroup>,
    before: &ConsumerGroup,
    after: &ConsumerGroup,
    now_ms: i64,
) -> Option<pb::ConsumerGroupChange> {
    let mut after = after.clone();
    after.empty_since_ms = match (before.members.is_empty(), after.members.is_empty()) {
        (_, false) => 0,
        (false, true) => now_ms,
        (true, true) => before.empty_since_ms,
    };
    // A member's target goes with it.
    after.target.retain(|id, _| after.members.contains_key(id));
    let meta_changed = before.meta_to_proto() != after.meta_to_proto();
    let upsert_members: Vec<_> =
        after.members.values().filter(|m| before.members.get(&m.member_id) != Some(m)).map(member_to_proto).collect();
    let removed_members: Vec<_> =
        before.members.keys().filter(|id| !after.members.contains_key(*id)).cloned().collect();
    let upsert_targets: Vec<_> = after
        .target
        .iter()
        .filter(|(id, t)| before.target.get(*id) != Some(t))
        .map(|(id, t)| target_to_proto(id, t))
        .collect();
    let removed_targets: Vec<_> = before.target.keys().filter(|id| !after.target.contains_key(*id)).cloned().collect();
    let created = existing.is_none();
    if !created
        && !meta_changed
        && upsert_members.is_empty()
        && removed_members.is_empty()
        && upsert_targets.is_empty()
        && removed_targets.is_empty()
    {
        return None;
    }
    Some(pb::ConsumerGroupChange {
        group_id: after.group_id.clone(),
        expect_version: existing.map_or(0, |g| g.version),
        meta: Some(after.meta_to_proto()),
        upsert_members,
        removed_members,
        upsert_targets,
        removed_targets,
        delete_group: false,
    })
}

fn validate(req: &HeartbeatRequest) -> Result<()> {
    validate_group_id(&req.group_id)?;
    let invalid = |why: String| Err(CoordinatorError::InvalidRequest(why));
    if req.member_epoch < STATIC_LEAVE_EPOCH {
        return invalid(format!("member epoch {} is not valid (at least -2)", req.member_epoch));
    }
    if req.member_epoch != 0 && req.member_id.is_empty() {
        return invalid(format!("a heartbeat with member epoch {} must name its member id", req.member_epoch));
    }
    for (what, value) in [
        ("member id", Some(&req.member_id)),
        ("instance id", req.instance_id.as_ref()),
        ("rack id", req.rack_id.as_ref()),
        ("client id", Some(&req.client_id)),
        ("client host", Some(&req.client_host)),
    ] {
        if let Some(v) = value {
            if v.len() > MAX_ID_BYTES {
                return invalid(format!("the {what} is {} bytes long; at most {MAX_ID_BYTES}", v.len()));
            }
        }
    }
    if req.instance_id.as_deref() == Some("") {
        return invalid("an instance id, when sent, must not be empty".into());
    }
    if let Some(ms) = req.rebalance_timeout_ms {
        if ms == 0 || ms > MAX_REBALANCE_TIMEOUT_MS {
            return invalid(format!("rebalance timeout {ms} ms is out of range (1 to {MAX_REBALANCE_TIMEOUT_MS} ms)"));
        }
    }
    if let Some(topics) = &req.subscribed_topics {
        if topics.len() > MAX_SUBSCRIBED_TOPICS {
            return invalid(format!("{} subscribed topics; at most {MAX_SUBSCRIBED_TOPICS}", topics.len()));
        }
        if let Some(t) = topics.iter().find(|t| t.is_empty() || t.len() > MAX_ID_BYTES) {
            return invalid(format!("subscribed topic name {t:?} is empty or longer than {MAX_ID_BYTES} bytes"));
        }
    }
    if let Some(owned) = &req.owned {
        if owned.len() > MAX_SUBSCRIBED_TOPICS {
            return invalid(format!("{} owned topics; at most {MAX_SUBSCRIBED_TOPICS}", owned.len()));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::groups::group::{count, Applied, ConsumerGroups, GroupState};

    /// One coordinator's applied groups, driven the way clients drive it.
    struct Coordinator {
        groups: ConsumerGroups,
        topics: BTreeMap<String, u32>,
        next_id: u32,
    }

    /// A client's view of itself: its id, epoch and what it owns.
    #[derive(Debug, Clone, Default)]
    struct Client {
        member_id: String,
        epoch: i32,
        owned: TopicPartitions,
        instance_id: Option<String>,
        /// The pattern it subscribes by, sent when it joins.
        regex: Option<String>,
    }

    impl Coordinator {
        fn new(topics: &[(&str, u32)]) -> Self {
            Self {
                groups: ConsumerGroups::default(),
                topics: topics.iter().map(|(t, n)| (t.to_string(), *n)).collect(),
                next_id: 0,
            }
        }

        fn group(&self) -> &ConsumerGroup {
            self.groups.get("g").expect("the group exists")
        }

        fn decide(&mut self, req: &HeartbeatRequest) -> Result<Decision> {
            let lookup: BTreeMap<String, SubscribedTopic> = self
                .topics
                .iter()
                .map(|(name, &partitions)| (name.clone(), SubscribedTopic { topic_id: [7; 16], partitions }))
                .collect();
            let next = &mut self.next_id;
            let mut new_id = || {
                *next += 1;
                format!("gen-{next}")
            };
            heartbeat(self.groups.get(&req.group_id), req, &lookup, Timeouts::default(), 1_000, &mut new_id)
        }

        /// Decides and applies; checks that no partition has two owners afterwards.
        fn send(&mut self, req: &HeartbeatRequest) -> Result<HeartbeatAnswer> {
            let d = self.decide(req)?;
            if let Some(change) = &d.change {
                assert_eq!(self.groups.apply(change), Applied::Changed);
            }
            self.check_single_owners();
            Ok(d.answer)
        }

        fn check_single_owners(&self) {
            let Some(g) = self.groups.get("g") else { return };
            let mut seen = BTreeMap::new();
            for m in g.members.values() {
                for set in [&m.assigned, &m.revoking] {
                    for (t, ps) in set {
                        for p in ps {
                            if let Some(other) = seen.insert((t.clone(), *p), m.member_id.clone()) {
                                panic!("{t}-{p} owned by {other} and {}", m.member_id);
                            }
                        }
                    }
                }
            }
        }

        /// A client's heartbeat: joins at epoch 0, otherwise reports what it owns; applies the
        /// answer like a client (revokes what the assignment leaves out, takes what it adds).
        fn beat(&mut self, c: &mut Client, topics: &[&str]) -> Result<HeartbeatAnswer> {
            let joining = c.epoch == 0;
            let req = HeartbeatRequest {
                group_id: "g".into(),
                member_id: c.member_id.clone(),
                member_epoch: c.epoch,
                instance_id: c.instance_id.clone(),
                rebalance_timeout_ms: joining.then_some(30_000),
                subscribed_topics: joining.then(|| topics.iter().map(|t| t.to_string()).collect()),
                subscribed_regex: c.regex.clone().filter(|_| joining),
                owned: Some(c.owned.clone()),
                ..Default::default()
            };
            let answer = self.send(&req)?;
            c.member_id = answer.member_id.clone();
            c.epoch = answer.member_epoch;
            if let Some(assignment) = &answer.assignment {
                c.owned = assignment.clone();
            }
            Ok(answer)
        }

        /// Every client heartbeats until none changes (at most 20 rounds).
        fn settle(&mut self, clients: &mut [Client], topics: &[&str]) {
            for _ in 0..20 {
                let before = self.groups.clone();
                for c in clients.iter_mut() {
                    self.beat(c, topics).expect("heartbeat");
                }
                if self.groups == before {
                    return;
                }
            }
            panic!("the group did not settle: {:?}", self.group());
        }
    }

    /// Each client heartbeats with its own subscription until nothing changes.
    fn settle_each(co: &mut Coordinator, clients: &mut [(Client, &[&str])]) {
        for _ in 0..20 {
            let before = co.groups.clone();
            for (c, topics) in clients.iter_mut() {
                co.beat(c, topics).expect("heartbeat");
            }
            if co.groups == before {
                return;
            }
        }
        panic!("the group did not settle: {:?}", co.group());
    }

    fn topics_of(c: &Client) -> Vec<(&str, usize)> {
        c.owned.iter().filter(|(_, p)| !p.is_empty()).map(|(t, p)| (t.as_str(), p.len())).collect()
    }

    #[test]
    fn a_pattern_subscribes_a_member_to_every_matching_topic_and_to_those_created_later() {
        let mut co = Coordinator::new(&[("orders-eu", 2), ("orders-us", 2), ("payments", 2), ("my-orders-x", 2)]);
        let by_pattern = Client { regex: Some("^orders-.*".into()), ..Default::default() };
        let mut clients = vec![(by_pattern, &[][..])];
        settle_each(&mut co, &mut clients);
        assert_eq!(topics_of(&clients[0].0), [("orders-eu", 2), ("orders-us", 2)], "whole names only");
        assert_eq!(co.group().members.values().next().unwrap().subscribed_regex.as_deref(), Some("^orders-.*"));

        // A topic created later that matches joins the assignment at the next heartbeat.
        let epoch = co.group().epoch;
        co.topics.insert("orders-apac".into(), 2);
        settle_each(&mut co, &mut clients);
        assert_eq!(topics_of(&clients[0].0), [("orders-apac", 2), ("orders-eu", 2), ("orders-us", 2)]);
        assert!(co.group().epoch > epoch, "a new matching topic is a new group epoch");

        // A member subscribing by name gets only its topic; the pattern's member keeps its own.
        clients.push((Client::default(), &["payments"][..]));
        settle_each(&mut co, &mut clients);
        assert_eq!(topics_of(&clients[1].0), [("payments", 2)]);
        assert_eq!(topics_of(&clients[0].0).len(), 3);
        assert!(co.group().is_subscribed("orders-apac") && co.group().is_subscribed("payments"));
        assert!(!co.group().is_subscribed("my-orders-x"));

        // Narrowing the pattern gives up what it no longer matches; an empty one clears it.
        let (first, _) = &clients[0];
        let narrow = HeartbeatRequest {
            group_id: "g".into(),
            member_id: first.member_id.clone(),
            member_epoch: first.epoch,
            subscribed_regex: Some("orders-eu".into()),
            owned: Some(first.owned.clone()),
            ..Default::default()
        };
        co.send(&narrow).unwrap();
        settle_each(&mut co, &mut clients);
        assert_eq!(topics_of(&clients[0].0), [("orders-eu", 2)]);
        let (first, _) = &clients[0];
        let cleared = HeartbeatRequest { subscribed_regex: Some(String::new()), member_epoch: first.epoch, ..narrow };
        co.send(&cleared).unwrap();
        settle_each(&mut co, &mut clients);
        assert!(topics_of(&clients[0].0).is_empty(), "{:?}", clients[0].0);
        assert_eq!(co.group().members.values().filter(|m| m.subscribed_regex.is_some()).count(), 0);
    }

    #[test]
    fn a_pattern_that_does_not_compile_is_refused_and_changes_nothing() {
        let mut co = Coordinator::new(&[("t", 2)]);
        let mut bad = Client { regex: Some("orders-(".into()), ..Default::default() };
        let err = co.beat(&mut bad, &[]).unwrap_err();
        assert!(matches!(err, CoordinatorError::InvalidRegularExpression { .. }), "{err}");
        assert!(co.groups.get("g").is_none(), "no group made");
        // A join with neither names nor a pattern is refused too.
        let req = HeartbeatRequest {
            group_id: "g".into(),
            rebalance_timeout_ms: Some(30_000),
            owned: Some(TopicPartitions::new()),
            ..Default::default()
        };
        assert!(matches!(co.send(&req), Err(CoordinatorError::InvalidRequest(_))));
    }

    fn tp_all(topic: &str, partitions: u32) -> TopicPartitions {
        [(topic.to_string(), (0..partitions).collect())].into()
    }

    fn sizes(clients: &[Client]) -> Vec<usize> {
        let mut s: Vec<usize> = clients.iter().map(|c| count(&c.owned)).collect();
        s.sort_unstable();
        s
    }

    #[test]
    fn members_joining_one_by_one_share_six_partitions_cooperatively() {
        let mut co = Coordinator::new(&[("t", 6)]);
        let mut clients = vec![Client::default()];
        co.settle(&mut clients, &["t"]);
        assert_eq!(sizes(&clients), [6]);
        assert_eq!(co.group().state(), GroupState::Stable);
        let epoch_one = co.group().epoch;

        clients.push(Client::default());
        co.settle(&mut clients, &["t"]);
        assert_eq!(sizes(&clients), [3, 3]);
        clients.push(Client::default());
        // The first member keeps 2 of its 3 partitions through the third join: cooperative.
        let before: TopicPartitions = clients[0].owned.clone();
        co.settle(&mut clients, &["t"]);
        assert_eq!(sizes(&clients), [2, 2, 2]);
        let kept = before["t"].intersection(&clients[0].owned["t"]).count();
        assert_eq!(kept, 2, "only the partition that moved was revoked");
        assert_eq!(co.group().state(), GroupState::Stable);
        assert_eq!(co.group().epoch, epoch_one + 2, "one epoch per join");
        assert!(clients.iter().all(|c| c.epoch == co.group().epoch));

        // Eight members: six busy, two idle.
        clients.extend((0..5).map(|_| Client::default()));
        co.settle(&mut clients, &["t"]);
        assert_eq!(sizes(&clients), [0, 0, 1, 1, 1, 1, 1, 1]);
    }

    #[test]
    fn a_member_waiting_for_partitions_is_asked_to_come_back_sooner() {
        let mut co = Coordinator::new(&[("t", 4)]);
        let mut clients = vec![Client::default()];
        co.settle(&mut clients, &["t"]);
        // The newcomer's target is partly owned by the first member, which has not heard yet.
        let mut newcomer = Client::default();
        let answer = co.beat(&mut newcomer, &["t"]).unwrap();
        assert_eq!(co.group().members[&newcomer.member_id].state, MemberState::UnreleasedPartitions);
        assert_eq!(answer.heartbeat_interval_ms, HEARTBEAT_INTERVAL_MS / 10);
        // The first member revokes (its own interval is the normal one)…
        let first = co.beat(&mut clients[0], &["t"]).unwrap();
        assert_eq!(first.heartbeat_interval_ms, HEARTBEAT_INTERVAL_MS);
        co.beat(&mut clients[0], &["t"]).unwrap();
        // …and the newcomer, asking again, gets its partitions and the normal interval.
        let answer = co.beat(&mut newcomer, &["t"]).unwrap();
        assert_eq!(co.group().members[&newcomer.member_id].state, MemberState::Stable);
        assert_eq!(answer.heartbeat_interval_ms, HEARTBEAT_INTERVAL_MS);

        let tiny = Timeouts { session_ms: 1_000, heartbeat_interval_ms: 50 };
        let waiting = Member { state: MemberState::UnreleasedPartitions, ..Member::default() };
        assert_eq!(tiny.interval_for(&waiting), 50, "never longer than the interval itself");
        let short = Timeouts { session_ms: 10_000, heartbeat_interval_ms: 500 };
        assert_eq!(short.interval_for(&waiting), MIN_PENDING_HEARTBEAT_INTERVAL_MS);
    }

    #[test]
    fn a_heartbeat_that_changes_nothing_proposes_nothing() {
        let mut co = Coordinator::new(&[("t", 2)]);
        let mut clients = vec![Client::default()];
        co.settle(&mut clients, &["t"]);
        let req = HeartbeatRequest {
            group_id: "g".into(),
            member_id: clients[0].member_id.clone(),
            member_epoch: clients[0].epoch,
            ..Default::default()
        };
        let d = co.decide(&req).unwrap();
        assert!(d.change.is_none());
        assert_eq!(d.answer.assignment, None, "nothing changed and nothing was reported");
        assert_eq!(d.answer.heartbeat_interval_ms, HEARTBEAT_INTERVAL_MS);
    }

    #[test]
    fn leaving_hands_the_partitions_over_and_stale_epochs_are_fenced() {
        let mut co = Coordinator::new(&[("t", 4)]);
        let mut clients = vec![Client::default(), Client::default()];
        co.settle(&mut clients, &["t"]);
        let gone = clients.remove(0);
        let epoch = co.group().epoch;
        let leave = HeartbeatRequest {
            group_id: "g".into(),
            member_id: gone.member_id.clone(),
            member_epoch: LEAVE_EPOCH,
            ..Default::default()
        };
        assert_eq!(co.send(&leave).unwrap().member_epoch, LEAVE_EPOCH);
        assert_eq!(co.group().epoch, epoch + 1);
        assert_eq!(co.send(&leave).unwrap().member_epoch, LEAVE_EPOCH, "leaving again answers the same");
        co.settle(&mut clients, &["t"]);
        assert_eq!(sizes(&clients), [4]);

        // The departed member's old epoch is unknown now.
        let mut stale = gone.clone();
        assert!(matches!(co.beat(&mut stale, &["t"]), Err(CoordinatorError::UnknownMemberId { .. })));
        // A live member sending an epoch it never had is fenced.
        let mut wrong = clients[0].clone();
        wrong.epoch += 5;
        assert!(matches!(co.beat(&mut wrong, &["t"]), Err(CoordinatorError::FencedMemberEpoch { .. })));
    }

    #[test]
    fn an_expired_session_removes_the_member_and_its_epoch_guards_the_timer() {
        let mut co = Coordinator::new(&[("t", 4)]);
        let mut clients = vec![Client::default(), Client::default()];
        co.settle(&mut clients, &["t"]);
        let (id, epoch) = (clients[1].member_id.clone(), clients[1].epoch);
        assert!(fence(co.group(), &id, epoch - 1, 0).is_none(), "a timer armed at an older epoch does nothing");
        let change = fence(co.group(), &id, epoch, 0).expect("fenced");
        assert_eq!(co.groups.apply(&change), Applied::Changed);
        assert!(!co.group().members.contains_key(&id));
        assert!(!co.group().target.contains_key(&id), "its target went with it");
        clients.truncate(1);
        co.settle(&mut clients, &["t"]);
        assert_eq!(sizes(&clients), [4]);
    }

    #[test]
    fn a_static_member_back_within_its_session_keeps_its_partitions() {
        let mut co = Coordinator::new(&[("t", 6)]);
        let mut clients: Vec<Client> =
            ["a", "b", "c"].iter().map(|i| Client { instance_id: Some(i.to_string()), ..Default::default() }).collect();
        co.settle(&mut clients, &["t"]);
        let epoch = co.group().epoch;
        let b = clients[1].clone();
        let leave = HeartbeatRequest {
            group_id: "g".into(),
            member_id: b.member_id.clone(),
            member_epoch: STATIC_LEAVE_EPOCH,
            instance_id: b.instance_id.clone(),
            ..Default::default()
        };
        assert_eq!(co.send(&leave).unwrap().member_epoch, STATIC_LEAVE_EPOCH);
        assert_eq!(co.group().epoch, epoch, "a static leave moves nothing");
        assert!(co.decide(&leave).unwrap().change.is_none(), "a retried static leave changes nothing");
        // The others keep heartbeating: nothing moves to them.
        let (mut a, mut c) = (clients[0].clone(), clients[2].clone());
        co.beat(&mut a, &["t"]).unwrap();
        co.beat(&mut c, &["t"]).unwrap();
        assert_eq!((count(&a.owned), count(&c.owned)), (2, 2));

        // The restarted process joins under a new member id and the same instance id.
        let mut back = Client { instance_id: b.instance_id.clone(), ..Default::default() };
        co.beat(&mut back, &["t"]).unwrap();
        assert_ne!(back.member_id, b.member_id);
        assert_eq!(back.owned, b.owned, "the same partitions, no reassignment");
        assert_eq!(back.epoch, epoch);
        assert_eq!(co.group().epoch, epoch);
        assert!(!co.group().members.contains_key(&b.member_id));

        // A second process with the same instance id while the first is in: refused.
        let mut twin = Client { instance_id: b.instance_id.clone(), ..Default::default() };
        assert!(matches!(co.beat(&mut twin, &["t"]), Err(CoordinatorError::UnreleasedInstanceId { .. })));
    }

    #[test]
    fn a_lost_answer_may_be_repeated_with_the_previous_epoch() {
        let mut co = Coordinator::new(&[("t", 2)]);
        let mut a = Client::default();
        co.beat(&mut a, &["t"]).unwrap();
        let mut b = Client::default();
        co.beat(&mut b, &["t"]).unwrap();
        co.beat(&mut a, &["t"]).unwrap(); // revokes one partition, at its old epoch
        let mut a_lost = a.clone();
        co.beat(&mut a, &["t"]).unwrap(); // advances; pretend this answer was lost
        assert!(a.epoch > a_lost.epoch);
        co.beat(&mut a_lost, &["t"]).expect("the previous epoch with what it owns is accepted");
        assert_eq!(a_lost.epoch, a.epoch);
        // The previous epoch while claiming a partition it no longer has is fenced.
        let mut claims_more = a.clone();
        claims_more.epoch = co.group().members[&a.member_id].previous_epoch;
        claims_more.owned = tp_all("t", 2);
        assert!(matches!(co.beat(&mut claims_more, &["t"]), Err(CoordinatorError::FencedMemberEpoch { .. })));
    }

    #[test]
    fn a_member_rejoining_under_its_own_id_outranks_its_old_epoch() {
        let mut co = Coordinator::new(&[("t", 4)]);
        let mut clients = vec![Client::default(), Client::default()];
        co.settle(&mut clients, &["t"]);
        let before = clients[0].clone();
        // It declared its membership lost by its own clock (the coordinator still has it) and
        // rejoins at epoch 0 under the same id, owning nothing.
        clients[0] = Client { member_id: before.member_id.clone(), ..Default::default() };
        co.settle(&mut clients, &["t"]);
        let back = clients[0].clone();
        assert_eq!(back.member_id, before.member_id);
        assert!(back.epoch > before.epoch, "a new incarnation: epoch {} after {}", back.epoch, before.epoch);
        assert_eq!(back.owned, before.owned, "sticky: the same partitions come back");
        // A commit the old incarnation stamped (still in flight) is refused; the new one's is not.
        let partitions = || before.owned["t"].iter().map(|p| ("t", *p));
        let commit = |epoch| {
            let committer = crate::offsets::Committer::Member { member_id: &before.member_id, epoch };
            crate::offsets::check_commit(&co.groups, &Default::default(), "g", committer, partitions())
        };
        assert!(matches!(commit(before.epoch), Err(CoordinatorError::StaleMemberEpoch { .. })));
        assert!(commit(back.epoch).is_ok());
    }

    #[test]
    fn new_partitions_bump_the_epoch_and_are_assigned() {
        let mut co = Coordinator::new(&[("t", 2)]);
        let mut clients = vec![Client::default(), Client::default()];
        co.settle(&mut clients, &["t"]);
        let epoch = co.group().epoch;
        co.topics.insert("t".into(), 4);
        co.settle(&mut clients, &["t"]);
        assert_eq!(co.group().epoch, epoch + 1);
        assert_eq!(sizes(&clients), [2, 2]);
        // A topic subscribed before it exists is assigned once it is created.
        let mut late = vec![Client::default()];
        co.settle(&mut late, &["t", "later"]);
        co.topics.insert("later".into(), 3);
        let mut all = [clients, late].concat();
        co.settle(&mut all, &["t", "later"]);
        assert_eq!(all.iter().map(|c| c.owned.get("later").map_or(0, |p| p.len())).sum::<usize>(), 3);
    }

    #[test]
    fn eager_groups_revoke_everything_before_anyone_gets_the_new_assignment() {
        let mut co = Coordinator::new(&[("t", 4)]);
        let eager = |c: &mut Coordinator, cl: &mut Client| {
            let req = HeartbeatRequest {
                group_id: "g".into(),
                member_id: cl.member_id.clone(),
                member_epoch: cl.epoch,
                rebalance_timeout_ms: Some(30_000),
                subscribed_topics: Some(vec!["t".into()]),
                rebalance_mode: Some("eager".into()),
                owned: Some(cl.owned.clone()),
                ..Default::default()
            };
            let a = c.send(&req).unwrap();
            cl.member_id = a.member_id;
            cl.epoch = a.member_epoch;
            if let Some(p) = a.assignment {
                cl.owned = p;
            }
        };
        let mut a = Client::default();
        eager(&mut co, &mut a);
        assert_eq!(co.group().mode, RebalanceMode::Eager);
        let mut b = Client::default();
        eager(&mut co, &mut b);
        assert_eq!(count(&b.owned), 0, "b waits: a still owns everything");
        eager(&mut co, &mut a);
        assert_eq!(count(&a.owned), 0, "a revokes all four, not just the two that move");
        eager(&mut co, &mut a);
        eager(&mut co, &mut b);
        assert_eq!((count(&a.owned), count(&b.owned)), (2, 2));
    }

    #[test]
    fn a_change_decided_from_an_old_version_does_not_apply() {
        let mut co = Coordinator::new(&[("t", 2)]);
        let join = |id: &str| HeartbeatRequest {
            group_id: "g".into(),
            member_id: id.into(),
            member_epoch: 0,
            rebalance_timeout_ms: Some(1_000),
            subscribed_topics: Some(vec!["t".into()]),
            ..Default::default()
        };
        let first = co.decide(&join("a")).unwrap().change.unwrap();
        let second = co.decide(&join("b")).unwrap().change.unwrap();
        assert_eq!(co.groups.apply(&first), Applied::Changed);
        assert_eq!(co.groups.apply(&second), Applied::Conflict, "b was decided before a joined");
        assert_eq!(co.group().members.len(), 1);
    }

    #[test]
    fn a_classic_group_with_members_keeps_its_id() {
        use crate::groups::classic::{ClassicGroup, ClassicMember};
        let mut classic = ClassicGroup { group_id: "g".into(), protocol_type: "consumer".into(), ..Default::default() };
        assert!(check_not_classic(None, "g").is_ok(), "no classic group");
        assert!(check_not_classic(Some(&classic), "g").is_ok(), "an empty classic group is taken over");
        classic.members.insert("m".into(), ClassicMember { member_id: "m".into(), ..Default::default() });
        let refused = check_not_classic(Some(&classic), "g");
        assert!(
            matches!(&refused, Err(CoordinatorError::InconsistentGroupProtocol { reason, .. }) if reason.contains("consumer")),
            "{refused:?}"
        );
    }

    #[test]
    fn bad_requests_are_refused_with_reasons() {
        let mut co = Coordinator::new(&[("t", 2)]);
        let base = HeartbeatRequest { group_id: "g".into(), ..Default::default() };
        let cases = [
            HeartbeatRequest { member_epoch: -3, ..base.clone() },
            HeartbeatRequest { member_epoch: 4, ..base.clone() },
            HeartbeatRequest { member_epoch: 0, ..base.clone() },
            HeartbeatRequest {
                rebalance_timeout_ms: Some(0),
                subscribed_topics: Some(vec!["t".into()]),
                ..base.clone()
            },
            HeartbeatRequest {
                rebalance_timeout_ms: Some(1),
                subscribed_topics: Some(vec!["t".into()]),
                server_assignor: Some("nope".into()),
                ..base.clone()
            },
            HeartbeatRequest { member_id: "m".repeat(300), ..base.clone() },
            HeartbeatRequest { instance_id: Some(String::new()), ..base.clone() },
        ];
        for req in cases {
            assert!(co.decide(&req).is_err(), "{req:?} must be refused");
        }
        assert!(co.decide(&HeartbeatRequest { group_id: String::new(), ..base }).is_err());
        assert!(co.groups.is_empty(), "nothing was created");
    }

    /// Random joins, leaves, expiries, partition growth and heartbeats: no partition ever has
    /// two owners, and once everyone heartbeats the group is stable with every partition owned.
    #[test]
    fn random_histories_never_double_assign_and_always_settle() {
        let mut rng = 0x2545_f491_4f6c_dd1du64;
        let mut next = move |n: u64| {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng % n
        };
        for round in 0..200 {
            let mut co = Coordinator::new(&[("t", 1 + next(8) as u32), ("u", next(5) as u32)]);
            let mut clients: Vec<Client> = Vec::new();
            for _ in 0..60 {
                match next(10) {
                    0 | 1 => clients.push(Client::default()),
                    2 if !clients.is_empty() => {
                        let c = clients.remove(next(clients.len() as u64) as usize);
                        if c.member_id.is_empty() {
                            continue; // never joined
                        }
                        let leave = HeartbeatRequest {
                            group_id: "g".into(),
                            member_id: c.member_id,
                            member_epoch: LEAVE_EPOCH,
                            ..Default::default()
                        };
                        co.send(&leave).unwrap();
                    }
                    3 if !clients.is_empty() => {
                        let i = next(clients.len() as u64) as usize;
                        let g = co.groups.get("g").cloned();
                        if let Some(change) = g.and_then(|g| fence(&g, &clients[i].member_id, clients[i].epoch, 0)) {
                            assert_eq!(co.groups.apply(&change), Applied::Changed);
                            clients.remove(i);
                        }
                    }
                    4 => {
                        *co.topics.entry("u".into()).or_default() += 1;
                    }
                    _ if !clients.is_empty() => {
                        let i = next(clients.len() as u64) as usize;
                        let topics: &[&str] = if i.is_multiple_of(2) { &["t", "u"] } else { &["t"] };
                        co.beat(&mut clients[i], topics).unwrap();
                    }
                    _ => {}
                }
            }
            if clients.is_empty() {
                continue;
            }
            // Heartbeat with each client's own subscription until nothing changes.
            for _ in 0..30 {
                let before = co.groups.clone();
                for (i, c) in clients.iter_mut().enumerate() {
                    let topics: &[&str] = if i.is_multiple_of(2) { &["t", "u"] } else { &["t"] };
                    co.beat(c, topics).unwrap();
                }
                if co.groups == before {
                    break;
                }
            }
            let g = co.group();
            assert_eq!(g.state(), GroupState::Stable, "round {round}: {g:?}");
            let owned: usize = clients.iter().map(|c| count(&c.owned)).sum();
            let subscribed: BTreeSet<&String> = g.members.values().flat_map(|m| m.subscribed.iter()).collect();
            let total: u32 = subscribed.iter().filter_map(|t| co.topics.get(*t)).sum();
            assert_eq!(owned as u32, total, "round {round}: every partition owned once");
        }
    }
}
