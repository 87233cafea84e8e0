//! The committed offsets of every group of one `__consumer_offsets` partition, and the rules a
//! commit or a deletion must pass — decided on the leader before proposing, and checked again
//! when the command applies.

use std::collections::BTreeMap;

use bytes::Bytes;
use rill_proto::coordinator as pb;

use crate::error::{CoordinatorError, Result};
use crate::groups::classic::ClassicGroups;
use crate::groups::group::ConsumerGroups;
use crate::offsets::txn::TxnOffsets;

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
    /// The leader epoch the committing client gave with it (Kafka's committed leader epoch).
    pub leader_epoch: Option<i32>,
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
    /// The leader epoch of the record before `offset`, if the client knows it.
    pub leader_epoch: Option<i32>,
}

/// Every group's committed offsets, and the offsets transactions hold pending.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OffsetsState {
    pub(super) groups: BTreeMap<String, BTreeMap<(String, u32), CommittedOffset>>,
    pub(super) txn: TxnOffsets,
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
    pub(super) fn remove_group(&mut self, group: &str) {
        self.groups.remove(group);
    }

    /// Removes the offsets of `partitions` of `group` (a group left without offsets goes).
    pub(super) fn remove_offsets<'a>(&mut self, group: &str, partitions: impl Iterator<Item = (&'a str, u32)>) {
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
    pub(super) fn expire(&mut self, group: &str, expired: &[pb::ExpiredOffset]) {
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

    pub(super) fn apply(&mut self, c: pb::CommitOffsets) {
        let group = self.groups.entry(c.group_id).or_default();
        for o in c.offsets {
            // The coordinator only proposes 16-byte ids; every replica skips another alike.
            if let Some((key, committed)) = committed_from(o) {
                group.insert(key, committed);
            }
        }
    }

    pub(super) fn to_proto(&self) -> pb::OffsetsSnapshot {
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

/// A stored offset read back, under its (topic, partition); `None` for a topic id that is not
/// 16 bytes (never proposed).
pub(crate) fn committed_from(o: pb::CommittedOffset) -> Option<((String, u32), CommittedOffset)> {
    let topic_id = <[u8; 16]>::try_from(&o.topic_id[..]).ok()?;
    let committed = CommittedOffset {
        offset: o.offset,
        metadata: o.metadata,
        topic_id,
        commit_time_ms: o.commit_time_ms,
        leader_epoch: o.leader_epoch,
    };
    Some(((o.topic, o.partition), committed))
}

pub(crate) fn committed_to(topic: &str, partition: u32, c: &CommittedOffset) -> pb::CommittedOffset {
    pb::CommittedOffset {
        topic: topic.to_string(),
        topic_id: Bytes::copy_from_slice(&c.topic_id),
        partition,
        offset: c.offset,
        metadata: c.metadata.clone(),
        commit_time_ms: c.commit_time_ms,
        leader_epoch: c.leader_epoch,
    }
}

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

/// Whether `group_id` may be deleted: it exists (members or offsets) and has no members, by its
/// KIP-848 record or its classic one. (A classic group's first generation is stored only once its
/// leader syncs: a server is to also ask the leader's engine,
/// [`crate::groups::classic::ClassicEngine::has_members`], which the server's group coordinator
/// shard does before deleting.)
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

/// Whether offsets of `topics` may be deleted from `group_id`: no member subscribes to one (by
/// name or by pattern).
pub fn check_delete_offsets<'t>(
    groups: &ConsumerGroups,
    group_id: &str,
    mut topics: impl Iterator<Item = &'t str>,
) -> Result<()> {
    let Some(g) = groups.get(group_id) else { return Ok(()) };
    match topics.find(|t| g.is_subscribed(t)) {
        Some(topic) => {
            Err(CoordinatorError::GroupSubscribedToTopic { group_id: group_id.to_string(), topic: topic.to_string() })
        }
        None => Ok(()),
    }
}
