//! Node-level liveness: when each peer node was last heard from, and whether it restarted.
//!
//! Quiescent groups send no heartbeats (see [`crate::quiesce`]), so a follower cannot tell from
//! its group that the leader died, nor a leader that a follower did. Every node therefore pings
//! each peer it has a channel to every [`PING_EVERY`] (an empty `Heartbeats` call); both the
//! ping and its answer carry the sender's node id and *incarnation*, a random number drawn at
//! each start. A quiescent group reads its peers' liveness here instead of from its own
//! heartbeats, and a changed incarnation (a peer restarted, and may have lost what it had not
//! synced) wakes every quiescent group the peer is part of.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use crate::types::NodeId;

/// How often a node pings each peer. Equal to the default heartbeat interval: a quiescent group
/// learns of a dead peer as quickly as a heartbeating one.
pub const PING_EVERY: Duration = Duration::from_millis(100);

#[derive(Debug, Clone, Copy)]
struct Peer {
    heard: rill_rt::Instant,
    incarnation: u64,
}

/// What this node knows of its peers' liveness.
#[derive(Debug)]
pub struct Liveness {
    incarnation: u64,
    started: rill_rt::Instant,
    peers: Mutex<HashMap<NodeId, Peer>>,
    /// Peers seen restarting and not yet taken by [`Liveness::take_restarts`].
    restarts: Mutex<Vec<NodeId>>,
}

impl Default for Liveness {
    fn default() -> Self {
        Self::new()
    }
}

impl Liveness {
    /// Liveness of a node that starts now, with a fresh incarnation.
    pub fn new() -> Self {
        // Zero means "no incarnation" on the wire.
        let incarnation = rill_rt::random_u64().max(1);
        Self { incarnation, started: rill_rt::now(), peers: Mutex::new(HashMap::new()), restarts: Mutex::default() }
    }

    /// This node's incarnation.
    pub fn incarnation(&self) -> u64 {
        self.incarnation
    }

    /// Records that `node`, at `incarnation`, was heard from just now. Returns true when the
    /// node was heard from before with another incarnation: it restarted in between (it is
    /// then also kept for [`Liveness::take_restarts`]).
    pub fn heard(&self, node: NodeId, incarnation: u64) -> bool {
        if incarnation == 0 {
            return false;
        }
        let now = rill_rt::now();
        let before =
            self.peers.lock().unwrap_or_else(|p| p.into_inner()).insert(node, Peer { heard: now, incarnation });
        let restarted = before.is_some_and(|b| b.incarnation != incarnation);
        if restarted {
            self.restarts.lock().unwrap_or_else(|p| p.into_inner()).push(node);
        }
        restarted
    }

    /// The peers seen restarting since the last call.
    pub fn take_restarts(&self) -> Vec<NodeId> {
        std::mem::take(&mut *self.restarts.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// When `node` was last heard from, if ever.
    pub fn last_heard(&self, node: NodeId) -> Option<rill_rt::Instant> {
        self.peers.lock().unwrap_or_else(|p| p.into_inner()).get(&node).map(|p| p.heard)
    }

    /// How long `node` has been silent: since it was last heard from, or since this node
    /// started when it never was.
    pub fn silent_for(&self, node: NodeId) -> Duration {
        let since = self.last_heard(node).unwrap_or(self.started);
        rill_rt::now().saturating_duration_since(since)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_new_incarnation_is_a_restart_and_silence_counts_from_the_start() {
        let l = Liveness::new();
        assert!(l.incarnation() != 0);
        assert_eq!(l.last_heard(2), None);
        assert!(!l.heard(2, 7), "first contact is not a restart");
        assert!(!l.heard(2, 7));
        assert!(l.heard(2, 8), "another incarnation is a restart");
        assert_eq!(l.take_restarts(), vec![2]);
        assert_eq!(l.take_restarts(), Vec::<NodeId>::new());
        assert!(!l.heard(2, 0), "no incarnation on the wire is ignored");
        assert!(l.last_heard(2).is_some());
        assert!(l.silent_for(3) <= l.started.elapsed());
    }
}
