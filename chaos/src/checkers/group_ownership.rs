//! Consumer groups (white-box, from each replica's applied coordinator state): no partition has
//! two owners in any replica's state at any sampled moment (an owner holds it assigned or still
//! revoking, so this is "no two members own a partition in overlapping epochs"), and a
//! partition's committed offset never goes backwards within one incarnation of a replica (no
//! explicit reset exists yet). No member owns a partition of a topic it did not subscribe to,
//! by name or by pattern ([`foreign_assignments`]).
//!
//! Classic groups ([`classic_double_owners`]): no partition is handed to two members of one
//! generation — by the syncs the members were answered (client-visible) or by a stored record.

use std::collections::BTreeMap;

use rill_coordinator::groups::ConsumerGroup;

use super::Violation;

/// Partitions that two members of `group` own at once.
pub fn double_owners(group: &ConsumerGroup) -> Vec<Violation> {
    let mut owner: BTreeMap<(&str, u32), &str> = BTreeMap::new();
    let mut out = Vec::new();
    for m in group.members.values() {
        for set in [&m.assigned, &m.revoking] {
            for (topic, partitions) in set {
                for p in partitions {
                    if let Some(other) = owner.insert((topic, *p), &m.member_id) {
                        if other != m.member_id {
                            out.push(Violation {
                                checker: "double-owner",
                                detail: format!(
                                    "group {:?} epoch {}: {topic}-{p} is owned by {other} and by {} (epoch {}, {})",
                                    group.group_id,
                                    group.epoch,
                                    m.member_id,
                                    m.epoch,
                                    m.state.name()
                                ),
                            });
                        }
                    }
                }
            }
        }
    }
    out
}

/// Partitions of topics other than `topic` that a member of `group` owns: every member
/// subscribes to `topic` alone, by name or by a pattern that matches only its whole name, while
/// other topics exist whose names contain it.
pub fn foreign_assignments(group: &ConsumerGroup, topic: &str) -> Vec<Violation> {
    let mut out = Vec::new();
    for m in group.members.values() {
        for set in [&m.assigned, &m.revoking] {
            for (owned, partitions) in set.iter().filter(|(t, ps)| t.as_str() != topic && !ps.is_empty()) {
                out.push(Violation {
                    checker: "foreign-assignment",
                    detail: format!(
                        "group {:?} epoch {}: {} (subscribed to {:?} by {}) owns {owned} {partitions:?}",
                        group.group_id,
                        group.epoch,
                        m.member_id,
                        topic,
                        if m.subscribed_regex.is_some() { "pattern" } else { "name" },
                    ),
                });
            }
        }
    }
    out
}

/// One classic member's assignment for a generation, as a sync answered it (or a stored record
/// holds it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Handout {
    /// Which member (the scenario's numbering, or its place in a record).
    pub member: usize,
    /// The generation.
    pub generation: i32,
    /// Its partitions of the group's topic.
    pub partitions: Vec<u32>,
}

/// Partitions handed to two members of one generation.
pub fn classic_double_owners(handouts: &[Handout]) -> Vec<Violation> {
    let mut owner: BTreeMap<(i32, u32), usize> = BTreeMap::new();
    let mut out = Vec::new();
    for h in handouts {
        for p in &h.partitions {
            if let Some(other) = owner.insert((h.generation, *p), h.member) {
                if other != h.member {
                    out.push(Violation {
                        checker: "double-owner",
                        detail: format!(
                            "generation {}: partition {p} was handed to member {other} and to member {}",
                            h.generation, h.member
                        ),
                    });
                }
            }
        }
    }
    out
}

/// Committed offsets seen so far, per (node, incarnation, topic, partition).
#[derive(Debug, Default)]
pub struct CommitWatch {
    last: BTreeMap<(u64, u32, String, u32), i64>,
}

impl CommitWatch {
    /// Records node `node`'s (incarnation `incarnation`) applied committed offset of
    /// `topic`/`partition`; a violation if it went backwards.
    pub fn observe(
        &mut self,
        node: u64,
        incarnation: u32,
        topic: &str,
        partition: u32,
        offset: i64,
    ) -> Option<Violation> {
        let key = (node, incarnation, topic.to_string(), partition);
        let before = self.last.insert(key, offset)?;
        (offset < before).then(|| Violation {
            checker: "commit-regressed",
            detail: format!("node {node}: committed offset of {topic}-{partition} went back from {before} to {offset}"),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rill_coordinator::groups::{Member, TopicPartitions};

    fn member(id: &str, assigned: &[u32], revoking: &[u32]) -> Member {
        let set = |ps: &[u32]| -> TopicPartitions { [("t".to_string(), ps.iter().copied().collect())].into() };
        Member { member_id: id.into(), assigned: set(assigned), revoking: set(revoking), ..Default::default() }
    }

    #[test]
    fn a_partition_owned_twice_is_caught_whether_assigned_or_revoking() {
        let mut g = ConsumerGroup { group_id: "g".into(), ..Default::default() };
        g.members.insert("a".into(), member("a", &[0, 1], &[]));
        g.members.insert("b".into(), member("b", &[2], &[]));
        assert!(double_owners(&g).is_empty());
        g.members.insert("c".into(), member("c", &[], &[1]));
        assert_eq!(double_owners(&g).len(), 1);
    }

    #[test]
    fn a_classic_partition_handed_twice_in_one_generation_is_caught() {
        let h =
            |member, generation, partitions: &[u32]| Handout { member, generation, partitions: partitions.to_vec() };
        assert!(classic_double_owners(&[h(0, 1, &[0, 1]), h(1, 1, &[2]), h(1, 2, &[0]), h(0, 1, &[0])]).is_empty());
        assert_eq!(classic_double_owners(&[h(0, 3, &[0, 1]), h(1, 3, &[1, 2])]).len(), 1);
    }

    #[test]
    fn a_commit_going_back_is_caught_within_an_incarnation_only() {
        let mut w = CommitWatch::default();
        assert!(w.observe(1, 1, "t", 0, 5).is_none());
        assert!(w.observe(1, 1, "t", 0, 7).is_none());
        assert!(w.observe(1, 1, "t", 0, 6).is_some());
        assert!(w.observe(1, 2, "t", 0, 3).is_none(), "a restarted replica replays from its snapshot");
    }
}
