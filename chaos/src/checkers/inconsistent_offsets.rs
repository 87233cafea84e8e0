//! Inconsistent offsets: two different values observed at one offset of one partition (by any
//! poll, the final read, or — when acknowledgements promise offsets — an acknowledgement).

use std::collections::BTreeMap;

use super::Violation;
use crate::history::History;

/// Checks `history`.
pub fn check(history: &History) -> Vec<Violation> {
    let mut seen: BTreeMap<(u32, u64), BTreeMap<&str, String>> = BTreeMap::new();
    let observations = history.observations();
    for (p, o, v, source) in &observations {
        seen.entry((*p, *o)).or_default().entry(v).or_insert_with(|| source.clone());
    }
    seen.into_iter()
        .filter(|(_, values)| values.len() > 1)
        .map(|((p, o), values)| Violation {
            checker: "inconsistent-offsets",
            detail: format!(
                "{p}/{o} holds {}",
                values.iter().map(|(v, src)| format!("{v:?} (seen by {src})")).collect::<Vec<_>>().join(" and ")
            ),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::build::*;

    #[test]
    fn two_values_at_one_offset_are_caught() {
        let h = history(vec![(1, send("a"), ok(0)), (2, poll(0), read(&[(0, "b")]))], vec![]);
        let v = check(&h);
        assert_eq!(v.len(), 1);
        assert!(v[0].detail.contains("\"a\"") && v[0].detail.contains("\"b\""));
    }

    #[test]
    fn the_same_value_seen_many_times_is_fine() {
        let h = history(vec![(1, send("a"), ok(0)), (2, poll(0), read(&[(0, "a")]))], vec![(0, vec![(0, "a")])]);
        assert!(check(&h).is_empty());
    }

    #[test]
    fn acks_that_promise_nothing_are_not_observations() {
        let mut h = history(vec![(1, send("a"), ok(0)), (2, poll(0), read(&[(0, "b")]))], vec![]);
        h.acks_promise_offsets = false;
        assert!(check(&h).is_empty());
    }
}
