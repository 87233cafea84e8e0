//! Offsets committed inside transactions (KIP-447), in the `__consumer_offsets` partition of
//! their group: pending until the producer's transaction ends, then committed or dropped.
//!
//! ```text
//!  AddOffsetsToTxn(group) ─► txn coordinator records the group in the transaction
//!  TxnCommitOffsets ─► group coordinator: member/epoch checked, the group verified in the
//!                      producer's ongoing transaction (v2: the decided transaction's owed
//!                      marker applied first, in the same command) ─► pending (FetchOffsets
//!                      shows the old offset; with require_stable: UNSTABLE_OFFSET_COMMIT)
//!  EndTxn ─► marker into the group's partition ─► commit: pending become committed
//!                                              └► abort: pending dropped
//! ```
//!
//! Pending offsets are tied to one transaction, named by the version of the transaction
//! coordinator's write that began it (`transaction_start`, monotonic per transactional id and
//! independent of epochs): the transaction coordinator names the ongoing transaction when it
//! confirms the group is in it, the pending command carries that name, and each marker names the
//! transaction it ends. So:
//!
//! * a marker ends only the offsets of its own transaction — a late duplicate of transaction N's
//!   marker leaves transaction N+1's offsets pending, under either protocol version and at any
//!   epoch (v1 keeps the epoch across transactions; v2 at its last epoch cannot bump it);
//! * a commit of a transaction whose marker (or a later transaction's) already applied here is
//!   refused: it is late, or was verified against a coordinator that had not yet seen the end;
//! * offsets of an earlier transaction still pending when a later transaction's offsets or
//!   marker arrive lost their transaction (it ended) and are dropped.
//!
//! Markers of a deposed transaction coordinator (a lower coordinator epoch than the producer's
//! last marker here) are refused.
//!
//! What a producer's markers left here is its *mark* (the latest transaction they ended, the
//! highest coordinator epoch, when the last was written). Marks refuse requests that are late;
//! a mark older than the transactional id expiration (and at least an hour) is forgotten
//! ([`prune_marks`]), and from then on a commit prepared before that point is refused.

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
    /// Their transaction (the version of the coordinator's write that began it).
    pub transaction_start: u64,
    /// By group, then (topic, partition).
    pub groups: BTreeMap<String, BTreeMap<(String, u32), CommittedOffset>>,
}

/// What the markers of a producer left in this partition.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Mark {
    /// The highest coordinator epoch of its markers.
    coordinator_epoch: i32,
    /// The latest transaction a marker ended.
    transaction_start: u64,
    /// When its latest marker was written (the group coordinator's clock; 0: unknown).
    marked_ms: i64,
}

/// A marker: the transaction it ends and the decision.
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
    /// The transaction it ends (the version of the coordinator's write that began it).
    pub transaction_start: u64,
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
    /// The `before_ms` of the latest prune: commits prepared earlier are refused (see
    /// [`TxnOffsets::prune_marks`]).
    marks_pruned_before_ms: i64,
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

    /// The latest transaction of `producer_id` a marker ended here (0: none).
    pub fn ended(&self, producer_id: i64) -> u64 {
        self.marks.get(&producer_id).map_or(0, |m| m.transaction_start)
    }

    /// Every (topic, partition) of `group` some transaction holds a pending offset of.
    pub fn pending_partitions(&self, group: &str) -> std::collections::BTreeSet<(String, u32)> {
        self.pending.values().filter_map(|p| p.groups.get(group)).flat_map(|g| g.keys().cloned()).collect()
    }

    /// Drops every pending offset of `group` (the group was deleted).
    pub(crate) fn remove_group(&mut self, group: &str) {
        self.pending.values_mut().for_each(|p| {
            p.groups.remove(group);
        });
        self.pending.retain(|_, p| !p.groups.is_empty());
    }

    /// Drops the pending offsets of `partitions` of `group` (their offsets were deleted).
    pub(crate) fn remove_offsets<'a>(&mut self, group: &str, partitions: impl Iterator<Item = (&'a str, u32)> + Clone) {
        for p in self.pending.values_mut() {
            if let Some(g) = p.groups.get_mut(group) {
                for (topic, partition) in partitions.clone() {
                    g.remove(&(topic.to_string(), partition));
                }
                if g.is_empty() {
                    p.groups.remove(group);
                }
            }
        }
        self.pending.retain(|_, p| !p.groups.is_empty());
    }

    /// Adds offsets `c` of producer `producer_id`'s transaction `transaction_start` at `epoch`;
    /// false (nothing added) when that transaction already ended here, or a later one has
    /// offsets pending. Offsets of an earlier transaction still pending lost their transaction
    /// (it ended) and are dropped.
    fn add(&mut self, producer_id: i64, epoch: i16, transaction_start: u64, c: pb::CommitOffsets) -> bool {
        if transaction_start <= self.ended(producer_id) {
            return false;
        }
        let entry = self.pending.entry(producer_id).or_default();
        if entry.transaction_start > transaction_start {
            return false;
        }
        if entry.transaction_start < transaction_start {
            *entry = PendingOffsets { epoch, transaction_start, groups: BTreeMap::new() };
        }
        let group = entry.groups.entry(c.group_id).or_default();
        for o in c.offsets {
            if let Some((key, committed)) = offsets::committed_from(o) {
                group.insert(key, committed);
            }
        }
        true
    }

    /// Applies `marker`: the producer's pending offsets of the transaction it ends are returned
    /// with commit (to become committed), dropped with abort. Offsets of an earlier transaction
    /// are dropped; a later transaction's stay pending (the marker is a late duplicate).
    fn apply_marker(
        &mut self,
        marker: TxnMarker,
        written_ms: i64,
    ) -> Result<Option<PendingOffsets>, DeposedCoordinator> {
        let mark = self.marks.entry(marker.producer_id).or_default();
        if marker.coordinator_epoch < mark.coordinator_epoch {
            return Err(DeposedCoordinator { current: mark.coordinator_epoch });
        }
        mark.coordinator_epoch = marker.coordinator_epoch;
        mark.transaction_start = mark.transaction_start.max(marker.transaction_start);
        mark.marked_ms = mark.marked_ms.max(written_ms);
        let Some(pending) = self.pending.get(&marker.producer_id) else { return Ok(None) };
        if pending.transaction_start > marker.transaction_start {
            return Ok(None);
        }
        let ends_it = pending.transaction_start == marker.transaction_start;
        let ended = self.pending.remove(&marker.producer_id);
        // The txn-offsets-on-abort mutation (simulation only) commits an aborted transaction's
        // offsets.
        let commit = marker.commit || rill_rt::mutation::active(rill_rt::mutation::Mutation::TxnOffsetsOnAbort);
        Ok(ended.filter(|_| ends_it && commit))
    }

    /// The number of marks [`TxnOffsets::prune_marks`] would forget or date at `before_ms`.
    pub(crate) fn prunable_marks(&self, before_ms: i64) -> usize {
        self.marks.iter().filter(|(pid, m)| m.marked_ms < before_ms && !self.pending.contains_key(pid)).count()
    }

    /// Forgets the marks of producers last marked before `before_ms` with no pending offsets
    /// (see `PruneTxnMarks` in `proto/rill/coordinator.proto`); a mark without a time is dated
    /// `before_ms` instead. From then on a commit prepared before `before_ms` is refused: the
    /// marks that refused a late commit of an ended transaction are gone, and such a commit is
    /// one prepared before its transaction's marker. Returns how many marks were forgotten.
    fn prune_marks(&mut self, before_ms: i64) -> usize {
        let count = self.marks.len();
        let pending = &self.pending;
        self.marks.retain(|pid, m| {
            if m.marked_ms == 0 {
                m.marked_ms = before_ms;
            }
            m.marked_ms >= before_ms || pending.contains_key(pid)
        });
        self.marks_pruned_before_ms = self.marks_pruned_before_ms.max(before_ms);
        count - self.marks.len()
    }

    /// True when `commit` was prepared before the latest prune (see [`TxnOffsets::prune_marks`]).
    fn prepared_before_prune(&self, commit: &pb::CommitOffsets) -> bool {
        commit.offsets.iter().any(|o| o.commit_time_ms < self.marks_pruned_before_ms)
    }

    pub(crate) fn to_proto(&self) -> (Vec<pb::PendingTxnOffsets>, Vec<pb::TxnMarkerMark>, i64) {
        let pending = self
            .pending
            .iter()
            .map(|(&producer_id, p)| pb::PendingTxnOffsets {
                producer_id,
                producer_epoch: i32::from(p.epoch),
                transaction_start: p.transaction_start,
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
                transaction_start: m.transaction_start,
                marked_ms: m.marked_ms,
            })
            .collect();
        (pending, marks, self.marks_pruned_before_ms)
    }

    pub(crate) fn from_proto(
        pending: Vec<pb::PendingTxnOffsets>,
        marks: &[pb::TxnMarkerMark],
        marks_pruned_before_ms: i64,
    ) -> Result<Self, String> {
        let mut out = Self { marks_pruned_before_ms, ..Self::default() };
        for m in marks {
            let mark = Mark {
                coordinator_epoch: m.coordinator_epoch,
                transaction_start: m.transaction_start,
                marked_ms: m.marked_ms,
            };
            out.marks.insert(m.producer_id, mark);
        }
        for p in pending {
            let epoch = i16::try_from(p.producer_epoch)
                .map_err(|_| format!("pending offsets of producer {} at epoch {}", p.producer_id, p.producer_epoch))?;
            for g in p.groups {
                let c = pb::CommitOffsets { group_id: g.group_id, offsets: g.offsets, ..Default::default() };
                if !out.add(p.producer_id, epoch, p.transaction_start, c) {
                    return Err(format!("pending offsets of producer {} of an ended transaction", p.producer_id));
                }
            }
        }
        Ok(out)
    }
}

/// What `apply` does with a `TxnCommitOffsets` command; `may_commit`: the committer may commit
/// the offsets by the applied state. Returns false when refused.
pub(crate) fn apply_commit(txn: &mut TxnOffsets, c: pb::TxnCommitOffsets, may_commit: bool) -> bool {
    let Ok(epoch) = i16::try_from(c.producer_epoch) else { return false };
    let Some(commit) = c.commit else { return false };
    may_commit && !txn.prepared_before_prune(&commit) && txn.add(c.producer_id, epoch, c.transaction_start, commit)
}

/// What `apply` does with a marker: the offsets to commit, by group.
pub(crate) fn apply_marker(
    txn: &mut TxnOffsets,
    m: &pb::TxnOffsetsMarker,
) -> Result<Vec<pb::CommitOffsets>, DeposedCoordinator> {
    let Ok(producer_epoch) = i16::try_from(m.producer_epoch) else { return Ok(Vec::new()) };
    let marker = TxnMarker {
        producer_id: m.producer_id,
        producer_epoch,
        coordinator_epoch: m.coordinator_epoch,
        commit: m.commit,
        transaction_start: m.transaction_start,
    };
    let Some(ended) = txn.apply_marker(marker, m.written_ms)? else { return Ok(Vec::new()) };
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

/// What `apply` does with a [`pb::PruneTxnMarks`].
pub(crate) fn apply_prune(txn: &mut TxnOffsets, p: &pb::PruneTxnMarks) -> usize {
    txn.prune_marks(p.before_ms)
}

/// The least age of a mark [`prune_marks`] forgets, whatever the transactional id expiration:
/// far beyond any request's life and any clock difference between successive leaders.
const MIN_MARKS_HORIZON: Duration = Duration::from_secs(3600);

/// On the group's coordinator: forgets the marks of producers whose last marker here is older
/// than `horizon` (the transactional id expiration, at least `MIN_MARKS_HORIZON`) and that
/// have no offsets pending. A mark refuses a late `TxnCommitOffsets` of a transaction that
/// already ended and a late marker of a deposed coordinator: requests in flight, which never
/// live that long — and a commit prepared before the prune is refused from then on anyway.
/// Without this the marks grow by one per producer id that ever committed offsets in a
/// transaction here. Returns about how many marks were forgotten or dated (nothing is written
/// when none would be).
pub async fn prune_marks(
    partition: &StatePartition<OffsetsMachine>,
    horizon: Duration,
    timeout: Duration,
) -> Result<usize> {
    let horizon_ms = i64::try_from(horizon.max(MIN_MARKS_HORIZON).as_millis()).unwrap_or(i64::MAX);
    let before_ms = rill_rt::wall_clock_ms().saturating_sub(horizon_ms);
    let prunable = partition.read(|m| m.state().txn().prunable_marks(before_ms))?;
    if prunable == 0 {
        return Ok(0);
    }
    let command = pb::OffsetsCommand {
        command: Some(pb::offsets_command::Command::PruneTxnMarks(pb::PruneTxnMarks { before_ms })),
    };
    partition.propose(command.encode_to_vec().into(), timeout).await?;
    Ok(prunable)
}

/// A transactional offset commit checked on the group's coordinator, to be verified with the
/// transaction's coordinator and then proposed ([`commit`]).
#[derive(Debug, Clone)]
pub struct Prepared {
    commit: pb::CommitOffsets,
    classic: bool,
    transactional_id: String,
    producer: (i64, i16),
}

/// On the group's coordinator, first of three steps: checks a commit of `offsets` of `group` by
/// `committer` inside the transaction of `transactional_id`'s `producer` (id, epoch). Second,
/// the caller asks the transaction's coordinator whether the group is in that producer's
/// ongoing transaction, which names it; third, [`commit`] with that name.
pub fn prepare(
    partition: &StatePartition<OffsetsMachine>,
    group: &str,
    committer: Committer<'_>,
    (transactional_id, producer): (&str, (i64, i16)),
    offsets: &[OffsetCommit],
) -> Result<Prepared> {
    let (commit, classic) = offsets::prepare_commit(partition, group, committer, offsets)?;
    Ok(Prepared { commit, classic, transactional_id: transactional_id.to_string(), producer })
}

/// On the group's coordinator, after [`prepare`] and the verification that named the
/// transaction (`transaction_start`) and the marker the group is still `owed` by the producer's
/// decided transaction, if any: proposes the pending offsets with that marker ahead of them in
/// the same command (`owed_marker`); returns once they are replicated. Every transactional
/// offset commit comes through here, whatever listener it arrived on.
pub async fn commit(
    partition: &StatePartition<OffsetsMachine>,
    prepared: Prepared,
    (transaction_start, owed): (u64, Option<TxnMarker>),
    committer: Committer<'_>,
    timeout: Duration,
) -> Result<()> {
    // The decided transaction's marker first, where it has not arrived yet: its offsets, still
    // pending here, would otherwise be dropped as orphaned by these. It rides in the same
    // command. (The group-offsets-before-marker mutation, simulation only, leaves it out.)
    let skip = rill_rt::mutation::active(rill_rt::mutation::Mutation::GroupOffsetsBeforeMarker);
    let owed_marker = match owed.filter(|_| !skip) {
        Some(owed) => owed_marker(partition, owed)?,
        None => None,
    };
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
            transaction_start,
            owed_marker,
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
            "the transaction of producer {producer_id} ended before its offsets for group {group:?} were committed"
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
    let command = pb::OffsetsCommand { command: Some(pb::offsets_command::Command::TxnMarker(marker_command(marker))) };
    let answer: Bytes = partition.propose(command.encode_to_vec().into(), timeout).await?;
    if answer.as_ref() == offsets::REFUSED {
        return Err(CoordinatorError::TransactionCoordinatorFenced {
            producer_id: marker.producer_id,
            sent: marker.coordinator_epoch,
        });
    }
    Ok(())
}

/// The command of `marker`, written now.
fn marker_command(marker: TxnMarker) -> pb::TxnOffsetsMarker {
    pb::TxnOffsetsMarker {
        producer_id: marker.producer_id,
        producer_epoch: i32::from(marker.producer_epoch),
        coordinator_epoch: marker.coordinator_epoch,
        commit: marker.commit,
        transaction_start: marker.transaction_start,
        written_ms: rill_rt::wall_clock_ms(),
    }
}

/// The marker the transaction coordinator said the group is still owed by the producer's
/// decided transaction (v2: the next transaction began while the decided one's markers were
/// being written), to apply ahead of the next transaction's offsets in the same command: the
/// decided transaction's offsets, if still pending here, are then ended by their own marker
/// instead of being dropped as orphaned by the next ones. `None` when a marker of that
/// transaction or a later one is here already. (A newer coordinator's marker here makes the
/// apply skip it, and the offsets that follow are checked against that one.)
fn owed_marker(partition: &StatePartition<OffsetsMachine>, marker: TxnMarker) -> Result<Option<pb::TxnOffsetsMarker>> {
    let ended = partition.read(|m| m.state().txn().ended(marker.producer_id))?;
    Ok((ended < marker.transaction_start).then(|| marker_command(marker)))
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
                leader_epoch: None,
            }],
            member_id: String::new(),
            member_epoch: -1,
        }
    }

    fn marker(transaction_start: u64, coordinator_epoch: i32, commit: bool) -> TxnMarker {
        TxnMarker { producer_id: 9, producer_epoch: 3, coordinator_epoch, commit, transaction_start }
    }

    #[test]
    fn a_commit_marker_hands_over_the_pending_offsets_and_an_abort_drops_them() {
        let mut t = TxnOffsets::default();
        assert!(t.add(9, 3, 10, commit("g", 10)));
        assert!(t.add(9, 3, 10, commit("h", 20)));
        assert!(t.is_pending("g", "t", 0) && t.is_pending("h", "t", 0));
        assert!(!t.is_pending("g", "t", 1) && !t.is_pending("x", "t", 0));
        assert_eq!(t.pending_partitions("g"), [("t".to_string(), 0)].into());
        let ended = t.apply_marker(marker(10, 1, true), 0).unwrap().unwrap();
        assert_eq!(ended.groups.len(), 2);
        assert!(!t.is_pending("g", "t", 0));
        assert_eq!(t.ended(9), 10);
        assert_eq!(t.ended(8), 0);

        assert!(!t.add(9, 3, 10, commit("g", 11)), "a late commit of the ended transaction is refused");
        assert!(t.add(9, 3, 14, commit("g", 11)));
        assert_eq!(t.apply_marker(marker(14, 1, false), 0).unwrap(), None, "abort: nothing to commit");
        assert!(!t.is_pending("g", "t", 0), "abort dropped them");
    }

    #[test]
    fn a_marker_ends_only_its_own_transaction_whatever_the_epochs() {
        let mut t = TxnOffsets::default();
        // Transaction 10 ends; transaction 14 runs under the same epoch (v1, or v2 at its last
        // epoch).
        assert!(t.add(9, 3, 10, commit("g", 10)));
        assert!(t.apply_marker(marker(10, 1, true), 0).unwrap().is_some());
        assert!(t.add(9, 3, 14, commit("g", 20)));
        // A late duplicate of 10's marker leaves 14's offsets pending.
        assert_eq!(t.apply_marker(marker(10, 1, true), 0).unwrap(), None);
        assert!(t.is_pending("g", "t", 0));
        assert_eq!(t.ended(9), 10, "the duplicate did not move the mark back or forth");
        let ended = t.apply_marker(marker(14, 1, true), 0).unwrap().unwrap();
        assert_eq!(ended.groups["g"][&("t".to_string(), 0)].offset, 20);
    }

    #[test]
    fn orphans_of_an_earlier_transaction_go_and_a_deposed_coordinator_is_refused() {
        let mut t = TxnOffsets::default();
        t.apply_marker(marker(2, 5, false), 0).unwrap();
        assert!(t.add(9, 1, 6, commit("g", 11)));
        assert_eq!(t.apply_marker(marker(6, 4, true), 0), Err(DeposedCoordinator { current: 5 }));
        assert!(t.is_pending("g", "t", 0), "the deposed coordinator's marker changed nothing");
        assert_eq!(t.ended(9), 2);
        // A later transaction's offsets replace what an earlier one left; the earlier one's
        // commits are refused from then on.
        assert!(t.add(9, 2, 8, commit("h", 1)));
        assert!(!t.is_pending("g", "t", 0));
        assert!(!t.add(9, 1, 6, commit("g", 12)));
        // A later transaction's marker drops an earlier transaction's offsets, committing nothing.
        assert_eq!(t.apply_marker(marker(9, 5, true), 0).unwrap(), None);
        assert!(!t.is_pending("h", "t", 0));
    }

    #[test]
    fn deleting_a_group_or_its_offsets_drops_their_pending_offsets() {
        let mut t = TxnOffsets::default();
        assert!(t.add(9, 1, 3, commit("g", 1)));
        assert!(t.add(9, 1, 3, commit("h", 1)));
        t.remove_offsets("g", [("t", 0)].into_iter());
        assert!(!t.is_pending("g", "t", 0) && t.is_pending("h", "t", 0));
        t.remove_group("h");
        assert_eq!(t, TxnOffsets::default());
    }

    #[test]
    fn the_snapshot_is_the_state() {
        let mut t = TxnOffsets::default();
        t.apply_marker(TxnMarker { producer_id: 4, ..marker(3, 2, true) }, 0).unwrap();
        assert!(t.add(9, 1, 5, commit("g", 10)));
        let (pending, marks, pruned) = t.to_proto();
        assert_eq!(TxnOffsets::from_proto(pending, &marks, pruned).unwrap(), t);
    }

    #[test]
    fn old_marks_without_pending_offsets_are_forgotten() {
        let mut t = TxnOffsets::default();
        let marker = |pid: i64, start: u64, written_ms: i64| pb::TxnOffsetsMarker {
            producer_id: pid,
            producer_epoch: 1,
            coordinator_epoch: 3,
            commit: true,
            transaction_start: start,
            written_ms,
        };
        let c = |pid: i64, start: u64| pb::TxnCommitOffsets {
            commit: Some(commit("g", 10)),
            classic: false,
            producer_id: pid,
            producer_epoch: 1,
            transaction_start: start,
            owed_marker: None,
        };
        apply_marker(&mut t, &marker(1, 4, 1_000)).unwrap();
        apply_marker(&mut t, &marker(2, 4, 1_000)).unwrap();
        apply_marker(&mut t, &marker(3, 4, 5_000)).unwrap();
        assert!(apply_commit(&mut t, c(2, 5), true), "producer 2's next transaction has offsets pending");
        assert_eq!(t.prunable_marks(2_000), 1);
        let snapshot = t.to_proto();
        assert_eq!(TxnOffsets::from_proto(snapshot.0, &snapshot.1, snapshot.2).unwrap(), t, "marks keep their time");

        assert_eq!(apply_prune(&mut t, &pb::PruneTxnMarks { before_ms: 2_000 }), 1);
        assert_eq!((t.ended(1), t.ended(2), t.ended(3)), (0, 4, 4), "only the old mark without pending offsets");
        assert!(t.is_pending("g", "t", 0));
        assert_eq!(apply_prune(&mut t, &pb::PruneTxnMarks { before_ms: 2_000 }), 0, "nothing more to forget");

        // A late commit of producer 1's ended transaction, which its forgotten mark would have
        // refused, is refused as prepared before the prune (its commit time is 7 ms); one
        // prepared since applies.
        assert!(!apply_commit(&mut t, c(1, 4), true), "prepared before the prune");
        let mut fresh = c(1, 9);
        fresh.commit.as_mut().unwrap().offsets[0].commit_time_ms = 2_000;
        assert!(apply_commit(&mut t, fresh, true));
        let snapshot = t.to_proto();
        assert_eq!(TxnOffsets::from_proto(snapshot.0, &snapshot.1, snapshot.2).unwrap(), t, "the prune point too");

        // Producer 2's marker ends its pending transaction: its mark is old, but now renewed.
        apply_marker(&mut t, &marker(2, 5, 6_000)).unwrap();
        assert_eq!(apply_prune(&mut t, &pb::PruneTxnMarks { before_ms: 5_500 }), 1, "producer 3's");
        assert_eq!((t.ended(2), t.ended(3)), (5, 0));

        // A mark written before marks had a time is dated by the prune, not forgotten by it.
        apply_marker(&mut t, &marker(4, 1, 0)).unwrap();
        assert_eq!(apply_prune(&mut t, &pb::PruneTxnMarks { before_ms: 7_000 }), 1, "producer 2's only");
        assert_eq!(t.ended(4), 1);
        assert_eq!(apply_prune(&mut t, &pb::PruneTxnMarks { before_ms: 7_001 }), 1, "one horizon later");
        assert_eq!(t.ended(4), 0);
    }

    #[test]
    fn commands_apply_only_before_their_transaction_ended() {
        let mut t = TxnOffsets::default();
        let c = |start| pb::TxnCommitOffsets {
            commit: Some(commit("g", 10)),
            classic: false,
            producer_id: 9,
            producer_epoch: 1,
            transaction_start: start,
            owed_marker: None,
        };
        assert!(!apply_commit(&mut t, c(4), false), "the committer may not commit");
        assert!(apply_commit(&mut t, c(4), true));
        let m = pb::TxnOffsetsMarker {
            producer_id: 9,
            producer_epoch: 1,
            coordinator_epoch: 1,
            commit: true,
            transaction_start: 4,
            written_ms: 0,
        };
        assert_eq!(apply_marker(&mut t, &m).unwrap().len(), 1);
        assert!(!apply_commit(&mut t, c(4), true), "its transaction ended: refused");
        assert!(!t.is_pending("g", "t", 0));
        assert!(apply_commit(&mut t, c(7), true));
    }
}
