//! The public `Admin` service: topics, cluster description, routing metadata.

use std::sync::Arc;
use std::time::Duration;

use futures::future::join_all;
use rill_meta::{MetaCommand, MetaResult, MetaState, PartitionKind, TopicMeta};
use rill_proto::admin::admin_server::Admin;
use rill_proto::admin::{
    AdmitNodeRequest, AdmitNodeResponse, AlterTopicConfigRequest, AlterTopicConfigResponse, CoordinatorKind,
    CreatePartitionsRequest, CreatePartitionsResponse, CreateTopicRequest, CreateTopicResponse, DeleteRecordsPartition,
    DeleteRecordsPartitionResult, DeleteRecordsRequest, DeleteRecordsResponse, DeleteRecordsTopicResult,
    DeleteTopicRequest, DeleteTopicResponse, DescribeClusterRequest, DescribeClusterResponse, DescribeTopicRequest,
    DescribeTopicResponse, FindCoordinatorRequest, FindCoordinatorResponse, ListTopicsRequest, ListTopicsResponse,
    MetadataRequest, MetadataResponse, NodeDescription, PartitionDescription, PartitionMetadata, TopicConfigEntry,
    TopicDescription, TopicMetadata, TopicSummary,
};
use rill_proto::common::{ErrorCode, LeaderHint};
use rill_proto::internal::PingRequest;
use tonic::{Request, Response, Status};

use crate::api::authz::{rpc, Authorization, ResourceType};
use crate::api::limits::{self, SeenPartitions};
use crate::api::routing::local_replica;
use crate::api::status::{gather, PartitionLive};
use crate::errors::{self, WireError};
use crate::node::Node;

/// How long CreateTopic waits for the metadata to be usable on this node.
const META_WAIT: Duration = Duration::from_secs(10);
/// How long a liveness probe may take.
const PING_TIMEOUT: Duration = Duration::from_millis(500);
/// A node heard from (its pings) within this long counts as alive in `Metadata` answers.
const RECENTLY_HEARD: Duration = Duration::from_secs(1);
/// DeleteRecords' wait for each deletion to be committed when the request gives none.
const DEFAULT_DELETE_RECORDS_TIMEOUT: Duration = Duration::from_secs(30);
/// Longest DeleteRecords wait a request may ask for.
const MAX_DELETE_RECORDS_TIMEOUT: Duration = Duration::from_secs(300);

/// The `Admin` service.
pub struct AdminApi {
    node: Arc<Node>,
    authz: Authorization,
}

impl AdminApi {
    /// The service for `node`.
    pub fn new(node: Arc<Node>, authz: Authorization) -> Self {
        Self { node, authz }
    }

    async fn describe(&self, topic: &TopicMeta) -> TopicDescription {
        let live = gather(&self.node, &[topic]).await;
        let partitions = topic
            .partitions
            .iter()
            .enumerate()
            .map(|(i, p)| {
                let l = live.get(&p.group).cloned().unwrap_or_default();
                describe_partition(&topic.name, i as u32, &p.replicas, &l)
            })
            .collect();
        TopicDescription {
            name: topic.name.clone(),
            topic_id: bytes::Bytes::copy_from_slice(&topic.topic_id),
            kind: topic.kind.name().to_string(),
            internal: topic.is_internal(),
            partitions,
            configs: topic.config.entries().into_iter().map(|(key, value)| TopicConfigEntry { key, value }).collect(),
        }
    }

    /// Every known node with a fresh liveness probe (a node that has not announced its client
    /// address yet is listed with an empty one).
    async fn probe_nodes(&self) -> Vec<NodeDescription> {
        let nodes = self.node.nodes();
        let voters = self.node.meta_voters();
        let probes = nodes.iter().map(|(id, addr)| {
            let metadata_voter = voters.contains(id);
            async move {
                let (alive, storage_failure) = self.alive(*id).await;
                NodeDescription { node_id: *id, address: addr.clone(), alive, metadata_voter, storage_failure }
            }
        });
        join_all(probes).await
    }

    /// Every node a client can reach (its client address is known), alive when this node heard
    /// from it within the last second (the node-level pings): no request is sent.
    fn known_nodes(&self) -> Vec<NodeDescription> {
        let voters = self.node.meta_voters();
        let liveness = self.node.multi().transport().liveness();
        self.node
            .nodes()
            .into_iter()
            .filter(|(_, address)| !address.is_empty())
            .map(|(id, address)| {
                let storage_failure = if id == self.node.id() {
                    self.node.multi().storage_failure().unwrap_or_default()
                } else {
                    String::new()
                };
                NodeDescription {
                    node_id: id,
                    address,
                    alive: (id == self.node.id() && storage_failure.is_empty())
                        || liveness.silent_for(id) < RECENTLY_HEARD,
                    metadata_voter: voters.contains(&id),
                    storage_failure,
                }
            })
            .collect()
    }

    /// Ids of the nodes that answer a probe now.
    async fn live_nodes(&self) -> Vec<u64> {
        self.probe_nodes().await.into_iter().filter(|n| n.alive).map(|n| n.node_id).collect()
    }

    /// Whether node `id` answers a ping now, and why its storage failed if it says so (a node
    /// whose storage failed answers pings with the reason: see `errors::storage_failed_status`).
    async fn alive(&self, id: u64) -> (bool, String) {
        if id == self.node.id() {
            let failure = self.node.multi().storage_failure();
            return (failure.is_none(), failure.unwrap_or_default());
        }
        let Some(mut client) = self.node.cluster_client(id) else {
            return (false, String::new());
        };
        match rill_rt::timeout(PING_TIMEOUT, client.ping(PingRequest { from_node: self.node.id() })).await {
            Ok(Ok(_)) => (true, String::new()),
            Ok(Err(status)) if errors::is_storage_failed_status(&status) => (false, status.message().to_string()),
            _ => (false, String::new()),
        }
    }
}

fn describe_partition(topic: &str, partition: u32, replicas: &[u64], live: &PartitionLive) -> PartitionDescription {
    match &live.leader {
        Some(l) => PartitionDescription {
            partition,
            leader: l.leader,
            replicas: replicas.to_vec(),
            isr: l.isr.clone(),
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
        None => PartitionDescription {
            partition,
            leader: None,
            replicas: replicas.to_vec(),
            isr: Vec::new(),
            log_start_offset: -1,
            high_watermark: -1,
            log_end_offset: -1,
            error_code: ErrorCode::LeaderNotAvailable as i32,
            error_message: if live.unreachable.is_empty() {
                format!("no leader for {topic}/{partition} yet: an election is in progress")
            } else {
                format!(
                    "no leader for {topic}/{partition}: {} of {} replicas unreachable (nodes {:?})",
                    live.unreachable.len(),
                    replicas.len(),
                    live.unreachable
                )
            },
            quiescent: false,
            retained_bytes: 0,
            stored_from_offset: -1,
            cleaned_to_offset: -1,
        },
    }
}

impl AdminApi {
    /// Proposes a change to an existing topic and waits until this node has applied it.
    /// `pred` tells, from the applied metadata, that the change is visible here.
    async fn change_topic(
        &self,
        cmd: MetaCommand,
        visible: impl Fn(&MetaState) -> bool,
    ) -> Result<Option<TopicMeta>, WireError> {
        let topic = match self.node.propose_meta(&cmd).await {
            Err(e) => return Err(errors::propose(&e)),
            Ok(MetaResult::Refused(e)) => return Err(errors::meta(&e)),
            Ok(MetaResult::TopicDeleted(_)) => None,
            Ok(MetaResult::TopicUpdated(t)) | Ok(MetaResult::TopicCreated(t)) => Some(t),
            Ok(other) => return Err(errors::unexpected_meta_answer(&other)),
        };
        self.node.wait_for_meta(META_WAIT, visible).await;
        Ok(topic)
    }
}

fn create_error(e: WireError) -> CreateTopicResponse {
    CreateTopicResponse { error_code: e.code as i32, error_message: e.message, topic: None }
}

#[tonic::async_trait]
impl Admin for AdminApi {
    async fn create_topic(
        &self,
        request: Request<CreateTopicRequest>,
    ) -> Result<Response<CreateTopicResponse>, Status> {
        let principal = self.authz.principal(&request);
        self.authz.authorize(&principal, rpc::CREATE_TOPIC, request.get_ref())?;
        let req = request.into_inner();
        let configs: Vec<(String, String)> = req.configs.into_iter().map(|c| (c.key, c.value)).collect();
        // The members register themselves right after the first election.
        if !self.node.wait_for_meta(META_WAIT, |m: &MetaState| !m.nodes.is_empty()).await {
            return Ok(Response::new(create_error(errors::metadata_not_ready())));
        }
        // Fail fast on what this node can already see; the leader checks again when applying.
        let live_nodes = self.live_nodes().await;
        if let Err(e) = self
            .node
            .meta()
            .check_create(&req.name, req.partitions, req.replication_factor, &configs, &live_nodes)
            .and_then(|c| c.check_request_bounds())
        {
            return Ok(Response::new(create_error(errors::meta(&e))));
        }
        let cmd = MetaCommand::CreateTopic {
            live_nodes,
            topic_id: crate::node::new_topic_id(),
            kind: PartitionKind::Records,
            name: req.name.clone(),
            partitions: req.partitions,
            replication_factor: req.replication_factor,
            configs,
        };
        let topic = match self.node.propose_meta(&cmd).await {
            Err(e) => return Ok(Response::new(create_error(errors::propose(&e)))),
            Ok(MetaResult::Refused(e)) => return Ok(Response::new(create_error(errors::meta(&e)))),
            Ok(MetaResult::TopicCreated(t)) => t,
            Ok(other) => return Ok(Response::new(create_error(errors::unexpected_meta_answer(&other)))),
        };
        // Make the topic visible on this node before answering, so a follow-up request here sees it.
        let name = topic.name.clone();
        self.node.wait_for_meta(META_WAIT, |m| m.topics.contains_key(&name)).await;
        let description = self.describe(&topic).await;
        Ok(Response::new(CreateTopicResponse {
            error_code: ErrorCode::None as i32,
            error_message: String::new(),
            topic: Some(description),
        }))
    }

    async fn delete_topic(
        &self,
        request: Request<DeleteTopicRequest>,
    ) -> Result<Response<DeleteTopicResponse>, Status> {
        let principal = self.authz.principal(&request);
        self.authz.authorize(&principal, rpc::DELETE_TOPIC, request.get_ref())?;
        let name = request.into_inner().name;
        if self.node.topic(&name).is_none() {
            let e = errors::unknown_topic(&name);
            return Ok(Response::new(DeleteTopicResponse { error_code: e.code as i32, error_message: e.message }));
        }
        let n = name.clone();
        let answer =
            match self.change_topic(MetaCommand::DeleteTopic { name }, move |m| !m.topics.contains_key(&n)).await {
                Ok(_) => DeleteTopicResponse { error_code: ErrorCode::None as i32, error_message: String::new() },
                Err(e) => DeleteTopicResponse { error_code: e.code as i32, error_message: e.message },
            };
        Ok(Response::new(answer))
    }

    async fn alter_topic_config(
        &self,
        request: Request<AlterTopicConfigRequest>,
    ) -> Result<Response<AlterTopicConfigResponse>, Status> {
        let principal = self.authz.principal(&request);
        self.authz.authorize(&principal, rpc::ALTER_TOPIC_CONFIG, request.get_ref())?;
        let req = request.into_inner();
        let set: Vec<(String, String)> = req.set.into_iter().map(|c| (c.key, c.value)).collect();
        let fail = |e: WireError| AlterTopicConfigResponse {
            error_code: e.code as i32,
            error_message: e.message,
            topic: None,
        };
        let checked = self.node.meta().check_alter_config(&req.name, &set, &req.reset);
        let config = match checked.and_then(|c| c.check_request_bounds().map(|()| c)) {
            Ok(c) => c,
            Err(e) => return Ok(Response::new(fail(errors::meta(&e)))),
        };
        let (name, topic_name) = (req.name.clone(), req.name.clone());
        let cmd = MetaCommand::AlterTopicConfig { name: req.name, set, reset: req.reset };
        let visible = move |m: &MetaState| m.topics.get(&name).is_some_and(|t| t.config == config);
        let answer = match self.change_topic(cmd, visible).await {
            Ok(Some(t)) => AlterTopicConfigResponse {
                error_code: ErrorCode::None as i32,
                error_message: String::new(),
                topic: Some(self.describe(&t).await),
            },
            Ok(None) => fail(errors::topic_vanished(&topic_name, "being altered")),
            Err(e) => fail(e),
        };
        Ok(Response::new(answer))
    }

    async fn create_partitions(
        &self,
        request: Request<CreatePartitionsRequest>,
    ) -> Result<Response<CreatePartitionsResponse>, Status> {
        let principal = self.authz.principal(&request);
        self.authz.authorize(&principal, rpc::CREATE_PARTITIONS, request.get_ref())?;
        let req = request.into_inner();
        let fail = |e: WireError| CreatePartitionsResponse {
            error_code: e.code as i32,
            error_message: e.message,
            topic: None,
        };
        let live_nodes = self.live_nodes().await;
        if let Err(e) = self.node.meta().check_create_partitions(&req.name, req.total, &live_nodes) {
            return Ok(Response::new(fail(errors::meta(&e))));
        }
        let (name, topic_name, total) = (req.name.clone(), req.name.clone(), req.total as usize);
        let visible = move |m: &MetaState| m.topics.get(&name).is_some_and(|t| t.partitions.len() >= total);
        let answer = match self
            .change_topic(MetaCommand::CreatePartitions { name: req.name, total: req.total, live_nodes }, visible)
            .await
        {
            Ok(Some(t)) => CreatePartitionsResponse {
                error_code: ErrorCode::None as i32,
                error_message: String::new(),
                topic: Some(self.describe(&t).await),
            },
            Ok(None) => fail(errors::topic_vanished(&topic_name, "growing")),
            Err(e) => fail(e),
        };
        Ok(Response::new(answer))
    }

    async fn list_topics(&self, request: Request<ListTopicsRequest>) -> Result<Response<ListTopicsResponse>, Status> {
        let principal = self.authz.principal(&request);
        self.authz.authorize(&principal, rpc::LIST_TOPICS, request.get_ref())?;
        let include_internal = request.into_inner().include_internal;
        let topics = self
            .node
            .meta()
            .topics
            .values()
            .filter(|t| include_internal || !t.is_internal())
            .filter(|t| self.authz.lists(&principal, rpc::LIST_TOPICS, ResourceType::Topic, &t.name))
            .map(|t| TopicSummary {
                internal: t.is_internal(),
                name: t.name.clone(),
                topic_id: bytes::Bytes::copy_from_slice(&t.topic_id),
                partitions: t.partitions.len() as u32,
                replication_factor: t.replication_factor,
            })
            .collect();
        Ok(Response::new(ListTopicsResponse { topics }))
    }

    async fn describe_topic(
        &self,
        request: Request<DescribeTopicRequest>,
    ) -> Result<Response<DescribeTopicResponse>, Status> {
        let principal = self.authz.principal(&request);
        self.authz.authorize(&principal, rpc::DESCRIBE_TOPIC, request.get_ref())?;
        let name = request.into_inner().name;
        let Some(topic) = self.node.topic(&name) else {
            let e = errors::unknown_topic(&name);
            return Ok(Response::new(DescribeTopicResponse {
                error_code: e.code as i32,
                error_message: e.message,
                topic: None,
            }));
        };
        let description = self.describe(&topic).await;
        Ok(Response::new(DescribeTopicResponse {
            error_code: ErrorCode::None as i32,
            error_message: String::new(),
            topic: Some(description),
        }))
    }

    async fn describe_cluster(
        &self,
        request: Request<DescribeClusterRequest>,
    ) -> Result<Response<DescribeClusterResponse>, Status> {
        let principal = self.authz.principal(&request);
        self.authz.authorize(&principal, rpc::DESCRIBE_CLUSTER, request.get_ref())?;
        let nodes = self.probe_nodes().await;
        Ok(Response::new(DescribeClusterResponse { nodes, metadata_leader: self.node.meta_leader() }))
    }

    async fn metadata(&self, request: Request<MetadataRequest>) -> Result<Response<MetadataResponse>, Status> {
        let principal = self.authz.principal(&request);
        let req = request.into_inner();
        limits::check_counts("Metadata", req.topics.len(), 0)?;
        self.authz.authorize(&principal, rpc::METADATA, &req)?;
        // A node whose storage failed knows no current leaders (it left every group): clients
        // are sent to another node, as to one that is down.
        if let Some(reason) = self.node.multi().storage_failure() {
            return Err(errors::storage_failed_status(self.node.id(), &reason));
        }
        let meta = self.node.meta();
        // Every client topic the caller may describe, unless topics are named (an internal
        // topic only when named).
        let names: Vec<String> = if req.topics.is_empty() {
            meta.topics
                .values()
                .filter(|t| !t.is_internal())
                .filter(|t| self.authz.lists(&principal, rpc::METADATA, ResourceType::Topic, &t.name))
                .map(|t| t.name.clone())
                .collect()
        } else {
            limits::distinct(req.topics)
        };
        // Answered from what this node knows (its replicas, the peers' leadership reports, the
        // pings): no request to other nodes, so a client may ask as often as it likes.
        let topics = names
            .iter()
            .map(|name| match meta.topics.get(name) {
                None => {
                    let e = errors::unknown_topic(name);
                    TopicMetadata {
                        name: name.clone(),
                        error_code: e.code as i32,
                        error_message: e.message,
                        partitions: Vec::new(),
                        topic_id: bytes::Bytes::new(),
                        internal: false,
                    }
                }
                Some(t) => TopicMetadata {
                    name: name.clone(),
                    topic_id: bytes::Bytes::copy_from_slice(&t.topic_id),
                    internal: t.is_internal(),
                    error_code: ErrorCode::None as i32,
                    error_message: String::new(),
                    partitions: t
                        .partitions
                        .iter()
                        .enumerate()
                        .map(|(i, p)| PartitionMetadata {
                            partition: i as u32,
                            leader: self.node.leader_of(p.group),
                            replicas: p.replicas.clone(),
                        })
                        .collect(),
                },
            })
            .collect();
        Ok(Response::new(MetadataResponse { nodes: self.known_nodes(), topics }))
    }

    async fn admit_node(&self, request: Request<AdmitNodeRequest>) -> Result<Response<AdmitNodeResponse>, Status> {
        let principal = self.authz.principal(&request);
        self.authz.authorize(&principal, rpc::ADMIT_NODE, request.get_ref())?;
        let AdmitNodeRequest { node_id: id, revoke } = request.into_inner();
        let answer = |e: Option<WireError>| {
            let e = e.unwrap_or_else(|| WireError::new(ErrorCode::None, String::new()));
            Ok(Response::new(AdmitNodeResponse { error_code: e.code as i32, error_message: e.message }))
        };
        if id == 0 {
            return answer(Some(errors::invalid_request("node ids start at 1")));
        }
        let cmd = MetaCommand::AdmitNode { id, revoke };
        match self.node.propose_meta(&cmd).await {
            Err(e) => return answer(Some(errors::propose(&e))),
            Ok(MetaResult::AdmissionChanged) => {}
            Ok(MetaResult::Refused(e)) => return answer(Some(errors::meta(&e))),
            Ok(other) => return answer(Some(errors::unexpected_meta_answer(&other))),
        }
        // Visible here before answering (a registered node needs no admission).
        self.node.wait_for_meta(META_WAIT, |m| m.admitted.contains(&id) != revoke || m.nodes.contains_key(&id)).await;
        answer(None)
    }

    async fn delete_records(
        &self,
        request: Request<DeleteRecordsRequest>,
    ) -> Result<Response<DeleteRecordsResponse>, Status> {
        let principal = self.authz.principal(&request);
        let req = request.into_inner();
        limits::check_counts("DeleteRecords", req.topics.len(), req.topics.iter().map(|t| t.partitions.len()).sum())?;
        self.authz.authorize(&principal, rpc::DELETE_RECORDS, &req)?;
        let timeout = match req.timeout_ms {
            0 => DEFAULT_DELETE_RECORDS_TIMEOUT,
            ms => Duration::from_millis(u64::from(ms)).min(MAX_DELETE_RECORDS_TIMEOUT),
        };
        let mut seen = SeenPartitions::default();
        let topics = req.topics.into_iter().map(|t| {
            let firsts: Vec<bool> = t.partitions.iter().map(|p| seen.first(&t.topic, p.partition)).collect();
            async move {
                let parts = t.partitions.iter().zip(firsts).map(|(p, first)| {
                    let (topic, topic_id) = (&t.topic, &t.topic_id);
                    async move {
                        if !first {
                            return delete_records_error(p, errors::duplicate_partition(topic, p.partition));
                        }
                        self.delete_records_one(topic, topic_id, p, timeout).await
                    }
                });
                let partitions = join_all(parts).await;
                DeleteRecordsTopicResult { topic: t.topic.clone(), partitions }
            }
        });
        Ok(Response::new(DeleteRecordsResponse { topics: join_all(topics).await }))
    }

    async fn find_coordinator(
        &self,
        request: Request<FindCoordinatorRequest>,
    ) -> Result<Response<FindCoordinatorResponse>, Status> {
        let principal = self.authz.principal(&request);
        self.authz.authorize(&principal, rpc::FIND_COORDINATOR, request.get_ref())?;
        let req = request.into_inner();
        let kind = match CoordinatorKind::try_from(req.kind) {
            Ok(CoordinatorKind::Group) => PartitionKind::ConsumerOffsets,
            Ok(CoordinatorKind::Transaction) => PartitionKind::TransactionState,
            Err(_) => {
                return Ok(Response::new(find_error(errors::invalid_request(format!(
                    "unknown coordinator kind {}",
                    req.kind
                )))))
            }
        };
        let checked = match kind {
            PartitionKind::ConsumerOffsets => rill_coordinator::offsets::validate_group_id(&req.key),
            _ => rill_coordinator::transactions::validate(&req.key, 0).map(|_| ()),
        };
        if let Err(e) = checked {
            return Ok(Response::new(find_error(errors::coordinator(&e))));
        }
        let answer = match self.node.coordinator_partition(kind, &req.key) {
            None => find_error(errors::coordinator_not_created(kind.internal_topic().unwrap_or_default())),
            Some((partition, group)) => {
                match self.node.leader_of(group).and_then(|l| self.node.client_addr(l).map(|a| (l, a))) {
                    None => find_error(errors::coordinator_without_leader(
                        kind.internal_topic().unwrap_or_default(),
                        partition,
                    )),
                    Some((node_id, address)) => FindCoordinatorResponse {
                        error_code: ErrorCode::None as i32,
                        error_message: String::new(),
                        coordinator: Some(LeaderHint { node_id, address }),
                        partition,
                    },
                }
            }
        };
        Ok(Response::new(answer))
    }
}

impl AdminApi {
    async fn delete_records_one(
        &self,
        topic: &str,
        topic_id: &[u8],
        p: &DeleteRecordsPartition,
        timeout: Duration,
    ) -> DeleteRecordsPartitionResult {
        let replica = match local_replica(&self.node, topic, topic_id, p.partition) {
            Ok(r) => r,
            Err(e) => return delete_records_error(p, e),
        };
        let deleted = match rill_rt::timeout(timeout, replica.delete_records(p.offset)).await {
            Ok(r) => r,
            Err(_) => Err(rill_broker::PartitionError::Timeout {
                waited_ms: timeout.as_millis() as u64,
                what: "the deletion to be committed",
            }),
        };
        match deleted {
            Ok(low_watermark) => DeleteRecordsPartitionResult {
                partition: p.partition,
                error_code: ErrorCode::None as i32,
                error_message: String::new(),
                low_watermark: low_watermark as i64,
                leader: None,
            },
            Err(e) => delete_records_error(p, errors::partition(&e, |id| self.node.client_addr(id))),
        }
    }
}

fn delete_records_error(p: &DeleteRecordsPartition, e: WireError) -> DeleteRecordsPartitionResult {
    DeleteRecordsPartitionResult {
        partition: p.partition,
        error_code: e.code as i32,
        error_message: e.message,
        low_watermark: -1,
        leader: e.leader,
    }
}

fn find_error(e: WireError) -> FindCoordinatorResponse {
    FindCoordinatorResponse { error_code: e.code as i32, error_message: e.message, coordinator: None, partition: 0 }
}
