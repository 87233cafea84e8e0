//! The internal `Cluster` service: liveness, forwarded metadata proposals, replica status,
//! adding nodes, transaction markers.
//!
//! Every request that names its sender (`from_node`, a joining node's id) is refused unless the
//! caller's certificate names that node ([`rill_tls::Caller`]); metadata proposals and leader
//! elections are taken only from nodes of the cluster.

use std::sync::Arc;

use rill_meta::machine::encode_result;
use rill_meta::NodeInfo;
use rill_proto::internal::cluster_server::Cluster;
use rill_proto::internal::{
    AddNodeRequest, AddNodeResponse, AddTxnPartitionRequest, AddTxnPartitionResponse, AddTxnPartitionsRequest,
    AddTxnPartitionsResponse, ElectLeaderRequest, ElectLeaderResponse, PingRequest, PingResponse, ProposeMetaRequest,
    ProposeMetaResponse, ReplicaStatusRequest, ReplicaStatusResponse, WriteTxnMarkersRequest, WriteTxnMarkersResponse,
};
use rill_raft::NodeId;
use rill_tls::Caller;
use tonic::{Request, Response, Status};

use crate::errors;
use crate::join::{add_node, AddNodeError};
use crate::node::{LocalPropose, Node};
use crate::service::status::local_status;
use crate::service::Service;

/// The `Cluster` service.
pub struct ClusterApi {
    node: Arc<Node>,
    service: Service,
}

impl ClusterApi {
    /// The service for `node`, whose service layer is `service`.
    pub fn new(node: Arc<Node>, service: Service) -> Self {
        Self { node, service }
    }

    /// `Ok` when the caller of `request` may speak for node `from`.
    fn check_sender<T>(&self, request: &Request<T>, from: NodeId, what: &str) -> Result<(), Status> {
        Caller::of(request, self.node.internal_tls().is_some())
            .check(from, what)
            .map_err(|e| errors::impersonation_status(&e))
    }

    /// `Ok` when the caller of `request` is node `from` and `from` is a node of the cluster:
    /// a founding member, or a node the metadata registered (a joined one).
    fn check_member<T>(&self, request: &Request<T>, from: NodeId, rpc: &str) -> Result<(), Status> {
        self.check_sender(request, from, &format!("{rpc}'s from_node"))?;
        if self.node.config().members.contains_key(&from) || self.node.meta().nodes.contains_key(&from) {
            Ok(())
        } else {
            Err(errors::not_a_member_status(from, rpc))
        }
    }
}

#[tonic::async_trait]
impl Cluster for ClusterApi {
    async fn ping(&self, request: Request<PingRequest>) -> Result<Response<PingResponse>, Status> {
        let from = request.get_ref().from_node;
        self.check_sender(&request, from, "a ping's from_node")?;
        if let Some(reason) = self.node.multi().storage_failure() {
            return Err(errors::storage_failed_status(self.node.id(), &reason));
        }
        Ok(Response::new(PingResponse { node_id: self.node.id() }))
    }

    async fn propose_meta(
        &self,
        request: Request<ProposeMetaRequest>,
    ) -> Result<Response<ProposeMetaResponse>, Status> {
        self.check_member(&request, request.get_ref().from_node, "ProposeMeta")?;
        let req = request.into_inner();
        match self.node.propose_meta_local(req.command).await {
            Ok(result) => Ok(Response::new(ProposeMetaResponse {
                result: encode_result(&result),
                not_leader: false,
                leader: None,
            })),
            Err(LocalPropose::NotLeader(leader)) => {
                Ok(Response::new(ProposeMetaResponse { result: Default::default(), not_leader: true, leader }))
            }
            Err(LocalPropose::Stopped) => Err(errors::shutting_down_status()),
            Err(LocalPropose::Undecodable(e)) => {
                Err(errors::internal_status(format!("undecodable metadata answer: {e}")))
            }
        }
    }

    async fn replica_status(
        &self,
        request: Request<ReplicaStatusRequest>,
    ) -> Result<Response<ReplicaStatusResponse>, Status> {
        let replicas = request.into_inner().group_ids.into_iter().map(|g| local_status(&self.node, g)).collect();
        Ok(Response::new(ReplicaStatusResponse { replicas }))
    }

    async fn elect_leader(
        &self,
        request: Request<ElectLeaderRequest>,
    ) -> Result<Response<ElectLeaderResponse>, Status> {
        self.check_member(&request, request.get_ref().from_node, "ElectLeader")?;
        let group = request.into_inner().group_id;
        let Some(hosted) = self.node.replica(group) else {
            return Err(errors::group_not_hosted_status(group, self.node.id()));
        };
        let elected = hosted.replica().stand_for_election(crate::balance::ELECTION_TIMEOUT).await;
        Ok(Response::new(ElectLeaderResponse { elected }))
    }

    async fn add_node(&self, request: Request<AddNodeRequest>) -> Result<Response<AddNodeResponse>, Status> {
        // A node joins only as itself: its certificate must name the id it asks for.
        self.check_sender(&request, request.get_ref().node_id, "AddNode's node_id")?;
        let req = request.into_inner();
        let answer = |not_leader, leader, refused| Ok(Response::new(AddNodeResponse { not_leader, leader, refused }));
        let new = NodeInfo {
            id: req.node_id,
            addr: req.client_address,
            internal_addr: req.address,
            kafka_addr: req.kafka_address,
        };
        match add_node(&self.node, new).await {
            Ok(()) => answer(false, None, String::new()),
            Err(AddNodeError::NotLeader(leader)) => answer(true, leader, String::new()),
            Err(AddNodeError::Refused(reason)) => answer(false, None, reason),
            Err(AddNodeError::Retry(problem)) => Err(errors::retry_later_status(problem)),
        }
    }

    async fn write_txn_markers(
        &self,
        request: Request<WriteTxnMarkersRequest>,
    ) -> Result<Response<WriteTxnMarkersResponse>, Status> {
        self.check_member(&request, request.get_ref().from_node, "WriteTxnMarkers")?;
        let req = request.into_inner();
        if req.partitions.len() > crate::service::limits::MAX_PARTITIONS_PER_REQUEST {
            return Err(errors::too_many_entries_status(
                "WriteTxnMarkers",
                "partitions",
                req.partitions.len(),
                crate::service::limits::MAX_PARTITIONS_PER_REQUEST,
            ));
        }
        let results = self.service.write_txn_markers(req).await;
        Ok(Response::new(WriteTxnMarkersResponse { results }))
    }

    async fn write_dead_letter(
        &self,
        request: Request<rill_proto::internal::WriteDeadLetterRequest>,
    ) -> Result<Response<rill_proto::internal::WriteDeadLetterResponse>, Status> {
        self.check_member(&request, request.get_ref().from_node, "WriteDeadLetter")?;
        Ok(Response::new(self.service.write_dead_letter(request.into_inner()).await))
    }

    async fn add_txn_partition(
        &self,
        request: Request<AddTxnPartitionRequest>,
    ) -> Result<Response<AddTxnPartitionResponse>, Status> {
        self.check_member(&request, request.get_ref().from_node, "AddTxnPartition")?;
        Ok(Response::new(self.service.add_txn_partition(request.into_inner()).await))
    }

    async fn add_txn_partitions(
        &self,
        request: Request<AddTxnPartitionsRequest>,
    ) -> Result<Response<AddTxnPartitionsResponse>, Status> {
        self.check_member(&request, request.get_ref().from_node, "AddTxnPartitions")?;
        let req = request.into_inner();
        // Each ask names one partition (or group): the produce path's bound on partitions.
        crate::service::limits::check_counts("AddTxnPartitions", 0, req.asks.len())
            .map_err(|e| crate::api::request_status(&e))?;
        let answers = futures::future::join_all(req.asks.into_iter().map(|ask| self.service.add_txn_partition(ask)));
        Ok(Response::new(AddTxnPartitionsResponse { answers: answers.await }))
    }
}
