//! Lost writes: every acknowledged value must be readable after healing, at the offset its
//! acknowledgement gave.
//!
//! The final read (a fresh consumer reading each partition from its log start offset after the
//! faults healed) is the version order; an acknowledged value absent from it was *lost*
//! (Jepsen's "unseen"), and one present elsewhere than its acknowledged offset broke the offset
//! promise. Values acknowledged below the final read's start were deleted (`DeleteRecords`);
//! [`super::deleted_records`] checks that only requested deletions happened.
//!
//! On a compacted topic a value acknowledged below the final cleaning point may be absent:
//! [`super::compaction_kept`] decides whether compaction was allowed to remove it. Anywhere, a
//! value present at another offset than acknowledged is a violation (offsets never shift), and
//! at or above the cleaning point nothing may be absent.

use std::collections::HashMap;

use super::Violation;
use crate::history::History;

/// Checks `history`.
pub fn check(history: &History) -> Vec<Violation> {
    let mut out = Vec::new();
    let mut at: HashMap<(u32, &str), Vec<u64>> = HashMap::new();
    for (p, records) in &history.final_reads {
        for (o, v) in records {
            at.entry((*p, v.as_str())).or_default().push(*o);
        }
    }
    for (process, p, v, o) in history.acked_sends() {
        if o < history.final_starts.get(&p).copied().unwrap_or(0) {
            continue;
        }
        match at.get(&(p, v)) {
            None if history.compacted && o < history.cleaning_point(p).0 => {}
            None => out.push(Violation {
                checker: "lost-write",
                detail: format!(
                    "value {v:?} acknowledged to process {process} at {p}/{o} is missing from the final read"
                ),
            }),
            Some(offsets) if !offsets.contains(&o) => out.push(Violation {
                checker: "lost-write",
                detail: format!("value {v:?} acknowledged at {p}/{o} is at {offsets:?} in the final read"),
            }),
            Some(_) => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::build::*;

    #[test]
    fn acknowledged_values_missing_from_the_final_read_are_lost() {
        // checker.md's vector: a@0, b@1 acked, c@2 from an info send, d@3 acked; the final read
        // sees only c and d → a and b are lost.
        let h = history(
            vec![(1, send("a"), ok(0)), (1, send("b"), ok(1)), (2, send("c"), info()), (1, send("d"), ok(3))],
            vec![(0, vec![(2, "c"), (3, "d")])],
        );
        let v = check(&h);
        assert_eq!(v.len(), 2, "{v:?}");
        assert!(v[0].detail.contains("\"a\"") && v[1].detail.contains("\"b\""));
    }

    #[test]
    fn a_value_at_another_offset_breaks_the_promise() {
        let h = history(vec![(1, send("a"), ok(0))], vec![(0, vec![(0, "x"), (1, "a")])]);
        assert_eq!(check(&h).len(), 1);
    }

    #[test]
    fn values_below_the_final_reads_start_were_deleted_not_lost() {
        let mut h = history(vec![(1, send("a"), ok(0)), (1, send("b"), ok(1))], vec![(0, vec![(1, "b")])]);
        assert_eq!(check(&h).len(), 1, "read from 0, a is lost");
        h.final_starts.insert(0, 1);
        assert!(check(&h).is_empty(), "read from 1: a was deleted");
    }

    #[test]
    fn on_a_compacted_topic_only_values_below_the_cleaning_point_may_be_absent() {
        let mut h = history(
            vec![(1, send_keyed("a", "k"), ok(0)), (1, send_keyed("b", "k"), ok(1)), (1, send_keyed("c", "k"), ok(2))],
            vec![(0, vec![(2, "c")])],
        );
        h.compacted = true;
        h.cleaning.insert(0, (1, 0));
        let v = check(&h);
        assert_eq!(v.len(), 1, "b at 1 is above the cleaning point: {v:?}");
        assert!(v[0].detail.contains("\"b\""));
        h.cleaning.insert(0, (3, 0));
        assert!(check(&h).is_empty(), "below the cleaning point compaction_kept judges");
        h.final_reads.insert(0, vec![(2, "c".into()), (3, "a".into())]);
        assert_eq!(check(&h).len(), 1, "a value at another offset is a violation even below the point");
    }

    #[test]
    fn complete_final_read_passes() {
        let h = history(vec![(1, send("a"), ok(0)), (1, send("b"), info())], vec![(0, vec![(0, "a")])]);
        assert!(check(&h).is_empty());
    }
}
