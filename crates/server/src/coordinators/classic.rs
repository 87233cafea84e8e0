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
//! version the previous one makes, so they join one queue under the engine's lock (whichever task
//! called it) and are proposed one at a time. The engine's lock is taken inside the partition's
//! read of its applied state and never held across an await. After resignation the driver
//! refuses every call (`NOT_COORDINATOR`), so a request that took it just before cannot start
//! anything the next shard would not know.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
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
/// Pause after a deadline could not be handled (this node no longer leads the partition).
const RETRY_PAUSE: Duration = Duration::from_millis(100);

type Result<T, E = CoordinatorError> = std::result::Result<T, E>;

/// The classic groups of one `__consumer_offsets` partition this node leads.
pub struct ClassicDriver {
    partition: Arc<StatePartition<OffsetsMachine>>,
    /// This node (what a refusal after resignation names).
    node_id: u64,
    engine: Mutex<ClassicEngine>,
    /// Parked JoinGroups and SyncGroups, by handle.
    waiting: Mutex<HashMap<Handle, oneshot::Sender<Answer>>>,
    next_handle: AtomicU64,
    /// Records to propose, in order.
    persists: mpsc::UnboundedSender<Persist>,
    /// Woken after every engine call: the next deadline may have moved.
    deadline_changed: Arc<Notify>,
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
        node_id: u64,
        config: ClassicConfig,
    ) -> Result<(Arc<Self>, Vec<JoinHandle<()>>)> {
        let now_ms = rill_rt::wall_clock_ms();
        let ids: classic::MemberIds = Box::new(classic::random_member_id);
        let engine = partition.read(|m| ClassicEngine::new(config, m.classic_groups(), now_ms, ids))?;
        let (persists, queue) = mpsc::unbounded_channel();
        let deadline_changed = Arc::new(Notify::new());
        let driver = Arc::new(Self {
            partition,
            node_id,
            engine: Mutex::new(engine),
            waiting: Mutex::default(),
            next_handle: AtomicU64::new(0),
            persists,
            deadline_changed: deadline_changed.clone(),
            resigned: AtomicBool::new(false),
        });
        // The tasks hold the driver weakly between records and deadlines (upgrading only while
        // they work on one), so dropping the shard drops the driver and the persist queue closes.
        let tasks = vec![
            rill_rt::spawn(persist_in_order(Arc::downgrade(&driver), queue)),
            rill_rt::spawn(fire_deadlines(Arc::downgrade(&driver), deadline_changed)),
        ];
        Ok((driver, tasks))
    }

    /// Runs `f` on the engine with the applied state, on the caught-up leader, and carries out
    /// the effects it returns in order. The records to store join the persist queue under the
    /// engine's lock, so that they are proposed in the order the engine decided them whichever
    /// task called it; the answers go to their waiting requests after.
    fn call<R>(&self, f: impl FnOnce(&mut ClassicEngine, Replicated<'_>, i64) -> (R, Vec<Effect>)) -> Result<R> {
        let now_ms = rill_rt::wall_clock_ms();
        let (r, answers) = self.partition.read(|m| {
            let mut engine = lock(&self.engine);
            // Checked under the engine's lock, which resignation takes too.
            if self.resigned.load(Ordering::SeqCst) {
                return Err(self.resigned_error());
            }
            let (r, effects) = f(&mut engine, m.replicated(), now_ms);
            let mut answers = Vec::new();
            for effect in effects {
                match effect {
                    // The queue lives as long as the driver: a send fails only once it is gone.
                    Effect::Persist(p) => drop(self.persists.send(p)),
                    Effect::Respond(handle, answer) => answers.push((handle, answer)),
                }
            }
            Ok((r, answers))
        })??;
        self.answer(answers);
        self.deadline_changed.notify_one();
        Ok(r)
    }

    /// Answers the requests parked under these handles.
    fn answer(&self, answers: Vec<(Handle, Answer)>) {
        for (handle, answer) in answers {
            if let Some(waiting) = lock(&self.waiting).remove(&handle) {
                // A request whose client went away has dropped its receiver: fine.
                let _ = waiting.send(answer);
            }
        }
    }

    /// What a request reaching this driver after its resignation is told: this node is not the
    /// coordinator (any more, in this term); its client finds the coordinator again.
    fn resigned_error(&self) -> CoordinatorError {
        CoordinatorError::NotCoordinator { node: self.node_id, leader: None, addr: None }
    }

    /// Parks a request under a fresh handle, calls the engine with it, and waits for its answer.
    async fn parked(
        &self,
        f: impl FnOnce(&mut ClassicEngine, Replicated<'_>, i64, Handle) -> Vec<Effect>,
    ) -> Result<Answer> {
        let handle = Handle(self.next_handle.fetch_add(1, Ordering::Relaxed));
        let (tx, rx) = oneshot::channel();
        lock(&self.waiting).insert(handle, tx);
        if let Err(e) = self.call(|e, r, now| ((), f(e, r, now, handle))) {
            lock(&self.waiting).remove(&handle);
            return Err(e);
        }
        // Every handle is answered (by a later call, or at resignation); a sender dropped
        // unanswered means the driver went with its leadership.
        rx.await.map_err(|_| self.resigned_error())
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
        self.call(|e, r, now| (e.heartbeat(now, r, req), Vec::new()))?
    }

    /// A LeaveGroup: each member's outcome.
    pub fn leave(&self, req: &LeaveGroup) -> Result<Vec<Left>> {
        self.call(|e, r, now| match e.leave(now, r, req) {
            Ok(outcome) => (Ok(outcome.members), outcome.effects),
            Err(error) => (Err(error), Vec::new()),
        })?
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
        self.call(|e, _, _| (e.check_commit(group_id, member_id, None, generation), Vec::new()))?
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
    pub(super) fn resign(&self) {
        let error = self.resigned_error();
        let effects = {
            let mut engine = lock(&self.engine);
            self.resigned.store(true, Ordering::SeqCst);
            engine.resign(&error)
        };
        // Only answers: a resigning engine stores nothing.
        let answers = effects
            .into_iter()
            .filter_map(|effect| match effect {
                Effect::Respond(handle, answer) => Some((handle, answer)),
                Effect::Persist(_) => None,
            })
            .collect();
        self.answer(answers);
        // Anything still parked (there should be nothing) learns through its dropped sender.
        lock(&self.waiting).clear();
    }
}

/// Proposes the engine's records one at a time, in the order it asked, and reports each outcome;
/// ends when the driver goes.
async fn persist_in_order(driver: Weak<ClassicDriver>, mut queue: mpsc::UnboundedReceiver<Persist>) {
    while let Some(p) = queue.recv().await {
        let Some(d) = driver.upgrade() else { return };
        let result = rill_coordinator::offsets::membership::persist_classic(&d.partition, &p, PERSIST_TIMEOUT).await;
        // Refused once the driver resigned: its requests were answered then.
        let _ = d.call(|e, r, now| ((), e.persisted(now, r, p.id, result)));
    }
}

/// Calls the engine's `tick` when its next deadline comes (join phases ending, members not
/// syncing, sessions running out), re-reading the deadline after every call; ends when the
/// driver goes.
async fn fire_deadlines(driver: Weak<ClassicDriver>, deadline_changed: Arc<Notify>) {
    loop {
        let Some(d) = driver.upgrade() else { return };
        let wait = match lock(&d.engine).next_deadline() {
            Some(at_ms) => Duration::from_millis(u64::try_from(at_ms - rill_rt::wall_clock_ms()).unwrap_or(0)),
            None => IDLE_TICK,
        };
        drop(d);
        let due = tokio::select! {
            () = deadline_changed.notified() => false,
            () = rill_rt::sleep(wait) => true,
        };
        if !due {
            continue;
        }
        let Some(d) = driver.upgrade() else { return };
        if d.call(|e, r, now| ((), e.tick(now, r))).is_err() {
            // Not the leader now (its shard resigns soon): do not spin on a past deadline.
            drop(d);
            rill_rt::sleep(RETRY_PAUSE).await;
        }
    }
}
