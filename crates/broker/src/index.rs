//! [`TimeIndex`]: a partition's sparse map from append time to offset.

/// One time-index point per this much append time.
pub const TIME_INDEX_INTERVAL_MS: i64 = 1000;

/// Sparse map from append time to offset: `(t, o)` means the entry starting at offset `o` is the
/// first whose append time reached `t` (times are the running maximum, so the list is sorted).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TimeIndex {
    pub(crate) points: Vec<(i64, u64)>,
    pub(crate) max_time: i64,
}

impl TimeIndex {
    pub(crate) fn observe(&mut self, time: i64, base: u64) {
        if time <= self.max_time && !self.points.is_empty() {
            return;
        }
        if self.points.last().is_none_or(|(t, _)| time >= t + TIME_INDEX_INTERVAL_MS) {
            self.points.push((time, base));
        }
        self.max_time = self.max_time.max(time);
    }

    /// An offset at or before the first entry appended at or after `time`: where a scan for
    /// that entry may start.
    pub fn scan_start(&self, time: i64) -> u64 {
        let i = self.points.partition_point(|(t, _)| *t < time);
        match i {
            0 => 0,
            i => self.points[i - 1].1,
        }
    }

    /// Number of index points.
    pub fn len(&self) -> usize {
        self.points.len()
    }

    /// True when nothing is indexed.
    pub fn is_empty(&self) -> bool {
        self.points.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn time_index_is_sparse_sorted_and_conservative() {
        let mut ix = TimeIndex::default();
        for (t, o) in [(1_000, 0), (1_500, 10), (2_100, 20), (1_900, 30), (5_000, 40)] {
            ix.observe(t, o);
        }
        assert_eq!(ix.points, vec![(1_000, 0), (2_100, 20), (5_000, 40)]);
        assert_eq!(ix.scan_start(500), 0);
        assert_eq!(ix.scan_start(1_800), 0, "the entry at 10 (t=1500) precedes; start at or before it");
        assert_eq!(ix.scan_start(2_100), 0);
        assert_eq!(ix.scan_start(2_101), 20);
        assert_eq!(ix.scan_start(9_999), 40);
    }
}
