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
//! So every node checks every `CHECK_EVERY` the partitions it follows: when the leader last
//! reached it more than the lease plus one heartbeat interval and `MARGIN` ago (so every other
//! follower's lease has run out too), and this node is the designated candidate — the first
//! replica in the partition's replica list other than the silent leader — it stands for
//! election, once per leader term.
//!
//! That candidate's election fails when its log is shorter than another follower's — common on
//! a busy partition, where the leader dies with its last entry on one follower only. The
//! follower that refused it (for its log, noted by `rill_raft` as it answers) can win, but
//! openraft's own timer would make it stand only 0.9–1.2 s after the leader's last message. So a
//! follower that refused a shorter-log candidate after its leader went quiet stands at once
//! (once past its own lease), and into a term above that candidate's: in the
//! candidate's own term the candidate, having voted for itself, grants the vote only to a
//! greater node id (openraft orders one term's votes by node id). Only while its vote is needed
//! (the candidate has no majority without it and the silent leader: replication factor 3 or 4),
//! so it never deposes a candidate that won without it. Should that fail too, openraft's
//! timers elect someone.

use std::collections::{HashMap, HashSet};
use std::sync::Weak;
use std::time::Duration;

use openraft::ServerState;
use rill_raft::{GroupId, NodeId, Raft, RefusedCandidate};

use crate::node::Node;

/// How often followers look for silent leaders.
const CHECK_EVERY: Duration = Duration::from_millis(50);
/// Slack on top of lease + heartbeat interval for clocks and scheduling.
const MARGIN: Duration = Duration::from_millis(50);
/// Elections [`stand_above`] starts at most: the candidate's term is at most one above this
/// replica's, unless the replica fell further behind in terms (then its own timers elect it).
const MAX_ELECTIONS_TO_PASS: usize = 2;
/// How long openraft may take to act on an election trigger.
const ELECTION_TAKEN_WITHIN: Duration = Duration::from_millis(500);

/// Runs until the node is dropped.
pub async fn run(node: Weak<Node>) {
    // (group, term) pairs this node already stood for; at most once per leader term.
    let mut stood: HashSet<(GroupId, u64)> = HashSet::new();
    // Per group, the highest term of a candidate refused here for its shorter log, and when.
    let mut refused: HashMap<GroupId, RefusedCandidate> = HashMap::new();
    loop {
        let Some(multi) = node.upgrade().map(|n| n.multi().clone()) else { return };
        // A refusal is acted on at once: the candidate it refused has stood already.
        tokio::select! {
            biased;
            () = multi.refusal_noted() => {}
            () = rill_rt::sleep(CHECK_EVERY) => {}
        }
        drop(multi);
        let Some(n) = node.upgrade() else { return };
        let raft = n.config().raft;
        let silent_for = Duration::from_millis(raft.election_max_ms + raft.heartbeat_ms) + MARGIN;
        let lease = Duration::from_millis(raft.election_max_ms) + MARGIN;
        // Built only when some leader is silent: most ticks find none.
        let mut replicas: Option<HashMap<GroupId, Vec<u64>>> = None;
        // Per leader node: silent past the lease? Asked once per check, not once per partition.
        let mut node_silent: HashMap<u64, bool> = HashMap::new();
        let liveness = n.multi().transport().liveness();
        // Candidates this node refused for their shorter logs: kept until this replica stands
        // or its term reaches theirs (this node may refuse before its own lease has run out).
        for (group, r) in n.multi().take_refused_shorter_candidates() {
            let slot = refused.entry(group).or_insert(r);
            slot.term = slot.term.max(r.term);
            slot.at = slot.at.max(r.at);
        }
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
            // A refusal counts only if it came after the leader went quiet (an earlier one is a
            // cut-off replica's campaign against a live leader). Then this replica need only be
            // past its own lease: the candidate has waited out everyone's.
            let quiet_since = rill_rt::now().checked_sub(silent);
            let refusal = refused.get(&group).filter(|r| r.term > term && quiet_since.is_some_and(|q| r.at >= q));
            if silent < if refusal.is_some() { lease } else { silent_for } {
                continue;
            }
            let replicas = replicas.get_or_insert_with(|| {
                n.meta().replicas_of(n.id()).into_iter().map(|(_, _, a)| (a.group, a.replicas.clone())).collect()
            });
            let designated = replicas.get(&group).and_then(|r| r.iter().copied().find(|r| *r != leader));
            // Only while this replica's vote is needed: without it and the silent leader's, the
            // candidate has no majority (so one that won without it is never deposed).
            let voters = replicas.get(&group).map_or(0, Vec::len);
            let needed = voters.saturating_sub(2) < voters / 2 + 1;
            let above = refusal.filter(|_| needed).map(|r| r.term);
            if designated != Some(n.id()) && above.is_none() {
                continue;
            }
            stood.insert((group, term));
            refused.remove(&group);
            p.quiescence().wake();
            match above {
                Some(candidate_term) => {
                    tracing::info!(
                        group,
                        leader,
                        term,
                        candidate_term,
                        "the leader is silent past its lease and a candidate with a shorter log stood; standing above it"
                    );
                    rill_rt::spawn(stand_above(group, p.raft().clone(), leader, candidate_term));
                }
                None => {
                    tracing::info!(group, leader, term, "the leader is silent past its lease; standing for election");
                    if let Err(e) = p.raft().trigger().elect().await {
                        tracing::debug!(group, error = %e, "cannot stand for election");
                    }
                }
            }
        }
        // Forget terms that are over: keep only the current term of each group.
        let term_of = |g: &GroupId| n.replica(*g).map(|h| h.replica().raft().metrics().borrow().current_term);
        stood.retain(|(g, t)| term_of(g) == Some(*t));
        refused.retain(|g, r| term_of(g).is_some_and(|now| now < r.term));
    }
}

/// Stands for election in `group` until its vote is in a term above `candidate_term`, or some
/// replica other than `silent_leader` leads. openraft's election takes the replica's own term
/// plus one: twice when the replica is still at the term the candidate left behind.
async fn stand_above(group: GroupId, raft: Raft, silent_leader: NodeId, candidate_term: u64) {
    let mut metrics = raft.metrics();
    for _ in 0..MAX_ELECTIONS_TO_PASS {
        let (term, led) = {
            let m = metrics.borrow();
            (m.vote.leader_id().term, m.current_leader.is_some_and(|l| l != silent_leader))
        };
        if term > candidate_term || led {
            return;
        }
        if let Err(e) = raft.trigger().elect().await {
            tracing::debug!(group, error = %e, "cannot stand for election");
            return;
        }
        // The trigger only queues the election: wait until openraft has taken its new vote.
        let moved = metrics.wait_for(|m| m.vote.leader_id().term > term || m.state == ServerState::Leader);
        if !matches!(rill_rt::timeout(ELECTION_TAKEN_WITHIN, moved).await, Ok(Ok(_))) {
            return;
        }
    }
}
