//! Faster failover: when a partition's leader has gone silent for the whole leader lease, one
//! designated follower stands for election at once instead of waiting out its election timer.
//!
//! openraft 0.9 lets a follower that has a leader stand for election only after the leader
//! lease (fixed at `election-timeout-max`) *plus* a random election timeout — with the defaults
//! 0.9–1.2 s after the leader's last message with the default timeouts (300–600 ms). The lease is what keeps a live leader from being
//! deposed: another follower refuses to vote while it has heard from the leader within the
//! lease. The random timeout only spreads out candidates so they do not split the vote; with
//! one designated candidate per partition it is not needed.
//!
//! So every node checks every [`CHECK_EVERY`] the partitions it follows: when the leader last
//! reached it more than the lease plus one heartbeat interval and [`MARGIN`] ago (so every other
//! follower's lease has run out too), and this node is the designated candidate — the first
//! replica in the partition's replica list other than the silent leader — it stands for
//! election, once per leader term. If that election fails (say the candidate's log is shorter
//! than another follower's), openraft's own timers elect someone as before.

use std::collections::{HashMap, HashSet};
use std::sync::Weak;
use std::time::Duration;

use openraft::ServerState;
use rill_raft::GroupId;

use crate::node::Node;

/// How often followers look for silent leaders.
const CHECK_EVERY: Duration = Duration::from_millis(50);
/// Slack on top of lease + heartbeat interval for clocks and scheduling.
const MARGIN: Duration = Duration::from_millis(50);

/// Runs until the node is dropped.
pub async fn run(node: Weak<Node>) {
    // (group, term) pairs this node already stood for; at most once per leader term.
    let mut stood: HashSet<(GroupId, u64)> = HashSet::new();
    loop {
        rill_rt::sleep(CHECK_EVERY).await;
        let Some(n) = node.upgrade() else { return };
        let raft = n.config().raft;
        let silent_for = Duration::from_millis(raft.election_max_ms + raft.heartbeat_ms) + MARGIN;
        // Built only when some leader is silent: most ticks find none.
        let mut replicas: Option<HashMap<GroupId, Vec<u64>>> = None;
        // Per leader node: silent past the lease? Asked once per check, not once per partition.
        let mut node_silent: HashMap<u64, bool> = HashMap::new();
        let liveness = n.multi().transport().liveness();
        for hosted in n.replicas() {
            let p = hosted.replica();
            // A quiescent group whose leader's node is heard from (or that this node leads) has
            // nothing to check: the common case with many idle partitions, read without locks.
            if let Some(l) = p.quiescence().quiescent_leader() {
                if l == n.id() || !*node_silent.entry(l).or_insert_with(|| liveness.silent_for(l) >= silent_for) {
                    continue;
                }
            }
            let group = p.group();
            let (state, leader, term) = {
                let m = p.raft().metrics();
                let m = m.borrow();
                (m.state, m.current_leader, m.current_term)
            };
            let Some(leader) = leader.filter(|l| *l != n.id()) else { continue };
            if state != ServerState::Follower || stood.contains(&(group, term)) {
                continue;
            }
            // A quiescent group hears no heartbeats: its leader's silence is its node's.
            let Some(silent) = p.quiescence().leader_silent_for(leader) else { continue };
            if silent < silent_for {
                continue;
            }
            let replicas = replicas.get_or_insert_with(|| {
                n.meta().replicas_of(n.id()).into_iter().map(|(_, _, a)| (a.group, a.replicas.clone())).collect()
            });
            let designated = replicas.get(&group).and_then(|r| r.iter().copied().find(|r| *r != leader));
            if designated != Some(n.id()) {
                continue;
            }
            stood.insert((group, term));
            tracing::info!(group, leader, term, "the leader is silent past its lease; standing for election");
            p.quiescence().wake();
            if let Err(e) = p.raft().trigger().elect().await {
                tracing::debug!(group, error = %e, "cannot stand for election");
            }
        }
        // Forget terms that are over: keep only the current term of each group.
        stood.retain(|(g, t)| n.replica(*g).is_some_and(|h| h.replica().raft().metrics().borrow().current_term == *t));
    }
}
