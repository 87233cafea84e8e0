//! Quiescence: idle groups stop heartbeating; node-level liveness stands in for them.
//!
//! Every partition is its own Raft group, and an idle group still costs its leader a heartbeat
//! to each follower every interval and every replica a timer, a metrics update and a task
//! wake-up per heartbeat. With a thousand partitions that was half a core per node doing
//! nothing. CockroachDB's answer, taken here: a group whose log has not moved for
//! `quiesce-after` ([`crate::RaftTiming::quiesce_after_ms`], 3 s by default) and is replicated and applied everywhere is *quiesced* — its leader stops
//! heartbeating and its followers stop their election timers (openraft's tick is switched
//! off) — and each node pings its peers once per [`crate::liveness::PING_EVERY`] instead
//! ([`crate::liveness`]).
//!
//! # The protocol
//! * The leader asks each follower (`RaftTransport.Quiesce`, one call per peer for all its
//!   groups). A follower agrees only if it follows the same leader in the same term and has the
//!   leader's last entry, applied (so it has learned that everything is committed). The leader
//!   quiesces only if every follower agreed and nothing happened to the group meanwhile.
//! * A group wakes (its tick switched back on) on: any write proposed on the leader (before and
//!   after the proposal, so an attempt to quiesce that races with it is abandoned or undone);
//!   any incoming append with entries, vote or snapshot, or an append from another leader or
//!   term; an election triggered by Rill ([`Quiescence::wake`] first); a peer of the group
//!   restarting (a new incarnation: the leader heartbeats again so replication state is checked
//!   afresh); and, as a safety net checked every [`CHECK_EVERY`], the leader's log moving or its
//!   role changing.
//! * A quiescent follower whose leader's *node* has been silent for the orphan time (lease +
//!   heartbeat + an election timeout, see [`MultiRaft::orphan_after`]) wakes and lets openraft
//!   elect; `rill_server::failover` makes the designated follower stand sooner, exactly as for
//!   a heartbeating group, reading the leader's silence from node liveness.
//! * A quiescent leader counts a follower as heard from when its node was (for the ISR); a
//!   follower that dies leaves the ISR as it would have by missing heartbeats.
//! * A replica that restarts with a log and was not its group's leader starts quiescent (no
//!   election timer): otherwise it would stand for election at its first tick, and the other
//!   replicas, not having heard a heartbeat for a long time, would vote for it and depose a
//!   healthy quiescent leader. The leader notices the restart (new incarnation) and wakes, and
//!   its first heartbeat wakes the replica.
//!
//! Raft's safety never depends on any of this: votes, terms and log matching are untouched.
//! The leader lease keeps its meaning: a quiescent follower that still hears its leader's node
//! within the lease refuses to vote for another candidate (`Quiescence::refuse_vote`), as
//! openraft refuses while it hears heartbeats, so a follower cut from the leader alone cannot
//! depose it.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use openraft::raft::{AppendEntriesRequest, VoteRequest, VoteResponse};
use openraft::ServerState;
use rill_proto::internal::{QuiesceGroup, QuiesceRequest};

use crate::multi::MultiRaft;
use crate::network::Transport;
use crate::types::{GroupId, NodeId, Raft, TypeConfig};

/// How often the leader looks for groups to quiesce, and followers for silent leaders.
pub const CHECK_EVERY: Duration = Duration::from_millis(500);
/// How long a `Quiesce` call may take.
const QUIESCE_TIMEOUT: Duration = Duration::from_secs(1);

#[derive(Debug, Clone, PartialEq, Eq)]
enum Mode {
    /// Heartbeats and election timers run as usual.
    Awake,
    /// Leads the quiescent group; every follower agreed to quiesce at log index `last`.
    Leading { followers: Vec<NodeId>, last: u64 },
    /// Follows the quiescent group's `leader` in `term`. `None`: started quiescent after a
    /// restart and not yet heard from a leader.
    Following { leader: Option<(NodeId, u64)>, since: rill_rt::Instant },
}

#[derive(Debug)]
struct State {
    /// Bumped by everything that wakes the group; an attempt to quiesce commits only if it did
    /// not change since the attempt began.
    activity: u64,
    mode: Mode,
}

/// One group's quiescence on this node.
pub struct Quiescence {
    group: GroupId,
    raft: Raft,
    transport: Arc<Transport>,
    /// False for groups that never quiesce (the metadata group).
    allowed: bool,
    state: Mutex<State>,
    /// Mirrors of the mode for lock-free reads (the failover watcher reads every partition's
    /// every 50 ms): quiescent at all, and the leader while quiescent (0: awake or unknown).
    quiescent: AtomicBool,
    quiet_leader: AtomicU64,
}

impl std::fmt::Debug for Quiescence {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Quiescence(group {}, {:?})", self.group, self.lock().mode)
    }
}

impl Quiescence {
    /// The handle of a group that starts awake, or quiescent as a follower that restarted
    /// (`start_quiescent`; the caller started openraft with its tick off).
    pub(crate) fn new(
        group: GroupId,
        raft: Raft,
        transport: Arc<Transport>,
        allowed: bool,
        start_quiescent: bool,
    ) -> Arc<Self> {
        let mode = if start_quiescent { Mode::Following { leader: None, since: rill_rt::now() } } else { Mode::Awake };
        Arc::new(Self {
            group,
            raft,
            transport,
            allowed,
            state: Mutex::new(State { activity: 0, mode }),
            quiescent: AtomicBool::new(start_quiescent),
            quiet_leader: AtomicU64::new(0),
        })
    }

    /// Enters `mode`, keeping the lock-free mirrors in step.
    fn set_mode(&self, state: &mut State, mode: Mode) -> Mode {
        let leader = match &mode {
            Mode::Awake | Mode::Following { leader: None, .. } => 0,
            Mode::Leading { .. } => self.transport.node_id(),
            Mode::Following { leader: Some((l, _)), .. } => *l,
        };
        self.quiescent.store(mode != Mode::Awake, Ordering::Release);
        self.quiet_leader.store(leader, Ordering::Release);
        std::mem::replace(&mut state.mode, mode)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// True while the group is quiescent on this node.
    pub fn is_quiescent(&self) -> bool {
        self.quiescent.load(Ordering::Acquire)
    }

    /// The group's leader while it is quiescent (this node when it leads); `None` when awake,
    /// or quiescent after a restart without a known leader.
    pub fn quiescent_leader(&self) -> Option<NodeId> {
        Some(self.quiet_leader.load(Ordering::Acquire)).filter(|l| *l != 0)
    }

    /// Wakes the group if it is quiescent. Every write calls this before and after proposing,
    /// and every election Rill triggers calls it first.
    pub fn wake(&self) {
        let mut state = self.lock();
        self.wake_locked(&mut state);
    }

    fn wake_locked(&self, state: &mut State) {
        state.activity = state.activity.wrapping_add(1);
        let mode = self.set_mode(state, Mode::Awake);
        if mode == Mode::Awake {
            return;
        }
        let liveness = self.transport.liveness();
        match &mode {
            Mode::Leading { followers, .. } => {
                // The ISR read the followers' liveness from their nodes while quiescent; carry
                // that over so the first write does not find them unheard from.
                for f in followers {
                    if let Some(t) = liveness.last_heard(*f) {
                        self.transport.record_contact_at(self.group, *f, t);
                    }
                }
            }
            Mode::Following { leader: Some((leader, _)), .. } => {
                // Likewise the leader's silence was its node's. Without this, the group's last
                // leader contact dates from before it quiesced until the append that woke it
                // is answered (a sync), and a failover check in between would depose a live
                // leader.
                if let Some(t) = liveness.last_heard(*leader) {
                    self.transport.record_leader_contact_at(self.group, t);
                }
            }
            Mode::Following { leader: None, .. } | Mode::Awake => {}
        }
        self.raft.runtime_config().tick(true);
        tracing::debug!(group = self.group, ?mode, "group woke from quiescence");
    }

    /// When `node` last answered this group's leader: its answers to the group, or, while the
    /// group is quiescent, anything from its node.
    pub fn last_contact(&self, node: NodeId) -> Option<rill_rt::Instant> {
        let own = self.transport.last_contact(self.group, node);
        // Read on every ISR evaluation of a busy leader: the lock-free mirror, not the lock.
        if self.quiescent_leader() != Some(self.transport.node_id()) {
            return own;
        }
        own.max(self.transport.liveness().last_heard(node))
    }

    /// How long this follower has not heard from its leader: from the group, or, while the
    /// group is quiescent, from the leader's node. `None` without a known leader.
    pub fn leader_silent_for(&self, leader: NodeId) -> Option<Duration> {
        if let Mode::Following { .. } = self.lock().mode {
            return Some(self.transport.liveness().silent_for(leader));
        }
        self.transport.last_leader_contact(self.group).map(|t| rill_rt::now().saturating_duration_since(t))
    }

    /// An incoming append-entries, before openraft sees it: only a heartbeat of the leader this
    /// follower quiesced with leaves the group quiescent.
    pub(crate) fn on_append(&self, req: &AppendEntriesRequest<TypeConfig>) {
        let mut state = self.lock();
        let same_leader = match &state.mode {
            Mode::Awake => return,
            Mode::Following { leader: Some((leader, term)), .. } => {
                req.vote.committed && req.vote.leader_id.node_id == *leader && req.vote.leader_id.term == *term
            }
            Mode::Following { leader: None, .. } | Mode::Leading { .. } => false,
        };
        if !same_leader || !req.entries.is_empty() {
            self.wake_locked(&mut state);
        }
    }

    /// A quiescent follower's refusal of a vote for another candidate while it still hears its
    /// leader's node within `lease` — what openraft's leader lease does for a heartbeating
    /// group, where the follower would have heard the leader's heartbeats. Without it, a
    /// follower cut from the leader alone could win an election the other follower should
    /// refuse. `None`: let openraft decide (and wake the group).
    pub(crate) fn refuse_vote(&self, req: &VoteRequest<NodeId>, lease: Duration) -> Option<VoteResponse<NodeId>> {
        let state = self.lock();
        let Mode::Following { leader: Some((leader, _)), .. } = state.mode else { return None };
        if req.vote.leader_id.node_id == leader || self.transport.liveness().silent_for(leader) >= lease {
            return None;
        }
        let m = self.raft.metrics();
        let m = m.borrow();
        tracing::debug!(
            group = self.group,
            candidate = req.vote.leader_id.node_id,
            leader,
            "vote refused: the leader is alive"
        );
        Some(VoteResponse::new(m.vote, m.last_applied, false))
    }

    /// A follower's answer to its leader's request to quiesce.
    pub(crate) fn follow(&self, leader: NodeId, ask: &QuiesceGroup) -> bool {
        if !self.allowed {
            return false;
        }
        let mut state = self.lock();
        let agrees = {
            let m = self.raft.metrics();
            let m = m.borrow();
            m.state == ServerState::Follower
                && m.current_leader == Some(leader)
                && m.current_term == ask.term
                && m.vote.committed
                && m.last_log_index == Some(ask.last_index)
                && m.last_applied.is_some_and(|l| l.index == ask.last_index && l.leader_id.term == ask.last_term)
        };
        if agrees {
            self.raft.runtime_config().tick(false);
            self.set_mode(&mut state, Mode::Following { leader: Some((leader, ask.term)), since: rill_rt::now() });
        }
        agrees
    }

    /// Starts an attempt to quiesce: the activity count it must still see when it commits.
    fn begin(&self) -> Option<u64> {
        let state = self.lock();
        (self.allowed && state.mode == Mode::Awake).then_some(state.activity)
    }

    /// Commits an attempt begun at `activity` once every follower agreed: true if nothing
    /// happened in between and this node still leads with its log at `last`.
    fn lead(&self, activity: u64, followers: Vec<NodeId>, last: u64) -> bool {
        let mut state = self.lock();
        if state.activity != activity || state.mode != Mode::Awake || !self.leads_at(last) {
            return false;
        }
        self.raft.runtime_config().tick(false);
        self.set_mode(&mut state, Mode::Leading { followers, last });
        true
    }

    fn leads_at(&self, last: u64) -> bool {
        let m = self.raft.metrics();
        let m = m.borrow();
        m.state == ServerState::Leader && m.last_log_index == Some(last)
    }

    /// The safety nets of [`CHECK_EVERY`]: a quiescent leader whose log moved or that no longer
    /// leads wakes; so does a follower whose leader's node has been silent for `orphan_after`.
    fn check(&self, orphan_after: Duration) {
        let mut state = self.lock();
        let wake = match &state.mode {
            Mode::Awake => false,
            Mode::Leading { last, .. } => !self.leads_at(*last),
            Mode::Following { leader, since } => {
                let leader = leader.map(|(l, _)| l).or_else(|| self.raft.metrics().borrow().current_leader);
                let silent = match leader {
                    Some(l) => self.transport.liveness().silent_for(l),
                    None => rill_rt::now().saturating_duration_since(*since),
                };
                silent >= orphan_after
            }
        };
        if wake {
            self.wake_locked(&mut state);
        }
    }

    /// True when the group is quiescent and relies on `node`: a leader on its followers, a
    /// follower on its leader (a replica that restarted quiescent on every member).
    fn involves(&self, node: NodeId) -> bool {
        match &self.lock().mode {
            Mode::Awake => false,
            Mode::Leading { followers, .. } => followers.contains(&node),
            Mode::Following { leader: Some((leader, _)), .. } => *leader == node,
            Mode::Following { leader: None, .. } => {
                self.raft.metrics().borrow().membership_config.membership().voter_ids().any(|v| v == node)
            }
        }
    }
}

/// A group the leader may quiesce, waiting for its followers' answers.
struct Attempt {
    quiescence: Arc<Quiescence>,
    activity: u64,
    followers: Vec<NodeId>,
    last: u64,
}

/// Runs the node's quiescence until `multi` is dropped: every [`CHECK_EVERY`] the safety nets,
/// then attempts to quiesce the groups this node leads that have been idle long enough.
pub(crate) async fn run(multi: Weak<MultiRaft>) {
    // Per group: its last log index and since when it has not moved.
    let mut idle: HashMap<GroupId, (u64, rill_rt::Instant)> = HashMap::new();
    loop {
        rill_rt::sleep(CHECK_EVERY).await;
        let Some(m) = multi.upgrade() else { return };
        let orphan_after = m.orphan_after();
        let quiesce_after = m.quiesce_after();
        let now = rill_rt::now();
        let mut attempts: Vec<Attempt> = Vec::new();
        let mut asks: BTreeMap<(NodeId, String), Vec<QuiesceGroup>> = BTreeMap::new();
        let hosted = m.hosted();
        let hosted_ids: HashSet<GroupId> = hosted.iter().map(|(id, _)| *id).collect();
        idle.retain(|g, _| hosted_ids.contains(g));
        for (group, q) in hosted {
            q.check(orphan_after);
            let Some(activity) = q.begin() else { continue };
            let Some((ask, followers)) = ready(&q, m.node_id()) else {
                idle.remove(&group);
                continue;
            };
            let since = match idle.get(&group) {
                Some((last, since)) if *last == ask.last_index => *since,
                _ => {
                    idle.insert(group, (ask.last_index, now));
                    now
                }
            };
            if now.saturating_duration_since(since) < quiesce_after {
                continue;
            }
            for (node, addr) in &followers {
                asks.entry((*node, addr.clone())).or_default().push(ask);
            }
            let followers = followers.into_iter().map(|(n, _)| n).collect();
            attempts.push(Attempt { quiescence: q, activity, followers, last: ask.last_index });
        }
        if attempts.is_empty() {
            continue;
        }
        let transport = m.transport().clone();
        let me = m.node_id();
        drop(m);
        let answers = futures::future::join_all(asks.into_iter().map(|((node, addr), groups)| {
            let transport = transport.clone();
            async move { (node, ask(&transport, me, node, &addr, groups).await) }
        }))
        .await;
        let accepted: HashMap<NodeId, Vec<GroupId>> = answers.into_iter().collect();
        let mut quiesced = 0usize;
        for a in attempts {
            let group = a.quiescence.group;
            let all = a.followers.iter().all(|f| accepted.get(f).is_some_and(|g| g.contains(&group)));
            if all && a.quiescence.lead(a.activity, a.followers, a.last) {
                quiesced += 1;
            }
        }
        if quiesced > 0 {
            tracing::debug!(quiesced, "quiesced idle groups");
        }
    }
}

/// The request to quiesce `q` and its followers (with addresses) when this node leads it and
/// its whole log is committed, applied and replicated on every member.
fn ready(q: &Quiescence, me: NodeId) -> Option<(QuiesceGroup, Vec<(NodeId, String)>)> {
    let m = q.raft.metrics();
    let m = m.borrow();
    if m.state != ServerState::Leader || m.current_leader != Some(me) {
        return None;
    }
    let last = m.last_applied?;
    if m.last_log_index != Some(last.index) {
        return None;
    }
    let membership = m.membership_config.membership();
    if membership.learner_ids().next().is_some() {
        return None;
    }
    let replication = m.replication.as_ref()?;
    let mut followers = Vec::new();
    for node in membership.voter_ids().filter(|n| *n != me) {
        let matched = replication.get(&node).copied().flatten();
        if matched.map(|l| l.index) != Some(last.index) {
            return None;
        }
        followers.push((node, membership.get_node(&node)?.addr.clone()));
    }
    let ask = QuiesceGroup {
        group_id: q.group,
        term: m.current_term,
        last_index: last.index,
        last_term: last.leader_id.term,
    };
    Some((ask, followers))
}

/// Asks `node` to quiesce `groups`; the ids it agreed to (none if it did not answer).
async fn ask(transport: &Transport, me: NodeId, node: NodeId, addr: &str, groups: Vec<QuiesceGroup>) -> Vec<GroupId> {
    let Ok(mut client) = transport.client(node, addr) else { return Vec::new() };
    let request = QuiesceRequest { from_node: me, groups };
    match rill_rt::timeout(QUIESCE_TIMEOUT, client.quiesce(request)).await {
        Ok(Ok(answer)) => answer.into_inner().accepted,
        Ok(Err(status)) => {
            tracing::debug!(node, %status, "quiesce refused");
            Vec::new()
        }
        Err(_) => Vec::new(),
    }
}

/// Wakes every quiescent group hosted in `multi` that relies on `node` (which restarted).
pub(crate) fn wake_groups_with(multi: &MultiRaft, node: NodeId) {
    let mut woken = 0usize;
    for (_, q) in multi.hosted() {
        if q.involves(node) {
            q.wake();
            woken += 1;
        }
    }
    if woken > 0 {
        tracing::info!(node, woken, "peer restarted; woke the quiescent groups it is part of");
    }
}
