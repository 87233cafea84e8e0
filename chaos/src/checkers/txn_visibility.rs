//! Transactions as `read_committed` readers see them (the `transactions` scenario).
//!
//! Each transaction's records carry unique values; the producers log each transaction's
//! records and how it ended as the client saw it ([`TxnOutcome`]). Checked against what
//! `read_committed` readers returned — live during the faults and in a final read after
//! healing:
//!
//! * `aborted-read` (G1a): no record of a transaction that was aborted, or never asked to
//!   commit (its producer crashed or gave up), is ever returned;
//! * `lost-committed-write`: every record of a transaction whose commit succeeded is in the
//!   final read;
//! * `torn-transaction`: a transaction whose commit's outcome is unknown is visible whole or
//!   not at all;
//! * `read-committed-duplicate`: no record is returned twice by one read;
//! * `lso-above-hw` ([`lso_above_hw`]): no replica's last stable offset exceeds its high
//!   watermark.

use std::collections::{BTreeMap, HashMap, HashSet};

use super::Violation;

/// How a transaction ended, as its producer saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TxnOutcome {
    /// `commit_transaction` succeeded: every record must be visible.
    Committed,
    /// `abort_transaction` succeeded, or the transaction was never asked to commit (the
    /// producer crashed or moved on): no record may ever be visible.
    Aborted,
    /// The commit (or abort) failed without saying whether it took effect: all or nothing.
    Unknown,
}

/// One transaction of one producer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxnLog {
    /// Which producer, and its n-th transaction.
    pub producer: usize,
    /// See `producer`.
    pub n: u64,
    /// The values of the records sent in it.
    pub values: Vec<String>,
    /// How it ended.
    pub outcome: TxnOutcome,
}

/// Checks `txns` against `live` (every value a read_committed reader returned while faults ran)
/// and `final_read` (one full read_committed read after healing, in the order returned).
pub fn check(txns: &[TxnLog], live: &[String], final_read: &[String]) -> Vec<Violation> {
    let mut out = Vec::new();
    let owner: HashMap<&str, &TxnLog> =
        txns.iter().flat_map(|t| t.values.iter().map(move |v| (v.as_str(), t))).collect();
    let visible: HashSet<&str> = final_read.iter().map(String::as_str).collect();
    let mut seen = HashSet::new();
    for v in final_read {
        if !seen.insert(v.as_str()) {
            out.push(Violation { checker: "read-committed-duplicate", detail: format!("{v} was read twice") });
        }
    }
    for v in live.iter().chain(final_read) {
        if let Some(t) = owner.get(v.as_str()).filter(|t| t.outcome == TxnOutcome::Aborted) {
            out.push(Violation {
                checker: "aborted-read",
                detail: format!(
                    "{v} of producer {}'s transaction {} was read, and that transaction aborted",
                    t.producer, t.n
                ),
            });
        }
    }
    for t in txns {
        let shown: Vec<&String> = t.values.iter().filter(|v| visible.contains(v.as_str())).collect();
        match t.outcome {
            TxnOutcome::Committed if shown.len() < t.values.len() => out.push(Violation {
                checker: "lost-committed-write",
                detail: format!(
                    "producer {}'s transaction {} committed {} record(s); {} visible: {:?}",
                    t.producer,
                    t.n,
                    t.values.len(),
                    shown.len(),
                    t.values
                ),
            }),
            TxnOutcome::Unknown if !shown.is_empty() && shown.len() < t.values.len() => out.push(Violation {
                checker: "torn-transaction",
                detail: format!(
                    "producer {}'s transaction {}: {} of {} record(s) visible: {shown:?}",
                    t.producer,
                    t.n,
                    shown.len(),
                    t.values.len()
                ),
            }),
            _ => {}
        }
    }
    out.dedup();
    out
}

/// One replica's sampled offsets: (node, partition) → (last stable offset, high watermark).
pub type OffsetSample = BTreeMap<(u64, u32), (u64, u64)>;

/// Replicas whose last stable offset is above their high watermark.
pub fn lso_above_hw(sample: &OffsetSample) -> Vec<Violation> {
    sample
        .iter()
        .filter(|(_, (lso, hw))| lso > hw)
        .map(|((node, p), (lso, hw))| Violation {
            checker: "lso-above-hw",
            detail: format!("node {node} partition {p}: last stable offset {lso} above the high watermark {hw}"),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn txn(producer: usize, n: u64, values: &[&str], outcome: TxnOutcome) -> TxnLog {
        TxnLog { producer, n, values: values.iter().map(|v| v.to_string()).collect(), outcome }
    }

    fn names(v: &[Violation]) -> Vec<&'static str> {
        v.iter().map(|v| v.checker).collect()
    }

    #[test]
    fn a_consistent_history_passes() {
        let txns = [
            txn(0, 0, &["a", "b"], TxnOutcome::Committed),
            txn(0, 1, &["c"], TxnOutcome::Aborted),
            txn(1, 0, &["d", "e"], TxnOutcome::Unknown),
            txn(1, 1, &["f"], TxnOutcome::Unknown),
        ];
        let final_read: Vec<String> = ["a", "d", "b", "e"].iter().map(|s| s.to_string()).collect();
        assert!(check(&txns, &["a".into()], &final_read).is_empty());
    }

    #[test]
    fn each_broken_guarantee_is_named() {
        let txns = [
            txn(0, 0, &["a", "b"], TxnOutcome::Committed),
            txn(0, 1, &["c"], TxnOutcome::Aborted),
            txn(1, 0, &["d", "e"], TxnOutcome::Unknown),
        ];
        let read = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(names(&check(&txns, &read(&["c"]), &read(&["a", "b"]))), vec!["aborted-read"]);
        assert_eq!(names(&check(&txns, &[], &read(&["a"]))), vec!["lost-committed-write"]);
        assert_eq!(names(&check(&txns, &[], &read(&["a", "b", "d"]))), vec!["torn-transaction"]);
        assert_eq!(names(&check(&txns, &[], &read(&["a", "b", "b"]))), vec!["read-committed-duplicate"]);
        let mut sample = OffsetSample::new();
        sample.insert((1, 0), (5, 5));
        assert!(lso_above_hw(&sample).is_empty());
        sample.insert((2, 0), (6, 5));
        assert_eq!(names(&lso_above_hw(&sample)), vec!["lso-above-hw"]);
    }
}
