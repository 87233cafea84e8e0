//! Kafka's consumer group protocol (KIP-848): `ConsumerGroupHeartbeat`. The coordinator decides
//! membership and assignments (Rill's server-side assignors, `uniform` and `range`); each
//! heartbeat is one call of the service function the gRPC `ConsumerGroupHeartbeat` calls, so a
//! Kafka member and a gRPC member of one group are members of the same group.
//!
//! Kafka's wire names topics by id where Rill's engine names them by name: owned partitions are
//! translated from ids (an id no topic has any more is dropped, as Kafka drops a deleted topic's
//! partitions) and the assignment back to ids.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use kafka_protocol::messages::consumer_group_heartbeat_response::{Assignment, TopicPartitions as WirePartitions};
use kafka_protocol::messages::{ConsumerGroupHeartbeatRequest, ConsumerGroupHeartbeatResponse};
use kafka_protocol::protocol::StrBytes;
use rill_coordinator::groups::heartbeat::HeartbeatRequest;

use rill_proto::common::ErrorCode;

use super::errors;
use super::wire::{str_bytes, text};
use crate::errors::kafka_code;
use crate::service::groups::ConsumerHeartbeat;
use crate::service::{RequestContext, Service};

/// `ConsumerGroupHeartbeat`, versions 0 and 1: join (epoch 0, the member id the client chose),
/// heartbeat (its epoch, with what changed since the last full request), or leave (-1, or -2
/// for a static member). Answered at once (a Kafka member heartbeats every
/// `heartbeat_interval_ms`; only the gRPC listener holds heartbeats). A regular expression
/// subscription (v1) is refused with `INVALID_REQUEST`: Rill's coordinators subscribe by name.
pub async fn consumer_group_heartbeat(
    service: &Service,
    ctx: &RequestContext,
    request: ConsumerGroupHeartbeatRequest,
) -> ConsumerGroupHeartbeatResponse {
    if request.subscribed_topic_regex.as_ref().is_some_and(|r| !r.is_empty()) {
        return refused(
            kafka_code(ErrorCode::InvalidRequest),
            "subscribing by regular expression is not supported: subscribe to topic names".into(),
        );
    }
    // The owned partitions' topics by name, of the topics the caller may describe.
    let names: HashMap<uuid::Uuid, String> =
        service.list_topics(ctx, false).into_iter().map(|t| (uuid::Uuid::from_bytes(t.topic_id), t.name)).collect();
    let owned = request.topic_partitions.map(|owned| {
        let mut by_name: BTreeMap<String, BTreeSet<u32>> = BTreeMap::new();
        for t in owned {
            if let Some(name) = names.get(&t.topic_id) {
                by_name
                    .entry(name.clone())
                    .or_default()
                    .extend(t.partitions.iter().filter_map(|&p| u32::try_from(p).ok()));
            }
        }
        by_name
    });
    let heartbeat = ConsumerHeartbeat {
        request: HeartbeatRequest {
            group_id: request.group_id.0.to_string(),
            member_id: text(&request.member_id),
            member_epoch: request.member_epoch,
            instance_id: request.instance_id.as_ref().map(text),
            rack_id: request.rack_id.as_ref().map(text),
            // -1: unchanged since the last full request.
            rebalance_timeout_ms: u32::try_from(request.rebalance_timeout_ms).ok(),
            subscribed_topics: request.subscribed_topic_names.map(|n| n.iter().map(|t| t.0.to_string()).collect()),
            server_assignor: request.server_assignor.as_ref().map(text),
            rebalance_mode: None,
            owned,
            client_id: String::new(),
            client_host: String::new(),
        },
        wait_ms: None,
    };
    let outcome = match service.consumer_group_heartbeat(ctx, heartbeat).await {
        Ok(Ok(outcome)) => outcome,
        Ok(Err(refusal)) => return refused(errors::code(&refusal), refusal.message),
        Err(e) => return refused(errors::request_error(&e), e.to_string()),
    };
    let answer = outcome.answer;
    // The assignment's topics by id, read after the decision (a topic created meanwhile may be
    // in it).
    let topics = service.list_topics(ctx, false);
    let ids: HashMap<&str, uuid::Uuid> =
        topics.iter().map(|t| (t.name.as_str(), uuid::Uuid::from_bytes(t.topic_id))).collect();
    let assignment = answer.assignment.map(|assigned| {
        let partitions = assigned
            .into_iter()
            .filter_map(|(name, partitions)| {
                let id = ids.get(name.as_str()).copied()?;
                let partitions = partitions.into_iter().filter_map(|p| i32::try_from(p).ok()).collect();
                Some(WirePartitions::default().with_topic_id(id).with_partitions(partitions))
            })
            .collect();
        Assignment::default().with_topic_partitions(partitions)
    });
    ConsumerGroupHeartbeatResponse::default()
        .with_member_id(Some(str_bytes(answer.member_id)))
        .with_member_epoch(answer.member_epoch)
        .with_heartbeat_interval_ms(i32::try_from(answer.heartbeat_interval_ms).unwrap_or(i32::MAX))
        .with_assignment(assignment)
}

/// A heartbeat refused with `code`.
fn refused(code: i16, message: String) -> ConsumerGroupHeartbeatResponse {
    ConsumerGroupHeartbeatResponse::default()
        .with_error_code(code)
        .with_error_message(Some(StrBytes::from_string(message)))
}
