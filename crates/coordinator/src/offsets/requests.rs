//! The group coordinator's operations on its leader: commit, delete, expire and read offsets —
//! each checked against the applied state, then proposed as a command (or served as a
//! linearizable read) on the caught-up leader of the group's partition.

use std::collections::BTreeMap;
use std::time::Duration;

use bytes::Bytes;
use prost::Message;
use rill_broker::StatePartition;
use rill_proto::coordinator as pb;

use super::machine::{OffsetsMachine, REFUSED};
use super::state::{
    check_commit, check_delete_group, check_delete_offsets, committed_to, CommittedOffset, Committer, OffsetCommit,
    OffsetsState,
};
use super::{validate_group_id, MAX_OFFSETS_PER_COMMIT};
use crate::error::{CoordinatorError, Result};

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
                        leader_epoch: o.leader_epoch,
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
