//! The internal listener's connections, accepted over TCP and handshaken with the reloadable
//! rustls configuration (real builds only), as a stream for tonic's
//! `serve_with_incoming_shutdown`.
//!
//! ```text
//!   accept loop ──► one task per connection: TLS handshake (bounded by HANDSHAKE_TIMEOUT)
//!        │                         │ ok                         │ failed / timed out
//!        │                         ▼                            ▼
//!        │     registered in Connections (Tracked)              logged, connection dropped
//!        │                         ▼
//!        │              channel ──► incoming stream ──► tonic
//!        └── stops when the stream is dropped (tonic drops it at shutdown)
//! ```
//!
//! Each connection is registered in the node's [`crate::connections::Connections`] with the
//! certificate chain its peer presented, so it can be closed once that certificate no longer
//! verifies (a CA rotated out of `ca.pem`, an expired certificate). tonic implements
//! `Connected` for `tokio_rustls::server::TlsStream<TcpStream>` with
//! `TlsConnectInfo<TcpConnectInfo>`, which is what `tonic::Request::peer_certs()` reads, and
//! [`Tracked`] passes it through: handlers see the calling node's certificate chain exactly as
//! with tonic's own TLS.

use std::sync::Arc;
use std::time::Duration;

use futures::Stream;
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;

use crate::connections::{Connections, Side};
use crate::tracked::Tracked;
use crate::{ReloadingTls, TlsError};

/// Longest a connection may take to complete its TLS handshake. A node's handshake takes
/// milliseconds; this only bounds what a silent or slow connection holds (a task and a socket).
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// How long to pause accepting after the listener failed (typically out of file descriptors),
/// rather than spinning on the same error.
const ACCEPT_ERROR_BACKOFF: Duration = Duration::from_millis(100);

/// Handshaken connections waiting for tonic to take them. tonic takes each at once; the bound
/// only keeps a stalled server from piling them up.
const ACCEPTED_QUEUE: usize = 64;

/// The connections `listener` accepts, each after a successful TLS handshake with `tls`'s
/// server configuration ([`ReloadingTls::server_config`]), registered in
/// [`ReloadingTls::connections`]. Handshakes run concurrently, each in its own task with a
/// [`HANDSHAKE_TIMEOUT`]; one that fails is logged and dropped and accepting goes on. The stream
/// never yields an error and ends only when dropped, which stops the accept loop and closes the
/// listener. Fails only when the server configuration cannot be built.
pub fn incoming(
    listener: TcpListener,
    tls: &Arc<ReloadingTls>,
) -> Result<impl Stream<Item = Result<Tracked<TlsStream<TcpStream>>, std::io::Error>> + Send + 'static, TlsError> {
    let acceptor = TlsAcceptor::from(tls.server_config()?);
    let (tx, rx) = rill_rt::sync::mpsc::channel(ACCEPTED_QUEUE);
    rill_rt::spawn(accept_loop(listener, acceptor, tls.connections().clone(), tx));
    Ok(futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|tls| (Ok(tls), rx)) }))
}

type Accepted = rill_rt::sync::mpsc::Sender<Tracked<TlsStream<TcpStream>>>;

async fn accept_loop(listener: TcpListener, acceptor: TlsAcceptor, connections: Connections, tx: Accepted) {
    let local = listener.local_addr().ok();
    loop {
        let accepted = tokio::select! {
            () = tx.closed() => return,
            accepted = listener.accept() => accepted,
        };
        match accepted {
            Ok((tcp, peer)) => {
                // Raft messages are small and latency-bound.
                if let Err(e) = tcp.set_nodelay(true) {
                    tracing::debug!(%peer, error = %e, "internal listener: cannot set TCP_NODELAY");
                }
                rill_rt::spawn(handshake(acceptor.clone(), tcp, peer, connections.clone(), tx.clone()));
            }
            Err(e) => {
                tracing::warn!(listener = ?local, error = %e, "internal listener: accept failed");
                rill_rt::sleep(ACCEPT_ERROR_BACKOFF).await;
            }
        }
    }
}

async fn handshake(
    acceptor: TlsAcceptor,
    tcp: TcpStream,
    peer: std::net::SocketAddr,
    connections: Connections,
    tx: Accepted,
) {
    match rill_rt::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
        Ok(Ok(tls)) => {
            // Client authentication is mandatory, so a handshake that succeeded has a chain.
            let Some(chain) = tls.get_ref().1.peer_certificates() else {
                tracing::warn!(%peer, "internal listener: a handshake completed without a client certificate; dropped");
                return;
            };
            // Registered before tonic takes it, so a sweep meanwhile sees it too.
            let registration = connections.register(Side::Accepted, Some(peer), Arc::new(chain.to_vec()));
            // Fails only when the server stopped: the connection is dropped.
            let _ = tx.send(Tracked::new(tls, registration)).await;
        }
        Ok(Err(e)) => {
            // A refused certificate is worth an operator's attention (a peer with the wrong CA
            // or a botched rotation); anything else (a port scan, plain HTTP/2) is noise.
            let tls_error = e.get_ref().and_then(|inner| inner.downcast_ref::<rustls::Error>());
            match tls_error {
                Some(
                    rustls::Error::InvalidCertificate(_)
                    | rustls::Error::NoCertificatesPresented
                    | rustls::Error::AlertReceived(rustls::AlertDescription::BadCertificate)
                    | rustls::Error::AlertReceived(rustls::AlertDescription::UnknownCA),
                ) => {
                    tracing::warn!(%peer, error = %e, "internal listener: TLS handshake refused")
                }
                _ => tracing::debug!(%peer, error = %e, "internal listener: TLS handshake failed"),
            }
        }
        Err(_) => tracing::debug!(%peer, timeout = ?HANDSHAKE_TIMEOUT, "internal listener: TLS handshake timed out"),
    }
}
