//! Finding the replica a request names.

use std::sync::Arc;

use rill_broker::Partition;

use rill_meta::PartitionKind;

use crate::errors::{self, WireError};
use crate::node::{Hosted, Node};

/// The replica of `topic`/`partition` hosted on this node, or the error to answer with. A
/// non-empty `topic_id` must be the topic's id (else `UNKNOWN_TOPIC_ID`).
pub fn local_replica(node: &Node, topic: &str, topic_id: &[u8], partition: u32) -> Result<Arc<Partition>, WireError> {
    let meta = node.meta();
    let Some(t) = meta.topics.get(topic) else {
        return Err(if topic_id.is_empty() { errors::unknown_topic(topic) } else { errors::unknown_topic_id(topic) });
    };
    if !topic_id.is_empty() && topic_id != t.topic_id.as_slice() {
        return Err(errors::unknown_topic_id(topic));
    }
    if t.is_internal() {
        return Err(errors::internal_topic(topic, t.kind.name()));
    }
    let Some(assignment) = t.partitions.get(partition as usize) else {
        return Err(errors::unknown_partition(topic, partition, t.partitions.len()));
    };
    if let Some(reason) = node.multi().storage_failure() {
        let leader = node.leader_of(assignment.group).filter(|l| *l != node.id()).map(|l| (l, node.client_addr(l)));
        return Err(errors::storage_failed(topic, partition, node.id(), &reason, leader));
    }
    match node.partition_by_group(assignment.group) {
        Some(p) => Ok(p),
        None if assignment.replicas.contains(&node.id()) => Err(errors::replica_starting(topic, partition, node.id())),
        None => Err(errors::not_hosted(topic, partition, node.id(), &assignment.replicas)),
    }
}

/// The coordinator replica for `key` of `kind` when this node leads it; otherwise the error to
/// answer with: `NOT_COORDINATOR` with the coordinator's address when known, or
/// `COORDINATOR_NOT_AVAILABLE`.
pub fn coordinator_here(node: &Node, kind: PartitionKind, key: &str) -> Result<Hosted, WireError> {
    let topic = kind.internal_topic().unwrap_or_default();
    let Some((partition, group)) = node.coordinator_partition(kind, key) else {
        return Err(errors::coordinator_not_created(topic));
    };
    if let Some(hosted) = node.replica(group) {
        if hosted.replica().state().is_leader {
            return Ok(hosted);
        }
    }
    match node.leader_of(group).filter(|l| *l != node.id()) {
        Some(leader) => Err(errors::coordinator(&rill_coordinator::CoordinatorError::NotCoordinator {
            node: node.id(),
            leader: Some(leader),
            addr: node.client_addr(leader),
        })),
        None => Err(errors::coordinator_without_leader(topic, partition)),
    }
}
