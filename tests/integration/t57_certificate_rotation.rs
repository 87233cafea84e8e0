//! Rotating a running cluster to a new CA without restarting a node (docs/security.md,
//! "Rotating"): both CAs in `ca.pem`, new node certificates, then the old CA out. Each step is
//! picked up by every node within its poll interval; afterwards the internal listener refuses a
//! certificate from the old CA, answers one from the new, and the cluster still commits.
//! Established connections follow: none is closed while both CAs are trusted, and once the old CA
//! is out every connection made with its certificates (all of them, from the cluster's start) is
//! closed, each for that reason, at the same poll.

use std::path::Path;
use std::time::Duration;

use rill_client::{Acks, Record};
use rill_proto::internal::cluster_client::ClusterClient;
use rill_proto::internal::PingRequest;
use rill_tls::issue::ClusterCa;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Identity};

use crate::harness::{init_logs, wait_for, TestCluster};

/// A node reads its files every 5 s (`rill_tls::RELOAD_POLL_INTERVAL`); twice that and slack
/// for a busy machine.
const RELOAD_TIMEOUT: Duration = Duration::from_secs(20);

/// What a node logs when it starts using changed certificate files.
const RELOADED: &str = "internal TLS: new certificate files in use";

/// What a node logs once it checked its established connections against changed files.
const CHECKED: &str = "internal TLS: established connections checked against the new files";

/// What a node logs for each established connection it closes.
const CLOSED: &str = "internal TLS: closing a connection whose peer certificate no longer verifies";

/// The lines of every node's log in `1..=n` that contain `what`.
fn log_lines(cluster: &TestCluster, n: u64, what: &str) -> Vec<String> {
    (1..=n)
        .flat_map(|id| cluster.log_text(id).lines().filter(|l| l.contains(what)).map(String::from).collect::<Vec<_>>())
        .collect()
}

/// Replaces `path` whole (a temporary file renamed over it), as an operator should.
fn replace(path: &Path, contents: &str) -> anyhow::Result<()> {
    let tmp = path.with_extension("new");
    std::fs::write(&tmp, contents)?;
    std::fs::rename(&tmp, path)?;
    Ok(())
}

/// Waits until every node in `1..=n` logged `count` reloads.
async fn wait_for_reloads(cluster: &TestCluster, n: u64, count: usize, what: &str) -> anyhow::Result<()> {
    wait_for(RELOAD_TIMEOUT, what, || async {
        (1..=n).all(|id| cluster.log_text(id).matches(RELOADED).count() >= count).then_some(())
    })
    .await
}

/// Waits until every node in `1..=n` logged `count` checks of its established connections
/// after a reload (each follows its reload within the same poll).
async fn wait_for_checks(cluster: &TestCluster, n: u64, count: usize) -> anyhow::Result<()> {
    wait_for(RELOAD_TIMEOUT, "every node to check its established connections", || async {
        (1..=n).all(|id| cluster.log_text(id).matches(CHECKED).count() >= count).then_some(())
    })
    .await
}

/// Pings node 1's internal listener at `addr` over a new TLS connection, trusting `ca` and
/// presenting node 2's `cert` and `key`.
async fn ping(addr: &str, ca: &str, cert: &str, key: &str) -> anyhow::Result<()> {
    let tls = ClientTlsConfig::new()
        .ca_certificate(Certificate::from_pem(ca))
        .domain_name("node-1")
        .identity(Identity::from_pem(cert, key));
    let channel = Channel::from_shared(format!("https://{addr}"))?.tls_config(tls)?.connect().await?;
    ClusterClient::new(channel).ping(PingRequest { from_node: 2 }).await?;
    Ok(())
}

#[tokio::test]
async fn a_cluster_rotates_to_a_new_ca_without_a_restart() -> anyhow::Result<()> {
    init_logs();
    let mut cluster = TestCluster::start(3).await?;
    let client = cluster.client().await?;
    cluster.create_topic(&client, "rotated", 1, 3, &[]).await?;
    client.produce("rotated", 0, vec![Record::new("before")], Acks::All).await?;
    let dir = cluster.local().tls_dir();
    let old = ClusterCa::load(&dir)?;
    let new = ClusterCa::generate("the new cluster CA")?;
    let internal = cluster.local().internal_addr(1).unwrap_or_default().to_string();

    tracing::info!("--- every node trusts both CAs");
    // The test kit's nodes share one ca.pem.
    replace(&dir.join("ca.pem"), &format!("{}{}", old.cert_pem(), new.cert_pem()))?;
    wait_for_reloads(&cluster, 3, 1, "every node to trust both CAs").await?;

    tracing::info!("--- every node gets a certificate from the new CA");
    for id in 1..=3 {
        let (cert, key) = new.issue_node(id)?;
        replace(&dir.join(format!("node-{id}.key")), &key)?;
        replace(&dir.join(format!("node-{id}.pem")), &cert)?;
    }
    wait_for_reloads(&cluster, 3, 2, "every node to use its new certificate").await?;
    wait_for_checks(&cluster, 3, 2).await?;
    let closed = log_lines(&cluster, 3, CLOSED);
    assert!(closed.is_empty(), "a connection closed while both CAs were trusted: {closed:#?}");

    tracing::info!("--- the old CA is taken out: the connections made with its certificates close");
    replace(&dir.join("ca.pem"), new.cert_pem())?;
    wait_for_reloads(&cluster, 3, 3, "every node to trust only the new CA").await?;
    wait_for_checks(&cluster, 3, 3).await?;
    // Every connection between the nodes so far was made with the old CA's certificates (the
    // cluster started with them and nothing reconnected since): each is closed by one end or
    // both, and only because its peer's CA is no longer trusted.
    let closed = log_lines(&cluster, 3, CLOSED);
    assert!(!closed.is_empty(), "no connection made with the old CA was closed:\n{}", cluster.log_tails());
    assert!(closed.iter().all(|l| l.contains("UnknownIssuer")), "{closed:#?}");

    tracing::info!("--- new connections: the old CA's certificates are refused, the new CA's answered");
    let (old_cert, old_key) = old.issue_node(2)?;
    let refused = ping(&internal, old.cert_pem(), &old_cert, &old_key).await;
    assert!(refused.is_err(), "a certificate from the removed CA got through: {refused:?}");
    let (new_cert, new_key) = new.issue_node(2)?;
    ping(&internal, new.cert_pem(), &new_cert, &new_key).await?;

    tracing::info!("--- the cluster still commits, and no node restarted or refused a set");
    client.produce("rotated", 0, vec![Record::new("after")], Acks::All).await?;
    for id in 1..=3 {
        assert!(cluster.local().is_running(id), "node {id} stopped:\n{}", cluster.log_tail(id));
        let log = cluster.log_text(id);
        // The key and certificate are replaced one after the other: a node may see them
        // mismatched once, refuse that set, and take the complete one at its next look.
        assert!(!log.contains("does not name this node"), "node {id}:\n{}", cluster.log_tail(id));
    }
    Ok(())
}
