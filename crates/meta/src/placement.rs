//! Replica placement.
//!
//! Deterministic (it runs inside `apply` on every node) and balanced: partition `p` of the topic
//! with id `t` on the sorted node list `n` gets replicas `n[(t + p + j) mod |n|]` for
//! `j < rf`. The first replica is the *preferred leader*; rotating the start by partition spreads
//! leaders evenly within a topic, and offsetting by topic id spreads them across topics (a
//! cluster of many single-partition topics does not pile every leader onto node 1).

use crate::state::NodeId;

/// Replica lists for `partitions` partitions with `replication_factor` replicas each, on
/// `nodes` (any order). Requires `1 <= replication_factor <= nodes.len()`.
pub fn place(topic_id: u32, partitions: u32, replication_factor: u32, nodes: &[NodeId]) -> Vec<Vec<NodeId>> {
    let mut sorted = nodes.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    let n = sorted.len();
    if n == 0 {
        return Vec::new();
    }
    let rf = (replication_factor as usize).min(n);
    (0..partitions as usize).map(|p| (0..rf).map(|j| sorted[(topic_id as usize + p + j) % n]).collect()).collect()
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    #[test]
    fn replicas_are_distinct_and_leaders_spread_evenly() {
        let nodes = [3, 1, 2];
        let placed = place(0, 6, 3, &nodes);
        let mut leaders: BTreeMap<NodeId, u32> = BTreeMap::new();
        let mut replicas: BTreeMap<NodeId, u32> = BTreeMap::new();
        for r in &placed {
            let mut d = r.clone();
            d.sort_unstable();
            d.dedup();
            assert_eq!(d.len(), 3);
            *leaders.entry(r[0]).or_default() += 1;
            for n in r {
                *replicas.entry(*n).or_default() += 1;
            }
        }
        assert_eq!(leaders.values().copied().collect::<Vec<_>>(), vec![2, 2, 2]);
        assert_eq!(replicas.values().copied().collect::<Vec<_>>(), vec![6, 6, 6]);
    }

    #[test]
    fn single_partition_topics_rotate_leaders() {
        let nodes = [1, 2, 3];
        let leaders: Vec<NodeId> = (0..3).map(|t| place(t, 1, 3, &nodes)[0][0]).collect();
        assert_eq!(leaders, vec![1, 2, 3]);
    }

    #[test]
    fn rf_one_uses_one_node() {
        assert_eq!(place(1, 2, 1, &[1, 2, 3]), vec![vec![2], vec![3]]);
    }
}
