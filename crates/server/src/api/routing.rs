//! Finding the replica a request names.

use std::sync::Arc;

use rill_broker::Partition;

use crate::errors::{self, WireError};
use crate::node::Node;

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
    let Some(assignment) = t.partitions.get(partition as usize) else {
        return Err(errors::unknown_partition(topic, partition, t.partitions.len()));
    };
    match node.partition_by_group(assignment.group) {
        Some(p) => Ok(p),
        None if assignment.replicas.contains(&node.id()) => Err(errors::replica_starting(topic, partition, node.id())),
        None => Err(errors::not_hosted(topic, partition, node.id(), &assignment.replicas)),
    }
}
