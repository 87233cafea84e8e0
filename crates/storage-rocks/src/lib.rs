//! [`RocksEngine`]: Rill's production storage engine.
//!
//! One RocksDB instance per node, one column family per [`Keyspace`] (not one per partition:
//! thousands of column families would each carry memtables and files). Every key is prefixed with
//! the big-endian Raft group id by the layers above, so one synced write batch can carry appends
//! of many partitions — group commit across partitions.
//!
//! # Durability
//! Writes go to the write-ahead log and memtable without an fsync; [`Engine::sync`] fsyncs the WAL
//! (`FlushWAL(sync=true)`), which makes every write that returned before it durable. RocksDB
//! replays the WAL on open, so a process crash loses nothing that was written, and a power
//! failure loses only writes not covered by a sync.

use std::path::{Path, PathBuf};

use bytes::Bytes;
use rill_storage::{Engine, Error, KeyValue, Keyspace, Result, WriteBatch, WriteOp};
use rocksdb::{
    ColumnFamily, ColumnFamilyDescriptor, DBCompressionType, Direction, IteratorMode, Options, ReadOptions,
    WriteOptions, DB,
};

/// Background compaction and flush threads. Two cores are common on small nodes; RocksDB's
/// default of two jobs keeps compaction from starving request handling.
const MAX_BACKGROUND_JOBS: i32 = 2;

/// Log entries at least this large keep their value in blob files (see [`keyspace_options`]).
/// Record batches are usually far larger; small entries (membership, expiry commands, tiny
/// batches) stay inline where a blob reference would cost more than it saves.
const MIN_BLOB_BYTES: u64 = 4096;

/// Column family options of `keyspace`.
///
/// SST blocks are LZ4-compressed (keys, hard state, indexes and snapshots compress well).
///
/// The Raft log is different: it holds the record bytes, appended once and rewritten by
/// nothing but compaction. In a plain LSM tree every byte is written to the WAL, again to an
/// L0 file when the memtable flushes and again at every level it is compacted into — measured
/// here at 4× the payload rate per replica, which made the disk, not the CPU, the limit. With
/// blob files (RocksDB's integrated BlobDB) a flush writes large values once into a blob file
/// and compaction moves only keys and blob references: 2× (WAL, then blob file). Blob values
/// are not compressed: producers compress batches themselves (as in Kafka, the broker stores
/// what it was sent), and compressing random bytes again costs CPU for nothing.
///
/// Blob garbage collection stays off: the log only grows at its end and loses whole prefixes
/// (or, rarely, a short uncommitted suffix), so collecting would relocate live record bytes —
/// more writes — to reclaim almost nothing. A blob file is deleted once every blob in it is
/// garbage.
fn keyspace_options(keyspace: Keyspace) -> Options {
    let mut cf = Options::default();
    cf.set_compression_type(DBCompressionType::Lz4);
    if keyspace == Keyspace::RaftLog {
        cf.set_enable_blob_files(true);
        cf.set_min_blob_size(MIN_BLOB_BYTES);
        cf.set_blob_compression_type(DBCompressionType::None);
        cf.set_enable_blob_gc(false);
    }
    cf
}

/// A RocksDB-backed [`Engine`].
pub struct RocksEngine {
    db: DB,
    path: PathBuf,
}

impl std::fmt::Debug for RocksEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RocksEngine").field("path", &self.path).finish()
    }
}

fn io(e: rocksdb::Error) -> Error {
    Error::Io(e.into_string())
}

impl RocksEngine {
    /// Opens (creating if needed) the engine in directory `path`, replaying its WAL.
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref().to_path_buf();
        let mut opts = Options::default();
        opts.create_if_missing(true);
        opts.create_missing_column_families(true);
        opts.set_max_background_jobs(MAX_BACKGROUND_JOBS);
        let cfs = Keyspace::ALL.iter().map(|ks| ColumnFamilyDescriptor::new(ks.name(), keyspace_options(*ks)));
        let db = DB::open_cf_descriptors(&opts, &path, cfs).map_err(io)?;
        tracing::info!(path = %path.display(), "opened RocksDB engine");
        Ok(Self { db, path })
    }

    /// The directory this engine lives in.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn cf(&self, ks: Keyspace) -> Result<&ColumnFamily> {
        self.db.cf_handle(ks.name()).ok_or_else(|| Error::Corruption(format!("column family {} missing", ks.name())))
    }

    fn bounded(start: &[u8], end: &[u8]) -> ReadOptions {
        let mut ro = ReadOptions::default();
        ro.set_iterate_lower_bound(start.to_vec());
        ro.set_iterate_upper_bound(end.to_vec());
        ro
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
        let mut out = Vec::new();
        for item in self.db.iterator_cf_opt(cf, Self::bounded(start, end), mode) {
            let (k, v) = item.map_err(io)?;
            out.push((Bytes::from(k.into_vec()), Bytes::from(v.into_vec())));
            if out.len() >= limit {
                break;
            }
        }
        Ok(out)
    }
}

impl Engine for RocksEngine {
    fn write(&self, batch: WriteBatch, sync: bool) -> Result<()> {
        let mut wb = rocksdb::WriteBatch::default();
        for op in batch.into_ops() {
            match op {
                WriteOp::Put { keyspace, key, value } => wb.put_cf(self.cf(keyspace)?, key, value),
                WriteOp::Delete { keyspace, key } => wb.delete_cf(self.cf(keyspace)?, key),
                WriteOp::DeleteRange { keyspace, start, end } => {
                    // RocksDB rejects inverted ranges; an empty range deletes nothing.
                    if start < end {
                        wb.delete_range_cf(self.cf(keyspace)?, start, end)
                    }
                }
            }
        }
        let mut wo = WriteOptions::default();
        wo.set_sync(sync);
        self.db.write_opt(wb, &wo).map_err(io)
    }

    fn sync(&self) -> Result<()> {
        self.db.flush_wal(true).map_err(io)
    }

    fn get(&self, keyspace: Keyspace, key: &[u8]) -> Result<Option<Bytes>> {
        let v = self.db.get_pinned_cf(self.cf(keyspace)?, key).map_err(io)?;
        Ok(v.map(|v| Bytes::copy_from_slice(&v)))
    }

    fn scan(&self, keyspace: Keyspace, start: &[u8], end: &[u8], limit: usize) -> Result<Vec<KeyValue>> {
        self.collect(keyspace, start, end, limit, Direction::Forward)
    }

    fn scan_rev(&self, keyspace: Keyspace, start: &[u8], end: &[u8], limit: usize) -> Result<Vec<KeyValue>> {
        self.collect(keyspace, start, end, limit, Direction::Reverse)
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

    /// Large log values go to blob files when the memtable flushes, and read back, scan and
    /// delete as inline values do, across a reopen.
    #[test]
    fn large_log_values_live_in_blob_files() {
        let mut h = RocksHarness::new();
        let key = |i: u8| vec![0, 0, 0, 0, 0, 0, 0, 1, i];
        let value = |i: u8| vec![i; MIN_BLOB_BYTES as usize + usize::from(i)];
        let mut batch = WriteBatch::new();
        for i in 0..8 {
            batch.put(Keyspace::RaftLog, key(i), value(i));
        }
        batch.put(Keyspace::RaftLog, key(100), b"small".to_vec());
        let engine = h.engine();
        engine.write(batch, true).unwrap();
        let cf = engine.cf(Keyspace::RaftLog).unwrap();
        engine.db.flush_cf(cf).unwrap();
        drop(engine);
        let blob_files = std::fs::read_dir(h.dir.path())
            .unwrap()
            .filter(|e| e.as_ref().is_ok_and(|e| e.path().extension().is_some_and(|x| x == "blob")))
            .count();
        assert!(blob_files >= 1, "the flush wrote no blob file");

        h.reopen();
        let engine = h.engine();
        for i in 0..8 {
            assert_eq!(engine.get(Keyspace::RaftLog, &key(i)).unwrap().as_deref(), Some(&value(i)[..]));
        }
        let mut cut = WriteBatch::new();
        cut.delete_range(Keyspace::RaftLog, key(0), key(4));
        engine.write(cut, true).unwrap();
        let rest = engine.scan(Keyspace::RaftLog, &key(0), &key(255), 100).unwrap();
        let keys: Vec<u8> = rest.iter().map(|(k, _)| k[8]).collect();
        assert_eq!(keys, vec![4, 5, 6, 7, 100]);
        assert_eq!(rest[0].1.as_ref(), &value(4)[..]);
        assert_eq!(rest[4].1.as_ref(), b"small");
    }
}
