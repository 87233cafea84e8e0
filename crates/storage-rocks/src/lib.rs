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
        let cfs = Keyspace::ALL.iter().map(|ks| {
            let mut cf = Options::default();
            // Record payloads may already be compressed by producers; LZ4 is cheap either way.
            cf.set_compression_type(DBCompressionType::Lz4);
            ColumnFamilyDescriptor::new(ks.name(), cf)
        });
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
}
