//! Transactions as one partition sees them: which producers have a transaction open here, the
//! **last stable offset**, and the index of **aborted transactions**.
//!
//! ```text
//!  offsets  0  1  2  3  4  5  6  7  8
//!           a  T1 b  T1 A1 T2 c  T2        T1 = producer 1's transactional batches, A1 its abort
//!                       │  └─ open: T2 from 5 ──► last stable offset 5
//!                       └──── aborted index: (producer 1, first 1, marker 4)
//! ```
//!
//! A producer's first transactional batch opens its transaction at that batch's offset; its
//! coordinator's control marker (commit or abort) closes it. The last stable offset (LSO) is the
//! first offset of the oldest transaction still open, or the high watermark when none is: every
//! offset below it is decided, so a `read_committed` fetch reads up to it and no further. An
//! aborted transaction leaves (producer, first offset, marker offset) in the aborted index, which
//! a `read_committed` fetch uses to leave the aborted batches out (see [`AbortedFilter`]).
//!
//! All of this is replicated state: it changes only in `apply`, from committed entries, so every
//! replica — and every future leader — computes the same LSO at the same point of the log
//! (Redpanda's #5090 came from deriving it from the leader's own view). It is in the partition's
//! snapshot and pruned as the log start offset advances. Both maps are bounded: one open
//! transaction per producer (at most `ProducerLimits::max_per_partition` of them), and one aborted
//! entry per abort marker, which takes an offset of the retained log.

use std::collections::{BTreeMap, HashMap, VecDeque};

use rill_proto::partition as pb;

/// A producer's transaction open in this partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpenTransaction {
    /// The producer epoch of its first batch here.
    pub epoch: i16,
    /// Offset of its first batch here: the LSO while it is the oldest open.
    pub first_offset: u64,
    /// Last offset of its latest batch here.
    pub last_offset: u64,
}

/// An aborted transaction's extent in this partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AbortedTransaction {
    /// The producer that wrote it.
    pub producer_id: i64,
    /// Offset of its first batch here.
    pub first_offset: u64,
    /// Offset of its abort marker.
    pub last_offset: u64,
}

/// What closing a transaction did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Closed {
    /// The producer had no transaction open here (a marker for a partition it never wrote to,
    /// or a repeated marker): nothing changed.
    NothingOpen,
    /// Its transaction was committed.
    Committed(OpenTransaction),
    /// Its transaction was aborted and went into the aborted index.
    Aborted(AbortedTransaction),
}

/// The transactions of one partition.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Transactions {
    open: BTreeMap<i64, OpenTransaction>,
    /// Ordered by marker offset (the order markers are applied in).
    aborted: VecDeque<AbortedTransaction>,
    /// The longest aborted transaction (marker offset minus first offset): a lookup of the
    /// aborted transactions overlapping a range stops this far past the range.
    longest_aborted: u64,
}

impl Transactions {
    /// The open transaction of `producer_id`.
    pub fn open(&self, producer_id: i64) -> Option<&OpenTransaction> {
        self.open.get(&producer_id)
    }

    /// Every open transaction, by producer id.
    pub fn open_transactions(&self) -> impl Iterator<Item = (i64, &OpenTransaction)> {
        self.open.iter().map(|(pid, t)| (*pid, t))
    }

    /// Number of aborted transactions indexed.
    pub fn aborted_len(&self) -> usize {
        self.aborted.len()
    }

    /// A transactional batch of `producer_id` at `epoch` spanning `[base, base + span)` was
    /// applied: it opens the producer's transaction here, or extends the open one.
    pub fn on_batch(&mut self, producer_id: i64, epoch: i16, base: u64, span: u64) {
        let last = base + span.max(1) - 1;
        self.open
            .entry(producer_id)
            .and_modify(|t| t.last_offset = t.last_offset.max(last))
            .or_insert(OpenTransaction { epoch, first_offset: base, last_offset: last });
    }

    /// A control marker of `producer_id` at `offset` was applied: its open transaction here, if
    /// any, is decided (`commit` or not).
    pub fn on_marker(&mut self, producer_id: i64, commit: bool, offset: u64) -> Closed {
        let Some(t) = self.open.remove(&producer_id) else {
            return Closed::NothingOpen;
        };
        if commit {
            return Closed::Committed(t);
        }
        let a = AbortedTransaction { producer_id, first_offset: t.first_offset, last_offset: offset };
        self.longest_aborted = self.longest_aborted.max(offset.saturating_sub(t.first_offset));
        self.aborted.push_back(a);
        Closed::Aborted(a)
    }

    /// A transactional batch of `producer_id` spanning `[base, base + span)` arrived after its
    /// transaction was decided under a newer epoch: it is indexed as aborted at once, opening
    /// nothing (it has no marker of its own; its entry's last offset is its own last offset).
    pub fn abort_fenced(&mut self, producer_id: i64, base: u64, span: u64) {
        let last = base + span.max(1) - 1;
        self.longest_aborted = self.longest_aborted.max(last - base);
        self.aborted.push_back(AbortedTransaction { producer_id, first_offset: base, last_offset: last });
    }

    /// The first offset of the oldest open transaction, if any is open.
    pub fn first_unstable_offset(&self) -> Option<u64> {
        self.open.values().map(|t| t.first_offset).min()
    }

    /// The last stable offset given the high watermark `hw`: below it every transaction is
    /// decided.
    pub fn last_stable_offset(&self, hw: u64) -> u64 {
        let first = self.first_unstable_offset();
        if rill_rt::mutation::active(rill_rt::mutation::Mutation::LsoOffByOne) {
            // Deliberate bug (simulation only): Redpanda's #3036, one past the open transaction.
            return first.map_or(hw, |f| (f + 1).min(hw));
        }
        first.map_or(hw, |first| first.min(hw))
    }

    /// The log start moved to `log_start`: aborted transactions wholly below it are forgotten
    /// (nothing of theirs can be fetched any more).
    pub fn trim(&mut self, log_start: u64) {
        let before = self.aborted.len();
        while self.aborted.front().is_some_and(|a| a.last_offset < log_start) {
            self.aborted.pop_front();
        }
        if self.aborted.len() != before {
            self.longest_aborted = self.aborted.iter().map(|a| a.last_offset - a.first_offset).max().unwrap_or(0);
        }
    }

    /// The aborted transactions that overlap `[from, to)`, in marker order.
    pub fn aborted_overlapping(&self, from: u64, to: u64) -> Vec<AbortedTransaction> {
        let start = self.aborted.partition_point(|a| a.last_offset < from);
        // An entry overlaps when first < to; entries are ordered by marker offset, and one whose
        // marker lies more than the longest transaction past `to` starts at or after `to`.
        let horizon = to.saturating_add(self.longest_aborted);
        self.aborted
            .range(start..)
            .take_while(|a| a.last_offset <= horizon)
            .filter(|a| a.first_offset < to)
            .copied()
            .collect()
    }

    /// The snapshot form (`proto/rill/partition.proto`).
    pub fn to_proto(&self) -> (Vec<pb::OpenTransaction>, Vec<pb::AbortedTransaction>) {
        let open = self
            .open
            .iter()
            .map(|(pid, t)| pb::OpenTransaction {
                producer_id: *pid,
                epoch: i32::from(t.epoch),
                first_offset: t.first_offset,
                last_offset: t.last_offset,
            })
            .collect();
        let aborted = self
            .aborted
            .iter()
            .map(|a| pb::AbortedTransaction {
                producer_id: a.producer_id,
                first_offset: a.first_offset,
                last_offset: a.last_offset,
            })
            .collect();
        (open, aborted)
    }

    /// Reads what [`Transactions::to_proto`] wrote, checking what the lookups rely on.
    pub fn from_proto(open: Vec<pb::OpenTransaction>, aborted: Vec<pb::AbortedTransaction>) -> Result<Self, String> {
        let mut out = Self::default();
        for t in open {
            let epoch = i16::try_from(t.epoch).map_err(|_| {
                format!("open transaction of producer {}: epoch {} is beyond 16 bits", t.producer_id, t.epoch)
            })?;
            if t.last_offset < t.first_offset {
                return Err(format!("open transaction of producer {} ends before it starts", t.producer_id));
            }
            let entry = OpenTransaction { epoch, first_offset: t.first_offset, last_offset: t.last_offset };
            if out.open.insert(t.producer_id, entry).is_some() {
                return Err(format!("producer {} has two open transactions", t.producer_id));
            }
        }
        for a in aborted {
            if a.last_offset < a.first_offset {
                return Err(format!("aborted transaction of producer {} ends before it starts", a.producer_id));
            }
            if out.aborted.back().is_some_and(|b| b.last_offset >= a.last_offset) {
                return Err("aborted transactions are not in marker order".into());
            }
            out.longest_aborted = out.longest_aborted.max(a.last_offset - a.first_offset);
            out.aborted.push_back(AbortedTransaction {
                producer_id: a.producer_id,
                first_offset: a.first_offset,
                last_offset: a.last_offset,
            });
        }
        Ok(out)
    }
}

/// Tells the batches of aborted transactions in a fetched range (what `read_committed` leaves
/// out). A transactional batch holds records of one producer's one transaction, so a whole
/// batch is either aborted or not.
#[derive(Debug, Default)]
pub struct AbortedFilter {
    by_producer: HashMap<i64, Vec<(u64, u64)>>,
}

impl AbortedFilter {
    /// A filter over `aborted` (those overlapping the fetched range).
    pub fn new(aborted: &[AbortedTransaction]) -> Self {
        let mut by_producer: HashMap<i64, Vec<(u64, u64)>> = HashMap::new();
        for a in aborted {
            by_producer.entry(a.producer_id).or_default().push((a.first_offset, a.last_offset));
        }
        Self { by_producer }
    }

    /// True when the transactional batch of `producer_id` at `base_offset` belongs to an
    /// aborted transaction.
    pub fn is_aborted(&self, producer_id: i64, base_offset: u64) -> bool {
        self.by_producer
            .get(&producer_id)
            .is_some_and(|ranges| ranges.iter().any(|&(first, last)| first <= base_offset && base_offset <= last))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lso_is_the_oldest_open_transaction_or_the_high_watermark() {
        let mut t = Transactions::default();
        assert_eq!(t.last_stable_offset(10), 10);
        t.on_batch(7, 0, 3, 2);
        t.on_batch(8, 0, 5, 1);
        t.on_batch(7, 0, 6, 3);
        assert_eq!(t.open(7), Some(&OpenTransaction { epoch: 0, first_offset: 3, last_offset: 8 }));
        assert_eq!(t.last_stable_offset(10), 3);
        assert_eq!(
            t.on_marker(7, true, 9),
            Closed::Committed(OpenTransaction { epoch: 0, first_offset: 3, last_offset: 8 })
        );
        assert_eq!(t.last_stable_offset(10), 5, "producer 8's transaction is still open");
        assert_eq!(
            t.on_marker(8, false, 10),
            Closed::Aborted(AbortedTransaction { producer_id: 8, first_offset: 5, last_offset: 10 })
        );
        assert_eq!(t.last_stable_offset(11), 11);
        assert_eq!(t.on_marker(8, false, 11), Closed::NothingOpen, "a repeated marker changes nothing");
        assert_eq!(t.aborted_len(), 1);
    }

    #[test]
    fn aborted_lookup_finds_every_overlapping_transaction_and_trim_forgets_old_ones() {
        let mut t = Transactions::default();
        // Producer 1: [0, 2] aborted; producer 2: [1, 40] aborted (long); producer 1: [10, 12].
        t.on_batch(1, 0, 0, 2);
        t.on_batch(2, 0, 1, 1);
        t.on_marker(1, false, 2);
        t.on_batch(1, 0, 10, 2);
        t.on_marker(1, false, 12);
        t.on_marker(2, false, 40);
        let ids = |v: Vec<AbortedTransaction>| v.iter().map(|a| (a.producer_id, a.first_offset)).collect::<Vec<_>>();
        assert_eq!(ids(t.aborted_overlapping(0, 100)), vec![(1, 0), (1, 10), (2, 1)]);
        assert_eq!(ids(t.aborted_overlapping(3, 5)), vec![(2, 1)], "the long one spans the range");
        assert_eq!(ids(t.aborted_overlapping(41, 50)), vec![]);
        assert_eq!(ids(t.aborted_overlapping(0, 1)), vec![(1, 0)]);
        let f = AbortedFilter::new(&t.aborted_overlapping(0, 100));
        assert!(f.is_aborted(1, 0) && f.is_aborted(1, 11) && f.is_aborted(2, 30));
        assert!(!f.is_aborted(1, 5) && !f.is_aborted(3, 0));
        t.trim(13);
        assert_eq!(ids(t.aborted_overlapping(0, 100)), vec![(2, 1)], "only the one whose marker is retained");
        t.trim(41);
        assert_eq!(t.aborted_len(), 0);
    }

    #[test]
    fn the_snapshot_form_round_trips_and_bad_ones_are_refused() {
        let mut t = Transactions::default();
        t.on_batch(1, 3, 0, 2);
        t.on_batch(2, 1, 2, 1);
        t.on_marker(2, false, 3);
        t.on_batch(2, 1, 4, 5);
        let (open, aborted) = t.to_proto();
        let back = Transactions::from_proto(open.clone(), aborted.clone()).unwrap();
        assert_eq!(back, t);
        let mut wide = open.clone();
        wide[0].epoch = 40_000;
        assert!(Transactions::from_proto(wide, aborted.clone()).is_err());
        let mut twice = open.clone();
        twice.push(open[0]);
        assert!(Transactions::from_proto(twice, aborted.clone()).is_err());
        let mut unordered = aborted.clone();
        unordered.push(aborted[0]);
        assert!(Transactions::from_proto(open.clone(), unordered).is_err());
        let mut backwards = aborted;
        backwards[0].first_offset = 99;
        assert!(Transactions::from_proto(open, backwards).is_err());
    }
}
