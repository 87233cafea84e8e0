//! [`SparseIndex`]: a partition's log start offset and its sparse map of the log by append time
//! and by size.
//!
//! One point is kept per second of append time or per MiB of entries, whichever comes first. The
//! points serve four reads without scanning the log: where to start looking for the first
//! entry appended at or after a time, which units may hold a record whose own timestamp is at
//! or after a time (Kafka's `ListOffsets` by timestamp: producers' timestamps need not follow
//! the log's order, so each unit keeps its largest), which offset retention may delete up
//! to (`retention.ms`, `retention.bytes`), and about how many bytes a partition holds. The
//! intervals between points are the units retention deletes: it never moves the log start offset
//! into the middle of one (`DeleteRecords` may, as in Kafka).
//!
//! Everything here changes only in the state machine's `apply` (and `restore`), from entry
//! contents, so every replica holds the same index at the same point of the log.

/// A new point after this much append time since the last one.
pub const TIME_INTERVAL_MS: i64 = 1000;
/// A new point after this many bytes of entries since the last one.
pub const SIZE_INTERVAL_BYTES: u64 = 1 << 20;

/// One point of the index.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IndexPoint {
    /// An entry's first offset.
    pub offset: u64,
    /// The largest append time of the entries up to and including that one: every entry before
    /// `offset` was appended at or before this time.
    pub time: i64,
    /// Bytes of entries appended before `offset` (counted since the partition began, or since
    /// the release that started counting: older points count 0).
    pub bytes: u64,
    /// The largest record timestamp of the entries from `offset` up to the next point
    /// ([`UNKNOWN_RECORD_TIME`] for points restored from a snapshot that did not keep it).
    pub record_time: i64,
}

/// A point's [`IndexPoint::record_time`] when it is not known: a search by record timestamp
/// must read the unit.
pub const UNKNOWN_RECORD_TIME: i64 = i64::MAX;

/// The log start offset and the sparse index of a record partition.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SparseIndex {
    /// Sorted by offset; times and bytes never decrease. At most one point lies below the log
    /// start (the one it falls in).
    pub(crate) points: Vec<IndexPoint>,
    /// Largest append time observed.
    pub(crate) max_time: i64,
    /// Bytes of every entry observed.
    pub(crate) appended: u64,
    /// The offset after the last observed entry.
    pub(crate) end: u64,
    /// The first offset that is not deleted.
    pub(crate) log_start: u64,
}

impl SparseIndex {
    /// Notes an append entry of `bytes` at offsets `base .. end`, appended at `time`, whose
    /// largest record timestamp is `record_time`.
    pub(crate) fn observe(&mut self, time: i64, base: u64, end: u64, bytes: u64, record_time: i64) {
        let running_max = if self.points.is_empty() { time } else { self.max_time.max(time) };
        let due = match self.points.last() {
            None => true,
            Some(last) => {
                running_max >= last.time + TIME_INTERVAL_MS || self.appended - last.bytes >= SIZE_INTERVAL_BYTES
            }
        };
        if due {
            self.points.push(IndexPoint { offset: base, time: running_max, bytes: self.appended, record_time });
        } else if let Some(last) = self.points.last_mut() {
            last.record_time = last.record_time.max(record_time);
        }
        self.max_time = running_max;
        self.appended = self.appended.saturating_add(bytes);
        self.end = self.end.max(end);
    }

    /// Moves the log start offset up to `before` (never back, never past the end) and forgets
    /// the points below it. Returns the log start offset afterwards.
    pub(crate) fn trim(&mut self, before: u64) -> u64 {
        self.log_start = self.log_start.max(before.min(self.end));
        // Keep the last point at or below the start: it tells where the first kept unit began.
        let keep_from = self.points.partition_point(|p| p.offset <= self.log_start).saturating_sub(1);
        self.points.drain(..keep_from);
        self.log_start
    }

    /// The first offset not deleted.
    pub fn log_start(&self) -> u64 {
        self.log_start
    }

    /// The offset after the last indexed entry.
    pub fn end(&self) -> u64 {
        self.end
    }

    /// An offset at or before the first entry appended at or after `time`, and not below the
    /// log start: where a scan for that entry may start.
    pub fn scan_start(&self, time: i64) -> u64 {
        let i = self.points.partition_point(|p| p.time < time);
        let from = match i {
            0 => 0,
            i => self.points[i - 1].offset,
        };
        from.max(self.log_start)
    }

    /// The units at or above the log start that may hold a record with a timestamp at or
    /// after `time`, as (first offset, offset after the unit), in log order. The first may
    /// begin below the log start (its records there are deleted).
    pub fn units_with_record_time(&self, time: i64) -> Vec<(u64, u64)> {
        self.units().filter(|(_, p)| p.record_time >= time).map(|(range, _)| range).collect()
    }

    /// The units at or above the log start, from the largest record timestamp down (ties in
    /// log order), with that timestamp: where to look for the record with the largest one.
    pub fn units_by_record_time(&self) -> Vec<((u64, u64), i64)> {
        let mut units: Vec<((u64, u64), i64)> = self.units().map(|(range, p)| (range, p.record_time)).collect();
        units.sort_by_key(|&((from, _), time)| (std::cmp::Reverse(time), from));
        units
    }

    /// Each unit holding offsets at or above the log start: its range and its point.
    fn units(&self) -> impl Iterator<Item = ((u64, u64), &IndexPoint)> + '_ {
        let ends = self.points.iter().skip(1).map(|p| p.offset).chain(std::iter::once(self.end));
        self.points.iter().zip(ends).filter(|&(_, end)| end > self.log_start).map(|(p, end)| ((p.offset, end), p))
    }

    /// Where retention moves the log start offset: past every unit whose entries were all
    /// appended before `cut_ms`, and past the oldest units while at least `max_bytes` would
    /// remain (as Kafka's `retention.bytes`: a partition keeps at least that much, and less only
    /// when it holds less; 0 keeps nothing). `None` when neither moves it.
    pub fn retention_target(&self, cut_ms: Option<i64>, max_bytes: Option<u64>) -> Option<u64> {
        let mut target = self.log_start;
        if let Some(cut) = cut_ms {
            if self.max_time < cut && !self.points.is_empty() {
                target = target.max(self.end);
            } else {
                let i = self.points.partition_point(|p| p.time < cut);
                if i > 0 {
                    target = target.max(self.points[i - 1].offset);
                }
            }
        }
        if let Some(keep) = max_bytes {
            // The latest unit boundary (or the end) with at least `keep` bytes from it on.
            let end = IndexPoint { offset: self.end, time: self.max_time, bytes: self.appended, record_time: 0 };
            let boundary = self
                .points
                .iter()
                .chain(std::iter::once(&end))
                .rev()
                .find(|p| self.appended.saturating_sub(p.bytes) >= keep);
            if let Some(p) = boundary {
                target = target.max(p.offset);
            }
        }
        (target > self.log_start).then_some(target)
    }

    /// About how many bytes of entries lie at or above the log start offset (counted from the
    /// start of the unit it falls in).
    pub fn retained_bytes(&self) -> u64 {
        if self.log_start >= self.end {
            return 0;
        }
        match self.points.first() {
            Some(p) if p.offset <= self.log_start => self.appended.saturating_sub(p.bytes),
            _ => self.appended,
        }
    }

    /// About how many bytes of entries were appended from `offset` on (counted from the start
    /// of the unit it falls in, as appended: compaction does not shrink this).
    pub fn bytes_from(&self, offset: u64) -> u64 {
        let i = self.points.partition_point(|p| p.offset <= offset);
        match i {
            0 => self.appended,
            i => self.appended.saturating_sub(self.points[i - 1].bytes),
        }
    }

    /// Number of points.
    pub fn len(&self) -> usize {
        self.points.len()
    }

    /// True when nothing is indexed.
    pub fn is_empty(&self) -> bool {
        self.points.is_empty()
    }

    /// After a restore from a snapshot older than the `end` field: nothing below the applied
    /// position is unknown to the index.
    pub(crate) fn raise_end(&mut self, applied: u64) {
        self.end = self.end.max(applied);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn index(entries: &[(i64, u64, u64)]) -> SparseIndex {
        let mut ix = SparseIndex::default();
        let mut base = 0;
        for &(t, count, bytes) in entries {
            ix.observe(t, base, base + count, bytes, t);
            base += count;
        }
        ix
    }

    fn offsets(ix: &SparseIndex) -> Vec<u64> {
        ix.points.iter().map(|p| p.offset).collect()
    }

    #[test]
    fn points_follow_time_and_size_and_lookups_are_conservative() {
        // (time, records, bytes); offsets 0, 10, 20, 30, 40.
        let ix = index(&[(1_000, 10, 1), (1_500, 10, 1), (2_100, 10, 1), (1_900, 10, 1), (5_000, 10, 1)]);
        assert_eq!(offsets(&ix), vec![0, 20, 40]);
        assert_eq!(ix.scan_start(500), 0);
        assert_eq!(ix.scan_start(1_800), 0, "the entry at 10 (t=1500) precedes; start at or before it");
        assert_eq!(ix.scan_start(2_100), 0);
        assert_eq!(ix.scan_start(2_101), 20);
        assert_eq!(ix.scan_start(9_999), 40);
        // A point per MiB even when the clock stands still.
        let mib = SIZE_INTERVAL_BYTES;
        let ix = index(&[(7, 1, mib / 2), (7, 1, mib / 2), (7, 1, mib), (7, 1, 1), (7, 1, 1)]);
        assert_eq!(offsets(&ix), vec![0, 2, 3]);
        assert_eq!(ix.points[2].bytes, 2 * mib);
        assert_eq!(ix.retained_bytes(), 2 * mib + 2);
    }

    #[test]
    fn retention_by_time_deletes_only_units_appended_before_the_cut() {
        let ix = index(&[(1_000, 10, 1), (2_000, 10, 1), (3_000, 10, 1), (2_500, 10, 1)]);
        assert_eq!(offsets(&ix), vec![0, 10, 20]);
        assert_eq!(ix.retention_target(Some(1_000), None), None, "nothing is older than the cut");
        assert_eq!(ix.retention_target(Some(2_001), None), Some(10), "units [0,10) and only those");
        assert_eq!(
            ix.retention_target(Some(3_000), None),
            Some(10),
            "the unit from 10 is not known to be older: the point after it says 3000"
        );
        assert_eq!(ix.retention_target(Some(3_001), None), Some(40), "everything is older");
        assert_eq!(SparseIndex::default().retention_target(Some(i64::MAX), Some(0)), None, "an empty log");
    }

    #[test]
    fn retention_by_size_keeps_at_least_the_limit() {
        let mib = SIZE_INTERVAL_BYTES;
        // Four units of 1 MiB, at offsets 0, 100, 200, 300.
        let ix = index(&[(0, 100, mib), (0, 100, mib), (0, 100, mib), (0, 100, mib)]);
        assert_eq!(offsets(&ix), vec![0, 100, 200, 300]);
        assert_eq!(ix.retention_target(None, Some(4 * mib)), None);
        assert_eq!(ix.retention_target(None, Some(5 * mib)), None, "less than the limit is all kept");
        assert_eq!(ix.retention_target(None, Some(3 * mib + 1)), None, "deleting a unit would keep too little");
        assert_eq!(ix.retention_target(None, Some(3 * mib)), Some(100));
        assert_eq!(ix.retention_target(None, Some(2 * mib + 1)), Some(100));
        assert_eq!(ix.retention_target(None, Some(2 * mib)), Some(200));
        assert_eq!(ix.retention_target(None, Some(1)), Some(300), "the newest unit is kept");
        assert_eq!(ix.retention_target(None, Some(0)), Some(400), "zero keeps nothing");
        assert_eq!(ix.retention_target(Some(i64::MIN), Some(u64::MAX)), None);
    }

    #[test]
    fn trim_moves_the_start_forward_only_and_not_past_the_end() {
        let mib = SIZE_INTERVAL_BYTES;
        let mut ix = index(&[(0, 100, mib), (0, 100, mib), (0, 100, mib)]);
        assert_eq!(ix.trim(150), 150, "DeleteRecords may stop inside a unit");
        assert_eq!(offsets(&ix), vec![100, 200], "the unit the start falls in is kept");
        assert_eq!(ix.retained_bytes(), 2 * mib);
        assert_eq!(ix.scan_start(0), 150, "never below the start");
        assert_eq!(ix.trim(20), 150, "never back");
        assert_eq!(ix.retention_target(None, Some(0)), Some(300));
        assert_eq!(ix.trim(10_000), 300, "not past the end");
        assert_eq!(ix.retained_bytes(), 0);
        assert_eq!(ix.retention_target(Some(i64::MAX), Some(0)), None, "nothing left to delete");
    }

    #[test]
    fn units_keep_their_largest_record_time_whatever_the_order_of_producer_clocks() {
        let mut ix = SparseIndex::default();
        // (append time, records, record time): units start at 0 and 20 (a second apart).
        for (i, &(t, record_time)) in
            [(1_000, 50), (1_200, 900), (1_400, 10), (2_000, 300), (2_100, 900)].iter().enumerate()
        {
            let base = 10 * i as u64;
            ix.observe(t, base, base + 10, 1, record_time);
        }
        assert_eq!(offsets(&ix), vec![0, 30]);
        assert_eq!(ix.units_with_record_time(300), vec![(0, 30), (30, 50)]);
        assert_eq!(ix.units_with_record_time(901), vec![]);
        assert_eq!(ix.units_by_record_time(), vec![((0, 30), 900), ((30, 50), 900)], "ties in log order");
        ix.trim(30);
        assert_eq!(ix.units_with_record_time(0), vec![(30, 50)], "units below the log start are gone");
        ix.trim(35);
        assert_eq!(ix.units_with_record_time(0), vec![(30, 50)], "the unit the log start falls in stays");
    }
}
