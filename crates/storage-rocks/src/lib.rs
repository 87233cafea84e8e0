//! [`RocksEngine`]: Rill's production storage engine.
//!
//! ```text
//!   write(batch) ──► value log (vlog/)            RocksDB (index/), WAL off
//!                    one checksummed record ──►   keys; Raft log values as pointers
//!                    per batch, fsync = sync()    into the value log; other values inline
//!                          ▲
//!   collector (gc) ────────┘ copies the live values of sparse segments, then deletes them
//! ```
//!
//! Modules: [`record`] (a batch's encoding as one value log record, and streaming its ops),
//! [`vlog`] (segment files: append, fsync gate, replay, reading values, walking a segment),
//! [`gc`] (the collector: relocation passes, their pacing, the background thread). This file
//! holds the engine itself: the writer, the index, flushes, recovery and segment deletion.
//!
//! One engine per node, one RocksDB column family per [`Keyspace`] (not one per partition:
//! thousands of column families would each carry memtables and files). Every key is prefixed with
//! the big-endian Raft group id by the layers above, so one synced write can carry appends of
//! many partitions — group commit across partitions.
//!
//! # One write per record byte
//! The Raft log holds the record bytes. Stored in RocksDB they were written to its WAL and again
//! to an SST or blob file at flush (and, without blob files, at every compaction level): 2–4× the
//! payload, measured, which made the disk the limit. Here the [`vlog`] is the write-ahead log
//! *and* the home of Raft log values: each batch is appended to it once, and RocksDB receives the
//! same batch with every Raft log value replaced by a 24-byte [`ValuePointer`] into the log
//! (WiscKey's layout). RocksDB's own WAL is off; its memtables hold only keys, pointers and small
//! metadata.
//!
//! # Durability and recovery
//! * [`Engine::sync`] fsyncs the value log, which makes every write that returned before it
//!   durable.
//! * Every batch also records, in RocksDB, the value log position after its record (the *head*).
//!   RocksDB flushes its memtables only when told (they are sized far beyond the flush trigger),
//!   atomically across column families, and only after an fsync of the value log — so the
//!   persisted RocksDB state never runs ahead of the durable value log.
//! * On open, every value log record after the persisted head is applied to RocksDB again
//!   ([`vlog::ValueLog::open`]). A torn tail past the newest segment's synced length is cut off;
//!   damage inside a segment's synced part refuses the open, naming the file and offset. A process crash loses nothing that
//!   `write` returned for; a power failure loses at most the unsynced suffix of the log, which
//!   is a suffix of the write order.
//!
//! # Space
//! A segment file is deleted when no pointer into it is left and the persisted head is past it.
//! Live values and their bytes are counted per segment: exactly at open (a scan of the Raft log
//! keyspace), then kept as an upper bound (deletes subtract the values they remove; a put that
//! replaces a Raft log value without deleting it first leaves the old value counted until the
//! segment is collected or the next open). The collector ([`gc`]) copies the live values of
//! closed segments that are less than [`EngineConfig::gc_live_ratio`] live into the active
//! segment, so the segments can go: disk use stays within `1 / ratio` × the live bytes plus the
//! segments written since the last flush, whatever the other Raft groups keep, for at most
//! `1 / (1 - ratio)` × the bytes written. [`RocksEngine::space`] reports it.

pub mod gc;
pub mod record;
pub mod vlog;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use bytes::Bytes;
use rill_storage::{Engine, Error, KeyValue, Keyspace, Result, WriteBatch, WriteOp};
use rocksdb::{
    ColumnFamily, ColumnFamilyDescriptor, DBCompressionType, Direction, FlushOptions, IteratorMode, Options,
    ReadOptions, ReadTier, WriteOptions, DB, DEFAULT_COLUMN_FAMILY_NAME,
};

pub use crate::gc::{GcPass, SpaceStats};
use crate::vlog::{LogPosition, ReplayStats, SegmentFiles, ValueLog, ValuePointer};

/// Background compaction and flush threads. Two cores are common on small nodes; RocksDB's
/// default of two jobs keeps compaction from starving request handling.
const MAX_BACKGROUND_JOBS: i32 = 2;

/// Memtable size per column family: far above the flush trigger, so RocksDB never flushes on
/// its own (a flush it started could persist pointers to value log bytes not yet fsynced).
const WRITE_BUFFER_BYTES: usize = 512 << 20;

/// Memtable arena block size (RocksDB's default is an eighth of the write buffer).
const ARENA_BLOCK_BYTES: usize = 4 << 20;

/// Key of the value log head in RocksDB's default column family.
const HEAD_KEY: &[u8] = b"rill/vlog-head";

/// Subdirectory holding RocksDB.
const INDEX_DIR: &str = "index";
/// Subdirectory holding the value log.
const VLOG_DIR: &str = "vlog";

/// Tuning of a [`RocksEngine`]; [`EngineConfig::default`] is what nodes run with.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    /// A value log segment is closed once it would grow past this.
    pub segment_bytes: u64,
    /// RocksDB memtables are flushed once this much has been appended to the value log since the
    /// last flush. It bounds what an open must replay after a crash.
    pub flush_after_log_bytes: u64,
    /// ... or once this much has been written to the memtables (an estimate).
    pub flush_after_index_bytes: u64,
    /// ... or, waiting for the flush and then deleting unreferenced segments, once deletes have
    /// released this many bytes of Raft log values (a deleted topic frees its disk promptly).
    pub flush_after_released_bytes: u64,
    /// A closed segment whose live Raft log values are fewer bytes than this fraction of its
    /// file is collected: its live values are copied to the active segment and it is deleted
    /// ([`gc`]). In `[0, 1)`; 0 turns collection off. With ratio `r`, the collected part of the
    /// log takes at most `1/r` × its live bytes, and collection writes at most `1/(1-r)` bytes
    /// for every byte written by the engine's users (see [`gc`] for both bounds).
    pub gc_live_ratio: f64,
    /// The background collector reads and writes at most this many bytes per second.
    pub gc_bytes_per_second: u64,
    /// How often the background collector looks for segments to collect; `None` starts no
    /// collector (then only [`RocksEngine::run_gc_once`] collects).
    pub gc_interval: Option<Duration>,
}

/// Default [`EngineConfig::gc_live_ratio`]. At one half, disk use stays within twice the live
/// bytes (plus the segments not yet flushed past, see [`gc`]) and collection at most doubles
/// what is written to the value log, in the worst case of every segment just under half live;
/// a lower ratio trades more disk for fewer copies, a higher one the reverse, and both costs
/// grow without bound towards 0 and 1.
pub const DEFAULT_GC_LIVE_RATIO: f64 = 0.5;

/// Default [`EngineConfig::gc_bytes_per_second`]: 128 MiB/s. In the worst case (long-lived
/// entries in every segment) every segment is walked once, so a collector slower than the
/// value log's writes falls behind for as long as they last; the fastest a node's log has been
/// written is about 84 MB/s (84k msg/s of 1 KiB, acks=all RF 3, docs/benchmarks.md), and this
/// leaves room above it while taking a quarter of a SATA SSD's sequential reads (a few percent
/// of an NVMe drive's).
pub const DEFAULT_GC_BYTES_PER_SECOND: u64 = 128 << 20;

/// Default [`EngineConfig::gc_interval`]: a pass finding nothing costs a lock and a look at each
/// segment's counts, so looking every 10 s is cheap, and deleted data waits at most that long.
pub const DEFAULT_GC_INTERVAL: Duration = Duration::from_secs(10);

impl Default for EngineConfig {
    fn default() -> Self {
        Self {
            segment_bytes: 128 << 20,
            flush_after_log_bytes: 128 << 20,
            flush_after_index_bytes: 32 << 20,
            flush_after_released_bytes: 256 << 20,
            gc_live_ratio: DEFAULT_GC_LIVE_RATIO,
            gc_bytes_per_second: DEFAULT_GC_BYTES_PER_SECOND,
            gc_interval: Some(DEFAULT_GC_INTERVAL),
        }
    }
}

impl EngineConfig {
    /// The default tuning with value log segments of `segment_bytes`, flushing the index at
    /// least once per segment's worth of log. Deletion and collection wait until the persisted
    /// head is past a segment, so with small segments (a test's few MiB) this keeps all but the
    /// newest one or two within reach; with the default 128 MiB it changes nothing.
    pub fn with_segment_bytes(segment_bytes: u64) -> Self {
        let defaults = Self::default();
        Self { segment_bytes, flush_after_log_bytes: defaults.flush_after_log_bytes.min(segment_bytes), ..defaults }
    }

    /// Refuses settings the engine cannot run with.
    fn validate(&self) -> Result<()> {
        let invalid = |why: String| Err(Error::Unavailable(format!("invalid storage engine config: {why}")));
        if !(0.0..1.0).contains(&self.gc_live_ratio) {
            // At 1 or more every segment always qualifies (headers and keys are not live bytes):
            // the collector would copy forever.
            return invalid(format!("gc_live_ratio {} is not in [0, 1)", self.gc_live_ratio));
        }
        if self.gc_interval.is_some() && self.gc_bytes_per_second == 0 {
            return invalid("gc_bytes_per_second is 0 with a background collector".into());
        }
        if self.segment_bytes == 0 {
            return invalid("segment_bytes is 0".into());
        }
        Ok(())
    }
}

/// What points into one value log segment: Raft log values and their bytes.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Live {
    values: u64,
    bytes: u64,
}

impl Live {
    fn add(&mut self, other: Live) {
        self.values += other.values;
        self.bytes += other.bytes;
    }

    fn sub(&mut self, other: Live) {
        self.values = self.values.saturating_sub(other.values);
        self.bytes = self.bytes.saturating_sub(other.bytes);
    }

    fn of(ptr: ValuePointer) -> Self {
        Self { values: 1, bytes: u64::from(ptr.len) }
    }
}

/// Counters of what the engine did to the value log's space since it was opened.
#[derive(Debug, Default, Clone, Copy)]
struct SpaceCounters {
    relocated_values: u64,
    relocated_bytes: u64,
    segments_deleted: u64,
    gc_passes: u64,
}

/// Column family options of every keyspace: LZ4-compressed SST blocks (keys, pointers, hard
/// state, indexes and snapshots compress well) and memtables that only the engine flushes.
fn keyspace_options() -> Options {
    let mut cf = Options::default();
    cf.set_compression_type(DBCompressionType::Lz4);
    cf.set_write_buffer_size(WRITE_BUFFER_BYTES);
    cf.set_arena_block_size(ARENA_BLOCK_BYTES);
    cf
}

/// The writer's state, behind one lock: value log order is RocksDB's apply order.
struct Writer {
    log: ValueLog,
    /// Raft log values (and their bytes) per segment that may still be referenced: an upper
    /// bound, exact at open and for a segment the collector has walked (see `Core::apply`).
    live: BTreeMap<u64, Live>,
    /// Segments the collector found damaged: left alone until the next open (their values
    /// report `Corruption` when read, as before).
    gc_skip: std::collections::BTreeSet<u64>,
    counters: SpaceCounters,
    log_bytes_since_flush: u64,
    index_bytes_since_flush: u64,
    released_bytes_since_flush: u64,
    /// Set by a failed append, index write or fsync: later writes are refused, since what is
    /// on disk may no longer match what readers were shown.
    failed: Option<String>,
}

/// A RocksDB-indexed, value-log-backed [`Engine`].
///
/// Dropping it stops its collector (waiting for the batch in progress, at most
/// [`gc::RELOCATION_BATCH_BYTES`]), fsyncs the value log and closes RocksDB.
pub struct RocksEngine {
    core: Arc<Core>,
    /// The background collector, if [`EngineConfig::gc_interval`] asked for one.
    gc: Option<gc::Worker>,
}

/// The engine's state, shared by the handle and the collector's thread.
struct Core {
    /// Shared only so that a failed engine can leak it at drop (see `Drop`).
    db: Arc<DB>,
    path: PathBuf,
    config: EngineConfig,
    files: SegmentFiles,
    writer: Mutex<Writer>,
    /// Held for a whole collection pass: passes never overlap.
    gc_pass: Mutex<()>,
    replayed: ReplayStats,
}

impl std::fmt::Debug for RocksEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RocksEngine").field("path", &self.core.path).finish()
    }
}

fn io(e: rocksdb::Error) -> Error {
    Error::Io(e.into_string())
}

fn cf_of<'a>(db: &'a DB, name: &str) -> Result<&'a ColumnFamily> {
    db.cf_handle(name).ok_or_else(|| Error::Corruption(format!("column family {name} missing")))
}

/// Builds the RocksDB batch for one value log record at `at` ending at `end`: the batch's ops
/// with every Raft log value replaced by its pointer, plus the new head. Returns it with the
/// Raft log values it points to.
fn index_batch(
    db: &DB,
    ops: &[WriteOp],
    value_offsets: &[Option<u64>],
    at: LogPosition,
    end: LogPosition,
) -> Result<(rocksdb::WriteBatch, Live)> {
    let mut wb = rocksdb::WriteBatch::default();
    let mut pointers = Live::default();
    for (op, offset) in ops.iter().zip(value_offsets) {
        match op {
            WriteOp::Put { keyspace: Keyspace::RaftLog, key, value } => {
                let offset = offset.ok_or_else(|| Error::Corruption("value log put without a value offset".into()))?;
                let ptr = ValuePointer {
                    segment: at.segment,
                    offset: at.offset + offset,
                    // `record::encode` refused values whose length does not fit in a u32.
                    len: value.len() as u32,
                    crc: crc32c::crc32c(value),
                };
                wb.put_cf(cf_of(db, Keyspace::RaftLog.name())?, key, ptr.encode());
                pointers.add(Live::of(ptr));
            }
            WriteOp::Put { keyspace, key, value } => wb.put_cf(cf_of(db, keyspace.name())?, key, value),
            WriteOp::Delete { keyspace, key } => wb.delete_cf(cf_of(db, keyspace.name())?, key),
            WriteOp::DeleteRange { keyspace, start, end } => {
                // RocksDB rejects inverted ranges; an empty range deletes nothing.
                if start < end {
                    wb.delete_range_cf(cf_of(db, keyspace.name())?, start, end)
                }
            }
        }
    }
    wb.put_cf(cf_of(db, DEFAULT_COLUMN_FAMILY_NAME)?, HEAD_KEY, end.encode());
    Ok((wb, pointers))
}

fn no_wal() -> WriteOptions {
    let mut wo = WriteOptions::default();
    wo.disable_wal(true);
    wo
}

impl RocksEngine {
    /// Opens (creating if needed) the engine in directory `path` with the default tuning,
    /// replaying its value log.
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        Self::open_with(path, EngineConfig::default())
    }

    /// Opens (creating if needed) the engine in directory `path`, replaying its value log.
    pub fn open_with(path: impl AsRef<Path>, config: EngineConfig) -> Result<Self> {
        let core = Arc::new(Core::open(path.as_ref(), config)?);
        let gc = match core.config.gc_interval {
            Some(interval) => Some(gc::Worker::start(core.clone(), interval, core.config.gc_bytes_per_second)?),
            None => None,
        };
        Ok(Self { core, gc })
    }

    /// The directory this engine lives in.
    pub fn path(&self) -> &Path {
        &self.core.path
    }

    /// What the open replayed from the value log.
    pub fn replayed(&self) -> ReplayStats {
        self.core.replayed
    }

    /// How much of the value log's disk space is live, and what collection did since the open.
    pub fn space(&self) -> Result<SpaceStats> {
        self.core.space()
    }

    /// Runs one collection pass now, at full speed (the background collector paces itself):
    /// every closed segment behind the persisted head that is below the live ratio has its live
    /// values copied to the active segment and is deleted. Waits for a pass of the background
    /// collector in progress first. Returns what the pass did; an I/O failure fails the engine,
    /// as a failed write does.
    pub fn run_gc_once(&self) -> Result<GcPass> {
        self.core.gc_pass(&mut gc::Unpaced, gc::RELOCATION_BATCH_BYTES)
    }
}

impl Drop for RocksEngine {
    /// Stops the collector before the engine's state closes (`Core`'s `Drop`).
    fn drop(&mut self) {
        if let Some(worker) = self.gc.take() {
            worker.stop();
        }
    }
}

impl Core {
    fn open(path: &Path, config: EngineConfig) -> Result<Self> {
        config.validate()?;
        let path = path.to_path_buf();
        if path.join("CURRENT").exists() {
            return Err(Error::Unavailable(format!(
                "{} holds RocksDB files of an earlier Rill storage layout (log values inside RocksDB), \
                 which this build does not read; move the data directory away to start empty",
                path.display()
            )));
        }
        let mut opts = Options::default();
        opts.create_if_missing(true);
        opts.create_missing_column_families(true);
        opts.set_max_background_jobs(MAX_BACKGROUND_JOBS);
        opts.set_atomic_flush(true);
        opts.set_write_buffer_size(WRITE_BUFFER_BYTES);
        opts.set_arena_block_size(ARENA_BLOCK_BYTES);
        let cfs = Keyspace::ALL.iter().map(|ks| ColumnFamilyDescriptor::new(ks.name(), keyspace_options()));
        let db = Arc::new(DB::open_cf_descriptors(&opts, path.join(INDEX_DIR), cfs).map_err(io)?);

        let head = db
            .get_pinned_cf(cf_of(&db, DEFAULT_COLUMN_FAMILY_NAME)?, HEAD_KEY)
            .map_err(io)?
            .map(|v| LogPosition::decode(&v))
            .transpose()?;
        let no_wal = no_wal();
        let mut replayed_bytes = 0;
        let (log, replayed) = ValueLog::open(&path.join(VLOG_DIR), config.segment_bytes, head, |at, body| {
            let end = LogPosition { segment: at.segment, offset: at.offset + record::HEADER_BYTES + body.len() as u64 };
            let decoded = record::decode(&body)?;
            let (wb, _) = index_batch(&db, decoded.batch.ops(), &decoded.value_offsets, at, end)?;
            replayed_bytes += end.offset - at.offset;
            db.write_opt(wb, &no_wal).map_err(io)
        })?;
        let files = log.files();
        let live = Self::count_live(&db, &files)?;
        let writer = Writer {
            log,
            live,
            gc_skip: Default::default(),
            counters: SpaceCounters::default(),
            log_bytes_since_flush: replayed_bytes,
            index_bytes_since_flush: 0,
            released_bytes_since_flush: 0,
            failed: None,
        };
        let engine = Self { db, path, config, files, writer: Mutex::new(writer), gc_pass: Mutex::new(()), replayed };
        {
            let mut w = engine.lock_writer()?;
            // Replayed records are in memtables only: persist them before anything new, so a
            // second crash does not replay them again.
            if replayed.records > 0 {
                engine.flush(&mut w, true)?;
            }
            engine.collect_garbage(&mut w)?;
        }
        tracing::info!(
            path = %engine.path.display(),
            replayed_records = replayed.records,
            torn_bytes = replayed.torn_bytes,
            "opened storage engine"
        );
        Ok(engine)
    }

    /// Counts the Raft log values that point into each segment and their bytes, checking that
    /// the segment exists.
    fn count_live(db: &DB, files: &SegmentFiles) -> Result<BTreeMap<u64, Live>> {
        let files = ValueLog::read_files(files)?;
        let mut live = BTreeMap::<u64, Live>::new();
        for item in db.iterator_cf(cf_of(db, Keyspace::RaftLog.name())?, IteratorMode::Start) {
            let (_, v) = item.map_err(io)?;
            let ptr = ValuePointer::decode(&v)?;
            vlog::segment_of(&files, ptr)?;
            live.entry(ptr.segment).or_default().add(Live::of(ptr));
        }
        Ok(live)
    }

    fn lock_writer(&self) -> Result<MutexGuard<'_, Writer>> {
        self.writer.lock().map_err(|_| Error::Unavailable("storage writer lock poisoned".into()))
    }

    fn cf(&self, ks: Keyspace) -> Result<&ColumnFamily> {
        cf_of(&self.db, ks.name())
    }

    fn bounded(start: &[u8], end: &[u8]) -> ReadOptions {
        let mut ro = ReadOptions::default();
        ro.set_iterate_lower_bound(start.to_vec());
        ro.set_iterate_upper_bound(end.to_vec());
        ro
    }

    /// The Raft log values `ops` delete, as they are before the batch, counted per segment
    /// (each key once), with the bytes they hold.
    ///
    /// Counting a key twice would under-count a segment's live values and could delete it while
    /// still referenced, so a batch with several log deletes (which may overlap) goes through a
    /// set of keys; the common single delete (a truncation, a purge, a group's removal) streams,
    /// keeping memory flat however long the range.
    fn released_values(&self, ops: &[WriteOp]) -> Result<(BTreeMap<u64, Live>, u64)> {
        let ranges: Vec<(Vec<u8>, Vec<u8>)> = ops.iter().filter_map(Self::log_delete_range).collect();
        let mut per_segment = BTreeMap::<u64, Live>::new();
        let mut bytes = 0;
        let mut seen = std::collections::BTreeSet::new();
        for (start, end) in &ranges {
            let iter = self.db.iterator_cf_opt(
                self.cf(Keyspace::RaftLog)?,
                Self::bounded(start, end),
                IteratorMode::From(start, Direction::Forward),
            );
            for item in iter {
                let (k, v) = item.map_err(io)?;
                if ranges.len() > 1 && !seen.insert(k) {
                    continue;
                }
                let ptr = ValuePointer::decode(&v)?;
                per_segment.entry(ptr.segment).or_default().add(Live::of(ptr));
                bytes += u64::from(ptr.len);
            }
        }
        Ok((per_segment, bytes))
    }

    /// The key range a Raft log delete op removes (a point delete: `[key, key ‖ 0)`, which
    /// holds `key` alone).
    fn log_delete_range(op: &WriteOp) -> Option<(Vec<u8>, Vec<u8>)> {
        match op {
            WriteOp::Delete { keyspace: Keyspace::RaftLog, key } => {
                let mut end = key.clone();
                end.push(0);
                Some((key.clone(), end))
            }
            WriteOp::DeleteRange { keyspace: Keyspace::RaftLog, start, end } if start < end => {
                Some((start.clone(), end.clone()))
            }
            _ => None,
        }
    }

    /// Appends `batch` to the value log and applies it to RocksDB, under the writer lock.
    ///
    /// `replaced` lists pointers the batch's puts overwrite (the collector's relocations, which
    /// checked them under this lock): they are subtracted from their segments' live counts with
    /// the values deletes remove. Any other put over a live log value leaves the old value
    /// counted (Rill's log store deletes before it rewrites an index), so the counts are upper
    /// bounds until the collector walks the segment.
    fn apply(
        &self,
        w: &mut Writer,
        batch: &WriteBatch,
        encoded: &record::EncodedBatch,
        replaced: &[ValuePointer],
    ) -> Result<()> {
        let (released, released_bytes) = self.released_values(batch.ops())?;
        let at = w.log.append(&encoded.record)?;
        let end = LogPosition { segment: at.segment, offset: at.offset + encoded.record.len() as u64 };
        let (wb, pointers) = index_batch(&self.db, batch.ops(), &encoded.value_offsets, at, end)?;
        let index_bytes = wb.size_in_bytes() as u64;
        self.db.write_opt(wb, &no_wal()).map_err(io)?;

        if pointers.values > 0 {
            w.live.entry(at.segment).or_default().add(pointers);
        }
        for (segment, gone) in &released {
            if let Some(live) = w.live.get_mut(segment) {
                live.sub(*gone);
            }
        }
        for ptr in replaced {
            if let Some(live) = w.live.get_mut(&ptr.segment) {
                live.sub(Live::of(*ptr));
            }
        }
        w.log_bytes_since_flush += encoded.record.len() as u64;
        w.index_bytes_since_flush += index_bytes;
        w.released_bytes_since_flush += released_bytes;
        if w.released_bytes_since_flush >= self.config.flush_after_released_bytes {
            self.flush(w, true)?;
            self.collect_garbage(w)?;
        } else if w.log_bytes_since_flush >= self.config.flush_after_log_bytes
            || w.index_bytes_since_flush >= self.config.flush_after_index_bytes
        {
            // The flush requested by the previous trigger has most likely finished by now;
            // segments it made deletable go first.
            self.collect_garbage(w)?;
            self.flush(w, false)?;
        }
        Ok(())
    }

    /// Flushes every memtable, after making the value log durable so the persisted state never
    /// points past it. The memtables are switched before this returns, under the writer lock, so
    /// the flush holds exactly the writes made so far; `wait` also waits until it is on disk.
    fn flush(&self, w: &mut Writer, wait: bool) -> Result<()> {
        w.log.sync()?;
        let mut fo = FlushOptions::default();
        fo.set_wait(wait);
        let mut cfs = vec![self.cf_default()?];
        for ks in Keyspace::ALL {
            cfs.push(self.cf(ks)?);
        }
        self.db.flush_cfs_opt(&cfs, &fo).map_err(io)?;
        w.log_bytes_since_flush = 0;
        w.index_bytes_since_flush = 0;
        w.released_bytes_since_flush = 0;
        Ok(())
    }

    fn cf_default(&self) -> Result<&ColumnFamily> {
        cf_of(&self.db, DEFAULT_COLUMN_FAMILY_NAME)
    }

    /// The head as RocksDB has it on disk (what an open would replay from), if any flush
    /// happened.
    fn persisted_head(&self) -> Result<Option<LogPosition>> {
        let mut ro = ReadOptions::default();
        ro.set_read_tier(ReadTier::Persisted);
        let persisted = self.db.get_pinned_cf_opt(self.cf_default()?, HEAD_KEY, &ro).map_err(io)?;
        persisted.map(|v| LogPosition::decode(&v)).transpose()
    }

    /// Deletes the segments no pointer refers to any more and that the persisted head is past
    /// (an open never replays them).
    fn collect_garbage(&self, w: &mut Writer) -> Result<()> {
        let Some(head) = self.persisted_head()? else {
            return Ok(());
        };
        let active = w.log.active_segment();
        let dead: Vec<u64> = w
            .log
            .segment_ids()?
            .into_iter()
            .filter(|id| *id < head.segment && *id != active && w.live.get(id).is_none_or(|l| l.values == 0))
            .collect();
        if !dead.is_empty() {
            // The deletes that released these segments may still be only in memtables and in
            // unsynced records; make the records durable first, so that after a power failure
            // the replay repeats them before anything looks for the removed segments.
            w.log.sync()?;
            tracing::debug!(segments = ?dead, "deleting value log segments without live values");
            w.log.remove(&dead)?;
            for id in &dead {
                w.live.remove(id);
                w.gc_skip.remove(id);
            }
            w.counters.segments_deleted += dead.len() as u64;
        }
        Ok(())
    }

    /// Records a failure that leaves disk and memory possibly out of step; later writes are
    /// refused.
    fn fail(&self, w: &mut Writer, e: Error) -> Error {
        tracing::error!(error = %e, "storage engine failed; refusing further writes");
        w.failed = Some(e.to_string());
        e
    }

    fn collect(
        &self,
        ks: Keyspace,
        start: &[u8],
        end: &[u8],
        limit: usize,
        direction: Direction,
    ) -> Result<Vec<KeyValue>> {
        if start >= end || limit == 0 {
            return Ok(Vec::new());
        }
        let cf = self.cf(ks)?;
        let mode = match direction {
            Direction::Forward => IteratorMode::From(start, Direction::Forward),
            Direction::Reverse => IteratorMode::End,
        };
        let files = (ks == Keyspace::RaftLog).then(|| ValueLog::read_files(&self.files)).transpose()?;
        let mut out = Vec::new();
        let mut pointers = Vec::new();
        for item in self.db.iterator_cf_opt(cf, Self::bounded(start, end), mode) {
            let (k, v) = item.map_err(io)?;
            let key = Bytes::from(k.into_vec());
            match &files {
                Some(files) => {
                    let ptr = ValuePointer::decode(&v)?;
                    pointers.push((key, vlog::segment_of(files, ptr)?, ptr));
                }
                None => out.push((key, Bytes::from(v.into_vec()))),
            }
            if out.len() + pointers.len() >= limit {
                break;
            }
        }
        drop(files);
        for (key, file, ptr) in pointers {
            out.push((key, vlog::read_value(&file, ptr)?));
        }
        Ok(out)
    }

    /// The total length of the values in `start..end`: for the Raft log, the lengths its
    /// pointers record (one pass over RocksDB's keys, no value log read).
    fn value_bytes(&self, ks: Keyspace, start: &[u8], end: &[u8]) -> Result<u64> {
        if start >= end {
            return Ok(0);
        }
        let cf = self.cf(ks)?;
        let mut total = 0u64;
        for item in
            self.db.iterator_cf_opt(cf, Self::bounded(start, end), IteratorMode::From(start, Direction::Forward))
        {
            let (_, v) = item.map_err(io)?;
            total += if ks == Keyspace::RaftLog { u64::from(ValuePointer::decode(&v)?.len) } else { v.len() as u64 };
        }
        Ok(total)
    }
}

impl Drop for Core {
    /// Closing RocksDB flushes its memtables (its WAL is off); the value log they point into
    /// must be durable first.
    ///
    /// A failed engine must not flush at all: its value log may have lost writes the memtables
    /// still point to. It leaks RocksDB instead (closing it would flush); the next open replays
    /// the value log from the last good flush.
    fn drop(&mut self) {
        let synced = match self.writer.get_mut() {
            Ok(w) if w.failed.is_none() => w.log.seal().map_err(|e| e.to_string()),
            Ok(w) => Err(w.failed.clone().unwrap_or_default()),
            Err(_) => Err("storage writer lock poisoned".into()),
        };
        if let Err(why) = synced {
            tracing::error!(error = %why, "storage engine failed; closing without flushing RocksDB");
            std::mem::forget(Arc::clone(&self.db));
        }
    }
}

impl Engine for RocksEngine {
    fn write(&self, batch: WriteBatch, sync: bool) -> Result<()> {
        self.core.write(batch, sync)
    }

    fn sync(&self) -> Result<()> {
        self.core.sync()
    }

    fn get(&self, keyspace: Keyspace, key: &[u8]) -> Result<Option<Bytes>> {
        self.core.get(keyspace, key)
    }

    fn scan(&self, keyspace: Keyspace, start: &[u8], end: &[u8], limit: usize) -> Result<Vec<KeyValue>> {
        self.core.scan(keyspace, start, end, limit)
    }

    fn scan_rev(&self, keyspace: Keyspace, start: &[u8], end: &[u8], limit: usize) -> Result<Vec<KeyValue>> {
        self.core.scan_rev(keyspace, start, end, limit)
    }

    /// Raft log values are summed from their pointers, without reading the value log.
    fn value_bytes(&self, keyspace: Keyspace, start: &[u8], end: &[u8]) -> Result<u64> {
        self.core.value_bytes(keyspace, start, end)
    }
}

impl Core {
    fn write(&self, batch: WriteBatch, sync: bool) -> Result<()> {
        let encoded = record::encode(&batch)?;
        let mut w = self.lock_writer()?;
        if let Some(why) = &w.failed {
            return Err(Error::Unavailable(format!("an earlier storage failure: {why}")));
        }
        if !batch.is_empty() {
            if let Err(e) = self.apply(&mut w, &batch, &encoded, &[]) {
                return Err(self.fail(&mut w, e));
            }
        }
        if sync {
            let target = w.log.sync_target();
            drop(w);
            return self.sync_segment(target);
        }
        Ok(())
    }

    fn sync(&self) -> Result<()> {
        let target = {
            let w = self.lock_writer()?;
            if let Some(why) = &w.failed {
                return Err(Error::Unavailable(format!("an earlier storage failure: {why}")));
            }
            w.log.sync_target()
        };
        self.sync_segment(target)
    }

    fn get(&self, keyspace: Keyspace, key: &[u8]) -> Result<Option<Bytes>> {
        if keyspace != Keyspace::RaftLog {
            let v = self.db.get_pinned_cf(self.cf(keyspace)?, key).map_err(io)?;
            return Ok(v.map(|v| Bytes::copy_from_slice(&v)));
        }
        let (file, ptr) = {
            let files = ValueLog::read_files(&self.files)?;
            let Some(v) = self.db.get_pinned_cf(self.cf(keyspace)?, key).map_err(io)? else {
                return Ok(None);
            };
            let ptr = ValuePointer::decode(&v)?;
            (vlog::segment_of(&files, ptr)?, ptr)
        };
        vlog::read_value(&file, ptr).map(Some)
    }

    fn scan(&self, keyspace: Keyspace, start: &[u8], end: &[u8], limit: usize) -> Result<Vec<KeyValue>> {
        self.collect(keyspace, start, end, limit, Direction::Forward)
    }

    fn scan_rev(&self, keyspace: Keyspace, start: &[u8], end: &[u8], limit: usize) -> Result<Vec<KeyValue>> {
        self.collect(keyspace, start, end, limit, Direction::Reverse)
    }
}

impl Core {
    /// fsyncs segment `file`; a failure poisons the engine (after a failed fsync the kernel may
    /// have dropped the dirty pages, so a retry could report success for lost data).
    fn sync_segment(&self, target: vlog::SyncTarget) -> Result<()> {
        target.sync().map_err(|e| match self.lock_writer() {
            Ok(mut w) => self.fail(&mut w, e),
            Err(_) => e,
        })
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use rill_storage::conformance::{self, Harness};

    use super::*;

    struct RocksHarness {
        dir: tempfile::TempDir,
        engine: Option<Arc<RocksEngine>>,
    }

    impl RocksHarness {
        fn new() -> Self {
            let dir = tempfile::tempdir().unwrap();
            let engine = Some(Arc::new(RocksEngine::open(dir.path()).unwrap()));
            Self { dir, engine }
        }
        fn reopen(&mut self) {
            let old = self.engine.take().unwrap();
            assert_eq!(Arc::strong_count(&old), 1, "the suite kept an engine handle across a restart");
            drop(old);
            self.engine = Some(Arc::new(RocksEngine::open(self.dir.path()).unwrap()));
        }
    }

    impl Harness for RocksHarness {
        type E = RocksEngine;
        fn engine(&self) -> Arc<RocksEngine> {
            self.engine.clone().unwrap()
        }
        fn restart(&mut self) {
            self.reopen();
        }
        fn power_fail(&mut self) {
            // A test cannot drop the OS page cache; reopening checks that synced data and batch
            // atomicity survive recovery. The in-memory engine's tests cover the loss itself.
            self.reopen();
        }
    }

    #[test]
    fn conformance_suite() {
        conformance::run_all(RocksHarness::new);
    }

    pub(crate) fn open_dir(dir: &Path, config: EngineConfig) -> Arc<RocksEngine> {
        Arc::new(RocksEngine::open_with(dir, config).unwrap())
    }

    const CRASH_DIR: &str = "RILL_TEST_CRASH_DIR";
    const CRASH_WORK: &str = "RILL_TEST_CRASH_WORK";

    /// Runs `work` (a name [`crash_child`] knows) on the engine in `dir` in a child process that
    /// then exits without closing anything: a process crash (memtables lost, page cache kept).
    pub(crate) fn crash_after(dir: &Path, work: &str) {
        let status = std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--ignored", "--exact", "tests::crash_child", "--test-threads=1"])
            .env(CRASH_DIR, dir)
            .env(CRASH_WORK, work)
            .status()
            .unwrap();
        assert!(status.success(), "crash child `{work}` failed: {status}");
    }

    fn crash_config(work: &str) -> EngineConfig {
        match work {
            "write-50" => EngineConfig { flush_after_log_bytes: 8 << 10, ..EngineConfig::default() },
            gc if gc.starts_with("gc-") => crate::gc::tests::crash_config(),
            _ => EngineConfig::default(),
        }
    }

    /// The child process of the crash tests; does nothing when run on its own.
    #[test]
    #[ignore = "run by the crash tests in a child process"]
    fn crash_child() {
        let (Ok(dir), Ok(work)) = (std::env::var(CRASH_DIR), std::env::var(CRASH_WORK)) else {
            return;
        };
        let e = RocksEngine::open_with(&dir, crash_config(&work)).unwrap();
        match work.as_str() {
            "write-20" => (0..20).for_each(|i| put_log(&e, i)),
            "reopen" => {}
            "write-50" => {
                (0..50).for_each(|i| put_log(&e, i));
                await_flushes(&e);
            }
            "write-5-sync-write-1" => {
                (0..5).for_each(|i| put_log(&e, i));
                e.sync().unwrap();
                put_log(&e, 5);
            }
            gc if gc.starts_with("gc-") => crate::gc::tests::crash_work(gc, &e),
            other => panic!("unknown crash work {other}"),
        }
        std::process::exit(0);
    }

    fn log_key(i: u32) -> Vec<u8> {
        let mut k = vec![0, 0, 0, 0, 0, 0, 0, 1];
        k.extend_from_slice(&i.to_be_bytes());
        k
    }

    fn log_value(i: u32) -> Vec<u8> {
        (0..1000u32).map(|j| (i.wrapping_mul(31).wrapping_add(j) % 251) as u8).collect()
    }

    fn put_log(e: &RocksEngine, i: u32) {
        let mut b = WriteBatch::new();
        b.put(Keyspace::RaftLog, log_key(i), log_value(i));
        b.put(Keyspace::State, log_key(i), i.to_be_bytes().to_vec());
        e.write(b, false).unwrap();
    }

    fn assert_log(e: &RocksEngine, present: std::ops::Range<u32>) {
        for i in present.clone() {
            assert_eq!(e.get(Keyspace::RaftLog, &log_key(i)).unwrap().as_deref(), Some(&log_value(i)[..]), "entry {i}");
            assert_eq!(e.get(Keyspace::State, &log_key(i)).unwrap().as_deref(), Some(&i.to_be_bytes()[..]));
        }
        let all = e.scan(Keyspace::RaftLog, &log_key(0), &log_key(u32::MAX), usize::MAX).unwrap();
        let keys: Vec<Vec<u8>> = all.iter().map(|(k, _)| k.to_vec()).collect();
        assert_eq!(keys, present.clone().map(log_key).collect::<Vec<_>>());
        let rev = e.scan_rev(Keyspace::RaftLog, &log_key(0), &log_key(u32::MAX), 1).unwrap();
        assert_eq!(
            rev.first().map(|(k, v)| (k.to_vec(), v.to_vec())),
            present.last().map(|i| (log_key(i), log_value(i)))
        );
    }

    fn segments(dir: &Path) -> usize {
        std::fs::read_dir(dir.join(VLOG_DIR)).unwrap().count()
    }

    /// Wait until RocksDB has no flush queued or running (flushes are requested without waiting).
    fn await_flushes(e: &RocksEngine) {
        let deadline = std::time::Duration::from_secs(30);
        #[allow(clippy::disallowed_methods)] // a storage test outside any simulation
        let started = std::time::Instant::now();
        loop {
            let pending = e.core.db.property_int_value("rocksdb.mem-table-flush-pending").unwrap().unwrap_or(0);
            let running = e.core.db.property_int_value("rocksdb.num-running-flushes").unwrap().unwrap_or(0);
            if pending == 0 && running == 0 {
                return;
            }
            assert!(started.elapsed() < deadline, "flushes still pending after {deadline:?}");
            std::thread::yield_now();
        }
    }

    /// Log values are stored once, in the value log: RocksDB holds only pointers to them.
    #[test]
    fn log_values_live_in_the_value_log() {
        let dir = tempfile::tempdir().unwrap();
        let e = open_dir(dir.path(), EngineConfig::default());
        for i in 0..10 {
            put_log(&e, i);
        }
        let raw = e.core.db.get_cf(e.core.cf(Keyspace::RaftLog).unwrap(), log_key(3)).unwrap().unwrap();
        let ptr = ValuePointer::decode(&raw).unwrap();
        assert_eq!(ptr.len, 1000);
        let seg = std::fs::read(dir.path().join(VLOG_DIR).join(format!("{:020}.vlog", ptr.segment))).unwrap();
        assert_eq!(&seg[ptr.offset as usize..][..1000], &log_value(3)[..]);
        assert_log(&e, 0..10);
    }

    /// After a crash, every write that returned is back: the records after the persisted head
    /// are replayed from the value log (RocksDB's WAL is off).
    #[test]
    fn a_crash_replays_the_value_log() {
        let dir = tempfile::tempdir().unwrap();
        crash_after(dir.path(), "write-20");
        let e = open_dir(dir.path(), EngineConfig::default());
        assert_eq!(e.replayed().records, 20);
        assert_log(&e, 0..20);
        drop(e);
        // The open persisted what it replayed: a crash right after an open replays nothing.
        crash_after(dir.path(), "reopen");
        let e = open_dir(dir.path(), EngineConfig::default());
        assert_eq!(e.replayed().records, 0);
        assert_log(&e, 0..20);
    }

    /// Flushes triggered by value log growth bound what a crash makes the next open replay.
    #[test]
    fn flushes_bound_the_replay() {
        let dir = tempfile::tempdir().unwrap();
        crash_after(dir.path(), "write-50");
        let e = open_dir(dir.path(), crash_config("write-50"));
        let replayed = e.replayed().records;
        assert!(replayed < 10, "replayed {replayed} records; flushes every ~7 records were requested");
        assert_log(&e, 0..50);
    }

    /// A torn record at the end of the value log (a write cut short by a crash) is cut off;
    /// what came before it stays and the engine keeps working.
    #[test]
    fn a_torn_tail_is_cut_off() {
        let dir = tempfile::tempdir().unwrap();
        crash_after(dir.path(), "write-5-sync-write-1");
        let mut names: Vec<_> =
            std::fs::read_dir(dir.path().join(VLOG_DIR)).unwrap().map(|e| e.unwrap().path()).collect();
        names.sort();
        let newest = names.last().unwrap();
        let f = std::fs::OpenOptions::new().write(true).open(newest).unwrap();
        f.set_len(f.metadata().unwrap().len() - 5).unwrap();
        drop(f);
        let e = open_dir(dir.path(), EngineConfig::default());
        assert!(e.replayed().torn_bytes > 0);
        assert_log(&e, 0..5);
        put_log(&e, 5);
        drop(e);
        let e = open_dir(dir.path(), EngineConfig::default());
        assert_log(&e, 0..6);
    }

    /// Deleting log entries frees the segments nothing points into any more; segments with a
    /// live value stay, across reopens.
    #[test]
    fn deleted_values_free_their_segments() {
        let dir = tempfile::tempdir().unwrap();
        let config = EngineConfig { segment_bytes: 8 << 10, flush_after_released_bytes: 1, ..EngineConfig::default() };
        let e = open_dir(dir.path(), config.clone());
        for i in 0..100 {
            put_log(&e, i);
        }
        let before = segments(dir.path());
        assert!(before > 10, "{before} segments");
        let mut cut = WriteBatch::new();
        cut.delete_range(Keyspace::RaftLog, log_key(0), log_key(99));
        e.write(cut, false).unwrap();
        let after = segments(dir.path());
        assert!(after <= 3, "{after} segments left of {before}: the one holding entry 99, the active one");
        assert_eq!(e.get(Keyspace::RaftLog, &log_key(99)).unwrap().as_deref(), Some(&log_value(99)[..]));
        drop(e);
        let e = open_dir(dir.path(), config.clone());
        assert_eq!(e.get(Keyspace::RaftLog, &log_key(99)).unwrap().as_deref(), Some(&log_value(99)[..]));
        assert_eq!(e.get(Keyspace::RaftLog, &log_key(5)).unwrap(), None);
        let mut last = WriteBatch::new();
        last.delete(Keyspace::RaftLog, log_key(99));
        e.write(last, false).unwrap();
        drop(e);
        let e = open_dir(dir.path(), config);
        assert!(segments(dir.path()) <= 2, "{} segments", segments(dir.path()));
        assert_eq!(e.scan(Keyspace::RaftLog, &log_key(0), &log_key(u32::MAX), 10).unwrap(), Vec::new());
    }

    /// A stored value whose bytes changed on disk is reported as corruption, never returned.
    #[test]
    fn damaged_values_are_reported() {
        let dir = tempfile::tempdir().unwrap();
        let e = open_dir(dir.path(), EngineConfig::default());
        put_log(&e, 1);
        let raw = e.core.db.get_cf(e.core.cf(Keyspace::RaftLog).unwrap(), log_key(1)).unwrap().unwrap();
        let ptr = ValuePointer::decode(&raw).unwrap();
        let path = dir.path().join(VLOG_DIR).join(format!("{:020}.vlog", ptr.segment));
        let f = std::fs::OpenOptions::new().write(true).open(path).unwrap();
        std::os::unix::fs::FileExt::write_all_at(&f, &[!log_value(1)[10]], ptr.offset + 10).unwrap();
        assert!(matches!(e.get(Keyspace::RaftLog, &log_key(1)), Err(Error::Corruption(_))));
        assert!(matches!(e.scan(Keyspace::RaftLog, &log_key(0), &log_key(9), 10), Err(Error::Corruption(_))));
    }

    /// Writers appending and purging, a reader scanning and reading, segments rotating every few
    /// records and being deleted under them: every read returns the value its key was written
    /// with, and what is left afterwards is exactly what was not purged, across a reopen.
    #[test]
    fn concurrent_writes_reads_rotation_and_deletion_stay_consistent() {
        const WRITERS: u64 = 3;
        const ENTRIES: u32 = 300;
        const KEEP: u32 = 20;
        let key = |g: u64, i: u32| {
            let mut k = g.to_be_bytes().to_vec();
            k.extend_from_slice(&i.to_be_bytes());
            k
        };
        let value = |k: &[u8]| -> Vec<u8> {
            let seed = crc32c::crc32c(k);
            (0..1000u32).map(|j| (seed.wrapping_add(j.wrapping_mul(7)) % 251) as u8).collect()
        };
        let dir = tempfile::tempdir().unwrap();
        let config = EngineConfig {
            segment_bytes: 4 << 10,
            flush_after_log_bytes: 16 << 10,
            flush_after_index_bytes: 4 << 10,
            flush_after_released_bytes: 8 << 10,
            ..EngineConfig::default()
        };
        let e = open_dir(dir.path(), config.clone());
        let done = std::sync::atomic::AtomicU64::new(0);
        std::thread::scope(|scope| {
            for g in 0..WRITERS {
                let e = &e;
                let done = &done;
                scope.spawn(move || {
                    for i in 0..ENTRIES {
                        let mut b = WriteBatch::new();
                        b.put(Keyspace::RaftLog, key(g, i), value(&key(g, i)));
                        b.put(Keyspace::LogIndex, key(g, i), i.to_be_bytes().to_vec());
                        e.write(b, i % 10 == 0).unwrap();
                        if i % 50 == 49 {
                            let mut purge = WriteBatch::new();
                            purge.delete_range(Keyspace::RaftLog, key(g, 0), key(g, i + 1 - KEEP));
                            purge.delete_range(Keyspace::LogIndex, key(g, 0), key(g, i + 1 - KEEP));
                            e.write(purge, false).unwrap();
                        }
                    }
                    done.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                });
            }
            let e = &e;
            let done = &done;
            scope.spawn(move || {
                let mut reads = 0u64;
                while done.load(std::sync::atomic::Ordering::SeqCst) < WRITERS || reads == 0 {
                    for g in 0..WRITERS {
                        let all = e.scan(Keyspace::RaftLog, &key(g, 0), &key(g, u32::MAX), usize::MAX).unwrap();
                        for (k, v) in &all {
                            assert_eq!(v.as_ref(), &value(k)[..], "scan of group {g}");
                        }
                        if let Some((k, _)) = all.last() {
                            // Newest entries are never purged, so the last one scanned is still there.
                            assert_eq!(e.get(Keyspace::RaftLog, k).unwrap().as_deref(), Some(&value(k)[..]));
                        }
                        reads += all.len() as u64;
                    }
                }
            });
        });
        let check = |e: &RocksEngine| {
            for g in 0..WRITERS {
                let all = e.scan(Keyspace::RaftLog, &key(g, 0), &key(g, u32::MAX), usize::MAX).unwrap();
                let keys: Vec<Vec<u8>> = all.iter().map(|(k, _)| k.to_vec()).collect();
                assert_eq!(keys, (ENTRIES - KEEP..ENTRIES).map(|i| key(g, i)).collect::<Vec<_>>());
                for (k, v) in &all {
                    assert_eq!(v.as_ref(), &value(k)[..]);
                }
            }
        };
        check(&e);
        let written = (WRITERS * u64::from(ENTRIES)) as usize;
        let left = segments(dir.path());
        assert!(
            left < written / 4,
            "{left} segments left after writing {written} records of ~1 KiB into 4 KiB segments"
        );
        drop(e);
        let e = open_dir(dir.path(), config);
        check(&e);
    }

    /// Small segments bring the flushes that deletion waits for with them; settings the
    /// collector cannot run with are refused at open.
    #[test]
    fn engine_configs_are_shaped_and_checked() {
        let small = EngineConfig::with_segment_bytes(4 << 20);
        assert_eq!((small.segment_bytes, small.flush_after_log_bytes), (4 << 20, 4 << 20));
        let default = EngineConfig::default();
        let big = EngineConfig::with_segment_bytes(default.segment_bytes);
        assert_eq!(big.flush_after_log_bytes, default.flush_after_log_bytes);
        let dir = tempfile::tempdir().unwrap();
        for bad in [
            EngineConfig { gc_live_ratio: 1.0, ..EngineConfig::default() },
            EngineConfig { gc_live_ratio: -0.1, ..EngineConfig::default() },
            EngineConfig { gc_bytes_per_second: 0, ..EngineConfig::default() },
            EngineConfig { segment_bytes: 0, ..EngineConfig::default() },
        ] {
            let err = RocksEngine::open_with(dir.path(), bad.clone()).unwrap_err();
            assert!(
                matches!(&err, Error::Unavailable(m) if m.contains("invalid storage engine config")),
                "{bad:?}: {err}"
            );
        }
    }

    /// A data directory of the earlier layout (RocksDB files at its top) is refused, not
    /// silently opened empty.
    #[test]
    fn the_earlier_layout_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let db = DB::open_default(dir.path()).unwrap();
        db.put(b"k", b"v").unwrap();
        drop(db);
        let err = RocksEngine::open(dir.path()).unwrap_err();
        assert!(matches!(&err, Error::Unavailable(m) if m.contains("earlier Rill storage layout")), "{err}");
    }
}
