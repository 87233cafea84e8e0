//! Replicas agree (white-box): every replica of a partition holds byte-identical entries —
//! same log index, same first offset, same bytes — for everything below both replicas' high
//! watermarks and at or above where both logs start (each replica purges its own log below its
//! log start offset, at its own pace). Also covers "per-node final reads agree": no two nodes
//! can serve different committed data. And every replica still holds the entry with its log
//! start offset and everything after it (`replica-lost-retained`): purging never deletes
//! records that are still served.

use std::collections::BTreeMap;

use bytes::Bytes;

use super::Violation;

/// One replica's committed log, as read from its storage after the run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplicaLog {
    /// Node id.
    pub node: u64,
    /// Raft group of the partition.
    pub group: u64,
    /// The replica's high watermark.
    pub high_watermark: u64,
    /// The replica's log start offset.
    pub log_start: u64,
    /// Data entries: (log index, first offset, body), in log order.
    pub entries: Vec<(u64, u64, Bytes)>,
}

/// Checks `logs` (any number of replicas of any number of groups).
pub fn check(logs: &[ReplicaLog]) -> Vec<Violation> {
    let mut by_group: BTreeMap<u64, Vec<&ReplicaLog>> = BTreeMap::new();
    for l in logs {
        by_group.entry(l.group).or_default().push(l);
    }
    let mut out = Vec::new();
    for l in logs {
        // The first stored entry must hold the log start offset (or start at it).
        let first_base = l.entries.first().map(|(_, base, _)| *base);
        if l.log_start < l.high_watermark && first_base.is_none_or(|b| b > l.log_start) {
            out.push(Violation {
                checker: "replica-lost-retained",
                detail: format!(
                    "group {}: node {} serves from log start offset {} but its log starts at {}",
                    l.group,
                    l.node,
                    l.log_start,
                    first_base.map_or("nothing".to_string(), |b| format!("offset {b}"))
                ),
            });
        }
    }
    for (group, replicas) in by_group {
        let Some(first) = replicas.first() else { continue };
        for other in &replicas[1..] {
            let bound = first.high_watermark.min(other.high_watermark);
            // Where a replica's log starts: its first entry, or (holding none) its high
            // watermark — everything below was purged, which `replica-lost-retained` checks.
            let start_of = |l: &ReplicaLog| l.entries.first().map_or(l.high_watermark, |(_, base, _)| *base);
            let from = start_of(first).max(start_of(other));
            let kept = |base: u64| base >= from && base < bound;
            let a: Vec<_> = first.entries.iter().filter(|(_, base, _)| kept(*base)).collect();
            let b: Vec<_> = other.entries.iter().filter(|(_, base, _)| kept(*base)).collect();
            if a != b {
                let at = a.iter().zip(&b).position(|(x, y)| x != y).unwrap_or(a.len().min(b.len()));
                let describe = |e: Option<&&(u64, u64, Bytes)>| {
                    e.map_or("nothing".to_string(), |(i, base, body)| {
                        format!("index {i} offset {base} ({} bytes)", body.len())
                    })
                };
                out.push(Violation {
                    checker: "replicas-agree",
                    detail: format!(
                        "group {group}: below offset {bound}, node {} has {} where node {} has {}",
                        first.node,
                        describe(a.get(at)),
                        other.node,
                        describe(b.get(at))
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

    fn log(node: u64, hw: u64, entries: &[(u64, u64, &'static str)]) -> ReplicaLog {
        ReplicaLog {
            node,
            group: 7,
            high_watermark: hw,
            log_start: 0,
            entries: entries.iter().map(|(i, b, s)| (*i, *b, Bytes::from_static(s.as_bytes()))).collect(),
        }
    }

    #[test]
    fn divergent_committed_entries_are_caught() {
        let a = log(1, 3, &[(1, 0, "x"), (2, 2, "y")]);
        let b = log(2, 3, &[(1, 0, "x"), (2, 2, "z")]);
        assert_eq!(check(&[a, b]).len(), 1);
    }

    #[test]
    fn shifted_offsets_are_caught() {
        let a = log(1, 4, &[(1, 0, "x"), (2, 2, "y")]);
        let b = log(2, 4, &[(1, 0, "x"), (2, 3, "y")]);
        assert_eq!(check(&[a, b]).len(), 1);
    }

    #[test]
    fn logs_purged_to_different_points_are_compared_where_both_hold_entries() {
        let a = ReplicaLog { log_start: 2, ..log(1, 4, &[(2, 2, "y"), (3, 3, "z")]) };
        let b = ReplicaLog { log_start: 3, ..log(2, 4, &[(3, 3, "z")]) };
        assert!(check(&[a.clone(), b.clone()]).is_empty());
        let c = ReplicaLog { log_start: 3, ..log(3, 4, &[(3, 3, "w")]) };
        assert_eq!(check(&[a, c]).len(), 1);
    }

    #[test]
    fn a_replica_that_purged_everything_below_its_high_watermark_agrees() {
        let a = ReplicaLog { log_start: 66, ..log(1, 66, &[(79, 65, "last")]) };
        let b = ReplicaLog { log_start: 66, ..log(2, 66, &[]) };
        assert!(check(&[a, b]).is_empty());
    }

    #[test]
    fn a_replica_that_purged_records_it_still_serves_is_caught() {
        let a = ReplicaLog { log_start: 1, ..log(1, 4, &[(3, 3, "z")]) };
        let v = check(&[a]);
        assert_eq!(v.len(), 1);
        assert_eq!(v[0].checker, "replica-lost-retained");
        let b = ReplicaLog { log_start: 3, ..log(1, 4, &[(3, 3, "z")]) };
        assert!(check(&[b]).is_empty());
    }

    #[test]
    fn differences_above_the_lower_high_watermark_are_allowed() {
        let a = log(1, 2, &[(1, 0, "x"), (2, 2, "uncommitted")]);
        let b = log(2, 5, &[(1, 0, "x"), (2, 2, "y")]);
        assert!(check(&[a, b]).is_empty());
    }
}
