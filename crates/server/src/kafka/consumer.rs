//! Kafka's consumer group protocol (KIP-848): `ConsumerGroupHeartbeat` and
//! `ConsumerGroupDescribe`. The coordinator decides
//! membership and assignments (Rill's server-side assignors, `uniform` and `range`); each
//! heartbeat is one call of the service function the gRPC `ConsumerGroupHeartbeat` calls, so a
//! Kafka member and a gRPC member of one group are members of the same group.
//!
//! Kafka's wire names topics by id where Rill's engine names them by name: owned partitions are
//! translated from ids (an id no topic has any more is dropped, as Kafka drops a deleted topic's
//! partitions) and the assignment back to ids.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use kafka_protocol::messages::consumer_group_describe_response::{
    Assignment as DescribedAssignment, DescribedGroup, Member, TopicPartitions as DescribedPartitions,
};
use kafka_protocol::messages::consumer_group_heartbeat_response::{Assignment, TopicPartitions as WirePartitions};
use kafka_protocol::messages::{
    ConsumerGroupDescribeRequest, ConsumerGroupDescribeResponse, ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
};
use kafka_protocol::protocol::StrBytes;
use rill_coordinator::groups::heartbeat::HeartbeatRequest;
use rill_coordinator::groups::TopicPartitions;

use rill_proto::common::ErrorCode;

use super::cluster::topic_name;
use super::errors;
use super::wire::{str_bytes, text};
use crate::errors::kafka_code;
use crate::service::groups::ConsumerHeartbeat;
use crate::service::{RequestContext, Service};

/// `ConsumerGroupDescribe`'s member type for a member of Kafka's consumer protocol (v1; 0 is a
/// classic member in a converted group, which Rill does not make).
const CONSUMER_MEMBER: i8 = 1;

/// `ConsumerGroupHeartbeat`, versions 0 and 1: join (epoch 0, the member id the client chose),
/// heartbeat (its epoch, with what changed since the last full request), or leave (-1, or -2
/// for a static member). Answered at once (a Kafka member heartbeats every
/// `heartbeat_interval_ms`; only the gRPC listener holds heartbeats). From v1 a member may
/// subscribe by regular expression (`subscribed_topic_regex`, beside or instead of names; ""
/// drops it), resolved by the coordinator against whole topic names at every decision.
pub async fn consumer_group_heartbeat(
    service: &Service,
    ctx: &RequestContext,
    request: ConsumerGroupHeartbeatRequest,
) -> ConsumerGroupHeartbeatResponse {
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
            subscribed_regex: request.subscribed_topic_regex.as_ref().map(text),
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

/// `ConsumerGroupDescribe`, versions 0 and 1: each KIP-848 group as its coordinator knows it —
/// state, epochs, assignor, and each member's client, subscription, current and target
/// assignment (by topic id and name; a topic the caller may not describe is left out of the
/// assignments). A classic group, or one with only committed offsets, is
/// `GROUP_ID_NOT_FOUND`, as Kafka answers (`DescribeGroups` describes those); authorized
/// operations are not provided.
pub fn consumer_group_describe(
    service: &Service,
    ctx: &RequestContext,
    request: ConsumerGroupDescribeRequest,
) -> ConsumerGroupDescribeResponse {
    let topics = service.list_topics(ctx, false);
    let ids: HashMap<&str, uuid::Uuid> =
        topics.iter().map(|t| (t.name.as_str(), uuid::Uuid::from_bytes(t.topic_id))).collect();
    let by_id = |partitions: TopicPartitions| {
        let topic_partitions = partitions
            .into_iter()
            .filter_map(|(name, partitions)| {
                let id = ids.get(name.as_str()).copied()?;
                Some(
                    DescribedPartitions::default()
                        .with_topic_id(id)
                        .with_topic_name(topic_name(name))
                        .with_partitions(partitions.into_iter().filter_map(|p| i32::try_from(p).ok()).collect()),
                )
            })
            .collect();
        DescribedAssignment::default().with_topic_partitions(topic_partitions)
    };
    let groups = request
        .group_ids
        .into_iter()
        .map(|group_id| {
            let described =
                DescribedGroup::default().with_group_id(group_id.clone()).with_authorized_operations(i32::MIN);
            let d = match service.describe_group(ctx, &group_id.0) {
                Ok(d) if d.classic.is_none() && d.protocol == "consumer" => d,
                Ok(_) => {
                    let message = format!(
                        "group {:?} is not a consumer (KIP-848) group: describe it with DescribeGroups",
                        group_id.0
                    );
                    return described
                        .with_error_code(kafka_code(ErrorCode::GroupIdNotFound))
                        .with_error_message(Some(str_bytes(message)));
                }
                Err(refusal) => {
                    return described
                        .with_error_code(errors::code(&refusal))
                        .with_error_message(Some(str_bytes(refusal.message)));
                }
            };
            let members = d
                .members
                .into_iter()
                .map(|m| {
                    Member::default()
                        .with_member_id(str_bytes(m.member_id))
                        .with_instance_id(m.instance_id.map(str_bytes))
                        .with_member_epoch(m.member_epoch)
                        .with_client_id(str_bytes(m.client_id))
                        .with_client_host(str_bytes(m.client_host))
                        .with_subscribed_topic_names(m.subscribed_topics.into_iter().map(topic_name).collect())
                        .with_subscribed_topic_regex(m.subscribed_topic_regex.map(str_bytes))
                        .with_assignment(by_id(m.assignment))
                        .with_target_assignment(by_id(m.target))
                        .with_member_type(CONSUMER_MEMBER)
                })
                .collect();
            described
                .with_group_state(str_bytes(d.state))
                .with_group_epoch(d.group_epoch)
                .with_assignment_epoch(d.target_epoch)
                .with_assignor_name(str_bytes(d.assignor))
                .with_members(members)
        })
        .collect();
    ConsumerGroupDescribeResponse::default().with_groups(groups)
}
