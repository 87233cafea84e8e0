//! [`LeaderEpochs`]: where each leader epoch's records begin in a partition — Kafka's leader
//! epoch cache, which `OffsetForLeaderEpoch` reads (KIP-101, KIP-320).
//!
//! A partition's leader epoch is the Raft term its leader leads in; every stored batch carries
//! the term of the entry it was appended in. A consumer that read up to offset `o` in epoch `e`
//! asks where epoch `e` ended: if that is below `o`, the log it read was truncated. Raft never
//! truncates a committed entry and a consumer reads only committed ones, so on Rill the answer
//! is never below `o` — and this history is what lets a client check that for itself.
//!
//! Built in the state machine's `apply` from committed append entries only (the term of each),
//! so every replica holds the same history at the same point of the log; kept in the
//! partition's snapshot.

/// The epochs whose records a partition holds, each with its first offset.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LeaderEpochs {
    /// (epoch, first offset), epochs and offsets strictly increasing. At most one entry lies
    /// wholly below the log start (the one it falls in).
    entries: Vec<(u64, u64)>,
}

impl LeaderEpochs {
    /// From `(epoch, first offset)` pairs read back from a snapshot; `None` unless both
    /// increase strictly.
    pub fn from_entries(entries: Vec<(u64, u64)>) -> Option<Self> {
        entries.windows(2).all(|w| w[0].0 < w[1].0 && w[0].1 < w[1].1).then_some(Self { entries })
    }

    /// The `(epoch, first offset)` pairs, oldest first.
    pub fn entries(&self) -> &[(u64, u64)] {
        &self.entries
    }

    /// Notes a committed append entry of epoch `epoch` starting at offset `base`.
    pub(crate) fn observe(&mut self, epoch: u64, base: u64) {
        match self.entries.last() {
            Some(&(last, _)) if last >= epoch => {}
            _ => self.entries.push((epoch, base)),
        }
    }

    /// The epoch of the record at `offset`: the last epoch holding records that began at or
    /// before it (`None` when none kept did).
    pub fn epoch_at(&self, offset: u64) -> Option<u64> {
        let i = self.entries.partition_point(|&(_, start)| start <= offset);
        i.checked_sub(1).map(|i| self.entries[i].0)
    }

    /// Forgets the epochs that end at or below `log_start` (keeping the one it falls in).
    pub(crate) fn trim(&mut self, log_start: u64) {
        let keep_from = self.entries.partition_point(|&(_, start)| start <= log_start).saturating_sub(1);
        self.entries.drain(..keep_from);
    }

    /// Kafka's answer to "where did epoch `requested` end": the largest epoch at or below it
    /// that holds records, and the first offset of the next epoch after it — or `end` (the
    /// high watermark) when that is `current`, the epoch the partition's leader leads in, or
    /// the last one holding records. `None` when `requested` is newer than `current` (the
    /// client knows of a leader this one does not: Kafka's `UNDEFINED_EPOCH`). For an epoch
    /// older than every epoch kept (its records deleted), the requested epoch and the first
    /// offset kept, as Kafka answers.
    pub fn end_of(&self, requested: u64, current: u64, end: u64) -> Option<(u64, u64)> {
        if requested > current {
            return None;
        }
        if requested == current {
            return Some((current, end));
        }
        let after = self.entries.partition_point(|&(epoch, _)| epoch <= requested);
        let next_start = self.entries.get(after).map_or(end, |&(_, start)| start);
        match after {
            0 => Some((requested, next_start)),
            i => Some((self.entries[i - 1].0, next_start)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn epochs(entries: &[(u64, u64)]) -> LeaderEpochs {
        let mut e = LeaderEpochs::default();
        for &(epoch, base) in entries {
            e.observe(epoch, base);
        }
        e
    }

    #[test]
    fn an_epoch_ends_where_the_next_one_holding_records_begins() {
        // Epoch 2 wrote offsets 0-9, epoch 5 10-24, epoch 7 from 25 on; the leader leads in 9.
        let e = epochs(&[(2, 0), (2, 4), (5, 10), (7, 25), (7, 30)]);
        assert_eq!(e.entries(), &[(2, 0), (5, 10), (7, 25)]);
        assert_eq!(e.end_of(2, 9, 40), Some((2, 10)));
        assert_eq!(e.end_of(3, 9, 40), Some((2, 10)), "an epoch without records: the one before it");
        assert_eq!(e.end_of(5, 9, 40), Some((5, 25)));
        assert_eq!(e.end_of(7, 9, 40), Some((7, 40)), "the last epoch with records runs to the end");
        assert_eq!(e.end_of(8, 9, 40), Some((7, 40)));
        assert_eq!(e.end_of(9, 9, 40), Some((9, 40)), "the leader's own epoch");
        assert_eq!(e.end_of(10, 9, 40), None, "newer than the leader knows");
        assert_eq!(e.end_of(1, 9, 40), Some((1, 0)), "older than every epoch kept");
        assert_eq!([0, 9, 10, 24, 25, 99].map(|o| e.epoch_at(o)), [2, 2, 5, 5, 7, 7].map(Some));
        assert_eq!(LeaderEpochs::default().epoch_at(0), None);
    }

    #[test]
    fn trimming_keeps_the_epoch_the_log_start_falls_in() {
        let mut e = epochs(&[(2, 0), (5, 10), (7, 25)]);
        e.trim(9);
        assert_eq!(e.entries(), &[(2, 0), (5, 10), (7, 25)]);
        e.trim(12);
        assert_eq!(e.entries(), &[(5, 10), (7, 25)]);
        assert_eq!(e.end_of(2, 7, 30), Some((2, 10)), "a deleted epoch: the first offset kept after it");
        e.trim(25);
        assert_eq!(e.entries(), &[(7, 25)]);
        assert_eq!(LeaderEpochs::from_entries(vec![(7, 25), (5, 30)]), None);
        assert_eq!(LeaderEpochs::from_entries(vec![(5, 10), (7, 25)]), Some(epochs(&[(5, 10), (7, 25)])));
    }
}
