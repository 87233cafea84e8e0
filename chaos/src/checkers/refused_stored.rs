//! Refused sends: a send answered with an error that proves it was not stored (`fail`: not the
//! leader, not enough replicas before the append, a sequence gap, an unknown producer) is never
//! read back. A client that believes such an answer sends the record again — under a new
//! producer id, when the answer was about its producer — so a refusal of something stored
//! becomes a duplicate.

use std::collections::BTreeMap;

use super::Violation;
use crate::history::{History, OpKind, Outcome};

/// Checks `history`.
pub fn check(history: &History) -> Vec<Violation> {
    let refused: BTreeMap<(u32, &str), &str> = history
        .ops
        .iter()
        .filter_map(|op| match (&op.kind, &op.outcome) {
            (OpKind::Send { partition, value, .. }, Outcome::Fail(why)) => {
                Some(((*partition, value.as_str()), why.as_str()))
            }
            _ => None,
        })
        .collect();
    let mut seen = std::collections::BTreeSet::new();
    let mut out = Vec::new();
    for (p, o, v, source) in history.observations() {
        if let Some(why) = refused.get(&(p, v)) {
            if seen.insert((p, v)) {
                out.push(Violation {
                    checker: "refused-stored",
                    detail: format!("value {v:?} was refused ({why}) but is stored at {p}/{o} ({source})"),
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
    fn a_refused_send_read_back_is_caught() {
        let refused = Outcome::Fail("UNKNOWN_PRODUCER_ID".into());
        let h = history(vec![(1, send("a"), refused)], vec![(0, vec![(0, "a")])]);
        let found = check(&h);
        assert_eq!(found.len(), 1);
        assert!(found[0].detail.contains("UNKNOWN_PRODUCER_ID"), "{}", found[0]);
    }

    #[test]
    fn refused_sends_not_stored_and_unknown_outcomes_stored_pass() {
        let refused = Outcome::Fail("NOT_LEADER_OR_FOLLOWER".into());
        let h = history(vec![(1, send("a"), refused), (1, send("b"), info())], vec![(0, vec![(0, "b")])]);
        assert!(check(&h).is_empty());
    }
}
