//! Send order: a producer's later acknowledged send to a partition lands after its earlier one
//! (producers send one batch at a time, so acknowledgement order is send order).

use std::collections::BTreeMap;

use super::Violation;
use crate::history::History;

/// Checks `history`.
pub fn check(history: &History) -> Vec<Violation> {
    let mut out = Vec::new();
    let mut last: BTreeMap<(u32, u32), (u64, &str)> = BTreeMap::new();
    for (process, p, v, o) in history.acked_sends() {
        if let Some((prev, pv)) = last.get(&(process, p)) {
            if o <= *prev {
                out.push(Violation {
                    checker: "nonmonotonic-send",
                    detail: format!(
                        "process {process}: {v:?} landed at {p}/{o}, not after its earlier {pv:?} at {prev}"
                    ),
                });
            }
        }
        last.insert((process, p), (o, v));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::build::*;

    #[test]
    fn a_later_send_landing_earlier_is_caught() {
        let h = history(vec![(1, send("a"), ok(5)), (1, send("b"), ok(3))], vec![]);
        assert_eq!(check(&h).len(), 1);
    }

    #[test]
    fn other_processes_interleave_freely() {
        let h = history(vec![(1, send("a"), ok(5)), (2, send("b"), ok(3)), (1, send("c"), ok(6))], vec![]);
        assert!(check(&h).is_empty());
    }
}
