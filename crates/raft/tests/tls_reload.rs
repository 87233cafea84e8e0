//! Certificates rotate without a restart, over real sockets: a tonic server on the internal
//! listener's acceptor (`rill_tls::acceptor`) and a node's [`Transport`] dialing it through the
//! reloadable connector. The server's handler answers with the certificate `peer_certs()` shows
//! it, so the test sees which certificate each side presented.
//!
//! Phases: both nodes on CA A; both `ca.pem` trust A and B; node 1 serves a certificate from B
//! (new connections see it, clients trusting only A are refused, the listener keeps accepting);
//! node 2 presents one from B; a certificate for the wrong node is refused and node 1 keeps
//! serving its own.
#![cfg(not(madsim))]
// A test: its helpers panic on a failed step, like the test functions themselves.
#![allow(clippy::unwrap_used)]

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use rill_proto::internal::raft_transport_client::RaftTransportClient;
use rill_proto::internal::raft_transport_server::{RaftTransport, RaftTransportServer};
use rill_proto::internal::{QuiesceRequest, QuiesceResponse, RaftBatch, RaftMessage};
use rill_raft::network::Transport;
use rill_tls::issue::ClusterCa;
use rill_tls::{PeerCertificate, ReloadingTls, TlsPaths};
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Identity};
use tonic::{Request, Response, Status};

/// How long any one wait may take before the test fails.
const TIMEOUT: Duration = Duration::from_secs(10);
/// How often the test's watchers read the files (the node's is seconds; a test wants speed).
const POLL: Duration = Duration::from_millis(20);

/// A `RaftTransport` whose `AppendEntries` answers with the caller's certificate as its handler
/// sees it: the DER in `payload`, the node names it carries in `error`.
struct Probe;

#[tonic::async_trait]
impl RaftTransport for Probe {
    async fn append_entries(&self, request: Request<RaftMessage>) -> Result<Response<RaftMessage>, Status> {
        let certs = request.peer_certs().ok_or_else(|| Status::unauthenticated("no peer certificates"))?;
        let leaf = certs.first().ok_or_else(|| Status::unauthenticated("an empty peer certificate chain"))?;
        let names: Vec<String> =
            (1..=9).filter(|id| PeerCertificate::new(leaf).names(*id)).map(rill_tls::node_name).collect();
        Ok(Response::new(RaftMessage {
            group_id: 0,
            payload: bytes::Bytes::copy_from_slice(leaf),
            error: names.join(","),
        }))
    }

    async fn vote(&self, _: Request<RaftMessage>) -> Result<Response<RaftMessage>, Status> {
        Err(Status::unimplemented("probe"))
    }

    async fn install_snapshot(&self, _: Request<RaftMessage>) -> Result<Response<RaftMessage>, Status> {
        Err(Status::unimplemented("probe"))
    }

    async fn heartbeats(&self, _: Request<RaftBatch>) -> Result<Response<RaftBatch>, Status> {
        Err(Status::unimplemented("probe"))
    }

    async fn quiesce(&self, _: Request<QuiesceRequest>) -> Result<Response<QuiesceResponse>, Status> {
        Err(Status::unimplemented("probe"))
    }
}

/// Serves [`Probe`] on a fresh local port with `tls`, the way the internal listener does.
async fn must_serve(tls: &Arc<ReloadingTls>) -> (SocketAddr, rill_rt::sync::oneshot::Sender<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let incoming = rill_tls::acceptor::incoming(listener, tls.server_config().unwrap());
    let (stop, stopped) = rill_rt::sync::oneshot::channel::<()>();
    rill_rt::spawn(async move {
        tonic::transport::Server::builder()
            .add_service(RaftTransportServer::new(Probe))
            .serve_with_incoming_shutdown(incoming, async move {
                let _ = stopped.await;
            })
            .await
            .unwrap();
    });
    (addr, stop)
}

/// Who the server says called: (names, certificate DER).
async fn caller_seen(channel: Channel) -> Result<(String, Vec<u8>), Status> {
    let answer = RaftTransportClient::new(channel).append_entries(RaftMessage::default()).await?.into_inner();
    Ok((answer.error, answer.payload.to_vec()))
}

/// Calls the server through `transport`'s channel to node 1 at `addr`.
async fn must_call_through(transport: &Transport, addr: &str) -> (String, Vec<u8>) {
    let channel = transport.channel(1, addr).unwrap();
    rill_rt::timeout(TIMEOUT, caller_seen(channel)).await.unwrap().unwrap()
}

/// A new TLS connection to node 1 at `addr` (tonic's own client) trusting `ca`, presenting
/// `identity`'s files; then one call.
async fn call_trusting(addr: SocketAddr, ca: &str, identity: &TlsPaths) -> Result<(String, Vec<u8>), String> {
    let tls = ClientTlsConfig::new()
        .ca_certificate(Certificate::from_pem(ca))
        .domain_name("node-1")
        .identity(Identity::from_pem(std::fs::read(&identity.cert).unwrap(), std::fs::read(&identity.key).unwrap()));
    let channel = Channel::from_shared(format!("https://{addr}"))
        .unwrap()
        .tls_config(tls)
        .unwrap()
        .connect_timeout(TIMEOUT)
        .connect()
        .await
        .map_err(|e| format!("connect: {e:?}"))?;
    rill_rt::timeout(TIMEOUT, caller_seen(channel)).await.map_err(|e| e.to_string())?.map_err(|e| e.to_string())
}

/// The DER of the certificate in `paths.cert`.
fn der(paths: &TlsPaths) -> Vec<u8> {
    use rustls_pki_types::pem::PemObject;
    rustls_pki_types::CertificateDer::from_pem_file(&paths.cert).unwrap().to_vec()
}

/// Writes node `id`'s certificate and key from `ca` to `paths`.
fn install(paths: &TlsPaths, ca: &ClusterCa, id: u64) {
    let (cert, key) = ca.issue_node(id).unwrap();
    std::fs::write(&paths.cert, cert).unwrap();
    std::fs::write(&paths.key, key).unwrap();
}

/// Waits until `done` holds, failing the test after [`TIMEOUT`].
async fn wait_for(what: &str, done: impl Fn() -> bool) {
    let deadline = rill_rt::now() + TIMEOUT;
    while !done() {
        assert!(rill_rt::now() < deadline, "timed out waiting for {what}");
        rill_rt::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rotated_certificates_serve_new_connections_without_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let a = ClusterCa::generate("ca a").unwrap();
    let b = ClusterCa::generate("ca b").unwrap();
    let both = format!("{}{}", a.cert_pem(), b.cert_pem());

    tracing::info!("--- node 1 serves, node 2 dials, both with certificates from CA A");
    let paths_1 = a.write_node(&dir.path().join("n1"), 1).unwrap();
    let paths_2 = a.write_node(&dir.path().join("n2"), 2).unwrap();
    // A third party's files, for tonic's own client: node 3, from A.
    let paths_3 = a.write_node(&dir.path().join("n3"), 3).unwrap();
    let tls_1 = ReloadingTls::load(paths_1.clone(), 1).unwrap();
    let tls_2 = ReloadingTls::load(paths_2.clone(), 2).unwrap();
    tls_1.spawn_watcher(POLL);
    tls_2.spawn_watcher(POLL);
    let (addr, _stop) = must_serve(&tls_1).await;
    let transport = Transport::new(2, Some(tls_2.clone()));
    let first = format!("127.0.0.1:{}", addr.port());
    let (names, cert) = must_call_through(&transport, &first).await;
    assert_eq!(names, "node-2", "the handler sees the caller's certificate through peer_certs()");
    assert_eq!(cert, der(&paths_2));

    tracing::info!("--- a connection that never handshakes does not hold up the next one");
    let _silent = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (names, _) = call_trusting(addr, a.cert_pem(), &paths_3).await.unwrap();
    assert_eq!(names, "node-3");

    tracing::info!("--- both nodes trust A and B");
    std::fs::write(&paths_1.ca, &both).unwrap();
    std::fs::write(&paths_2.ca, &both).unwrap();
    wait_for("both nodes to read the new ca.pem", || tls_1.generation() == 1 && tls_2.generation() == 1).await;

    tracing::info!("--- node 1 serves a certificate from B");
    install(&paths_1, &b, 1);
    wait_for("node 1 to serve its new certificate", || tls_1.generation() == 2).await;
    // A client that trusts only B reaches node 1 now (node 1 presents the new certificate)...
    let (names, _) = call_trusting(addr, b.cert_pem(), &paths_3).await.unwrap();
    assert_eq!(names, "node-3");
    // ... and one that trusts only A no longer does; the listener keeps accepting after it.
    let refused = call_trusting(addr, a.cert_pem(), &paths_3).await;
    assert!(refused.is_err(), "{refused:?}");
    let (names, _) = call_trusting(addr, b.cert_pem(), &paths_3).await.unwrap();
    assert_eq!(names, "node-3");
    // The established connection goes on with what it was made with.
    let (names, _) = must_call_through(&transport, &first).await;
    assert_eq!(names, "node-2");

    tracing::info!("--- node 2 presents a certificate from B on its new connections");
    install(&paths_2, &b, 2);
    wait_for("node 2 to use its new certificate", || tls_2.generation() == 2).await;
    // Another address for node 1, so the same transport makes a new channel (a new connection).
    let second = format!("localhost:{}", addr.port());
    let (names, cert) = must_call_through(&transport, &second).await;
    assert_eq!(names, "node-2");
    assert_eq!(cert, der(&paths_2), "the new connection presents the rotated certificate");

    tracing::info!("--- a certificate for the wrong node is refused; node 1 keeps serving its own");
    let before = std::fs::read(&paths_1.cert).unwrap();
    install(&paths_1, &b, 3);
    wait_for("node 1 to refuse the files", || tls_1.refused() == 1).await;
    assert_eq!(tls_1.generation(), 2);
    assert_eq!(tls_1.files().cert_pem(), before.as_slice());
    // tonic's client checks that the server's certificate names node-1.
    let (names, _) = call_trusting(addr, b.cert_pem(), &paths_3).await.unwrap();
    assert_eq!(names, "node-3");
}
