//! Live partition state gathered from the replicas (for Metadata and DescribeTopic).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;

use futures::future::join_all;
use rill_meta::TopicMeta;
use rill_proto::internal::{ReplicaStatus, ReplicaStatusRequest};
use rill_raft::{GroupId, NodeId};

use crate::node::Node;

/// How long to wait for a replica's status before calling it unreachable.
const STATUS_TIMEOUT: Duration = Duration::from_millis(1000);

/// What the replicas of one partition report.
#[derive(Debug, Clone, Default)]
pub struct PartitionLive {
    /// The leader's own report, if a replica claims leadership.
    pub leader: Option<ReplicaStatus>,
    /// Replicas that answered.
    pub answered: BTreeSet<NodeId>,
    /// Replicas that did not.
    pub unreachable: BTreeSet<NodeId>,
}

/// This node's own report for `group`.
pub fn local_status(node: &Node, group: GroupId) -> ReplicaStatus {
    match node.replica(group) {
        None => ReplicaStatus { group_id: group, hosted: false, ..Default::default() },
        Some(p) => {
            let s = p.state();
            ReplicaStatus {
                group_id: group,
                hosted: true,
                is_leader: s.is_leader,
                leader: s.leader,
                term: s.term,
                isr: s.isr,
                log_start_offset: s.log_start_offset as i64,
                high_watermark: s.high_watermark as i64,
                log_end_offset: s.log_end_offset as i64,
                quiescent: s.quiescent,
                retained_bytes: p.retained_bytes(),
                stored_from_offset: p.stored_from() as i64,
                cleaned_to_offset: p.cleaned_to() as i64,
            }
        }
    }
}

/// Asks every replica of `topics` for its state (one request per node) and picks each
/// partition's leader report.
pub async fn gather(node: &Node, topics: &[&TopicMeta]) -> HashMap<GroupId, PartitionLive> {
    let mut by_node: BTreeMap<NodeId, Vec<GroupId>> = BTreeMap::new();
    for t in topics {
        for p in &t.partitions {
            for r in &p.replicas {
                by_node.entry(*r).or_default().push(p.group);
            }
        }
    }
    let asks = by_node.into_iter().map(|(id, groups)| async move {
        if id == node.id() {
            return (id, groups.clone(), Some(groups.iter().map(|g| local_status(node, *g)).collect::<Vec<_>>()));
        }
        let Some(mut client) = node.cluster_client(id) else {
            return (id, groups, None);
        };
        let req = ReplicaStatusRequest { group_ids: groups.clone() };
        let answer = match rill_rt::timeout(STATUS_TIMEOUT, client.replica_status(req)).await {
            Ok(Ok(r)) => Some(r.into_inner().replicas),
            _ => None,
        };
        (id, groups, answer)
    });
    let mut live: HashMap<GroupId, PartitionLive> = HashMap::new();
    for (id, groups, answer) in join_all(asks).await {
        match answer {
            None => {
                for g in groups {
                    live.entry(g).or_default().unreachable.insert(id);
                }
            }
            Some(statuses) => {
                for s in statuses {
                    let entry = live.entry(s.group_id).or_default();
                    entry.answered.insert(id);
                    if s.hosted && s.is_leader && entry.leader.as_ref().is_none_or(|l| l.term < s.term) {
                        entry.leader = Some(s);
                    }
                }
            }
        }
    }
    live
}
