//! Adding a node to a running cluster.
//!
//! The founding members (`[cluster] members`) are the voters of the metadata group. A node
//! started with `--join` is not one of them: it asks a member to add it, and the metadata leader
//!
//! 1. adds it to the metadata group as a **learner** — it receives and applies the metadata log
//!    like everyone else (so it knows every topic and where every replica lives) but never votes
//!    on metadata, so adding brokers does not change the metadata quorum;
//! 2. registers its id and addresses (internal and client) in the metadata — from then on
//!    replica placement counts it.
//!
//! Only a node an operator admitted (`rill cluster admit N`, a replicated admission in the
//! metadata) is added; its certificate must name it too (checked by the `Cluster` service).
//! A node not admitted yet keeps asking, and joins once the admission is made.
//!
//! The new node is joined once its own copy of the metadata lists it. Joining is idempotent: a
//! restarted node that joined before is joined already. Existing partitions stay where they are;
//! new topics and new partitions spread over every live node.

use std::collections::VecDeque;
use std::sync::{Arc, Weak};
use std::time::Duration;

use openraft::error::{ClientWriteError, RaftError};
use openraft::BasicNode;
use rill_meta::{MetaCommand, NodeInfo};
use rill_proto::internal::AddNodeRequest;
use rill_raft::NodeId;

use crate::node::Node;

/// How long a join request may take before the next member is asked.
const ASK_TIMEOUT: Duration = Duration::from_secs(5);
/// How long the new node waits to see itself in its metadata after a member accepted it.
const APPLY_TIMEOUT: Duration = Duration::from_secs(10);
/// Pause between rounds of asking every member.
const ROUND_BACKOFF: Duration = Duration::from_millis(500);

/// Why the metadata leader did not add a node.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AddNodeError {
    /// This node does not lead the metadata group; ask the leader (when known).
    #[error("not the metadata leader")]
    NotLeader(Option<NodeId>),
    /// The node can never join as asked (its id or address belongs to another node).
    #[error("{0}")]
    Refused(String),
    /// A transient problem (a membership change in progress, no quorum); ask again.
    #[error("{0}")]
    Retry(String),
}

/// On the metadata leader: adds node `new.id`, reached by the other nodes at
/// `new.internal_addr`, as a metadata learner and registers it with both addresses.
pub async fn add_node(node: &Node, new: NodeInfo) -> Result<(), AddNodeError> {
    let (id, addr) = (new.id, new.internal_addr.as_str());
    if id == 0 {
        return Err(AddNodeError::Refused("node ids start at 1".into()));
    }
    if addr.is_empty() || new.addr.is_empty() {
        return Err(AddNodeError::Refused(format!(
            "node {id} must name both its internal and its client address to join"
        )));
    }
    if !node.is_meta_leader() {
        return Err(AddNodeError::NotLeader(node.meta_leader()));
    }
    let membership = node.meta_raft().metrics().borrow().membership_config.membership().clone();
    if membership.voter_ids().any(|v| v == id) {
        return Err(AddNodeError::Refused(format!(
            "node id {id} is a founding member (a metadata voter); start it with its --cluster-members and without --join"
        )));
    }
    let meta = node.meta();
    if let Some(known) = meta.nodes.get(&id).filter(|n| n.peer_addr() != addr) {
        return Err(AddNodeError::Refused(format!(
            "node id {id} is registered at {}; every node needs its own id, and a node's internal address cannot change",
            known.peer_addr()
        )));
    }
    if let Some(other) = meta.nodes.values().find(|n| n.peer_addr() == addr && n.id != id) {
        return Err(AddNodeError::Refused(format!("address {addr} belongs to node {}", other.id)));
    }
    // A certificate from the cluster's CA is not enough: an operator admits each new node id
    // (`rill cluster admit`). A node registered before rejoins without one.
    if !meta.nodes.contains_key(&id) && !meta.admitted.contains(&id) {
        return Err(AddNodeError::Retry(format!(
            "node {id} is not admitted to the cluster: an operator runs `rill cluster admit {id}` first"
        )));
    }
    if membership.get_node(&id).is_none() {
        match node.meta_raft().add_learner(id, BasicNode::new(addr), false).await {
            Ok(_) => tracing::info!(node = id, addr, "added a metadata learner"),
            Err(RaftError::APIError(ClientWriteError::ForwardToLeader(f))) => {
                return Err(AddNodeError::NotLeader(f.leader_id))
            }
            Err(RaftError::APIError(ClientWriteError::ChangeMembershipError(e))) => {
                return Err(AddNodeError::Retry(format!("metadata membership change: {e}")))
            }
            Err(RaftError::Fatal(e)) => return Err(AddNodeError::Retry(format!("metadata group stopped: {e}"))),
        }
    }
    node.propose_meta(&MetaCommand::RegisterNodes { nodes: vec![new] })
        .await
        .map_err(|e| AddNodeError::Retry(e.to_string()))?;
    Ok(())
}

/// True once this node's own metadata lists it at its advertised addresses.
fn joined(node: &Node) -> bool {
    node.meta().nodes.get(&node.id()) == Some(&node.info())
}

/// On a node started with `--join`: asks the members to add it until its metadata lists it.
/// Returns `Err` with the reason when the cluster refuses it for good.
pub async fn join_cluster(node: Weak<Node>) -> Result<(), String> {
    let mut rounds = 0u32;
    loop {
        let Some(n) = node.upgrade() else { return Ok(()) };
        if joined(&n) {
            tracing::info!(node = n.id(), addr = n.config().advertised(), "member of the cluster");
            return Ok(());
        }
        let problem = match ask_members(&n).await {
            Ok(()) => {
                if n.wait_for_meta(APPLY_TIMEOUT, |m| m.nodes.contains_key(&n.id())).await {
                    continue;
                }
                "accepted, but the metadata has not reached this node yet".to_string()
            }
            Err(AskError::Refused(reason)) => return Err(reason),
            Err(AskError::Unavailable(problem)) => problem,
        };
        rounds += 1;
        if rounds % 10 == 1 {
            tracing::warn!(node = n.id(), problem = %problem, "cannot join the cluster yet; retrying");
        }
        drop(n);
        rill_rt::sleep(ROUND_BACKOFF).await;
    }
}

enum AskError {
    Refused(String),
    Unavailable(String),
}

/// One round: asks the members in turn, following leader hints, until one accepts.
async fn ask_members(n: &Arc<Node>) -> Result<(), AskError> {
    let mut queue: VecDeque<NodeId> = n.config().members.keys().copied().collect();
    let mut asked = 0;
    let mut last = String::from("no member answered");
    while let Some(target) = queue.pop_front() {
        asked += 1;
        if asked > 2 * n.config().members.len() + 2 {
            break;
        }
        let Some(mut client) = n.cluster_client(target) else {
            last = format!("no address for node {target}");
            continue;
        };
        let me = n.info();
        let req = AddNodeRequest {
            node_id: me.id,
            address: me.internal_addr,
            client_address: me.addr,
            kafka_address: me.kafka_addr,
        };
        match rill_rt::timeout(ASK_TIMEOUT, client.add_node(req)).await {
            Err(_) => last = format!("node {target} did not answer within {ASK_TIMEOUT:?}"),
            Ok(Err(status)) => last = format!("node {target}: {}", status.message()),
            Ok(Ok(resp)) => {
                let resp = resp.into_inner();
                if !resp.refused.is_empty() {
                    return Err(AskError::Refused(resp.refused));
                }
                if !resp.not_leader {
                    return Ok(());
                }
                last = format!("node {target} does not lead the metadata group");
                if let Some(leader) = resp.leader.filter(|l| *l != target) {
                    queue.push_front(leader);
                }
            }
        }
    }
    Err(AskError::Unavailable(last))
}
