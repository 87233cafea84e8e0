//! [`ClassicDriver`]: Kafka's classic group protocol (JoinGroup / SyncGroup / Heartbeat /
//! LeaveGroup) driven on a group coordinator's leader, as a part of its [`super::GroupShard`].
//!
//! The decisions are the sans-IO `rill_coordinator::groups::classic::ClassicEngine`'s; this
//! carries out what it asks, as its module describes:
//!
//! ```text
//!  request ─► handle ─► engine (under its lock, with the applied state and the clock) ─► effects
//!                                                                                         │
//!   Respond(handle, answer) ─► the request waiting on that handle ◄───────────────────────┤
//!   Persist(record) ─► the persist queue: proposed one at a time, in order ─► persisted ──┘
//!   tick at next_deadline (join phases ending, sessions running out) ─────► effects
//!   resign (leadership lost) ─► every parked request answered NOT_COORDINATOR
//! ```
//!
//! Records of one group are proposed in the order the engine asks for them, each expecting the
//! version the previous one makes, so they go through one queue, one proposal at a time. The
//! engine's lock is taken inside the partition's read of its applied state and never held across
//! an await.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use rill_broker::StatePartition;
use rill_coordinator::groups::classic::{
    self, Answer, ClassicConfig, ClassicDescription, ClassicEngine, Effect, Handle, Heartbeat, JoinAnswer, JoinGroup,
    LeaveGroup, Left, Persist, Replicated, SyncAnswer, SyncGroup,
};
use rill_coordinator::{CoordinatorError, OffsetsMachine};
use rill_rt::sync::{mpsc, oneshot, Notify};
use rill_rt::JoinHandle;

/// How long storing one classic group record may take to be committed.
const PERSIST_TIMEOUT: Duration = Duration::from_secs(10);
/// Longest the deadline task sleeps when the engine has nothing armed (it is woken by every call
/// anyway).
const IDLE_TICK: Duration = Duration::from_secs(60);

type Result<T, E = CoordinatorError> = std::result::Result<T, E>;

/// The classic groups of one `__consumer_offsets` partition this node leads.
pub struct ClassicDriver {
    partition: Arc<StatePartition<OffsetsMachine>>,
    engine: Mutex<ClassicEngine>,
    /// Parked JoinGroups and SyncGroups, by handle.
    waiting: Mutex<HashMap<Handle, oneshot::Sender<Answer>>>,
    next_handle: AtomicU64,
    /// Records to propose, in order.
    persists: mpsc::UnboundedSender<Persist>,
    /// Woken after every engine call: the next deadline may have moved.
    deadline_changed: Notify,
    /// Set on resignation: a request that took this driver before then is refused, even if the
    /// node leads the partition again (a new shard has its own driver by then).
    resigned: AtomicBool,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Plain data behind the lock: a panic elsewhere leaves it usable.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl ClassicDriver {
    /// The driver of a leader that has applied `partition`'s log: the engine loaded from the
    /// stored records (every group with members `Stable`, every member a full session), and its
    /// two tasks (the persist queue, the deadlines), which the caller aborts on resignation.
    pub(super) fn start(
        partition: Arc<StatePartition<OffsetsMachine>>,
        config: ClassicConfig,
    ) -> Result<(Arc<Self>, Vec<JoinHandle<()>>)> {
        let now_ms = rill_rt::wall_clock_ms();
        let ids: classic::MemberIds = Box::new(classic::random_member_id);
        let engine = partition.read(|m| ClassicEngine::new(config, m.classic_groups(), now_ms, ids))?;
        let (persists, queue) = mpsc::unbounded_channel();
        let driver = Arc::new(Self {
            partition,
            engine: Mutex::new(engine),
            waiting: Mutex::default(),
            next_handle: AtomicU64::new(0),
            persists,
            deadline_changed: Notify::new(),
            resigned: AtomicBool::new(false),
        });
        let tasks = vec![
            rill_rt::spawn(persist_in_order(driver.clone(), queue)),
            rill_rt::spawn(fire_deadlines(driver.clone())),
        ];
        Ok((driver, tasks))
    }

    /// Runs `f` on the engine with the applied state, on the caught-up leader.
    fn call<R>(&self, f: impl FnOnce(&mut ClassicEngine, Replicated<'_>, i64) -> R) -> Result<R> {
        let now_ms = rill_rt::wall_clock_ms();
        let r = self.partition.read(|m| {
            let mut engine = lock(&self.engine);
            // Checked under the engine's lock, which resignation takes too.
            if self.resigned.load(Ordering::SeqCst) {
                return Err(CoordinatorError::NotAvailable("the coordinator resigned; find it again".into()));
            }
            Ok(f(&mut engine, m.replicated(), now_ms))
        })??;
        self.deadline_changed.notify_one();
        Ok(r)
    }

    /// Carries out `effects` in order: answers go to their waiting requests, records to the
    /// persist queue.
    fn carry_out(&self, effects: Vec<Effect>) {
        for effect in effects {
            match effect {
                Effect::Respond(handle, answer) => {
                    if let Some(waiting) = lock(&self.waiting).remove(&handle) {
                        // A request whose client went away has dropped its receiver: fine.
                        let _ = waiting.send(answer);
                    }
                }
                Effect::Persist(p) => {
                    // The queue lives as long as the driver's persist task: gone only after
                    // resignation, when what it stores no longer matters.
                    let _ = self.persists.send(p);
                }
            }
        }
    }

    /// Parks a request under a fresh handle, calls the engine with it, and waits for its answer.
    async fn parked(
        &self,
        f: impl FnOnce(&mut ClassicEngine, Replicated<'_>, i64, Handle) -> Vec<Effect>,
    ) -> Result<Answer> {
        let handle = Handle(self.next_handle.fetch_add(1, Ordering::Relaxed));
        let (tx, rx) = oneshot::channel();
        lock(&self.waiting).insert(handle, tx);
        let effects = match self.call(|e, r, now| f(e, r, now, handle)) {
            Ok(effects) => effects,
            Err(e) => {
                lock(&self.waiting).remove(&handle);
                return Err(e);
            }
        };
        self.carry_out(effects);
        // Every handle is answered (by a later call, or at resignation); a sender dropped
        // unanswered means the driver went with its leadership.
        rx.await.map_err(|_| CoordinatorError::NotAvailable("the coordinator resigned; find it again".into()))
    }

    /// A JoinGroup: answered once its join phase completes (or at once: an error, or
    /// `MEMBER_ID_REQUIRED` with the id to join with).
    pub async fn join(&self, req: &JoinGroup) -> Result<JoinAnswer> {
        match self.parked(|e, r, now, h| e.join(now, r, h, req)).await? {
            Answer::Join(answer) => answer,
            Answer::Sync(_) => Err(CoordinatorError::NotAvailable("a sync answer to a join".into())),
        }
    }

    /// A SyncGroup: answered with the member's assignment once the generation's is stored.
    pub async fn sync(&self, req: &SyncGroup) -> Result<SyncAnswer> {
        match self.parked(|e, r, now, h| e.sync(now, r, h, req)).await? {
            Answer::Sync(answer) => answer,
            Answer::Join(_) => Err(CoordinatorError::NotAvailable("a join answer to a sync".into())),
        }
    }

    /// A Heartbeat, answered at once.
    pub fn heartbeat(&self, req: &Heartbeat) -> Result<()> {
        self.call(|e, r, now| e.heartbeat(now, r, req))?
    }

    /// A LeaveGroup: each member's outcome.
    pub fn leave(&self, req: &LeaveGroup) -> Result<Vec<Left>> {
        let outcome = self.call(|e, r, now| e.leave(now, r, req))??;
        self.carry_out(outcome.effects);
        Ok(outcome.members)
    }

    /// True when `group_id` is a classic group: in the leader's memory (a first generation not
    /// stored yet included) or stored.
    pub fn is_classic(&self, group_id: &str) -> Result<bool> {
        Ok(self.partition.read(|m| lock(&self.engine).knows(group_id) || m.classic_groups().get(group_id).is_some())?)
    }

    /// True when the leader's memory has members in `group_id` (some perhaps not stored yet).
    pub fn has_members(&self, group_id: &str) -> bool {
        lock(&self.engine).has_members(group_id)
    }

    /// Whether a classic member may commit offsets of `group_id` at `generation` now, by what the
    /// leader's memory knows (the stored record is checked again when the commit applies).
    pub fn check_commit(&self, group_id: &str, member_id: &str, generation: i32) -> Result<()> {
        self.call(|e, _, _| e.check_commit(group_id, member_id, None, generation))?
    }

    /// `group_id` as the leader holds it, or from its record; `None` when it is not classic.
    pub fn describe(&self, group_id: &str) -> Result<Option<ClassicDescription>> {
        Ok(self.partition.read(|m| lock(&self.engine).describe(group_id, m.classic_groups()))?)
    }

    /// The classic groups the leader holds in memory or has stored.
    pub fn group_ids(&self) -> Result<Vec<String>> {
        Ok(self.partition.read(|m| {
            let mut ids = lock(&self.engine).group_ids();
            ids.extend(m.classic_groups().iter().map(|g| g.group_id.clone()));
            ids.sort();
            ids.dedup();
            ids
        })?)
    }

    /// This node no longer leads the partition: every parked request is answered
    /// `NOT_COORDINATOR` (its client finds the new coordinator) and the engine forgets its soft
    /// state. The caller stops the driver's tasks.
    pub(super) fn resign(&self, node: u64) {
        let error = CoordinatorError::NotCoordinator { node, leader: None, addr: None };
        let effects = {
            let mut engine = lock(&self.engine);
            self.resigned.store(true, Ordering::SeqCst);
            engine.resign(&error)
        };
        self.carry_out(effects);
        // Anything still parked (there should be nothing) learns through its dropped sender.
        lock(&self.waiting).clear();
    }
}

/// Proposes the engine's records one at a time, in the order it asked, and reports each outcome.
async fn persist_in_order(driver: Arc<ClassicDriver>, mut queue: mpsc::UnboundedReceiver<Persist>) {
    while let Some(p) = queue.recv().await {
        let result = classic::persist(&driver.partition, &p, PERSIST_TIMEOUT).await;
        if let Ok(effects) = driver.call(|e, r, now| e.persisted(now, r, p.id, result)) {
            driver.carry_out(effects);
        }
    }
}

/// Calls the engine's `tick` when its next deadline comes (join phases ending, members not
/// syncing, sessions running out), re-reading the deadline after every call.
async fn fire_deadlines(driver: Arc<ClassicDriver>) {
    loop {
        let wait = match lock(&driver.engine).next_deadline() {
            Some(at_ms) => Duration::from_millis(u64::try_from(at_ms - rill_rt::wall_clock_ms()).unwrap_or(0)),
            None => IDLE_TICK,
        };
        let due = tokio::select! {
            () = driver.deadline_changed.notified() => false,
            () = rill_rt::sleep(wait) => true,
        };
        if due {
            if let Ok(effects) = driver.call(|e, r, now| e.tick(now, r)) {
                driver.carry_out(effects);
            }
        }
    }
}
