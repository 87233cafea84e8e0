//! Compaction keeps what it must (client-visible, plus the final cleaning point as an oracle):
//! on a compacted topic, a record known to have been committed — acknowledged at an offset
//! (when acknowledgements promise offsets) or returned by a poll — is missing from the final
//! read only where compaction was allowed to remove it.
//!
//! With `(clean_to, tombstones_before)` the highest cleaning point any replica applied once the
//! final reads were done (points only move forward, so whatever the final reads saw was
//! compacted to at most it), a known record `r` of key `k` at offset `o` (at or after the final
//! read's start; below it, records were deleted) that the final read lacks is allowed only when
//! `o < clean_to` and one of
//!
//! 1. a record of `k` is known at an offset in `(o, clean_to)` — acknowledged there, read there
//!    by a poll, or held there by the final read: a newer record of the same key below the
//!    point superseded `r` (whether that one may have gone too is checked on its own);
//! 2. `r` is a tombstone below `tombstones_before` (it goes once it is its key's newest record
//!    below the point, and if it is not, case 1 or 3 covers it);
//! 3. a tombstone of `k` that the final read lacks could lie in `(o, tombstones_before)`: its
//!    offset is known and in that range, or unknown (its send's outcome is unknown and no poll
//!    saw it — it may have landed late, after `r`). A superseded record's successor may itself
//!    be superseded, but the chain ends at its key's newest record below the point, which is
//!    present unless it is a removed tombstone; an unseen record of unknown outcome therefore
//!    never justifies a removal unless a tombstone ends its chain.
//!
//! Everything else is `compaction-lost`: a record at or above `clean_to`, a keyless record, or
//! a record whose key has no newer record below the point to supersede it — in particular, each
//! key's newest record below `clean_to` must be present unless it is a tombstone below
//! `tombstones_before`. Case 3's unknown offsets are the one leniency: a record lost while a
//! tombstone of its key with an unknown outcome was in flight goes unnoticed here (the
//! white-box [`super::replicas_agree`] still compares replicas modulo compaction).
//!
//! That offsets never shift is [`super::lost_write`]'s job (a value at another offset than
//! acknowledged), and two values at one offset [`super::inconsistent_offsets`]'.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use super::Violation;
use crate::history::{History, Outcome};

/// Checks `history` (nothing to check unless the topic is compacted).
pub fn check(history: &History) -> Vec<Violation> {
    if !history.compacted {
        return Vec::new();
    }
    let mut out = Vec::new();
    // Every send: id → (key, tombstone, whether it definitely failed).
    let mut sends: HashMap<&str, (Option<&str>, bool, bool)> = HashMap::new();
    for (op, _, id, key, tombstone) in history.sends() {
        sends.insert(id, (key, tombstone, matches!(op.outcome, Outcome::Fail(_))));
    }
    // Records known to be committed at an offset: (partition, id) → offsets, with the source.
    let mut known: BTreeMap<(u32, &str), BTreeMap<u64, String>> = BTreeMap::new();
    if history.acks_promise_offsets {
        for (process, p, id, o) in history.acked_sends() {
            known.entry((p, id)).or_default().entry(o).or_insert_with(|| format!("acknowledged to process {process}"));
        }
    }
    for (process, p, _, records) in history.polls() {
        for (o, id) in records {
            known
                .entry((p, id.as_str()))
                .or_default()
                .entry(*o)
                .or_insert_with(|| format!("read by process {process}"));
        }
    }
    for (p, records) in &history.final_reads {
        let p = *p;
        let start = history.final_starts.get(&p).copied().unwrap_or(0);
        let (clean_to, tombstones_before) = history.cleaning_point(p);
        let present: HashSet<&str> = records.iter().map(|(_, id)| id.as_str()).collect();
        // Where each key is known to have had a committed record.
        let mut known_by_key: HashMap<&str, BTreeSet<u64>> = HashMap::new();
        let final_read = records.iter().map(|(o, id)| (id.as_str(), *o));
        let elsewhere = known.range((p, "")..).take_while(|((kp, _), _)| *kp == p);
        for (id, o) in final_read.chain(elsewhere.flat_map(|((_, id), at)| at.keys().map(move |o| (*id, *o)))) {
            if let Some((Some(k), _, _)) = sends.get(id) {
                known_by_key.entry(k).or_default().insert(o);
            }
        }
        // Tombstones the final read lacks, by key: their known offsets, and whether one of
        // unknown offset may have landed anywhere.
        let mut removed_tombstones: HashMap<&str, (BTreeSet<u64>, bool)> = HashMap::new();
        for (op, sp, id, key, tombstone) in history.sends() {
            if sp != p || !tombstone || present.contains(id) {
                continue;
            }
            let Some(k) = key else { continue };
            let entry = removed_tombstones.entry(k).or_default();
            match known.get(&(p, id)) {
                Some(offsets) => entry.0.extend(offsets.keys()),
                None if !matches!(op.outcome, Outcome::Fail(_)) => entry.1 = true,
                None => {}
            }
        }
        for ((kp, id), offsets) in known.range((p, "")..) {
            if *kp != p {
                break;
            }
            if present.contains(id) {
                continue;
            }
            for (&o, source) in offsets {
                if o < start {
                    continue;
                }
                let (key, tombstone) = match sends.get(id) {
                    Some((key, tombstone, _)) => (*key, *tombstone),
                    None => (None, false),
                };
                let allowed = o < clean_to
                    && key.is_some_and(|k| {
                        let superseded = known_by_key.get(k).is_some_and(|s| s.range(o + 1..clean_to).next().is_some());
                        let expired = tombstone && o < tombstones_before;
                        let tombstoned = removed_tombstones
                            .get(k)
                            .is_some_and(|(at, unknown)| *unknown || any_in(at, o + 1, tombstones_before));
                        superseded || expired || tombstoned
                    });
                if !allowed {
                    let what = if tombstone { "tombstone" } else { "record" };
                    let why = match key {
                        _ if o >= clean_to => format!("at or above the cleaning point {clean_to}"),
                        None => "keyless".to_string(),
                        Some(k) => format!(
                            "key {k:?} has no newer record below the cleaning point {clean_to} and no tombstone below {tombstones_before} that could remove it"
                        ),
                    };
                    out.push(Violation {
                        checker: "compaction-lost",
                        detail: format!("{what} {id:?} at {p}/{o} ({source}) is missing from the final read: {why}"),
                    });
                }
            }
        }
    }
    out
}

/// Whether `set` holds an offset in `from..to` (none when the range is empty).
fn any_in(set: &BTreeSet<u64>, from: u64, to: u64) -> bool {
    from < to && set.range(from..to).next().is_some()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::build::*;
    use crate::history::Outcome;

    fn compacted(mut h: History, clean_to: u64, tombstones_before: u64) -> History {
        h.compacted = true;
        h.cleaning.insert(0, (clean_to, tombstones_before));
        h
    }

    #[test]
    fn a_record_superseded_below_the_point_may_go() {
        let h = history(
            vec![(1, send_keyed("a", "k"), ok(0)), (1, send_keyed("b", "j"), ok(1)), (1, send_keyed("c", "k"), ok(2))],
            vec![(0, vec![(1, "b"), (2, "c")])],
        );
        assert!(check(&compacted(h.clone(), 3, 0)).is_empty());
        let v = check(&compacted(h, 2, 0));
        assert_eq!(v.len(), 1, "the newer record of k is at the point, not below it: {v:?}");
        assert!(v[0].detail.contains("\"a\""));
    }

    #[test]
    fn a_keys_newest_record_below_the_point_must_stay() {
        let h = history(
            vec![(1, send_keyed("a", "k"), ok(0)), (1, send_keyed("b", "k"), ok(1)), (1, send_keyed("c", "j"), ok(2))],
            vec![(0, vec![(2, "c")])],
        );
        let v = check(&compacted(h, 3, 3));
        assert_eq!(v.len(), 1, "b is k's newest record and no tombstone: {v:?}");
        assert!(v[0].detail.contains("\"b\"") && v[0].checker == "compaction-lost");
    }

    #[test]
    fn nothing_at_or_above_the_point_may_go_even_if_superseded() {
        let h = history(
            vec![(1, send_keyed("a", "k"), ok(0)), (1, send_keyed("b", "k"), ok(1)), (1, send_keyed("c", "k"), ok(2))],
            vec![(0, vec![(2, "c")])],
        );
        let v = check(&compacted(h, 1, 0));
        assert_eq!(v.len(), 2, "b at 1 is at the point, so a at 0 was k's newest below it: {v:?}");
        assert!(v[0].detail.contains("\"a\"") && v[0].detail.contains("no newer record"));
        assert!(v[1].detail.contains("\"b\"") && v[1].detail.contains("at or above"));
    }

    #[test]
    fn a_record_only_a_poll_saw_supersedes_too() {
        let h = history(
            vec![
                (1, send_keyed("a", "k"), ok(0)),
                (1, send_keyed("b", "k"), info()),
                (2, poll(1), read(&[(1, "b")])),
                (1, send_keyed("d", "k"), ok(2)),
            ],
            vec![(0, vec![(2, "d")])],
        );
        assert!(check(&compacted(h.clone(), 3, 0)).is_empty(), "b superseded a, d superseded b");
        let v = check(&compacted(h, 2, 0));
        assert_eq!(v.len(), 1, "d is not below the point; b is k's newest record below it: {v:?}");
        assert!(v[0].detail.contains("\"b\"") && v[0].detail.contains("read by process 2"));
    }

    #[test]
    fn records_seen_by_polls_count_too() {
        let h = history(vec![(1, send_keyed("a", "k"), info()), (2, poll(0), read(&[(0, "a")]))], vec![(0, vec![])]);
        let v = check(&compacted(h, 1, 1));
        assert_eq!(v.len(), 1, "a was read at 0, is k's newest record, and is gone: {v:?}");
        assert!(v[0].detail.contains("read by process 2"));
    }

    #[test]
    fn a_tombstone_goes_only_below_tombstones_before() {
        let ops = vec![(1, send_keyed("a", "k"), ok(0)), (1, send_tombstone("t", "k"), ok(1))];
        let h = history(ops, vec![(0, vec![])]);
        assert!(check(&compacted(h.clone(), 2, 2)).is_empty(), "a superseded, t expired");
        let v = check(&compacted(h, 2, 1));
        assert_eq!(v.len(), 1, "t is not below tombstones_before: {v:?}");
        assert!(v[0].detail.contains("tombstone \"t\""));
    }

    #[test]
    fn a_tombstone_of_unknown_outcome_may_have_removed_its_key() {
        let ops = vec![(1, send_keyed("a", "k"), ok(0)), (2, send_tombstone("t", "k"), info())];
        assert!(check(&compacted(history(ops, vec![(0, vec![])]), 2, 2)).is_empty());
        let failed = vec![
            (1, send_keyed("a", "k"), ok(0)),
            (2, send_tombstone("t", "k"), Outcome::Fail("NOT_LEADER_OR_FOLLOWER".into())),
        ];
        assert_eq!(check(&compacted(history(failed, vec![(0, vec![])]), 2, 2)).len(), 1, "a failed send wrote nothing");
        let other_key = vec![(1, send_keyed("a", "k"), ok(0)), (2, send_tombstone("t", "j"), info())];
        assert_eq!(check(&compacted(history(other_key, vec![(0, vec![])]), 2, 2)).len(), 1);
    }

    #[test]
    fn a_tombstone_at_a_known_offset_removes_only_older_records() {
        let ops = vec![
            (1, send_tombstone("t", "k"), ok(0)),
            (1, send_keyed("a", "k"), ok(1)),
            (1, send_keyed("b", "j"), ok(2)),
        ];
        let v = check(&compacted(history(ops, vec![(0, vec![(2, "b")])]), 3, 3));
        assert_eq!(v.len(), 1, "a is newer than t and k's newest: {v:?}");
        assert!(v[0].detail.contains("\"a\""));
    }

    #[test]
    fn records_below_the_final_reads_start_were_deleted_and_uncompacted_topics_are_skipped() {
        let mut h = history(vec![(1, send_keyed("a", "k"), ok(0))], vec![(0, vec![])]);
        h.final_starts.insert(0, 1);
        assert!(check(&compacted(h.clone(), 0, 0)).is_empty());
        h.final_starts.insert(0, 0);
        assert_eq!(check(&compacted(h.clone(), 0, 0)).len(), 1);
        assert!(check(&h).is_empty(), "not compacted: lost_write's business");
    }
}
