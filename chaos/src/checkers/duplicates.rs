//! Duplicates: one value at two offsets (a send stored twice).

use std::collections::BTreeMap;

use super::Violation;
use crate::history::History;

/// Checks `history`.
pub fn check(history: &History) -> Vec<Violation> {
    let mut offsets: BTreeMap<(u32, &str), std::collections::BTreeSet<u64>> = BTreeMap::new();
    let observations = history.observations();
    for (p, o, v, _) in &observations {
        offsets.entry((*p, v)).or_default().insert(*o);
    }
    offsets
        .into_iter()
        .filter(|(_, os)| os.len() > 1)
        .map(|((p, v), os)| Violation { checker: "duplicate", detail: format!("value {v:?} is stored at {p}/{os:?}") })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::build::*;

    #[test]
    fn one_value_at_two_offsets_is_caught() {
        let h = history(vec![(1, send("a"), info())], vec![(0, vec![(0, "a"), (1, "a")])]);
        assert_eq!(check(&h).len(), 1);
    }

    #[test]
    fn distinct_values_pass() {
        let h = history(vec![], vec![(0, vec![(0, "a"), (1, "b")])]);
        assert!(check(&h).is_empty());
    }
}
