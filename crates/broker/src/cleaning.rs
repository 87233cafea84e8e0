//! [`Cleaning`]: a compacted partition's replicated cleaning point.
//!
//! Compaction is **deterministic across replicas**: what it may remove is decided by two
//! offsets that the leader proposes in a compact entry (`command::encode_compact`) and every
//! replica applies at the same place in its log —
//!
//! * `clean_to`: below it only the newest record of each key is kept (keyless records and
//!   control batches are always kept). The leader picks it at most at the high watermark and
//!   at the first offset appended within `min.compaction.lag.ms`, so nothing uncommitted and
//!   nothing younger than the lag is ever compacted.
//! * `tombstones_before`: below it a tombstone that is the newest record of its key is removed
//!   too. It is at most an earlier `clean_to` that was applied at least `delete.retention.ms`
//!   ago by the leader's clock: a tombstone stays readable for that long after compaction first
//!   removed the values it deletes, so a consumer reading from the start has that long to see
//!   the deletion (Kafka's rule). And it is at most where every replica's log reaches: a
//!   replica holding a key's older record but not yet its tombstone would otherwise receive the
//!   tombstone's entry already compacted, and keep the old value as the key's newest record.
//!
//! What a replica's log holds below `clean_to` is then a function of the records and these two
//! offsets alone, whenever and however often each replica rewrites its entries
//! ([`crate::compaction`]): rewriting with a later point gives what rewriting once with it
//! gives. So replicas hold the same records once they have compacted to the same point, a
//! snapshot carries entries in whatever state its sender had, and the chaos checkers compare
//! replicas after compacting both to the final point. Why not per-replica cleaning points: a
//! follower that compacted further than its leader would, after a failover, hold fewer records
//! than the leader served, and no single rule would say which records any replica must keep.
//!
//! The state machine reads no clock: times come from the entries. The history of earlier
//! points (for choosing `tombstones_before`) is pruned in `apply` from the entry's own time and
//! `delete.retention.ms`, and thinned to [`MAX_HISTORY`] points, which only delays tombstone
//! removal.

/// Most earlier cleaning points remembered.
pub const MAX_HISTORY: usize = 64;

/// One applied cleaning point and the leader's time when it proposed it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CleaningPoint {
    /// Its `clean_to`.
    pub offset: u64,
    /// The leader's clock then (ms since the epoch).
    pub time_ms: i64,
}

/// A partition's applied cleaning point and the history the leader chooses tombstone removal
/// from. Changes only in the state machine's `apply` and `restore`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Cleaning {
    /// Below it, only the newest record per key is kept.
    pub(crate) clean_to: u64,
    /// Below it, a tombstone that is the newest record of its key is removed.
    pub(crate) tombstones_before: u64,
    /// Earlier points, by offset (which never decreases).
    pub(crate) history: Vec<CleaningPoint>,
}

impl Cleaning {
    /// Below this offset only the newest record per key is kept.
    pub fn clean_to(&self) -> u64 {
        self.clean_to
    }

    /// Below this offset a tombstone that is its key's newest record is removed.
    pub fn tombstones_before(&self) -> u64 {
        self.tombstones_before
    }

    /// Applies a compact entry found where the high watermark is `hw`: `clean_to` is clamped to
    /// it, `tombstones_before` to the point applied before (a tombstone is removed only once an
    /// earlier compaction passed it), and neither moves back. Returns the new `clean_to`.
    pub(crate) fn apply(&mut self, c: &crate::command::Compact, hw: u64) -> u64 {
        let previous = self.clean_to;
        self.tombstones_before = self.tombstones_before.max(c.tombstones_before.min(previous));
        self.clean_to = previous.max(c.clean_to.min(hw));
        if self.clean_to > previous {
            self.history.push(CleaningPoint { offset: self.clean_to, time_ms: c.time_ms });
        }
        self.prune(c.time_ms.saturating_sub(i64::try_from(c.delete_retention_ms).unwrap_or(i64::MAX)));
        self.clean_to
    }

    /// Forgets points a later one makes useless: once a point is at least `delete.retention.ms`
    /// old at `horizon_ms`, every earlier point is older still and has a lower offset. Then
    /// thins the history to [`MAX_HISTORY`] by dropping, among the inner points, the one
    /// whose neighbours lie closest in time.
    fn prune(&mut self, horizon_ms: i64) {
        if let Some(newest_old) = self.history.iter().rposition(|p| p.time_ms <= horizon_ms) {
            self.history.drain(..newest_old);
        }
        while self.history.len() > MAX_HISTORY {
            let drop = (1..self.history.len() - 1)
                .min_by_key(|&i| self.history[i + 1].time_ms.saturating_sub(self.history[i - 1].time_ms))
                .unwrap_or(1);
            self.history.remove(drop);
        }
    }

    /// The `tombstones_before` a leader proposes at `now_ms`: the highest point applied at
    /// least `delete_retention_ms` earlier, never below the current one.
    pub fn tombstone_horizon(&self, now_ms: i64, delete_retention_ms: u64) -> u64 {
        let horizon = now_ms.saturating_sub(i64::try_from(delete_retention_ms).unwrap_or(i64::MAX));
        let eligible = self.history.iter().filter(|p| p.time_ms <= horizon).map(|p| p.offset).max();
        eligible.unwrap_or(0).max(self.tombstones_before)
    }

    /// Rebuilds the state from a snapshot's fields; refuses inconsistent ones.
    pub(crate) fn from_parts(
        clean_to: u64,
        tombstones_before: u64,
        offsets: &[u64],
        times: &[i64],
    ) -> Result<Self, String> {
        if offsets.len() != times.len() || offsets.len() > MAX_HISTORY * 2 {
            return Err(format!("partition snapshot has {} cleaning offsets and {} times", offsets.len(), times.len()));
        }
        if tombstones_before > clean_to || offsets.windows(2).any(|w| w[1] < w[0]) {
            return Err("partition snapshot's cleaning points are out of order".into());
        }
        let history = offsets.iter().zip(times).map(|(&offset, &time_ms)| CleaningPoint { offset, time_ms }).collect();
        Ok(Self { clean_to, tombstones_before, history })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::command::Compact;

    fn compact(clean_to: u64, tombstones_before: u64, time_ms: i64) -> Compact {
        Compact { clean_to, tombstones_before, time_ms, delete_retention_ms: 1000 }
    }

    #[test]
    fn points_are_clamped_to_the_high_watermark_and_never_move_back() {
        let mut c = Cleaning::default();
        assert_eq!(c.apply(&compact(50, 0, 0), 30), 30, "never past the high watermark");
        assert_eq!(c.apply(&compact(20, 0, 10), 100), 30, "never back");
        assert_eq!(c.apply(&compact(80, 80, 20), 100), 80);
        assert_eq!(c.tombstones_before(), 30, "tombstones go only below a point applied before");
        assert_eq!(c.apply(&compact(80, 5, 30), 100), 80);
        assert_eq!(c.tombstones_before(), 30, "tombstones_before never moves back");
    }

    #[test]
    fn a_tombstone_horizon_is_a_point_at_least_delete_retention_old() {
        let mut c = Cleaning::default();
        c.apply(&compact(10, 0, 1_000), 100);
        c.apply(&compact(20, 0, 1_500), 100);
        c.apply(&compact(30, 0, 2_200), 100);
        assert_eq!(c.tombstone_horizon(1_999, 1000), 0, "nothing is a second old yet");
        assert_eq!(c.tombstone_horizon(2_000, 1000), 10);
        assert_eq!(c.tombstone_horizon(2_600, 1000), 20);
        assert_eq!(c.tombstone_horizon(9_999, 1000), 30);
        // Applying at 3_000 prunes the point at 1_000: the one at 1_500 supersedes it.
        c.apply(&compact(40, 20, 3_000), 100);
        assert_eq!(c.history.iter().map(|p| p.offset).collect::<Vec<_>>(), vec![20, 30, 40]);
        assert_eq!(c.tombstone_horizon(2_600, 1000), 20, "never below the applied one");
    }

    #[test]
    fn the_history_is_bounded() {
        let mut c = Cleaning::default();
        for i in 0..1000u64 {
            let time = i64::try_from(i).unwrap() * 10;
            c.apply(
                &Compact { clean_to: i + 1, tombstones_before: 0, time_ms: time, delete_retention_ms: 1 << 40 },
                u64::MAX,
            );
        }
        assert_eq!(c.history.len(), MAX_HISTORY);
        assert_eq!(c.history.first().map(|p| p.offset), Some(1), "the oldest point stays");
        assert_eq!(c.history.last().map(|p| p.offset), Some(1000), "the newest point stays");
        let back = Cleaning::from_parts(
            c.clean_to,
            c.tombstones_before,
            &c.history.iter().map(|p| p.offset).collect::<Vec<_>>(),
            &c.history.iter().map(|p| p.time_ms).collect::<Vec<_>>(),
        )
        .unwrap();
        assert_eq!(back, c);
        assert!(Cleaning::from_parts(5, 6, &[], &[]).is_err());
        assert!(Cleaning::from_parts(5, 0, &[2, 1], &[0, 0]).is_err());
        assert!(Cleaning::from_parts(5, 0, &[1], &[]).is_err());
    }
}
