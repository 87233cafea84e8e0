//! The leader's idempotence gate: decides, one batch at a time per partition, whether an
//! idempotent batch is new, a retry, or out of order — counting batches already proposed to
//! Raft but not yet applied.
//!
//! Why the gate is needed on top of [`crate::producers::ProducerStates`]: the replicated state
//! only learns a batch when it is applied (committed), but a retry can arrive while the first
//! attempt is still on its way through Raft. The gate remembers those in-flight batches; a retry
//! of one waits for the first attempt's outcome and gets the same answer, so a batch is never
//! proposed twice by one leader. A new leader accepts idempotent batches only after it has
//! applied its whole log (see `Partition::produce`), so the replicated state is complete when
//! the gate starts from it.

use std::collections::{HashMap, VecDeque};

use rill_rt::sync::watch;

use crate::error::PartitionError;
use crate::producers::{check_against, follows, last_seq, BatchMeta, ProducerStates, SeqCheck};
use crate::propose::Landed;

/// The outcome of a committed batch: (base offset, log index, term) or why it failed.
pub type Committed = Result<(u64, u64, u64), PartitionError>;

/// What a proposed marker's outcome will be: where it landed once committed, or why not
/// (`None` inside: the replica stopped first).
pub type MarkerOutcome = watch::Receiver<Option<Option<crate::error::Result<Landed>>>>;

/// A transaction marker proposed in this term and not yet resolved.
#[derive(Debug, Clone)]
pub struct PendingMarker {
    /// The marker; it names the transaction it ends (0: none).
    pub marker: rill_records::ControlMarker,
    /// The producer epoch it carries.
    pub epoch: i16,
    /// Its outcome, once known: what another copy of it can wait for instead of being written.
    pub outcome: MarkerOutcome,
}

struct InFlight {
    meta: BatchMeta,
    result: watch::Receiver<Option<Committed>>,
}

struct InFlightProducer {
    epoch: i16,
    batches: VecDeque<InFlight>,
}

/// The gate of one partition while this node leads it.
#[derive(Default)]
pub struct Gate {
    term: u64,
    producers: HashMap<i64, InFlightProducer>,
    /// Transaction markers proposed and not yet resolved, by producer: a transactional batch
    /// verified before one of them must not be appended after it, unless it is a copy of a
    /// marker already applied (it decides nothing); and a copy of one arriving meanwhile waits
    /// for its outcome instead of being written too.
    markers: HashMap<i64, Vec<PendingMarker>>,
}

/// Who sent a batch and which sequence numbers it carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchId {
    /// Producer id.
    pub pid: i64,
    /// Producer epoch.
    pub epoch: i16,
    /// First sequence number.
    pub first_seq: i32,
    /// Records in the batch.
    pub count: u32,
}

/// What to do with an incoming idempotent batch.
pub enum Decision {
    /// Propose it, then call [`Gate::register`].
    Append,
    /// Stored already: answer with this base offset.
    Stored { base_offset: u64 },
    /// The same batch is in flight: wait for its outcome.
    Wait(watch::Receiver<Option<Committed>>),
}

impl Gate {
    /// Forgets in-flight batches of an older term (they resolve on their own; this leader never
    /// proposed them).
    pub fn enter_term(&mut self, term: u64) {
        if self.term != term {
            self.term = term;
            self.producers.clear();
            self.markers.clear();
        }
    }

    /// A transaction marker of `pid` is being proposed.
    pub fn marker_started(&mut self, pid: i64, pending: PendingMarker) {
        self.markers.entry(pid).or_default().push(pending);
    }

    /// The marker of `pid` whose outcome is `outcome`, announced in `term` by
    /// [`Gate::marker_started`], is resolved.
    pub fn marker_done(&mut self, term: u64, pid: i64, outcome: &MarkerOutcome) {
        if term != self.term {
            return;
        }
        if let Some(pending) = self.markers.get_mut(&pid) {
            if let Some(at) = pending.iter().position(|m| m.outcome.same_channel(outcome)) {
                pending.swap_remove(at);
            }
            if pending.is_empty() {
                self.markers.remove(&pid);
            }
        }
    }

    /// True while a marker of `pid` is proposed and not yet resolved that may decide something
    /// after transaction `decided` was decided here: one naming a later transaction, or none.
    pub fn marker_pending_after(&self, pid: i64, decided: u64) -> bool {
        self.pending_transactions(pid).any(|t| t == 0 || t > decided)
    }

    /// True when a marker of `pid` naming `transaction` (named: not 0) is proposed in this term
    /// and its outcome not yet known: a batch proposed after it lands after it, or not at all.
    pub fn marker_pending(&self, pid: i64, transaction: u64) -> bool {
        transaction != 0 && self.pending_transactions(pid).any(|t| t == transaction)
    }

    /// The outcome of a copy of `marker` (for producer `pid` at `epoch`) proposed in this term
    /// and not yet resolved: the same decision on the same named transaction, at the same
    /// producer epoch, from this marker's coordinator epoch or a newer one. (An older
    /// coordinator's copy does not stand for a newer one's, which is written to fence it.)
    pub fn marker_copy(&self, pid: i64, epoch: i16, marker: &rill_records::ControlMarker) -> Option<MarkerOutcome> {
        if marker.transaction == 0 {
            return None;
        }
        self.markers.get(&pid)?.iter().find_map(|m| {
            let same = m.marker.transaction == marker.transaction
                && m.marker.kind == marker.kind
                && m.epoch == epoch
                && m.marker.coordinator_epoch >= marker.coordinator_epoch;
            same.then(|| m.outcome.clone())
        })
    }

    fn pending_transactions(&self, pid: i64) -> impl Iterator<Item = u64> + '_ {
        self.markers.get(&pid).into_iter().flatten().map(|m| m.marker.transaction)
    }

    /// Decides what to do with a batch of `count` records from `pid`/`epoch` at `first_seq`.
    /// `applied` is the replicated producer state; `max_producers` bounds how many producers a
    /// partition tracks; `skip_checks` is the no-dedupe mutation (simulation only).
    pub fn decide(
        &self,
        applied: &ProducerStates,
        batch: BatchId,
        max_producers: usize,
        skip_checks: bool,
    ) -> Result<Decision, PartitionError> {
        let BatchId { pid, epoch, first_seq, count } = batch;
        if skip_checks {
            return Ok(Decision::Append);
        }
        let last = last_seq(first_seq, count);
        let in_flight = self.producers.get(&pid);
        if let Some(p) = in_flight {
            if p.epoch == epoch {
                if let Some(b) = p.batches.iter().find(|b| b.meta.first_seq == first_seq && b.meta.last_seq == last) {
                    return Ok(Decision::Wait(b.result.clone()));
                }
            }
        }
        // The producer as it will be once everything in flight is applied.
        let stored = applied.get(pid);
        let (stored_epoch, mut batches) = match stored {
            Some(e) => (e.epoch, e.batches.clone()),
            None => (epoch, VecDeque::new()),
        };
        let check = match in_flight {
            Some(p) if p.epoch > stored_epoch || stored.is_none() => {
                check_against(p.epoch, &p.batches.iter().map(|b| b.meta).collect(), epoch, first_seq, count)
            }
            Some(p) => {
                // A batch stays in flight until its proposer hears the outcome, which is after
                // it is applied: the ones the applied state holds already must not count twice.
                let newest_applied = batches.back().map(|b| b.last_seq);
                batches.extend(
                    p.batches.iter().map(|b| b.meta).filter(|m| newest_applied.is_none_or(|n| follows(m.first_seq, n))),
                );
                check_against(stored_epoch, &batches, epoch, first_seq, count)
            }
            None if stored.is_none() => {
                if first_seq != 0 {
                    return Err(PartitionError::UnknownProducerId { producer_id: pid });
                }
                if applied.len() >= max_producers {
                    return Err(PartitionError::TooManyProducers { max: max_producers });
                }
                SeqCheck::Append
            }
            None => check_against(stored_epoch, &batches, epoch, first_seq, count),
        };
        match check {
            SeqCheck::Append => Ok(Decision::Append),
            SeqCheck::Duplicate { base_offset } => Ok(Decision::Stored { base_offset }),
            SeqCheck::DuplicateUnknownOffset => Err(PartitionError::DuplicateSequence { producer_id: pid, first_seq }),
            SeqCheck::OutOfOrder { expected } => {
                Err(PartitionError::OutOfOrderSequence { producer_id: pid, expected, got: first_seq })
            }
            SeqCheck::StaleEpoch { current } => {
                Err(PartitionError::InvalidProducerEpoch { producer_id: pid, current, got: epoch })
            }
            SeqCheck::UnknownProducer => Err(PartitionError::UnknownProducerId { producer_id: pid }),
        }
    }

    /// Remembers a batch just proposed; its outcome arrives through `result`.
    pub fn register(
        &mut self,
        pid: i64,
        epoch: i16,
        first_seq: i32,
        count: u32,
        result: watch::Receiver<Option<Committed>>,
    ) {
        let p = self.producers.entry(pid).or_insert_with(|| InFlightProducer { epoch, batches: VecDeque::new() });
        if epoch > p.epoch {
            p.epoch = epoch;
            p.batches.clear();
        }
        p.batches.push_back(InFlight {
            meta: BatchMeta { first_seq, last_seq: last_seq(first_seq, count), base_offset: 0 },
            result,
        });
    }

    /// Forgets a batch whose outcome is known (and, on success, applied).
    pub fn resolve(&mut self, term: u64, pid: i64, first_seq: i32) {
        if term != self.term {
            return;
        }
        if let Some(p) = self.producers.get_mut(&pid) {
            p.batches.retain(|b| b.meta.first_seq != first_seq);
            if p.batches.is_empty() {
                self.producers.remove(&pid);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(pid: i64, first_seq: i32, count: u32) -> BatchId {
        BatchId { pid, epoch: 0, first_seq, count }
    }

    fn decide(g: &Gate, s: &ProducerStates, pid: i64, seq: i32, count: u32) -> Result<Decision, PartitionError> {
        g.decide(s, id(pid, seq, count), 10, false)
    }

    #[test]
    fn a_retry_of_an_in_flight_batch_waits_for_it() {
        let mut g = Gate::default();
        g.enter_term(1);
        let s = ProducerStates::default();
        assert!(matches!(decide(&g, &s, 1, 0, 5), Ok(Decision::Append)));
        let (_tx, rx) = watch::channel(None);
        g.register(1, 0, 0, 5, rx);
        assert!(matches!(decide(&g, &s, 1, 0, 5), Ok(Decision::Wait(_))));
        assert!(matches!(decide(&g, &s, 1, 5, 5), Ok(Decision::Append)), "the next batch may follow in flight");
        assert!(matches!(decide(&g, &s, 1, 7, 1), Err(PartitionError::OutOfOrderSequence { expected: 5, .. })));
    }

    #[test]
    fn a_batch_applied_but_not_yet_resolved_counts_once() {
        let mut g = Gate::default();
        g.enter_term(1);
        let mut s = ProducerStates::default();
        s.apply_batch(1, 0, 0, 4, 0, 1);
        let (_tx, rx) = watch::channel(None);
        g.register(1, 0, 4, 4, rx);
        // Batch 4..7 is applied before its proposer resolves it in the gate.
        s.apply_batch(1, 0, 4, 4, 4, 1);
        s.apply_batch(1, 0, 8, 1, 8, 1);
        assert!(matches!(decide(&g, &s, 1, 9, 2), Ok(Decision::Append)), "9 follows 8, the newest applied");
        assert!(matches!(decide(&g, &s, 1, 8, 1), Ok(Decision::Stored { base_offset: 8 })));
        assert!(matches!(decide(&g, &s, 1, 4, 4), Ok(Decision::Wait(_))), "a retry still waits for the first attempt");
        assert!(matches!(decide(&g, &s, 1, 10, 1), Err(PartitionError::OutOfOrderSequence { expected: 9, .. })));
    }

    #[test]
    fn applied_batches_answer_with_their_offsets() {
        let g = Gate::default();
        let mut s = ProducerStates::default();
        s.apply_batch(1, 0, 0, 5, 40, 1);
        assert!(matches!(decide(&g, &s, 1, 0, 5), Ok(Decision::Stored { base_offset: 40 })));
        assert!(matches!(decide(&g, &s, 2, 3, 1), Err(PartitionError::UnknownProducerId { .. })));
    }

    #[test]
    fn in_flight_after_applied_and_term_reset() {
        let mut g = Gate::default();
        g.enter_term(1);
        let mut s = ProducerStates::default();
        s.apply_batch(1, 0, 0, 5, 0, 1);
        let (_tx, rx) = watch::channel(None);
        g.register(1, 0, 5, 5, rx);
        assert!(matches!(decide(&g, &s, 1, 0, 5), Ok(Decision::Stored { base_offset: 0 })));
        assert!(matches!(decide(&g, &s, 1, 10, 1), Ok(Decision::Append)));
        g.enter_term(2);
        assert!(matches!(decide(&g, &s, 1, 10, 1), Err(PartitionError::OutOfOrderSequence { expected: 5, .. })));
        g.resolve(2, 1, 5);
    }

    #[test]
    fn the_producer_limit_applies_to_new_producers_only() {
        let g = Gate::default();
        let mut s = ProducerStates::default();
        for pid in 1..=10 {
            s.apply_batch(pid, 0, 0, 1, 0, 1);
        }
        assert!(matches!(decide(&g, &s, 11, 0, 1), Err(PartitionError::TooManyProducers { max: 10 })));
        assert!(matches!(decide(&g, &s, 3, 1, 1), Ok(Decision::Append)));
        assert!(
            matches!(g.decide(&s, id(11, 5, 1), 10, true), Ok(Decision::Append)),
            "the no-dedupe mutation skips every check"
        );
    }

    fn marker(
        kind: rill_records::ControlKind,
        coordinator_epoch: i32,
        transaction: u64,
    ) -> rill_records::ControlMarker {
        rill_records::ControlMarker { kind, coordinator_epoch, transaction }
    }

    fn pending(m: rill_records::ControlMarker, epoch: i16) -> (PendingMarker, MarkerOutcome) {
        let (_tx, outcome) = watch::channel(None);
        (PendingMarker { marker: m, epoch, outcome: outcome.clone() }, outcome)
    }

    #[test]
    fn a_marker_copy_waits_only_for_the_same_decision_from_the_same_or_a_newer_coordinator() {
        use rill_records::ControlKind::{Abort, Commit};
        let mut g = Gate::default();
        g.enter_term(1);
        let (first, first_outcome) = pending(marker(Commit, 5, 7), 2);
        g.marker_started(1, first);
        assert!(g.marker_copy(1, 2, &marker(Commit, 5, 7)).is_some_and(|o| o.same_channel(&first_outcome)));
        assert!(g.marker_copy(1, 2, &marker(Commit, 4, 7)).is_some(), "an older coordinator's copy");
        assert!(g.marker_copy(1, 2, &marker(Commit, 6, 7)).is_none(), "a newer coordinator's copy is written");
        assert!(g.marker_copy(1, 2, &marker(Abort, 5, 7)).is_none());
        assert!(g.marker_copy(1, 3, &marker(Commit, 5, 7)).is_none());
        assert!(g.marker_copy(1, 2, &marker(Commit, 5, 8)).is_none());
        assert!(g.marker_copy(2, 2, &marker(Commit, 5, 7)).is_none());
        // Unnamed markers are never taken for one another.
        let (unnamed, _) = pending(marker(Commit, 5, 0), 2);
        g.marker_started(1, unnamed);
        assert!(g.marker_copy(1, 2, &marker(Commit, 5, 0)).is_none());
        assert!(g.marker_pending_after(1, 7), "an unnamed marker may decide anything");
    }

    #[test]
    fn a_resolved_marker_is_forgotten_by_its_outcome_and_a_new_term_forgets_them_all() {
        use rill_records::ControlKind::Commit;
        let mut g = Gate::default();
        g.enter_term(1);
        // Two copies of one marker (a newer coordinator's fences the older's).
        let (older, older_outcome) = pending(marker(Commit, 5, 7), 2);
        let (newer, newer_outcome) = pending(marker(Commit, 6, 7), 2);
        g.marker_started(1, older);
        g.marker_started(1, newer);
        assert!(g.marker_pending(1, 7) && g.marker_pending_after(1, 6) && !g.marker_pending_after(1, 7));
        g.marker_done(1, 1, &newer_outcome);
        assert!(g.marker_copy(1, 2, &marker(Commit, 5, 7)).is_some_and(|o| o.same_channel(&older_outcome)));
        assert!(g.marker_copy(1, 2, &marker(Commit, 6, 7)).is_none(), "the newer copy is resolved");
        g.marker_done(0, 1, &older_outcome);
        assert!(g.marker_pending(1, 7), "a resolution announced for another term changes nothing");
        g.marker_done(1, 1, &older_outcome);
        assert!(!g.marker_pending(1, 7));
        let (again, _) = pending(marker(Commit, 5, 9), 2);
        g.marker_started(1, again);
        g.enter_term(2);
        assert!(!g.marker_pending(1, 9) && g.marker_copy(1, 2, &marker(Commit, 5, 9)).is_none());
    }
}
