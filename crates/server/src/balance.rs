//! Preferred-leader balancing: leadership returns to each partition's preferred replica (the
//! first in its replica list, which placement spreads evenly) once that replica is back in sync.
//!
//! Without it, every failover piles leaders onto the survivors for good: after a rolling restart
//! one node would lead everything. Kafka calls this `auto.leader.rebalance.enable`.
//!
//! Every node checks, every 5 s, the partitions it leads. It hands one over when the preferred
//! replica is in the ISR and this node has led the partition for longer than `settled_for`
//! (10 s, and longer than the leader lease, so this node's vote goes to the preferred replica;
//! see `rill_broker::handover`). Both are [`crate::config::RebalanceTiming`]. Handover: stop new writes, wait until every produce in
//! progress is answered and the preferred replica has the whole log, then ask it to stand for
//! election (`Cluster.ElectLeader`). Writes resume on failure. At most `MAX_MOVES_AT_ONCE`
//! partitions move at a time per node; each is unavailable for writes for about one election
//! round trip, and producers retry (`LEADER_NOT_AVAILABLE`).

use std::collections::HashMap;
use std::sync::{Arc, Weak};
use std::time::Duration;

use futures::future::join_all;
use rill_broker::Replica;
use rill_proto::internal::ElectLeaderRequest;
use rill_raft::{GroupId, NodeId};
use rill_rt::Instant;

use crate::node::Node;

/// How long the preferred replica may take to win its election.
pub const ELECTION_TIMEOUT: Duration = Duration::from_secs(2);
/// How long the preferred replica may take to replicate the last writes before the handover.
const CATCH_UP_TIMEOUT: Duration = Duration::from_secs(2);
/// Partitions handed over concurrently by one node.
const MAX_MOVES_AT_ONCE: usize = 4;
/// Largest replication factor moved: with more replicas, the old leader's and the preferred
/// replica's votes are not a majority (see `rill_broker::handover`).
const MAX_REPLICATION_FACTOR: usize = 3;

/// How long a node must have led a partition before handing it over: comfortably longer than
/// the leader lease (openraft's election-timeout-max), and long enough that a flapping replica
/// is not handed leadership.
fn settled_for(node: &Node) -> Duration {
    Duration::from_millis(node.config().raft.election_max_ms * 2).max(node.config().rebalance_timing.min_leadership)
}

/// Runs until the node is dropped.
pub async fn run(node: Weak<Node>) {
    // Per led group: the term and when this node was first seen leading it in that term.
    let mut led_since: HashMap<GroupId, (u64, Instant)> = HashMap::new();
    loop {
        let Some(every) = node.upgrade().map(|n| n.config().rebalance_timing.check_every) else { return };
        rill_rt::sleep(every).await;
        let Some(n) = node.upgrade() else { return };
        let now = rill_rt::now();
        let settled = settled_for(&n);
        let meta = n.meta();
        let mut still_led = HashMap::new();
        let mut moves = Vec::new();
        for (topic, index, assignment) in meta.replicas_of(n.id()) {
            let Some(p) = n.replica(assignment.group) else { continue };
            let state = p.replica().state();
            if !state.is_leader {
                continue;
            }
            let since = match led_since.get(&assignment.group) {
                Some((term, at)) if *term == state.term => *at,
                _ => now,
            };
            still_led.insert(assignment.group, (state.term, since));
            let Some(&preferred) = assignment.replicas.first() else { continue };
            if preferred == n.id()
                || assignment.replicas.len() > MAX_REPLICATION_FACTOR
                || now.saturating_duration_since(since) < settled
                || !state.isr.contains(&preferred)
            {
                continue;
            }
            moves.push((p, preferred, format!("{}/{index}", topic.name)));
        }
        led_since = still_led;
        for batch in moves.chunks(MAX_MOVES_AT_ONCE) {
            join_all(batch.iter().map(|(p, to, name)| hand_over(&n, p.replica(), *to, name))).await;
        }
    }
}

/// Partitions handed over concurrently during a graceful shutdown.
const SHUTDOWN_MOVES_AT_ONCE: usize = 32;
/// Longest a graceful shutdown spends handing partitions over.
const SHUTDOWN_HANDOVER_LIMIT: Duration = Duration::from_secs(10);
/// A follower that has not answered for this long is not handed a partition on shutdown.
const RECENTLY_HEARD: Duration = Duration::from_secs(1);

/// On graceful shutdown: hands every partition this node leads to an in-sync replica that
/// answered within the last second (the preferred replica first), so producers are not left
/// waiting for a failover (Kafka's controlled shutdown). Bounded by `SHUTDOWN_HANDOVER_LIMIT`;
/// a partition that cannot be handed over fails over as after a crash.
pub async fn hand_over_all(node: &Arc<Node>) {
    let meta = node.meta();
    let now = rill_rt::now();
    let mut moves = Vec::new();
    for (topic, index, assignment) in meta.replicas_of(node.id()) {
        let Some(p) = node.replica(assignment.group) else { continue };
        let state = p.replica().state();
        if !state.is_leader || assignment.replicas.len() > MAX_REPLICATION_FACTOR {
            continue;
        }
        let name = format!("{}/{index}", topic.name);
        // The contact the ISR is judged by: a quiescent group sends no heartbeats, so its
        // followers count as heard while their nodes answer.
        let silent_for = |r: NodeId| p.replica().quiescence().last_contact(r).map(|t| now.saturating_duration_since(t));
        let target =
            assignment.replicas.iter().copied().find(|r| {
                *r != node.id() && state.isr.contains(r) && silent_for(*r).is_some_and(|s| s < RECENTLY_HEARD)
            });
        match target {
            Some(to) => moves.push((p, to, name)),
            None => {
                let followers: Vec<(NodeId, Option<Duration>)> =
                    assignment.replicas.iter().filter(|r| **r != node.id()).map(|r| (*r, silent_for(*r))).collect();
                tracing::warn!(
                    partition = name,
                    isr = ?state.isr,
                    silent_for = ?followers,
                    "no in-sync replica heard from recently; the partition fails over after this node stops"
                );
            }
        }
    }
    if moves.is_empty() {
        return;
    }
    tracing::info!(node = node.id(), partitions = moves.len(), "handing led partitions over before stopping");
    let all = async {
        for batch in moves.chunks(SHUTDOWN_MOVES_AT_ONCE) {
            join_all(batch.iter().map(|(p, to, name)| hand_over(node, p.replica(), *to, name))).await;
        }
    };
    if rill_rt::timeout(SHUTDOWN_HANDOVER_LIMIT, all).await.is_err() {
        tracing::warn!(node = node.id(), "stopping before every led partition was handed over");
    }
}

/// Hands leadership of `p` to `to` (which must be in sync); logs the outcome.
async fn hand_over(n: &Arc<Node>, p: &Replica, to: NodeId, name: &str) {
    let Some(handover) = p.prepare_handover(to, CATCH_UP_TIMEOUT).await else {
        tracing::debug!(partition = name, to, "preferred replica did not catch up; leadership stays");
        return;
    };
    let Some(mut client) = n.cluster_client(to) else { return };
    let asked = rill_rt::timeout(
        ELECTION_TIMEOUT + Duration::from_secs(1),
        client.elect_leader(ElectLeaderRequest { group_id: p.group(), from_node: n.id() }),
    )
    .await;
    drop(handover);
    match asked {
        Ok(Ok(r)) if r.get_ref().elected => {
            tracing::info!(partition = name, from = n.id(), to, "leadership handed over")
        }
        Ok(Ok(_)) => tracing::info!(partition = name, to, "the replica handed leadership did not win its election"),
        Ok(Err(e)) => tracing::debug!(partition = name, to, error = %e, "cannot ask the replica to lead"),
        Err(_) => tracing::debug!(partition = name, to, "the replica handed leadership did not answer in time"),
    }
}
