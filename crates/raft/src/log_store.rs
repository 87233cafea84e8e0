//! [`LogStore`]: one group's Raft log, vote and position index, on the node's shared engine.
//!
//! # Positions
//! Every entry occupies `units` dense *positions* (0 for blank and membership entries). The
//! position an entry starts at is fixed when it is appended: it is the log's end position at
//! that moment, stored in the entry and in the `LogIndex` keyspace (`position → log index`).
//! Raft's log matching property makes positions identical on every replica for every shared log
//! prefix, so a partition's offsets are simply positions, and its records are read straight from
//! the Raft log — they are never written a second time.
//!
//! # Durability
//! * `append` writes entries unsynced (readable at once) and hands a flush job to the group's
//!   flusher task, which calls the node's [`Syncer`] and only then tells openraft the entries
//!   are flushed. openraft acknowledges appends to the leader, counts the leader's own copy and
//!   grants votes only after that — so nothing is acknowledged before it is synced.
//! * `save_vote` returns only after a sync.
//! * `truncate`, `purge` and `save_committed` write unsynced; the next sync covers them, and the
//!   engine's prefix guarantee means a surviving later append implies they survived too.
//!
//! # Purging, retained entries and snapshot installation
//! Raft's purge point and what is physically deleted differ for a record partition: entries at
//! or above its *retained floor* ([`LogStore::retain_from`]: the entry holding the log start
//! offset of the newest snapshot) hold records that are still served, so a purge never deletes
//! them, and neither does it delete entries a snapshot being sent still reads (a [`Pin`]). What
//! Raft has purged but the log keeps is readable here (fetches) and never read by openraft.
//!
//! A follower installing a snapshot of such a group receives those entries with it
//! ([`crate::transfer`]): they are staged under [`keys::staging`] while they arrive, and
//! `LogStore::install` moves them into the log after the snapshot is persisted, recording an
//! [`InstallMarker`] first so that a node which crashes mid-move finishes it when its log opens.
//! openraft purges the log up to the snapshot without waiting for the state machine to install
//! it; a purge that finds the snapshot it is about to install only moves the log's positions in
//! memory, and appends wait for the installation, so no entry is written or acknowledged above a
//! hole.

use std::collections::{HashMap, VecDeque};
use std::fmt::Debug;
use std::ops::{Bound, RangeBounds};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use bytes::Bytes;
use openraft::storage::{LogFlushed, LogState, RaftLogStorage};
use openraft::{AnyError, EntryPayload, OptionalSend, RaftLogReader, StorageIOError};
use rill_rt::mutation::Mutation;
use rill_rt::sync::{mpsc, oneshot};
use rill_storage::{Engine, Keyspace, Syncer, WriteBatch};

use crate::codec::{self, InstallMarker, Purged, StoredEntry, Wire};
use crate::keys;
use crate::types::{Entry, GroupId, LogId, StorageError, TypeConfig, Vote};

/// Where a proposed entry landed: its log index and first position.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Placement {
    /// Raft log index.
    pub index: u64,
    /// First position (for a partition: the batch's base offset).
    pub base: u64,
}

/// A decoded normal entry and the positions it occupies.
#[derive(Debug, Clone)]
pub struct PositionedEntry {
    /// Raft log index.
    pub index: u64,
    /// First position.
    pub base: u64,
    /// Positions occupied.
    pub units: u32,
    /// The term of the leader that appended it (Kafka's leader epoch of the entry's batches).
    pub term: u64,
    /// The state machine command.
    pub body: Bytes,
}

struct LogMeta {
    last_log_id: Option<LogId>,
    last_purged: Option<LogId>,
    /// First position still in the log (the end of the physically deleted prefix).
    start_position: u64,
    /// Position after the last entry.
    end_position: u64,
    /// First log index still stored (everything below it is deleted).
    first_kept: u64,
    /// Entries from this index on are kept whatever Raft purges (see [`LogStore::retain_from`]).
    floor: Option<u64>,
    /// A purge moved the log past a snapshot that is being installed: appends wait for it.
    awaiting_install: bool,
}

/// A snapshot received in full and about to be installed (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ExpectedInstall {
    /// The installation, as it will be recorded.
    pub(crate) marker: InstallMarker,
}

struct FlushJob {
    /// openraft's completion callback; `None` when it was already (wrongly) called early.
    callback: Option<LogFlushed<TypeConfig>>,
    proposals: Vec<(oneshot::Sender<Placement>, Placement)>,
}

/// Most bytes of entry bodies the tail cache of one group holds.
const TAIL_CACHE_BYTES: usize = 1 << 20;
/// Most entries the tail cache of one group holds.
const TAIL_CACHE_ENTRIES: usize = 512;

/// The bytes held by the tail caches of every group of a node, against one limit: past it,
/// each group keeps only its last entry (enough for the apply right after a commit), so memory
/// stays bounded however many partitions are written at once.
#[derive(Debug)]
pub struct TailBudget {
    used: AtomicUsize,
    limit: usize,
}

impl TailBudget {
    /// A budget of `limit` bytes shared by the logs opened with it.
    pub fn new(limit: usize) -> Arc<Self> {
        Arc::new(Self { used: AtomicUsize::new(0), limit })
    }

    /// Bytes cached now.
    pub fn used(&self) -> usize {
        self.used.load(Ordering::Relaxed)
    }

    fn exhausted(&self) -> bool {
        self.used() > self.limit
    }

    fn account(&self, before: usize, after: usize) {
        if after >= before {
            self.used.fetch_add(after - before, Ordering::Relaxed);
        } else {
            self.used.fetch_sub(before - after, Ordering::Relaxed);
        }
    }
}

/// The most recently appended entries of a group, in memory.
///
/// openraft reads entries back from the log right after appending them: to apply them once
/// committed, and to replicate them to followers. Served from storage, each read was a scan, a
/// copy of every value and a decode — a third of a loaded node's copying. The cache mirrors the
/// stored tail exactly (appends, truncations and purges apply to both, under the log's lock),
/// so a read it serves returns what storage would; reads that reach below it go to storage.
#[derive(Default)]
struct TailCache {
    /// Consecutive entries, oldest first.
    entries: VecDeque<StoredEntry>,
    bytes: usize,
}

impl TailCache {
    fn size(e: &StoredEntry) -> usize {
        match &e.entry.payload {
            EntryPayload::Normal(p) => p.body.len() + 64,
            _ => 64,
        }
    }

    /// Adds `e`, which follows the cached entries (or restarts the cache if it does not).
    /// `tight`: the node's budget is exhausted, keep only `e`.
    fn push(&mut self, e: StoredEntry, tight: bool) {
        if self.entries.back().is_some_and(|b| b.entry.log_id.index + 1 != e.entry.log_id.index) {
            self.entries.clear();
            self.bytes = 0;
        }
        self.bytes += Self::size(&e);
        self.entries.push_back(e);
        while self.entries.len() > 1
            && (tight || self.bytes > TAIL_CACHE_BYTES || self.entries.len() > TAIL_CACHE_ENTRIES)
        {
            if let Some(old) = self.entries.pop_front() {
                self.bytes -= Self::size(&old);
            }
        }
    }

    /// Replaces the cached entry with `e`'s log index, if it is cached.
    fn replace(&mut self, e: &StoredEntry) {
        let Some(first) = self.entries.front().map(|f| f.entry.log_id.index) else { return };
        let Some(slot) = e.entry.log_id.index.checked_sub(first).and_then(|i| usize::try_from(i).ok()) else {
            return;
        };
        if let Some(old) = self.entries.get_mut(slot) {
            self.bytes = self.bytes - Self::size(old) + Self::size(e);
            *old = e.clone();
        }
    }

    /// Drops entries from log index `from` on.
    fn truncate(&mut self, from: u64) {
        while self.entries.back().is_some_and(|b| b.entry.log_id.index >= from) {
            if let Some(e) = self.entries.pop_back() {
                self.bytes -= Self::size(&e);
            }
        }
    }

    /// Drops entries up to log index `upto`, inclusive.
    fn purge(&mut self, upto: u64) {
        while self.entries.front().is_some_and(|f| f.entry.log_id.index <= upto) {
            if let Some(e) = self.entries.pop_front() {
                self.bytes -= Self::size(&e);
            }
        }
    }

    /// The cached entries with log index in `[start, end)`, if the cache reaches down to
    /// `start` (entries past the cached end do not exist, as in storage).
    fn range(&self, start: u64, end: u64) -> Option<impl Iterator<Item = &StoredEntry>> {
        let first = self.entries.front()?.entry.log_id.index;
        if start < first {
            return None;
        }
        let skip = usize::try_from(start - first).ok()?;
        let take = usize::try_from(end.saturating_sub(start)).unwrap_or(usize::MAX);
        Some(self.entries.iter().skip(skip).take(take))
    }
}

struct Shared {
    group: GroupId,
    engine: Arc<dyn Engine>,
    syncer: Syncer,
    meta: Mutex<LogMeta>,
    tail: Mutex<TailCache>,
    tail_budget: Arc<TailBudget>,
    flush_tx: mpsc::UnboundedSender<FlushJob>,
    proposals: Mutex<HashMap<u64, oneshot::Sender<Placement>>>,
    /// The snapshot received in full, until openraft purges for it or the transfer ends.
    expected: Mutex<Option<ExpectedInstall>>,
    /// Signalled when an installation finishes (appends waiting on it go on).
    installed: rill_rt::sync::Notify,
    /// Lowest index each open snapshot transfer still reads, by pin id.
    pins: Mutex<(u64, std::collections::BTreeMap<u64, u64>)>,
    /// Snapshots installed since the log opened.
    installs: AtomicUsize,
    /// Held while an installation replaces the log and while an entry is rewritten, so that a
    /// rewrite never lands between an installation's deletion and its copy.
    replacing: Mutex<()>,
}

impl Shared {
    /// Changes the tail cache, keeping the node's budget in step.
    fn with_tail<R>(&self, f: impl FnOnce(&mut TailCache) -> R) -> R {
        let mut tail = lock(&self.tail);
        let before = tail.bytes;
        let out = f(&mut tail);
        self.tail_budget.account(before, tail.bytes);
        out
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        let cached = lock(&self.tail).bytes;
        self.tail_budget.account(cached, 0);
    }
}

/// What [`LogStore::rewrite`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rewrite {
    /// The entry holds the new body.
    Done,
    /// The entry is no longer there as it was; nothing was written.
    Gone,
    /// A snapshot transfer reads the entry; nothing was written (try again later).
    Held,
}

/// Keeps the entries from one index on from being deleted (or rewritten) while a snapshot
/// transfer reads them; dropping it deletes what its reads held back.
pub struct Pin {
    shared: Arc<Shared>,
    id: u64,
}

impl Drop for Pin {
    fn drop(&mut self) {
        lock(&self.shared.pins).1.remove(&self.id);
        let log = LogStore { shared: self.shared.clone() };
        if let Err(e) = log.discard(false) {
            tracing::warn!(group = self.shared.group, error = %e, "could not delete purged entries");
        }
    }
}

/// One group's log storage. Cheap to clone; clones share state.
#[derive(Clone)]
pub struct LogStore {
    shared: Arc<Shared>,
}

impl Debug for LogStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LogStore").field("group", &self.shared.group).finish()
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Every critical section leaves the data consistent, so a poisoned lock is still usable.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn read_err(e: impl ToString) -> StorageError {
    StorageIOError::read_logs(AnyError::error(e)).into()
}

fn write_err(e: impl ToString) -> StorageError {
    StorageIOError::write_logs(AnyError::error(e)).into()
}

impl LogStore {
    /// Opens group `group`'s log on `engine`, recovering its end from what is stored, and spawns
    /// its flusher task on the current runtime.
    pub fn open(
        group: GroupId,
        engine: Arc<dyn Engine>,
        syncer: Syncer,
        tail_budget: Arc<TailBudget>,
    ) -> crate::Result<Self> {
        let corrupt = |reason: String| crate::Error::Corrupt { group, reason };
        match engine.get(Keyspace::RaftMeta, &keys::group_tag(group, keys::INSTALLING))? {
            Some(b) => {
                let marker = InstallMarker::decode(b).map_err(corrupt)?;
                tracing::info!(group, last = %marker.last, "finishing a snapshot installation interrupted by a restart");
                move_staged(&*engine, group, &marker)?;
            }
            None => {
                let staged = keys::staging(group);
                let (start, end) = (keys::group_start(staged), keys::group_end(staged));
                if !engine.scan(Keyspace::RaftLog, &start, &end, 1)?.is_empty() {
                    // A transfer that never finished: nothing refers to what it staged.
                    let mut b = WriteBatch::new();
                    b.delete_range(Keyspace::RaftLog, start.to_vec(), end.to_vec());
                    engine.write(b, false)?;
                }
            }
        }
        let (last_purged, purged_end, floor) =
            match engine.get(Keyspace::RaftMeta, &keys::group_tag(group, keys::PURGED))? {
                Some(b) => {
                    Purged::decode(b).map(|p| (Some(p.log_id), p.start_position, p.retained_from)).map_err(corrupt)?
                }
                None => (None, 0, None),
            };
        let first = engine.scan(Keyspace::RaftLog, &keys::group_start(group), &keys::group_end(group), 1)?;
        let first_kept = match first.first() {
            Some((k, _)) => keys::suffix_u64(k).unwrap_or(0),
            None => last_purged.map_or(0, |l| l.index + 1),
        };
        let last = engine.scan_rev(Keyspace::RaftLog, &keys::group_start(group), &keys::group_end(group), 1)?;
        let (last_log_id, end_position) = match last.into_iter().next() {
            Some((_, v)) => {
                let e = codec::decode_entry(v).map_err(corrupt)?;
                (Some(e.entry.log_id), e.end())
            }
            None => (last_purged, purged_end),
        };
        let (flush_tx, flush_rx) = mpsc::unbounded_channel();
        rill_rt::spawn(run_flusher(group, syncer.clone(), flush_rx));
        let meta = LogMeta {
            last_log_id,
            last_purged,
            start_position: purged_end,
            end_position,
            first_kept,
            floor,
            awaiting_install: false,
        };
        Ok(Self {
            shared: Arc::new(Shared {
                group,
                engine,
                syncer,
                meta: Mutex::new(meta),
                tail: Mutex::default(),
                tail_budget,
                flush_tx,
                proposals: Mutex::new(HashMap::new()),
                expected: Mutex::new(None),
                installed: rill_rt::sync::Notify::new(),
                pins: Mutex::new((0, std::collections::BTreeMap::new())),
                installs: AtomicUsize::new(0),
                replacing: Mutex::new(()),
            }),
        })
    }

    /// True when nothing was ever stored for this group (no entry, no purge, no vote).
    pub fn is_pristine(&self) -> crate::Result<bool> {
        let m = lock(&self.shared.meta);
        if m.last_log_id.is_some() || m.last_purged.is_some() {
            return Ok(false);
        }
        drop(m);
        let vote = self.shared.engine.get(Keyspace::RaftMeta, &keys::group_tag(self.shared.group, keys::VOTE))?;
        Ok(vote.is_none())
    }

    /// The group this log belongs to.
    pub fn group(&self) -> GroupId {
        self.shared.group
    }

    /// First position still stored (everything before it was purged).
    pub fn start_position(&self) -> u64 {
        lock(&self.shared.meta).start_position
    }

    /// Position after the last entry (committed or not).
    pub fn end_position(&self) -> u64 {
        lock(&self.shared.meta).end_position
    }

    /// The position after log index `index`: where a replica whose log ends at `index` ends in
    /// positions. `None` when the entry after it is no longer stored (purged).
    pub fn position_after(&self, index: u64) -> crate::Result<Option<u64>> {
        let (last, end) = {
            let meta = lock(&self.shared.meta);
            (meta.last_log_id.map(|l| l.index), meta.end_position)
        };
        if last.is_none_or(|l| index >= l) {
            return Ok(Some(end));
        }
        let g = self.shared.group;
        let next = self.get_entry(index + 1).map_err(|e| crate::Error::Raft { group: g, reason: e.to_string() })?;
        Ok(next.map(|e| e.base))
    }

    /// Registers interest in the entry proposed with tag `proposal`: the receiver yields its
    /// placement once the entry is durable in this node's log. Call before proposing; drop the
    /// receiver (or call [`LogStore::forget_proposal`]) if the proposal fails.
    pub fn watch_proposal(&self, proposal: u64) -> oneshot::Receiver<Placement> {
        let (tx, rx) = oneshot::channel();
        lock(&self.shared.proposals).insert(proposal, tx);
        rx
    }

    /// Drops a registration made by [`LogStore::watch_proposal`].
    pub fn forget_proposal(&self, proposal: u64) {
        lock(&self.shared.proposals).remove(&proposal);
    }

    /// The log index of the entry holding `position`, if that position is stored.
    pub fn index_of_position(&self, position: u64) -> crate::Result<Option<u64>> {
        let g = self.shared.group;
        let end_key = keys::group_u64(g, position.saturating_add(1));
        let found = self.shared.engine.scan_rev(Keyspace::LogIndex, &keys::group_u64(g, 0), &end_key, 1)?;
        let Some((_, v)) = found.into_iter().next() else {
            return Ok(None);
        };
        let index: [u8; 8] = v[..]
            .try_into()
            .map_err(|_| crate::Error::Corrupt { group: g, reason: "bad position index value".into() })?;
        Ok(Some(u64::from_be_bytes(index)))
    }

    /// Up to `max_entries` normal entries (those occupying positions) from log index `from` on,
    /// stopping before log index `until`.
    pub fn read_positioned(&self, from: u64, until: u64, max_entries: usize) -> crate::Result<Vec<PositionedEntry>> {
        let positioned = |e: &StoredEntry| match &e.entry.payload {
            EntryPayload::Normal(p) if p.units > 0 => Some(PositionedEntry {
                index: e.entry.log_id.index,
                base: e.base,
                units: p.units,
                term: e.entry.log_id.leader_id.term,
                body: p.body.clone(),
            }),
            _ => None,
        };
        if let Some(cached) = lock(&self.shared.tail).range(from, until) {
            return Ok(cached.filter_map(positioned).take(max_entries).collect());
        }
        let g = self.shared.group;
        let mut out = Vec::with_capacity(max_entries.min(1024));
        let mut next = from;
        // Entries that occupy no positions (blank, membership, bookkeeping) are skipped without
        // counting, so a run of them never ends a read early.
        while out.len() < max_entries && next < until {
            let chunk = (max_entries - out.len()).max(1);
            let rows = self.shared.engine.scan(
                Keyspace::RaftLog,
                &keys::group_u64(g, next),
                &keys::group_u64(g, until),
                chunk,
            )?;
            let scanned = rows.len();
            for (k, v) in rows {
                let e = codec::decode_entry(v).map_err(|reason| crate::Error::Corrupt { group: g, reason })?;
                let index = keys::suffix_u64(&k).unwrap_or(e.entry.log_id.index);
                next = index.saturating_add(1);
                let term = e.entry.log_id.leader_id.term;
                if let EntryPayload::Normal(p) = e.entry.payload {
                    if p.units > 0 {
                        out.push(PositionedEntry { index, base: e.base, units: p.units, term, body: p.body });
                    }
                }
            }
            if scanned < chunk {
                break;
            }
        }
        Ok(out)
    }

    /// Every stored entry with its position (for replica comparison in tests and oracles).
    pub fn read_all(&self) -> crate::Result<Vec<StoredEntry>> {
        let g = self.shared.group;
        let rows =
            self.shared.engine.scan(Keyspace::RaftLog, &keys::group_start(g), &keys::group_end(g), usize::MAX)?;
        rows.into_iter()
            .map(|(_, v)| codec::decode_entry(v).map_err(|reason| crate::Error::Corrupt { group: g, reason }))
            .collect()
    }

    /// Removes every key of `group` (log, hard state, indexes, snapshots), durably. Used when a
    /// replica is deleted; the caller must have stopped the group. Returns whether there was
    /// anything to remove (so repeated calls write nothing).
    pub fn destroy(engine: &dyn Engine, group: GroupId) -> crate::Result<bool> {
        let (start, end) = (keys::group_start(group), keys::group_end(group));
        let staged = keys::staging(group);
        let (staged_start, staged_end) = (keys::group_start(staged), keys::group_end(staged));
        let mut present = !engine.scan(Keyspace::RaftLog, &staged_start, &staged_end, 1)?.is_empty();
        for ks in Keyspace::ALL {
            present |= !engine.scan(ks, &start, &end, 1)?.is_empty();
        }
        if !present {
            return Ok(false);
        }
        let mut b = WriteBatch::new();
        for ks in Keyspace::ALL {
            b.delete_range(ks, start.to_vec(), end.to_vec());
        }
        b.delete_range(Keyspace::RaftLog, staged_start.to_vec(), staged_end.to_vec());
        engine.write(b, true)?;
        Ok(true)
    }

    /// Keeps every entry from log index `index` on, whatever Raft purges, and deletes what Raft
    /// purged below it. A record partition's owner calls this with the entry holding the log
    /// start offset of its newest snapshot: those entries are still served, and a follower
    /// installing that snapshot receives them with it. The floor only moves up.
    pub fn retain_from(&self, index: u64) -> crate::Result<()> {
        {
            let mut meta = lock(&self.shared.meta);
            meta.floor = Some(meta.floor.map_or(index, |f| f.max(index)));
        }
        self.discard(false)
    }

    /// How many snapshots this log installed since it opened (tests and oracles).
    pub fn installed_snapshots(&self) -> usize {
        self.shared.installs.load(Ordering::Relaxed)
    }

    /// The floor set by [`LogStore::retain_from`] (or by an installation).
    pub fn retained_from(&self) -> Option<u64> {
        lock(&self.shared.meta).floor
    }

    /// The first log index still stored.
    pub fn first_kept(&self) -> u64 {
        lock(&self.shared.meta).first_kept
    }

    /// The last log index Raft has purged (openraft no longer reads at or below it).
    pub fn last_purged_index(&self) -> Option<u64> {
        lock(&self.shared.meta).last_purged.map(|l| l.index)
    }

    /// Deletes the entries Raft has purged that neither the floor nor an open transfer keeps,
    /// and records the purge point — when anything is deleted, or always with `record` (a purge
    /// by openraft, whose new purge point must be stored). A floor raised without a deletion is
    /// recorded with the next one: a restart with the older, lower floor deletes less, never
    /// more.
    fn discard(&self, record: bool) -> crate::Result<()> {
        let g = self.shared.group;
        let mut meta = lock(&self.shared.meta);
        let Some(last_purged) = meta.last_purged else { return Ok(()) };
        let mut limit = last_purged.index.saturating_add(1);
        if let Some(floor) = meta.floor {
            limit = limit.min(floor);
        }
        if let Some(&pinned) = lock(&self.shared.pins).1.values().min() {
            limit = limit.min(pinned);
        }
        let limit = limit.max(meta.first_kept);
        if limit == meta.first_kept && !record {
            return Ok(());
        }
        let start_position = if limit == meta.first_kept {
            meta.start_position
        } else {
            match self.get_entry(limit).map_err(|e| crate::Error::Raft { group: g, reason: e.to_string() })? {
                Some(e) => e.base,
                None if meta.last_log_id.is_none_or(|l| l.index < limit) => meta.end_position,
                None => meta.start_position,
            }
        };
        let mut b = WriteBatch::new();
        if limit > meta.first_kept {
            b.delete_range(
                Keyspace::RaftLog,
                keys::group_u64(g, meta.first_kept).to_vec(),
                keys::group_u64(g, limit).to_vec(),
            );
            b.delete_range(
                Keyspace::LogIndex,
                keys::group_u64(g, 0).to_vec(),
                keys::group_u64(g, start_position).to_vec(),
            );
        }
        let purged = Purged { log_id: last_purged, start_position, retained_from: meta.floor };
        b.put(Keyspace::RaftMeta, keys::group_tag(g, keys::PURGED).to_vec(), purged.encode());
        self.shared.engine.write(b, false)?;
        if limit > meta.first_kept {
            self.shared.with_tail(|tail| tail.purge(limit - 1));
            meta.first_kept = limit;
            meta.start_position = start_position;
        }
        Ok(())
    }

    /// Keeps the entries from `from` on while the returned pin lives (a snapshot transfer
    /// reading them). Fails when they are deleted already.
    pub fn pin(&self, from: u64) -> crate::Result<Pin> {
        let meta = lock(&self.shared.meta);
        if from < meta.first_kept {
            return Err(crate::Error::Raft {
                group: self.shared.group,
                reason: format!("entries from index {from} on are needed but the log starts at {}", meta.first_kept),
            });
        }
        let mut pins = lock(&self.shared.pins);
        pins.0 += 1;
        let id = pins.0;
        pins.1.insert(id, from);
        Ok(Pin { shared: self.shared.clone(), id })
    }

    /// Up to `max` stored entries, encoded as stored, from log index `from` on and before
    /// `until`.
    pub(crate) fn read_raw(&self, from: u64, until: u64, max: usize) -> crate::Result<Vec<(u64, Bytes)>> {
        let g = self.shared.group;
        let rows =
            self.shared.engine.scan(Keyspace::RaftLog, &keys::group_u64(g, from), &keys::group_u64(g, until), max)?;
        Ok(rows.into_iter().map(|(k, v)| (keys::suffix_u64(&k).unwrap_or(u64::MAX), v)).collect())
    }

    /// Total bytes of the stored entries from `from` up to (not including) `until`.
    pub(crate) fn raw_bytes(&self, from: u64, until: u64) -> crate::Result<u64> {
        let g = self.shared.group;
        Ok(self.shared.engine.value_bytes(Keyspace::RaftLog, &keys::group_u64(g, from), &keys::group_u64(g, until))?)
    }

    /// Forgets whatever an unfinished transfer staged.
    pub fn clear_staging(&self) -> crate::Result<()> {
        let staged = keys::staging(self.shared.group);
        let mut b = WriteBatch::new();
        b.delete_range(Keyspace::RaftLog, keys::group_start(staged).to_vec(), keys::group_end(staged).to_vec());
        Ok(self.shared.engine.write(b, false)?)
    }

    /// Stages received entries (index, encoded as stored) for `LogStore::install`.
    pub(crate) fn stage(&self, entries: &[(u64, Bytes)]) -> crate::Result<()> {
        let staged = keys::staging(self.shared.group);
        let mut b = WriteBatch::new();
        for (index, bytes) in entries {
            b.put(Keyspace::RaftLog, keys::group_u64(staged, *index).to_vec(), bytes.clone());
        }
        Ok(self.shared.engine.write(b, false)?)
    }

    /// Announces a snapshot received in full: a purge up to its last log id is openraft's
    /// purge for installing it (see the module docs).
    pub(crate) fn expect_install(&self, marker: InstallMarker) {
        *lock(&self.shared.expected) = Some(ExpectedInstall { marker });
    }

    /// Forgets an announced snapshot openraft did not install (it was not newer than what this
    /// replica had committed, or came from a deposed leader).
    pub fn forget_expected_install(&self) {
        lock(&self.shared.expected).take();
    }

    /// Gives up an installation the state machine could not do: appends waiting for it go on
    /// (openraft stops the group after a state machine error; nothing was written).
    pub(crate) fn abandon_install(&self) {
        lock(&self.shared.meta).awaiting_install = false;
        lock(&self.shared.expected).take();
        self.shared.installed.notify_waiters();
    }

    /// Installs a received snapshot's log side: persists `snapshot` (the state machine's record,
    /// durably) with an [`InstallMarker`], replaces every entry up to the snapshot's last log id
    /// with the staged ones, and purges the log there. Appends waiting for it go on.
    pub(crate) fn install(&self, marker: InstallMarker, snapshot: WriteBatch) -> crate::Result<()> {
        let g = self.shared.group;
        let replacing = lock(&self.shared.replacing);
        let result = (|| {
            let mut b = snapshot;
            b.put(Keyspace::RaftMeta, keys::group_tag(g, keys::INSTALLING).to_vec(), marker.encode());
            self.shared.engine.write(b, true)?;
            move_staged(&*self.shared.engine, g, &marker)
        })();
        let mut meta = lock(&self.shared.meta);
        if result.is_ok() {
            if meta.last_purged.is_none_or(|l| l.index < marker.last.index) {
                meta.last_purged = Some(marker.last);
            }
            meta.first_kept = marker.first_index.unwrap_or(marker.last.index + 1);
            meta.floor = marker.first_index;
            meta.start_position = marker.start_position;
            if meta.last_log_id.is_none_or(|l| l.index <= marker.last.index) {
                meta.last_log_id = Some(marker.last);
                meta.end_position = marker.end_position;
            }
            self.shared.with_tail(|tail| tail.purge(marker.last.index));
            self.shared.installs.fetch_add(1, Ordering::Relaxed);
        }
        meta.awaiting_install = false;
        drop(meta);
        drop(replacing);
        lock(&self.shared.expected).take();
        self.shared.installed.notify_waiters();
        tracing::info!(group = g, last = %marker.last, entries = marker.entry_count, ok = result.is_ok(), "installed snapshot");
        result
    }

    /// Replaces the body of the stored normal entry at `index`, keeping its log id, its
    /// position `base` and the positions it occupies. A record partition's compaction rewrites
    /// committed entries below its snapshot point this way: no replay reads them, and openraft
    /// reads them only to replicate them, where either body is valid (see `rill-broker`'s
    /// `compaction`). Written unsynced: after a crash the entry holds either body. Returns
    /// [`Rewrite::Gone`], writing nothing, when the entry is no longer there as it was (purged, replaced by
    /// an installation, another position), and [`Rewrite::Held`] while a snapshot transfer
    /// reads it (a [`Pin`]): a stream declares its size and may re-read a chunk, so the entries
    /// it sends must not change under it.
    pub fn rewrite(&self, index: u64, base: u64, body: Bytes) -> crate::Result<Rewrite> {
        let g = self.shared.group;
        let _replacing = lock(&self.shared.replacing);
        let meta = lock(&self.shared.meta);
        if index < meta.first_kept || meta.awaiting_install || meta.last_log_id.is_none_or(|l| l.index < index) {
            return Ok(Rewrite::Gone);
        }
        if lock(&self.shared.pins).1.values().any(|&from| from <= index) {
            return Ok(Rewrite::Held);
        }
        let raft = |e: StorageError| crate::Error::Raft { group: g, reason: e.to_string() };
        let Some(mut stored) = self.get_entry(index).map_err(raft)? else { return Ok(Rewrite::Gone) };
        let EntryPayload::Normal(payload) = &mut stored.entry.payload else { return Ok(Rewrite::Gone) };
        if stored.base != base || stored.entry.log_id.index != index {
            return Ok(Rewrite::Gone);
        }
        payload.body = body;
        let encoded = codec::encode_entry(base, &stored.entry).map_err(|e| raft(write_err(e)))?;
        // Deleted first, in the same batch: the engine then counts the old body as garbage (a
        // put over a live value is not looked up), so the value log gives its space back.
        let key = keys::group_u64(g, index).to_vec();
        let mut b = WriteBatch::new();
        b.delete(Keyspace::RaftLog, key.clone());
        b.put(Keyspace::RaftLog, key, encoded);
        self.shared.engine.write(b, false)?;
        self.shared.with_tail(|tail| tail.replace(&stored));
        drop(meta);
        Ok(Rewrite::Done)
    }

    fn get_entry(&self, index: u64) -> Result<Option<StoredEntry>, StorageError> {
        let v =
            self.shared.engine.get(Keyspace::RaftLog, &keys::group_u64(self.shared.group, index)).map_err(read_err)?;
        v.map(codec::decode_entry).transpose().map_err(read_err)
    }

    fn write(&self, batch: WriteBatch) -> Result<(), StorageError> {
        self.shared.engine.write(batch, false).map_err(write_err)
    }
}

/// Most staged entries moved into the log per write.
const MOVE_BATCH_ENTRIES: usize = 64;

/// The move of an installation (see `LogStore::install`): deletes the log up to the
/// snapshot, copies the staged entries in, records the purge point and drops the marker. Each
/// step may be repeated after a crash: the marker stays until the last one.
fn move_staged(engine: &dyn Engine, g: GroupId, marker: &InstallMarker) -> crate::Result<()> {
    let corrupt = |reason: String| crate::Error::Corrupt { group: g, reason };
    let mut b = WriteBatch::new();
    b.delete_range(
        Keyspace::RaftLog,
        keys::group_u64(g, 0).to_vec(),
        keys::group_u64(g, marker.last.index + 1).to_vec(),
    );
    b.delete_range(
        Keyspace::LogIndex,
        keys::group_u64(g, 0).to_vec(),
        keys::group_u64(g, marker.end_position).to_vec(),
    );
    engine.write(b, false)?;
    let staged = keys::staging(g);
    if let Some(first) = marker.first_index {
        let end = first + marker.entry_count;
        let mut next = first;
        while next < end {
            let rows = engine.scan(
                Keyspace::RaftLog,
                &keys::group_u64(staged, next),
                &keys::group_u64(staged, end),
                MOVE_BATCH_ENTRIES,
            )?;
            if rows.is_empty() {
                return Err(corrupt(format!("staged snapshot entry {next} is missing")));
            }
            let mut b = WriteBatch::new();
            for (k, v) in rows {
                if keys::suffix_u64(&k) != Some(next) {
                    return Err(corrupt(format!("staged snapshot entry {next} is missing")));
                }
                let e = codec::decode_entry(v.clone()).map_err(corrupt)?;
                if e.units() > 0 {
                    b.put(Keyspace::LogIndex, keys::group_u64(g, e.base).to_vec(), next.to_be_bytes().to_vec());
                }
                b.put(Keyspace::RaftLog, keys::group_u64(g, next).to_vec(), v);
                next += 1;
            }
            engine.write(b, false)?;
        }
    }
    let purged =
        Purged { log_id: marker.last, start_position: marker.start_position, retained_from: marker.first_index };
    let mut b = WriteBatch::new();
    b.put(Keyspace::RaftMeta, keys::group_tag(g, keys::PURGED).to_vec(), purged.encode());
    b.delete(Keyspace::RaftMeta, keys::group_tag(g, keys::INSTALLING).to_vec());
    b.delete_range(Keyspace::RaftLog, keys::group_start(staged).to_vec(), keys::group_end(staged).to_vec());
    engine.write(b, false)?;
    Ok(())
}

async fn run_flusher(group: GroupId, syncer: Syncer, mut rx: mpsc::UnboundedReceiver<FlushJob>) {
    while let Some(first) = rx.recv().await {
        let mut jobs = vec![first];
        while let Ok(more) = rx.try_recv() {
            jobs.push(more);
        }
        let result = syncer.sync().await;
        for job in jobs {
            match &result {
                Ok(()) => {
                    if let Some(callback) = job.callback {
                        callback.log_io_completed(Ok(()));
                    }
                    for (tx, placement) in job.proposals {
                        let _ = tx.send(placement);
                    }
                }
                Err(e) => {
                    tracing::error!(group, error = %e, "log flush failed");
                    if let Some(callback) = job.callback {
                        callback.log_io_completed(Err(std::io::Error::other(e.to_string())));
                    }
                }
            }
        }
    }
}

fn index_range(range: &impl RangeBounds<u64>) -> (u64, u64) {
    let start = match range.start_bound() {
        Bound::Included(s) => *s,
        Bound::Excluded(s) => s.saturating_add(1),
        Bound::Unbounded => 0,
    };
    let end = match range.end_bound() {
        Bound::Included(e) => e.saturating_add(1),
        Bound::Excluded(e) => *e,
        Bound::Unbounded => u64::MAX,
    };
    (start, end)
}

impl RaftLogReader<TypeConfig> for LogStore {
    /// The entries of `range` from its start on, as far as they go without a gap: a prefix of
    /// the range, possibly empty — never a later part of it. openraft reads ranges to apply them
    /// (never purged) and to replicate them; a replication stream left over from a leadership
    /// this node has just lost can ask for a range whose start was purged meanwhile (its
    /// snapshot taken as a follower). Sent after the range's previous entry, the rest of the
    /// range would leave a hole in the follower's log (entries numbered wrongly, and the
    /// follower's state machine unable to apply across it); nothing is sent instead, and openraft
    /// treats that as a heartbeat until the stream is closed.
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry>, StorageError> {
        let (start, end) = index_range(&range);
        if let Some(cached) = lock(&self.shared.tail).range(start, end) {
            return Ok(cached.map(|e| e.entry.clone()).collect());
        }
        let g = self.shared.group;
        let rows = self
            .shared
            .engine
            .scan(Keyspace::RaftLog, &keys::group_u64(g, start), &keys::group_u64(g, end), usize::MAX)
            .map_err(read_err)?;
        let mut entries = Vec::with_capacity(rows.len());
        for (_, v) in rows {
            let entry = codec::decode_entry(v).map_err(read_err)?.entry;
            if entry.log_id.index != start + entries.len() as u64 {
                break;
            }
            entries.push(entry);
        }
        Ok(entries)
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = LogStore;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, StorageError> {
        let m = lock(&self.shared.meta);
        Ok(LogState { last_purged_log_id: m.last_purged, last_log_id: m.last_log_id })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote) -> Result<(), StorageError> {
        let err = |e: String| StorageError::from(StorageIOError::write_vote(AnyError::error(e)));
        let mut b = WriteBatch::new();
        b.put(Keyspace::RaftMeta, keys::group_tag(self.shared.group, keys::VOTE).to_vec(), vote.encode());
        self.shared.engine.write(b, false).map_err(|e| err(e.to_string()))?;
        // A vote must be durable before it is answered.
        self.shared.syncer.sync().await.map_err(|e| err(e.to_string()))
    }

    async fn read_vote(&mut self) -> Result<Option<Vote>, StorageError> {
        let err = |e: String| StorageError::from(StorageIOError::read_vote(AnyError::error(e)));
        let v = self
            .shared
            .engine
            .get(Keyspace::RaftMeta, &keys::group_tag(self.shared.group, keys::VOTE))
            .map_err(|e| err(e.to_string()))?;
        v.map(Vote::decode).transpose().map_err(err)
    }

    async fn save_committed(&mut self, committed: Option<LogId>) -> Result<(), StorageError> {
        let mut b = WriteBatch::new();
        let key = keys::group_tag(self.shared.group, keys::COMMITTED).to_vec();
        match committed {
            Some(c) => b.put(Keyspace::RaftMeta, key, c.encode()),
            None => b.delete(Keyspace::RaftMeta, key),
        }
        self.write(b)
    }

    async fn read_committed(&mut self) -> Result<Option<LogId>, StorageError> {
        let v = self
            .shared
            .engine
            .get(Keyspace::RaftMeta, &keys::group_tag(self.shared.group, keys::COMMITTED))
            .map_err(read_err)?;
        v.map(LogId::decode).transpose().map_err(read_err)
    }

    async fn append<I>(&mut self, entries: I, callback: LogFlushed<TypeConfig>) -> Result<(), StorageError>
    where
        I: IntoIterator<Item = Entry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        // After a purge for a snapshot not installed yet, nothing is written above the hole.
        loop {
            let installed = self.shared.installed.notified();
            if !lock(&self.shared.meta).awaiting_install {
                break;
            }
            installed.await;
        }
        let g = self.shared.group;
        let mut batch = WriteBatch::new();
        let mut proposals: Vec<(oneshot::Sender<Placement>, Placement)> = Vec::new();
        {
            let mut meta = lock(&self.shared.meta);
            let mut end = meta.end_position;
            let mut last = meta.last_log_id;
            let mut appended = Vec::new();
            for entry in entries {
                let index = entry.log_id.index;
                let encoded = codec::encode_entry(end, &entry).map_err(write_err)?;
                let base = end;
                batch.put(Keyspace::RaftLog, keys::group_u64(g, index).to_vec(), encoded);
                if let EntryPayload::Normal(p) = &entry.payload {
                    if p.units > 0 {
                        batch.put(Keyspace::LogIndex, keys::group_u64(g, end).to_vec(), index.to_be_bytes().to_vec());
                    }
                    if p.proposal != 0 {
                        if let Some(tx) = lock(&self.shared.proposals).remove(&p.proposal) {
                            proposals.push((tx, Placement { index, base: end }));
                        }
                    }
                    end += u64::from(p.units);
                }
                last = Some(entry.log_id);
                let mut entry = entry;
                if let EntryPayload::Normal(p) = &mut entry.payload {
                    // As stored: the proposal tag is leader-local and not persisted.
                    p.proposal = 0;
                }
                appended.push(StoredEntry { base, entry });
            }
            self.shared.engine.write(batch, false).map_err(write_err)?;
            meta.end_position = end;
            meta.last_log_id = last;
            let tight = self.shared.tail_budget.exhausted();
            self.shared.with_tail(|tail| {
                for e in appended {
                    tail.push(e, tight);
                }
            });
        }
        let callback = if rill_rt::mutation::active(Mutation::AckBeforeSync) {
            // Deliberate bug (simulation only): report the entries durable before the sync.
            callback.log_io_completed(Ok(()));
            for (tx, placement) in proposals.drain(..) {
                let _ = tx.send(placement);
            }
            None
        } else {
            Some(callback)
        };
        self.shared.flush_tx.send(FlushJob { callback, proposals }).map_err(|_| write_err("log flusher stopped"))?;
        Ok(())
    }

    async fn truncate(&mut self, log_id: LogId) -> Result<(), StorageError> {
        if rill_rt::mutation::active(Mutation::SkipTruncate) {
            // Deliberate bug (simulation only): keep the divergent tail and its positions.
            return Ok(());
        }
        let g = self.shared.group;
        let Some(first_removed) = self.get_entry(log_id.index)? else {
            return Ok(());
        };
        let previous = match log_id.index.checked_sub(1) {
            Some(i) => self.get_entry(i)?.map(|e| e.entry.log_id),
            None => None,
        };
        let mut b = WriteBatch::new();
        b.delete_range(Keyspace::RaftLog, keys::group_u64(g, log_id.index).to_vec(), keys::group_end(g).to_vec());
        b.delete_range(
            Keyspace::LogIndex,
            keys::group_u64(g, first_removed.base).to_vec(),
            keys::group_end(g).to_vec(),
        );
        let mut meta = lock(&self.shared.meta);
        self.write(b)?;
        self.shared.with_tail(|tail| tail.truncate(log_id.index));
        meta.end_position = first_removed.base;
        meta.last_log_id = previous.or(meta.last_purged);
        tracing::debug!(group = g, from = log_id.index, "truncated log");
        Ok(())
    }

    async fn purge(&mut self, log_id: LogId) -> Result<(), StorageError> {
        let expected = {
            let mut e = lock(&self.shared.expected);
            if e.is_some_and(|e| e.marker.last == log_id) {
                e.take()
            } else {
                None
            }
        };
        let mut meta = lock(&self.shared.meta);
        if meta.last_purged.is_some_and(|l| l.index >= log_id.index) {
            // An installation moved the log past this point already.
            return Ok(());
        }
        if let Some(expected) = expected {
            // openraft purges for a snapshot its state machine is installing: move the log's
            // positions now (so the entries that follow are numbered right) and let appends
            // wait; the installation writes the log (see `LogStore::install`).
            meta.awaiting_install = true;
            meta.last_purged = Some(log_id);
            if meta.last_log_id.is_none_or(|l| l.index <= log_id.index) {
                meta.last_log_id = Some(log_id);
                meta.end_position = expected.marker.end_position;
            }
            self.shared.with_tail(|tail| tail.purge(log_id.index));
            return Ok(());
        }
        if meta.last_log_id.is_none_or(|l| l.index < log_id.index) {
            let end = match self.get_entry(log_id.index)? {
                Some(e) => e.end(),
                None => meta.end_position,
            };
            meta.last_log_id = Some(log_id);
            meta.end_position = end;
        }
        meta.last_purged = Some(log_id);
        drop(meta);
        self.discard(true).map_err(write_err)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::test_entries;

    fn entry(index: u64, body_len: usize) -> StoredEntry {
        StoredEntry { base: index * 10, entry: test_entries::normal(index, body_len) }
    }

    fn indexes(c: &TailCache, start: u64, end: u64) -> Option<Vec<u64>> {
        c.range(start, end).map(|it| it.map(|e| e.entry.log_id.index).collect())
    }

    #[tokio::test]
    async fn a_range_whose_start_was_purged_reads_as_nothing_not_as_its_rest() {
        use openraft::CommittedLeaderId;
        use rill_storage::MemEngine;

        let g = 3;
        let engine = MemEngine::new();
        let mut b = WriteBatch::new();
        for i in 1..=10u64 {
            let e = test_entries::normal(i, 8);
            b.put(Keyspace::RaftLog, keys::group_u64(g, i).to_vec(), codec::encode_entry(i, &e).unwrap());
            b.put(Keyspace::LogIndex, keys::group_u64(g, i).to_vec(), i.to_be_bytes().to_vec());
        }
        engine.write(b, true).unwrap();
        let engine: Arc<dyn Engine> = Arc::new(engine);
        let mut log = LogStore::open(g, engine.clone(), Syncer::start(engine), TailBudget::new(1 << 20)).unwrap();
        let read = |log: &mut LogStore, start: u64, end: u64| {
            let mut log = log.clone();
            async move {
                log.try_get_log_entries(start..end).await.unwrap().iter().map(|e| e.log_id.index).collect::<Vec<_>>()
            }
        };
        assert_eq!(read(&mut log, 3, 8).await, vec![3, 4, 5, 6, 7]);
        log.purge(openraft::LogId::new(CommittedLeaderId::new(1, 1), 5)).await.unwrap();
        // A replication stream of a lost leadership asking for 3..8 after the purge: sending
        // 6 and 7 after entry 2 would leave a hole in the follower's log.
        assert_eq!(read(&mut log, 3, 8).await, Vec::<u64>::new());
        assert_eq!(read(&mut log, 6, 8).await, vec![6, 7]);
    }

    #[test]
    fn serves_ranges_it_holds_and_defers_below_its_first_entry() {
        let mut c = TailCache::default();
        assert_eq!(indexes(&c, 1, 5), None, "empty: storage answers");
        for i in 3..=6 {
            c.push(entry(i, 10), false);
        }
        assert_eq!(indexes(&c, 3, 7), Some(vec![3, 4, 5, 6]));
        assert_eq!(indexes(&c, 4, 6), Some(vec![4, 5]));
        assert_eq!(indexes(&c, 5, u64::MAX), Some(vec![5, 6]));
        assert_eq!(indexes(&c, 9, 12), Some(vec![]), "past the end: nothing, as in storage");
        assert_eq!(indexes(&c, 2, 5), None, "below the first cached entry: storage answers");
    }

    #[test]
    fn truncate_purge_and_gaps_keep_it_a_mirror_of_the_stored_tail() {
        let mut c = TailCache::default();
        for i in 1..=5 {
            c.push(entry(i, 10), false);
        }
        c.truncate(4);
        assert_eq!(indexes(&c, 1, 10), Some(vec![1, 2, 3]));
        c.push(entry(4, 10), false);
        assert_eq!(indexes(&c, 1, 10), Some(vec![1, 2, 3, 4]));
        c.purge(2);
        assert_eq!(indexes(&c, 1, 10), None);
        assert_eq!(indexes(&c, 3, 10), Some(vec![3, 4]));
        c.push(entry(9, 10), false);
        assert_eq!(indexes(&c, 3, 10), None, "a gap restarts the cache at the new entry");
        assert_eq!(indexes(&c, 9, 10), Some(vec![9]));
        c.truncate(1);
        assert_eq!((c.entries.len(), c.bytes), (0, 0));
    }

    #[test]
    fn bounded_by_bytes_and_entries_but_keeps_the_last_entry() {
        let mut c = TailCache::default();
        for i in 1..=(TAIL_CACHE_ENTRIES as u64 + 10) {
            c.push(entry(i, 10), false);
        }
        assert_eq!(c.entries.len(), TAIL_CACHE_ENTRIES);
        assert_eq!(indexes(&c, 1, 2), None);
        c.push(entry(TAIL_CACHE_ENTRIES as u64 + 11, TAIL_CACHE_BYTES * 2), false);
        assert_eq!(c.entries.len(), 1, "one oversized entry still cached alone");
        assert!(c.bytes > TAIL_CACHE_BYTES);
    }

    #[test]
    fn an_exhausted_node_budget_keeps_only_the_last_entry() {
        let mut c = TailCache::default();
        for i in 1..=3 {
            c.push(entry(i, 10), false);
        }
        c.push(entry(4, 10), true);
        assert_eq!(indexes(&c, 4, 5), Some(vec![4]));
        assert_eq!(indexes(&c, 3, 5), None);

        let budget = TailBudget::new(100);
        budget.account(0, 150);
        assert!(budget.exhausted());
        budget.account(150, 40);
        assert_eq!(budget.used(), 40);
        assert!(!budget.exhausted());
    }
}
