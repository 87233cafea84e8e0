//! The trust boundary between clients and nodes: a node's client listener serves only the public
//! services and its internal listener only the node-to-node ones, over mutual TLS. Every RPC in
//! `proto/` (taken from the compiled descriptor set, so a new RPC is covered without editing this
//! test) is sent to the listener that must not serve it, and every internal RPC to the internal
//! listener without a node certificate (plain TCP, TLS without a client certificate, a
//! certificate from another CA): all are refused — with the metadata and every partition's
//! records the same before and after.

use std::collections::BTreeMap;

use rill_client::{Acks, Client, Record};
use rill_proto::descriptor::{rpcs, Rpc};
use tonic::codegen::http::uri::PathAndQuery;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Identity};
use tonic::Code;

use crate::harness::{init_logs, read_all, text, TestCluster};

/// What the cluster stores, in a form that compares: nodes, topics with their placement and
/// offsets, every record. Leadership and liveness are left out (they may move on their own).
async fn stored(client: &Client) -> anyhow::Result<String> {
    let mut out = String::new();
    let cluster = client.describe_cluster().await?;
    let nodes: BTreeMap<u64, (String, bool)> =
        cluster.nodes.iter().map(|n| (n.node_id, (n.address.clone(), n.metadata_voter))).collect();
    out.push_str(&format!("nodes {nodes:?}\n"));
    for t in client.list_topics_with(true).await? {
        let d = client.describe_topic(&t.name).await?;
        out.push_str(&format!("topic {} {:?} {} configs {:?}\n", d.name, d.topic_id, d.kind, d.configs));
        for p in &d.partitions {
            out.push_str(&format!(
                "  partition {} replicas {:?} offsets {}..{} hw {}\n",
                p.partition, p.replicas, p.log_start_offset, p.log_end_offset, p.high_watermark
            ));
            if !d.internal {
                for r in read_all(client, &d.name, p.partition).await? {
                    out.push_str(&format!("    {} {}\n", r.offset, text(&r.value)));
                }
            }
        }
    }
    Ok(out)
}

/// Calls `rpc` at `addr` (plain TCP, or TLS with `tls`) with an empty message (every protobuf
/// message decodes from zero bytes) and returns the status code; `Err` when no connection could
/// be made (a refused handshake).
async fn call_with(addr: &str, tls: Option<ClientTlsConfig>, rpc: &Rpc) -> anyhow::Result<Code> {
    let channel = match tls {
        None => Channel::from_shared(format!("http://{addr}"))?.connect().await?,
        Some(tls) => Channel::from_shared(format!("https://{addr}"))?.tls_config(tls)?.connect().await?,
    };
    let mut grpc = tonic::client::Grpc::new(channel);
    grpc.ready().await?;
    let path = PathAndQuery::try_from(rpc.path())?;
    let codec = tonic_prost::ProstCodec::<(), ()>::default();
    Ok(match grpc.unary(tonic::Request::new(()), path, codec).await {
        Ok(_) => Code::Ok,
        Err(status) => status.code(),
    })
}

/// True when a call was not answered by a handler: no connection, or a transport-level status
/// (plain HTTP/2 into a TLS port surfaces as `INTERNAL`, a refused client certificate as
/// `UNAVAILABLE`, `UNKNOWN` or `CANCELLED`). `Cluster.Ping`, whose handler always answers OK, is among the
/// calls, so a call that got through would show.
fn refused(outcome: &anyhow::Result<Code>) -> bool {
    matches!(outcome, Err(_) | Ok(Code::Unavailable | Code::Unknown | Code::Internal | Code::Cancelled))
}

/// Calls `rpc` over plain TCP.
async fn call(addr: &str, rpc: &Rpc) -> anyhow::Result<Code> {
    call_with(addr, None, rpc).await
}

/// TLS to node 1's internal listener trusting `ca`, presenting `identity` if any.
fn tls_to_node_1(ca: &[u8], identity: Option<(&[u8], &[u8])>) -> ClientTlsConfig {
    let tls = ClientTlsConfig::new().ca_certificate(Certificate::from_pem(ca)).domain_name("node-1");
    match identity {
        Some((cert, key)) => tls.identity(Identity::from_pem(cert, key)),
        None => tls,
    }
}

#[tokio::test]
async fn each_listener_serves_only_its_own_services() -> anyhow::Result<()> {
    init_logs();
    let mut cluster = TestCluster::start(3).await?;
    let client = cluster.client().await?;
    cluster.create_topic(&client, "guarded", 2, 3, &[]).await?;
    // Every partition led, so the snapshots below describe settled state.
    for internal in ["__consumer_offsets", "__transaction_state"] {
        cluster.wait_for_leaders(&client, internal).await?;
    }
    for p in 0..2u32 {
        let records = (0..5).map(|i| Record::new(format!("p{p}-{i}"))).collect();
        client.produce("guarded", p, records, Acks::All).await?;
    }
    let before = stored(&client).await?;

    let rpcs = rpcs()?;
    let (internal, public): (Vec<&Rpc>, Vec<&Rpc>) = rpcs.iter().partition(|r| r.internal);
    assert!(
        internal.len() >= 10 && public.len() >= 15,
        "descriptor lists {} internal, {} public",
        internal.len(),
        public.len()
    );
    let client_port = cluster.addr(1);
    let internal_port = cluster.local().internal_addr(1).unwrap_or_default().to_string();

    let tls = cluster.local().tls_dir();
    let ca = std::fs::read(tls.join("ca.pem"))?;
    let (cert, key) = (std::fs::read(tls.join("node-2.pem"))?, std::fs::read(tls.join("node-2.key"))?);
    let as_node_2 = || tls_to_node_1(&ca, Some((&cert, &key)));

    // With a node's certificate the internal listener does serve the node-to-node services (a
    // ping answers), so a refusal below is the boundary's, not a dead port's.
    let ping = rpcs.iter().find(|r| r.path() == "/rill.internal.Cluster/Ping").expect("Ping in the descriptor");
    assert_eq!(call_with(&internal_port, Some(as_node_2()), ping).await?, Code::Ok);

    for rpc in &internal {
        assert_eq!(call(&client_port, rpc).await?, Code::Unimplemented, "{} on the client listener", rpc.path());
    }
    for rpc in &public {
        let code = call_with(&internal_port, Some(as_node_2()), rpc).await?;
        assert_eq!(code, Code::Unimplemented, "{} on the internal listener", rpc.path());
    }

    // Without a node certificate from the cluster's CA, nothing gets through the internal
    // listener: plain TCP, TLS without a client certificate, a certificate from another CA.
    let stranger = rill_tls::issue::ClusterCa::generate("another cluster")?;
    let (stranger_cert, stranger_key) = stranger.issue_node(2)?;
    for rpc in &internal {
        let plain = call(&internal_port, rpc).await;
        assert!(refused(&plain), "{} over plain TCP: {plain:?}", rpc.path());
        let anonymous = call_with(&internal_port, Some(tls_to_node_1(&ca, None)), rpc).await;
        assert!(refused(&anonymous), "{} without a client certificate: {anonymous:?}", rpc.path());
        let foreign = tls_to_node_1(&ca, Some((stranger_cert.as_bytes(), stranger_key.as_bytes())));
        let foreign = call_with(&internal_port, Some(foreign), rpc).await;
        assert!(refused(&foreign), "{} with another CA's certificate: {foreign:?}", rpc.path());
    }

    let after = stored(&client).await?;
    assert_eq!(before, after, "the refused calls changed what the cluster stores");
    for id in 1..=3 {
        assert!(cluster.local().is_running(id), "node {id} stopped:\n{}", cluster.log_tail(id));
    }
    Ok(())
}
