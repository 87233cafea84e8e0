//! The public `Admin` service: topics, records deletion, the cluster, routing metadata and
//! coordinators — each decoded into a [`Service`] call and its answer encoded.

use rill_meta::{ConfigEdits, PartitionKind};
use rill_proto::admin::admin_server::Admin;
use rill_proto::admin::{
    AdmitNodeRequest, AdmitNodeResponse, AlterTopicConfigRequest, AlterTopicConfigResponse, CoordinatorKind,
    CreatePartitionsRequest, CreatePartitionsResponse, CreateTopicRequest, CreateTopicResponse,
    DeleteRecordsPartitionResult, DeleteRecordsRequest, DeleteRecordsResponse, DeleteRecordsTopicResult,
    DeleteTopicRequest, DeleteTopicResponse, DescribeClusterRequest, DescribeClusterResponse, DescribeTopicRequest,
    DescribeTopicResponse, FindCoordinatorRequest, FindCoordinatorResponse, ListTopicsRequest, ListTopicsResponse,
    MetadataRequest, MetadataResponse, NodeDescription, PartitionDescription, PartitionMetadata, TopicConfigEntry,
    TopicDescription, TopicMetadata, TopicSummary,
};
use rill_proto::common::{ErrorCode, LeaderHint};
use tonic::{Request, Response, Status};

use crate::api::rules::{context, rpc};
use crate::api::{error_of, request_status};
use crate::errors::{self, Refusal};
use crate::service::topics as svc;
use crate::service::{Answer, Service};

/// The `Admin` service.
pub struct AdminApi {
    service: Service,
}

impl AdminApi {
    /// The service over `service`.
    pub fn new(service: Service) -> Self {
        Self { service }
    }
}

fn topic_description(t: svc::TopicDescription) -> TopicDescription {
    TopicDescription {
        internal: t.kind.is_internal(),
        kind: t.kind.name().to_string(),
        name: t.name,
        topic_id: bytes::Bytes::copy_from_slice(&t.topic_id),
        partitions: t.partitions.into_iter().map(partition_description).collect(),
        configs: t.configs.into_iter().map(|(key, value)| TopicConfigEntry { key, value }).collect(),
    }
}

fn partition_description(p: svc::PartitionDescription) -> PartitionDescription {
    match p.leader {
        Ok(l) => PartitionDescription {
            partition: p.partition,
            leader: l.leader,
            replicas: p.replicas,
            isr: l.isr,
            log_start_offset: l.log_start_offset,
            high_watermark: l.high_watermark,
            log_end_offset: l.log_end_offset,
            error_code: ErrorCode::None as i32,
            error_message: String::new(),
            quiescent: l.quiescent,
            retained_bytes: l.retained_bytes,
            stored_from_offset: l.stored_from_offset,
            cleaned_to_offset: l.cleaned_to_offset,
        },
        Err(e) => PartitionDescription {
            partition: p.partition,
            leader: None,
            replicas: p.replicas,
            isr: Vec::new(),
            log_start_offset: -1,
            high_watermark: -1,
            log_end_offset: -1,
            error_code: e.code as i32,
            error_message: e.message,
            quiescent: false,
            retained_bytes: 0,
            stored_from_offset: -1,
            cleaned_to_offset: -1,
        },
    }
}

fn node_description(n: svc::NodeDescription) -> NodeDescription {
    NodeDescription {
        node_id: n.node_id,
        address: n.address,
        alive: n.alive,
        metadata_voter: n.metadata_voter,
        storage_failure: n.storage_failure,
    }
}

/// A topic answer's error code, message and described topic.
fn described(answer: Answer<svc::TopicDescription>) -> (i32, String, Option<TopicDescription>) {
    let (error_code, error_message, _) = error_of(&answer);
    (error_code, error_message, answer.ok().map(topic_description))
}

fn find_error(e: Refusal) -> FindCoordinatorResponse {
    FindCoordinatorResponse { error_code: e.code as i32, error_message: e.message, coordinator: None, partition: 0 }
}

#[tonic::async_trait]
impl Admin for AdminApi {
    async fn create_topic(
        &self,
        request: Request<CreateTopicRequest>,
    ) -> Result<Response<CreateTopicResponse>, Status> {
        let ctx = context(&request, rpc::CREATE_TOPIC)?;
        let req = request.into_inner();
        let input = svc::CreateTopic {
            name: req.name,
            partitions: req.partitions,
            replication_factor: req.replication_factor,
            configs: req.configs.into_iter().map(|c| (c.key, c.value)).collect(),
        };
        let (error_code, error_message, topic) = described(self.service.create_topic(&ctx, input).await);
        Ok(Response::new(CreateTopicResponse { error_code, error_message, topic }))
    }

    async fn delete_topic(
        &self,
        request: Request<DeleteTopicRequest>,
    ) -> Result<Response<DeleteTopicResponse>, Status> {
        let ctx = context(&request, rpc::DELETE_TOPIC)?;
        let (error_code, error_message, _) =
            error_of(&self.service.delete_topic(&ctx, request.into_inner().name).await);
        Ok(Response::new(DeleteTopicResponse { error_code, error_message }))
    }

    async fn alter_topic_config(
        &self,
        request: Request<AlterTopicConfigRequest>,
    ) -> Result<Response<AlterTopicConfigResponse>, Status> {
        let ctx = context(&request, rpc::ALTER_TOPIC_CONFIG)?;
        let req = request.into_inner();
        let set = req.set.into_iter().map(|c| (c.key, c.value)).collect();
        let answer = self.service.alter_topic_config(&ctx, req.name, ConfigEdits::new(set, req.reset)).await;
        let (error_code, error_message, topic) = described(answer);
        Ok(Response::new(AlterTopicConfigResponse { error_code, error_message, topic }))
    }

    async fn create_partitions(
        &self,
        request: Request<CreatePartitionsRequest>,
    ) -> Result<Response<CreatePartitionsResponse>, Status> {
        let ctx = context(&request, rpc::CREATE_PARTITIONS)?;
        let req = request.into_inner();
        let (error_code, error_message, topic) =
            described(self.service.create_partitions(&ctx, req.name, req.total).await);
        Ok(Response::new(CreatePartitionsResponse { error_code, error_message, topic }))
    }

    async fn list_topics(&self, request: Request<ListTopicsRequest>) -> Result<Response<ListTopicsResponse>, Status> {
        let ctx = context(&request, rpc::LIST_TOPICS)?;
        let topics = self
            .service
            .list_topics(&ctx, request.into_inner().include_internal)
            .into_iter()
            .map(|t| TopicSummary {
                name: t.name,
                topic_id: bytes::Bytes::copy_from_slice(&t.topic_id),
                partitions: t.partitions,
                replication_factor: t.replication_factor,
                internal: t.internal,
            })
            .collect();
        Ok(Response::new(ListTopicsResponse { topics }))
    }

    async fn describe_topic(
        &self,
        request: Request<DescribeTopicRequest>,
    ) -> Result<Response<DescribeTopicResponse>, Status> {
        let ctx = context(&request, rpc::DESCRIBE_TOPIC)?;
        let name = request.into_inner().name;
        let (error_code, error_message, topic) = described(self.service.describe_topic(&ctx, &name).await);
        Ok(Response::new(DescribeTopicResponse { error_code, error_message, topic }))
    }

    async fn describe_cluster(
        &self,
        request: Request<DescribeClusterRequest>,
    ) -> Result<Response<DescribeClusterResponse>, Status> {
        let ctx = context(&request, rpc::DESCRIBE_CLUSTER)?;
        let (nodes, metadata_leader) = self.service.describe_cluster(&ctx).await.map_err(|e| request_status(&e))?;
        let nodes = nodes.into_iter().map(node_description).collect();
        Ok(Response::new(DescribeClusterResponse { nodes, metadata_leader }))
    }

    async fn metadata(&self, request: Request<MetadataRequest>) -> Result<Response<MetadataResponse>, Status> {
        let ctx = context(&request, rpc::METADATA)?;
        // No names: every topic the caller may describe.
        let names = Some(request.into_inner().topics).filter(|names| !names.is_empty());
        let metadata = self.service.metadata(&ctx, names).map_err(|e| request_status(&e))?;
        let topics = metadata
            .topics
            .into_iter()
            .map(|(name, layout)| match layout {
                Ok(t) => TopicMetadata {
                    name,
                    error_code: ErrorCode::None as i32,
                    error_message: String::new(),
                    topic_id: bytes::Bytes::copy_from_slice(&t.topic_id),
                    internal: t.internal,
                    partitions: t
                        .partitions
                        .into_iter()
                        .map(|p| PartitionMetadata {
                            partition: p.partition,
                            leader: p.leader.map(|(id, _)| id),
                            replicas: p.replicas,
                        })
                        .collect(),
                },
                Err(e) => TopicMetadata {
                    name,
                    error_code: e.code as i32,
                    error_message: e.message,
                    partitions: Vec::new(),
                    topic_id: bytes::Bytes::new(),
                    internal: false,
                },
            })
            .collect();
        let nodes = metadata.nodes.into_iter().map(node_description).collect();
        Ok(Response::new(MetadataResponse { nodes, topics }))
    }

    async fn admit_node(&self, request: Request<AdmitNodeRequest>) -> Result<Response<AdmitNodeResponse>, Status> {
        let ctx = context(&request, rpc::ADMIT_NODE)?;
        let AdmitNodeRequest { node_id, revoke } = request.into_inner();
        let (error_code, error_message, _) = error_of(&self.service.admit_node(&ctx, node_id, revoke).await);
        Ok(Response::new(AdmitNodeResponse { error_code, error_message }))
    }

    async fn delete_records(
        &self,
        request: Request<DeleteRecordsRequest>,
    ) -> Result<Response<DeleteRecordsResponse>, Status> {
        let ctx = context(&request, rpc::DELETE_RECORDS)?;
        let req = request.into_inner();
        let topics = req
            .topics
            .into_iter()
            .map(|t| svc::DeleteRecordsTopic {
                topic: t.topic,
                topic_id: t.topic_id,
                partitions: t.partitions.iter().map(|p| (p.partition, p.offset)).collect(),
            })
            .collect();
        let answers =
            self.service.delete_records(&ctx, req.timeout_ms, topics).await.map_err(|e| request_status(&e))?;
        let topics = answers
            .into_iter()
            .map(|t| DeleteRecordsTopicResult {
                topic: t.topic,
                partitions: t
                    .partitions
                    .into_iter()
                    .map(|(partition, answer)| match answer {
                        Ok(low_watermark) => DeleteRecordsPartitionResult {
                            partition,
                            error_code: ErrorCode::None as i32,
                            error_message: String::new(),
                            low_watermark: low_watermark as i64,
                            leader: None,
                        },
                        Err(e) => DeleteRecordsPartitionResult {
                            partition,
                            error_code: e.code as i32,
                            error_message: e.message,
                            low_watermark: -1,
                            leader: e.leader,
                        },
                    })
                    .collect(),
            })
            .collect();
        Ok(Response::new(DeleteRecordsResponse { topics }))
    }

    async fn find_coordinator(
        &self,
        request: Request<FindCoordinatorRequest>,
    ) -> Result<Response<FindCoordinatorResponse>, Status> {
        let ctx = context(&request, rpc::FIND_COORDINATOR)?;
        let req = request.into_inner();
        let kind = match CoordinatorKind::try_from(req.kind) {
            Ok(CoordinatorKind::Group) => PartitionKind::ConsumerOffsets,
            Ok(CoordinatorKind::Transaction) => PartitionKind::TransactionState,
            Err(_) => {
                let e = errors::invalid_request(format!("unknown coordinator kind {}", req.kind));
                return Ok(Response::new(find_error(e)));
            }
        };
        Ok(Response::new(match self.service.find_coordinator(&ctx, kind, &req.key) {
            Ok(c) => FindCoordinatorResponse {
                error_code: ErrorCode::None as i32,
                error_message: String::new(),
                coordinator: Some(LeaderHint { node_id: c.node_id, address: c.address }),
                partition: c.partition,
            },
            Err(e) => find_error(e),
        }))
    }
}
