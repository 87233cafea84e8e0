//! Exactly-once consume-transform-produce (the `exactly_once` scenario): processors read an
//! input topic as a consumer group and write one output record per input record, committing the
//! group's offsets in the output's transaction (KIP-447). Checked after healing, with every
//! transaction decided and the group's committed offsets at the end of the input:
//!
//! * `exactly-once-missing`: an input record with no output in the final `read_committed` read
//!   of the output (its offsets committed while its output did not: an aborted transaction's
//!   offsets counted, or a commit of offsets without the output);
//! * `exactly-once-duplicate`: an input record with more than one output (its output committed
//!   twice: the offsets of a committed transaction lost, or a zombie committing);
//! * `exactly-once-phantom`: an output for no input record.

use std::collections::{BTreeMap, BTreeSet};

use super::Violation;

/// The output value a processor writes for `input`.
pub fn output_of(input: &str) -> String {
    format!("out:{input}")
}

/// Checks the final read of the input (`inputs`: every record of the input topic) against the
/// final `read_committed` read of the output (`outputs`).
pub fn check(inputs: &[String], outputs: &[String]) -> Vec<Violation> {
    let expected: BTreeSet<String> = inputs.iter().map(|i| output_of(i)).collect();
    let mut seen: BTreeMap<&str, usize> = BTreeMap::new();
    for o in outputs {
        *seen.entry(o.as_str()).or_default() += 1;
    }
    let mut out = Vec::new();
    let missing: Vec<&String> = expected.iter().filter(|e| !seen.contains_key(e.as_str())).collect();
    if !missing.is_empty() {
        out.push(Violation {
            checker: "exactly-once-missing",
            detail: format!(
                "{} input record(s) have no committed output, first {:?}",
                missing.len(),
                &missing[..missing.len().min(5)]
            ),
        });
    }
    let twice: Vec<(&str, usize)> = seen.iter().filter(|(_, n)| **n > 1).map(|(v, n)| (*v, *n)).collect();
    if !twice.is_empty() {
        out.push(Violation {
            checker: "exactly-once-duplicate",
            detail: format!(
                "{} output(s) committed more than once, first {:?}",
                twice.len(),
                &twice[..twice.len().min(5)]
            ),
        });
    }
    let phantom: Vec<&str> = seen.keys().filter(|o| !expected.contains(**o)).copied().collect();
    if !phantom.is_empty() {
        out.push(Violation {
            checker: "exactly-once-phantom",
            detail: format!("{} output(s) for no input, first {:?}", phantom.len(), &phantom[..phantom.len().min(5)]),
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &[&str]) -> Vec<String> {
        s.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn each_input_once_passes_and_every_deviation_is_named() {
        let inputs = v(&["a", "b"]);
        assert!(check(&inputs, &v(&["out:b", "out:a"])).is_empty());
        let found = check(&inputs, &v(&["out:a", "out:a", "out:z"]));
        let names: Vec<&str> = found.iter().map(|f| f.checker).collect();
        assert_eq!(names, ["exactly-once-missing", "exactly-once-duplicate", "exactly-once-phantom"]);
    }
}
