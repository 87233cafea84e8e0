//! Moving leadership of a partition to another replica (preferred-leader balancing).
//!
//! openraft 0.9 has no leadership transfer, but its election rules allow a clean one. A voter
//! grants a vote only to a candidate whose log is at least as long as its own, and refuses every
//! candidate while it has heard from a leader within the leader lease — except the leader
//! itself, whose lease check looks at when it became leader. So:
//!
//! 1. the leader stops taking new produce requests (`LEADER_NOT_AVAILABLE`, retriable) and
//!    waits until every request in progress has been answered and the target has replicated
//!    its whole log ([`Replica::prepare_handover`]);
//! 2. the target stands for election ([`Replica::stand_for_election`]); the old leader, whose
//!    log is no longer than the target's, grants the vote and steps down.
//!
//! With three replicas (or two) the target's own vote plus the old leader's are a majority, so
//! the move takes one election round trip. Larger groups would also need a follower whose
//! lease has not run out; they are not moved (see `docs/replication.md`). Nothing acknowledged
//! can be lost: the move is an ordinary Raft election, and every acknowledged write is answered
//! before it starts.

use std::sync::atomic::Ordering;
use std::time::Duration;

use openraft::ServerState;
use rill_raft::NodeId;

use crate::replica::Replica;

/// How often readiness is re-checked while preparing a handover.
const POLL: Duration = Duration::from_millis(5);

/// While alive, the replica refuses new writes: leadership is moving.
pub struct Handover<'a> {
    partition: &'a Replica,
}

impl Drop for Handover<'_> {
    fn drop(&mut self) {
        self.partition.moving_to.store(0, Ordering::SeqCst);
    }
}

/// Counts a write in progress (a produce, a state command), which a handover waits for.
pub(crate) struct InFlight<'a>(&'a Replica);

impl<'a> InFlight<'a> {
    pub(crate) fn enter(replica: &'a Replica) -> Self {
        replica.writes_in_flight.fetch_add(1, Ordering::SeqCst);
        Self(replica)
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.writes_in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Replica {
    /// The replica leadership is being handed to, if a handover is under way.
    pub fn moving_to(&self) -> Option<NodeId> {
        Some(self.moving_to.load(Ordering::SeqCst)).filter(|n| *n != 0)
    }

    /// On the leader: stops new writes, then waits until every produce in progress is answered
    /// and `target` has replicated the whole log. Returns the guard that keeps writes stopped
    /// (drop it to resume), or `None` when this replica is not the leader or `target` did not
    /// catch up within `timeout` (writes resume at once).
    pub async fn prepare_handover(&self, target: NodeId, timeout: Duration) -> Option<Handover<'_>> {
        self.leader_term()?;
        self.moving_to.store(target, Ordering::SeqCst);
        let guard = Handover { partition: self };
        let deadline = rill_rt::now() + timeout;
        loop {
            let ready = {
                let m = self.raft.metrics();
                let m = m.borrow();
                let last = m.last_log_index;
                let target_has = m.replication.as_ref().and_then(|r| r.get(&target).cloned()).flatten();
                m.state == ServerState::Leader
                    && self.writes_in_flight.load(Ordering::SeqCst) == 0
                    && target_has.map(|l| l.index) >= last
            };
            if ready {
                return Some(guard);
            }
            if self.leader_term().is_none() || rill_rt::now() >= deadline {
                return None;
            }
            rill_rt::sleep(POLL).await;
        }
    }

    /// On the target of a handover: stands for election now and waits up to `timeout` for the
    /// outcome. True when this replica leads afterwards.
    pub async fn stand_for_election(&self, timeout: Duration) -> bool {
        if self.leader_term().is_some() {
            return true;
        }
        let mut metrics = self.raft.metrics();
        let start_term = metrics.borrow_and_update().current_term;
        // A quiescent follower has no election timer running; the new leader needs its ticks.
        self.quiescence.wake();
        if self.raft.trigger().elect().await.is_err() {
            return false;
        }
        let won = async {
            loop {
                let (state, term, leader) = {
                    let m = metrics.borrow_and_update();
                    (m.state, m.current_term, m.current_leader)
                };
                match state {
                    ServerState::Leader => return true,
                    ServerState::Shutdown => return false,
                    // Lost: a newer term has a leader other than this replica.
                    _ if term > start_term && leader.is_some_and(|l| l != self.node_id) => return false,
                    _ => {}
                }
                if metrics.changed().await.is_err() {
                    return false;
                }
            }
        };
        rill_rt::timeout(timeout, won).await.unwrap_or(false)
    }
}
