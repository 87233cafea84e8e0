//! Replicas agree (white-box): every replica of a partition holds byte-identical entries —
//! same log index, same first offset, same bytes — for everything below both replicas' high
//! watermarks and at or above where both logs start (each replica purges its own log below its
//! log start offset, at its own pace). Also covers "per-node final reads agree": no two nodes
//! can serve different committed data. And every replica still holds the entry with its log
//! start offset and everything after it (`replica-lost-retained`): purging never deletes
//! records that are still served.
//!
//! **Compacted topics.** Each replica rewrites its own entries below its applied cleaning
//! point (and its snapshot), at its own pace, so two replicas' bytes differ until both
//! compacted to the same point. Compaction is confluent — compacting in steps ends where
//! compacting once to the last step's point does, [`rill_broker::compaction::compact_log`] —
//! so the replicas are compared after compacting both to one point: the higher of their two
//! applied points `(clean_to, tombstones_before)`, `P`. That is sound only if both logs hold
//! every entry below `P`, since whether a record goes depends on newer records of its key below
//! `P`:
//!
//! * the replica that applied `P` holds them all (`P` is at most the offset where its compact
//!   entry sits, and a replica applies an entry only after every earlier one);
//! * the other holds them up to its high watermark. When that is below `P`, its log is
//!   completed with the first replica's entries from its high watermark up to `P` — committed
//!   entries, which the second replica would hold byte for byte (modulo compaction) once it
//!   caught up. Those borrowed entries are not compared themselves (they lie above the second
//!   replica's high watermark); they only decide what compaction removes below it.
//!
//! Then, as for every topic, entries below both high watermarks and at or above where both logs
//! start must be byte-identical. A replica that removed a record no newer record of its key
//! below `P` supersedes (compaction above its point, above the high watermark, or a lost
//! record) differs from the other after both are compacted to `P`, and is caught.

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
    /// Compacted topics: the replica's applied cleaning point `(clean_to, tombstones_before)`.
    pub cleaning: Option<(u64, u64)>,
}

type Entries = Vec<(u64, u64, Bytes)>;

/// The entries of replicas `a` and `b` to compare: as stored, or — compacted topics — both
/// compacted to the higher of their cleaning points (see the module doc).
fn comparable(a: &ReplicaLog, b: &ReplicaLog) -> Result<(Entries, Entries), String> {
    if a.cleaning.is_none() && b.cleaning.is_none() {
        return Ok((a.entries.clone(), b.entries.clone()));
    }
    let a_first = a.cleaning.unwrap_or_default() >= b.cleaning.unwrap_or_default();
    let (hi, lo) = if a_first { (a, b) } else { (b, a) };
    let (clean_to, tombstones_before) = hi.cleaning.unwrap_or_default();
    let mut lo_view: Entries = lo.entries.clone();
    if lo.high_watermark < clean_to {
        lo_view.retain(|(_, base, _)| *base < lo.high_watermark);
        lo_view.extend(hi.entries.iter().filter(|(_, base, _)| (lo.high_watermark..clean_to).contains(base)).cloned());
    }
    let compact = |entries: &Entries| -> Result<Entries, String> {
        let positioned: Vec<(u64, Bytes)> = entries.iter().map(|(_, base, body)| (*base, body.clone())).collect();
        let bodies = rill_broker::compaction::compact_log(&positioned, clean_to, tombstones_before)?;
        Ok(entries.iter().zip(bodies).map(|((index, base, _), body)| (*index, *base, body)).collect())
    };
    let what = |l: &ReplicaLog| format!("node {} group {}", l.node, l.group);
    let hi_compacted = compact(&hi.entries).map_err(|e| format!("{}: {e}", what(hi)))?;
    let lo_compacted = compact(&lo_view).map_err(|e| format!("{}: {e}", what(lo)))?;
    Ok(if a_first { (hi_compacted, lo_compacted) } else { (lo_compacted, hi_compacted) })
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
            let (first_entries, other_entries) = match comparable(first, other) {
                Ok(e) => e,
                Err(e) => {
                    out.push(Violation { checker: "replicas-agree", detail: format!("cannot compact a log: {e}") });
                    continue;
                }
            };
            let a: Vec<_> = first_entries.iter().filter(|(_, base, _)| kept(*base)).collect();
            let b: Vec<_> = other_entries.iter().filter(|(_, base, _)| kept(*base)).collect();
            if a != b {
                let at = a.iter().zip(&b).position(|(x, y)| x != y).unwrap_or(a.len().min(b.len()));
                let describe = |e: Option<&&(u64, u64, Bytes)>| {
                    e.map_or("nothing".to_string(), |(i, base, body)| {
                        format!("index {i} offset {base} ({} bytes{})", body.len(), records(*base, body))
                    })
                };
                let point = |l: &ReplicaLog| l.cleaning.map_or(String::new(), |c| format!(" (cleaning point {c:?})"));
                out.push(Violation {
                    checker: "replicas-agree",
                    detail: format!(
                        "group {group}: below offset {bound}, node {}{} has {} where node {}{} has {}",
                        first.node,
                        point(first),
                        describe(a.get(at)),
                        other.node,
                        point(other),
                        describe(b.get(at))
                    ),
                });
            }
        }
    }
    out
}

/// The records of an append entry at `base`, as `; offset key=… id=…` (nothing for other
/// entries or undecodable ones): what a difference between replicas is about.
fn records(base: u64, body: &Bytes) -> String {
    let Ok(batches) = rill_broker::command::decode_append(body.clone()) else { return String::new() };
    let text = |b: &Option<Bytes>| b.as_deref().map_or("null".to_string(), |b| String::from_utf8_lossy(b).into_owned());
    let mut out = Vec::new();
    let mut batch_base = base;
    for data in batches {
        let Ok(batch) = rill_records::decode(&data, rill_records::MAX_DECOMPRESSED_BATCH_BYTES) else { break };
        for r in &batch.records {
            let id = r.headers.iter().find(|h| &h.key[..] == b"id").map_or_else(|| text(&r.value), |h| text(&h.value));
            let tombstone = if r.value.is_none() { " tombstone" } else { "" };
            out.push(format!("{} key={} id={id}{tombstone}", batch_base + r.offset_delta as u64, text(&r.key)));
        }
        batch_base += batch.info.span();
    }
    if out.is_empty() {
        String::new()
    } else {
        format!("; {}", out.join(", "))
    }
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
            cleaning: None,
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

    /// An append entry of single-record batches of key `k` (`None`: a tombstone).
    fn append(records: &[(&'static str, Option<&'static str>)]) -> Bytes {
        let batches: Vec<Bytes> = records
            .iter()
            .map(|(k, v)| {
                let mut b = rill_records::BatchBuilder::new(rill_records::Compression::None);
                b.push(rill_records::Record {
                    key: Some(Bytes::from_static(k.as_bytes())),
                    value: v.map(|v| Bytes::from_static(v.as_bytes())),
                    ..rill_records::Record::default()
                })
                .unwrap();
                b.build().unwrap()
            })
            .collect();
        rill_broker::command::encode_append(1, &batches)
    }

    /// A compacted replica holding `entries` (index i+1 at offset i, one record each).
    fn compacted(node: u64, hw: u64, point: (u64, u64), entries: Vec<Bytes>) -> ReplicaLog {
        let entries = entries.into_iter().enumerate().map(|(i, body)| (i as u64 + 1, i as u64, body)).collect();
        ReplicaLog { node, group: 7, high_watermark: hw, log_start: 0, entries, cleaning: Some(point) }
    }

    fn keyed_log() -> Vec<Bytes> {
        vec![
            append(&[("k", Some("a"))]),
            append(&[("j", Some("b"))]),
            append(&[("k", Some("c"))]),
            append(&[("k", None)]),
        ]
    }

    /// `log` compacted to `point` as a replica's compaction would leave it.
    fn compacted_to(log: &[Bytes], point: (u64, u64)) -> Vec<Bytes> {
        let positioned: Vec<(u64, Bytes)> = log.iter().cloned().enumerate().map(|(i, b)| (i as u64, b)).collect();
        rill_broker::compaction::compact_log(&positioned, point.0, point.1).unwrap()
    }

    #[test]
    fn compacted_replicas_agree_once_compacted_to_the_higher_point() {
        let log = keyed_log();
        let a = compacted(1, 4, (3, 0), compacted_to(&log, (3, 0)));
        let b = compacted(2, 4, (0, 0), log.clone());
        assert_ne!(a.entries, b.entries, "a removed k's a at 0");
        assert!(check(&[a, b]).is_empty());
        let c = compacted(3, 4, (4, 3), compacted_to(&log, (4, 3)));
        let d = compacted(4, 4, (4, 3), compacted_to(&compacted_to(&log, (3, 0)), (4, 3)));
        assert!(check(&[c, d]).is_empty(), "compacting in steps ends where compacting once does");
    }

    #[test]
    fn a_replica_that_compacted_past_its_point_is_caught() {
        let log = keyed_log();
        // Compacted to 4 (its point is 2): a at 0 and c at 2 went, superseded only at 2 and 3.
        let a = compacted(1, 4, (2, 0), compacted_to(&log, (4, 0)));
        let b = compacted(2, 4, (2, 0), log.clone());
        let v = check(&[a, b]);
        assert_eq!(v.len(), 1, "{v:?}");
        assert_eq!(v[0].checker, "replicas-agree");
    }

    #[test]
    fn a_replica_behind_the_point_is_completed_with_committed_entries() {
        let log = keyed_log();
        // a applied point 3 and compacted to it; b's high watermark is 2 and it lacks c at 2,
        // which superseded a at 0: compared with a's entry at 2 borrowed, they agree.
        let a = compacted(1, 4, (3, 0), compacted_to(&log, (3, 0)));
        let b = compacted(2, 2, (0, 0), log[..2].to_vec());
        assert!(check(&[a.clone(), b]).is_empty());
        let other = compacted(3, 2, (0, 0), vec![append(&[("m", Some("x"))]), log[1].clone()]);
        assert_eq!(check(&[a, other]).len(), 1, "a different record at 0 is still caught");
    }

    #[test]
    fn differences_above_the_lower_high_watermark_are_allowed() {
        let a = log(1, 2, &[(1, 0, "x"), (2, 2, "uncommitted")]);
        let b = log(2, 5, &[(1, 0, "x"), (2, 2, "y")]);
        assert!(check(&[a, b]).is_empty());
    }
}
