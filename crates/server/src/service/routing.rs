//! Finding, on this node, the replica or the coordinator partition a request names.

use std::sync::Arc;

use rill_broker::{Partition, StatePartition};
use rill_coordinator::{OffsetsMachine, TransactionsMachine};
use rill_meta::PartitionKind;

use super::checks::record_partition;
use super::Answer;
use crate::errors;
use crate::node::{Hosted, Node};

/// The replica of `topic`/`partition` hosted on this node, or the refusal to answer with: the
/// metadata's ([`record_partition`]; a non-empty `topic_id` must be the topic's), this node's
/// storage failed, the replica is starting, or it lives elsewhere.
pub fn local_replica(node: &Node, topic: &str, topic_id: &[u8], partition: u32) -> Answer<Arc<Partition>> {
    let meta = node.meta();
    let (_, assignment) = record_partition(&meta, topic, topic_id, partition)?;
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

/// The coordinator replica for `key` of `kind` when this node leads it; otherwise the refusal to
/// answer with: `NOT_COORDINATOR` with the coordinator's address when known, or
/// `COORDINATOR_NOT_AVAILABLE`.
pub fn coordinator_here(node: &Node, kind: PartitionKind, key: &str) -> Answer<Hosted> {
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

/// Group `group_id`'s coordinator partition, when this node leads it: the id checked, then
/// [`coordinator_here`].
pub fn group_coordinator(node: &Node, group_id: &str) -> Answer<Arc<StatePartition<OffsetsMachine>>> {
    super::checks::coordinator_key(PartitionKind::ConsumerOffsets, group_id)?;
    match coordinator_here(node, PartitionKind::ConsumerOffsets, group_id)? {
        Hosted::Offsets(p) => Ok(p),
        _ => Err(errors::coordinator_not_created(rill_meta::CONSUMER_OFFSETS_TOPIC)),
    }
}

/// Transactional id `id`'s coordinator partition, when this node leads it: the id checked, then
/// [`coordinator_here`].
pub fn transaction_coordinator(node: &Node, id: &str) -> Answer<Arc<StatePartition<TransactionsMachine>>> {
    super::checks::coordinator_key(PartitionKind::TransactionState, id)?;
    match coordinator_here(node, PartitionKind::TransactionState, id)? {
        Hosted::Transactions(p) => Ok(p),
        _ => Err(errors::coordinator_not_created(rill_meta::TRANSACTION_STATE_TOPIC)),
    }
}
