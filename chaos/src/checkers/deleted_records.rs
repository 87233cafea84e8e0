//! Deleted records: a trim (`DeleteRecords`) that was acknowledged stays in effect, nothing is
//! deleted that no trim asked for, and no read that began after a trim was acknowledged returns
//! a record below the log start offset it reported.

use std::collections::BTreeMap;

use super::Violation;
use crate::history::{History, OpKind, Outcome};

/// Checks `history`.
pub fn check(history: &History) -> Vec<Violation> {
    let mut out = Vec::new();
    // Per partition: the highest offset any trim asked for (whatever its outcome).
    let mut requested: BTreeMap<u32, u64> = BTreeMap::new();
    for op in &history.ops {
        if let OpKind::Trim { partition, before } = op.kind {
            let r = requested.entry(partition).or_insert(0);
            *r = (*r).max(before);
        }
    }
    for (p, start) in &history.final_starts {
        let asked = requested.get(p).copied().unwrap_or(0);
        if *start > asked {
            out.push(Violation {
                checker: "deleted-unasked",
                detail: format!("partition {p} starts at {start} after the faults, but no trim asked past {asked}"),
            });
        }
    }
    for (p, log_start, _) in history.trims() {
        let start = history.final_starts.get(&p).copied().unwrap_or(0);
        if start < log_start {
            out.push(Violation {
                checker: "trim-undone",
                detail: format!(
                    "a trim of partition {p} was acknowledged with log start {log_start}, but it starts at {start} after the faults"
                ),
            });
        }
    }
    for op in &history.ops {
        let (OpKind::Poll { partition, .. }, Outcome::PollOk { records }) = (&op.kind, &op.outcome) else {
            continue;
        };
        let Some((first, value)) = records.first() else { continue };
        // The highest log start acknowledged before this poll was sent.
        let deleted_below = history
            .trims()
            .filter(|(p, _, at)| p == partition && *at < op.invoked_at)
            .map(|(_, log_start, _)| log_start)
            .max();
        if let Some(below) = deleted_below.filter(|b| first < b) {
            out.push(Violation {
                checker: "served-deleted",
                detail: format!(
                    "process {} read {partition}/{first} ({value:?}) after records below {below} were deleted",
                    op.process
                ),
            });
        }
    }
    out
}

/// One replica's view: its node, the last log index it applied, its log start offset.
pub type ReplicaStart = (u64, u64, u64);

/// White-box: replicas of one group that applied the same log prefix report one log start
/// offset. (A trim entry occupies no offsets, so replicas whose high watermarks agree may still
/// differ in whether they applied the last trim; only replicas at the same applied index are
/// compared.)
pub fn check_replicas(starts: &BTreeMap<u64, Vec<ReplicaStart>>) -> Vec<Violation> {
    let mut out = Vec::new();
    for (group, replicas) in starts {
        let mut by_index: BTreeMap<u64, Vec<(u64, u64)>> = BTreeMap::new();
        for &(node, applied, start) in replicas {
            by_index.entry(applied).or_default().push((node, start));
        }
        for (applied, same) in by_index {
            if same.windows(2).any(|w| w[0].1 != w[1].1) {
                out.push(Violation {
                    checker: "log-start-diverged",
                    detail: format!(
                        "group {group}: replicas that applied up to index {applied} disagree on the log start (node, start): {same:?}"
                    ),
                });
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::build::*;

    #[test]
    fn a_read_below_an_acknowledged_trim_is_caught() {
        let h = history(
            vec![
                (1, send("a"), ok(0)),
                (1, send("b"), ok(1)),
                (9, trim(1), trimmed(1)),
                (2, poll(0), read(&[(0, "a"), (1, "b")])),
            ],
            vec![(0, vec![(1, "b")])],
        );
        let mut h = h;
        h.final_starts.insert(0, 1);
        let v = check(&h);
        assert_eq!(v.len(), 1, "{v:?}");
        assert_eq!(v[0].checker, "served-deleted");
    }

    #[test]
    fn a_read_sent_before_the_trim_completed_may_see_old_records() {
        let mut h = history(
            vec![(1, send("a"), ok(0)), (2, poll(0), read(&[(0, "a")])), (9, trim(1), trimmed(1))],
            vec![(0, vec![])],
        );
        h.final_starts.insert(0, 1);
        assert!(check(&h).is_empty());
    }

    #[test]
    fn undone_and_unasked_deletions_are_caught() {
        let h = history(vec![(1, send("a"), ok(0)), (9, trim(1), trimmed(1))], vec![(0, vec![(0, "a")])]);
        assert_eq!(check(&h)[0].checker, "trim-undone", "final read from 0 after a trim to 1");
        let mut h = history(vec![(1, send("a"), ok(0)), (1, send("b"), ok(1))], vec![(0, vec![(1, "b")])]);
        h.final_starts.insert(0, 1);
        assert_eq!(check(&h)[0].checker, "deleted-unasked");
    }

    #[test]
    fn replicas_must_agree_on_the_log_start() {
        let agree = BTreeMap::from([(7, vec![(1, 40, 5), (2, 40, 5), (3, 40, 5)])]);
        assert!(check_replicas(&agree).is_empty());
        let split = BTreeMap::from([(7, vec![(1, 40, 5), (2, 40, 4)])]);
        assert_eq!(check_replicas(&split)[0].checker, "log-start-diverged");
        let behind = BTreeMap::from([(7, vec![(1, 40, 5), (2, 40, 5), (3, 39, 4)])]);
        assert!(check_replicas(&behind).is_empty(), "one that has not applied the last trim yet");
    }
}
