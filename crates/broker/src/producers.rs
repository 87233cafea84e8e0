//! Idempotent producer state: per producer id, its epoch and its last five batches.
//!
//! This is part of the replicated state machine: every replica applies the same batches in the
//! same order, so every replica — and so every future leader — knows the same last batches of
//! every producer. A leader consults it to answer a retried batch with its original offsets
//! instead of appending it again, and to refuse batches that skip a sequence number.

use std::collections::{BTreeMap, VecDeque};

use rill_proto::partition as pb;

/// How many batches per producer are remembered (Kafka's `max.in.flight` bound for
/// idempotence): a retry of any of them is answered with its original offsets.
pub const CACHED_BATCHES: usize = 5;

/// How many producers one partition remembers, and when one may be forgotten to make room.
///
/// Each remembered producer costs a few hundred bytes on every replica, so the table is capped.
/// Producer ids are handed to anyone who asks, so the cap alone would let a client that asks for
/// `max_per_partition` ids lock every new producer out of a partition for as long as
/// `producer.id.expiration.ms` (a day by default). So a new producer that finds the table full
/// makes the leader forget every producer idle for `evictable_after` or longer (those without a
/// transaction open here) — the same replicated expiry as `producer.id.expiration.ms`, at a
/// shorter age — and is refused `TOO_MANY_PRODUCERS` (retriable) only while every remembered
/// producer was active more recently than that.
///
/// Why not evict the least recently used producer whatever its age (as some brokers do): a
/// producer forgotten while a retry of a batch already stored is still on its way would store
/// that batch twice. `evictable_after` defaults to two minutes, the producer's default
/// `delivery.timeout.ms` (Rill's client's and Kafka's): a producer idle that long has no retry
/// left to send, so forgetting it costs it only an `UNKNOWN_PRODUCER_ID` on its next batch,
/// which the client answers by taking a new producer id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProducerLimits {
    /// Most producers a partition remembers.
    pub max_per_partition: usize,
    /// How long a producer must have been idle before a full table may forget it.
    pub evictable_after: std::time::Duration,
}

/// Default [`ProducerLimits::max_per_partition`].
pub const DEFAULT_MAX_PRODUCERS_PER_PARTITION: usize = 10_000;
/// Default [`ProducerLimits::evictable_after`].
pub const DEFAULT_PRODUCER_EVICTABLE_AFTER: std::time::Duration = std::time::Duration::from_secs(120);

impl Default for ProducerLimits {
    fn default() -> Self {
        Self {
            max_per_partition: DEFAULT_MAX_PRODUCERS_PER_PARTITION,
            evictable_after: DEFAULT_PRODUCER_EVICTABLE_AFTER,
        }
    }
}

/// One stored batch of a producer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchMeta {
    /// First sequence number.
    pub first_seq: i32,
    /// Last sequence number.
    pub last_seq: i32,
    /// Offset of the first record.
    pub base_offset: u64,
}

/// What a partition remembers of one producer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProducerEntry {
    /// Latest epoch seen (Kafka's 16-bit epoch).
    pub epoch: i16,
    /// Last batches, oldest first.
    pub batches: VecDeque<BatchMeta>,
    /// Append time of its latest batch (drives expiry).
    pub last_append_ms: i64,
    /// The epoch of the transaction coordinator whose marker was applied last (0 before any):
    /// a marker of an older, deposed coordinator must not decide a newer transaction.
    pub coordinator_epoch: i32,
    /// Offset of the last transaction marker applied for it (-1: none): a transactional batch
    /// verified with the coordinator is appended only if no marker came in between.
    pub last_marker_offset: i64,
    /// The latest transaction a marker decided here, as markers name them (0: none named): a
    /// marker of this transaction or an earlier one is a repeat or a late copy and decides
    /// nothing (see [`MarkerRefusal::Repeated`]).
    pub last_marker_transaction: u64,
}

/// The last sequence of a batch starting at `first` with `count` records (sequences wrap at
/// `i32::MAX` to 0, as Kafka's do).
pub fn last_seq(first: i32, count: u32) -> i32 {
    seq_add(first, count.max(1) - 1)
}

/// The sequence `n` after `seq` (sequences wrap at `i32::MAX` to 0, as Kafka's do).
pub fn seq_add(seq: i32, n: u32) -> i32 {
    ((i64::from(seq) + i64::from(n)) % (i64::from(i32::MAX) + 1)) as i32
}

/// The sequence after `seq`.
pub fn next_seq(seq: i32) -> i32 {
    if seq == i32::MAX {
        0
    } else {
        seq + 1
    }
}

/// True when sequence `seq` comes after `after` (within half the sequence space, so a
/// wrap from `i32::MAX` to 0 still counts as after).
pub fn follows(seq: i32, after: i32) -> bool {
    let distance = (i64::from(seq) - i64::from(after)).rem_euclid(i64::from(i32::MAX) + 1);
    distance > 0 && distance < i64::from(i32::MAX / 2)
}

/// How an incoming idempotent batch relates to what is stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SeqCheck {
    /// The next batch: append it.
    Append,
    /// Already stored at this offset: answer it, do not append.
    Duplicate { base_offset: u64 },
    /// Stored, but too long ago to remember where: answer success without offsets.
    DuplicateUnknownOffset,
    /// A sequence was skipped (an earlier batch is missing).
    OutOfOrder { expected: i32 },
    /// An older epoch than the partition has seen.
    StaleEpoch { current: i16 },
    /// Not known here, and the batch does not start a sequence.
    UnknownProducer,
}

/// Why a transaction marker is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MarkerRefusal {
    /// A newer coordinator has written markers for this producer.
    CoordinatorFenced { current: i32 },
    /// The partition has seen a newer epoch of this producer.
    StaleEpoch { current: i16 },
    /// The transaction the marker names was already decided here: the coordinator repeated a
    /// marker whose answer it lost, or a copy arrived late — possibly while the producer's next
    /// transaction is open here, which it must not decide. Its coordinator epoch still counts
    /// (see [`ProducerStates::note_coordinator_epoch`]): a leader writes it only when that is
    /// newer than `coordinator_epoch`, the producer's latest here.
    Repeated { last_marker_offset: i64, coordinator_epoch: i32 },
}

/// Every producer a partition remembers.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProducerStates {
    producers: BTreeMap<i64, ProducerEntry>,
}

impl ProducerStates {
    /// Number of producers remembered.
    pub fn len(&self) -> usize {
        self.producers.len()
    }

    /// True when none is remembered.
    pub fn is_empty(&self) -> bool {
        self.producers.is_empty()
    }

    /// The entry of `pid`.
    pub fn get(&self, pid: i64) -> Option<&ProducerEntry> {
        self.producers.get(&pid)
    }

    /// Classifies a batch of `count` records from `pid`/`epoch` starting at `first_seq`.
    pub fn check(&self, pid: i64, epoch: i16, first_seq: i32, count: u32) -> SeqCheck {
        let Some(entry) = self.producers.get(&pid) else {
            return if first_seq == 0 { SeqCheck::Append } else { SeqCheck::UnknownProducer };
        };
        check_against(entry.epoch, &entry.batches, epoch, first_seq, count)
    }

    /// Records a stored batch. Deterministic: every replica calls it for the same entries.
    pub fn apply_batch(&mut self, pid: i64, epoch: i16, first_seq: i32, count: u32, base_offset: u64, append_ms: i64) {
        let entry = self.producers.entry(pid).or_insert_with(|| ProducerEntry {
            epoch,
            batches: VecDeque::new(),
            last_append_ms: append_ms,
            coordinator_epoch: 0,
            last_marker_offset: -1,
            last_marker_transaction: 0,
        });
        if epoch > entry.epoch {
            entry.epoch = epoch;
            entry.batches.clear();
        }
        entry.batches.push_back(BatchMeta { first_seq, last_seq: last_seq(first_seq, count), base_offset });
        while entry.batches.len() > CACHED_BATCHES {
            entry.batches.pop_front();
        }
        entry.last_append_ms = entry.last_append_ms.max(append_ms);
    }

    /// How a transaction marker of coordinator epoch `coordinator_epoch`, written for `pid` at
    /// `epoch` to end `transaction` (0: not named), relates to what is stored: `Err` with the
    /// reason when it must decide nothing (a deposed coordinator's, one for an older producer
    /// epoch than the partition has seen, or a repeat of a transaction's marker).
    pub fn check_marker(
        &self,
        pid: i64,
        epoch: i16,
        coordinator_epoch: i32,
        transaction: u64,
    ) -> Result<(), MarkerRefusal> {
        let Some(entry) = self.producers.get(&pid) else { return Ok(()) };
        if coordinator_epoch < entry.coordinator_epoch {
            return Err(MarkerRefusal::CoordinatorFenced { current: entry.coordinator_epoch });
        }
        if epoch < entry.epoch {
            return Err(MarkerRefusal::StaleEpoch { current: entry.epoch });
        }
        let repeated = transaction != 0 && transaction <= entry.last_marker_transaction;
        if repeated && !rill_rt::mutation::active(rill_rt::mutation::Mutation::RepeatedMarkerDecides) {
            return Err(MarkerRefusal::Repeated {
                last_marker_offset: entry.last_marker_offset,
                coordinator_epoch: entry.coordinator_epoch,
            });
        }
        Ok(())
    }

    /// Records an applied transaction marker (already checked with [`Self::check_marker`]): the
    /// coordinator epoch, and the producer epoch when the marker's is newer (transactions v2
    /// bump it at every commit and abort, so the old epoch's delayed batches are refused and
    /// sequences restart at 0). Deterministic, like [`Self::apply_batch`].
    ///
    /// A marker for a producer the partition does not know (its transaction touched the
    /// partition at the coordinator but no batch of it landed yet — one may still be on its way)
    /// creates its entry, so that the marker's epoch, coordinator epoch and offset fence what
    /// arrives after it.
    pub fn apply_marker(
        &mut self,
        pid: i64,
        epoch: i16,
        coordinator_epoch: i32,
        transaction: u64,
        offset: u64,
        append_ms: i64,
    ) {
        let entry = self.producers.entry(pid).or_insert_with(|| ProducerEntry {
            epoch,
            batches: VecDeque::new(),
            last_append_ms: append_ms,
            coordinator_epoch,
            last_marker_offset: -1,
            last_marker_transaction: 0,
        });
        entry.coordinator_epoch = entry.coordinator_epoch.max(coordinator_epoch);
        entry.last_marker_transaction = entry.last_marker_transaction.max(transaction);
        entry.last_marker_offset = i64::try_from(offset).unwrap_or(i64::MAX);
        if epoch > entry.epoch {
            entry.epoch = epoch;
            entry.batches.clear();
        }
        entry.last_append_ms = entry.last_append_ms.max(append_ms);
    }

    /// A repeated marker (see [`MarkerRefusal::Repeated`]) of coordinator epoch
    /// `coordinator_epoch` was applied: it decides nothing, but markers of older coordinators
    /// are refused from now on, as after any marker of this epoch. (A coordinator leader in a
    /// new term writes every marker of the transaction it finishes again, so that a deposed
    /// leader's copies are refused everywhere.)
    pub fn note_coordinator_epoch(&mut self, pid: i64, coordinator_epoch: i32) {
        if let Some(entry) = self.producers.get_mut(&pid) {
            entry.coordinator_epoch = entry.coordinator_epoch.max(coordinator_epoch);
        }
    }

    /// Forgets producers whose latest batch was appended before `older_than_ms`, except those
    /// `keep` names (a producer with a transaction open here stays until it is decided).
    pub fn expire(&mut self, older_than_ms: i64, keep: impl Fn(i64) -> bool) -> usize {
        let before = self.producers.len();
        self.producers.retain(|pid, e| e.last_append_ms >= older_than_ms || keep(*pid));
        before - self.producers.len()
    }

    /// True when [`Self::expire`] with the same arguments would forget at least one producer.
    pub fn any_expirable(&self, older_than_ms: i64, keep: impl Fn(i64) -> bool) -> bool {
        self.producers.iter().any(|(pid, e)| e.last_append_ms < older_than_ms && !keep(*pid))
    }

    /// The oldest latest-append time of any producer.
    pub fn oldest_append_ms(&self) -> Option<i64> {
        self.producers.values().map(|e| e.last_append_ms).min()
    }

    /// The snapshot form (`proto/rill/partition.proto`).
    pub fn to_proto(&self) -> Vec<pb::ProducerState> {
        self.producers
            .iter()
            .map(|(pid, e)| pb::ProducerState {
                producer_id: *pid,
                epoch: i32::from(e.epoch),
                last_append_ms: e.last_append_ms,
                coordinator_epoch: e.coordinator_epoch,
                last_marker_offset: e.last_marker_offset + 1,
                last_marker_transaction: e.last_marker_transaction,
                batches: e
                    .batches
                    .iter()
                    .map(|b| pb::ProducerBatch {
                        first_seq: b.first_seq,
                        last_seq: b.last_seq,
                        base_offset: b.base_offset,
                    })
                    .collect(),
            })
            .collect()
    }

    /// Reads what [`ProducerStates::to_proto`] wrote.
    pub fn from_proto(states: Vec<pb::ProducerState>) -> Result<Self, String> {
        let mut producers = BTreeMap::new();
        for p in states {
            let epoch = i16::try_from(p.epoch)
                .map_err(|_| format!("producer {}: epoch {} is beyond 16 bits", p.producer_id, p.epoch))?;
            let batches = p
                .batches
                .into_iter()
                .map(|b| BatchMeta { first_seq: b.first_seq, last_seq: b.last_seq, base_offset: b.base_offset })
                .collect();
            let entry = ProducerEntry {
                epoch,
                batches,
                last_append_ms: p.last_append_ms,
                coordinator_epoch: p.coordinator_epoch,
                // Stored one up, so that 0 (older snapshots) reads as "none".
                last_marker_offset: p.last_marker_offset - 1,
                last_marker_transaction: p.last_marker_transaction,
            };
            producers.insert(p.producer_id, entry);
        }
        Ok(Self { producers })
    }
}

/// Classifies a batch against a producer's `epoch` and last `batches` (oldest first).
pub fn check_against(
    stored_epoch: i16,
    batches: &VecDeque<BatchMeta>,
    epoch: i16,
    first_seq: i32,
    count: u32,
) -> SeqCheck {
    if epoch < stored_epoch {
        return SeqCheck::StaleEpoch { current: stored_epoch };
    }
    if epoch > stored_epoch {
        return if first_seq == 0 { SeqCheck::Append } else { SeqCheck::OutOfOrder { expected: 0 } };
    }
    let last = last_seq(first_seq, count);
    if let Some(b) = batches.iter().find(|b| b.first_seq == first_seq && b.last_seq == last) {
        return SeqCheck::Duplicate { base_offset: b.base_offset };
    }
    let Some(newest) = batches.back() else {
        return if first_seq == 0 { SeqCheck::Append } else { SeqCheck::OutOfOrder { expected: 0 } };
    };
    let expected = next_seq(newest.last_seq);
    if first_seq == expected {
        return SeqCheck::Append;
    }
    // Behind the oldest remembered batch (and not wrapped around): an old retry.
    let oldest = batches.front().map_or(newest.first_seq, |b| b.first_seq);
    if first_seq < oldest && oldest - first_seq < i32::MAX / 2 {
        return SeqCheck::DuplicateUnknownOffset;
    }
    SeqCheck::OutOfOrder { expected }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sequences_append_deduplicate_and_refuse_gaps() {
        let mut s = ProducerStates::default();
        assert_eq!(s.check(7, 0, 0, 3), SeqCheck::Append);
        assert_eq!(s.check(7, 0, 5, 3), SeqCheck::UnknownProducer);
        s.apply_batch(7, 0, 0, 3, 100, 1);
        assert_eq!(s.check(7, 0, 0, 3), SeqCheck::Duplicate { base_offset: 100 });
        assert_eq!(s.check(7, 0, 3, 2), SeqCheck::Append);
        assert_eq!(s.check(7, 0, 4, 2), SeqCheck::OutOfOrder { expected: 3 });
        assert_eq!(s.check(7, 0, 1, 2), SeqCheck::OutOfOrder { expected: 3 }, "partial overlap is not a retry");
    }

    #[test]
    fn sequences_add_and_wrap_as_kafkas_do() {
        assert_eq!(seq_add(5, 3), 8);
        assert_eq!(seq_add(i32::MAX, 1), 0);
        assert_eq!(seq_add(i32::MAX - 1, 3), 1);
        assert_eq!(last_seq(i32::MAX, 2), 0);
    }

    #[test]
    fn follows_is_wrap_aware() {
        assert!(follows(5, 4));
        assert!(!follows(4, 4));
        assert!(!follows(3, 4));
        assert!(follows(0, i32::MAX), "sequences wrap to 0");
        assert!(follows(2, i32::MAX - 1));
        assert!(!follows(i32::MAX, 0));
    }

    #[test]
    fn only_five_batches_are_remembered() {
        let mut s = ProducerStates::default();
        for i in 0..7 {
            s.apply_batch(1, 0, i * 10, 10, u64::from(i as u32) * 10, 1);
        }
        assert_eq!(s.get(1).map(|e| e.batches.len()), Some(CACHED_BATCHES));
        assert_eq!(s.check(1, 0, 60, 10), SeqCheck::Duplicate { base_offset: 60 });
        assert_eq!(s.check(1, 0, 20, 10), SeqCheck::Duplicate { base_offset: 20 });
        assert_eq!(s.check(1, 0, 0, 10), SeqCheck::DuplicateUnknownOffset);
        assert_eq!(s.check(1, 0, 70, 1), SeqCheck::Append);
    }

    #[test]
    fn epochs_fence_and_restart_sequences() {
        let mut s = ProducerStates::default();
        s.apply_batch(3, 1, 0, 1, 0, 1);
        assert_eq!(s.check(3, 0, 1, 1), SeqCheck::StaleEpoch { current: 1 });
        assert_eq!(s.check(3, 2, 5, 1), SeqCheck::OutOfOrder { expected: 0 });
        assert_eq!(s.check(3, 2, 0, 1), SeqCheck::Append);
        s.apply_batch(3, 2, 0, 1, 1, 2);
        assert_eq!(s.get(3).map(|e| (e.epoch, e.batches.len())), Some((2, 1)));
    }

    #[test]
    fn markers_of_deposed_coordinators_and_old_epochs_are_refused() {
        let mut s = ProducerStates::default();
        assert_eq!(s.check_marker(4, 0, 1, 0), Ok(()), "a producer never seen here");
        s.apply_batch(4, 2, 0, 3, 10, 1);
        assert_eq!(s.check_marker(4, 1, 5, 0), Err(MarkerRefusal::StaleEpoch { current: 2 }));
        s.apply_marker(4, 2, 5, 0, 20, 2);
        assert_eq!(s.get(4).map(|e| e.last_marker_offset), Some(20));
        assert_eq!(s.check_marker(4, 2, 4, 0), Err(MarkerRefusal::CoordinatorFenced { current: 5 }));
        assert_eq!(s.get(4).map(|e| (e.epoch, e.batches.len())), Some((2, 1)), "the same epoch keeps its batches");
        s.apply_marker(4, 3, 5, 0, 21, 3);
        assert_eq!(s.get(4).map(|e| (e.epoch, e.batches.len())), Some((3, 0)), "a bumped epoch restarts sequences");
        assert_eq!(s.check(4, 2, 3, 1), SeqCheck::StaleEpoch { current: 3 }, "the old epoch's late batch");
        assert_eq!(s.check(4, 3, 0, 1), SeqCheck::Append);
        let decoded = ProducerStates::from_proto(s.to_proto()).unwrap();
        assert_eq!(decoded.get(4).map(|e| e.coordinator_epoch), Some(5));
    }

    /// Transactions v2: transaction 7's batches at epoch 2, its marker at 3; transaction 9 (the
    /// producer's next) at 3. A repeat of 7's marker — same epochs — decides nothing.
    #[test]
    fn a_repeated_or_late_marker_of_a_decided_transaction_is_recognised_by_its_name() {
        let mut s = ProducerStates::default();
        s.apply_batch(4, 2, 0, 1, 10, 1);
        assert_eq!(s.check_marker(4, 3, 5, 7), Ok(()));
        s.apply_marker(4, 3, 5, 7, 11, 2);
        assert_eq!(
            s.check_marker(4, 3, 5, 7),
            Err(MarkerRefusal::Repeated { last_marker_offset: 11, coordinator_epoch: 5 })
        );
        assert_eq!(
            s.check_marker(4, 3, 5, 6),
            Err(MarkerRefusal::Repeated { last_marker_offset: 11, coordinator_epoch: 5 }),
            "older"
        );
        assert_eq!(s.check_marker(4, 3, 5, 0), Ok(()), "a marker naming no transaction: the epochs decide");
        assert_eq!(s.check_marker(4, 3, 4, 7), Err(MarkerRefusal::CoordinatorFenced { current: 5 }));
        s.note_coordinator_epoch(4, 6);
        assert_eq!(s.check_marker(4, 3, 5, 0), Err(MarkerRefusal::CoordinatorFenced { current: 6 }));
        let repeat = MarkerRefusal::Repeated { last_marker_offset: 11, coordinator_epoch: 6 };
        assert_eq!(s.check_marker(4, 3, 6, 7), Err(repeat));
        s.apply_batch(4, 3, 0, 1, 12, 3);
        assert_eq!(s.check_marker(4, 4, 6, 9), Ok(()), "the next transaction's own marker");
        s.apply_marker(4, 4, 6, 9, 13, 4);
        assert_eq!(s.get(4).map(|e| e.last_marker_transaction), Some(9));
        s.apply_marker(4, 4, 6, 0, 14, 5);
        assert_eq!(s.get(4).map(|e| e.last_marker_transaction), Some(9), "an unnamed marker moves nothing back");
        let decoded = ProducerStates::from_proto(s.to_proto()).unwrap();
        assert_eq!(decoded, s, "the snapshot keeps it");
    }

    #[test]
    fn a_marker_for_a_producer_not_seen_here_fences_what_comes_after_it() {
        let mut s = ProducerStates::default();
        s.apply_marker(9, 3, 2, 0, 40, 1);
        let e = s.get(9).cloned().unwrap();
        assert_eq!((e.epoch, e.coordinator_epoch, e.last_marker_offset), (3, 2, 40));
        assert_eq!(s.check(9, 2, 0, 1), SeqCheck::StaleEpoch { current: 3 }, "a late batch of the old epoch");
        assert_eq!(s.check_marker(9, 3, 1, 0), Err(MarkerRefusal::CoordinatorFenced { current: 2 }));
    }

    #[test]
    fn sequences_wrap_like_kafka() {
        assert_eq!(last_seq(i32::MAX - 1, 3), 0);
        assert_eq!(next_seq(i32::MAX), 0);
        let mut s = ProducerStates::default();
        s.apply_batch(9, 0, 0, 1, 0, 1);
        let mut st = s.get(9).cloned().unwrap();
        st.batches = [BatchMeta { first_seq: i32::MAX - 1, last_seq: i32::MAX, base_offset: 5 }].into();
        assert_eq!(check_against(0, &st.batches, 0, 0, 1), SeqCheck::Append);
    }

    #[test]
    fn expiry_and_encoding() {
        let mut s = ProducerStates::default();
        s.apply_batch(1, 0, 0, 1, 0, 1_000);
        s.apply_batch(2, 0, 0, 1, 1, 5_000);
        assert_eq!(s.oldest_append_ms(), Some(1_000));
        let decoded = ProducerStates::from_proto(s.to_proto()).unwrap();
        assert_eq!(decoded, s);
        let mut too_big = s.to_proto();
        too_big[0].epoch = 40_000;
        assert!(ProducerStates::from_proto(too_big).is_err(), "epochs are 16 bits");
        assert!(!s.any_expirable(1_000, |_| false), "idle since exactly the bound is not older than it");
        assert!(!s.any_expirable(2_000, |pid| pid == 1));
        assert!(s.any_expirable(2_000, |_| false));
        assert_eq!(s.expire(2_000, |pid| pid == 1), 0, "a producer with an open transaction stays");
        assert_eq!(s.expire(2_000, |_| false), 1);
        assert_eq!(s.len(), 1);
        assert_eq!(s.check(1, 0, 1, 1), SeqCheck::UnknownProducer);
    }
}
