//! Consumer groups, client-visible: what the members of one group handed to their application.
//!
//! * **Epoch order** ([`epoch_order`]): a member's epoch is the group epoch of the assignment it
//!   has reconciled to, and a partition moves to a new member only at a later epoch, after the old
//!   owner revoked it or was fenced. So the members that hand out one partition, in the order they
//!   hand it out, carry increasing epochs: a member that hands out a partition at an epoch no
//!   newer than another member already handed it out at was still serving a lease it had lost
//!   (a paused member that missed its fencing, or two owners at once). It takes what `poll`
//!   returned, with the epoch right after it returned: a batch already returned is the
//!   application's, even if the member is fenced while processing it. Members are told apart by
//!   the scenario's numbering; a static member taking its predecessor's place keeps that
//!   member's epoch, so a scenario with static members would have to tell them apart by
//!   instance id.
//! * **At-least-once** ([`skipped`]): every record below the final high watermark was handed out
//!   by some member. Members commit only after their work, so a member that crashes leaves its
//!   unfinished records to the next owner; a record that nobody handed out was skipped by a
//!   commit that ran ahead of the work.
//! * **Lag** ([`lagging`]): once faults heal and producing stops, every committed offset reaches
//!   the high watermark.

use std::collections::{BTreeMap, BTreeSet};

use super::Violation;

/// One record a member handed to its application.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Delivery {
    /// Which member (the scenario's own numbering).
    pub member: usize,
    /// The member's epoch when `poll` returned the record.
    pub epoch: i32,
    /// The record's partition.
    pub partition: u32,
    /// The record's offset.
    pub offset: u64,
}

/// Deliveries, in the order they happened, in which a member handed out a partition at an epoch
/// no newer than another member had already handed it out at.
pub fn epoch_order(deliveries: &[Delivery]) -> Vec<Violation> {
    // Per partition: the newest epoch each member handed it out at.
    let mut newest: BTreeMap<u32, BTreeMap<usize, i32>> = BTreeMap::new();
    let mut out = Vec::new();
    for d in deliveries {
        let seen = newest.entry(d.partition).or_default();
        if let Some((other, epoch)) = seen.iter().find(|(m, e)| **m != d.member && **e >= d.epoch) {
            out.push(Violation {
                checker: "stale-owner",
                detail: format!(
                    "member {} handed out partition {} offset {} at epoch {}, after member {other} had handed the \
                     partition out at epoch {epoch}",
                    d.member, d.partition, d.offset, d.epoch
                ),
            });
        }
        let e = seen.entry(d.member).or_insert(d.epoch);
        *e = (*e).max(d.epoch);
    }
    out
}

/// Offsets below each partition's final high watermark that no member handed out.
pub fn skipped(deliveries: &[Delivery], high_watermarks: &BTreeMap<u32, u64>) -> Vec<Violation> {
    let mut seen: BTreeMap<u32, BTreeSet<u64>> = BTreeMap::new();
    for d in deliveries {
        seen.entry(d.partition).or_default().insert(d.offset);
    }
    let mut out = Vec::new();
    for (partition, hw) in high_watermarks {
        let got = seen.get(partition);
        let missing: Vec<u64> = (0..*hw).filter(|o| !got.is_some_and(|g| g.contains(o))).collect();
        if let (Some(first), Some(last)) = (missing.first(), missing.last()) {
            out.push(Violation {
                checker: "skipped",
                detail: format!(
                    "partition {partition}: {} record(s) below the high watermark {hw} were never handed out \
                     (first {first}, last {last})",
                    missing.len()
                ),
            });
        }
    }
    out
}

/// Partitions whose committed offset did not reach the high watermark after healing.
pub fn lagging(committed: &BTreeMap<u32, i64>, high_watermarks: &BTreeMap<u32, u64>) -> Vec<Violation> {
    high_watermarks
        .iter()
        .filter_map(|(partition, hw)| {
            let at = committed.get(partition).copied();
            (at != i64::try_from(*hw).ok()).then(|| Violation {
                checker: "lag",
                detail: format!(
                    "partition {partition}: committed {} after healing, high watermark {hw}",
                    at.map_or("nothing".to_string(), |o| o.to_string())
                ),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(member: usize, epoch: i32, partition: u32, offset: u64) -> Delivery {
        Delivery { member, epoch, partition, offset }
    }

    #[test]
    fn handing_a_partition_over_at_a_newer_epoch_is_fine() {
        let h = [d(0, 3, 0, 0), d(0, 3, 0, 1), d(1, 5, 0, 1), d(1, 5, 0, 2), d(0, 8, 0, 3)];
        assert!(epoch_order(&h).is_empty());
    }

    #[test]
    fn a_stale_owner_is_caught() {
        // Member 0 was fenced at 3; member 1 took the partition at 5; member 0 wakes and serves it.
        let h = [d(0, 3, 0, 0), d(1, 5, 0, 1), d(0, 3, 0, 1)];
        let v = epoch_order(&h);
        assert_eq!(v.len(), 1);
        assert_eq!(v[0].checker, "stale-owner");
        // Two owners at one epoch.
        assert_eq!(epoch_order(&[d(0, 4, 2, 0), d(1, 4, 2, 0)]).len(), 1);
        // Other partitions are independent.
        assert!(epoch_order(&[d(0, 4, 1, 0), d(1, 4, 2, 0)]).is_empty());
    }

    #[test]
    fn skipped_records_and_lag_are_caught() {
        let hw: BTreeMap<u32, u64> = [(0, 3), (1, 1)].into();
        assert!(skipped(&[d(0, 1, 0, 0), d(0, 1, 0, 1), d(1, 2, 0, 2), d(0, 1, 1, 0)], &hw).is_empty());
        let v = skipped(&[d(0, 1, 0, 0), d(0, 1, 1, 0)], &hw);
        assert_eq!(v.len(), 1);
        assert!(v[0].detail.contains("2 record(s)"), "{}", v[0]);
        let committed: BTreeMap<u32, i64> = [(0, 3), (1, 0)].into();
        assert_eq!(lagging(&committed, &hw).len(), 1);
        assert!(lagging(&[(0, 3), (1, 1)].into(), &hw).is_empty());
    }
}
