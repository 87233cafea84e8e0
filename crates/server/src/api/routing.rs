//! Finding the replica a request names.

use std::sync::Arc;

use rill_broker::Partition;
use rill_proto::common::ErrorCode;

use crate::errors::{self, WireError};
use crate::node::Node;

/// The replica of `topic`/`partition` hosted on this node, or the error to answer with.
pub fn local_replica(node: &Node, topic: &str, partition: u32) -> Result<Arc<Partition>, WireError> {
    let meta = node.meta();
    let Some(t) = meta.topics.get(topic) else {
        return Err(errors::unknown_topic(topic));
    };
    let Some(assignment) = t.partitions.get(partition as usize) else {
        return Err(errors::unknown_partition(topic, partition, t.partitions.len()));
    };
    match node.partition_by_group(assignment.group) {
        Some(p) => Ok(p),
        None if assignment.replicas.contains(&node.id()) => Err(WireError::new(
            ErrorCode::LeaderNotAvailable,
            format!("the replica of {topic}/{partition} on node {} is still starting; retry shortly", node.id()),
        )),
        None => Err(WireError::new(
            ErrorCode::NotLeaderOrFollower,
            format!(
                "node {} does not host {topic}/{partition} (its replicas are on nodes {:?}); refresh metadata",
                node.id(),
                assignment.replicas
            ),
        )),
    }
}
