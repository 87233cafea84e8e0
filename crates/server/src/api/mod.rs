//! The gRPC services a node serves, all on one listener:
//!
//! * public: [`records::RecordsApi`] (Produce, Fetch, ListOffsets, InitProducerId),
//!   [`admin::AdminApi`] (topics, cluster, metadata, FindCoordinator), [`groups::GroupsApi`]
//!   (committed offsets);
//! * internal: `RaftTransport` (from `rill-raft`) and [`cluster::ClusterApi`].

pub mod admin;
pub mod cluster;
pub mod groups;
pub mod records;
pub mod routing;
pub mod status;

use std::future::Future;
use std::sync::Arc;

use rill_proto::admin::admin_server::AdminServer;
use rill_proto::groups::groups_server::GroupsServer;
use rill_proto::internal::cluster_server::ClusterServer;
use rill_proto::internal::raft_transport_server::RaftTransportServer;
use rill_proto::records::records_server::RecordsServer;
use rill_proto::MAX_GRPC_MESSAGE_BYTES;
use rill_raft::service::RaftService;

use crate::error::{Error, Result};
use crate::node::Node;

/// Serves every service on the node's listen address until `shutdown` completes, then stops
/// accepting and lets in-flight requests finish.
pub async fn serve(node: Arc<Node>, shutdown: impl Future<Output = ()> + Send + 'static) -> Result<()> {
    let addr = node.config().listen;
    let records = RecordsServer::new(records::RecordsApi::new(node.clone()))
        .max_decoding_message_size(MAX_GRPC_MESSAGE_BYTES)
        .max_encoding_message_size(MAX_GRPC_MESSAGE_BYTES);
    let admin = AdminServer::new(admin::AdminApi::new(node.clone()));
    let groups = GroupsServer::new(groups::GroupsApi::new(node.clone()));
    let raft = RaftTransportServer::new(RaftService::new(node.multi().clone()))
        .max_decoding_message_size(MAX_GRPC_MESSAGE_BYTES)
        .max_encoding_message_size(MAX_GRPC_MESSAGE_BYTES);
    let cluster = ClusterServer::new(cluster::ClusterApi::new(node.clone()));
    tonic::transport::Server::builder()
        .add_service(records)
        .add_service(admin)
        .add_service(groups)
        .add_service(raft)
        .add_service(cluster)
        .serve_with_shutdown(addr, shutdown)
        .await
        .map_err(|e| Error::Serve(format!("{addr}: {e}")))
}
