//! Dialing a peer's internal listener over TLS with the reloadable rustls configuration (real
//! builds only): a connector for tonic's `Endpoint::connect_with_connector_lazy`.
//!
//! The endpoint's address is `http://host:port` (tonic then speaks HTTP/2 with prior knowledge
//! over whatever the connector returns); the connector dials TCP and does the TLS handshake
//! with server name `node-<peer>`, so the peer's certificate must name the node it is dialed
//! as. Every new connection (the first, and each reconnect) takes the current certificate and
//! CAs, so a channel picks up rotated files at its next reconnect without being rebuilt.
//!
//! Each connection is registered in the node's [`crate::connections::Connections`] with the
//! chain the dialed peer presented, and closed once that chain no longer verifies (a CA rotated
//! out of `ca.pem`, an expired certificate); the channel then reconnects with the current files
//! at its next request.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use hyper_util::rt::TokioIo;
use rustls::pki_types::ServerName;
use rustls::ClientConfig;
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;
use tokio_rustls::TlsConnector;
use tonic::codegen::http::Uri;

use crate::connections::{Connections, Side};
use crate::tracked::Tracked;
use crate::ReloadingTls;

/// A tower service from the endpoint's URI to a TLS connection with node `peer`.
#[derive(Clone)]
pub struct NodeConnector {
    config: Arc<ClientConfig>,
    server_name: ServerName<'static>,
    peer: u64,
    connections: Connections,
}

impl NodeConnector {
    /// A connector to node `peer` with `tls`'s client configuration
    /// ([`ReloadingTls::client_config`]), registering its connections in
    /// [`ReloadingTls::connections`].
    pub fn new(tls: &Arc<ReloadingTls>, peer: u64) -> Result<Self, crate::TlsError> {
        let name = crate::node_name(peer);
        let server_name = ServerName::try_from(name.clone()).map_err(|_| crate::TlsError::NodeName { name })?;
        Ok(Self { config: tls.client_config()?, server_name, peer, connections: tls.connections().clone() })
    }
}

impl std::fmt::Debug for NodeConnector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeConnector").field("server_name", &self.server_name).finish()
    }
}

/// A dialed connection, as the channel gets it.
pub type Dialed = TokioIo<Tracked<TlsStream<TcpStream>>>;

type Connecting = Pin<Box<dyn Future<Output = Result<Dialed, std::io::Error>> + Send>>;

impl tonic::codegen::Service<Uri> for NodeConnector {
    type Response = Dialed;
    type Error = std::io::Error;
    type Future = Connecting;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        let connector = TlsConnector::from(self.config.clone());
        let server_name = self.server_name.clone();
        let (peer, connections) = (self.peer, self.connections.clone());
        Box::pin(async move {
            let Some(authority) = uri.authority() else {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::InvalidInput,
                    format!("peer address {uri} has no host:port"),
                ));
            };
            let tcp = TcpStream::connect(authority.as_str()).await?;
            // Raft messages are small and latency-bound.
            tcp.set_nodelay(true)?;
            let remote = tcp.peer_addr().ok();
            let tls = connector.connect(server_name, tcp).await?;
            // The server always presents its chain; an empty one would fail every re-check.
            let chain = tls.get_ref().1.peer_certificates().map(<[_]>::to_vec).unwrap_or_default();
            let registration = connections.register(Side::Dialed { peer }, remote, Arc::new(chain));
            Ok(TokioIo::new(Tracked::new(tls, registration)))
        })
    }
}
