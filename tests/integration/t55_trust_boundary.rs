//! The trust boundary between clients and nodes: a node's client listener serves only the public
//! services and its internal listener only the node-to-node ones, over mutual TLS. Every RPC in
//! `proto/` (taken from the compiled descriptor set, so a new RPC is covered without editing this
//! test) is sent to the listener that must not serve it, and every internal RPC to the internal
//! listener without a node certificate (plain TCP, TLS without a client certificate, a
//! certificate from another CA): all are refused — with the metadata and every partition's
//! records the same before and after. With a node's certificate, every message that names
//! another node (a vote's candidate, an append's or snapshot's leader, a `from_node`, a joining
//! id) is refused too, as is a metadata proposal from a certified node that is not a member.

use std::collections::BTreeMap;

use prost::Message;
use rill_client::{Acks, Client, Record};
use rill_proto::descriptor::{rpcs, Rpc};
use rill_proto::internal::cluster_client::ClusterClient;
use rill_proto::internal::raft_transport_client::RaftTransportClient;
use rill_proto::internal::{
    AddNodeRequest, ElectLeaderRequest, PingRequest, ProposeMetaRequest, QuiesceRequest, RaftBatch, RaftMessage,
};
use rill_proto::raft as pb;
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

/// A 3-node cluster with topic "guarded" (`partitions` partitions, RF 3) holding `records`
/// records per partition, and every partition, the internal ones included, led: the snapshots
/// the tests take describe settled state.
async fn settled_cluster(partitions: u32, records: usize) -> anyhow::Result<(TestCluster, Client)> {
    let cluster = TestCluster::start(3).await?;
    let client = cluster.client().await?;
    cluster.create_topic(&client, "guarded", partitions, 3, &[]).await?;
    for internal in ["__consumer_offsets", "__transaction_state"] {
        cluster.wait_for_leaders(&client, internal).await?;
    }
    for p in 0..partitions {
        let batch = (0..records).map(|i| Record::new(format!("p{p}-{i}"))).collect();
        client.produce("guarded", p, batch, Acks::All).await?;
    }
    Ok((cluster, client))
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
/// `UNAVAILABLE`, `UNKNOWN` or `CANCELLED`). A call that reached a handler answers something else
/// (`PERMISSION_DENIED` for an empty message naming node 0, `OK`, `NOT_FOUND`...), so a call that
/// got through would show.
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
    let (mut cluster, client) = settled_cluster(2, 5).await?;
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
    let channel = Channel::from_shared(format!("https://{internal_port}"))?.tls_config(as_node_2())?.connect().await?;
    ClusterClient::new(channel).ping(PingRequest { from_node: 2 }).await?;

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

/// The status code of a call's answer (`OK` when it succeeded).
fn code<T>(answer: Result<tonic::Response<T>, tonic::Status>) -> Code {
    answer.map_or_else(|s| s.code(), |_| Code::Ok)
}

/// A Raft message for group 0.
fn group_0(payload: impl Message) -> RaftMessage {
    RaftMessage { group_id: 0, payload: payload.encode_to_vec().into(), error: String::new() }
}

/// A leader's vote for `node` in a term far ahead of the cluster's: were it accepted, the
/// metadata group would follow `node`.
fn leader_vote(node: u64) -> Option<pb::Vote> {
    Some(pb::Vote { term: 1_000_000, node_id: node, committed: true })
}

#[tokio::test]
async fn a_node_certificate_speaks_only_for_its_own_node() -> anyhow::Result<()> {
    init_logs();
    let (mut cluster, client) = settled_cluster(1, 1).await?;
    let before = stored(&client).await?;
    let leader_before = client.describe_cluster().await?.metadata_leader;

    let internal_port = cluster.local().internal_addr(1).unwrap_or_default().to_string();
    let tls = cluster.local().tls_dir();
    let ca = std::fs::read(tls.join("ca.pem"))?;
    let (cert, key) = (std::fs::read(tls.join("node-2.pem"))?, std::fs::read(tls.join("node-2.key"))?);
    let dial = |identity: (&[u8], &[u8])| {
        let tls = tls_to_node_1(&ca, Some(identity));
        let addr = format!("https://{internal_port}");
        async move { anyhow::Ok(Channel::from_shared(addr)?.tls_config(tls)?.connect().await?) }
    };
    let as_node_2 = dial((&cert, &key)).await?;
    let mut raft = RaftTransportClient::new(as_node_2.clone());
    let mut cluster_rpc = ClusterClient::new(as_node_2);
    let denied = Code::PermissionDenied;

    // Liveness: a ping or heartbeat batch in another node's name would keep it "alive".
    assert_eq!(code(cluster_rpc.ping(PingRequest { from_node: 2 }).await), Code::Ok);
    assert_eq!(code(cluster_rpc.ping(PingRequest { from_node: 3 }).await), denied);
    let ping_as = |from_node| RaftBatch { from_node, ..Default::default() };
    assert_eq!(code(raft.heartbeats(ping_as(2)).await), Code::Ok);
    assert_eq!(code(raft.heartbeats(ping_as(3)).await), denied);
    assert_eq!(code(raft.heartbeats(ping_as(1)).await), denied, "node 1's own id, from node 2");
    assert_eq!(code(raft.quiesce(QuiesceRequest { from_node: 3, groups: Vec::new() }).await), denied);

    // Raft messages in another node's name: an append and a snapshot "from leader 3", a vote
    // "for candidate 3", alone and inside node 2's own heartbeat batch.
    let append = pb::AppendEntriesRequest { vote: leader_vote(3), ..Default::default() };
    assert_eq!(code(raft.append_entries(group_0(append.clone())).await), denied);
    let vote = pb::VoteRequest {
        vote: Some(pb::Vote { committed: false, ..leader_vote(3).unwrap_or_default() }),
        last_log_id: None,
    };
    assert_eq!(code(raft.vote(group_0(vote)).await), denied);
    let meta = pb::SnapshotMeta { snapshot_id: "forged".into(), ..Default::default() };
    let snapshot = |vote, offset| pb::InstallSnapshotRequest {
        vote,
        meta: Some(meta.clone()),
        offset,
        data: vec![0; 16].into(),
        done: false,
    };
    assert_eq!(code(raft.install_snapshot(group_0(snapshot(leader_vote(3), 0))).await), denied);
    let batch = RaftBatch { from_node: 2, messages: vec![group_0(append)], ..Default::default() };
    let answers = raft.heartbeats(batch).await?.into_inner().messages;
    assert!(
        answers.len() == 1 && answers[0].error.contains("names node 3"),
        "a forged append inside a batch must be refused: {answers:?}"
    );
    // As itself, node 2 still cannot make node 1 allocate up to a chunk's declared offset.
    let far = raft.install_snapshot(group_0(snapshot(leader_vote(2), 1 << 40))).await;
    assert_eq!(code(far), Code::InvalidArgument);

    // Cluster RPCs: joining as another id, proposing or electing in another node's name.
    let join_as_9 = AddNodeRequest {
        node_id: 9,
        address: "127.0.0.1:1".into(),
        client_address: "127.0.0.1:2".into(),
        kafka_address: String::new(),
    };
    assert_eq!(code(cluster_rpc.add_node(join_as_9).await), denied);
    let propose_as = |from_node| ProposeMetaRequest { command: vec![0xff].into(), from_node };
    assert_eq!(code(cluster_rpc.propose_meta(propose_as(1)).await), denied);
    assert_eq!(code(cluster_rpc.elect_leader(ElectLeaderRequest { group_id: 0, from_node: 3 }).await), denied);

    // A certificate from the cluster's own CA for a node that is not a member: it speaks for
    // node 9, but node 9 may not propose metadata or move leadership.
    let (cert_9, key_9) = rill_tls::issue::ClusterCa::load(&tls)?.issue_node(9)?;
    let mut as_node_9 = ClusterClient::new(dial((cert_9.as_bytes(), key_9.as_bytes())).await?);
    assert_eq!(code(as_node_9.ping(PingRequest { from_node: 9 }).await), Code::Ok, "a certified node may ping");
    assert_eq!(code(as_node_9.propose_meta(propose_as(9)).await), denied);
    assert_eq!(code(as_node_9.elect_leader(ElectLeaderRequest { group_id: 0, from_node: 9 }).await), denied);

    assert_eq!(before, stored(&client).await?, "the refused calls changed what the cluster stores");
    assert_eq!(leader_before, client.describe_cluster().await?.metadata_leader, "metadata leadership moved");
    for id in 1..=3 {
        assert!(cluster.local().is_running(id), "node {id} stopped:\n{}", cluster.log_tail(id));
    }
    Ok(())
}
