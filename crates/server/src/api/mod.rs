//! The gRPC listeners of a node:
//!
//! * the **client listener** (`listen`) serves only the public services, each handler decoding
//!   its request into one [`Service`] call with the request's context ([`rules::context`]) and
//!   encoding the answer — no rule of Rill's lives here: [`records::RecordsApi`] (Produce, Fetch,
//!   ListOffsets, InitProducerId), [`admin::AdminApi`] (topics, cluster, metadata,
//!   FindCoordinator), [`groups::GroupsApi`] (membership, committed offsets),
//!   [`transactions::TransactionsApi`] (adding to, ending, describing and aborting transactions),
//!   [`share::ShareApi`] (share groups' fetches, acknowledgements and settings);
//! * the **Kafka listener** (`kafka-listen`, when set) is [`crate::kafka`]: Kafka's wire
//!   protocol over the same [`Service`];
//! * the **internal listener** (`internal-listen`) serves only the node-to-node services:
//!   `RaftTransport` (from `rill-raft`) and [`cluster::ClusterApi`]. A client that reaches the
//!   client port cannot act as a node (docs/security.md).
//!
//! [`rules`] is the client listener's rule table (what each public RPC needs, for the service
//! layer's authorization decisions). [`ClientLimits`] — the bound on client connections open at
//! once ([`connections`]) and on the bytes of requests received and not yet answered
//! ([`inflight`]) — is made once per node and shared by every client listener, gRPC and Kafka
//! (real builds; the
//! client listener also caps concurrent requests per connection, `[limits]`).

pub mod admin;
pub mod cluster;
#[cfg(not(madsim))]
pub mod connections;
pub mod groups;
#[cfg(not(madsim))]
pub mod inflight;
pub mod records;
pub mod rules;
pub mod share;
pub mod transactions;

use std::future::Future;
use std::sync::Arc;

use futures::future::Either;
use futures::FutureExt;
use rill_proto::admin::admin_server::AdminServer;
use rill_proto::groups::groups_server::GroupsServer;
use rill_proto::internal::cluster_server::ClusterServer;
use rill_proto::internal::raft_transport_server::RaftTransportServer;
use rill_proto::records::records_server::RecordsServer;
use rill_proto::share::share_server::ShareServer;
use rill_proto::transactions::transactions_server::TransactionsServer;
use rill_proto::MAX_GRPC_MESSAGE_BYTES;
use rill_raft::service::RaftService;

use crate::coordinators::Coordinators;
use crate::error::{Error, Result};
use crate::node::Node;
use crate::service::{Authorization, RequestError, Service};

/// An entry's answer as the wire's error fields: its code, message and leader (or
/// coordinator) hint — none for `Ok`.
pub(crate) fn error_of<T>(answer: &crate::service::Answer<T>) -> (i32, String, Option<rill_proto::common::LeaderHint>) {
    match answer {
        Ok(_) => (rill_proto::common::ErrorCode::None as i32, String::new(), None),
        Err(e) => (e.code as i32, e.message.clone(), e.leader.clone()),
    }
}

/// A whole public request refused, as the gRPC status its handler returns: the gRPC listener's
/// one mapping of [`RequestError`] (per-entry refusals are encoded in each answer).
pub fn request_status(e: &RequestError) -> tonic::Status {
    match e {
        RequestError::Invalid(_) | RequestError::TooManyEntries { .. } => {
            tonic::Status::invalid_argument(e.to_string())
        }
        RequestError::Denied(_) => tonic::Status::permission_denied(e.to_string()),
        RequestError::StorageFailed { node, reason } => crate::errors::storage_failed_status(*node, reason),
    }
}

/// The limits every client listener of a node shares: at most `max-connections` client
/// connections open at once, and at most `max-request-bytes-in-flight` bytes of requests
/// received and not yet answered, across all of them (real builds: the simulation's network has
/// its own listener).
#[cfg(not(madsim))]
#[derive(Clone)]
pub struct ClientLimits {
    /// The connection permits.
    pub connections: Arc<tokio::sync::Semaphore>,
    /// The request bytes budget.
    pub budget: Arc<inflight::Budget>,
}

#[cfg(not(madsim))]
impl ClientLimits {
    /// The node's limits, from its `[limits]`.
    pub fn new(limits: &crate::config::ClientLimits) -> Self {
        let max_connections =
            usize::try_from(limits.max_connections).unwrap_or(usize::MAX).min(tokio::sync::Semaphore::MAX_PERMITS);
        Self {
            connections: Arc::new(tokio::sync::Semaphore::new(max_connections)),
            budget: inflight::Budget::new(limits.max_request_bytes_in_flight, MAX_GRPC_MESSAGE_BYTES),
        }
    }
}

/// Serves the public services on the client listener and the internal ones on the internal
/// listener, over `node` and its coordinator shards, until `shutdown` completes, then stops accepting on both and lets in-flight requests
/// finish. Both listeners keep serving while `shutdown` runs (a stopping node hands its
/// partitions over through the internal services).
pub async fn serve(
    node: Arc<Node>,
    coordinators: Arc<Coordinators>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<()> {
    let (stopped_tx, stopped_rx) = rill_rt::sync::watch::channel(false);
    let stop = async move {
        shutdown.await;
        let _ = stopped_tx.send(true);
    };
    let stopped = move || {
        let mut rx = stopped_rx.clone();
        async move {
            let _ = rx.wait_for(|s| *s).await;
        }
    };
    // One service layer and one set of client limits for every client listener of the node;
    // every public handler asks the same authorizer (allow-all until clients authenticate).
    let service = Service::new(node.clone(), coordinators.clone(), Authorization::default());
    #[cfg(not(madsim))]
    let (public_limits, kafka_limits) = {
        let limits = ClientLimits::new(&node.config().client_limits);
        (limits.clone(), limits)
    };
    #[cfg(madsim)]
    let (public_limits, kafka_limits) = ((), ());
    let servers = futures::future::try_join3(
        serve_public(&node, service.clone(), public_limits, stopped()).boxed(),
        serve_internal(node.clone(), service.clone(), stopped()).boxed(),
        serve_kafka(&node, service, kafka_limits, stopped()).boxed(),
    );
    // A listener that fails (e.g. its port is taken) fails the node at once.
    match futures::future::select(Box::pin(stop), servers).await {
        Either::Left(((), servers)) => servers.await.map(|_| ()),
        Either::Right((served, _)) => served.map(|_| ()),
    }
}

/// The Kafka listener, when the node has one (`kafka-listen`), over the same service layer and
/// within the same limits as the gRPC client listener.
#[cfg(not(madsim))]
async fn serve_kafka(
    node: &Node,
    service: Service,
    limits: ClientLimits,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<()> {
    match node.config().kafka.clone() {
        Some(settings) => crate::kafka::connection::serve(service, limits, settings, shutdown).await,
        None => Ok(()),
    }
}

/// The simulation has no Kafka listener (its network carries gRPC only).
#[cfg(madsim)]
async fn serve_kafka(
    node: &Node,
    _service: Service,
    _limits: (),
    _shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<()> {
    match node.config().kafka {
        Some(_) => Err(Error::Serve("the simulation has no Kafka listener".into())),
        None => Ok(()),
    }
}

/// The public gRPC services over `service`, as a tuple (records, admin, groups, transactions,
/// share).
/// A macro: the simulation's tonic names its server types with an extra parameter.
macro_rules! public_services {
    ($service:expr) => {{
        let service: Service = $service;
        let records = RecordsServer::new(records::RecordsApi::new(service.clone()))
            .max_decoding_message_size(MAX_GRPC_MESSAGE_BYTES)
            .max_encoding_message_size(MAX_GRPC_MESSAGE_BYTES);
        // Every public service takes and sends messages up to the node's largest: a classic
        // group's SyncGroup and the leader's JoinGroup answer carry every member's assignment
        // and metadata (the engine bounds them at 16 MiB).
        let admin = AdminServer::new(admin::AdminApi::new(service.clone()))
            .max_decoding_message_size(MAX_GRPC_MESSAGE_BYTES)
            .max_encoding_message_size(MAX_GRPC_MESSAGE_BYTES);
        let groups = GroupsServer::new(groups::GroupsApi::new(service.clone()))
            .max_decoding_message_size(MAX_GRPC_MESSAGE_BYTES)
            .max_encoding_message_size(MAX_GRPC_MESSAGE_BYTES);
        let transactions = TransactionsServer::new(transactions::TransactionsApi::new(service.clone()))
            .max_decoding_message_size(MAX_GRPC_MESSAGE_BYTES)
            .max_encoding_message_size(MAX_GRPC_MESSAGE_BYTES);
        let share = ShareServer::new(share::ShareApi::new(service))
            .max_decoding_message_size(MAX_GRPC_MESSAGE_BYTES)
            .max_encoding_message_size(MAX_GRPC_MESSAGE_BYTES);
        (records, admin, groups, transactions, share)
    }};
}

/// The gRPC client listener: public services only, over `service`, within the node's shared
/// `limits`.
#[cfg(not(madsim))]
async fn serve_public(
    node: &Node,
    service: Service,
    limits: ClientLimits,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<()> {
    let addr = node.config().listen;
    let (records, admin, groups, transactions, share) = public_services!(service);
    let failed = |e: &dyn std::fmt::Display| Error::Serve(format!("client listener {addr}: {e}"));
    let listener = tokio::net::TcpListener::bind(addr).await.map_err(|e| failed(&e))?;
    public_server(&node.config().client_limits, &limits.budget)
        .add_service(records)
        .add_service(admin)
        .add_service(groups)
        .add_service(transactions)
        .add_service(share)
        .serve_with_incoming_shutdown(connections::accept(listener, limits.connections), shutdown)
        .await
        .map_err(|e| failed(&e))
}

/// The gRPC client listener of a simulated node: the simulation's network has its own listener;
/// the limits are real builds' only.
#[cfg(madsim)]
async fn serve_public(
    node: &Node,
    service: Service,
    _limits: (),
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<()> {
    let addr = node.config().listen;
    let (records, admin, groups, transactions, share) = public_services!(service);
    let failed = |e: &dyn std::fmt::Display| Error::Serve(format!("client listener {addr}: {e}"));
    tonic::transport::Server::builder()
        .add_service(records)
        .add_service(admin)
        .add_service(groups)
        .add_service(transactions)
        .add_service(share)
        .serve_with_shutdown(addr, shutdown)
        .await
        .map_err(|e| failed(&e))
}

/// The client listener's HTTP/2 settings (real builds): at most `max-concurrent-streams` requests
/// in each connection, their messages taken from `budget` before they are read, and flow-control
/// windows under which waiting for the budget cannot stall a connection (`inflight`).
#[cfg(not(madsim))]
fn public_server(
    limits: &crate::config::ClientLimits,
    budget: &Arc<inflight::Budget>,
) -> tonic::transport::Server<tower_layer::Stack<inflight::InflightLayer, tower_layer::Identity>> {
    let windows = inflight::Http2Windows::for_streams(limits.max_concurrent_streams);
    tonic::transport::Server::builder()
        .max_concurrent_streams(limits.max_concurrent_streams)
        .initial_stream_window_size(windows.stream)
        .initial_connection_window_size(windows.connection)
        .layer(budget.layer())
}

/// The internal listener: node-to-node services only.
async fn serve_internal(
    node: Arc<Node>,
    service: Service,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<()> {
    let addr = node.config().internal_listen;
    let raft = RaftTransportServer::new(RaftService::new(node.multi().clone(), node.internal_tls().is_some()))
        .max_decoding_message_size(MAX_GRPC_MESSAGE_BYTES)
        .max_encoding_message_size(MAX_GRPC_MESSAGE_BYTES);
    let cluster = ClusterServer::new(cluster::ClusterApi::new(node.clone(), service));
    let router = tonic::transport::Server::builder().add_service(raft).add_service(cluster);
    let failed = |e: &dyn std::fmt::Display| Error::Serve(format!("internal listener {addr}: {e}"));
    match node.internal_tls() {
        None => router.serve_with_shutdown(addr, shutdown).await.map_err(|e| failed(&e)),
        // Peers must present a certificate from the cluster's CA (docs/security.md). The
        // handshakes use the node's current certificate and CAs, which follow their files, so
        // rotated certificates serve new connections without a restart, and an established
        // connection whose peer's certificate no longer verifies is closed; handlers still see
        // the caller's certificate chain (`Request::peer_certs`).
        #[cfg(not(madsim))]
        Some(tls) => {
            let listener = tokio::net::TcpListener::bind(addr).await.map_err(|e| failed(&e))?;
            let incoming =
                rill_tls::acceptor::incoming(listener, tls).map_err(|e| failed(&format!("TLS settings: {e}")))?;
            router.serve_with_incoming_shutdown(incoming, shutdown).await.map_err(|e| failed(&e))
        }
        #[cfg(madsim)]
        Some(_) => Err(Error::Serve("the simulation has no TLS: run it with the insecure setting".into())),
    }
}
