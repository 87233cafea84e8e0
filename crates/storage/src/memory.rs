//! [`MemEngine`]: the in-memory engine the deterministic simulation runs on.
//!
//! It keeps two states apart, the way a disk with an OS page cache does:
//!
//! * **visible** — what the running process reads: every write that returned.
//! * **durable** — what is on the platter: writes covered by a completed sync.
//!
//! A node *crash* keeps the visible state (the OS still holds the page cache and writes it back);
//! a *power failure* ([`MemEngine::power_fail`]) rolls visible back to durable, optionally keeping
//! a prefix of the unsynced batches (the disk may have written some of them back on its own), but
//! never a later batch without an earlier one and never part of a batch.
//!
//! The handle is shared (`Arc`) and outlives the simulated node, so a restarted node reopens the
//! same "disk".

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::{Arc, Mutex, MutexGuard};

use bytes::Bytes;

use crate::engine::{Engine, KeyValue, Keyspace, WriteBatch, WriteOp};
use crate::{Error, Result};

type Tree = BTreeMap<Vec<u8>, Bytes>;

#[derive(Default, Clone)]
struct State {
    trees: [Tree; 4],
}

impl State {
    fn apply(&mut self, batch: &WriteBatch) {
        for op in batch.ops() {
            match op {
                WriteOp::Put { keyspace, key, value } => {
                    self.trees[keyspace.ordinal()].insert(key.clone(), value.clone());
                }
                WriteOp::Delete { keyspace, key } => {
                    self.trees[keyspace.ordinal()].remove(key);
                }
                WriteOp::DeleteRange { keyspace, start, end } => {
                    if start < end {
                        let tree = &mut self.trees[keyspace.ordinal()];
                        let doomed: Vec<Vec<u8>> = tree
                            .range::<[u8], _>((Bound::Included(&start[..]), Bound::Excluded(&end[..])))
                            .map(|(k, _)| k.clone())
                            .collect();
                        for k in doomed {
                            tree.remove(&k);
                        }
                    }
                }
            }
        }
    }
}

#[derive(Default)]
struct Inner {
    visible: State,
    durable: State,
    /// Batches written since the last sync, oldest first.
    unsynced: Vec<WriteBatch>,
    /// When set, writes and syncs fail with this message (injected I/O error).
    failure: Option<String>,
    stats: MemStats,
}

/// Counters the simulation's oracles read (e.g. "was this write synced before it was acked?").
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct MemStats {
    /// Batches written.
    pub writes: u64,
    /// Completed syncs.
    pub syncs: u64,
    /// Power failures survived.
    pub power_failures: u64,
    /// Batches lost to power failures.
    pub batches_lost: u64,
}

/// An in-memory [`Engine`] with separate visible and durable states. Cheap to clone (shared).
#[derive(Clone, Default)]
pub struct MemEngine {
    inner: Arc<Mutex<Inner>>,
}

impl std::fmt::Debug for MemEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemEngine").field("stats", &self.stats()).finish()
    }
}

impl MemEngine {
    /// A new, empty engine.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding the lock leaves consistent state (every mutation is one call),
        // so a poisoned lock is still safe to use.
        self.inner.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Simulates a power failure: everything not yet synced is lost, except that the first
    /// `keep_unsynced` unsynced batches (at most all of them) reached the disk anyway.
    pub fn power_fail(&self, keep_unsynced: usize) {
        let mut inner = self.lock();
        let keep = keep_unsynced.min(inner.unsynced.len());
        let unsynced = std::mem::take(&mut inner.unsynced);
        let lost = unsynced.len() - keep;
        for batch in &unsynced[..keep] {
            inner.durable.apply(batch);
        }
        inner.visible = inner.durable.clone();
        inner.stats.power_failures += 1;
        inner.stats.batches_lost += lost as u64;
    }

    /// Number of batches written but not yet synced.
    pub fn unsynced_batches(&self) -> usize {
        self.lock().unsynced.len()
    }

    /// Makes every later write and sync fail with an I/O error (`None` heals).
    pub fn set_failure(&self, failure: Option<String>) {
        self.lock().failure = failure;
    }

    /// Counters so far.
    pub fn stats(&self) -> MemStats {
        self.lock().stats
    }

    /// The durable value of `key`: what would survive a power failure right now.
    pub fn durable_get(&self, keyspace: Keyspace, key: &[u8]) -> Option<Bytes> {
        self.lock().durable.trees[keyspace.ordinal()].get(key).cloned()
    }

    /// Up to `limit` *durable* entries with `start <= key < end`, descending: what a power
    /// failure right now would leave.
    pub fn durable_scan_rev(&self, keyspace: Keyspace, start: &[u8], end: &[u8], limit: usize) -> Vec<KeyValue> {
        let inner = self.lock();
        let tree = &inner.durable.trees[keyspace.ordinal()];
        Self::range_of(tree, start, end)
            .rev()
            .take(limit)
            .map(|(k, v)| (Bytes::copy_from_slice(k), v.clone()))
            .collect()
    }

    fn range_of<'a>(
        tree: &'a Tree,
        start: &'a [u8],
        end: &'a [u8],
    ) -> impl DoubleEndedIterator<Item = (&'a Vec<u8>, &'a Bytes)> + 'a {
        let range = if start < end {
            Some(tree.range::<[u8], _>((Bound::Included(start), Bound::Excluded(end))))
        } else {
            None
        };
        range.into_iter().flatten()
    }
}

impl Engine for MemEngine {
    fn write(&self, batch: WriteBatch, sync: bool) -> Result<()> {
        let mut inner = self.lock();
        if let Some(msg) = &inner.failure {
            return Err(Error::Io(msg.clone()));
        }
        inner.visible.apply(&batch);
        inner.stats.writes += 1;
        inner.unsynced.push(batch);
        if sync {
            drop(inner);
            self.sync()?;
        }
        Ok(())
    }

    fn sync(&self) -> Result<()> {
        let mut inner = self.lock();
        if let Some(msg) = &inner.failure {
            return Err(Error::Io(msg.clone()));
        }
        let unsynced = std::mem::take(&mut inner.unsynced);
        for batch in &unsynced {
            inner.durable.apply(batch);
        }
        inner.stats.syncs += 1;
        Ok(())
    }

    fn get(&self, keyspace: Keyspace, key: &[u8]) -> Result<Option<Bytes>> {
        Ok(self.lock().visible.trees[keyspace.ordinal()].get(key).cloned())
    }

    fn scan(&self, keyspace: Keyspace, start: &[u8], end: &[u8], limit: usize) -> Result<Vec<KeyValue>> {
        let inner = self.lock();
        let tree = &inner.visible.trees[keyspace.ordinal()];
        Ok(Self::range_of(tree, start, end).take(limit).map(|(k, v)| (Bytes::copy_from_slice(k), v.clone())).collect())
    }

    fn scan_rev(&self, keyspace: Keyspace, start: &[u8], end: &[u8], limit: usize) -> Result<Vec<KeyValue>> {
        let inner = self.lock();
        let tree = &inner.visible.trees[keyspace.ordinal()];
        Ok(Self::range_of(tree, start, end)
            .rev()
            .take(limit)
            .map(|(k, v)| (Bytes::copy_from_slice(k), v.clone()))
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conformance::{self, Harness};

    struct MemHarness {
        engine: MemEngine,
    }

    impl Harness for MemHarness {
        type E = MemEngine;
        fn engine(&self) -> Arc<MemEngine> {
            Arc::new(self.engine.clone())
        }
        fn restart(&mut self) {
            // A process restart keeps what the OS had: the same visible state.
        }
        fn power_fail(&mut self) {
            self.engine.power_fail(0);
        }
    }

    #[test]
    fn conformance_suite() {
        conformance::run_all(|| MemHarness { engine: MemEngine::new() });
    }

    #[test]
    fn power_failure_keeps_a_prefix_of_unsynced_batches_never_a_gap() {
        let e = MemEngine::new();
        for i in 0u8..4 {
            let mut b = WriteBatch::new();
            b.put(Keyspace::State, vec![i], vec![i]);
            e.write(b, false).unwrap();
        }
        e.power_fail(2);
        let present: Vec<u8> = (0u8..4).filter(|i| e.get(Keyspace::State, &[*i]).unwrap().is_some()).collect();
        assert_eq!(present, vec![0, 1]);
        assert_eq!(e.stats().batches_lost, 2);
    }

    #[test]
    fn injected_failure_refuses_writes_and_syncs() {
        let e = MemEngine::new();
        e.set_failure(Some("disk on fire".into()));
        let mut b = WriteBatch::new();
        b.put(Keyspace::State, b"k".to_vec(), b"v".to_vec());
        assert!(matches!(e.write(b, false), Err(Error::Io(_))));
        assert!(matches!(e.sync(), Err(Error::Io(_))));
        e.set_failure(None);
        assert!(e.sync().is_ok());
    }
}
