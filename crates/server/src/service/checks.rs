//! The checks a request's fields go through that need no running node: the producer epoch, the
//! transaction version, a (topic, partition) against the metadata, offsets to commit, who
//! commits, the partitions a transaction adds, a coordinator key. Each exists once; the service
//! functions call them, and so do the fuzz targets (`fuzz/fuzz_targets/proto_requests.rs`).

use std::collections::HashMap;

use rill_coordinator::groups::TopicPartitions;
use rill_coordinator::offsets::{self, Committer, MAX_OFFSET_METADATA_BYTES};
use rill_coordinator::transactions::{self, TxnProtocol};
use rill_coordinator::OffsetCommit;
use rill_meta::{MetaState, PartitionAssignment, PartitionKind, TopicMeta};

use super::limits::SeenPartitions;
use super::{Answer, Refusal, RequestError, TopicAnswers};
use crate::errors;

/// Some partitions of one topic, as a request names them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NamedPartitions {
    /// The topic.
    pub topic: String,
    /// Its partitions.
    pub partitions: Vec<u32>,
}

/// One topic's offsets to commit, as a request names them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CommitTopic {
    /// The topic.
    pub topic: String,
    /// Each partition's offset.
    pub partitions: Vec<CommitPartition>,
}

/// One partition's offset to commit.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CommitPartition {
    /// The partition.
    pub partition: u32,
    /// The next offset to read.
    pub offset: i64,
    /// Free text, at most [`MAX_OFFSET_METADATA_BYTES`].
    pub metadata: String,
    /// The leader epoch of the record before `offset`, if the client knows it (Kafka's
    /// committed leader epoch); kept and answered with the offset.
    pub leader_epoch: Option<i32>,
}

/// A request's producer epoch, checked to fit Kafka's 16 bits (Rill's wire carries 32).
pub fn producer_epoch(producer_epoch: i32) -> Answer<i16> {
    i16::try_from(producer_epoch)
        .ok()
        .filter(|e| *e >= 0)
        .ok_or_else(|| errors::invalid_request(format!("producer epoch {producer_epoch} is not a 16-bit epoch")))
}

/// The transaction protocol a request names by its version number ([`TxnProtocol::from_version`]).
pub fn txn_protocol(version: u32) -> Answer<TxnProtocol> {
    TxnProtocol::from_version(version).map_err(errors::invalid_request)
}

/// The transactional part of a produce: its id, and whether the partitions it writes must have
/// been added already (v1) or are added by their first batch (v2).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transactional {
    /// The transactional id.
    pub id: String,
    /// Its protocol.
    pub protocol: TxnProtocol,
}

/// The transactional part of a produce request naming `id` (empty: none) at `version`. A bad id
/// or version refuses the whole request: every batch in it is the same producer's.
pub fn transactional(id: &str, version: u32) -> Result<Option<Transactional>, RequestError> {
    if id.is_empty() {
        return Ok(None);
    }
    transactions::validate(id, 0).map_err(|e| RequestError::Invalid(e.to_string()))?;
    let protocol = TxnProtocol::from_version(version).map_err(RequestError::Invalid)?;
    Ok(Some(Transactional { id: id.to_string(), protocol }))
}

/// The record topic `topic` and its partition `partition` by `meta`, or why a request may not
/// name it: the topic is unknown (or no longer has `topic_id`, when one is given), is internal
/// (its partitions hold a coordinator's state, written by the cluster), or has no such partition.
pub fn record_partition<'m>(
    meta: &'m MetaState,
    topic: &str,
    topic_id: &[u8],
    partition: u32,
) -> Answer<(&'m TopicMeta, &'m PartitionAssignment)> {
    let Some(t) = meta.topics.get(topic) else {
        return Err(match (topic.is_empty(), topic_id.is_empty()) {
            (_, true) => errors::unknown_topic(topic),
            (true, false) => errors::no_topic_with_id(topic_id),
            (false, false) => errors::unknown_topic_id(topic),
        });
    };
    if !topic_id.is_empty() && topic_id != t.topic_id.as_slice() {
        return Err(errors::unknown_topic_id(topic));
    }
    if t.is_internal() {
        return Err(errors::internal_topic(topic, t.kind.name()));
    }
    match t.partitions.get(partition as usize) {
        Some(assignment) => Ok((t, assignment)),
        None => Err(errors::unknown_partition(topic, partition, t.partitions.len())),
    }
}

/// Names the topics a request names by id alone (Kafka's `Fetch` v13+), each `(name, id)` with
/// an empty name: the name of the topic with that id. An id no topic has keeps its empty name,
/// which [`record_partition`] refuses with `UNKNOWN_TOPIC_ID`. Costs one pass over the topics,
/// and only when some topic is named by id alone.
pub fn name_topics_by_id<'a>(meta: &MetaState, topics: impl Iterator<Item = (&'a mut String, &'a [u8])>) {
    let mut by_id: Option<HashMap<&[u8], &str>> = None;
    for (name, id) in topics.filter(|(name, id)| name.is_empty() && !id.is_empty()) {
        let by_id = by_id
            .get_or_insert_with(|| meta.topics.values().map(|t| (t.topic_id.as_slice(), t.name.as_str())).collect());
        if let Some(found) = by_id.get(id) {
            (*found).clone_into(name);
        }
    }
}

/// Checks every offset of a commit against `meta`: the offsets to commit, and each partition's
/// answer. A partition is refused when its topic is (`refused`: the caller may not commit it),
/// when its topic or partition is not a record topic's ([`record_partition`]), when it appears
/// twice, or when its offset is negative or its metadata too long; the others are committed.
pub fn committed_offsets(
    meta: &MetaState,
    topics: Vec<CommitTopic>,
    refused: impl Fn(&str) -> Option<Refusal>,
) -> (Vec<OffsetCommit>, Vec<TopicAnswers<()>>) {
    let mut seen = SeenPartitions::default();
    let mut accepted = Vec::new();
    let mut answers = Vec::new();
    for t in topics {
        let mut partitions = Vec::with_capacity(t.partitions.len());
        let denied = refused(&t.topic);
        for p in t.partitions {
            let named = match &denied {
                Some(e) => Err(e.clone()),
                None => record_partition(meta, &t.topic, &[], p.partition),
            };
            let checked = named.and_then(|(topic, _)| {
                if !seen.first(&t.topic, p.partition) {
                    Err(errors::duplicate_partition(&t.topic, p.partition))
                } else if p.offset < 0 {
                    Err(errors::negative_offset(p.offset))
                } else if p.metadata.len() > MAX_OFFSET_METADATA_BYTES {
                    Err(errors::offset_metadata_too_large(p.metadata.len(), MAX_OFFSET_METADATA_BYTES))
                } else {
                    Ok(topic.topic_id)
                }
            });
            match checked {
                Ok(topic_id) => {
                    accepted.push(OffsetCommit {
                        topic: t.topic.clone(),
                        topic_id,
                        partition: p.partition,
                        offset: p.offset,
                        metadata: p.metadata,
                        leader_epoch: p.leader_epoch,
                    });
                    partitions.push((p.partition, Ok(())));
                }
                Err(e) => partitions.push((p.partition, Err(e))),
            }
        }
        answers.push(TopicAnswers { topic: t.topic, partitions });
    }
    (accepted, answers)
}

/// Who commits, from a request's member id and generation (member epoch): nobody (a group
/// without members, generation -1), or a member at its epoch.
pub fn committer(member_id: &str, generation_id: i32) -> Answer<Committer<'_>> {
    match (member_id, generation_id) {
        ("", g) if g < 0 => Ok(Committer::Standalone),
        ("", _) => Err(errors::invalid_request(
            "a commit without a member id must carry generation_id -1 (a group without members)",
        )),
        (member_id, epoch) => Ok(Committer::Member { member_id, epoch }),
    }
}

/// The partitions a transaction adds, checked against `meta`: every topic is a record topic with
/// each partition ([`record_partition`]), and no partition appears twice. One bad partition
/// refuses them all: a transaction's additions are all or nothing.
pub fn txn_partitions(meta: &MetaState, topics: &[NamedPartitions]) -> Answer<TopicPartitions> {
    let mut out = TopicPartitions::new();
    for t in topics {
        let set = out.entry(t.topic.clone()).or_default();
        for &p in &t.partitions {
            record_partition(meta, &t.topic, &[], p)?;
            if !set.insert(p) {
                return Err(errors::duplicate_partition(&t.topic, p));
            }
        }
    }
    Ok(out)
}

/// Checks a coordinator's key: a group id for the group coordinator, a transactional id for
/// the transaction coordinator.
pub fn coordinator_key(kind: PartitionKind, key: &str) -> Result<(), Refusal> {
    let checked = match kind {
        PartitionKind::ConsumerOffsets => offsets::validate_group_id(key),
        _ => transactions::validate(key, 0).map(|_| ()),
    };
    checked.map_err(|e| errors::coordinator(&e))
}

/// Checks the leader epoch a request saw (`None`: it saw none) against the term the partition's
/// leader here leads in: an older epoch is `FENCED_LEADER_EPOCH` (the client's metadata is
/// stale), a newer one `UNKNOWN_LEADER_EPOCH` (this node has not yet seen the leadership the
/// client has; it retries). A replica that does not lead passes: its read refuses it.
pub fn leader_epoch(topic: &str, partition: u32, seen: Option<i32>, term: Option<u64>) -> Answer<()> {
    let (Some(seen), Some(term)) = (seen, term) else { return Ok(()) };
    let seen = u64::try_from(seen).unwrap_or(0);
    match seen.cmp(&term) {
        std::cmp::Ordering::Equal => Ok(()),
        std::cmp::Ordering::Less => Err(Refusal::new(
            rill_proto::common::ErrorCode::FencedLeaderEpoch,
            format!("{topic}/{partition}: leader epoch {seen} is older than the leader's, {term}; refresh metadata"),
        )),
        std::cmp::Ordering::Greater => Err(Refusal::new(
            rill_proto::common::ErrorCode::UnknownLeaderEpoch,
            format!("{topic}/{partition}: leader epoch {seen} is newer than this leader's, {term}; retry"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rill_proto::common::ErrorCode;

    #[test]
    fn epochs_and_versions_are_read_once() {
        assert_eq!(producer_epoch(0), Ok(0));
        assert_eq!(producer_epoch(i32::from(i16::MAX)), Ok(i16::MAX));
        assert_eq!(producer_epoch(-1).unwrap_err().code, ErrorCode::InvalidRequest);
        assert_eq!(producer_epoch(1 << 16).unwrap_err().code, ErrorCode::InvalidRequest);
        assert_eq!(txn_protocol(0), Ok(TxnProtocol::V1));
        assert_eq!(txn_protocol(2), Ok(TxnProtocol::V2));
        assert!(txn_protocol(3).unwrap_err().message.contains("unknown transaction version 3"));
        assert_eq!(transactional("", 9), Ok(None), "no id: not transactional, whatever the version");
        assert!(matches!(transactional("tx", 9), Err(RequestError::Invalid(_))));
        assert_eq!(transactional("tx", 2), Ok(Some(Transactional { id: "tx".into(), protocol: TxnProtocol::V2 })));
    }

    #[test]
    fn who_commits() {
        assert_eq!(committer("", -1), Ok(Committer::Standalone));
        assert_eq!(committer("", 3).unwrap_err().code, ErrorCode::InvalidRequest);
        assert_eq!(committer("m", 3), Ok(Committer::Member { member_id: "m", epoch: 3 }));
    }
}
