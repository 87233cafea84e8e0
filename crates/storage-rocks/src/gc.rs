//! Value log garbage collection: the live values of a sparse segment are copied to the active
//! segment, so the segment can be deleted whatever else the other Raft groups keep.
//!
//! ```text
//!   closed segment, live < ratio × size        active segment
//!   ┌─────────────────────────────┐           ┌───────────────────────┐
//!   │ A1  b  b  b  A2  b  b  b  b │  walk ──► │ … │ relocation record │ ──► RocksDB: A1, A2
//!   └─────────────────────────────┘  (check   └───────────────────────┘     now point here
//!      deleted once nothing points    pointer,
//!      into it (Core::collect_garbage) under the writer lock)
//! ```
//!
//! Every Raft group of a node appends to the one value log, so a segment holds entries of many
//! groups, and a segment is deleted only when no pointer into it is left. Without collection one
//! idle group's entries keep every segment they sit in, and a group whose retention deletes its
//! entries gets no disk back while other groups' entries share its segments.
//!
//! # A pass
//! 1. **Choose.** Under the writer lock: every closed segment behind the persisted head (so
//!    no open replays it, and it can be deleted as soon as it is empty) whose live bytes are
//!    below [`EngineConfig::gc_live_ratio`](crate::EngineConfig::gc_live_ratio) of its file,
//!    least live first (the most space per byte copied), then oldest.
//! 2. **Walk** each one, outside the lock, record by record ([`SegmentWalk`]: one 256 KiB
//!    buffer and one key in memory; values shorter than the buffer pass through it, longer ones
//!    are skipped, none is copied out). For every Raft log put, the key's pointer is looked
//!    up; if it still points exactly at this value (segment, offset, length), the value is read
//!    (checked against the pointer's CRC) into the current relocation batch.
//! 3. **Relocate** each batch (at most [`RELOCATION_BATCH_BYTES`] of values, or one larger
//!    value) under the writer lock: every key's pointer is read again and the value kept only if
//!    the pointer is still the one the walk saw; the kept puts are written as one ordinary
//!    batch — a value log record in the active segment, then its index batch and the new head
//!    in RocksDB (`Core::apply`), then fsynced outside the lock (so a writer's next fsync does
//!    not write it while others wait). The old segment's live count loses the moved values,
//!    the active one gains them.
//! 4. **Delete.** After a full walk nothing points into the segment: every pointer into it was
//!    either moved, or had already changed when it was checked, and no new pointer into a closed
//!    segment can appear. Its count is set to zero (correcting the one over-count the counts
//!    keep, a log put over a live value without a delete), and the existing deletion rule
//!    removes it (`Core::collect_garbage`: fsync, then delete the segments with no live value
//!    behind the persisted head).
//!
//! # Why a relocation never loses or resurrects a value
//! * The check and the write happen under the writer lock, which every write holds from its
//!   append to its index update. A delete, truncation or new put of the key that came before
//!   the relocation made the check fail; one that comes after is after the relocation record
//!   in the log and is applied after it in RocksDB, so it wins as it would have anyway. A
//!   relocation only ever rewrites a key's pointer to a copy of the same bytes.
//! * Crash replay applies the records after the persisted head in log order, which is the
//!   order they were applied in; a relocation record replays as the same puts of the same
//!   values, so the state after every record is the state it had before the crash. A key
//!   deleted after its relocation is deleted again by the later record.
//! * The old segment is deleted only after an fsync that covers the relocation records (and
//!   the deletes) that emptied it, and only when it is behind the persisted head: after a
//!   crash, either RocksDB's persisted state already has the new pointers, or their records are
//!   after the persisted head and are replayed; nothing replays the deleted segment. (An open
//!   checks that every pointer's segment exists, so a mistake here refuses the open rather
//!   than serving partial data.)
//! * A torn relocation record at the tail is cut off like any other: the old pointers stand,
//!   and their segment is still there (it had not been fsynced past, so not deleted).
//!
//! # Bounds
//! With live ratio `r` (default ½, [`crate::DEFAULT_GC_LIVE_RATIO`]):
//! * **Disk.** After a pass, every closed segment behind the persisted head holds at least `r`
//!   of its size in live values, so those segments take at most `live / r` bytes. On top come
//!   the segments from the persisted head's to the active one: about what was written since
//!   the last completed RocksDB flush (one is requested every
//!   [`flush_after_log_bytes`](crate::EngineConfig::flush_after_log_bytes)) plus up to two
//!   segments. With the defaults: 2 × live + about 384 MiB. Between passes, what deletes free
//!   waits for the next pass (every [`gc_interval`](crate::EngineConfig::gc_interval)).
//!   Nothing else pins space: not an idle group, not the metadata group.
//! * **Writes.** A segment is collected when less than `r` of it is live: copying `u < r` of
//!   it frees `1 - u` of it for new writes, so in steady state every byte written by the
//!   engine's users costs at most `1 / (1 - r)` bytes of value log writes in total (2 at ½),
//!   copies of copies included.
//! * **I/O and memory.** The background collector paces itself to
//!   [`gc_bytes_per_second`](crate::EngineConfig::gc_bytes_per_second) (after each MiB read or
//!   written it sleeps until the pass's bytes so far are due at that rate) and holds one
//!   relocation batch and one walk buffer. Writers wait only for one batch's checks,
//!   append and index write.
//! * **Keeping up.** A walk reads about its whole segment (the readahead reads short dead
//!   values anyway), so the paced collector gets through at most `gc_bytes_per_second` of
//!   segments (128 MiB/s by default, above the fastest a node's log has been written). A node whose deletes free space faster than that for long (retention deleting
//!   everything written at a higher rate, with long-lived entries in every segment) builds a
//!   backlog that shrinks once the rate drops; segments that die whole are deleted without a
//!   walk and cost nothing.
//!
//! # Failures
//! An I/O error of a pass (reading a segment, appending, fsyncing) fails the engine like a
//! failed write. A segment whose records or values fail validation is left alone until the next
//! open, with an error logged: its values report `Corruption` when read, as before.

use std::fs::File;
use std::ops::ControlFlow;
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use bytes::Bytes;
use rill_storage::{Error, Keyspace, Result, WriteBatch, WriteOp};

use crate::vlog::{self, SegmentWalk, ValueLog, ValuePointer};
use crate::{io, record, Core, Live};

/// Most value bytes one relocation batch carries (a larger value goes alone): it bounds the
/// collector's memory and how long one batch holds the writer lock (its pointer lookups, one
/// append, one index write). Measured with 16 KiB values on a 2-core machine
/// (`examples/gc_space.rs`, docs/benchmarks.md): 1 MiB batches hold it 1.3 ms at the median and
/// 19 ms at most (when the append rotates the segment and fsyncs); 4 MiB batches 8.4 ms and
/// 60 ms.
pub const RELOCATION_BATCH_BYTES: u64 = 1 << 20;

/// The background collector pauses after about this many bytes of I/O: small enough that the
/// pace is smooth at any rate worth configuring, large enough that the pauses are few.
const PACE_QUANTUM_BYTES: u64 = 1 << 20;

/// The value log's space, and what the engine did to it since it was opened
/// ([`RocksEngine::space`](crate::RocksEngine::space)).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct SpaceStats {
    /// Segment files, the active one included.
    pub segments: u64,
    /// Their total size.
    pub file_bytes: u64,
    /// Raft log values that point into the value log: exact at open and after a pass walked
    /// their segments, otherwise an upper bound (see `Core::apply`).
    pub live_values: u64,
    /// Their bytes (record framing and keys are not counted: `file_bytes` is always larger).
    pub live_bytes: u64,
    /// Values the collector copied to the active segment.
    pub relocated_values: u64,
    /// Their bytes.
    pub relocated_bytes: u64,
    /// Segment files deleted (by the collector or because deletes emptied them).
    pub segments_deleted: u64,
    /// Collection passes run.
    pub gc_passes: u64,
}

/// What one collection pass did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct GcPass {
    /// Segments chosen for collection.
    pub candidates: u64,
    /// Segments walked to their end (so nothing points into them any more).
    pub segments_emptied: u64,
    /// Values copied to the active segment.
    pub relocated_values: u64,
    /// Their bytes.
    pub relocated_bytes: u64,
    /// Bytes read from segments (walks and values).
    pub read_bytes: u64,
    /// Segment files deleted while the pass ran: at its end, or by the flushes of writes in
    /// between (which delete what the pass emptied, or what deletes emptied, first).
    pub segments_deleted: u64,
    /// True when the pass stopped early (the engine is closing).
    pub stopped: bool,
}

/// Paces a pass: told every chunk of I/O, it may pause, or stop the pass.
pub(crate) trait Throttle {
    /// `bytes` more were read or written. `Break` stops the pass.
    fn charge(&mut self, bytes: u64) -> ControlFlow<()>;
}

/// No pacing: [`RocksEngine::run_gc_once`](crate::RocksEngine::run_gc_once).
pub(crate) struct Unpaced;

impl Throttle for Unpaced {
    fn charge(&mut self, _bytes: u64) -> ControlFlow<()> {
        ControlFlow::Continue(())
    }
}

/// A segment chosen for collection.
struct Candidate {
    id: u64,
    file: Arc<File>,
    len: u64,
    live: Live,
}

/// A value on its way to the active segment.
struct Moving {
    key: Vec<u8>,
    /// The pointer the walk saw; the relocation happens only if it is still the key's.
    from: ValuePointer,
    value: Bytes,
}

impl Core {
    /// One collection pass (see the module docs), relocating at most `batch_bytes` of values
    /// per write. Passes never overlap.
    pub(crate) fn gc_pass(&self, throttle: &mut dyn Throttle, batch_bytes: u64) -> Result<GcPass> {
        let _one_pass = self.gc_pass.lock().map_err(|_| Error::Unavailable("collector lock poisoned".into()))?;
        let mut pass = GcPass::default();
        let deleted_before = self.lock_writer()?.counters.segments_deleted;
        let candidates = self.gc_candidates().map_err(|e| self.fail_gc(e))?;
        pass.candidates = candidates.len() as u64;
        for c in &candidates {
            match self.relocate_segment(c, throttle, batch_bytes, &mut pass) {
                Ok(ControlFlow::Continue(())) => {}
                Ok(ControlFlow::Break(())) => {
                    pass.stopped = true;
                    break;
                }
                Err(Error::Corruption(why)) if !self.is_failed() => {
                    tracing::error!(segment = c.id, error = %why, "value log segment is damaged; not collecting it");
                    self.lock_writer()?.gc_skip.insert(c.id);
                }
                Err(e) => return Err(self.fail_gc(e)),
            }
        }
        // The relocation records that emptied segments must be durable before the segments go:
        // each batch was fsynced after it (`sync_relocated`), so the fsync under the lock in
        // `collect_garbage` has little left to do.
        let mut w = self.lock_writer()?;
        if let Some(why) = &w.failed {
            return Err(Error::Unavailable(format!("an earlier storage failure: {why}")));
        }
        if let Err(e) = self.collect_garbage(&mut w) {
            return Err(self.fail(&mut w, e));
        }
        pass.segments_deleted = w.counters.segments_deleted - deleted_before;
        w.counters.gc_passes += 1;
        drop(w);
        if pass.candidates > 0 {
            tracing::info!(
                candidates = pass.candidates,
                emptied = pass.segments_emptied,
                deleted = pass.segments_deleted,
                relocated_values = pass.relocated_values,
                relocated_bytes = pass.relocated_bytes,
                read_bytes = pass.read_bytes,
                stopped = pass.stopped,
                "value log collection pass"
            );
        }
        Ok(pass)
    }

    /// The closed segments behind the persisted head below the live ratio, least live first.
    fn gc_candidates(&self) -> Result<Vec<Candidate>> {
        let Some(head) = self.persisted_head()? else {
            return Ok(Vec::new());
        };
        let w = self.lock_writer()?;
        if let Some(why) = &w.failed {
            return Err(Error::Unavailable(format!("an earlier storage failure: {why}")));
        }
        let before = head.segment.min(w.log.active_segment());
        let files = ValueLog::read_files(&self.files)?;
        let mut out = Vec::new();
        for (&id, file) in files.range(..before) {
            let live = w.live.get(&id).copied().unwrap_or_default();
            // A segment without live values needs no walk: `collect_garbage` deletes it.
            if live.values == 0 || w.gc_skip.contains(&id) {
                continue;
            }
            let len = vlog::file_len(file, id)?;
            if (live.bytes as f64) < self.config.gc_live_ratio * len as f64 {
                out.push(Candidate { id, file: file.clone(), len, live });
            }
        }
        drop(files);
        drop(w);
        // Least live first: live / len ascending, compared without division.
        out.sort_by(|a, b| {
            (u128::from(a.live.bytes) * u128::from(b.len))
                .cmp(&(u128::from(b.live.bytes) * u128::from(a.len)))
                .then(a.id.cmp(&b.id))
        });
        Ok(out)
    }

    /// Walks segment `c`, relocating its live values batch by batch, and marks it empty once
    /// walked to its end.
    fn relocate_segment(
        &self,
        c: &Candidate,
        throttle: &mut dyn Throttle,
        max_batch_bytes: u64,
        pass: &mut GcPass,
    ) -> Result<ControlFlow<()>> {
        let mut walk = SegmentWalk::new(c.file.clone(), c.id)?;
        let cf = self.cf(Keyspace::RaftLog)?;
        let mut batch = Vec::new();
        let mut batch_bytes = 0u64;
        let mut walked_charged = 0u64;
        while let Some(put) = walk.next_log_put()? {
            let walked = walk.read_bytes() - walked_charged;
            if walked >= PACE_QUANTUM_BYTES {
                walked_charged = walk.read_bytes();
                pass.read_bytes += walked;
                if throttle.charge(walked).is_break() {
                    return Ok(ControlFlow::Break(()));
                }
            }
            // A first look outside the writer lock: most values of a sparse segment are dead,
            // and only live ones are worth reading. The relocation looks again under the lock.
            let Some(raw) = self.db.get_pinned_cf(cf, &put.key).map_err(io)? else {
                continue;
            };
            let ptr = ValuePointer::decode(&raw)?;
            if (ptr.segment, ptr.offset, ptr.len) != (c.id, put.offset, put.len) {
                continue;
            }
            let value = vlog::read_value(&c.file, ptr)?;
            batch_bytes += value.len() as u64;
            pass.read_bytes += value.len() as u64;
            batch.push(Moving { key: put.key, from: ptr, value });
            if batch_bytes >= max_batch_bytes {
                let written = self.relocate_batch(std::mem::take(&mut batch), pass)?;
                self.sync_relocated(written)?;
                if throttle.charge(std::mem::take(&mut batch_bytes) + written).is_break() {
                    return Ok(ControlFlow::Break(()));
                }
            }
        }
        let written = self.relocate_batch(batch, pass)?;
        self.sync_relocated(written)?;
        pass.read_bytes += walk.read_bytes() - walked_charged;
        let charged = throttle.charge(batch_bytes + written + walk.read_bytes() - walked_charged);
        let mut w = self.lock_writer()?;
        if let Some(left) = w.live.get_mut(&c.id) {
            if left.values > 0 {
                // Puts over live log values without a delete (which the counts cannot see).
                tracing::debug!(segment = c.id, values = left.values, "value log segment was counted with dead values");
            }
            *left = Live::default();
        }
        drop(w);
        pass.segments_emptied += 1;
        Ok(charged)
    }

    /// Relocates the values of `batch` whose keys still have the pointers the walk saw, as one
    /// write, under the writer lock. Returns the bytes appended to the value log.
    ///
    /// The record is encoded before the lock is taken: usually every pointer is unchanged and it
    /// is appended as it is, so the lock covers the pointer checks, the append and the index
    /// write only.
    fn relocate_batch(&self, batch: Vec<Moving>, pass: &mut GcPass) -> Result<u64> {
        if batch.is_empty() {
            return Ok(0);
        }
        let cf = self.cf(Keyspace::RaftLog)?;
        let mut from = Vec::with_capacity(batch.len());
        let mut write = WriteBatch::new();
        for m in batch {
            from.push(m.from);
            write.put(Keyspace::RaftLog, m.key, m.value);
        }
        let mut encoded = record::encode(&write)?;
        let mut w = self.lock_writer()?;
        if let Some(why) = &w.failed {
            return Err(Error::Unavailable(format!("an earlier storage failure: {why}")));
        }
        let mut kept = Vec::with_capacity(from.len());
        for (op, from) in write.ops().iter().zip(&from) {
            let WriteOp::Put { key, .. } = op else {
                return Err(Error::Corruption("a relocation batch holds only puts".into()));
            };
            // Under the writer lock: no write comes between this check and the append below.
            let current = self.db.get_pinned_cf(cf, key).map_err(io)?;
            kept.push(current.map(|raw| ValuePointer::decode(&raw)).transpose()? == Some(*from));
        }
        let replaced: Vec<ValuePointer> = from.iter().zip(&kept).filter(|(_, k)| **k).map(|(f, _)| *f).collect();
        if replaced.len() < from.len() {
            // A delete or rewrite came first for some: relocate only the others.
            let ops = write.into_ops();
            write = WriteBatch::new();
            for (op, _) in ops.into_iter().zip(&kept).filter(|(_, k)| **k) {
                if let WriteOp::Put { keyspace, key, value } = op {
                    write.put(keyspace, key, value);
                }
            }
            if write.is_empty() {
                return Ok(0);
            }
            encoded = record::encode(&write)?;
        }
        if let Err(e) = self.apply(&mut w, &write, &encoded, &replaced) {
            return Err(self.fail(&mut w, e));
        }
        let bytes: u64 = replaced.iter().map(|p| u64::from(p.len)).sum();
        w.counters.relocated_values += replaced.len() as u64;
        w.counters.relocated_bytes += bytes;
        drop(w);
        pass.relocated_values += replaced.len() as u64;
        pass.relocated_bytes += bytes;
        Ok(encoded.record.len() as u64)
    }

    /// fsyncs the value log after a relocation batch of `written` bytes, outside the writer
    /// lock. Otherwise the next fsync under the lock (a segment rotation, a flush) would write
    /// them while writers wait: measured, 4 MiB batches left unsynced held the lock up to 110 ms.
    fn sync_relocated(&self, written: u64) -> Result<()> {
        if written == 0 {
            return Ok(());
        }
        let target = {
            let w = self.lock_writer()?;
            w.log.sync_target()
        };
        self.sync_segment(target)
    }

    /// True once the engine has failed.
    fn is_failed(&self) -> bool {
        self.lock_writer().map_or(true, |w| w.failed.is_some())
    }

    /// Fails the engine for `e` met by a pass, unless it has failed already.
    fn fail_gc(&self, e: Error) -> Error {
        match self.lock_writer() {
            Ok(mut w) if w.failed.is_none() => self.fail(&mut w, e),
            _ => e,
        }
    }

    /// See [`RocksEngine::space`](crate::RocksEngine::space).
    pub(crate) fn space(&self) -> Result<SpaceStats> {
        let w = self.lock_writer()?;
        let files = ValueLog::read_files(&self.files)?;
        let mut stats = SpaceStats {
            relocated_values: w.counters.relocated_values,
            relocated_bytes: w.counters.relocated_bytes,
            segments_deleted: w.counters.segments_deleted,
            gc_passes: w.counters.gc_passes,
            ..SpaceStats::default()
        };
        for (&id, file) in files.iter() {
            stats.segments += 1;
            stats.file_bytes += vlog::file_len(file, id)?;
        }
        for live in w.live.values() {
            stats.live_values += live.values;
            stats.live_bytes += live.bytes;
        }
        Ok(stats)
    }
}

/// A stop request that sleepers wake up for.
#[derive(Default)]
struct StopSignal {
    stopped: Mutex<bool>,
    wake: Condvar,
}

impl StopSignal {
    fn stop(&self) {
        *self.stopped.lock().unwrap_or_else(|p| p.into_inner()) = true;
        self.wake.notify_all();
    }

    fn is_stopped(&self) -> bool {
        *self.stopped.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Sleeps for `duration` or until stopped; true if stopped.
    fn sleep(&self, duration: Duration) -> bool {
        let stopped = self.stopped.lock().unwrap_or_else(|p| p.into_inner());
        let (stopped, _) =
            self.wake.wait_timeout_while(stopped, duration, |stopped| !*stopped).unwrap_or_else(|p| p.into_inner());
        *stopped
    }
}

/// Paces the background collector: after every [`PACE_QUANTUM_BYTES`] of I/O it sleeps until
/// the bytes charged since the pass began are due at the configured rate, so the time the I/O
/// itself took counts (a pass runs at the rate, not below it). Credit for time spent below the
/// rate is kept for at most [`PACE_CREDIT`], so a slow stretch is never followed by a long
/// burst.
struct Pacer<'a> {
    bytes_per_second: u64,
    /// When the current accounting window began, and the bytes charged since.
    since: rill_rt::Instant,
    charged: u64,
    owed: u64,
    stop: &'a StopSignal,
}

/// How far behind its rate the collector may fall and then catch up at full speed.
const PACE_CREDIT: Duration = Duration::from_secs(1);

impl<'a> Pacer<'a> {
    fn new(bytes_per_second: u64, stop: &'a StopSignal) -> Self {
        Self { bytes_per_second, since: rill_rt::now(), charged: 0, owed: 0, stop }
    }

    /// Starts a pass: nothing before it counts.
    fn begin(&mut self) {
        self.since = rill_rt::now();
        self.charged = 0;
        self.owed = 0;
    }

    /// How long `bytes` take at `bytes_per_second`.
    fn time_for(bytes: u64, bytes_per_second: u64) -> Duration {
        Duration::from_secs_f64(bytes as f64 / bytes_per_second.max(1) as f64)
    }

    /// How long to sleep, `elapsed` into the window, for the bytes charged so far to be on pace.
    fn pause(&mut self, elapsed: Duration) -> Duration {
        let due = Self::time_for(self.charged, self.bytes_per_second);
        if elapsed > due + PACE_CREDIT {
            // Far below the rate (slow I/O, few live values): start a new window rather than
            // owe a burst.
            self.since = rill_rt::now();
            self.charged = 0;
            return Duration::ZERO;
        }
        due.saturating_sub(elapsed)
    }
}

impl Throttle for Pacer<'_> {
    fn charge(&mut self, bytes: u64) -> ControlFlow<()> {
        if self.stop.is_stopped() {
            return ControlFlow::Break(());
        }
        self.charged += bytes;
        self.owed += bytes;
        if self.owed >= PACE_QUANTUM_BYTES {
            self.owed = 0;
            let pause = self.pause(self.since.elapsed());
            if !pause.is_zero() && self.stop.sleep(pause) {
                return ControlFlow::Break(());
            }
        }
        ControlFlow::Continue(())
    }
}

/// The background collector: a thread running a pass every interval until stopped.
///
/// An OS thread of its own, not a task of `rill_rt`: a pass is blocking file I/O, and this
/// engine never runs inside the simulation (which uses `MemEngine`), like RocksDB's own
/// background threads.
pub(crate) struct Worker {
    stop: Arc<StopSignal>,
    thread: Option<JoinHandle<()>>,
}

impl Worker {
    /// Starts the collector of `core`.
    pub(crate) fn start(core: Arc<Core>, interval: Duration, bytes_per_second: u64) -> Result<Self> {
        let stop = Arc::new(StopSignal::default());
        let signal = stop.clone();
        let thread = std::thread::Builder::new()
            .name("rill-vlog-gc".into())
            .spawn(move || {
                let mut pacer = Pacer::new(bytes_per_second, &signal);
                while !signal.sleep(interval) {
                    pacer.begin();
                    if let Err(e) = core.gc_pass(&mut pacer, RELOCATION_BATCH_BYTES) {
                        if core.is_failed() {
                            tracing::error!(error = %e, "value log collector stopping: the engine failed");
                            return;
                        }
                        tracing::warn!(error = %e, "value log collection pass failed");
                    }
                }
            })
            .map_err(|e| Error::Io(format!("starting the value log collector thread: {e}")))?;
        Ok(Self { stop, thread: Some(thread) })
    }

    /// Stops the collector and waits for it: a pass in progress ends after its current batch.
    pub(crate) fn stop(mut self) {
        self.stop.stop();
        if let Some(thread) = self.thread.take() {
            if thread.join().is_err() {
                tracing::error!("value log collector thread panicked");
            }
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use std::collections::BTreeMap;
    use std::path::Path;
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};

    use rill_storage::Engine;

    use super::*;
    use crate::tests::{crash_after, open_dir};
    use crate::{EngineConfig, RocksEngine, VLOG_DIR};

    /// The idle group: a few entries in every segment.
    const A: u64 = 7;
    /// The busy group: forty entries for each of A's, then it deletes almost all of them.
    const B: u64 = 9;
    const VALUE_BYTES: u64 = 1000;
    const TIMEOUT: Duration = Duration::from_secs(60);

    fn key(g: u64, i: u32) -> Vec<u8> {
        let mut k = g.to_be_bytes().to_vec();
        k.extend_from_slice(&i.to_be_bytes());
        k
    }

    /// A value that names its version and is derived from its key, so any read can be checked.
    fn value(key: &[u8], version: u32) -> Vec<u8> {
        let seed = crc32c::crc32c(key) ^ version.wrapping_mul(0x9e37_79b9);
        let mut v = version.to_be_bytes().to_vec();
        v.extend((0..VALUE_BYTES as u32 - 4).map(|j| (seed.wrapping_add(j.wrapping_mul(13)) >> 3) as u8));
        v
    }

    fn version_of(v: &[u8]) -> u32 {
        u32::from_be_bytes([v[0], v[1], v[2], v[3]])
    }

    /// Every Raft log key there should be, with its value's version.
    type Model = BTreeMap<Vec<u8>, u32>;

    /// Writes to the engine (if any) and to the model alike, so a crash test's parent can compute
    /// what its child wrote.
    struct Writes<'a> {
        engine: Option<&'a RocksEngine>,
        model: Model,
    }

    impl Writes<'_> {
        fn write(&self, b: WriteBatch) {
            if let Some(e) = self.engine {
                e.write(b, false).unwrap();
            }
        }

        fn put(&mut self, g: u64, i: u32, version: u32) {
            let mut b = WriteBatch::new();
            b.put(Keyspace::RaftLog, key(g, i), value(&key(g, i), version));
            self.write(b);
            self.model.insert(key(g, i), version);
        }

        /// A rewrite as Rill's log store does it: delete, then put, in one batch.
        fn rewrite(&mut self, g: u64, i: u32, version: u32) {
            let mut b = WriteBatch::new();
            b.delete(Keyspace::RaftLog, key(g, i));
            b.put(Keyspace::RaftLog, key(g, i), value(&key(g, i), version));
            self.write(b);
            self.model.insert(key(g, i), version);
        }

        fn delete(&mut self, g: u64, indexes: std::ops::Range<u32>) {
            let mut b = WriteBatch::new();
            for i in indexes.clone() {
                b.delete(Keyspace::RaftLog, key(g, i));
                self.model.remove(&key(g, i));
            }
            self.write(b);
        }

        fn delete_range(&mut self, g: u64, indexes: std::ops::Range<u32>) {
            let mut b = WriteBatch::new();
            b.delete_range(Keyspace::RaftLog, key(g, indexes.start), key(g, indexes.end));
            self.write(b);
            for i in indexes {
                self.model.remove(&key(g, i));
            }
        }

        /// A writes one entry for every 40 of B's, so each segment holds some of A's; then B
        /// deletes all but its newest 20.
        fn idle_and_busy(&mut self, a_entries: u32) {
            let b_entries = a_entries * 40;
            for step in 0..b_entries {
                self.put(B, step, 0);
                if step % 40 == 0 {
                    self.put(A, step / 40, 0);
                }
            }
            self.delete_range(B, 0..b_entries - 20);
        }

        /// After the collector moved A's entries: delete some (point deletes in one batch),
        /// rewrite some, add one to each group.
        fn after_collection(&mut self, a_entries: u32) {
            self.delete(A, 0..5);
            for i in 5..8 {
                self.rewrite(A, i, 1);
            }
            self.put(A, a_entries, 0);
            self.put(B, a_entries * 40, 0);
        }
    }

    fn model_bytes(model: &Model) -> u64 {
        model.len() as u64 * VALUE_BYTES
    }

    /// Every group's log is exactly the model: the same keys, each with its last value.
    fn must_match(e: &RocksEngine, model: &Model) {
        for g in [A, B, 0, 1, 2] {
            let all = e.scan(Keyspace::RaftLog, &key(g, 0), &key(g, u32::MAX), usize::MAX).unwrap();
            let got: Vec<(Vec<u8>, Vec<u8>)> = all.iter().map(|(k, v)| (k.to_vec(), v.to_vec())).collect();
            let want: Vec<(Vec<u8>, Vec<u8>)> =
                model.range(key(g, 0)..key(g, u32::MAX)).map(|(k, v)| (k.clone(), value(k, *v))).collect();
            assert_eq!(got.len(), want.len(), "group {g}: {} keys, expected {}", got.len(), want.len());
            for ((gk, gv), (wk, wv)) in got.iter().zip(&want) {
                assert_eq!(gk, wk, "group {g}: keys differ");
                assert!(
                    gv == wv,
                    "group {g} key {gk:?}: version {} read, {} written last",
                    version_of(gv),
                    version_of(wv)
                );
            }
            for (k, v) in &want {
                assert_eq!(e.get(Keyspace::RaftLog, k).unwrap().as_deref(), Some(&v[..]));
            }
        }
    }

    fn vlog_file_bytes(dir: &Path) -> u64 {
        std::fs::read_dir(dir.join(VLOG_DIR)).unwrap().map(|f| f.unwrap().metadata().unwrap().len()).sum()
    }

    /// The documented bound after a pass: `live / ratio`, plus what the persisted head is not
    /// yet past (at most `flush_after_log_bytes` and two segments).
    fn space_bound(config: &EngineConfig, live_bytes: u64) -> u64 {
        (live_bytes as f64 / config.gc_live_ratio) as u64 + config.flush_after_log_bytes + 2 * config.segment_bytes
    }

    fn config() -> EngineConfig {
        EngineConfig {
            segment_bytes: 64 << 10,
            flush_after_log_bytes: 64 << 10,
            // The big delete flushes and waits, so every closed segment is behind the persisted
            // head when the pass looks.
            flush_after_released_bytes: 1,
            gc_interval: None,
            ..EngineConfig::default()
        }
    }

    /// One group's deletes free its bytes although another group's entries sit in every segment:
    /// the collector moves those and deletes the segments. Disk use ends within the documented
    /// bound of the live bytes, and every value reads back as written, across a reopen.
    #[test]
    fn an_idle_group_does_not_pin_the_segments_of_a_busy_one() {
        let dir = tempfile::tempdir().unwrap();
        let config = config();
        let e = open_dir(dir.path(), config.clone());
        tracing::info!("--- A writes a little into every segment, B a lot, then B deletes most of it");
        let mut w = Writes { engine: Some(&e), model: Model::new() };
        w.idle_and_busy(50);
        let model = w.model;
        let before = e.space().unwrap();
        assert_eq!(before.live_bytes, model_bytes(&model));
        assert!(
            before.file_bytes > 15 * before.live_bytes,
            "without collection A's entries keep every segment: {before:?}"
        );

        tracing::info!("--- one pass");
        let pass = e.run_gc_once().unwrap();
        let after = e.space().unwrap();
        assert!(pass.relocated_values >= 45 && pass.segments_deleted >= 25, "{pass:?}");
        assert_eq!(after.live_bytes, model_bytes(&model), "live bytes are exact: {after:?}");
        assert_eq!(after.file_bytes, vlog_file_bytes(dir.path()));
        let bound = space_bound(&config, after.live_bytes);
        assert!(
            after.file_bytes <= bound,
            "{} bytes of value log for {} live; bound {bound}",
            after.file_bytes,
            after.live_bytes
        );
        assert!(after.segments <= 4, "{after:?}");
        assert_eq!(after.relocated_values, pass.relocated_values);
        must_match(&e, &model);

        tracing::info!("--- reopen");
        drop(e);
        let e = open_dir(dir.path(), config.clone());
        must_match(&e, &model);
        let reopened = e.space().unwrap();
        assert_eq!(reopened.live_bytes, model_bytes(&model));
        assert!(reopened.file_bytes <= bound, "{reopened:?}");
        // The segment that was active during the first pass is behind the head now, and sparse.
        e.run_gc_once().unwrap();
        assert!(e.space().unwrap().file_bytes <= bound);
        must_match(&e, &model);
    }

    /// The background collector does the same on its own, paced, and stops with the engine.
    #[test]
    fn the_background_collector_frees_space_and_stops_with_the_engine() {
        let dir = tempfile::tempdir().unwrap();
        let config =
            EngineConfig { gc_interval: Some(Duration::from_millis(5)), gc_bytes_per_second: 256 << 20, ..config() };
        let e = open_dir(dir.path(), config.clone());
        let mut w = Writes { engine: Some(&e), model: Model::new() };
        w.idle_and_busy(30);
        let model = w.model;
        #[allow(clippy::disallowed_methods)] // a storage test outside any simulation
        let started = std::time::Instant::now();
        loop {
            let space = e.space().unwrap();
            if space.relocated_values > 0 && space.file_bytes <= space_bound(&config, space.live_bytes) {
                break;
            }
            assert!(started.elapsed() < TIMEOUT, "the collector has not freed the space after {TIMEOUT:?}: {space:?}");
            std::thread::sleep(Duration::from_millis(5));
        }
        must_match(&e, &model);
        drop(e);
        let e = open_dir(dir.path(), EngineConfig { gc_interval: None, ..config });
        must_match(&e, &model);
    }

    /// Writers appending, rewriting (with and without a delete first), deleting keys and ranges
    /// while passes run back to back and a reader checks every value it sees: at the end each
    /// key has its last write and no deleted key is back, before and after a reopen.
    #[test]
    fn relocation_under_concurrent_deletes_and_rewrites_keeps_every_last_write() {
        const WRITERS: u64 = 3;
        const STEPS: u32 = 1500;
        let dir = tempfile::tempdir().unwrap();
        let config = EngineConfig {
            segment_bytes: 8 << 10,
            flush_after_log_bytes: 16 << 10,
            flush_after_index_bytes: 4 << 10,
            flush_after_released_bytes: 8 << 10,
            gc_interval: None,
            ..EngineConfig::default()
        };
        let e = open_dir(dir.path(), config.clone());
        let writers_done = AtomicU64::new(0);
        let relocated = AtomicU64::new(0);
        let stop_reader = AtomicBool::new(false);
        let models: Vec<Model> = std::thread::scope(|scope| {
            let (e, writers_done, relocated, stop_reader) = (&e, &writers_done, &relocated, &stop_reader);
            scope.spawn(move || {
                while writers_done.load(SeqCst) < WRITERS {
                    let pass = e.run_gc_once().unwrap();
                    relocated.fetch_add(pass.relocated_values, SeqCst);
                }
            });
            scope.spawn(move || {
                while !stop_reader.load(SeqCst) && writers_done.load(SeqCst) < WRITERS {
                    for g in 0..WRITERS {
                        for (k, v) in e.scan(Keyspace::RaftLog, &key(g, 0), &key(g, u32::MAX), usize::MAX).unwrap() {
                            assert!(v == value(&k, version_of(&v)), "a read value is not one its key was written with");
                        }
                    }
                }
            });
            let writers: Vec<_> = (0..WRITERS)
                .map(|g| {
                    scope.spawn(move || {
                        // Counts this writer done even if it panics, so the collector stops.
                        struct Done<'a>(&'a AtomicU64);
                        impl Drop for Done<'_> {
                            fn drop(&mut self) {
                                self.0.fetch_add(1, SeqCst);
                            }
                        }
                        let _done = Done(writers_done);
                        let mut w = Writes { engine: Some(e), model: Model::new() };
                        let mut rng = 0x2545_f491_4f6c_dd1d_u64 ^ g;
                        let (mut oldest, mut next) = (0u32, 0u32);
                        for step in 0..STEPS {
                            rng ^= rng << 13;
                            rng ^= rng >> 7;
                            rng ^= rng << 17;
                            let live: Vec<u32> =
                                w.model.keys().map(|k| u32::from_be_bytes([k[8], k[9], k[10], k[11]])).collect();
                            let some = live.get((rng >> 32) as usize % live.len().max(1)).copied();
                            match (rng % 10, some) {
                                (5 | 6, Some(i)) => w.rewrite(g, i, w.model[&key(g, i)] + 1),
                                (7, Some(i)) => w.put(g, i, w.model[&key(g, i)] + 1),
                                (8, Some(i)) => w.delete(g, i..i + 1),
                                (9, _) if next - oldest > 8 => {
                                    let to = oldest + (next - oldest) / 2;
                                    w.delete_range(g, oldest..to);
                                    oldest = to;
                                }
                                _ => {
                                    w.put(g, next, 0);
                                    next += 1;
                                }
                            }
                            if step % 100 == 99 {
                                e.sync().unwrap();
                            }
                        }
                        w.model
                    })
                })
                .collect();
            let models = writers.into_iter().map(|h| h.join().unwrap()).collect();
            stop_reader.store(true, SeqCst);
            models
        });
        let model: Model = models.into_iter().flatten().collect();
        assert!(relocated.load(SeqCst) > 0, "no pass relocated anything while the writers ran");
        must_match(&e, &model);
        e.run_gc_once().unwrap();
        must_match(&e, &model);
        let space = e.space().unwrap();
        assert!(space.live_bytes >= model_bytes(&model), "live bytes are an upper bound: {space:?}");
        drop(e);
        let e = open_dir(dir.path(), config);
        must_match(&e, &model);
        assert_eq!(e.space().unwrap().live_bytes, model_bytes(&model), "exact again after an open");
        e.run_gc_once().unwrap();
        must_match(&e, &model);
    }

    /// The crash tests' engine: small segments, and no flush between the forced one and the
    /// crash, so the relocation records are replayed.
    pub(crate) fn crash_config() -> EngineConfig {
        EngineConfig {
            segment_bytes: 16 << 10,
            flush_after_log_bytes: 8 << 20,
            flush_after_released_bytes: 8 << 20,
            gc_interval: None,
            ..EngineConfig::default()
        }
    }

    const CRASH_A_ENTRIES: u32 = 20;
    /// Relocation batches of the mid-pass crashes: two values each.
    const CRASH_BATCH_BYTES: u64 = 2 * VALUE_BYTES;

    /// Ends the pass (and the process) at its `n`th charge, after `then`.
    struct CrashAt<'a> {
        n: u32,
        then: &'a mut dyn FnMut(),
    }

    impl Throttle for CrashAt<'_> {
        fn charge(&mut self, _bytes: u64) -> ControlFlow<()> {
            self.n -= 1;
            if self.n == 0 {
                (self.then)();
                std::process::exit(0);
            }
            ControlFlow::Continue(())
        }
    }

    /// A crash test's child: the scenario, a flush, then a pass and writes (see the callers).
    pub(crate) fn crash_work(work: &str, e: &RocksEngine) {
        let mut w = Writes { engine: Some(e), model: Model::new() };
        w.idle_and_busy(CRASH_A_ENTRIES);
        {
            let mut writer = e.core.lock_writer().unwrap();
            e.core.flush(&mut writer, true).unwrap();
        }
        match work {
            "gc-after-pass" => {
                let pass = e.run_gc_once().unwrap();
                assert!(pass.segments_deleted > 10 && pass.relocated_values >= CRASH_A_ENTRIES as u64, "{pass:?}");
                let head = e.core.persisted_head().unwrap().unwrap();
                assert!(head < e.core.lock_writer().unwrap().log.end(), "the relocations must not be flushed");
                w.after_collection(CRASH_A_ENTRIES);
            }
            "gc-mid-pass" => {
                let mut then = || w.after_collection(CRASH_A_ENTRIES);
                e.core.gc_pass(&mut CrashAt { n: 4, then: &mut then }, CRASH_BATCH_BYTES).unwrap();
                panic!("the pass ended before its fourth batch");
            }
            "gc-mid-pass-quiet" => {
                e.core.gc_pass(&mut CrashAt { n: 4, then: &mut || {} }, CRASH_BATCH_BYTES).unwrap();
                panic!("the pass ended before its fourth batch");
            }
            other => panic!("unknown crash work {other}"),
        }
    }

    /// What a crash child wrote before it exited.
    fn crash_model(after_collection: bool) -> Model {
        let mut w = Writes { engine: None, model: Model::new() };
        w.idle_and_busy(CRASH_A_ENTRIES);
        if after_collection {
            w.after_collection(CRASH_A_ENTRIES);
        }
        w.model
    }

    /// After the open replays them, every value is the last one written, and a collection pass
    /// and a second open change nothing.
    fn must_recover(dir: &Path, model: &Model) {
        let e = open_dir(dir, crash_config());
        must_match(&e, model);
        assert_eq!(e.space().unwrap().live_bytes, model_bytes(model));
        e.run_gc_once().unwrap();
        must_match(&e, model);
        drop(e);
        let e = open_dir(dir, crash_config());
        must_match(&e, model);
    }

    /// A crash after a pass deleted the segments it emptied, with its relocation records and
    /// later deletes and rewrites of the moved keys replayed from the value log: the later
    /// writes win, nothing deleted comes back, and nothing points into a deleted segment.
    #[test]
    fn a_crash_after_a_pass_replays_relocations_then_what_came_later() {
        let dir = tempfile::tempdir().unwrap();
        crash_after(dir.path(), "gc-after-pass");
        let e = open_dir(dir.path(), crash_config());
        assert!(e.replayed().records > 5, "the relocation records were replayed: {:?}", e.replayed());
        drop(e);
        must_recover(dir.path(), &crash_model(true));
    }

    /// A crash in the middle of a pass (some batches relocated, their segments not yet deleted),
    /// after deletes and rewrites of keys moved and not yet moved.
    #[test]
    fn a_crash_in_the_middle_of_a_pass_keeps_every_last_write() {
        let dir = tempfile::tempdir().unwrap();
        crash_after(dir.path(), "gc-mid-pass");
        must_recover(dir.path(), &crash_model(true));
    }

    /// A crash that tears the last relocation record (it was never synced): the record is cut
    /// off, its values are read from their old segment, which is still there.
    #[test]
    fn a_torn_relocation_record_leaves_the_old_values() {
        let dir = tempfile::tempdir().unwrap();
        crash_after(dir.path(), "gc-mid-pass-quiet");
        let mut names: Vec<_> =
            std::fs::read_dir(dir.path().join(VLOG_DIR)).unwrap().map(|f| f.unwrap().path()).collect();
        names.sort();
        let newest = names.last().unwrap();
        let f = std::fs::OpenOptions::new().write(true).open(newest).unwrap();
        f.set_len(f.metadata().unwrap().len() - 5).unwrap();
        drop(f);
        let e = open_dir(dir.path(), crash_config());
        assert!(e.replayed().torn_bytes > 0);
        drop(e);
        must_recover(dir.path(), &crash_model(false));
    }

    #[test]
    fn the_pacer_keeps_a_pass_at_its_rate() {
        assert_eq!(Pacer::time_for(64 << 20, 64 << 20), Duration::from_secs(1));
        let stop = StopSignal::default();
        let mut pacer = Pacer::new(64 << 20, &stop);
        pacer.charged = 32 << 20;
        // Half a second's bytes after 100 ms: sleep the other 400 ms.
        assert_eq!(pacer.pause(Duration::from_millis(100)), Duration::from_millis(400));
        // After 600 ms (the I/O took longer than the rate allows): no sleep.
        assert_eq!(pacer.pause(Duration::from_millis(600)), Duration::ZERO);
        assert_eq!(pacer.charged, 32 << 20, "within the credit the window goes on");
        // Far behind: a new window, not a burst.
        assert_eq!(pacer.pause(Duration::from_secs(5)), Duration::ZERO);
        assert_eq!(pacer.charged, 0);

        let mut fast = Pacer::new(u64::MAX, &stop);
        assert!(fast.charge(10).is_continue());
        assert!(fast.charge(PACE_QUANTUM_BYTES).is_continue());
        assert_eq!(fast.owed, 0, "a quantum was paid for");
        stop.stop();
        assert!(fast.charge(1).is_break(), "a stopped collector ends its pass");
        assert!(stop.sleep(Duration::from_secs(3600)), "a stopped signal does not sleep");
    }
}
