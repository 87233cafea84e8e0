//! The cluster-level APIs: `Metadata`.

use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::metadata_response::{
    MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
};
use kafka_protocol::messages::{BrokerId, MetadataRequest, MetadataResponse, TopicName};
use kafka_protocol::protocol::StrBytes;
use rill_proto::common::ErrorCode;
use rill_raft::NodeId;

use super::errors;
use crate::errors::kafka_code;
use crate::service::topics::{NodeDescription, PartitionLayout, TopicLayout};
use crate::service::{RequestContext, Service};

/// A node id as Kafka's 32-bit broker id; `None` for an id Kafka cannot carry.
pub fn broker_id(id: NodeId) -> Option<BrokerId> {
    i32::try_from(id).ok().map(BrokerId)
}

/// A node's Kafka address as `Metadata` lists it: host and port (an IPv6 host without its
/// brackets, as Kafka writes it).
pub fn host_port(address: &str) -> Option<(String, i32)> {
    let (host, port) = address.rsplit_once(':')?;
    let port: u16 = port.parse().ok()?;
    let host = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')).unwrap_or(host);
    Some((host.to_string(), i32::from(port)))
}

/// `Metadata`: the brokers Kafka clients can reach (the nodes with a Kafka listener), the
/// cluster's id and controller, and each topic's partitions with their leaders, leader epochs
/// (the Raft term) and replicas. Without names (v0: an empty list; v1+: null) every topic the
/// caller may describe; v1+ with an empty list, no topic. Unknown topics named may be created
/// first ([`Service::auto_create_topics`]).
pub async fn metadata(
    service: &Service,
    ctx: &RequestContext,
    request: MetadataRequest,
    version: i16,
) -> MetadataResponse {
    let every_topic = match &request.topics {
        None => true,
        Some(topics) => topics.is_empty() && version == 0,
    };
    // A topic named only by its id (v10+; KIP-848 consumers learn their assignments' topics so)
    // is looked up among the topics the caller may describe; an id none of them has is
    // UNKNOWN_TOPIC_ID.
    let (named, by_id): (Vec<_>, Vec<_>) =
        request.topics.unwrap_or_default().into_iter().partition(|t| !names_only_id(t));
    let mut unknown_ids = Vec::new();
    let mut names: Vec<String> = named.into_iter().filter_map(|t| t.name.map(|n| n.0.to_string())).collect();
    if !by_id.is_empty() {
        let ids: std::collections::HashMap<uuid::Uuid, String> =
            service.list_topics(ctx, false).into_iter().map(|t| (uuid::Uuid::from_bytes(t.topic_id), t.name)).collect();
        for t in by_id {
            match ids.get(&t.topic_id) {
                Some(name) => names.push(name.clone()),
                None => unknown_ids.push(t.topic_id),
            }
        }
    }
    // Unknown topics named are created first when the request allows it (always before v4)
    // and the node does (`[kafka] auto-create-topics`); their partitions may answer
    // LEADER_NOT_AVAILABLE until elected, and the client asks again.
    if !every_topic && request.allow_auto_topic_creation {
        service.auto_create_topics(ctx, &names).await;
    }
    let wanted: Option<Vec<String>> = (!every_topic).then_some(names);
    let mut answer = MetadataResponse::default();
    let metadata = match service.metadata(ctx, wanted.clone()) {
        Ok(metadata) => metadata,
        Err(e) => {
            // No part of the answer can be trusted: every named topic carries the error (and,
            // from v13, the answer as a whole).
            let code = errors::request_error(&e);
            answer.error_code = if version >= 13 { code } else { 0 };
            answer.topics = wanted
                .unwrap_or_default()
                .into_iter()
                .map(|name| MetadataResponseTopic::default().with_name(Some(topic_name(name))).with_error_code(code))
                .collect();
            return answer;
        }
    };
    let alive: std::collections::BTreeSet<NodeId> =
        metadata.nodes.iter().filter(|n| n.alive).map(|n| n.node_id).collect();
    answer.brokers = metadata.nodes.iter().filter_map(broker).collect();
    if version >= 2 && !metadata.cluster_id.is_empty() {
        answer.cluster_id = Some(StrBytes::from_string(metadata.cluster_id.clone()));
    }
    answer.controller_id = metadata.controller.and_then(broker_id).unwrap_or(BrokerId(-1));
    answer.topics = metadata
        .topics
        .into_iter()
        .map(|(name, layout)| match layout {
            Ok(layout) => topic(name, &layout, &alive, version),
            Err(refusal) => MetadataResponseTopic::default()
                .with_name(Some(topic_name(name)))
                .with_error_code(errors::code(&refusal)),
        })
        .chain(unknown_ids.into_iter().map(|id| {
            let topic = MetadataResponseTopic::default()
                .with_topic_id(id)
                .with_error_code(kafka_code(ErrorCode::UnknownTopicId));
            // The name is nullable from v12, as Kafka answers an unknown id; empty before.
            if version >= 12 {
                topic.with_name(None)
            } else {
                topic
            }
        }))
        .collect();
    answer
}

/// A topic named by its id alone: no name (null, or empty as some clients send it) and an id.
fn names_only_id(t: &MetadataRequestTopic) -> bool {
    t.name.as_ref().is_none_or(|n| n.is_empty()) && !t.topic_id.is_nil()
}

/// A node as a Kafka broker: only nodes whose Kafka address is known and whose id fits.
fn broker(node: &NodeDescription) -> Option<MetadataResponseBroker> {
    let (host, port) = host_port(&node.kafka_address)?;
    Some(
        MetadataResponseBroker::default()
            .with_node_id(broker_id(node.node_id)?)
            .with_host(StrBytes::from_string(host))
            .with_port(port),
    )
}

/// A topic name as Kafka's messages carry it.
pub fn topic_name(name: String) -> TopicName {
    TopicName(StrBytes::from_string(name))
}

/// One topic's answer. Its id only from v10, where the answer has one.
fn topic(
    name: String,
    layout: &TopicLayout,
    alive: &std::collections::BTreeSet<NodeId>,
    version: i16,
) -> MetadataResponseTopic {
    let mut topic = MetadataResponseTopic::default()
        .with_name(Some(topic_name(name)))
        .with_is_internal(layout.internal)
        .with_partitions(layout.partitions.iter().map(|p| partition(p, alive)).collect());
    if version >= 10 {
        topic.topic_id = uuid::Uuid::from_bytes(layout.topic_id);
    }
    topic
}

/// One partition's answer: its leader and the term it leads in, or `LEADER_NOT_AVAILABLE`
/// while this node knows of none; its in-sync replicas as the leader counts them when this
/// node leads it, otherwise its replicas (this node does not know the leader's count); the
/// replicas on nodes not heard from lately as offline.
fn partition(p: &PartitionLayout, alive: &std::collections::BTreeSet<NodeId>) -> MetadataResponsePartition {
    let ids = |nodes: &[NodeId]| nodes.iter().filter_map(|n| broker_id(*n)).collect::<Vec<_>>();
    let mut answer = MetadataResponsePartition::default()
        .with_partition_index(i32::try_from(p.partition).unwrap_or(i32::MAX))
        .with_replica_nodes(ids(&p.replicas))
        .with_isr_nodes(ids(p.in_sync.as_deref().unwrap_or(&p.replicas)))
        .with_offline_replicas(ids(&p.replicas.iter().copied().filter(|r| !alive.contains(r)).collect::<Vec<_>>()));
    match p.leader.and_then(|(id, term)| Some((broker_id(id)?, term))) {
        Some((leader, term)) => {
            answer.leader_id = leader;
            answer.leader_epoch = i32::try_from(term).unwrap_or(i32::MAX);
        }
        None => {
            answer.leader_id = BrokerId(-1);
            answer.error_code = kafka_code(ErrorCode::LeaderNotAvailable);
        }
    }
    answer
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kafka_addresses_split_into_host_and_port() {
        assert_eq!(host_port("127.0.0.1:9092"), Some(("127.0.0.1".into(), 9092)));
        assert_eq!(host_port("[::1]:9093"), Some(("::1".into(), 9093)));
        assert_eq!(host_port("kafka.example:19092"), Some(("kafka.example".into(), 19092)));
        assert_eq!(host_port(""), None);
        assert_eq!(host_port("h:70000"), None);
    }

    #[test]
    fn only_ids_kafka_can_carry_are_brokers() {
        assert_eq!(broker_id(3), Some(BrokerId(3)));
        assert_eq!(broker_id(1 << 31), None);
    }
}
