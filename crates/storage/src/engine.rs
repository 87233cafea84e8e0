//! The engine trait: an ordered key-value store with a few fixed keyspaces, atomic batches and an
//! explicit sync.
//!
//! # Durability contract
//! * [`Engine::write`] applies a batch atomically: afterwards readers see all of it or none.
//! * A write is *durable* (survives power failure) once a later [`Engine::sync`] has returned, or
//!   when it was written with `sync = true` and that call returned.
//! * A process crash (the node dies, the machine keeps running) loses nothing that `write`
//!   returned for; a power failure may lose any suffix of the writes that were not yet durable,
//!   but never part of a batch and never a write while keeping a later one.

use bytes::Bytes;

use crate::Result;

/// The fixed set of keyspaces (RocksDB column families; separate maps in memory).
///
/// Keys inside a keyspace are byte strings compared lexicographically. Rill prefixes every key
/// with the big-endian group id, so one engine holds every Raft group of a node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Keyspace {
    /// Raft log entries: `group ‖ index` → encoded entry. For partitions this *is* the
    /// partition log; records are not written a second time.
    RaftLog,
    /// Raft hard state: votes, committed and purged log ids.
    RaftMeta,
    /// Secondary indexes over the log, e.g. `group ‖ offset` → log index.
    LogIndex,
    /// State machine snapshots and other derived state.
    State,
}

impl Keyspace {
    /// Every keyspace, in a stable order.
    pub const ALL: [Keyspace; 4] = [Keyspace::RaftLog, Keyspace::RaftMeta, Keyspace::LogIndex, Keyspace::State];

    /// A stable name (the RocksDB column family name).
    pub fn name(self) -> &'static str {
        match self {
            Keyspace::RaftLog => "raft_log",
            Keyspace::RaftMeta => "raft_meta",
            Keyspace::LogIndex => "log_index",
            Keyspace::State => "state",
        }
    }

    /// Position in [`Keyspace::ALL`].
    pub fn ordinal(self) -> usize {
        match self {
            Keyspace::RaftLog => 0,
            Keyspace::RaftMeta => 1,
            Keyspace::LogIndex => 2,
            Keyspace::State => 3,
        }
    }
}

/// One operation of a [`WriteBatch`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WriteOp {
    /// Set `key` to `value`.
    Put { keyspace: Keyspace, key: Vec<u8>, value: Bytes },
    /// Remove `key` (no error if absent).
    Delete { keyspace: Keyspace, key: Vec<u8> },
    /// Remove every key `k` with `start <= k < end`.
    DeleteRange { keyspace: Keyspace, start: Vec<u8>, end: Vec<u8> },
}

/// A group of writes applied atomically, in order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WriteBatch {
    ops: Vec<WriteOp>,
}

impl WriteBatch {
    /// An empty batch.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a put.
    pub fn put(&mut self, keyspace: Keyspace, key: impl Into<Vec<u8>>, value: impl Into<Bytes>) {
        self.ops.push(WriteOp::Put { keyspace, key: key.into(), value: value.into() });
    }

    /// Adds a delete.
    pub fn delete(&mut self, keyspace: Keyspace, key: impl Into<Vec<u8>>) {
        self.ops.push(WriteOp::Delete { keyspace, key: key.into() });
    }

    /// Adds a range delete of `start <= k < end`.
    pub fn delete_range(&mut self, keyspace: Keyspace, start: impl Into<Vec<u8>>, end: impl Into<Vec<u8>>) {
        self.ops.push(WriteOp::DeleteRange { keyspace, start: start.into(), end: end.into() });
    }

    /// Appends every operation of `other` after the ones already here.
    pub fn extend(&mut self, other: WriteBatch) {
        self.ops.extend(other.ops);
    }

    /// The operations, in order.
    pub fn ops(&self) -> &[WriteOp] {
        &self.ops
    }

    /// Consumes the batch into its operations.
    pub fn into_ops(self) -> Vec<WriteOp> {
        self.ops
    }

    /// True when there is nothing to write.
    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }

    /// Approximate payload size in bytes (keys plus values).
    pub fn size_bytes(&self) -> usize {
        self.ops
            .iter()
            .map(|op| match op {
                WriteOp::Put { key, value, .. } => key.len() + value.len(),
                WriteOp::Delete { key, .. } => key.len(),
                WriteOp::DeleteRange { start, end, .. } => start.len() + end.len(),
            })
            .sum()
    }
}

/// A key and its value, as returned by scans.
pub type KeyValue = (Bytes, Bytes);

/// An ordered, durable key-value engine shared by every Raft group on a node.
///
/// Implementations are internally synchronized; every method may be called from many tasks.
/// Calls may block for disk I/O; async callers put [`Engine::sync`] behind
/// [`crate::Syncer`], which runs it off the executor.
pub trait Engine: Send + Sync + 'static {
    /// Applies `batch` atomically. With `sync`, the batch and every earlier write are durable
    /// when this returns.
    fn write(&self, batch: WriteBatch, sync: bool) -> Result<()>;

    /// Makes every write that returned before this call durable.
    fn sync(&self) -> Result<()>;

    /// The value of `key`, if present.
    fn get(&self, keyspace: Keyspace, key: &[u8]) -> Result<Option<Bytes>>;

    /// Up to `limit` entries with `start <= key < end`, in ascending key order.
    fn scan(&self, keyspace: Keyspace, start: &[u8], end: &[u8], limit: usize) -> Result<Vec<KeyValue>>;

    /// Up to `limit` entries with `start <= key < end`, in descending key order.
    fn scan_rev(&self, keyspace: Keyspace, start: &[u8], end: &[u8], limit: usize) -> Result<Vec<KeyValue>>;

    /// The total length of the values of every key with `start <= key < end`: what a transfer
    /// of that range will carry, known before it starts. The default scans the range in chunks
    /// (constant memory); an engine that keeps value lengths beside its keys answers without
    /// reading the values.
    fn value_bytes(&self, keyspace: Keyspace, start: &[u8], end: &[u8]) -> Result<u64> {
        const CHUNK: usize = 256;
        let mut total = 0u64;
        let mut from = start.to_vec();
        loop {
            let rows = self.scan(keyspace, &from, end, CHUNK)?;
            let full = rows.len() == CHUNK;
            for (_, v) in &rows {
                total += v.len() as u64;
            }
            match rows.last() {
                Some((k, _)) if full => {
                    from = k.to_vec();
                    from.push(0);
                }
                _ => return Ok(total),
            }
        }
    }
}
