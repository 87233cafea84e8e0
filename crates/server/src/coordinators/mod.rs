//! Coordinator shards: for each internal partition this node leads, one object owning its
//! coordinator's leader-local state and timers — made when the node becomes the partition's
//! leader with its log applied, dropped when it stops leading.
//!
//! ```text
//!  Node (the registry of replicas) ── replica started / stopped ──► Coordinators::watch
//!                                                                     │ a watcher per internal replica
//!   leader of term T, log applied ──► Shard::elected ──► in the registry ──► service layer,
//!   leadership lost, replica stopped ─► out of the registry ─► Shard::resign   internal API
//! ```
//!
//! * [`group`]: [`GroupShard`], the group coordinator of a `__consumer_offsets` partition —
//!   members' sessions, group turns, held heartbeats (observing the partition's machine through
//!   its change hook), the session and offsets-retention timers, and the classic groups
//!   ([`classic`]: the classic protocol's engine driven — its parked requests, persists and
//!   deadlines).
//! * [`transaction`]: [`TxnShard`], the transaction coordinator of a `__transaction_state`
//!   partition — additions queued per transactional id, the transactions being finished, and
//!   the timers that finish prepared transactions, abort expired ones and remove idle ids.
//!
//! Soft state only: everything a shard holds is rebuilt by the next leader from the replicated
//! state (a full session for every member, prepared transactions finished again), so losing a
//! shard loses no decision. A request reaching a leader whose shard is not made yet (its log not
//! applied) is answered `COORDINATOR_LOAD_IN_PROGRESS`, as one reaching a leader catching up.
//!
//! A shard lives for one term of leadership: made once the node leads the partition with an
//! entry of that term applied, resigned as soon as that term ends — also when the node leads
//! again in a later term, whose shard is made afresh from the replicated state.
//!
//! A new coordinator kind is one state kind (`rill_coordinator`) plus one [`Shard`] type here
//! (with its `Hosted` variant and its registry in [`Coordinators`]).

pub mod classic;
pub mod group;
pub mod transaction;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError, Weak};

use rill_broker::StatePartition;
use rill_coordinator::CoordinatorError;
use rill_raft::{GroupId, GroupStateMachine};
use rill_rt::JoinHandle;

pub use group::GroupShard;
pub use transaction::TxnShard;

use crate::errors::{self, Refusal};
use crate::node::{Hosted, Node};

/// The leader-local side of one kind of coordinator, for one partition it leads.
pub trait Shard: Send + Sync + Sized + 'static {
    /// The partition's state machine.
    type Machine: GroupStateMachine + Send + Sync;

    /// Made when this node leads `partition` with its log applied: takes what the replicated
    /// state says the leader must keep (timers for every member, transactions to finish) and
    /// starts its timers. `None` when the node stopped leading meanwhile.
    fn elected(partition: Arc<StatePartition<Self::Machine>>, node: &Arc<Node>) -> Option<Arc<Self>>;

    /// Its partition.
    fn partition(&self) -> &Arc<StatePartition<Self::Machine>>;

    /// This node no longer leads the partition (or its replica stopped): stop the timers and
    /// detach from the partition. Requests still holding the shard finish on their own; the
    /// partition refuses what they propose.
    fn resign(&self);

    /// The registry of this kind of shard.
    fn registry(coordinators: &Coordinators) -> &Registry<Self>;
}

/// The shards of one kind this node has, by their partition's Raft group.
pub struct Registry<S> {
    shards: Mutex<HashMap<GroupId, Arc<S>>>,
}

impl<S> Default for Registry<S> {
    fn default() -> Self {
        Self { shards: Mutex::new(HashMap::new()) }
    }
}

impl<S: Shard> Registry<S> {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<GroupId, Arc<S>>> {
        // A panic while holding the lock leaves a plain map behind: keep using it.
        self.shards.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The shard of `partition`, when this node leads it with its log applied; else why not
    /// (not the leader: `NOT_COORDINATOR`; leading but not ready yet: load in progress).
    pub fn of(&self, partition: &StatePartition<S::Machine>) -> Result<Arc<S>, Refusal> {
        let group = partition.replica().group();
        if let Some(shard) = self.lock().get(&group).filter(|s| std::ptr::eq(Arc::as_ptr(s.partition()), partition)) {
            return Ok(shard.clone());
        }
        // Not made yet: the partition says why (not the leader, catching up), or the watcher
        // has yet to run.
        match partition.read(|_| ()) {
            Err(e) => Err(errors::coordinator(&e.into())),
            Ok(()) => Err(errors::coordinator(&CoordinatorError::LoadInProgress)),
        }
    }

    /// Every shard of this kind now.
    pub fn all(&self) -> Vec<Arc<S>> {
        self.lock().values().cloned().collect()
    }
}

/// This node's coordinator shards, of every kind.
#[derive(Default)]
pub struct Coordinators {
    groups: Registry<GroupShard>,
    transactions: Registry<TxnShard>,
}

impl Coordinators {
    /// The shards of `node`: watches its internal replicas from now on, making and dropping
    /// shards as it gains and loses their leadership, until the node is dropped.
    pub fn start(node: &Arc<Node>) -> Arc<Self> {
        let coordinators = Arc::new(Self::default());
        rill_rt::spawn(watch(Arc::downgrade(&coordinators), Arc::downgrade(node), node.replica_changes()));
        coordinators
    }

    /// The group coordinator shards.
    pub fn groups(&self) -> &Registry<GroupShard> {
        &self.groups
    }

    /// The transaction coordinator shards.
    pub fn transactions(&self) -> &Registry<TxnShard> {
        &self.transactions
    }
}

/// Follows the node's internal replicas: a watcher for each one started, until the node goes.
async fn watch(coordinators: Weak<Coordinators>, node: Weak<Node>, mut changes: rill_rt::sync::watch::Receiver<u64>) {
    // By group, with the replica watched (held weakly: its allocation is not reused while
    // watched), since a replica stopped and started again is a new one.
    let mut watched: HashMap<GroupId, (Weak<dyn std::any::Any + Send + Sync>, JoinHandle<()>)> = HashMap::new();
    loop {
        changes.borrow_and_update();
        let Some(n) = node.upgrade() else { return };
        watched.retain(|_, (_, handle)| !handle.is_finished());
        for hosted in n.replicas() {
            let group = hosted.replica().group();
            let identity: Weak<dyn std::any::Any + Send + Sync> = match &hosted {
                Hosted::Records(_) => continue,
                Hosted::Offsets(p) => Arc::downgrade(&(p.clone() as Arc<dyn std::any::Any + Send + Sync>)),
                Hosted::Transactions(p) => Arc::downgrade(&(p.clone() as Arc<dyn std::any::Any + Send + Sync>)),
            };
            if watched.get(&group).is_some_and(|(known, _)| Weak::ptr_eq(known, &identity)) {
                continue;
            }
            let handle = match &hosted {
                Hosted::Records(_) => continue,
                Hosted::Offsets(p) => lead::<GroupShard>(p, &coordinators, &node),
                Hosted::Transactions(p) => lead::<TxnShard>(p, &coordinators, &node),
            };
            // A watcher of a replica since replaced ends (and resigns its shard) on its own.
            watched.insert(group, (identity, handle));
        }
        drop(n);
        if changes.changed().await.is_err() {
            return;
        }
    }
}

/// Starts watching `partition` for leadership: see [`lead_loop`].
fn lead<S: Shard>(
    partition: &Arc<StatePartition<S::Machine>>,
    coordinators: &Weak<Coordinators>,
    node: &Weak<Node>,
) -> JoinHandle<()> {
    rill_rt::spawn(lead_loop::<S>(partition.clone(), coordinators.clone(), node.clone()))
}

/// While `partition`'s replica runs: each time this node leads it with its log applied, makes
/// its shard, keeps it in the registry while it leads, then resigns it.
async fn lead_loop<S: Shard>(
    partition: Arc<StatePartition<S::Machine>>,
    coordinators: Weak<Coordinators>,
    node: Weak<Node>,
) {
    let group = partition.replica().group();
    // Changes with every applied entry, election and step-down; closed when the replica stops.
    let mut metrics = partition.replica().raft().metrics();
    loop {
        let term = loop {
            if let Some(term) = partition.replica().leading_term() {
                break term;
            }
            if metrics.changed().await.is_err() {
                return;
            }
        };
        let (Some(n), Some(c)) = (node.upgrade(), coordinators.upgrade()) else { return };
        let Some(shard) = S::elected(partition.clone(), &n) else { continue };
        drop(n);
        S::registry(&c).lock().insert(group, shard.clone());
        drop(c);
        tracing::debug!(group, term, "coordinator shard made");
        // The shard was made from the state of `term` (or a later one, which this then ends at
        // once): it leaves the registry as soon as that term's leadership ends.
        partition.replica().leadership_lost_since(term).await;
        if let Some(c) = coordinators.upgrade() {
            let mut shards = S::registry(&c).lock();
            if shards.get(&group).is_some_and(|s| Arc::ptr_eq(s, &shard)) {
                shards.remove(&group);
            }
        }
        shard.resign();
        tracing::debug!(group, term, "coordinator shard resigned");
        metrics.borrow_and_update();
    }
}
