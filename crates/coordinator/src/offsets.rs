//! The `consumer-offsets` kind: every consumer group's committed offsets, in the partition of
//! `__consumer_offsets` the group id hashes to.
//!
//! A committed offset is "the next offset to read" of one partition, with free metadata, the
//! topic's id at commit time (so a topic deleted and re-created under the same name does not
//! inherit the old one's offsets) and the coordinator's clock at commit. Committing is a command
//! decided on the coordinator (validation, the time) and replicated; reading is served by the
//! caught-up coordinator from its state.

use std::collections::BTreeMap;
use std::time::Duration;

use bytes::Bytes;
use prost::Message;
use rill_broker::StatePartition;
use rill_proto::coordinator as pb;
use rill_raft::types::LogId;
use rill_raft::{GroupStateMachine, Payload};

use crate::error::{CoordinatorError, Result};
use crate::groups::classic::{ClassicGroups, Replicated};
use crate::groups::group::{Applied, ConsumerGroups};
use crate::groups::held::HeldHeartbeats;
use crate::txn_offsets::{self, TxnOffsets};

/// Longest group id accepted (bytes): ids are keys in the coordinator's state and its snapshot.
pub const MAX_GROUP_ID_BYTES: usize = 255;
/// Longest metadata stored with an offset (Kafka's `offset.metadata.max.bytes`).
pub const MAX_OFFSET_METADATA_BYTES: usize = 4096;
/// Most offsets one commit may carry: a commit is one Raft entry.
pub const MAX_OFFSETS_PER_COMMIT: usize = 10_000;

/// One committed offset, as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommittedOffset {
    /// The next offset to read.
    pub offset: i64,
    /// Free text stored with it.
    pub metadata: String,
    /// The topic's id when it was committed.
    pub topic_id: [u8; 16],
    /// The coordinator's clock at commit (ms since the epoch).
    pub commit_time_ms: i64,
}

/// An offset to commit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OffsetCommit {
    /// Topic name.
    pub topic: String,
    /// The topic's current id (checked against the metadata by the caller).
    pub topic_id: [u8; 16],
    /// Partition number.
    pub partition: u32,
    /// The next offset to read.
    pub offset: i64,
    /// Free text.
    pub metadata: String,
}

/// Every group's committed offsets, and the offsets transactions hold pending.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OffsetsState {
    groups: BTreeMap<String, BTreeMap<(String, u32), CommittedOffset>>,
    txn: TxnOffsets,
}

impl OffsetsState {
    /// The offsets committed inside transactions that have not ended yet.
    pub fn txn(&self) -> &TxnOffsets {
        &self.txn
    }

    /// The committed offset of `group` for `topic`/`partition`.
    pub fn committed(&self, group: &str, topic: &str, partition: u32) -> Option<&CommittedOffset> {
        self.groups.get(group)?.get(&(topic.to_string(), partition))
    }

    /// Every committed offset of `group`, by (topic, partition).
    pub fn group(&self, group: &str) -> impl Iterator<Item = (&(String, u32), &CommittedOffset)> {
        self.groups.get(group).into_iter().flat_map(|g| g.iter())
    }

    /// Removes every offset of `group`.
    fn remove_group(&mut self, group: &str) {
        self.groups.remove(group);
    }

    /// Removes the offsets of `partitions` of `group` (a group left without offsets goes).
    fn remove_offsets<'a>(&mut self, group: &str, partitions: impl Iterator<Item = (&'a str, u32)>) {
        let Some(g) = self.groups.get_mut(group) else { return };
        for (topic, partition) in partitions {
            g.remove(&(topic.to_string(), partition));
        }
        if g.is_empty() {
            self.groups.remove(group);
        }
    }

    /// Removes the offsets of `group` listed in `expired` that were not committed again since
    /// (their commit time is still the one listed).
    fn expire(&mut self, group: &str, expired: &[pb::ExpiredOffset]) {
        let Some(g) = self.groups.get_mut(group) else { return };
        for e in expired {
            let key = (e.topic.clone(), e.partition);
            if g.get(&key).is_some_and(|c| c.commit_time_ms == e.commit_time_ms) {
                g.remove(&key);
            }
        }
        if g.is_empty() {
            self.groups.remove(group);
        }
    }

    /// The ids of every group with offsets, in order.
    pub fn group_ids(&self) -> impl Iterator<Item = &String> {
        self.groups.keys()
    }

    /// Number of groups with offsets.
    pub fn group_count(&self) -> usize {
        self.groups.len()
    }

    fn apply(&mut self, c: pb::CommitOffsets) {
        let group = self.groups.entry(c.group_id).or_default();
        for o in c.offsets {
            let Ok(topic_id) = <[u8; 16]>::try_from(&o.topic_id[..]) else {
                // The coordinator only proposes 16-byte ids; every replica skips alike.
                continue;
            };
            group.insert(
                (o.topic, o.partition),
                CommittedOffset { offset: o.offset, metadata: o.metadata, topic_id, commit_time_ms: o.commit_time_ms },
            );
        }
    }

    fn to_proto(&self) -> pb::OffsetsSnapshot {
        let (pending_txn_offsets, txn_marks, txn_marks_pruned_before_ms) = self.txn.to_proto();
        pb::OffsetsSnapshot {
            consumer_groups: Vec::new(),
            classic_groups: Vec::new(),
            pending_txn_offsets,
            txn_marks,
            txn_marks_pruned_before_ms,
            groups: self
                .groups
                .iter()
                .map(|(group, offsets)| pb::GroupOffsets {
                    group_id: group.clone(),
                    offsets: offsets.iter().map(|((topic, partition), c)| committed_to(topic, *partition, c)).collect(),
                })
                .collect(),
        }
    }
}

pub(crate) fn committed_to(topic: &str, partition: u32, c: &CommittedOffset) -> pb::CommittedOffset {
    pb::CommittedOffset {
        topic: topic.to_string(),
        topic_id: Bytes::copy_from_slice(&c.topic_id),
        partition,
        offset: c.offset,
        metadata: c.metadata.clone(),
        commit_time_ms: c.commit_time_ms,
    }
}

/// What the machine answers a group change with: it applied, or lost a compare-and-set.
pub(crate) const APPLIED: &[u8] = b"ok";
pub(crate) const CONFLICT: &[u8] = b"conflict";
/// What the machine answers a command it refused (a commit whose committer is no longer
/// entitled to it, a delete of a group with members, a classic record over a KIP-848 group with
/// members).
pub(crate) const REFUSED: &[u8] = b"refused";

/// Who commits: a member of a consumer group at its member epoch, a member of a classic group at
/// its generation, or nobody (an assign-mode consumer committing for a group without members).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Committer<'a> {
    /// No membership: the group must have no members (of either protocol).
    Standalone,
    /// A member of a KIP-848 group and the member epoch it commits at.
    Member { member_id: &'a str, epoch: i32 },
    /// A member of a classic group and the generation it commits at. The leader first checks
    /// what only its memory knows ([`crate::groups::classic::ClassicEngine::check_commit`]).
    Classic { member_id: &'a str, generation: i32 },
}

/// Whether `committer` may commit `partitions` of `group_id`, by the applied state. A KIP-848
/// member must exist, commit at its current epoch, and own every partition (assigned, or still
/// being revoked — a member's epoch moves only after it has revoked, so it commits what it gives
/// up at the epoch it had). A classic member must be in the group's stored record at the stored
/// generation (the generation whose assignments it holds). A standalone commit needs a group
/// without members of either protocol. Checked on the leader before proposing and again in
/// `apply`, so a member fenced in between, or a commit decided against a generation since
/// replaced, commits nothing.
pub fn check_commit<'p>(
    groups: &ConsumerGroups,
    classic: &ClassicGroups,
    group_id: &str,
    committer: Committer<'_>,
    mut partitions: impl Iterator<Item = (&'p str, u32)>,
) -> Result<()> {
    let group = groups.get(group_id);
    let (member_id, epoch) = match committer {
        Committer::Standalone => {
            let members = groups.has_members(group_id) || classic.has_members(group_id);
            return if members {
                Err(CoordinatorError::UnknownMemberId { group_id: group_id.to_string(), member_id: String::new() })
            } else {
                Ok(())
            };
        }
        Committer::Classic { member_id, generation } => {
            let Some(g) = classic.get(group_id).filter(|g| g.members.contains_key(member_id)) else {
                return Err(CoordinatorError::UnknownMemberId {
                    group_id: group_id.to_string(),
                    member_id: member_id.to_string(),
                });
            };
            return if g.generation == generation {
                Ok(())
            } else {
                Err(CoordinatorError::IllegalGeneration {
                    group_id: group_id.to_string(),
                    member_id: member_id.to_string(),
                    sent: generation,
                    current: g.generation,
                })
            };
        }
        Committer::Member { member_id, epoch } => (member_id, epoch),
    };
    let Some(member) = group.and_then(|g| g.members.get(member_id)) else {
        return Err(CoordinatorError::UnknownMemberId {
            group_id: group_id.to_string(),
            member_id: member_id.to_string(),
        });
    };
    if epoch > member.epoch || member.is_away() {
        return Err(CoordinatorError::FencedMemberEpoch {
            member_id: member_id.to_string(),
            sent: epoch,
            current: member.epoch,
        });
    }
    if epoch < member.epoch {
        // A commit made before the member's epoch moved: what it owned then may have been
        // another member's since (and come back), so it is refused; the member commits again
        // at its current epoch.
        return Err(CoordinatorError::StaleMemberEpoch {
            member_id: member_id.to_string(),
            sent: epoch,
            current: member.epoch,
            partition: "(any: the epoch is stale)".into(),
        });
    }
    match partitions.find(|(topic, partition)| !member.owns(topic, *partition)) {
        Some((topic, partition)) => Err(CoordinatorError::StaleMemberEpoch {
            member_id: member_id.to_string(),
            sent: epoch,
            current: member.epoch,
            partition: format!("{topic}-{partition}"),
        }),
        None => Ok(()),
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
    /// Members whose heartbeat is held (a long poll), woken by the changes that concern them.
    held: HeldHeartbeats,
}

impl OffsetsMachine {
    /// An empty machine.
    pub fn new() -> Self {
        Self::default()
    }

    /// The members whose heartbeat is held on this replica, and what wakes them.
    pub fn held_heartbeats(&self) -> &HeldHeartbeats {
        &self.held
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
                self.held.wake_group(&d.group_id);
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
                let wake = self.held.plan(&self.groups, &c);
                return match self.groups.apply(&c) {
                    Applied::Changed => {
                        if self.groups.has_members(&c.group_id) {
                            // Takes the id over from an empty classic group, if there was one.
                            self.classic.remove(&c.group_id);
                        }
                        if let Some(wake) = wake {
                            self.held.wake(wake, &self.groups);
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
                    self.held.wake_group(&e.group_id);
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
                            self.held.wake_group(&group_id);
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
        self.held.wake_all();
        Ok(())
    }
}

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

/// On the group's coordinator, before proposing a commit of `offsets` by `committer`: checks
/// the request against the applied state, and returns the command's body (stamped with the
/// coordinator's clock) and whether the committer is a classic member.
pub(crate) fn prepare_commit(
    partition: &StatePartition<OffsetsMachine>,
    group: &str,
    committer: Committer<'_>,
    offsets: &[OffsetCommit],
) -> Result<(pb::CommitOffsets, bool)> {
    validate_group_id(group)?;
    if offsets.len() > MAX_OFFSETS_PER_COMMIT {
        return Err(CoordinatorError::InvalidRequest(format!(
            "{} offsets in one commit; at most {MAX_OFFSETS_PER_COMMIT}",
            offsets.len()
        )));
    }
    let partitions = || offsets.iter().map(|o| (o.topic.as_str(), o.partition));
    partition.read(|m| check_commit(m.groups(), m.classic_groups(), group, committer, partitions()))??;
    let (member_id, member_epoch) = match committer {
        Committer::Standalone => (String::new(), -1),
        Committer::Member { member_id, epoch } => (member_id.to_string(), epoch),
        Committer::Classic { member_id, generation } => (member_id.to_string(), generation),
    };
    let now = rill_rt::wall_clock_ms();
    let commit = pb::CommitOffsets {
        member_id,
        member_epoch,
        group_id: group.to_string(),
        offsets: offsets
            .iter()
            .map(|o| {
                committed_to(
                    &o.topic,
                    o.partition,
                    &CommittedOffset {
                        offset: o.offset,
                        metadata: o.metadata.clone(),
                        topic_id: o.topic_id,
                        commit_time_ms: now,
                    },
                )
            })
            .collect(),
    };
    Ok((commit, matches!(committer, Committer::Classic { .. })))
}

/// On `partition`'s leader (the group's coordinator): commits `offsets` for `group`, stamped
/// with the coordinator's clock, and returns once they are committed (synced on a majority).
/// The caller has checked each offset (topic, partition, offset ≥ 0, metadata size).
pub async fn commit(
    partition: &StatePartition<OffsetsMachine>,
    group: &str,
    committer: Committer<'_>,
    offsets: &[OffsetCommit],
    timeout: Duration,
) -> Result<()> {
    let (commit, classic) = prepare_commit(partition, group, committer, offsets)?;
    let partitions = || offsets.iter().map(|o| (o.topic.as_str(), o.partition));
    let command = pb::OffsetsCommand {
        command: Some(if classic {
            pb::offsets_command::Command::ClassicCommit(commit)
        } else {
            pb::offsets_command::Command::Commit(commit)
        }),
    };
    let answer = partition.propose(command.encode_to_vec().into(), timeout).await?;
    if answer.as_ref() == REFUSED {
        // The member was fenced, or gave a partition up, between the check and the commit.
        return Err(match committer {
            Committer::Standalone => {
                CoordinatorError::UnknownMemberId { group_id: group.to_string(), member_id: String::new() }
            }
            Committer::Member { member_id, epoch } => CoordinatorError::StaleMemberEpoch {
                member_id: member_id.to_string(),
                sent: epoch,
                current: -1,
                partition: "a committed partition".into(),
            },
            // The group's generation moved (or the member left) meanwhile: say which.
            Committer::Classic { member_id, generation } => partition
                .read(|m| check_commit(m.groups(), m.classic_groups(), group, committer, partitions()))?
                .err()
                .unwrap_or(CoordinatorError::IllegalGeneration {
                    group_id: group.to_string(),
                    member_id: member_id.to_string(),
                    sent: generation,
                    current: -1,
                }),
        });
    }
    Ok(())
}

/// Whether `group_id` may be deleted: it exists (members or offsets) and has no members, by its
/// KIP-848 record or its classic one. (A classic group's first generation is stored only once its
/// leader syncs: a server is to also ask the leader's engine,
/// [`crate::groups::classic::ClassicEngine::has_members`], once the Kafka listener wires it.)
pub fn check_delete_group(
    offsets: &OffsetsState,
    groups: &ConsumerGroups,
    classic: &ClassicGroups,
    group_id: &str,
) -> Result<()> {
    let not_empty = |members: usize| CoordinatorError::GroupNotEmpty { group_id: group_id.to_string(), members };
    if let Some(g) = groups.get(group_id).filter(|g| !g.members.is_empty()) {
        return Err(not_empty(g.members.len()));
    }
    if let Some(g) = classic.get(group_id).filter(|g| g.has_members()) {
        return Err(not_empty(g.members.len()));
    }
    if groups.get(group_id).is_some() || classic.get(group_id).is_some() || offsets.groups.contains_key(group_id) {
        Ok(())
    } else {
        Err(CoordinatorError::GroupIdNotFound(group_id.to_string()))
    }
}

/// Whether offsets of `topics` may be deleted from `group_id`: no member subscribes to one.
pub fn check_delete_offsets<'t>(
    groups: &ConsumerGroups,
    group_id: &str,
    mut topics: impl Iterator<Item = &'t str>,
) -> Result<()> {
    let Some(g) = groups.get(group_id) else { return Ok(()) };
    match topics.find(|t| g.members.values().any(|m| m.subscribed.contains(*t))) {
        Some(topic) => {
            Err(CoordinatorError::GroupSubscribedToTopic { group_id: group_id.to_string(), topic: topic.to_string() })
        }
        None => Ok(()),
    }
}

/// On the group's coordinator: deletes `group_id` — its offsets and membership record — if it
/// has no members (checked again when the command applies).
pub async fn delete_group(partition: &StatePartition<OffsetsMachine>, group_id: &str, timeout: Duration) -> Result<()> {
    validate_group_id(group_id)?;
    partition.read(|m| check_delete_group(m.state(), m.groups(), m.classic_groups(), group_id))??;
    let command = pb::OffsetsCommand {
        command: Some(pb::offsets_command::Command::DeleteGroup(pb::DeleteGroup { group_id: group_id.to_string() })),
    };
    let answer = partition.propose(command.encode_to_vec().into(), timeout).await?;
    if answer.as_ref() == REFUSED {
        // A member joined between the check and the command.
        return Err(CoordinatorError::GroupNotEmpty { group_id: group_id.to_string(), members: 1 });
    }
    Ok(())
}

/// On the group's coordinator: deletes the offsets of `partitions` (topic, partition) of
/// `group_id`, unless a member subscribes to one of their topics (checked again in apply).
pub async fn delete_offsets(
    partition: &StatePartition<OffsetsMachine>,
    group_id: &str,
    partitions: &[(String, u32)],
    timeout: Duration,
) -> Result<()> {
    validate_group_id(group_id)?;
    if partitions.len() > MAX_OFFSETS_PER_COMMIT {
        return Err(CoordinatorError::InvalidRequest(format!(
            "{} partitions in one request; at most {MAX_OFFSETS_PER_COMMIT}",
            partitions.len()
        )));
    }
    partition.read(|m| {
        if !m.state().groups.contains_key(group_id)
            && m.groups().get(group_id).is_none()
            && m.classic_groups().get(group_id).is_none()
        {
            return Err(CoordinatorError::GroupIdNotFound(group_id.to_string()));
        }
        check_delete_offsets(m.groups(), group_id, partitions.iter().map(|(t, _)| t.as_str()))
    })??;
    let mut by_topic: BTreeMap<&str, Vec<u32>> = BTreeMap::new();
    for (topic, p) in partitions {
        by_topic.entry(topic).or_default().push(*p);
    }
    let command = pb::OffsetsCommand {
        command: Some(pb::offsets_command::Command::DeleteOffsets(pb::DeleteOffsets {
            group_id: group_id.to_string(),
            partitions: by_topic
                .into_iter()
                .map(|(topic, partitions)| pb::TopicPartitionSet { topic: topic.to_string(), partitions })
                .collect(),
        })),
    };
    let answer = partition.propose(command.encode_to_vec().into(), timeout).await?;
    if answer.as_ref() == REFUSED {
        return Err(CoordinatorError::GroupSubscribedToTopic {
            group_id: group_id.to_string(),
            topic: "one of the topics (a member subscribed meanwhile)".into(),
        });
    }
    Ok(())
}

/// On the coordinator: removes what `offsets.retention.ms` (`retention_ms`) has expired now
/// ([`OffsetsMachine::expired_offsets`]), one command per group. Returns how many offsets the
/// applied commands listed (an offset committed again meanwhile stays, and is still counted).
pub async fn expire(partition: &StatePartition<OffsetsMachine>, retention_ms: i64, timeout: Duration) -> Result<usize> {
    let now_ms = rill_rt::wall_clock_ms();
    let commands = partition.read(|m| m.expired_offsets(now_ms, retention_ms))?;
    let mut removed = 0;
    for e in commands {
        let count = e.offsets.len();
        let command = pb::OffsetsCommand { command: Some(pb::offsets_command::Command::ExpireOffsets(e)) };
        let answer: Bytes = partition.propose(command.encode_to_vec().into(), timeout).await?;
        // Refused: a member joined (or came and went) since the decision; its offsets stay.
        if answer.as_ref() != REFUSED {
            removed += count;
        }
    }
    Ok(removed)
}

/// On the group's coordinator: runs `read` with the committed offsets state, once the
/// coordinator has confirmed with a quorum that it still leads (a linearizable read, at most
/// `timeout`): a deposed coordinator that has not noticed yet must not answer an offset older
/// than one its successor committed. No confirmation within `timeout` is `NotAvailable`
/// ([`CoordinatorError::from_linearizable_read`]).
pub async fn read<R>(
    partition: &StatePartition<OffsetsMachine>,
    timeout: std::time::Duration,
    read: impl FnOnce(&OffsetsState) -> R,
) -> Result<R> {
    if rill_rt::mutation::active(rill_rt::mutation::Mutation::StaleOffsetsRead) {
        return Ok(partition.read(|m| read(m.state()))?);
    }
    partition.read_linearizable(timeout, |m| read(m.state())).await.map_err(CoordinatorError::from_linearizable_read)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn commit(offsets: &[(&str, u32, i64)]) -> Payload {
        let c = pb::CommitOffsets {
            member_id: String::new(),
            member_epoch: -1,
            group_id: "g".into(),
            offsets: offsets
                .iter()
                .map(|(t, p, o)| pb::CommittedOffset {
                    topic: t.to_string(),
                    topic_id: Bytes::from_static(&[3; 16]),
                    partition: *p,
                    offset: *o,
                    metadata: "m".into(),
                    commit_time_ms: 5,
                })
                .collect(),
        };
        let body = pb::OffsetsCommand { command: Some(pb::offsets_command::Command::Commit(c)) }.encode_to_vec();
        Payload { units: 0, body: body.into(), proposal: 0 }
    }

    #[test]
    fn commits_apply_and_the_snapshot_is_the_state() {
        let id = LogId::default();
        let mut m = OffsetsMachine::new();
        m.apply(&id, 0, &commit(&[("a", 0, 10), ("a", 1, 20)]));
        m.apply(&id, 0, &commit(&[("a", 0, 15)]));
        assert_eq!(m.state().committed("g", "a", 0).map(|c| c.offset), Some(15), "a later commit replaces");
        assert_eq!(m.state().committed("g", "a", 1).map(|c| c.offset), Some(20));
        assert_eq!(m.state().committed("g", "a", 2), None);
        assert_eq!(m.state().committed("h", "a", 0), None);
        assert_eq!(m.state().group("g").count(), 2);
        let snap = m.snapshot().unwrap();
        let mut back = OffsetsMachine::new();
        back.restore(&snap).unwrap();
        assert_eq!(back.state(), m.state());
        assert!(back.restore(&[0xff, 0xff]).is_err());
        // Garbage in the log changes nothing, on every replica alike.
        m.apply(&id, 0, &Payload { units: 0, body: Bytes::from_static(b"\xff\xff"), proposal: 0 });
        assert_eq!(back.state(), m.state());
    }

    fn command(c: pb::offsets_command::Command) -> Payload {
        Payload { units: 0, body: pb::OffsetsCommand { command: Some(c) }.encode_to_vec().into(), proposal: 0 }
    }

    /// Producer 7's (epoch 0) transactional commit of offset `offset` of `a`/0 for `g` by
    /// `member` at `epoch` (a classic member's generation when `classic`), in transaction
    /// `transaction_start`.
    fn txn_commit_of(member: &str, epoch: i32, classic: bool, offset: i64, transaction_start: u64) -> Payload {
        let Ok(pb::OffsetsCommand { command: Some(pb::offsets_command::Command::Commit(mut c)) }) =
            pb::OffsetsCommand::decode(commit(&[("a", 0, offset)]).body)
        else {
            unreachable!("commit() builds a commit")
        };
        c.member_id = member.into();
        c.member_epoch = epoch;
        command(pb::offsets_command::Command::TxnCommit(pb::TxnCommitOffsets {
            commit: Some(c),
            classic,
            producer_id: 7,
            producer_epoch: 0,
            transaction_start,
            owed_marker: None,
        }))
    }

    /// Group `g` with one member `m` subscribed to topic `a`, joined through a group change.
    fn with_member(m: &mut OffsetsMachine) {
        let member =
            crate::groups::Member { member_id: "m".into(), subscribed: ["a".to_string()].into(), ..Default::default() };
        let change = pb::ConsumerGroupChange {
            group_id: "g".into(),
            expect_version: 0,
            meta: Some(crate::groups::ConsumerGroup { group_id: "g".into(), ..Default::default() }.meta_to_proto()),
            upsert_members: vec![crate::groups::group::member_to_proto(&member)],
            ..Default::default()
        };
        m.apply(&LogId::default(), 0, &command(pb::offsets_command::Command::GroupChange(change)));
    }

    fn commit_at(offsets: &[(&str, u32, i64)], at_ms: i64) -> Payload {
        let mut c = pb::OffsetsCommand::decode(commit(offsets).body).unwrap();
        if let Some(pb::offsets_command::Command::Commit(c)) = &mut c.command {
            c.offsets.iter_mut().for_each(|o| o.commit_time_ms = at_ms);
        }
        Payload { units: 0, body: c.encode_to_vec().into(), proposal: 0 }
    }

    fn expire(m: &mut OffsetsMachine, e: &pb::ExpireOffsets) -> Bytes {
        m.apply(&LogId::default(), 0, &command(pb::offsets_command::Command::ExpireOffsets(e.clone())))
    }

    /// Removes member `m` of group `g` as its expired session would, at `now_ms`.
    fn fence_at(m: &mut OffsetsMachine, now_ms: i64) {
        let g = m.groups().get("g").cloned().unwrap();
        let epoch = g.members["m"].epoch;
        let change = crate::groups::heartbeat::fence(&g, "m", epoch, now_ms).unwrap();
        assert_eq!(m.apply(&LogId::default(), 0, &command(pb::offsets_command::Command::GroupChange(change))), APPLIED);
    }

    #[test]
    fn offsets_expire_only_after_their_group_has_been_empty_for_the_retention() {
        let mut m = OffsetsMachine::new();
        let id = LogId::default();
        // Without members: each offset `retention` after its commit.
        m.apply(&id, 0, &commit_at(&[("a", 0, 10), ("a", 1, 20)], 5));
        assert!(m.expired_offsets(104, 100).is_empty(), "not yet");
        let decided = m.expired_offsets(105, 100);
        assert_eq!(decided.len(), 1);
        assert_eq!(decided[0].offsets.len(), 2);
        // Committed again before the expiry applies: that offset stays.
        m.apply(&id, 0, &commit_at(&[("a", 1, 25)], 50));
        assert_ne!(expire(&mut m, &decided[0]), REFUSED);
        assert_eq!(m.state().committed("g", "a", 0), None);
        assert_eq!(m.state().committed("g", "a", 1).map(|c| c.offset), Some(25));

        // A member in: nothing expires, however old.
        with_member(&mut m);
        assert!(m.expired_offsets(1_000_000, 100).is_empty(), "a live group keeps its offsets");
        let refused = pb::ExpireOffsets {
            group_id: "g".into(),
            offsets: vec![pb::ExpiredOffset { topic: "a".into(), partition: 1, commit_time_ms: 50 }],
            ..Default::default()
        };
        assert_eq!(expire(&mut m, &refused), REFUSED, "apply refuses it too");
        assert!(m.state().committed("g", "a", 1).is_some());

        // The member goes at 1,000: the retention runs from then, not from the commit at 50.
        fence_at(&mut m, 1_000);
        assert_eq!(m.groups().get("g").map(|g| g.empty_since_ms), Some(1_000));
        assert!(m.expired_offsets(1_099, 100).is_empty());
        let decided = m.expired_offsets(1_100, 100);
        assert_eq!(decided.len(), 1);
        assert_eq!(decided[0].empty_since_ms, 1_000);

        // Someone joined and left meanwhile (empty again since 2,000): the decision is stale.
        with_member_again(&mut m);
        fence_at(&mut m, 2_000);
        assert_eq!(expire(&mut m, &decided[0]), REFUSED);
        assert!(m.state().committed("g", "a", 1).is_some());

        // Joined and left within the same millisecond: the record's version still tells.
        let decided = m.expired_offsets(2_100, 100);
        with_member_again(&mut m);
        fence_at(&mut m, 2_000);
        assert_eq!(expire(&mut m, &decided[0]), REFUSED, "same empty-since time, another version");

        // Decided again: applied; with no offsets and no members the group is gone.
        let decided = m.expired_offsets(2_100, 100);
        assert_ne!(expire(&mut m, &decided[0]), REFUSED);
        assert_eq!(m.state().group("g").count(), 0);
        assert!(m.groups().get("g").is_none(), "the empty group's record went with its last offset");
        assert!(m.expired_offsets(1_000_000, 100).is_empty(), "nothing left");
    }

    /// Member `m` joins group `g` again (the group record exists, empty).
    fn with_member_again(m: &mut OffsetsMachine) {
        let g = m.groups().get("g").cloned().unwrap();
        let member =
            crate::groups::Member { member_id: "m".into(), subscribed: ["a".to_string()].into(), ..Default::default() };
        let mut meta = g.meta_to_proto();
        meta.empty_since_ms = 0;
        let change = pb::ConsumerGroupChange {
            group_id: "g".into(),
            expect_version: g.version,
            meta: Some(meta),
            upsert_members: vec![crate::groups::group::member_to_proto(&member)],
            ..Default::default()
        };
        assert_eq!(m.apply(&LogId::default(), 0, &command(pb::offsets_command::Command::GroupChange(change))), APPLIED);
    }

    #[test]
    fn an_empty_group_without_offsets_goes_after_the_retention() {
        let mut m = OffsetsMachine::new();
        with_member(&mut m);
        fence_at(&mut m, 500);
        assert!(m.expired_offsets(599, 100).is_empty());
        let decided = m.expired_offsets(600, 100);
        assert_eq!(decided.len(), 1);
        assert!(decided[0].offsets.is_empty());
        assert_ne!(expire(&mut m, &decided[0]), REFUSED);
        assert!(m.groups().get("g").is_none());
    }

    #[test]
    fn groups_are_deleted_only_without_members_and_offsets_only_of_unsubscribed_topics() {
        let id = LogId::default();
        let mut m = OffsetsMachine::new();
        m.apply(&id, 0, &commit(&[("a", 0, 10), ("b", 0, 20)]));
        with_member(&mut m);
        let delete_group =
            || command(pb::offsets_command::Command::DeleteGroup(pb::DeleteGroup { group_id: "g".into() }));
        let delete_offsets = |topic: &str| {
            command(pb::offsets_command::Command::DeleteOffsets(pb::DeleteOffsets {
                group_id: "g".into(),
                partitions: vec![pb::TopicPartitionSet { topic: topic.into(), partitions: vec![0] }],
            }))
        };
        assert_eq!(m.apply(&id, 0, &delete_group()).as_ref(), REFUSED, "the group has a member");
        assert_eq!(m.apply(&id, 0, &delete_offsets("a")).as_ref(), REFUSED, "the member subscribes to a");
        assert!(m.apply(&id, 0, &delete_offsets("b")).is_empty());
        assert_eq!(m.state().committed("g", "b", 0), None);
        assert_eq!(m.state().committed("g", "a", 0).map(|c| c.offset), Some(10));
        assert!(matches!(
            check_delete_group(m.state(), m.groups(), m.classic_groups(), "nope"),
            Err(CoordinatorError::GroupIdNotFound(_))
        ));
        // Without members the group goes, offsets and all.
        let mut empty = OffsetsMachine::new();
        empty.apply(&id, 0, &commit(&[("a", 0, 10)]));
        assert!(empty.apply(&id, 0, &delete_group()).is_empty());
        assert_eq!(empty.state().group_count(), 0);
        assert!(empty.groups().is_empty());
    }

    #[test]
    fn a_classic_group_is_in_the_snapshot_and_its_members_keep_it_from_deletes_and_standalone_commits() {
        use crate::groups::classic::{ClassicGroup, ClassicMember};
        let id = LogId::default();
        let mut m = OffsetsMachine::new();
        assert!(m.apply(&id, 0, &commit(&[("a", 0, 10)])).is_empty(), "no members: a standalone commit applies");
        let member =
            ClassicMember { member_id: "m".into(), assignment: Bytes::from_static(b"a-0"), ..Default::default() };
        let group = ClassicGroup {
            group_id: "g".into(),
            generation: 3,
            protocol_type: "consumer".into(),
            protocol: Some("range".into()),
            leader: Some("m".into()),
            members: [("m".to_string(), member)].into(),
            ..Default::default()
        };
        let record = pb::ClassicGroupRecord { expect_version: 0, group: Some(group.to_proto()) };
        let write = command(pb::offsets_command::Command::ClassicGroup(record));
        assert_eq!(m.apply(&id, 0, &write).as_ref(), APPLIED);
        assert_eq!(m.apply(&id, 0, &write).as_ref(), CONFLICT, "decided from version 0, the group is at 1");
        assert_eq!(m.apply(&id, 0, &commit(&[("a", 0, 11)])).as_ref(), REFUSED, "the group has a member");
        let delete = command(pb::offsets_command::Command::DeleteGroup(pb::DeleteGroup { group_id: "g".into() }));
        assert_eq!(m.apply(&id, 0, &delete).as_ref(), REFUSED);
        assert_eq!(
            check_delete_group(m.state(), m.groups(), m.classic_groups(), "g"),
            Err(CoordinatorError::GroupNotEmpty { group_id: "g".into(), members: 1 })
        );
        let snap = m.snapshot().unwrap();
        let mut back = OffsetsMachine::new();
        back.restore(&snap).unwrap();
        assert_eq!(back.classic_groups(), m.classic_groups());
        assert_eq!(back.classic_groups().get("g").map(|g| (g.version, g.generation)), Some((1, 3)));
        assert_eq!(back.state(), m.state());
    }

    #[test]
    fn an_owed_marker_in_a_commit_ends_the_decided_transaction_first() {
        let id = |index| LogId { index, ..LogId::default() };
        let mut m = OffsetsMachine::new();
        // Transaction 8's offsets, pending; transaction 10's arrive with transaction 8's commit
        // marker, still owed: 8's are committed first, 10's pending.
        let commit_of = |offset: i64, start: u64, owed: Option<u64>| {
            let mut p = txn_commit_of("", -1, false, offset, start);
            let mut cmd = pb::OffsetsCommand::decode(p.body.clone()).unwrap();
            if let Some(pb::offsets_command::Command::TxnCommit(t)) = &mut cmd.command {
                t.owed_marker = owed.map(|transaction_start| pb::TxnOffsetsMarker {
                    producer_id: 7,
                    coordinator_epoch: 3,
                    commit: true,
                    transaction_start,
                    ..Default::default()
                });
            }
            p.body = cmd.encode_to_vec().into();
            p
        };
        assert!(m.apply(&id(9), 0, &commit_of(50, 8, None)).is_empty());
        assert!(m.apply(&id(10), 0, &commit_of(60, 10, Some(8))).is_empty());
        assert_eq!(m.state().committed("g", "a", 0).map(|c| c.offset), Some(50), "8's, by its owed marker");
        assert!(m.state().txn().is_pending("g", "a", 0), "10's");
        // Without it, 8's would have been dropped as orphaned: 12's offsets find 10's pending.
        assert!(m.apply(&id(11), 0, &commit_of(70, 12, None)).is_empty());
        assert_eq!(m.state().committed("g", "a", 0).map(|c| c.offset), Some(50), "10's were dropped");
    }

    #[test]
    fn transactional_offsets_stay_pending_until_the_commit_marker_and_go_with_the_snapshot() {
        let id = |index| LogId { index, ..LogId::default() };
        let mut m = OffsetsMachine::new();
        with_member(&mut m);
        let epoch = m.groups().get("g").map(|g| g.members["m"].epoch).unwrap();
        let txn_commit = |member: &str, transaction_start| txn_commit_of(member, epoch, false, 42, transaction_start);
        assert_eq!(m.apply(&id(1), 0, &txn_commit("stranger", 4)).as_ref(), REFUSED, "not a member");
        // The member owns nothing yet: a member may commit only what it owns.
        assert_eq!(m.apply(&id(2), 0, &txn_commit("m", 4)).as_ref(), REFUSED);
        let mut standalone = OffsetsMachine::new();
        let c = |index| {
            let mut p = txn_commit("", index);
            let mut cmd = pb::OffsetsCommand::decode(p.body.clone()).unwrap();
            if let Some(pb::offsets_command::Command::TxnCommit(t)) = &mut cmd.command {
                if let Some(c) = &mut t.commit {
                    c.member_epoch = -1;
                }
            }
            p.body = cmd.encode_to_vec().into();
            p
        };
        assert!(standalone.apply(&id(3), 0, &c(4)).is_empty());
        assert!(standalone.state().txn().is_pending("g", "a", 0));
        assert_eq!(standalone.state().committed("g", "a", 0), None, "pending is not committed");
        let snap = standalone.snapshot().unwrap();
        let mut back = OffsetsMachine::new();
        back.restore(&snap).unwrap();
        assert_eq!(back.state(), standalone.state(), "pending offsets survive a snapshot");
        let marker = |commit| {
            command(pb::offsets_command::Command::TxnMarker(pb::TxnOffsetsMarker {
                producer_id: 7,
                producer_epoch: 0,
                coordinator_epoch: 3,
                commit,
                transaction_start: 4,
                written_ms: 1_000,
            }))
        };
        assert!(back.apply(&id(4), 0, &marker(true)).is_empty());
        assert_eq!(back.state().committed("g", "a", 0).map(|c| c.offset), Some(42));
        assert!(!back.state().txn().is_pending("g", "a", 0));
        // A deposed coordinator's marker is refused.
        let old = command(pb::offsets_command::Command::TxnMarker(pb::TxnOffsetsMarker {
            producer_id: 7,
            coordinator_epoch: 2,
            ..Default::default()
        }));
        assert_eq!(back.apply(&id(5), 0, &old).as_ref(), REFUSED);
        // A late commit of transaction 4, which ended: refused. Transaction 6's: pending, then
        // dropped by its abort marker.
        assert_eq!(back.apply(&id(6), 0, &c(4)).as_ref(), REFUSED);
        assert!(back.apply(&id(7), 0, &c(6)).is_empty());
        let abort6 = command(pb::offsets_command::Command::TxnMarker(pb::TxnOffsetsMarker {
            producer_id: 7,
            coordinator_epoch: 3,
            commit: false,
            transaction_start: 6,
            ..Default::default()
        }));
        assert!(back.apply(&id(8), 0, &abort6).is_empty());
        assert!(!back.state().txn().is_pending("g", "a", 0));
        assert_eq!(back.state().committed("g", "a", 0).map(|c| c.offset), Some(42), "the abort changed nothing");
        // The producer's mark (last written at 1,000 ms) is forgotten only once older than the
        // horizon the leader proposes.
        let prune = |before_ms| command(pb::offsets_command::Command::PruneTxnMarks(pb::PruneTxnMarks { before_ms }));
        assert!(back.apply(&id(9), 0, &prune(1_000)).is_empty());
        assert_eq!(back.state().txn().ended(7), 6);
        assert!(back.apply(&id(10), 0, &prune(1_001)).is_empty());
        assert_eq!(back.state().txn().ended(7), 0, "forgotten");
    }

    /// A classic member's transactional commit (Kafka's TxnOffsetCommit with a generation):
    /// pending at the stored generation, refused at any other, refused in `apply` when the
    /// generation moved after the leader checked it, and committed by its marker.
    #[test]
    fn a_classic_members_transactional_commit_is_checked_against_the_stored_generation() {
        use crate::groups::classic::{ClassicGroup, ClassicMember};
        let id = LogId::default();
        let mut m = OffsetsMachine::new();
        let generation = |generation: i32, expect_version: u64| {
            let member =
                ClassicMember { member_id: "m".into(), assignment: Bytes::from_static(b"a-0"), ..Default::default() };
            let group = ClassicGroup {
                group_id: "g".into(),
                generation,
                protocol_type: "consumer".into(),
                protocol: Some("range".into()),
                leader: Some("m".into()),
                members: [("m".to_string(), member)].into(),
                ..Default::default()
            };
            let record = pb::ClassicGroupRecord { expect_version, group: Some(group.to_proto()) };
            command(pb::offsets_command::Command::ClassicGroup(record))
        };
        let txn_commit = |member: &str, generation: i32, offset: i64, transaction_start: u64| {
            txn_commit_of(member, generation, true, offset, transaction_start)
        };
        assert_eq!(m.apply(&id, 0, &generation(3, 0)).as_ref(), APPLIED);
        let committer = |generation| Committer::Classic { member_id: "m", generation };
        let partitions = || std::iter::once(("a", 0));
        assert_eq!(check_commit(m.groups(), m.classic_groups(), "g", committer(3), partitions()), Ok(()));
        assert_eq!(
            check_commit(m.groups(), m.classic_groups(), "g", committer(2), partitions()),
            Err(CoordinatorError::IllegalGeneration {
                group_id: "g".into(),
                member_id: "m".into(),
                sent: 2,
                current: 3
            })
        );
        assert_eq!(m.apply(&id, 0, &txn_commit("m", 2, 40, 4)).as_ref(), REFUSED, "an older generation");
        assert_eq!(m.apply(&id, 0, &txn_commit("other", 3, 40, 4)).as_ref(), REFUSED, "not a member");
        assert!(!m.state().txn().is_pending("g", "a", 0));
        assert!(m.apply(&id, 0, &txn_commit("m", 3, 40, 4)).is_empty(), "the stored generation");
        assert!(m.state().txn().is_pending("g", "a", 0));
        assert_eq!(m.state().committed("g", "a", 0), None, "pending is not committed");
        // The group rebalanced after a commit at generation 4 was checked on the leader: it
        // commits nothing.
        assert_eq!(m.apply(&id, 0, &generation(4, 1)).as_ref(), APPLIED);
        assert_eq!(m.apply(&id, 0, &txn_commit("m", 3, 41, 4)).as_ref(), REFUSED, "generation 3 is gone");
        let marker = command(pb::offsets_command::Command::TxnMarker(pb::TxnOffsetsMarker {
            producer_id: 7,
            producer_epoch: 0,
            coordinator_epoch: 1,
            commit: true,
            transaction_start: 4,
            written_ms: 1_000,
        }));
        assert!(m.apply(&id, 0, &marker).is_empty());
        assert_eq!(m.state().committed("g", "a", 0).map(|c| c.offset), Some(40), "what generation 3 committed");
        assert!(!m.state().txn().is_pending("g", "a", 0));
    }

    #[test]
    fn group_ids_are_checked() {
        assert!(validate_group_id("orders-service").is_ok());
        assert!(validate_group_id("").is_err());
        assert!(validate_group_id(&"g".repeat(256)).is_err());
    }
}
