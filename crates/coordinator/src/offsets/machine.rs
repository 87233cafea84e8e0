//! [`OffsetsMachine`]: the replicated state machine of a `__consumer_offsets` partition.
//! `apply` is plain bookkeeping every replica repeats identically. The leader's soft state —
//! heartbeats held as long polls — is not part of it: the group shard of the partition's leader
//! observes the groups' changes through one [`ChangeHook`] while it leads.

use std::sync::{Arc, Mutex, PoisonError};

use bytes::Bytes;
use prost::Message;
use rill_proto::coordinator as pb;
use rill_raft::types::LogId;
use rill_raft::{GroupStateMachine, Payload};

use super::state::{check_commit, check_delete_group, check_delete_offsets, Committer, OffsetsState};
use super::MAX_OFFSETS_PER_COMMIT;
use crate::groups::classic::{ClassicGroups, Replicated};
use crate::groups::group::{Applied, ConsumerGroups};
use crate::groups::held::{HeldHeartbeats, WakePlan};
use crate::offsets::txn::{self as txn_offsets, TxnOffsets};

/// What the machine answers a group change with: it applied, or lost a compare-and-set.
pub(crate) const APPLIED: &[u8] = b"ok";
pub(crate) const CONFLICT: &[u8] = b"conflict";
/// What the machine answers a command it refused (a commit whose committer is no longer
/// entitled to it, a delete of a group with members, a classic record over a KIP-848 group with
/// members).
pub(crate) const REFUSED: &[u8] = b"refused";

/// The observer of a machine's group changes: the held heartbeats of the leader's group shard,
/// installed on election and removed on resignation ([`OffsetsMachine::observe`]); empty on
/// followers, where nothing is held. Not replicated, not in snapshots.
#[derive(Debug, Default)]
pub struct ChangeHook(Mutex<Option<Arc<HeldHeartbeats>>>);

impl ChangeHook {
    fn observer(&self) -> Option<Arc<HeldHeartbeats>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// Who `change` may concern, before it applies to `groups`.
    fn plan(&self, groups: &ConsumerGroups, change: &pb::ConsumerGroupChange) -> Option<WakePlan> {
        self.observer()?.plan(groups, change)
    }

    /// Wakes what `plan` names, after the change applied to `groups`.
    fn wake(&self, plan: WakePlan, groups: &ConsumerGroups) {
        if let Some(held) = self.observer() {
            held.wake(plan, groups);
        }
    }

    /// `group_id` was deleted, expired or taken over.
    fn wake_group(&self, group_id: &str) {
        if let Some(held) = self.observer() {
            held.wake_group(group_id);
        }
    }

    /// Everything may have changed (a snapshot installed).
    fn wake_all(&self) {
        if let Some(held) = self.observer() {
            held.wake_all();
        }
    }
}

/// The state machine of a `__consumer_offsets` partition: the committed offsets and the
/// membership of every consumer group that hashes to it — KIP-848 groups and classic groups, a
/// group id being one or the other (an id whose group of one protocol has members is refused to
/// the other; an empty group of either is taken over by the other).
#[derive(Debug, Default)]
pub struct OffsetsMachine {
    state: OffsetsState,
    groups: ConsumerGroups,
    classic: ClassicGroups,
    /// Who is told of the groups' changes as they apply (the leader's held heartbeats).
    hook: ChangeHook,
}

impl OffsetsMachine {
    /// An empty machine.
    pub fn new() -> Self {
        Self::default()
    }

    /// Tells `held` of every change of the groups from now on (the leader's group shard, on
    /// election), or nobody (`None`, on resignation). Through `&self`: the shard reaches the
    /// machine only as a reader.
    pub fn observe(&self, held: Option<Arc<HeldHeartbeats>>) {
        *self.hook.0.lock().unwrap_or_else(PoisonError::into_inner) = held;
    }

    /// True while someone observes the groups' changes ([`Self::observe`]).
    pub fn is_observed(&self) -> bool {
        self.hook.observer().is_some()
    }

    /// The state.
    pub fn state(&self) -> &OffsetsState {
        &self.state
    }

    /// The consumer groups' membership.
    pub fn groups(&self) -> &ConsumerGroups {
        &self.groups
    }

    /// The classic groups' records.
    pub fn classic_groups(&self) -> &ClassicGroups {
        &self.classic
    }

    /// What the classic group engine decides against.
    pub fn replicated(&self) -> Replicated<'_> {
        Replicated { classic: &self.classic, consumer: &self.groups }
    }

    /// True when `group_id` has members of either protocol.
    fn has_members(&self, group_id: &str) -> bool {
        self.groups.has_members(group_id) || self.classic.has_members(group_id)
    }

    /// Whether commit `c` still applies (`check_commit` against the applied state); `classic`:
    /// its `member_epoch` is a classic member's generation.
    fn may_commit(&self, c: &pb::CommitOffsets, classic: bool) -> bool {
        let committer = if classic {
            Committer::Classic { member_id: &c.member_id, generation: c.member_epoch }
        } else if c.member_id.is_empty() {
            Committer::Standalone
        } else {
            Committer::Member { member_id: &c.member_id, epoch: c.member_epoch }
        };
        let partitions = c.offsets.iter().map(|o| (o.topic.as_str(), o.partition));
        check_commit(&self.groups, &self.classic, &c.group_id, committer, partitions).is_ok()
    }

    /// The versions of `group_id`'s KIP-848 and classic records (0: none).
    fn versions(&self, group_id: &str) -> (u64, u64) {
        (self.groups.get(group_id).map_or(0, |g| g.version), self.classic.version(group_id))
    }

    /// When `group_id` lost its last member, by its membership records (0: it has none).
    fn empty_since(&self, group_id: &str) -> i64 {
        let consumer = self.groups.get(group_id).map_or(0, |g| g.empty_since_ms);
        let classic = self.classic.get(group_id).filter(|g| !g.has_members()).map_or(0, |g| g.updated_ms);
        consumer.max(classic)
    }

    /// What `offsets.retention.ms` (`retention_ms`) has expired at `now_ms` (Kafka's rule since
    /// KIP-211): only groups without members of either protocol lose offsets, each offset
    /// `retention_ms` after the later of its commit and the moment its group lost its last
    /// member, so a live group's offsets never expire however old. A group whose membership
    /// record outlived its offsets by `retention_ms` goes too. One command per group, at most
    /// [`MAX_OFFSETS_PER_COMMIT`] offsets each; decided on the leader with its clock, re-checked
    /// in `apply`.
    pub fn expired_offsets(&self, now_ms: i64, retention_ms: i64) -> Vec<pb::ExpireOffsets> {
        let ids: std::collections::BTreeSet<&String> = self
            .state
            .group_ids()
            .chain(self.groups.iter().map(|g| &g.group_id))
            .chain(self.classic.iter().map(|g| &g.group_id))
            .collect();
        let expired = |since: i64| now_ms.saturating_sub(since) >= retention_ms;
        let mut out = Vec::new();
        for group_id in ids {
            if self.has_members(group_id) {
                continue;
            }
            let empty_since = self.empty_since(group_id);
            let offsets: Vec<pb::ExpiredOffset> = self
                .state
                .group(group_id)
                .filter(|(_, c)| expired(c.commit_time_ms.max(empty_since)))
                .take(MAX_OFFSETS_PER_COMMIT)
                .map(|((topic, partition), c)| pb::ExpiredOffset {
                    topic: topic.clone(),
                    partition: *partition,
                    commit_time_ms: c.commit_time_ms,
                })
                .collect();
            let no_offsets = self.state.group(group_id).next().is_none();
            if !offsets.is_empty() || (no_offsets && expired(empty_since)) {
                let (consumer_version, classic_version) = self.versions(group_id);
                out.push(pb::ExpireOffsets {
                    group_id: group_id.clone(),
                    offsets,
                    empty_since_ms: empty_since,
                    consumer_version,
                    classic_version,
                });
            }
        }
        out
    }
}

impl GroupStateMachine for OffsetsMachine {
    fn apply(&mut self, log_id: &LogId, _base: u64, payload: &Payload) -> Bytes {
        match pb::OffsetsCommand::decode(payload.body.clone()).map(|c| c.command) {
            Ok(Some(pb::offsets_command::Command::Commit(c))) => {
                let classic = false;
                if !self.may_commit(&c, classic) {
                    return Bytes::from_static(REFUSED);
                }
                self.state.apply(c);
            }
            Ok(Some(pb::offsets_command::Command::ClassicCommit(c))) => {
                let classic = true;
                if !self.may_commit(&c, classic) {
                    return Bytes::from_static(REFUSED);
                }
                self.state.apply(c);
            }
            Ok(Some(pb::offsets_command::Command::TxnCommit(c))) => {
                // The decided transaction's marker the group is still owed, first (a refused one
                // — a newer coordinator's marker is here — decides nothing).
                if let Some(owed) = &c.owed_marker {
                    if let Ok(commits) = txn_offsets::apply_marker(&mut self.state.txn, owed) {
                        commits.into_iter().for_each(|c| self.state.apply(c));
                    }
                }
                let may = c.commit.as_ref().is_some_and(|commit| self.may_commit(commit, c.classic));
                if !txn_offsets::apply_commit(&mut self.state.txn, c, may) {
                    return Bytes::from_static(REFUSED);
                }
            }
            Ok(Some(pb::offsets_command::Command::TxnMarker(m))) => {
                match txn_offsets::apply_marker(&mut self.state.txn, &m) {
                    Ok(commits) => commits.into_iter().for_each(|c| self.state.apply(c)),
                    Err(_) => return Bytes::from_static(REFUSED),
                }
            }
            Ok(Some(pb::offsets_command::Command::PruneTxnMarks(p))) => {
                txn_offsets::apply_prune(&mut self.state.txn, &p);
            }
            Ok(Some(pb::offsets_command::Command::DeleteGroup(d))) => {
                if check_delete_group(&self.state, &self.groups, &self.classic, &d.group_id).is_err() {
                    return Bytes::from_static(REFUSED);
                }
                self.state.remove_group(&d.group_id);
                self.state.txn.remove_group(&d.group_id);
                self.groups.remove(&d.group_id);
                self.classic.remove(&d.group_id);
                self.hook.wake_group(&d.group_id);
            }
            Ok(Some(pb::offsets_command::Command::DeleteOffsets(d))) => {
                let topics = d.partitions.iter().map(|t| t.topic.as_str());
                if check_delete_offsets(&self.groups, &d.group_id, topics).is_err() {
                    return Bytes::from_static(REFUSED);
                }
                let partitions =
                    d.partitions.iter().flat_map(|t| t.partitions.iter().map(move |p| (t.topic.as_str(), *p)));
                self.state.txn.remove_offsets(&d.group_id, partitions.clone());
                self.state.remove_offsets(&d.group_id, partitions);
            }
            Ok(Some(pb::offsets_command::Command::GroupChange(c))) => {
                if self.classic.has_members(&c.group_id) {
                    // A classic group holds the id: the heartbeat is decided again, and refused.
                    return Bytes::from_static(CONFLICT);
                }
                let wake = self.hook.plan(&self.groups, &c);
                return match self.groups.apply(&c) {
                    Applied::Changed => {
                        if self.groups.has_members(&c.group_id) {
                            // Takes the id over from an empty classic group, if there was one.
                            self.classic.remove(&c.group_id);
                        }
                        if let Some(wake) = wake {
                            self.hook.wake(wake, &self.groups);
                        }
                        Bytes::from_static(APPLIED)
                    }
                    Applied::Conflict => Bytes::from_static(CONFLICT),
                };
            }
            Ok(Some(pb::offsets_command::Command::ExpireOffsets(e))) => {
                if self.has_members(&e.group_id)
                    || self.empty_since(&e.group_id) != e.empty_since_ms
                    || self.versions(&e.group_id) != (e.consumer_version, e.classic_version)
                {
                    return Bytes::from_static(REFUSED);
                }
                self.state.expire(&e.group_id, &e.offsets);
                if self.state.group(&e.group_id).next().is_none() {
                    // Neither offsets nor members: the group is gone (Kafka's group cleanup).
                    self.groups.remove(&e.group_id);
                    self.classic.remove(&e.group_id);
                    self.hook.wake_group(&e.group_id);
                }
            }
            Ok(Some(pb::offsets_command::Command::ClassicGroup(r))) => {
                let Some(group_id) = r.group.as_ref().map(|g| g.group_id.clone()) else {
                    return Bytes::from_static(CONFLICT);
                };
                if self.groups.has_members(&group_id) {
                    return Bytes::from_static(REFUSED);
                }
                return match self.classic.apply(&r) {
                    Applied::Changed => {
                        if self.classic.has_members(&group_id) {
                            // Takes the id over from an empty KIP-848 group, if there was one.
                            self.groups.remove(&group_id);
                            self.hook.wake_group(&group_id);
                        }
                        Bytes::from_static(APPLIED)
                    }
                    Applied::Conflict => Bytes::from_static(CONFLICT),
                };
            }
            Ok(None) => tracing::error!(index = log_id.index, "offsets command without a kind; skipped"),
            Err(e) => tracing::error!(index = log_id.index, error = %e, "undecodable offsets command; skipped"),
        }
        Bytes::new()
    }

    fn snapshot(&self) -> Result<Bytes, String> {
        if rill_rt::mutation::active(rill_rt::mutation::Mutation::EmptyStateSnapshot) {
            // Deliberate bug (simulation only): the snapshot loses the state.
            return Ok(Bytes::new());
        }
        let mut snapshot = self.state.to_proto();
        snapshot.consumer_groups = self.groups.to_proto();
        snapshot.classic_groups = self.classic.to_proto();
        Ok(snapshot.encode_to_vec().into())
    }

    fn restore(&mut self, data: &[u8]) -> Result<(), String> {
        let s = pb::OffsetsSnapshot::decode(data).map_err(|e| format!("undecodable offsets snapshot: {e}"))?;
        let mut state = OffsetsState {
            txn: TxnOffsets::from_proto(s.pending_txn_offsets, &s.txn_marks, s.txn_marks_pruned_before_ms)?,
            ..Default::default()
        };
        for g in s.groups {
            state.apply(pb::CommitOffsets {
                group_id: g.group_id,
                offsets: g.offsets,
                member_id: String::new(),
                member_epoch: -1,
            });
        }
        self.state = state;
        self.groups = ConsumerGroups::from_proto(&s.consumer_groups);
        self.classic = ClassicGroups::from_proto(&s.classic_groups);
        self.hook.wake_all();
        Ok(())
    }
}
