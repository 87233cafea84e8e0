//! Poll order: a consumer reading a partition with a stable assignment never skips an offset
//! and never goes backwards. Offsets are dense, so each poll's records must start exactly at the
//! offset asked for and continue without gaps.
//!
//! On a compacted topic offsets have gaps where compaction removed records, so a poll may jump
//! over offsets — but only over offsets that hold no record in the final read (at or after its
//! start), and only below the cleaning point of the moment (white-box: the highest `clean_to`
//! any replica had applied, sampled at or after the poll completed — no replica compacts past
//! its applied point, and points only grow). A record the final read holds was in the log from
//! its commit on (compaction only removes, and the poll returned a later, so committed,
//! offset), so a poll that jumped over it skipped it; and a gap at or above the cleaning point
//! is a record compaction was not yet allowed to remove.

use std::collections::{BTreeMap, BTreeSet};

use super::Violation;
use crate::history::{History, OpKind, Outcome};

/// Checks `history`.
pub fn check(history: &History) -> Vec<Violation> {
    let mut out = Vec::new();
    let mut next: BTreeMap<(u32, u32), u64> = BTreeMap::new();
    // Compacted topics: the offsets each final read holds, from where it starts.
    let held: BTreeMap<u32, (u64, BTreeSet<u64>)> = if history.compacted {
        history
            .final_reads
            .iter()
            .map(|(p, records)| {
                let start = history.final_starts.get(p).copied().unwrap_or(0);
                (*p, (start, records.iter().map(|(o, _)| *o).collect()))
            })
            .collect()
    } else {
        BTreeMap::new()
    };
    // Whether skipping `from..to` of `p` skipped a record, when nothing was compacted at or
    // above `cleaned_below`: always on a dense topic; on a compacted one when, at or after the
    // final read's start (below it records were deleted), the gap reaches the cleaning point or
    // the final read holds a record there (without a final read, nothing more is known).
    let skipped = |p: u32, from: u64, to: u64, cleaned_below: u64| -> Option<String> {
        if !history.compacted {
            return Some("offsets are dense".into());
        }
        let from = from.max(held.get(&p).map_or(0, |(start, _)| *start));
        if from >= to {
            return None;
        }
        if to > cleaned_below {
            return Some(format!("no replica had compacted past {cleaned_below} yet"));
        }
        let (_, offsets) = held.get(&p)?;
        offsets.range(from..to).next().map(|o| format!("the final read holds a record at {o}"))
    };
    for op in &history.ops {
        let (OpKind::Poll { partition: p, offset: asked }, Outcome::PollOk { records }) = (&op.kind, &op.outcome)
        else {
            continue;
        };
        let (process, p, asked) = (op.process, *p, *asked);
        let cleaned_below = op.completed_at.map_or(u64::MAX, |at| history.cleaning_bound(p, at));
        let mut expect = asked;
        if let Some(&prev) = next.get(&(process, p)) {
            if asked < prev {
                out.push(Violation {
                    checker: "nonmonotonic-poll",
                    detail: format!("process {process} polled {p}/{asked} after already reading up to {prev}"),
                });
            } else if asked > prev && history.compacted {
                // The position moved past the records read, to the end of the batches returned
                // (compaction emptied the rest): a skip unless those offsets were compacted
                // away before this poll was sent.
                if let Some(why) = skipped(p, prev, asked, history.cleaning_bound(p, op.invoked_at)) {
                    out.push(Violation {
                        checker: "poll-skip",
                        detail: format!("process {process} moved its position on {p} from {prev} to {asked} ({why})"),
                    });
                }
            }
        }
        for (o, v) in records {
            if *o > expect {
                if let Some(why) = skipped(p, expect, *o, cleaned_below) {
                    out.push(Violation {
                        checker: "poll-skip",
                        detail: format!(
                            "process {process} polling {p} from {asked} skipped {expect}..{o} (got {v:?} at {o}; {why})"
                        ),
                    });
                }
            } else if *o < expect {
                out.push(Violation {
                    checker: "nonmonotonic-poll",
                    detail: format!(
                        "process {process} polling {p} from {asked} got offset {o} after {}",
                        expect.saturating_sub(1)
                    ),
                });
            }
            expect = o + 1;
        }
        let slot = next.entry((process, p)).or_insert(expect);
        *slot = (*slot).max(expect);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::build::*;

    #[test]
    fn a_gap_inside_a_poll_is_a_skip() {
        let h = history(vec![(1, poll(0), read(&[(0, "a"), (2, "c")]))], vec![]);
        let v = check(&h);
        assert_eq!(v.len(), 1);
        assert_eq!(v[0].checker, "poll-skip");
    }

    #[test]
    fn a_poll_starting_past_its_offset_is_a_skip() {
        let h = history(vec![(1, poll(3), read(&[(4, "e")]))], vec![]);
        assert_eq!(check(&h)[0].checker, "poll-skip");
    }

    #[test]
    fn going_backwards_is_caught() {
        let h = history(vec![(1, poll(0), read(&[(0, "a"), (1, "b")])), (1, poll(1), read(&[(1, "b")]))], vec![]);
        assert_eq!(check(&h)[0].checker, "nonmonotonic-poll");
        let h = history(vec![(1, poll(0), read(&[(1, "b"), (0, "a")]))], vec![]);
        assert!(check(&h).iter().any(|v| v.checker == "nonmonotonic-poll"));
    }

    #[test]
    fn on_a_compacted_topic_a_gap_is_a_skip_only_where_the_final_read_holds_a_record() {
        let mut h = history(
            vec![(1, poll(0), read(&[(0, "a"), (3, "d")])), (2, poll(1), read(&[(3, "d")]))],
            vec![(0, vec![(0, "a"), (3, "d")])],
        );
        h.compacted = true;
        assert!(check(&h).is_empty(), "1 and 2 were compacted away");
        h.final_reads.insert(0, vec![(0, "a".into()), (2, "c".into()), (3, "d".into())]);
        let v = check(&h);
        assert_eq!(v.len(), 2, "both polls jumped over c at 2: {v:?}");
        assert!(v.iter().all(|v| v.checker == "poll-skip"));
        h.compacted = false;
        assert_eq!(check(&h).len(), 2, "a dense topic has no gaps at all");
    }

    #[test]
    fn on_a_compacted_topic_a_gap_at_or_above_the_cleaning_point_of_the_moment_is_a_skip() {
        let mut h = history(vec![(1, poll(0), read(&[(0, "a"), (3, "d")]))], vec![(0, vec![(0, "a"), (3, "d")])]);
        h.compacted = true;
        h.cleaning.insert(0, (4, 0));
        assert!(check(&h).is_empty(), "no sample: the final point 4 bounds it");
        // The poll completed at clock 2; a sample at clock 2 says no replica had compacted past 2.
        h.cleaning_samples = vec![(1, 0, 1), (2, 0, 2), (5, 0, 4)];
        let v = check(&h);
        assert_eq!(v.len(), 1, "offset 2 was not yet compactable: {v:?}");
        assert!(v[0].detail.contains("past 2"), "{v:?}");
        h.cleaning_samples = vec![(1, 0, 1), (3, 0, 3)];
        assert!(check(&h).is_empty(), "the first sample at or after the completion says 3");
    }

    #[test]
    fn on_a_compacted_topic_a_position_may_move_past_compacted_offsets_only() {
        let mut h = history(
            vec![(1, poll(0), read(&[(0, "a")])), (1, poll(3), read(&[(3, "d")]))],
            vec![(0, vec![(0, "a"), (3, "d")])],
        );
        h.compacted = true;
        h.cleaning.insert(0, (4, 0));
        assert!(check(&h).is_empty(), "1 and 2 were compacted away");
        // The second poll was sent at clock 3, when no replica had compacted past 2.
        h.cleaning_samples = vec![(3, 0, 2), (5, 0, 4)];
        let v = check(&h);
        assert_eq!(v.len(), 1, "{v:?}");
        assert!(v[0].checker == "poll-skip" && v[0].detail.contains("from 1 to 3"));
        h.cleaning_samples.clear();
        h.final_reads.insert(0, vec![(0, "a".into()), (1, "b".into()), (3, "d".into())]);
        assert_eq!(check(&h).len(), 1, "b at 1 was there all along");
    }

    #[test]
    fn contiguous_polls_and_separate_processes_pass() {
        let h = history(
            vec![
                (1, poll(0), read(&[(0, "a")])),
                (1, poll(1), read(&[(1, "b")])),
                (2, poll(0), read(&[(0, "a"), (1, "b")])),
            ],
            vec![],
        );
        assert!(check(&h).is_empty());
    }
}
