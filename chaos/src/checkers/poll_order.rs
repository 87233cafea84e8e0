//! Poll order: a consumer reading a partition with a stable assignment never skips an offset
//! and never goes backwards. Offsets are dense, so each poll's records must start exactly at the
//! offset asked for and continue without gaps.

use std::collections::BTreeMap;

use super::Violation;
use crate::history::History;

/// Checks `history`.
pub fn check(history: &History) -> Vec<Violation> {
    let mut out = Vec::new();
    let mut next: BTreeMap<(u32, u32), u64> = BTreeMap::new();
    for (process, p, asked, records) in history.polls() {
        let mut expect = asked;
        if let Some(prev) = next.get(&(process, p)) {
            if asked < *prev {
                out.push(Violation {
                    checker: "nonmonotonic-poll",
                    detail: format!("process {process} polled {p}/{asked} after already reading up to {prev}"),
                });
            }
        }
        for (o, v) in records {
            if *o > expect {
                out.push(Violation {
                    checker: "poll-skip",
                    detail: format!(
                        "process {process} polling {p} from {asked} skipped {expect}..{o} (got {v:?} at {o})"
                    ),
                });
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
