//! [`Proposer`]: hands a partition's record batches to Raft, merging the batches that arrive
//! while the previous entry is being written into one entry.
//!
//! openraft 0.9 writes a leader's entries one at a time: the group's Raft task appends an entry,
//! waits for the leader's log to sync it, and only then replicates it and takes the next client
//! write. Produce requests that reach a partition while one of its entries is being synced would
//! queue in front of that task and be written one after another, a sync each. Here they wait
//! in one *open entry* instead, and go to Raft together as soon as the entry before them is
//! durable on the leader (the moment Raft could have taken the next one anyway): N concurrent
//! batches cost one entry, one leader sync, one round of replication and one apply, instead of
//! N of each in a row. A lone request finds no entry being written and goes at once.
//!
//! ```text
//!  submit(batch) ─► open entry (batches in arrival order) ─► driver: propose ─► durable here? ─► next entry
//!        └─► Share { entry progress, records before this batch in the entry }
//! ```
//!
//! **Bounds.** At most [`MAX_QUEUED_BYTES`] of batches wait for the driver per partition; a
//! submit that finds the queue full waits for room until its request's deadline and then fails
//! with a timeout, its batch never queued — so a flood of `acks=0` produce requests, which are
//! answered as soon as their batch is queued, is slowed to the rate the log takes them instead
//! of growing memory. A batch whose request waits for its outcome and may give up (acks=1 or
//! all, not idempotent, not a control batch) is never proposed after its deadline: an entry whose every batch is past its deadline is
//! dropped, its requests answered with a timeout (a batch that shares an entry with one whose
//! request is still waiting goes with it).
//!
//! **Terms.** A batch the idempotence gate admitted (and a control batch the gate tracks) is
//! submitted with the leader term it was decided in, and its entry is proposed only while this
//! node still leads in that term; otherwise the entry fails `NOT_LEADER_OR_FOLLOWER`, nothing
//! written. The gate forgets its in-flight batches when a new term begins, so a batch decided
//! in one term and proposed in the next — the node lost leadership and won it back while the
//! batch waited in the queue — would be unknown to the new term's gate, and a retry of it there
//! appended a second time. (The check is made just before the entry is handed to Raft; a
//! leadership change in the instant between the two is not excluded.)
//!
//! **Holds.** A lone batch on an idle partition goes to Raft at once, so two batches submitted
//! one after the other may still land in two entries, written one after the other. A caller
//! that needs them in one — a transaction's owed marker and the batch of the producer's next
//! transaction right behind it — takes a [`Hold`] first: while one lives, the driver leaves the
//! newest entry open (older ones are written as usual), and the last hold to go starts it again.
//! A hold keeps nothing back while a submit waits for room in the queue ("Bounds"): the holder's
//! own next batch may be the one waiting.
//!
//! **Order.** Entries are proposed in the order they were opened, and batches keep their order
//! inside an entry, so batches enter the log in the order `submit` was called (the idempotence
//! gate relies on it). **Offsets.** The state machine answers an entry's base offset; a batch's
//! own base offset is that plus the records of the batches before it in the same entry.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use bytes::Bytes;
use rill_raft::{LogStore, NodeId, Payload, Quiescence, Raft};
use rill_rt::sync::watch;
use rill_rt::Instant;

use crate::command;
use crate::error::{PartitionError, Result};
use crate::machine::decode_base_offset;

/// Most batch bytes one merged entry carries (a single larger batch still goes alone). Raft
/// replicates at most a megabyte per append call; entries larger than that would travel alone.
pub const MAX_ENTRY_BYTES: usize = 1 << 20;

/// Most batch bytes waiting for the driver, per partition (see the module docs, "Bounds").
pub const MAX_QUEUED_BYTES: usize = 32 << 20;

/// Longest the driver waits for an entry to be durable on the leader before proposing the next
/// one anyway. The wait only paces merging; nothing depends on it for correctness.
const PACE_LIMIT: Duration = Duration::from_millis(500);

/// How far an entry has come.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Progress {
    /// Waiting in the open entry, or handed to Raft and not yet durable here.
    Pending,
    /// Synced in the leader's log, starting at offset `base`.
    Durable { base: u64 },
    /// Committed and applied: base offset, log index, term.
    Committed { base: u64, index: u64, term: u64 },
    /// Raft refused the entry or lost it (leadership moved, the group stopped).
    Failed(PartitionError),
}

/// One batch's part in an entry: how to learn where it landed.
pub struct Share {
    progress: watch::Receiver<Progress>,
    /// Records of the batches ahead of this one in the same entry.
    records_before: u64,
}

/// Where a committed batch landed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Landed {
    /// Offset of the batch's first record.
    pub base: u64,
    /// Raft log index of the entry holding it.
    pub index: u64,
    /// Term of that entry.
    pub term: u64,
}

impl Share {
    /// Waits until the batch is synced in the leader's log (acks=1) and returns its base offset.
    /// `None` when `deadline` passed first.
    pub async fn durable(&mut self, deadline: Option<Instant>) -> Option<Result<u64>> {
        let before = self.records_before;
        self.wait(deadline, |p| match p {
            Progress::Pending => None,
            Progress::Durable { base } | Progress::Committed { base, .. } => Some(Ok(base + before)),
            Progress::Failed(e) => Some(Err(e.clone())),
        })
        .await
    }

    /// Waits until the batch is committed or refused; `None` when `deadline` passed first.
    pub async fn committed(&mut self, deadline: Option<Instant>) -> Option<Result<Landed>> {
        let before = self.records_before;
        self.wait(deadline, |p| match p {
            Progress::Pending | Progress::Durable { .. } => None,
            Progress::Committed { base, index, term } => {
                Some(Ok(Landed { base: base + before, index: *index, term: *term }))
            }
            Progress::Failed(e) => Some(Err(e.clone())),
        })
        .await
    }

    async fn wait<T>(
        &mut self,
        deadline: Option<Instant>,
        done: impl Fn(&Progress) -> Option<Result<T>>,
    ) -> Option<Result<T>> {
        loop {
            if let Some(r) = done(&self.progress.borrow_and_update()) {
                return Some(r);
            }
            let changed = match deadline {
                Some(at) => match rill_rt::timeout_at(at, self.progress.changed()).await {
                    Err(_) => return None,
                    Ok(changed) => changed,
                },
                None => self.progress.changed().await,
            };
            if changed.is_err() {
                // Every sender is gone without an outcome: the replica is stopping.
                return Some(Err(PartitionError::ShuttingDown));
            }
        }
    }
}

/// Batches gathered for one entry.
struct OpenEntry {
    batches: Vec<Bytes>,
    records: u64,
    bytes: usize,
    append_time_ms: i64,
    /// The latest deadline of its batches' requests; `None` once a batch that must not be
    /// dropped joined (an idempotent or control batch).
    deadline: Option<Instant>,
    /// The leader term its gate-admitted batches were decided in (all the same): the entry is
    /// proposed only while this node leads in it. `None`: no such batch.
    term: Option<u64>,
    progress: watch::Sender<Progress>,
}

impl OpenEntry {
    fn new(deadline: Option<Instant>, term: Option<u64>) -> Self {
        Self {
            batches: Vec::new(),
            records: 0,
            bytes: 0,
            append_time_ms: i64::MIN,
            deadline,
            term,
            progress: watch::channel(Progress::Pending).0,
        }
    }

    /// Whether a batch bound to `term` may join this entry.
    fn takes(&self, size: usize, term: Option<u64>) -> bool {
        let fits = self.batches.is_empty() || self.bytes + size <= MAX_ENTRY_BYTES;
        let same_term = self.term.is_none() || term.is_none() || self.term == term;
        fits && same_term
    }
}

#[derive(Default)]
struct State {
    /// Entries waiting for the driver, oldest first; batches join the newest.
    entries: VecDeque<OpenEntry>,
    /// Bytes of the batches in `entries`.
    queued_bytes: usize,
    /// A driver task is writing entries.
    driving: bool,
    /// Live [`Hold`]s: while any is, the newest entry is not taken (its holder may add more).
    holds: usize,
    /// Submits waiting for room in the queue: while any is, holds keep nothing back (the
    /// holder itself may be the one waiting, for room only the held entry takes up).
    wanting_room: usize,
}

impl State {
    /// Adds `batch` to the newest entry, or to a new one when it does not fit there.
    fn push(
        &mut self,
        batch: Bytes,
        records: u32,
        append_time_ms: i64,
        deadline: Instant,
        lateness: Lateness,
        term: Option<u64>,
    ) -> Share {
        let size = batch.len();
        let records = u64::from(records);
        let droppable = (lateness == Lateness::Drop).then_some(deadline);
        let mut entry = match self.entries.pop_back() {
            Some(e) if e.takes(size, term) => e,
            Some(other) => {
                self.entries.push_back(other);
                OpenEntry::new(droppable, term)
            }
            None => OpenEntry::new(droppable, term),
        };
        entry.term = entry.term.or(term);
        let share = Share { progress: entry.progress.subscribe(), records_before: entry.records };
        entry.records += records;
        entry.bytes += size;
        entry.append_time_ms = entry.append_time_ms.max(append_time_ms);
        entry.deadline = match (entry.deadline, droppable) {
            (Some(a), Some(b)) => Some(a.max(b)),
            _ => None,
        };
        entry.batches.push(batch);
        self.entries.push_back(entry);
        self.queued_bytes += size;
        share
    }

    /// Whether the newest entry is kept open ([`Hold`]).
    fn held(&self) -> bool {
        self.holds > 0 && self.wanting_room == 0
    }

    /// The oldest entry, for the driver to write: `None` when none is queued or only the
    /// newest one is, and it is held.
    fn take_next(&mut self) -> Option<OpenEntry> {
        if self.held() && self.entries.len() == 1 {
            return None;
        }
        let entry = self.entries.pop_front()?;
        self.queued_bytes = self.queued_bytes.saturating_sub(entry.bytes);
        Some(entry)
    }
}

/// How a submitted batch may be treated when its request runs out of time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lateness {
    /// Dropped, not proposed, once its deadline passed: its request waits for the outcome and
    /// has then been answered with a timeout.
    Drop,
    /// Proposed whatever the time: an acks=0 batch (its request was answered when it was
    /// queued), an idempotent batch (the gate deduplicates its retries and admitted its
    /// successors after it), or a control batch.
    Keep,
}

/// Keeps a proposer's newest entry open while it lives ([`Proposer::hold`]).
pub struct Hold {
    proposer: Arc<Proposer>,
}

impl Drop for Hold {
    fn drop(&mut self) {
        let mut st = self.proposer.lock();
        st.holds = st.holds.saturating_sub(1);
        self.proposer.drive_if_idle(&mut st);
    }
}

/// A submit waiting for room in the queue, for as long as it lives (see
/// `State::wanting_room`).
struct WantsRoom<'a>(&'a Arc<Proposer>);

impl<'a> WantsRoom<'a> {
    fn new(proposer: &'a Arc<Proposer>) -> Self {
        let mut st = proposer.lock();
        st.wanting_room += 1;
        // A held entry may be what takes up the room: the driver goes on with it.
        proposer.drive_if_idle(&mut st);
        Self(proposer)
    }
}

impl Drop for WantsRoom<'_> {
    fn drop(&mut self) {
        let mut st = self.0.lock();
        st.wanting_room = st.wanting_room.saturating_sub(1);
    }
}

/// Merges and proposes a partition's record batches (see the module docs).
pub struct Proposer {
    node_id: NodeId,
    raft: Raft,
    log: LogStore,
    quiescence: Arc<Quiescence>,
    state: Mutex<State>,
    /// Signalled when the driver takes entries off the queue (room for waiting submits).
    room: rill_rt::sync::Notify,
    next_tag: AtomicU64,
}

impl Proposer {
    /// A proposer writing into `raft`, whose log is `log`.
    pub fn new(node_id: NodeId, raft: Raft, log: LogStore, quiescence: Arc<Quiescence>) -> Arc<Self> {
        Arc::new(Self {
            node_id,
            raft,
            log,
            quiescence,
            state: Mutex::default(),
            room: rill_rt::sync::Notify::new(),
            next_tag: AtomicU64::new(1),
        })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Bytes of batches waiting for the driver now (at most [`MAX_QUEUED_BYTES`], or one batch).
    pub fn queued_bytes(&self) -> usize {
        self.lock().queued_bytes
    }

    /// Queues `batch` (a validated record batch of `records` records, accepted by the leader at
    /// `append_time_ms`) for the log. Batches enter the log in the order of calls. Waits for room
    /// while [`MAX_QUEUED_BYTES`] are queued, until `deadline` (then a timeout, nothing queued).
    /// `term`: the leader term the idempotence gate admitted the batch in; it is written only
    /// while this node leads in that term (module docs, "Terms").
    #[allow(clippy::too_many_arguments)]
    pub async fn submit(
        self: &Arc<Self>,
        batch: Bytes,
        records: u32,
        append_time_ms: i64,
        deadline: Instant,
        lateness: Lateness,
        term: Option<u64>,
    ) -> Result<Share> {
        let size = batch.len();
        let started = rill_rt::now();
        loop {
            let room = self.room.notified();
            {
                let mut st = self.lock();
                // A batch larger than the whole bound still goes, alone in the queue.
                if st.queued_bytes == 0 || st.queued_bytes + size <= MAX_QUEUED_BYTES {
                    let share = st.push(batch, records, append_time_ms, deadline, lateness, term);
                    self.drive_if_idle(&mut st);
                    return Ok(share);
                }
            }
            let waiting = WantsRoom::new(self);
            let timed_out = rill_rt::timeout_at(deadline, room).await.is_err();
            drop(waiting);
            if timed_out {
                let waited_ms =
                    u64::try_from(rill_rt::now().saturating_duration_since(started).as_millis()).unwrap_or(u64::MAX);
                return Err(PartitionError::Timeout { waited_ms, what: "room in the partition's write queue" });
            }
        }
    }

    /// Starts the driver when entries wait, none is held and no driver runs.
    fn drive_if_idle(self: &Arc<Self>, st: &mut State) {
        if !st.held() && !st.driving && !st.entries.is_empty() {
            st.driving = true;
            rill_rt::spawn(self.clone().drive());
        }
    }

    /// Keeps the newest entry open until the returned [`Hold`] is dropped: batches submitted
    /// while it lives share one entry (as far as [`MAX_ENTRY_BYTES`] and their terms allow)
    /// even when the partition is idle, where the first would otherwise go to Raft alone at
    /// once. For batches that belong together in the log, such as a transaction marker and the
    /// batch of the producer's next transaction that it must precede. Entries before the newest
    /// are written as usual. Drop it promptly: the entry waits for it.
    pub fn hold(self: &Arc<Self>) -> Hold {
        self.lock().holds += 1;
        Hold { proposer: self.clone() }
    }

    /// Writes entries until none is waiting.
    async fn drive(self: Arc<Self>) {
        loop {
            let entry = {
                let mut st = self.lock();
                match st.take_next() {
                    Some(e) => e,
                    None => {
                        // Nothing to write, or only a held entry (the last hold to go resumes).
                        st.driving = false;
                        return;
                    }
                }
            };
            self.room.notify_waiters();
            // Every request of this entry has given up: its batches are not written late.
            if entry.deadline.is_some_and(|d| rill_rt::now() > d) {
                let late = PartitionError::Timeout { waited_ms: 0, what: "the batch's turn in the log" };
                entry.progress.send_replace(Progress::Failed(late));
                continue;
            }
            self.write(entry).await;
        }
    }

    /// Proposes `entry` and returns once it is durable in this node's log, settled, or
    /// [`PACE_LIMIT`] passed.
    async fn write(&self, entry: OpenEntry) {
        let OpenEntry { batches, records, append_time_ms, progress, term, .. } = entry;
        if let Some(term) = term {
            let leads = {
                let m = self.raft.metrics();
                let m = m.borrow();
                (m.state == openraft::ServerState::Leader && m.current_term == term)
                    .then_some(())
                    .ok_or_else(|| m.current_leader.filter(|l| *l != self.node_id))
            };
            if let Err(leader) = leads {
                progress.send_replace(Progress::Failed(PartitionError::NotLeader { node: self.node_id, leader }));
                return;
            }
        }
        let tag = self.next_tag.fetch_add(1, Ordering::Relaxed);
        let durable = self.log.watch_proposal(tag);
        let payload = Payload {
            units: u32::try_from(records).unwrap_or(u32::MAX),
            body: command::encode_append(append_time_ms, &batches),
            proposal: tag,
        };
        // Wake a quiescent group before the entry reaches Raft and again once it has: an attempt
        // to quiesce that raced with the first is then undone by the second.
        self.quiescence.wake();
        let queued = self.raft.client_write_ff(payload).await;
        self.quiescence.wake();
        let commit = match queued {
            Ok(commit) => commit,
            Err(_) => {
                self.log.forget_proposal(tag);
                progress.send_replace(Progress::Failed(PartitionError::ShuttingDown));
                return;
            }
        };
        // One task per entry publishes its progress: durable here (acks=1 answers), then
        // committed or failed (acks=all and the idempotence gate wait for that).
        let mut settled = progress.subscribe();
        let outcome = progress;
        let log = self.log.clone();
        let node = self.node_id;
        rill_rt::spawn(async move {
            tokio::pin!(durable);
            tokio::pin!(commit);
            let mut durable_open = true;
            let result = loop {
                tokio::select! {
                    biased;
                    placement = &mut durable, if durable_open => {
                        durable_open = false;
                        if let Ok(p) = placement {
                            outcome.send_if_modified(|now| {
                                let pending = *now == Progress::Pending;
                                if pending {
                                    *now = Progress::Durable { base: p.base };
                                }
                                pending
                            });
                        }
                    }
                    result = &mut commit => break result,
                }
            };
            // An entry Raft refused never reaches the log: drop its registration.
            log.forget_proposal(tag);
            outcome.send_replace(match result {
                Ok(Ok(w)) => match decode_base_offset(&w.data.0) {
                    Some(base) => Progress::Committed { base, index: w.log_id.index, term: w.log_id.leader_id.term },
                    None => Progress::Failed(PartitionError::Storage("state machine gave no base offset".into())),
                },
                Ok(Err(e)) => Progress::Failed(PartitionError::from_write(e, node)),
                Err(_) => Progress::Failed(PartitionError::ShuttingDown),
            });
        });
        // The next entry goes once this one is durable here (when Raft takes the next client
        // write anyway) or settled, and after PACE_LIMIT regardless.
        let _ = rill_rt::timeout(PACE_LIMIT, settled.wait_for(|p| *p != Progress::Pending)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn push(st: &mut State, bytes: usize, term: Option<u64>) -> Share {
        let far = rill_rt::now() + Duration::from_secs(60);
        st.push(Bytes::from(vec![0u8; bytes]), 1, 0, far, Lateness::Keep, term)
    }

    fn batches(entry: &OpenEntry) -> Vec<usize> {
        entry.batches.iter().map(Bytes::len).collect()
    }

    #[test]
    fn batches_submitted_under_a_hold_share_an_entry_taken_once_released() {
        let mut st = State { holds: 1, ..State::default() };
        let first = push(&mut st, 10, Some(3));
        // Alone and held: not written yet, so the next batch can still join it.
        assert!(st.take_next().is_none());
        let second = push(&mut st, 20, Some(3));
        assert!(st.take_next().is_none());
        st.holds = 0;
        let entry = st.take_next().expect("released");
        assert_eq!(batches(&entry), [10, 20]);
        assert_eq!((first.records_before, second.records_before), (0, 1));
        assert_eq!(st.queued_bytes, 0);
        assert!(st.take_next().is_none());
    }

    #[test]
    fn a_hold_keeps_back_only_the_newest_entry() {
        let mut st = State::default();
        push(&mut st, 10, Some(3));
        // Another term's batch cannot share the entry: it opens the next one.
        push(&mut st, 20, Some(4));
        st.holds = 1;
        let older = st.take_next().expect("entries before the newest are written as usual");
        assert_eq!(batches(&older), [10]);
        assert!(st.take_next().is_none());
        assert_eq!(st.queued_bytes, 20);
    }

    #[test]
    fn a_hold_keeps_nothing_back_from_a_submit_waiting_for_room() {
        let mut st = State { holds: 1, ..State::default() };
        push(&mut st, 10, None);
        assert!(st.take_next().is_none());
        // The holder's next batch may need the room the held entry takes up.
        st.wanting_room = 1;
        assert_eq!(st.take_next().map(|e| batches(&e)), Some(vec![10]));
    }

    #[test]
    fn without_a_hold_a_lone_batch_goes_at_once() {
        let mut st = State::default();
        push(&mut st, 10, None);
        assert_eq!(st.take_next().map(|e| batches(&e)), Some(vec![10]));
    }
}
