//! Compaction of a record partition's log: on every replica, rewriting the entries below its
//! cleaning point ([`crate::cleaning`]) so that they keep only the newest record per key.
//!
//! ```text
//!  log start                clean_below           min(clean_to, snapshot point)      HW
//!  ├── clean: newest per key ─┼── dirty: keys into the map ──┤── not rewritten ─────────┤
//!  └──────────── rewritten: a record goes when the map holds a newer offset for its key ─┘
//! ```
//!
//! * **What goes.** Below the point a pass compacts to, a record whose key has a newer record
//!   below that point, and a tombstone that is its key's newest record below
//!   `tombstones_before`; and every record of an aborted transaction, which supersedes
//!   nothing (the cleaning point is at most the last stable offset, so every transaction below
//!   it is decided, and the partition's aborted index says which were aborted). Keyless
//!   records of committed data and control batches (transaction markers) always stay. A batch keeps its
//!   offsets whatever it loses (`rill_records::compact`), so offsets never shift, and an entry
//!   keeps its place and positions (`LogStore::rewrite`). An entry a snapshot transfer is
//!   reading is not rewritten (the stream declared its size); the pass ends before it.
//! * **Where.** Only entries below the replica's newest snapshot: a restart re-applies the
//!   entries after the snapshot, and they are as they were appended. Nothing at or above the
//!   high watermark is ever rewritten (the cleaning point is at most the high watermark).
//! * **Replicas agree.** A pass compacts to `min(clean_to, snapshot point)` and its tombstone
//!   horizon to at most that; whatever sequence of such passes a replica runs, its log ends up
//!   as one pass to the final point would leave it (see [`crate::cleaning`]), so replicas that
//!   compacted to the same point hold the same records. The chaos checkers compare replicas by
//!   compacting both to the final point with [`compact_log`].
//! * **Bounded.** The map holds the keys of the *dirty* part only (the part above
//!   `clean_below`, which the previous pass left clean), as 128-bit key hashes — at most
//!   [`MAP_KEYS`] of them: a pass whose dirty part has more keys compacts to where the map
//!   filled, and the next pass goes on from there. One pass runs at a time per node, reading at
//!   most [`BYTES_PER_SECOND`]. It runs in the partition's housekeeping task and never holds a
//!   lock that produce or fetch take, so it never blocks produce.
//! * **Disk.** A rewritten entry is a new value; the old one is garbage the value log's
//!   collector gives back.
//!
//! A replica forgets how far it compacted when it restarts or installs a snapshot; its next
//! pass then maps every key from the log start (same result, more reading).

use std::collections::HashMap;
use std::time::Duration;

use bytes::Bytes;
use rill_raft::log_store::Rewrite;
use rill_raft::NodeId;
use rill_records::compact::{retain, Retained};
use rill_records::{BatchInfo, MAX_DECOMPRESSED_BATCH_BYTES};
use rill_rt::mutation::{self, Mutation};
use rill_rt::sync::Semaphore;

use crate::command;
use crate::error::{PartitionError, Result};
use crate::fetch::Isolation;
use crate::machine::SharedState;
use crate::partition::Partition;
use crate::transactions::{AbortedFilter, AbortedTransaction};

/// Most distinct keys one pass maps (a pass's memory: about 48 bytes per key).
pub const MAP_KEYS: usize = 1 << 20;

/// Most bytes of entries a node's compaction reads per second.
pub const BYTES_PER_SECOND: u64 = 32 << 20;

/// Entries read per storage scan during a pass.
const SCAN_ENTRIES: usize = 32;

/// What a node's compacting partitions share: one pass at a time, at a bounded read rate.
#[derive(Debug)]
pub struct CompactionBudget {
    passes: Semaphore,
    bytes_per_second: u64,
}

impl CompactionBudget {
    /// One pass at a time, reading at most `bytes_per_second`.
    pub fn new(bytes_per_second: u64) -> std::sync::Arc<Self> {
        std::sync::Arc::new(Self { passes: Semaphore::new(1), bytes_per_second: bytes_per_second.max(1) })
    }

    /// Sleeps until `read` bytes since `started` are within the rate.
    async fn pace(&self, read: u64, started: rill_rt::Instant) {
        let due = started + Duration::from_secs_f64(read as f64 / self.bytes_per_second as f64);
        if due > rill_rt::now() {
            rill_rt::sleep_until(due).await;
        }
    }
}

impl Default for CompactionBudget {
    fn default() -> Self {
        Self { passes: Semaphore::new(1), bytes_per_second: BYTES_PER_SECOND }
    }
}

/// How far this replica has compacted (in memory: a restart starts again from the log start).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Progress {
    /// Every entry below it is compacted to it: no two records below it share a key.
    pub clean_below: u64,
    /// Tombstones below it that were their key's newest record are gone.
    pub tombstones_below: u64,
    /// Bytes of the entries from the log start to `clean_below` after the last pass (the
    /// leader compares new bytes with this before proposing a new cleaning point).
    pub clean_bytes: u64,
    /// The log's installed-snapshot count the progress belongs to.
    installs: usize,
}

/// The newest offset of each key hash in a part of the log.
#[derive(Debug, Default)]
pub struct KeyMap {
    newest: HashMap<u128, u64>,
}

impl KeyMap {
    /// The hash a key is mapped by: 128 bits, so that two keys sharing one (and the older's
    /// record wrongly going) is as unlikely as with Kafka's MD5-keyed map.
    pub fn hash(key: &[u8]) -> u128 {
        xxhash_rust::xxh3::xxh3_128(key)
    }

    /// Notes that `key` has a record at `offset` (offsets arrive in increasing order).
    pub fn insert(&mut self, key: &[u8], offset: u64) {
        self.newest.insert(Self::hash(key), offset);
    }

    /// Keys mapped.
    pub fn len(&self) -> usize {
        self.newest.len()
    }

    /// True when no key is mapped.
    pub fn is_empty(&self) -> bool {
        self.newest.is_empty()
    }

    /// Adds the keyed records below `until` and from `from` on of an append entry at `base`;
    /// records of `aborted` transactions supersede nothing and are left out.
    fn add_entry(
        &mut self,
        body: &Bytes,
        base: u64,
        (from, until): (u64, u64),
        aborted: &AbortedFilter,
    ) -> std::result::Result<(), String> {
        let mut batch_base = base;
        for data in command::decode_append(body.clone())? {
            let info = BatchInfo::parse_stored(&data).map_err(|e| format!("stored batch at {batch_base}: {e}"))?;
            let span = info.span();
            let aborted_batch = info.is_transactional() && aborted.is_aborted(info.producer_id, batch_base);
            if !info.is_control() && !aborted_batch && batch_base + span > from && batch_base < until {
                let batch = rill_records::decode(&data, MAX_DECOMPRESSED_BATCH_BYTES)
                    .map_err(|e| format!("stored batch at {batch_base}: {e}"))?;
                for r in batch.records {
                    let offset = batch_base + u64::try_from(r.offset_delta).unwrap_or(0);
                    if let (Some(key), true) = (&r.key, (from..until).contains(&offset)) {
                        self.insert(key, offset);
                    }
                }
            }
            batch_base += span;
        }
        Ok(())
    }
}

/// Compacts one append entry at `base` to `clean_to`, `map` holding the newest offset of every
/// key that has a record in `[map's start, clean_to)`: a record goes when the map holds a newer
/// offset for its key, or when it is a tombstone below `tombstones_before` that the map does not
/// supersede, or when it belongs to one of the `aborted` transactions. Returns the entry's new
/// body, or `None` when nothing in it goes.
pub fn compact_entry(
    body: &Bytes,
    base: u64,
    map: &KeyMap,
    (clean_to, tombstones_before): (u64, u64),
    aborted: &AbortedFilter,
) -> std::result::Result<Option<Bytes>, String> {
    let Some(append_time) = command::append_time(body) else { return Ok(None) };
    let batches = command::decode_append(body.clone())?;
    let mut out = Vec::with_capacity(batches.len());
    let mut changed = false;
    let mut batch_base = base;
    for data in batches {
        let info = BatchInfo::parse_stored(&data).map_err(|e| format!("stored batch at {batch_base}: {e}"))?;
        let span = info.span();
        if batch_base >= clean_to {
            out.push(data);
            batch_base += span;
            continue;
        }
        let aborted_batch = info.is_transactional() && aborted.is_aborted(info.producer_id, batch_base);
        let keep = |r: &rill_records::compact::RecordView<'_>| {
            let offset = batch_base + u64::try_from(r.offset_delta).unwrap_or(0);
            if aborted_batch {
                return false;
            }
            let Some(key) = r.key else { return true };
            if offset >= clean_to {
                return true;
            }
            match map.newest.get(&KeyMap::hash(key)) {
                Some(&newest) if newest > offset => false,
                _ => !(r.is_tombstone && offset < tombstones_before),
            }
        };
        match retain(&data, MAX_DECOMPRESSED_BATCH_BYTES, keep)
            .map_err(|e| format!("stored batch at {batch_base}: {e}"))?
        {
            Retained::Unchanged => out.push(data),
            Retained::Rewritten(b) => {
                changed = true;
                out.push(b);
            }
        }
        batch_base += span;
    }
    Ok(changed.then(|| command::encode_append(append_time, &out)))
}

/// Compacts a whole log (its append entries as `(base, body)`, in order) to `clean_to` and
/// `tombstones_before` in one go: what every replica's log converges to. Used by checkers to
/// compare replicas that compacted to different points. The aborted transactions are those the
/// log's own markers decide, found by applying the log to a fresh state machine.
pub fn compact_log(
    entries: &[(u64, Bytes)],
    clean_to: u64,
    tombstones_before: u64,
) -> std::result::Result<Vec<Bytes>, String> {
    let aborted = AbortedFilter::new(&aborted_in(entries, clean_to)?);
    let mut map = KeyMap::default();
    for (base, body) in entries {
        if command::append_time(body).is_some() {
            map.add_entry(body, *base, (0, clean_to), &aborted)?;
        }
    }
    let point = (clean_to, tombstones_before.min(clean_to));
    entries
        .iter()
        .map(|(base, body)| Ok(compact_entry(body, *base, &map, point, &aborted)?.unwrap_or(body.clone())))
        .collect()
}

/// The aborted transactions overlapping `[0, until)` that applying `entries` records.
fn aborted_in(entries: &[(u64, Bytes)], until: u64) -> std::result::Result<Vec<AbortedTransaction>, String> {
    use rill_raft::GroupStateMachine;
    let shared = SharedState::new();
    let mut sm = shared.state_machine();
    for (base, body) in entries {
        let mut units = 0u64;
        if command::append_time(body).is_some() {
            for data in command::decode_append(body.clone())? {
                units += BatchInfo::parse_stored(&data).map_err(|e| e.to_string())?.span();
            }
        }
        let payload =
            rill_raft::Payload { units: u32::try_from(units).unwrap_or(u32::MAX), body: body.clone(), proposal: 0 };
        sm.apply(&rill_raft::types::LogId::default(), *base, &payload);
    }
    let found = shared.transactions.lock().unwrap_or_else(|p| p.into_inner()).aborted_overlapping(0, until);
    Ok(found)
}

impl Partition {
    /// The offset below which every replica of the group holds every entry (the leader's view
    /// of its followers' logs; 0 while one is unknown). A tombstone may go only below it: a
    /// replica that held a deleted key's older record but not yet its tombstone would otherwise
    /// receive the tombstone's entry compacted, without the tombstone, and keep the old value.
    /// A follower the leader's log has been purged past gets a snapshot instead, which replaces
    /// its whole log, so it sets no bound.
    fn held_by_every_replica(&self) -> Result<u64> {
        let storage = |e: rill_raft::Error| PartitionError::Storage(e.to_string());
        let nodes: Vec<NodeId> =
            self.raft.metrics().borrow().membership_config.membership().nodes().map(|(id, _)| *id).collect();
        let matched = self.isr.borrow().matched.clone();
        let purged = self.log.last_purged_index();
        let mut held = self.log.end_position();
        for n in nodes.into_iter().filter(|n| *n != self.node_id) {
            let Some(&m) = matched.get(&n) else { return Ok(0) };
            if purged.is_some_and(|p| m < p) {
                continue;
            }
            if let Some(p) = self.log.position_after(m).map_err(storage)? {
                held = held.min(p);
            }
        }
        Ok(held)
    }

    /// The cleaning point this replica has applied: `(clean_to, tombstones_before)`.
    pub fn cleaning_point(&self) -> (u64, u64) {
        let c = self.cleaning.lock().unwrap_or_else(|p| p.into_inner());
        (c.clean_to(), c.tombstones_before())
    }

    /// Runs one compaction pass if this replica has anything to compact: entries below
    /// `min(clean_to, snapshot point)` that the last pass did not reach. Returns whether a pass
    /// ran.
    pub(crate) async fn compact_once(&self, budget: &CompactionBudget, progress: &mut Progress) -> Result<bool> {
        let installs = self.log.installed_snapshots();
        if progress.installs != installs {
            *progress = Progress { installs, ..Progress::default() };
        }
        let (clean_to, tombstones_before) = self.cleaning_point();
        let covered = self.sm.snapshot_position().unwrap_or(0);
        let mut to = clean_to.min(covered);
        if mutation::active(Mutation::CompactAboveHw) {
            // Deliberate bug (simulation only): compact everything stored, committed or not.
            to = self.log.end_position();
        }
        if to <= progress.clean_below && tombstones_before.min(to) <= progress.tombstones_below {
            return Ok(false);
        }
        let Ok(_pass) = budget.passes.acquire().await else { return Ok(false) };
        let started = rill_rt::now();
        let storage = |e: rill_raft::Error| PartitionError::Storage(e.to_string());
        let start = self.log_start_offset();
        // Every transaction below `to` is decided (the cleaning point is at most the last stable
        // offset); the aborted ones' records go and supersede nothing.
        let aborted = AbortedFilter::new(
            &self.transactions.lock().unwrap_or_else(|p| p.into_inner()).aborted_overlapping(start, to),
        );
        // 1. The newest offset of every key in the dirty part, up to where the map fills.
        let dirty_from = progress.clean_below.max(start);
        let mut map = KeyMap::default();
        let mut read = 0u64;
        if let Some(mut index) = self.log.index_of_position(dirty_from).map_err(storage)? {
            'map: loop {
                let entries = self.log.read_positioned(index, u64::MAX, SCAN_ENTRIES).map_err(storage)?;
                if entries.is_empty() {
                    break;
                }
                for e in &entries {
                    if e.base >= to {
                        break 'map;
                    }
                    if map.len() >= MAP_KEYS && e.base > dirty_from {
                        to = e.base;
                        break 'map;
                    }
                    map.add_entry(&e.body, e.base, (dirty_from, to), &aborted).map_err(PartitionError::Storage)?;
                    read += e.body.len() as u64;
                    index = e.index + 1;
                }
                budget.pace(read, started).await;
            }
        }
        // 2. Rewrite every entry from the log start up to `to`. One that a snapshot transfer
        //    is reading stays as it is, and the pass ends there: everything below it is clean.
        let tombstones = tombstones_before.min(to);
        let (mut rewritten, mut clean_bytes, mut done_to) = (0usize, 0u64, to);
        if let Some(mut index) = self.log.index_of_position(start).map_err(storage)? {
            'rewrite: loop {
                let entries = self.log.read_positioned(index, u64::MAX, SCAN_ENTRIES).map_err(storage)?;
                if entries.is_empty() {
                    break;
                }
                for e in entries {
                    if e.base >= to {
                        break 'rewrite;
                    }
                    index = e.index + 1;
                    read += e.body.len() as u64;
                    let body = compact_entry(&e.body, e.base, &map, (to, tombstones), &aborted)
                        .map_err(PartitionError::Storage)?;
                    match body {
                        Some(body) => {
                            let len = body.len() as u64;
                            match self.log.rewrite(e.index, e.base, body).map_err(storage)? {
                                Rewrite::Done => rewritten += 1,
                                Rewrite::Gone => {}
                                Rewrite::Held => {
                                    done_to = e.base;
                                    break 'rewrite;
                                }
                            }
                            clean_bytes += len;
                        }
                        None => clean_bytes += e.body.len() as u64,
                    }
                }
                budget.pace(read, started).await;
            }
        }
        tracing::debug!(group = self.group, to = done_to, tombstones, keys = map.len(), rewritten, "compacted");
        let tombstones_below = tombstones.min(done_to);
        *progress = Progress { clean_below: done_to, tombstones_below, clean_bytes, installs };
        Ok(true)
    }

    /// While this replica leads a compacted topic: proposes a new cleaning point when enough
    /// was appended since the last one (as many bytes as the compacted part holds, Kafka's
    /// `min.cleanable.dirty.ratio` of 0.5), or when tombstones became old enough to go (and
    /// every replica holds them: [`Partition::held_by_every_replica`]). The
    /// point is at most the high watermark and before every record younger than
    /// `min.compaction.lag.ms`. Returns the cleaning point afterwards when one was proposed.
    pub(crate) async fn schedule_compaction(
        &self,
        config: &rill_meta::TopicConfig,
        progress: &Progress,
    ) -> Result<Option<u64>> {
        if !config.compacted() || self.leader_term().is_none() {
            return Ok(None);
        }
        let now = rill_rt::wall_clock_ms();
        let lag = i64::try_from(config.min_compaction_lag_ms).unwrap_or(i64::MAX);
        // Nothing of a transaction still open is compacted: the cleaning point stays at or below
        // the last stable offset (apply bounds it there too).
        let clean_to = if lag == 0 {
            self.latest_offset(Isolation::ReadCommitted)?
        } else {
            self.offset_for_time(now.saturating_sub(lag) + 1, Isolation::ReadCommitted)?
        };
        let (current, current_tombstones, dirty_bytes, horizon) = {
            let c = self.cleaning.lock().unwrap_or_else(|p| p.into_inner());
            let dirty = self.index.lock().unwrap_or_else(|p| p.into_inner()).bytes_from(c.clean_to());
            (c.clean_to(), c.tombstones_before(), dirty, c.tombstone_horizon(now, config.delete_retention_ms))
        };
        let tombstones = horizon.min(self.held_by_every_replica()?).max(current_tombstones);
        let dirty_enough = clean_to > current && dirty_bytes.saturating_mul(2) >= progress.clean_bytes;
        if !dirty_enough && tombstones <= current_tombstones {
            return Ok(None);
        }
        let c = command::Compact {
            clean_to: clean_to.max(current),
            tombstones_before: tombstones,
            time_ms: now,
            delete_retention_ms: config.delete_retention_ms,
        };
        let answer = self.propose_bookkeeping(command::encode_compact(&c)).await?;
        Ok(Some(answer))
    }
}

#[cfg(test)]
mod tests {
    use rill_records::{BatchBuilder, Compression, Record};

    use super::*;

    fn batch(records: &[(Option<&'static str>, Option<&'static str>)], compression: Compression) -> Bytes {
        let mut b = BatchBuilder::new(compression);
        for (k, v) in records {
            b.push(Record {
                key: k.map(|k| Bytes::from_static(k.as_bytes())),
                value: v.map(|v| Bytes::from_static(v.as_bytes())),
                ..Record::default()
            })
            .unwrap();
        }
        b.build().unwrap()
    }

    /// The records an entry list holds, as (offset, key, value).
    fn records(entries: &[(u64, Bytes)]) -> Vec<(u64, Option<String>, Option<String>)> {
        let s = |b: Option<Bytes>| b.map(|b| String::from_utf8_lossy(&b).into_owned());
        let mut out = Vec::new();
        for (base, body) in entries {
            let mut batch_base = *base;
            for data in command::decode_append(body.clone()).unwrap() {
                let d = rill_records::decode(&data, 1 << 20).unwrap();
                for r in d.records {
                    out.push((batch_base + r.offset_delta as u64, s(r.key), s(r.value)));
                }
                batch_base += d.info.span();
            }
        }
        out
    }

    fn log() -> Vec<(u64, Bytes)> {
        let a = batch(&[(Some("k1"), Some("a")), (Some("k2"), Some("b")), (None, Some("keyless"))], Compression::None);
        let b = batch(&[(Some("k1"), Some("c")), (Some("k3"), None)], Compression::Lz4);
        let c = batch(&[(Some("k2"), None), (Some("k1"), Some("d"))], Compression::Zstd);
        vec![
            (0, command::encode_append(1, &[a])),
            (3, command::encode_append(2, &[b])),
            (5, command::encode_append(3, &[c])),
        ]
    }

    fn with_bodies(entries: &[(u64, Bytes)], bodies: Vec<Bytes>) -> Vec<(u64, Bytes)> {
        entries.iter().map(|(b, _)| *b).zip(bodies).collect()
    }

    #[test]
    fn compaction_keeps_the_newest_record_per_key_and_every_offset() {
        let entries = log();
        let all = with_bodies(&entries, compact_log(&entries, 7, 0).unwrap());
        let s = |x: &str| Some(x.to_string());
        assert_eq!(
            records(&all),
            vec![(2, None, s("keyless")), (4, s("k3"), None), (5, s("k2"), None), (6, s("k1"), s("d"))],
            "superseded records go, tombstones stay until tombstones_before passes them"
        );
        let gone = with_bodies(&entries, compact_log(&entries, 7, 7).unwrap());
        assert_eq!(records(&gone), vec![(2, None, s("keyless")), (6, s("k1"), s("d"))], "old tombstones go");
        let partial = with_bodies(&entries, compact_log(&entries, 4, 4).unwrap());
        assert_eq!(
            records(&partial),
            vec![
                (1, s("k2"), s("b")),
                (2, None, s("keyless")),
                (3, s("k1"), s("c")),
                (4, s("k3"), None),
                (5, s("k2"), None),
                (6, s("k1"), s("d"))
            ],
            "nothing at or above clean_to goes, and only superseded records below it"
        );
        // Offsets still add up: every entry keeps its span.
        for ((base, old), (_, new)) in entries.iter().zip(&gone) {
            let span = |b: &Bytes| -> u64 {
                command::decode_append(b.clone())
                    .unwrap()
                    .iter()
                    .map(|d| BatchInfo::parse_stored(d).unwrap().span())
                    .sum()
            };
            assert_eq!(span(old), span(new), "entry at {base}");
        }
    }

    #[test]
    fn compacting_in_steps_ends_where_compacting_once_does() {
        let entries = log();
        let once = compact_log(&entries, 7, 5).unwrap();
        // A replica that compacted to 4 first, then (from its compacted log) to 7.
        let first = with_bodies(&entries, compact_log(&entries, 4, 3).unwrap());
        let then = compact_log(&first, 7, 5).unwrap();
        assert_eq!(then, once, "byte for byte");
        // Compacting again changes nothing.
        assert_eq!(compact_log(&with_bodies(&entries, once.clone()), 7, 5).unwrap(), once);
    }

    #[test]
    fn a_map_of_the_dirty_part_alone_gives_the_same_result() {
        let entries = log();
        let first = with_bodies(&entries, compact_log(&entries, 3, 0).unwrap());
        // The clean part (below 3) has no two records of one key; map only [3, 7).
        let mut map = KeyMap::default();
        for (base, body) in &first {
            map.add_entry(body, *base, (3, 7), &AbortedFilter::default()).unwrap();
        }
        let none = AbortedFilter::default();
        let incremental: Vec<Bytes> = first
            .iter()
            .map(|(base, body)| compact_entry(body, *base, &map, (7, 3), &none).unwrap().unwrap_or(body.clone()))
            .collect();
        assert_eq!(incremental, compact_log(&entries, 7, 3).unwrap());
    }

    #[test]
    fn an_aborted_transaction_goes_and_supersedes_nothing() {
        use rill_records::{ControlKind, ControlMarker};
        let txn = |pid: i64, seq: i32, key: &'static str, value: &'static str| {
            let mut b = BatchBuilder::new(Compression::None).producer(pid, 0, seq).transactional(true);
            b.push(Record {
                key: Some(Bytes::from_static(key.as_bytes())),
                value: Some(Bytes::from_static(value.as_bytes())),
                ..Record::default()
            })
            .unwrap();
            b.build().unwrap()
        };
        let marker =
            |pid: i64, kind| ControlMarker { kind, coordinator_epoch: 1, transaction: 0 }.batch(pid, 0, 1).unwrap();
        // 0: k = committed (producer 1); 1: its commit marker; 2: k = aborted (producer 2);
        // 3: its abort marker; 4: k2 = plain.
        let entries = vec![
            (0, command::encode_append(1, &[txn(1, 0, "k", "committed")])),
            (1, command::encode_append(1, &[marker(1, ControlKind::Commit)])),
            (2, command::encode_append(1, &[txn(2, 0, "k", "aborted")])),
            (3, command::encode_append(1, &[marker(2, ControlKind::Abort)])),
            (4, command::encode_append(1, &[batch(&[(Some("k2"), Some("plain"))], Compression::None)])),
        ];
        let compacted = with_bodies(&entries, compact_log(&entries, 5, 0).unwrap());
        let kept: Vec<(u64, Option<String>, Option<String>)> =
            records(&compacted).into_iter().filter(|(_, k, _)| k.as_deref() != Some("")).collect();
        let values: Vec<(u64, String)> =
            kept.iter().filter(|(_, k, _)| k.is_some()).filter_map(|(o, _, v)| v.clone().map(|v| (*o, v))).collect();
        assert!(values.contains(&(0, "committed".to_string())), "the committed value stays: {values:?}");
        assert!(!values.iter().any(|(_, v)| v == "aborted"), "the aborted value goes: {values:?}");
        assert!(values.contains(&(4, "plain".to_string())));
        let markers = compacted
            .iter()
            .flat_map(|(_, body)| command::decode_append(body.clone()).unwrap())
            .filter(|b| BatchInfo::parse_stored(b).unwrap().is_control())
            .count();
        assert_eq!(markers, 2, "markers stay");
    }
}
