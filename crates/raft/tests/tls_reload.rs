//! Certificates rotate without a restart, over real sockets: a tonic server on the internal
//! listener's acceptor (`rill_tls::acceptor`) and a node's [`Transport`] dialing it through the
//! reloadable connector. The server's handler answers with the certificate `peer_certs()` shows
//! it, so the test sees which certificate each side presented.
//!
//! Phases: both nodes on CA A; both `ca.pem` trust A and B; node 1 serves a certificate from B
//! (new connections see it, clients trusting only A are refused, the listener keeps accepting);
//! node 2 presents one from B; a certificate for the wrong node is refused and node 1 keeps
//! serving its own.
//!
//! Established connections follow the rotation too: once A is out of a node's `ca.pem`, that
//! node closes each connection whose peer presented A's certificate (dialed and accepted), keeps
//! the one made with B's (the same connection: no new handshake), and the channel whose
//! connection closed reconnects with B's. And a connection ends once its peer's certificate
//! expires, closed by the end that checks that certificate.
#![cfg(not(madsim))]
// A test: its helpers panic on a failed step, like the test functions themselves.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeSet;
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
    let incoming = rill_tls::acceptor::incoming(listener, tls).unwrap();
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
    call_node(transport, 1, addr).await.unwrap()
}

/// Calls the server through `transport`'s channel to node `node` at `addr`.
async fn call_node(transport: &Transport, node: u64, addr: &str) -> Result<(String, Vec<u8>), Status> {
    let channel = transport.channel(node, addr).unwrap();
    rill_rt::timeout(TIMEOUT, caller_seen(channel)).await.map_err(|_| Status::deadline_exceeded("the call hung"))?
}

/// The ids of `tls`'s established connections.
fn live_ids(tls: &ReloadingTls) -> BTreeSet<u64> {
    tls.connections().live().into_iter().map(|c| c.id).collect()
}

/// The one id in `after` that `before` lacks.
fn must_be_one_new(before: &BTreeSet<u64>, after: &BTreeSet<u64>) -> u64 {
    let new: Vec<u64> = after.difference(before).copied().collect();
    assert_eq!(new.len(), 1, "expected one new connection: before {before:?}, after {after:?}");
    new[0]
}

/// A tonic client channel (its own TLS) to node 1 at `addr`, trusting `ca`, presenting
/// `identity`'s files: one connection, kept.
async fn must_connect_trusting(addr: SocketAddr, ca: &str, identity: &TlsPaths) -> Channel {
    let tls = ClientTlsConfig::new()
        .ca_certificate(Certificate::from_pem(ca))
        .domain_name("node-1")
        .identity(Identity::from_pem(std::fs::read(&identity.cert).unwrap(), std::fs::read(&identity.key).unwrap()));
    Channel::from_shared(format!("https://{addr}"))
        .unwrap()
        .tls_config(tls)
        .unwrap()
        .connect_timeout(TIMEOUT)
        .connect()
        .await
        .unwrap()
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rotation_closes_the_connections_whose_peer_no_longer_verifies_and_keeps_the_others() {
    let dir = tempfile::tempdir().unwrap();
    let a = ClusterCa::generate("ca a").unwrap();
    let b = ClusterCa::generate("ca b").unwrap();
    let both = format!("{}{}", a.cert_pem(), b.cert_pem());

    tracing::info!("--- connections made with A's certificates: node 2 dials node 1; node 3 calls node 1");
    let paths_1 = a.write_node(&dir.path().join("n1"), 1).unwrap();
    let paths_2 = a.write_node(&dir.path().join("n2"), 2).unwrap();
    let paths_3 = a.write_node(&dir.path().join("n3"), 3).unwrap();
    let tls_1 = ReloadingTls::load(paths_1.clone(), 1).unwrap();
    let tls_2 = ReloadingTls::load(paths_2.clone(), 2).unwrap();
    tls_1.spawn_watcher(POLL);
    tls_2.spawn_watcher(POLL);
    let (addr, _stop) = must_serve(&tls_1).await;
    let transport = Transport::new(2, Some(tls_2.clone()));
    let first = format!("127.0.0.1:{}", addr.port());
    must_call_through(&transport, &first).await;
    let old_dialed = must_be_one_new(&BTreeSet::new(), &live_ids(&tls_2));
    let old_accepted = must_be_one_new(&BTreeSet::new(), &live_ids(&tls_1));
    // tonic's own client: it never checks again, so only node 1 can close its connection.
    let before = live_ids(&tls_1);
    let node_3 = must_connect_trusting(addr, &both, &paths_3).await;
    caller_seen(node_3.clone()).await.unwrap();
    let old_client = must_be_one_new(&before, &live_ids(&tls_1));

    tracing::info!("--- both nodes trust A and B, then present certificates from B: nothing closes");
    std::fs::write(&paths_1.ca, &both).unwrap();
    std::fs::write(&paths_2.ca, &both).unwrap();
    wait_for("both nodes to trust A and B", || tls_1.generation() == 1 && tls_2.generation() == 1).await;
    install(&paths_1, &b, 1);
    install(&paths_2, &b, 2);
    wait_for("both nodes to use certificates from B", || tls_1.generation() == 2 && tls_2.generation() == 2).await;
    // A poll after the last reload has swept: the watchers sweep right after reloading.
    let established = (tls_1.connections().established(), tls_2.connections().established());
    must_call_through(&transport, &first).await;
    assert_eq!(
        (tls_1.connections().established(), tls_2.connections().established()),
        established,
        "the A-era connection still serves: it was not made again"
    );
    assert_eq!((tls_1.connections().closed(), tls_2.connections().closed()), (0, 0));
    // A second address for node 1: a new channel, a connection with B's certificates on both ends.
    let second = format!("localhost:{}", addr.port());
    let (before_1, before_2) = (live_ids(&tls_1), live_ids(&tls_2));
    must_call_through(&transport, &second).await;
    let new_dialed = must_be_one_new(&before_2, &live_ids(&tls_2));
    let new_accepted = must_be_one_new(&before_1, &live_ids(&tls_1));

    tracing::info!("--- node 2 takes A out of its ca.pem: it closes the connection where node 1 presented A");
    std::fs::write(&paths_2.ca, b.cert_pem()).unwrap();
    wait_for("node 2 to close its A-era dialed connection", || !live_ids(&tls_2).contains(&old_dialed)).await;
    assert!(tls_2.generation() == 3 && tls_2.connections().closed() == 1);
    assert!(live_ids(&tls_2).contains(&new_dialed), "the B connection stays");
    // Node 1 sees its end of it close.
    wait_for("node 1 to see the connection end", || !live_ids(&tls_1).contains(&old_accepted)).await;

    tracing::info!("--- node 1 takes A out of its ca.pem: it closes node 3's A connection");
    std::fs::write(&paths_1.ca, b.cert_pem()).unwrap();
    wait_for("node 1 to close node 3's connection", || !live_ids(&tls_1).contains(&old_client)).await;
    assert!(tls_1.generation() == 3 && tls_1.connections().closed() == 1);
    let refused = rill_rt::timeout(TIMEOUT, caller_seen(node_3)).await.unwrap();
    assert!(refused.is_err(), "node 3's next call, on a new connection presenting A, is refused: {refused:?}");

    tracing::info!("--- the B connection is the same one, and still serves");
    let established = (tls_1.connections().established(), tls_2.connections().established());
    let (names, _) = must_call_through(&transport, &second).await;
    assert_eq!(names, "node-2");
    assert!(live_ids(&tls_1).contains(&new_accepted) && live_ids(&tls_2).contains(&new_dialed));
    assert_eq!((tls_1.connections().established(), tls_2.connections().established()), established);

    tracing::info!("--- the channel whose connection closed reconnects with B's certificates");
    let (names, cert) = must_call_through(&transport, &first).await;
    assert_eq!(names, "node-2");
    assert_eq!(cert, der(&paths_2));
    assert_eq!(tls_2.connections().established(), established.1 + 1);
    assert_eq!((tls_1.connections().closed(), tls_2.connections().closed()), (1, 1));
}

/// How long the short-lived certificates of the expiry test are valid: enough for a handshake on
/// a busy machine (X.509 times are whole seconds, so up to a second less).
const SHORT_LIVED: Duration = Duration::from_secs(4);

/// Node `id`'s files from `ca`, with a certificate that expires [`SHORT_LIVED`] from now.
fn must_write_short_lived(dir: &std::path::Path, ca: &ClusterCa, id: u64) -> TlsPaths {
    let paths = ca.write_node(dir, id).unwrap();
    let (cert, key) = ca.issue_node_valid_for(id, SHORT_LIVED).unwrap();
    std::fs::write(&paths.cert, cert).unwrap();
    std::fs::write(&paths.key, key).unwrap();
    paths
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_does_not_outlive_its_peers_certificate() {
    let dir = tempfile::tempdir().unwrap();
    let ca = ClusterCa::generate("ca").unwrap();

    tracing::info!("--- node 1 serves a short-lived certificate to node 2; node 4 presents one to node 3");
    let tls_1 = ReloadingTls::load(must_write_short_lived(&dir.path().join("n1"), &ca, 1), 1).unwrap();
    let tls_2 = ReloadingTls::load(ca.write_node(&dir.path().join("n2"), 2).unwrap(), 2).unwrap();
    let tls_3 = ReloadingTls::load(ca.write_node(&dir.path().join("n3"), 3).unwrap(), 3).unwrap();
    let tls_4 = ReloadingTls::load(must_write_short_lived(&dir.path().join("n4"), &ca, 4), 4).unwrap();
    for tls in [&tls_1, &tls_2, &tls_3, &tls_4] {
        tls.spawn_watcher(POLL);
    }
    let (addr_1, _stop_1) = must_serve(&tls_1).await;
    let (addr_3, _stop_3) = must_serve(&tls_3).await;
    let (transport_2, transport_4) = (Transport::new(2, Some(tls_2.clone())), Transport::new(4, Some(tls_4.clone())));
    let (addr_1, addr_3) = (addr_1.to_string(), addr_3.to_string());
    assert_eq!(call_node(&transport_2, 1, &addr_1).await.unwrap().0, "node-2");
    assert_eq!(call_node(&transport_4, 3, &addr_3).await.unwrap().0, "node-4");
    assert_eq!(live_ids(&tls_2).len(), 1);
    assert_eq!(live_ids(&tls_3).len(), 1);

    tracing::info!("--- the certificates expire: the end that checks each closes its connection");
    wait_for("node 2 to close the connection to node 1", || tls_2.connections().closed() == 1).await;
    wait_for("node 3 to close node 4's connection", || tls_3.connections().closed() == 1).await;
    wait_for("both connections to end", || {
        [&tls_1, &tls_2, &tls_3, &tls_4].iter().all(|tls| tls.connections().live().is_empty())
    })
    .await;
    // Neither node with an expired certificate of its own closed anything: its peers are valid.
    assert_eq!((tls_1.connections().closed(), tls_4.connections().closed()), (0, 0));

    tracing::info!("--- a new connection is refused too: the certificates are expired");
    assert!(call_node(&transport_2, 1, &addr_1).await.is_err());
    assert!(call_node(&transport_4, 3, &addr_3).await.is_err());
}
