//! [`MultiRaft`]: the registry of every Raft group running on this node.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, RwLock, Weak};
use std::time::Duration;

use openraft::error::{InitializeError, RaftError};
use openraft::storage::RaftLogStorage;
use openraft::{BasicNode, Config, SnapshotPolicy};
use rill_storage::{Engine, StorageHealth, Syncer};

use crate::liveness::PING_EVERY;
use crate::log_store::{LogStore, TailBudget};
use crate::network::{GroupNetworkFactory, Transport};
use crate::quiesce::{self, Quiescence};
use crate::state_machine::{GroupStateMachine, SmStore};
use crate::types::{GroupId, NodeId, Raft};
use crate::{Error, Result};

/// Memory the log tail caches of all groups on a node may hold (see `crate::log_store`).
const TAIL_CACHE_BUDGET: usize = 256 << 20;

/// Raft timing shared by every group of a node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RaftTiming {
    /// Leader heartbeat interval.
    pub heartbeat_ms: u64,
    /// Election timeout lower bound; a follower that heard nothing for a random time in
    /// `[election_min_ms, election_max_ms)` starts an election.
    pub election_min_ms: u64,
    /// Election timeout upper bound.
    pub election_max_ms: u64,
    /// How long a partition's log must stay unchanged before its group quiesces (stops
    /// heartbeating, see [`crate::quiesce`]); 0 never quiesces.
    pub quiesce_after_ms: u64,
}

impl Default for RaftTiming {
    fn default() -> Self {
        // openraft 0.9 makes a follower wait the leader lease (= election_max) plus the election
        // timeout before it stands: 0.9-1.2 s of silence here, so 9+ heartbeats must go missing
        // for a needless election. With `rill_server::failover` a designated follower stands
        // after lease + one heartbeat, so a dead leader is replaced in well under a second.
        Self { heartbeat_ms: 100, election_min_ms: 300, election_max_ms: 600, quiesce_after_ms: 3_000 }
    }
}

/// Per-group options.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GroupOptions {
    /// Build a state machine snapshot after this many entries.
    pub snapshot_every_entries: u64,
    /// Purge the log behind each snapshot, keeping this many entries before it (for groups
    /// whose snapshot is their whole state). `None` never purges behind a snapshot: a record
    /// partition's log is its data.
    pub purge_behind_snapshot: Option<u64>,
    /// Most entries in one AppendEntries message.
    pub max_entries_per_append: u64,
    /// Stop heartbeats while the group is idle (see [`crate::quiesce`]).
    pub quiesce: bool,
}

impl Default for GroupOptions {
    fn default() -> Self {
        Self { snapshot_every_entries: 10_000, purge_behind_snapshot: None, max_entries_per_append: 64, quiesce: false }
    }
}

/// A running group and the handles its owner uses.
pub struct StartedGroup<M> {
    /// The openraft handle.
    pub raft: Raft,
    /// The group's log (reads of committed entries, proposal tracking).
    pub log: LogStore,
    /// The group's state machine.
    pub sm: SmStore<M>,
    /// True when the group had never stored anything on this node before this call.
    pub pristine: bool,
    /// True when this call initialized the fresh log with the given membership.
    pub initialized_now: bool,
    /// The group's quiescence on this node; writes must [`Quiescence::wake`] it.
    pub quiescence: Arc<Quiescence>,
}

/// A group running on this node.
#[derive(Clone)]
struct Hosted {
    raft: Raft,
    log: LogStore,
    quiescence: Arc<Quiescence>,
}

/// Every group hosted by one node, sharing its engine, syncer and transport.
pub struct MultiRaft {
    node_id: NodeId,
    engine: Arc<dyn Engine>,
    syncer: Syncer,
    /// Whether the engine has failed (then the node leaves replication).
    health: StorageHealth,
    transport: Arc<Transport>,
    timing: RaftTiming,
    groups: RwLock<HashMap<GroupId, Hosted>>,
    /// Shared by every group's log tail cache.
    tail_budget: Arc<TailBudget>,
    /// Per group, the highest term of a candidate refused here for its shorter log, since the
    /// failover check last took them ([`MultiRaft::take_refused_shorter_candidates`]).
    refused_shorter: Mutex<HashMap<GroupId, RefusedCandidate>>,
    /// Woken when a refusal is noted, so the failover check acts on it at once.
    refusal_noted: rill_rt::sync::Notify,
}

/// A vote this node refused to a candidate with a shorter log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RefusedCandidate {
    /// The highest term refused.
    pub term: u64,
    /// When the latest refusal was.
    pub at: rill_rt::Instant,
}

impl MultiRaft {
    /// A registry for node `node_id`, whose engine's failures `health` reports (see
    /// [`rill_storage::monitor`]).
    pub fn new(
        node_id: NodeId,
        engine: Arc<dyn Engine>,
        syncer: Syncer,
        health: StorageHealth,
        transport: Arc<Transport>,
        timing: RaftTiming,
    ) -> Arc<Self> {
        let tail_budget = TailBudget::new(TAIL_CACHE_BUDGET);
        let groups = RwLock::new(HashMap::new());
        Arc::new(Self {
            node_id,
            engine,
            syncer,
            health,
            transport,
            timing,
            groups,
            tail_budget,
            refused_shorter: Mutex::new(HashMap::new()),
            refusal_noted: rill_rt::sync::Notify::new(),
        })
    }

    /// This node's id.
    pub fn node_id(&self) -> NodeId {
        self.node_id
    }

    /// The node's storage engine.
    pub fn engine(&self) -> &Arc<dyn Engine> {
        &self.engine
    }

    /// The node's transport.
    pub fn transport(&self) -> &Arc<Transport> {
        &self.transport
    }

    /// The running group `id`, if hosted here.
    pub fn group(&self, id: GroupId) -> Option<Raft> {
        self.groups.read().unwrap_or_else(|p| p.into_inner()).get(&id).map(|h| h.raft.clone())
    }

    /// The log of group `id`, if hosted here.
    pub fn log(&self, id: GroupId) -> Option<LogStore> {
        self.groups.read().unwrap_or_else(|p| p.into_inner()).get(&id).map(|h| h.log.clone())
    }

    /// The quiescence of group `id`, if hosted here.
    pub fn quiescence(&self, id: GroupId) -> Option<Arc<Quiescence>> {
        self.groups.read().unwrap_or_else(|p| p.into_inner()).get(&id).map(|h| h.quiescence.clone())
    }

    /// Every hosted group's quiescence.
    pub(crate) fn hosted(&self) -> Vec<(GroupId, Arc<Quiescence>)> {
        let groups = self.groups.read().unwrap_or_else(|p| p.into_inner());
        groups.iter().map(|(id, h)| (*id, h.quiescence.clone())).collect()
    }

    /// How long a group's log must stay unchanged before it quiesces.
    pub(crate) fn quiesce_after(&self) -> Duration {
        Duration::from_millis(self.timing.quiesce_after_ms)
    }

    /// openraft's leader lease (= the election timeout's upper bound): how long a follower that
    /// heard from its leader refuses to vote for anyone else.
    pub(crate) fn leader_lease(&self) -> Duration {
        Duration::from_millis(self.timing.election_max_ms)
    }

    /// How often leaders heartbeat.
    pub(crate) fn heartbeat_interval(&self) -> Duration {
        Duration::from_millis(self.timing.heartbeat_ms)
    }

    /// How long a quiescent follower waits for its leader's silent node before it wakes and
    /// lets openraft elect: the leader lease, a heartbeat, an election timeout and a margin.
    /// (`rill_server::failover` makes the designated follower stand one election timeout
    /// sooner.)
    pub fn orphan_after(&self) -> Duration {
        let t = self.timing;
        Duration::from_millis(2 * t.election_max_ms + t.heartbeat_ms + 50)
    }

    /// Starts the node-wide background work: pings to every peer and quiescence of idle groups.
    /// Both stop when the registry is dropped.
    pub fn start_background(self: &Arc<Self>) {
        rill_rt::spawn(ping_peers(Arc::downgrade(self)));
        rill_rt::spawn(quiesce::run(Arc::downgrade(self)));
        rill_rt::spawn(fence_on_storage_failure(Arc::downgrade(self), self.health.clone()));
    }

    /// Why this node's storage failed for good, once it has (a failed write or sync: see
    /// `rill_storage::health`). From then on the node hosts no group, sends no pings, and
    /// answers pings as unhealthy, so its peers count it as down and elect leaders elsewhere.
    pub fn storage_failure(&self) -> Option<String> {
        self.health.failure()
    }

    /// Records that this replica of `group` refused its vote to a candidate of `term` whose log
    /// is shorter than its own (for that reason or because its leader lease still ran): while
    /// this replica's vote is needed for a majority, that candidate cannot win
    /// (see `rill_server::failover`).
    pub(crate) fn note_refused_shorter_candidate(&self, group: GroupId, term: u64) {
        let mut refused = self.refused_shorter.lock().unwrap_or_else(|p| p.into_inner());
        let now = rill_rt::now();
        let slot = refused.entry(group).or_insert(RefusedCandidate { term, at: now });
        slot.term = slot.term.max(term);
        slot.at = now;
        drop(refused);
        self.refusal_noted.notify_one();
    }

    /// Resolves when a refusal is noted (or was, since the last wait).
    pub async fn refusal_noted(&self) {
        self.refusal_noted.notified().await
    }

    /// The refusals noted since the last call: per group, the highest refused candidate's term
    /// and when the last refusal was.
    pub fn take_refused_shorter_candidates(&self) -> HashMap<GroupId, RefusedCandidate> {
        std::mem::take(&mut *self.refused_shorter.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// The leader of `group` and its term, as far as this node knows: from its own replica when
    /// it hosts one, else from the peers' leadership reports (see [`crate::directory`]). A leader
    /// whose node has been silent past [`crate::directory::CLAIMS_EXPIRE_AFTER`] is not reported.
    pub fn leader_of(&self, group: GroupId) -> Option<(NodeId, u64)> {
        let liveness = self.transport.liveness();
        if let Some(raft) = self.group(group) {
            let m = raft.metrics();
            let m = m.borrow();
            if let Some(leader) = m.current_leader {
                let heard =
                    leader == self.node_id || liveness.silent_for(leader) <= crate::directory::CLAIMS_EXPIRE_AFTER;
                return heard.then_some((leader, m.current_term));
            }
        }
        self.transport.directory().leader(group, self.node_id, liveness)
    }

    /// The groups this node leads now, with their terms.
    fn led_groups(&self) -> BTreeMap<GroupId, u64> {
        let groups = self.groups.read().unwrap_or_else(|p| p.into_inner());
        groups
            .iter()
            .filter_map(|(id, h)| {
                let m = h.raft.metrics();
                let m = m.borrow();
                (m.state == openraft::ServerState::Leader).then_some((*id, m.current_term))
            })
            .collect()
    }

    /// Ids of every hosted group.
    pub fn group_ids(&self) -> Vec<GroupId> {
        let mut ids: Vec<GroupId> = self.groups.read().unwrap_or_else(|p| p.into_inner()).keys().copied().collect();
        ids.sort_unstable();
        ids
    }

    fn config(&self, group: GroupId, opts: GroupOptions) -> Result<Config> {
        let config = Config {
            cluster_name: format!("rill-group-{group}"),
            heartbeat_interval: self.timing.heartbeat_ms,
            election_timeout_min: self.timing.election_min_ms,
            election_timeout_max: self.timing.election_max_ms,
            max_payload_entries: opts.max_entries_per_append,
            snapshot_policy: SnapshotPolicy::LogsSinceLast(opts.snapshot_every_entries),
            // A record partition's log is its data: it is never purged behind a snapshot
            // (retention removes data, not Raft). A group whose snapshot is its state purges.
            max_in_snapshot_log_to_keep: opts.purge_behind_snapshot.unwrap_or(u64::MAX),
            // Receivers refuse chunks above `intake::MAX_SNAPSHOT_CHUNK_BYTES`.
            snapshot_max_chunk_size: crate::intake::SNAPSHOT_CHUNK_BYTES,
            // openraft's default (200 ms) is less than a 3 MiB chunk may take on a busy node
            // that is also collecting its value log; a chunk that times out is sent again.
            install_snapshot_timeout: crate::intake::SNAPSHOT_CHUNK_TIMEOUT_MS,
            ..Default::default()
        };
        config.validate().map_err(|e| Error::Raft { group, reason: e.to_string() })
    }

    /// Starts group `group` with state machine `sm`. When the group has no log yet, it is
    /// initialized with `members` when given (several members may do so, which openraft allows;
    /// openraft then stands for election at once). With `None` a fresh replica waits to hear
    /// from one that initialized (see [`MultiRaft::initialize_group`]).
    pub async fn start_group<M: GroupStateMachine>(
        &self,
        group: GroupId,
        sm: M,
        members: Option<BTreeMap<NodeId, BasicNode>>,
        opts: GroupOptions,
    ) -> Result<StartedGroup<M>> {
        if let Some(reason) = self.storage_failure() {
            return Err(Error::Raft { group, reason: format!("storage failed ({reason}): no group starts here") });
        }
        if let Some(raft) = self.group(group) {
            return Err(Error::Raft {
                group,
                reason: format!("already running (leader {:?})", raft.metrics().borrow().current_leader),
            });
        }
        let log = LogStore::open(group, self.engine.clone(), self.syncer.clone(), self.tail_budget.clone())?;
        let pristine = log.is_pristine()?;
        let sm = SmStore::open(group, self.engine.clone(), log.clone(), sm)?;
        // A replica with a log that did not lead starts quiescent: see `crate::quiesce`.
        let vote = log.clone().read_vote().await.map_err(|e| Error::Raft { group, reason: e.to_string() })?;
        let was_leader = vote.is_some_and(|v| v.committed && v.leader_id.node_id == self.node_id);
        let quiesce = opts.quiesce && self.timing.quiesce_after_ms > 0;
        let start_quiescent = quiesce && !pristine && !was_leader;
        let mut config = self.config(group, opts)?;
        config.enable_tick = !start_quiescent;
        let config = Arc::new(config);
        let network = GroupNetworkFactory::new(group, self.transport.clone());
        let raft = Raft::new(self.node_id, config, network, log.clone(), sm.clone())
            .await
            .map_err(|e| Error::Raft { group, reason: e.to_string() })?;
        // Only a replica that never stored anything takes the initial membership; one that has a
        // log or a vote rejoins with what it has.
        let initialized_now = match (pristine, members) {
            (true, Some(members)) => match raft.initialize(members).await {
                Ok(()) => true,
                Err(RaftError::APIError(InitializeError::NotAllowed(_))) => false,
                Err(e) => return Err(Error::Raft { group, reason: e.to_string() }),
            },
            _ => false,
        };
        let quiescence = Quiescence::new(group, raft.clone(), self.transport.clone(), quiesce, start_quiescent);
        let hosted = Hosted { raft: raft.clone(), log: log.clone(), quiescence: quiescence.clone() };
        self.groups.write().unwrap_or_else(|p| p.into_inner()).insert(group, hosted);
        tracing::debug!(node = self.node_id, group, initialized_now, start_quiescent, "raft group started");
        Ok(StartedGroup { raft, log, sm, pristine, initialized_now, quiescence })
    }

    /// Initializes a running group that has no log yet with `members` (openraft then stands for
    /// election). Returns false when the group already had a log, a vote or a leader.
    pub async fn initialize_group(raft: &Raft, members: BTreeMap<NodeId, BasicNode>) -> bool {
        {
            let m = raft.metrics();
            let m = m.borrow();
            if m.last_log_index.is_some() || m.current_leader.is_some() || m.vote.leader_id().term > 0 {
                return false;
            }
        }
        raft.initialize(members).await.is_ok()
    }

    /// Stops group `group` (if running) and forgets it. Its data stays on disk.
    pub async fn stop_group(&self, group: GroupId) {
        let hosted = self.groups.write().unwrap_or_else(|p| p.into_inner()).remove(&group);
        if let Some(Hosted { raft, .. }) = hosted {
            if let Err(e) = raft.shutdown().await {
                tracing::warn!(group, error = %e, "raft group did not shut down cleanly");
            }
        }
    }

    /// Stops every group.
    pub async fn shutdown(&self) {
        for group in self.group_ids() {
            self.stop_group(group).await;
        }
    }
}

/// Stops every group once the node's storage has failed for good: a node that can no longer
/// make anything durable must not lead, vote or acknowledge (see [`MultiRaft::storage_failure`]).
async fn fence_on_storage_failure(multi: Weak<MultiRaft>, health: StorageHealth) {
    let reason = health.failed().await;
    let Some(m) = multi.upgrade() else { return };
    tracing::error!(
        node = m.node_id,
        reason,
        "storage failed: stopping every Raft group; this node no longer leads, votes or answers pings as healthy"
    );
    m.shutdown().await;
}

/// Keeps one pinger running per peer this node has a channel to, and wakes the quiescent groups
/// of peers seen restarting. Runs until `multi` is dropped.
async fn ping_peers(multi: Weak<MultiRaft>) {
    let mut pinging: std::collections::HashSet<(NodeId, String)> = std::collections::HashSet::new();
    loop {
        rill_rt::sleep(PING_EVERY).await;
        let Some(m) = multi.upgrade() else { return };
        m.transport.directory().set_local(m.led_groups());
        for peer in m.transport.peers() {
            if pinging.insert(peer.clone()) {
                rill_rt::spawn(ping(Arc::downgrade(&m.transport), m.health.clone(), peer));
            }
        }
        for node in m.transport.liveness().take_restarts() {
            quiesce::wake_groups_with(&m, node);
        }
    }
}

/// Pings one peer every [`PING_EVERY`] (each ping waits for the previous one, so a dead peer
/// costs one call in flight, not a pile of them).
async fn ping(transport: Weak<Transport>, health: StorageHealth, (node, addr): (NodeId, String)) {
    loop {
        let next = rill_rt::now() + PING_EVERY;
        if health.failure().is_some() {
            // A node whose storage failed must look down to its peers.
            return;
        }
        let Some(t) = transport.upgrade() else { return };
        if let Err(e) = t.ping(node, &addr).await {
            tracing::trace!(node, error = ?e, "ping failed");
        }
        drop(t);
        rill_rt::sleep_until(next).await;
    }
}
