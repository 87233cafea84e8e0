//! Offsets committed inside transactions (KIP-447), in the `__consumer_offsets` partition of
//! their group: pending until the producer's transaction ends, then committed or dropped.
//!
//! ```text
//!  AddOffsetsToTxn(group) ─► txn coordinator records the group in the transaction
//!  TxnCommitOffsets ─► group coordinator: member/epoch checked, the group verified in the
//!                      producer's ongoing transaction ─► pending (FetchOffsets shows the old
//!                      offset; with require_stable: UNSTABLE_OFFSET_COMMIT)
//!  EndTxn ─► marker into the group's partition ─► commit: pending become committed
//!                                              └► abort: pending dropped
//! ```
//!
//! Which transaction pending offsets belong to is fixed when they are accepted: the group
//! coordinator reads the producer's last marker here *before* asking the transaction
//! coordinator whether the group is in the producer's ongoing transaction, and the command
//! applies only if no marker of the producer applied since. Any marker applied later is that
//! transaction's (a transaction's markers are all written before the next one can begin), so
//! offsets never wait for — or get committed by — a later transaction's marker.
//!
//! A marker ends the pending offsets of its producer only if its epoch allows: transactions v1
//! keep the epoch, so a marker applies to offsets of its epoch or older; v2 writes markers under
//! the epoch its `EndTxn` bumped, so a marker applies only to offsets of an older epoch — a late
//! duplicate marker of transaction N cannot end transaction N+1's offsets, which run under the
//! epoch N's marker carries. Markers of a deposed transaction coordinator (a lower coordinator
//! epoch than the producer's last marker here) are refused.

use std::collections::BTreeMap;
use std::time::Duration;

use bytes::Bytes;
use prost::Message;
use rill_broker::StatePartition;
use rill_proto::coordinator as pb;

use crate::error::{CoordinatorError, Result};
use crate::offsets::{self, CommittedOffset, Committer, OffsetCommit, OffsetsMachine};

/// One producer's pending offsets.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PendingOffsets {
    /// The producer epoch they were committed under.
    pub epoch: i16,
    /// By group, then (topic, partition).
    pub groups: BTreeMap<String, BTreeMap<(String, u32), CommittedOffset>>,
}

/// The last marker a producer left in this partition.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Mark {
    coordinator_epoch: i32,
    marker_index: u64,
}

/// A marker's producer, epochs and decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TxnMarker {
    /// The transaction's producer id.
    pub producer_id: i64,
    /// The epoch the marker carries.
    pub producer_epoch: i16,
    /// The transaction coordinator's epoch.
    pub coordinator_epoch: i32,
    /// Commit or abort.
    pub commit: bool,
    /// True for transactions v2 (the marker carries the epoch its `EndTxn` bumped).
    pub v2: bool,
}

/// A marker from a coordinator older than the last one the producer's markers came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeposedCoordinator {
    /// The coordinator epoch of the producer's last marker.
    pub current: i32,
}

/// Every producer's pending transactional offsets in one `__consumer_offsets` partition.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TxnOffsets {
    pending: BTreeMap<i64, PendingOffsets>,
    marks: BTreeMap<i64, Mark>,
}

impl TxnOffsets {
    /// True when some producer's transaction holds a pending offset of `group` for
    /// `topic`/`partition`.
    pub fn is_pending(&self, group: &str, topic: &str, partition: u32) -> bool {
        let key = (topic.to_string(), partition);
        self.pending.values().any(|p| p.groups.get(group).is_some_and(|g| g.contains_key(&key)))
    }

    /// The pending offsets of `producer_id`.
    pub fn pending(&self, producer_id: i64) -> Option<&PendingOffsets> {
        self.pending.get(&producer_id)
    }

    /// The Raft log index of `producer_id`'s last marker here (0: none).
    pub fn marker_index(&self, producer_id: i64) -> u64 {
        self.marks.get(&producer_id).map_or(0, |m| m.marker_index)
    }

    /// Adds offsets `c` of producer `producer_id` at `epoch`. Offsets of an older epoch still
    /// pending lost their marker (their transaction ended before this one began) and are
    /// dropped.
    fn add(&mut self, producer_id: i64, epoch: i16, c: pb::CommitOffsets) {
        let entry = self.pending.entry(producer_id).or_default();
        if entry.epoch < epoch {
            *entry = PendingOffsets { epoch, groups: BTreeMap::new() };
        }
        let group = entry.groups.entry(c.group_id).or_default();
        for o in c.offsets {
            let Ok(topic_id) = <[u8; 16]>::try_from(&o.topic_id[..]) else { continue };
            group.insert(
                (o.topic, o.partition),
                CommittedOffset { offset: o.offset, metadata: o.metadata, topic_id, commit_time_ms: o.commit_time_ms },
            );
        }
    }

    /// Applies `marker`, the entry at log index `index`: the producer's pending offsets its
    /// epoch ends are returned with commit (to become committed), dropped with abort.
    fn apply_marker(&mut self, marker: TxnMarker, index: u64) -> Result<Option<PendingOffsets>, DeposedCoordinator> {
        if let Some(mark) = self.marks.get(&marker.producer_id) {
            if marker.coordinator_epoch < mark.coordinator_epoch {
                return Err(DeposedCoordinator { current: mark.coordinator_epoch });
            }
        }
        self.marks
            .insert(marker.producer_id, Mark { coordinator_epoch: marker.coordinator_epoch, marker_index: index });
        let ends = |p: &PendingOffsets| {
            if marker.v2 {
                p.epoch < marker.producer_epoch
            } else {
                p.epoch <= marker.producer_epoch
            }
        };
        if !self.pending.get(&marker.producer_id).is_some_and(ends) {
            return Ok(None);
        }
        let ended = self.pending.remove(&marker.producer_id);
        Ok(ended.filter(|_| marker.commit))
    }

    pub(crate) fn to_proto(&self) -> (Vec<pb::PendingTxnOffsets>, Vec<pb::TxnMarkerMark>) {
        let pending = self
            .pending
            .iter()
            .map(|(&producer_id, p)| pb::PendingTxnOffsets {
                producer_id,
                producer_epoch: i32::from(p.epoch),
                groups: p
                    .groups
                    .iter()
                    .map(|(group, offsets)| pb::GroupOffsets {
                        group_id: group.clone(),
                        offsets: offsets
                            .iter()
                            .map(|((topic, partition), c)| offsets::committed_to(topic, *partition, c))
                            .collect(),
                    })
                    .collect(),
            })
            .collect();
        let marks = self
            .marks
            .iter()
            .map(|(&producer_id, m)| pb::TxnMarkerMark {
                producer_id,
                coordinator_epoch: m.coordinator_epoch,
                marker_index: m.marker_index,
            })
            .collect();
        (pending, marks)
    }

    pub(crate) fn from_proto(pending: Vec<pb::PendingTxnOffsets>, marks: &[pb::TxnMarkerMark]) -> Result<Self, String> {
        let mut out = Self::default();
        for p in pending {
            let epoch = i16::try_from(p.producer_epoch)
                .map_err(|_| format!("pending offsets of producer {} at epoch {}", p.producer_id, p.producer_epoch))?;
            for g in p.groups {
                let c = pb::CommitOffsets { group_id: g.group_id, offsets: g.offsets, ..Default::default() };
                out.add(p.producer_id, epoch, c);
            }
        }
        for m in marks {
            out.marks
                .insert(m.producer_id, Mark { coordinator_epoch: m.coordinator_epoch, marker_index: m.marker_index });
        }
        Ok(out)
    }
}

/// What `apply` does with a `TxnCommitOffsets` command; `may_commit`: the committer may commit
/// the offsets by the applied state. Returns false when refused.
pub(crate) fn apply_commit(txn: &mut TxnOffsets, c: pb::TxnCommitOffsets, may_commit: bool) -> bool {
    let Ok(epoch) = i16::try_from(c.producer_epoch) else { return false };
    let Some(commit) = c.commit else { return false };
    if !may_commit || txn.marker_index(c.producer_id) != c.marker_index {
        return false;
    }
    txn.add(c.producer_id, epoch, commit);
    true
}

/// What `apply` does with a marker at log index `index`: the offsets to commit, by group.
pub(crate) fn apply_marker(
    txn: &mut TxnOffsets,
    m: &pb::TxnOffsetsMarker,
    index: u64,
) -> Result<Vec<pb::CommitOffsets>, DeposedCoordinator> {
    let Ok(producer_epoch) = i16::try_from(m.producer_epoch) else { return Ok(Vec::new()) };
    let marker = TxnMarker {
        producer_id: m.producer_id,
        producer_epoch,
        coordinator_epoch: m.coordinator_epoch,
        commit: m.commit,
        v2: m.transaction_version >= 2,
    };
    let Some(ended) = txn.apply_marker(marker, index)? else { return Ok(Vec::new()) };
    Ok(ended
        .groups
        .into_iter()
        .map(|(group_id, offsets)| pb::CommitOffsets {
            group_id,
            offsets: offsets.iter().map(|((t, p), c)| offsets::committed_to(t, *p, c)).collect(),
            member_id: String::new(),
            member_epoch: -1,
        })
        .collect())
}

/// A transactional offset commit checked on the group's coordinator, to be verified with the
/// transaction's coordinator and then proposed ([`commit`]).
#[derive(Debug, Clone)]
pub struct Prepared {
    commit: pb::CommitOffsets,
    classic: bool,
    transactional_id: String,
    producer: (i64, i16),
    marker_index: u64,
}

/// On the group's coordinator, first of three steps: checks a commit of `offsets` of `group` by
/// `committer` inside the transaction of `transactional_id`'s `producer` (id, epoch), and reads the producer's last
/// marker here. Second, the caller verifies with the transaction's coordinator that the group
/// is in that producer's ongoing transaction; third, [`commit`]. The order matters: a marker
/// applied after this read ends the transaction verified after it, so the command is refused.
pub fn prepare(
    partition: &StatePartition<OffsetsMachine>,
    group: &str,
    committer: Committer<'_>,
    (transactional_id, producer): (&str, (i64, i16)),
    offsets: &[OffsetCommit],
) -> Result<Prepared> {
    let (commit, classic) = offsets::prepare_commit(partition, group, committer, offsets)?;
    let marker_index = partition.read(|m| m.state().txn().marker_index(producer.0))?;
    Ok(Prepared { commit, classic, transactional_id: transactional_id.to_string(), producer, marker_index })
}

/// On the group's coordinator, after [`prepare`] and the verification: proposes the pending
/// offsets; returns once they are replicated.
pub async fn commit(
    partition: &StatePartition<OffsetsMachine>,
    prepared: Prepared,
    committer: Committer<'_>,
    timeout: Duration,
) -> Result<()> {
    let group = prepared.commit.group_id.clone();
    let touched: Vec<(String, u32)> = prepared.commit.offsets.iter().map(|o| (o.topic.clone(), o.partition)).collect();
    let producer_id = prepared.producer.0;
    let prepared_id = prepared.transactional_id.clone();
    let command = pb::OffsetsCommand {
        command: Some(pb::offsets_command::Command::TxnCommit(pb::TxnCommitOffsets {
            commit: Some(prepared.commit),
            classic: prepared.classic,
            producer_id,
            producer_epoch: i32::from(prepared.producer.1),
            marker_index: prepared.marker_index,
        })),
    };
    let answer = partition.propose(command.encode_to_vec().into(), timeout).await?;
    if answer.as_ref() != offsets::REFUSED {
        return Ok(());
    }
    // The committer lost the partitions meanwhile, or the transaction ended.
    let partitions = || touched.iter().map(|(t, p)| (t.as_str(), *p));
    partition.read(|m| offsets::check_commit(m.groups(), m.classic_groups(), &group, committer, partitions()))??;
    Err(CoordinatorError::InvalidTxnState {
        transactional_id: prepared_id,
        reason: format!(
            "the transaction of producer {producer_id} ended while its offsets for group {group:?} were being committed"
        ),
    })
}

/// On the group's coordinator: writes a transaction's marker (its end) into the group's
/// partition; `TransactionCoordinatorFenced` when a newer coordinator's marker came first.
pub async fn write_marker(
    partition: &StatePartition<OffsetsMachine>,
    marker: TxnMarker,
    timeout: Duration,
) -> Result<()> {
    let command = pb::OffsetsCommand {
        command: Some(pb::offsets_command::Command::TxnMarker(pb::TxnOffsetsMarker {
            producer_id: marker.producer_id,
            producer_epoch: i32::from(marker.producer_epoch),
            coordinator_epoch: marker.coordinator_epoch,
            commit: marker.commit,
            transaction_version: if marker.v2 { 2 } else { 1 },
        })),
    };
    let answer: Bytes = partition.propose(command.encode_to_vec().into(), timeout).await?;
    if answer.as_ref() == offsets::REFUSED {
        return Err(CoordinatorError::TransactionCoordinatorFenced {
            producer_id: marker.producer_id,
            sent: marker.coordinator_epoch,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn commit(group: &str, offset: i64) -> pb::CommitOffsets {
        pb::CommitOffsets {
            group_id: group.into(),
            offsets: vec![pb::CommittedOffset {
                topic: "t".into(),
                topic_id: Bytes::from_static(&[1; 16]),
                partition: 0,
                offset,
                metadata: String::new(),
                commit_time_ms: 7,
            }],
            member_id: String::new(),
            member_epoch: -1,
        }
    }

    fn marker(epoch: i16, coordinator_epoch: i32, commit: bool, v2: bool) -> TxnMarker {
        TxnMarker { producer_id: 9, producer_epoch: epoch, coordinator_epoch, commit, v2 }
    }

    #[test]
    fn a_commit_marker_hands_over_the_pending_offsets_and_an_abort_drops_them() {
        let mut t = TxnOffsets::default();
        t.add(9, 3, commit("g", 10));
        t.add(9, 3, commit("h", 20));
        assert!(t.is_pending("g", "t", 0) && t.is_pending("h", "t", 0));
        assert!(!t.is_pending("g", "t", 1) && !t.is_pending("x", "t", 0));
        let ended = t.apply_marker(marker(3, 1, true, false), 50).unwrap().unwrap();
        assert_eq!(ended.groups.len(), 2, "v1: a marker of the same epoch ends the transaction");
        assert!(!t.is_pending("g", "t", 0));
        assert_eq!(t.marker_index(9), 50);
        assert_eq!(t.marker_index(8), 0);

        t.add(9, 3, commit("g", 11));
        assert_eq!(t.apply_marker(marker(3, 1, false, false), 60).unwrap(), None, "abort: nothing to commit");
        assert!(!t.is_pending("g", "t", 0), "abort dropped them");
        assert_eq!(t.marker_index(9), 60);
    }

    #[test]
    fn a_v2_marker_ends_only_offsets_of_an_older_epoch() {
        let mut t = TxnOffsets::default();
        // Transaction N at epoch 4 ended by a marker at epoch 5; N+1 runs at epoch 5.
        t.add(9, 4, commit("g", 10));
        assert!(t.apply_marker(marker(5, 1, true, true), 10).unwrap().is_some());
        t.add(9, 5, commit("g", 20));
        // A late duplicate of N's marker leaves N+1's offsets pending.
        assert_eq!(t.apply_marker(marker(5, 1, true, true), 11).unwrap(), None);
        assert!(t.is_pending("g", "t", 0));
        // N+1's own marker (epoch 6) ends them.
        let ended = t.apply_marker(marker(6, 1, true, true), 12).unwrap().unwrap();
        assert_eq!(ended.groups["g"][&("t".to_string(), 0)].offset, 20);
    }

    #[test]
    fn a_deposed_coordinator_is_refused_and_orphans_of_an_older_epoch_go() {
        let mut t = TxnOffsets::default();
        t.add(9, 1, commit("g", 10));
        t.apply_marker(marker(1, 5, false, false), 1).unwrap();
        t.add(9, 1, commit("g", 11));
        assert_eq!(t.apply_marker(marker(1, 4, true, false), 2), Err(DeposedCoordinator { current: 5 }));
        assert!(t.is_pending("g", "t", 0), "the deposed coordinator's marker changed nothing");
        assert_eq!(t.marker_index(9), 1);
        // A newer epoch's offsets replace what an older epoch left.
        t.add(9, 2, commit("h", 1));
        assert!(!t.is_pending("g", "t", 0));
        assert!(t.is_pending("h", "t", 0));
    }

    #[test]
    fn the_snapshot_is_the_state() {
        let mut t = TxnOffsets::default();
        t.add(9, 1, commit("g", 10));
        t.apply_marker(TxnMarker { producer_id: 4, ..marker(1, 2, true, false) }, 3).unwrap();
        let (pending, marks) = t.to_proto();
        assert_eq!(TxnOffsets::from_proto(pending, &marks).unwrap(), t);
    }

    #[test]
    fn commands_apply_only_for_an_unchanged_marker_index() {
        let mut t = TxnOffsets::default();
        let c = |index| pb::TxnCommitOffsets {
            commit: Some(commit("g", 10)),
            classic: false,
            producer_id: 9,
            producer_epoch: 1,
            marker_index: index,
        };
        assert!(!apply_commit(&mut t, c(0), false), "the committer may not commit");
        assert!(apply_commit(&mut t, c(0), true));
        let m = pb::TxnOffsetsMarker {
            producer_id: 9,
            producer_epoch: 1,
            coordinator_epoch: 1,
            commit: true,
            transaction_version: 1,
        };
        let committed = apply_marker(&mut t, &m, 40).unwrap();
        assert_eq!(committed.len(), 1);
        assert!(!apply_commit(&mut t, c(0), true), "decided before the marker at 40: refused");
        assert!(!t.is_pending("g", "t", 0));
        assert!(apply_commit(&mut t, c(40), true));
    }
}
