//! The admin APIs: `CreateTopics`, `DeleteTopics`, `CreatePartitions`, `DescribeCluster`,
//! `DescribeConfigs`, `AlterConfigs`, `IncrementalAlterConfigs`. Each topic is answered on its own, by the
//! service function the gRPC handler calls.
//!
//! Replicas are placed by Rill: a request naming them (Kafka's manual replica assignment) is
//! refused with `INVALID_REQUEST`. A request's `timeout_ms` is not a deadline here: a creation,
//! deletion or growth is answered once the cluster metadata has it and this node sees it (the
//! service's own bound), whatever the client asked.

use kafka_protocol::messages::create_partitions_response::CreatePartitionsTopicResult;
use kafka_protocol::messages::create_topics_response::CreatableTopicResult;
use kafka_protocol::messages::delete_topics_response::DeletableTopicResult;
use kafka_protocol::messages::describe_cluster_response::DescribeClusterBroker;
use kafka_protocol::messages::{
    BrokerId, CreatePartitionsRequest, CreatePartitionsResponse, CreateTopicsRequest, CreateTopicsResponse,
    DeleteTopicsRequest, DeleteTopicsResponse, DescribeClusterRequest, DescribeClusterResponse, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use rill_meta::ConfigEdits;
use rill_proto::common::ErrorCode;

use super::cluster::{broker_id, host_port, topic_name};
use super::errors;
use crate::errors::Refusal;
use crate::service::topics::CreateTopic;
use crate::service::{Answer, RequestContext, Service};

/// A refusal's code and message, as the admin answers carry them.
fn refused(refusal: &Refusal) -> (i16, Option<StrBytes>) {
    (errors::code(refusal), Some(StrBytes::from_string(refusal.message.clone())))
}

/// An answer's error code and message: 0 and none when it was done.
fn outcome(answer: &Answer<()>) -> (i16, Option<StrBytes>) {
    answer.as_ref().err().map_or((0, None), refused)
}

fn manual_assignment() -> Refusal {
    Refusal::new(
        ErrorCode::InvalidRequest,
        "replica assignments are not taken: Rill places every partition's replicas itself; leave them out",
    )
}

/// `CreateTopics`, versions 2 to 7: each topic created (or, with `validate_only`, checked) on
/// its own. A partition count or replication factor of -1 takes the cluster's default (1
/// partition; 3 replicas, or every node of a smaller cluster). Configs are Rill's topic
/// settings (docs/api.md); one Rill does not know is `INVALID_CONFIG`.
pub async fn create_topics(
    service: &Service,
    ctx: &RequestContext,
    request: CreateTopicsRequest,
    version: i16,
) -> CreateTopicsResponse {
    let mut results = Vec::with_capacity(request.topics.len());
    for t in request.topics {
        let name = t.name.0.to_string();
        let result = CreatableTopicResult::default().with_name(t.name.clone());
        let shape = (
            count(t.num_partitions, service.default_partitions(), "partition count"),
            count(i32::from(t.replication_factor), service.default_replication_factor(), "replication factor"),
        );
        let configs: Answer<Vec<(String, String)>> = t
            .configs
            .iter()
            .map(|c| match &c.value {
                Some(v) => Ok((c.name.to_string(), v.to_string())),
                None => Err(Refusal::new(ErrorCode::InvalidConfig, format!("config {} has no value", c.name))),
            })
            .collect();
        let answer = async {
            if !t.assignments.is_empty() {
                return Err(manual_assignment());
            }
            let (partitions, replication_factor) = (shape.0?, shape.1?);
            let create = CreateTopic { name: name.clone(), partitions, replication_factor, configs: configs? };
            if request.validate_only {
                service.validate_create_topic(ctx, &create).await?;
                return Ok((None, partitions, replication_factor));
            }
            let created = service.create_topic(ctx, create).await?;
            Ok((Some(created.topic_id), partitions, replication_factor))
        }
        .await;
        results.push(match answer {
            Ok((topic_id, partitions, replication_factor)) => {
                let mut result = result
                    .with_num_partitions(i32::try_from(partitions).unwrap_or(i32::MAX))
                    .with_replication_factor(i16::try_from(replication_factor).unwrap_or(i16::MAX));
                if let (Some(id), true) = (topic_id, version >= 7) {
                    result.topic_id = uuid::Uuid::from_bytes(id);
                }
                result
            }
            Err(refusal) => {
                let (code, message) = refused(&refusal);
                result
                    .with_error_code(code)
                    .with_error_message(message)
                    .with_num_partitions(-1)
                    .with_replication_factor(-1)
            }
        });
    }
    CreateTopicsResponse::default().with_topics(results)
}

/// A count from the wire: -1 takes `default`; anything else must be positive.
fn count(wire: i32, default: u32, what: &str) -> Answer<u32> {
    match wire {
        -1 => Ok(default),
        n => u32::try_from(n).ok().filter(|n| *n > 0).ok_or_else(|| {
            let code = if what == "partition count" {
                ErrorCode::InvalidPartitions
            } else {
                ErrorCode::InvalidReplicationFactor
            };
            Refusal::new(code, format!("a {what} of {n}: give at least 1, or -1 for the cluster's default"))
        }),
    }
}

/// `DeleteTopics`, versions 1 to 6: each topic deleted on its own, by name, or from v6 by id.
pub async fn delete_topics(
    service: &Service,
    ctx: &RequestContext,
    request: DeleteTopicsRequest,
    version: i16,
) -> DeleteTopicsResponse {
    // Before v6 the topics are names; from v6, each a name or an id.
    let named: Vec<(Option<TopicName>, uuid::Uuid)> = if version >= 6 {
        request.topics.into_iter().map(|t| (t.name, t.topic_id)).collect()
    } else {
        request.topic_names.into_iter().map(|n| (Some(n), uuid::Uuid::nil())).collect()
    };
    let mut responses = Vec::with_capacity(named.len());
    for (name, id) in named {
        let resolved: Answer<String> = match &name {
            Some(n) => Ok(n.0.to_string()),
            None => service
                .list_topics(ctx, false)
                .into_iter()
                .find(|t| t.topic_id == *id.as_bytes())
                .map(|t| t.name)
                .ok_or_else(|| Refusal::new(ErrorCode::UnknownTopicId, format!("no topic has the id {id}"))),
        };
        let answer = match resolved {
            Ok(topic) => service.delete_topic(ctx, topic.clone()).await.map(|()| topic),
            Err(refusal) => Err(refusal),
        };
        let result = DeletableTopicResult::default().with_topic_id(if version >= 6 { id } else { uuid::Uuid::nil() });
        responses.push(match answer {
            Ok(topic) => result.with_name(Some(topic_name(topic))),
            Err(refusal) => {
                let (code, message) = refused(&refusal);
                let result = result.with_name(name).with_error_code(code);
                if version >= 5 {
                    result.with_error_message(message)
                } else {
                    result
                }
            }
        });
    }
    DeleteTopicsResponse::default().with_responses(responses)
}

/// `CreatePartitions`, versions 0 to 3: each topic grown to its new count on its own (or, with
/// `validate_only`, checked).
pub async fn create_partitions(
    service: &Service,
    ctx: &RequestContext,
    request: CreatePartitionsRequest,
) -> CreatePartitionsResponse {
    let mut results = Vec::with_capacity(request.topics.len());
    for t in request.topics {
        let name = t.name.0.to_string();
        let answer = async {
            if t.assignments.as_ref().is_some_and(|a| !a.is_empty()) {
                return Err(manual_assignment());
            }
            let total = u32::try_from(t.count)
                .map_err(|_| Refusal::new(ErrorCode::InvalidPartitions, format!("a partition count of {}", t.count)))?;
            if request.validate_only {
                return service.validate_create_partitions(ctx, &name, total).await.map(|_| ());
            }
            service.create_partitions(ctx, name.clone(), total).await.map(|_| ())
        }
        .await;
        let result = CreatePartitionsTopicResult::default().with_name(t.name);
        results.push(match answer {
            Ok(()) => result,
            Err(refusal) => {
                let (code, message) = refused(&refusal);
                result.with_error_code(code).with_error_message(message)
            }
        });
    }
    CreatePartitionsResponse::default().with_results(results)
}

/// `DescribeCluster`, versions 0 and 1: the nodes with a Kafka listener (each probed now), the
/// metadata leader as the controller, the cluster's id. Endpoint type 1 (brokers) only.
pub async fn describe_cluster(
    service: &Service,
    ctx: &RequestContext,
    request: DescribeClusterRequest,
) -> DescribeClusterResponse {
    let answer = DescribeClusterResponse::default().with_cluster_authorized_operations(i32::MIN);
    if request.endpoint_type != 1 {
        let refusal = Refusal::new(
            ErrorCode::InvalidRequest,
            format!("endpoint type {}: only brokers (1) are described", request.endpoint_type),
        );
        let (code, message) = refused(&refusal);
        return answer.with_error_code(code).with_error_message(message);
    }
    let (nodes, leader) = match service.describe_cluster(ctx).await {
        Ok(described) => described,
        Err(e) => {
            let (code, message) = refused(&errors::request_refusal(&e));
            return answer.with_error_code(code).with_error_message(message);
        }
    };
    let cluster_id = service.metadata(ctx, Some(Vec::new())).map(|m| m.cluster_id).unwrap_or_default();
    let brokers = nodes
        .iter()
        .filter_map(|n| {
            let (host, port) = host_port(&n.kafka_address)?;
            Some(
                DescribeClusterBroker::default()
                    .with_broker_id(broker_id(n.node_id)?)
                    .with_host(StrBytes::from_string(host))
                    .with_port(port),
            )
        })
        .collect();
    answer
        .with_cluster_id(StrBytes::from_string(cluster_id))
        .with_controller_id(leader.and_then(broker_id).unwrap_or(BrokerId(-1)))
        .with_brokers(brokers)
}

/// Kafka's resource type of a topic in the config APIs.
const TOPIC_RESOURCE: i8 = 2;
/// `IncrementalAlterConfigs`' operations.
const SET: i8 = 0;
const DELETE: i8 = 1;
const APPEND: i8 = 2;
const SUBTRACT: i8 = 3;
/// `config_source` of a setting made for the topic (`DYNAMIC_TOPIC_CONFIG`).
const SOURCE_TOPIC: i8 = 1;
/// `config_source` of a default (`DEFAULT_CONFIG`).
const SOURCE_DEFAULT: i8 = 5;

/// A config resource that is not a topic: Rill's node settings are its configuration file, its
/// flags and its environment, not a Kafka resource.
fn not_a_topic(resource_type: i8) -> Refusal {
    Refusal::new(
        ErrorCode::InvalidRequest,
        format!(
            "config resource type {resource_type}: only topics (2) have settings over Kafka's protocol; a node's come from its configuration file (rill-server --help)"
        ),
    )
}

/// Kafka's `config_type` of each of Rill's topic settings (v3+): `INT` 3, `LONG` 5, `LIST` 7.
fn config_type(key: &str) -> i8 {
    match key {
        "min.insync.replicas" | "max.message.bytes" => 3,
        "cleanup.policy" => 7,
        _ => 5,
    }
}

/// `DescribeConfigs`, versions 1 to 4: each topic's settings (all, or the keys named), with
/// whether each was set for the topic or is the default.
pub fn describe_configs(
    service: &Service,
    ctx: &RequestContext,
    request: kafka_protocol::messages::DescribeConfigsRequest,
    version: i16,
) -> kafka_protocol::messages::DescribeConfigsResponse {
    use kafka_protocol::messages::describe_configs_response::{DescribeConfigsResourceResult, DescribeConfigsResult};
    let results = request
        .resources
        .into_iter()
        .map(|r| {
            let result = DescribeConfigsResult::default()
                .with_resource_type(r.resource_type)
                .with_resource_name(r.resource_name.clone());
            let settings = if r.resource_type == TOPIC_RESOURCE {
                service.topic_settings(ctx, &r.resource_name)
            } else {
                Err(not_a_topic(r.resource_type))
            };
            match settings {
                Ok(settings) => {
                    let wanted = |key: &str| {
                        r.configuration_keys.as_ref().is_none_or(|keys| keys.iter().any(|k| k.as_str() == key))
                    };
                    result.with_configs(
                        settings
                            .into_iter()
                            .filter(|s| wanted(&s.key))
                            .map(|s| {
                                DescribeConfigsResourceResult::default()
                                    .with_config_source(if s.default { SOURCE_DEFAULT } else { SOURCE_TOPIC })
                                    .with_config_type(if version >= 3 { config_type(&s.key) } else { 0 })
                                    .with_name(StrBytes::from_string(s.key))
                                    .with_value(Some(StrBytes::from_string(s.value)))
                            })
                            .collect(),
                    )
                }
                Err(refusal) => {
                    let (code, message) = refused(&refusal);
                    result.with_error_code(code).with_error_message(message)
                }
            }
        })
        .collect();
    kafka_protocol::messages::DescribeConfigsResponse::default().with_results(results)
}

/// `AlterConfigs`, the legacy one, versions 0 to 2: each topic's settings replaced by those
/// given — every setting not named returns to its default, as in Kafka (a null value counts as
/// not named) — or (with `validate_only`) checked. kafka-python's and confluent-kafka's
/// `alter_configs` send it.
pub async fn alter_configs(
    service: &Service,
    ctx: &RequestContext,
    request: kafka_protocol::messages::AlterConfigsRequest,
) -> kafka_protocol::messages::AlterConfigsResponse {
    use kafka_protocol::messages::alter_configs_response::AlterConfigsResourceResponse;
    let mut responses = Vec::with_capacity(request.resources.len());
    for r in request.resources {
        let answer = if r.resource_type != TOPIC_RESOURCE {
            Err(not_a_topic(r.resource_type))
        } else {
            let set =
                r.configs.iter().filter_map(|c| Some((c.name.to_string(), c.value.as_ref()?.to_string()))).collect();
            service.replace_topic_config(ctx, r.resource_name.to_string(), set, request.validate_only).await
        };
        let (code, message) = outcome(&answer);
        responses.push(
            AlterConfigsResourceResponse::default()
                .with_resource_type(r.resource_type)
                .with_resource_name(r.resource_name)
                .with_error_code(code)
                .with_error_message(message),
        );
    }
    kafka_protocol::messages::AlterConfigsResponse::default().with_responses(responses)
}

/// `IncrementalAlterConfigs`, versions 0 and 1: each topic's settings set (operation 0), reset
/// to their defaults (1), or — for `cleanup.policy`, Rill's one list — items appended (2) or
/// subtracted (3), all of a topic's at once (the list edits resolved against its settings when
/// the change applies), or (with `validate_only`) checked.
pub async fn incremental_alter_configs(
    service: &Service,
    ctx: &RequestContext,
    request: kafka_protocol::messages::IncrementalAlterConfigsRequest,
) -> kafka_protocol::messages::IncrementalAlterConfigsResponse {
    use kafka_protocol::messages::incremental_alter_configs_response::AlterConfigsResourceResponse;
    let mut responses = Vec::with_capacity(request.resources.len());
    for r in request.resources {
        let answer = async {
            if r.resource_type != TOPIC_RESOURCE {
                return Err(not_a_topic(r.resource_type));
            }
            let mut edits = ConfigEdits::default();
            for c in &r.configs {
                let entry = |value: &Option<StrBytes>| match value {
                    Some(value) => Ok((c.name.to_string(), value.to_string())),
                    None => Err(Refusal::new(ErrorCode::InvalidConfig, format!("{} is given without a value", c.name))),
                };
                match c.config_operation {
                    SET => edits.set.push(entry(&c.value)?),
                    DELETE => edits.reset.push(c.name.to_string()),
                    APPEND => edits.append.push(entry(&c.value)?),
                    SUBTRACT => edits.subtract.push(entry(&c.value)?),
                    op => {
                        return Err(Refusal::new(
                            ErrorCode::InvalidRequest,
                            format!(
                                "config operation {op} on {}: set (0), delete (1), append (2) or subtract (3)",
                                c.name
                            ),
                        ))
                    }
                }
            }
            let topic = r.resource_name.to_string();
            if request.validate_only {
                return service.validate_alter_topic_config(ctx, &topic, edits);
            }
            service.alter_topic_config(ctx, topic, edits).await.map(|_| ())
        }
        .await;
        let (code, message) = outcome(&answer);
        responses.push(
            AlterConfigsResourceResponse::default()
                .with_resource_type(r.resource_type)
                .with_resource_name(r.resource_name)
                .with_error_code(code)
                .with_error_message(message),
        );
    }
    kafka_protocol::messages::IncrementalAlterConfigsResponse::default().with_responses(responses)
}
