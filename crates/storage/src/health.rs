//! [`monitor`]: an engine whose first failed write or sync is final, and [`StorageHealth`], which
//! tells the node.
//!
//! After a failed fsync the kernel may have dropped the dirty pages it could not write, and a
//! later fsync can succeed without them (PostgreSQL's "fsyncgate"); after a failed write the
//! engine's state is unknown. Either way nothing the node wrote can be called durable any more,
//! so from the first failure on every write and sync is refused without asking the engine
//! again, and the node takes itself out of replication (`rill-raft`'s `MultiRaft`) until it is
//! restarted from its durable state (`rill-server` restarts itself once its data directory takes
//! writes again: see its `recovery` module). Reads still go through: a stopping node may still serve them.

use std::sync::Arc;

use rill_rt::sync::watch;

use crate::{Engine, Error, KeyValue, Keyspace, Result, WriteBatch};

/// Whether the node's storage has failed, and why.
#[derive(Clone)]
pub struct StorageHealth {
    failure: watch::Receiver<Option<String>>,
}

impl StorageHealth {
    /// Why a write or sync failed, once one has.
    pub fn failure(&self) -> Option<String> {
        self.failure.borrow().clone()
    }

    /// Waits until a write or sync has failed and returns why; pending forever while the
    /// storage is healthy (and once the engine is gone).
    pub async fn failed(&self) -> String {
        let mut rx = self.failure.clone();
        let reason = match rx.wait_for(Option::is_some).await {
            Ok(f) => f.clone(),
            Err(_) => None,
        };
        match reason {
            Some(reason) => reason,
            None => std::future::pending().await,
        }
    }
}

/// `engine`, watched: the returned engine refuses every write and sync once one failed.
pub fn monitor(engine: Arc<dyn Engine>) -> (Arc<dyn Engine>, StorageHealth) {
    let (tx, failure) = watch::channel(None);
    (Arc::new(Monitored { inner: engine, failed: tx }), StorageHealth { failure })
}

struct Monitored {
    inner: Arc<dyn Engine>,
    failed: watch::Sender<Option<String>>,
}

impl Monitored {
    /// Runs `op` unless storage failed earlier; records its failure.
    fn guarded(&self, what: &str, op: impl FnOnce() -> Result<()>) -> Result<()> {
        if let Some(reason) = self.failed.borrow().clone() {
            return Err(Error::Unavailable(format!(
                "an earlier write or sync failed ({reason}); nothing is written or called durable any more"
            )));
        }
        let result = op();
        if let Err(e) = &result {
            tracing::error!(error = %e, "storage {what} failed: this node writes nothing more until restarted");
            self.failed.send_replace(Some(e.to_string()));
        }
        result
    }
}

impl Engine for Monitored {
    fn write(&self, batch: WriteBatch, sync: bool) -> Result<()> {
        self.guarded("write", || self.inner.write(batch, sync))
    }

    fn sync(&self) -> Result<()> {
        self.guarded("sync", || self.inner.sync())
    }

    fn get(&self, keyspace: Keyspace, key: &[u8]) -> Result<Option<bytes::Bytes>> {
        self.inner.get(keyspace, key)
    }

    fn scan(&self, keyspace: Keyspace, start: &[u8], end: &[u8], limit: usize) -> Result<Vec<KeyValue>> {
        self.inner.scan(keyspace, start, end, limit)
    }

    fn scan_rev(&self, keyspace: Keyspace, start: &[u8], end: &[u8], limit: usize) -> Result<Vec<KeyValue>> {
        self.inner.scan_rev(keyspace, start, end, limit)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{MemEngine, Syncer};

    fn put(key: &[u8]) -> WriteBatch {
        let mut b = WriteBatch::new();
        b.put(Keyspace::RaftLog, key.to_vec(), b"1".to_vec());
        b
    }

    #[tokio::test]
    async fn the_first_failure_is_final_even_once_the_disk_answers_again() {
        let mem = MemEngine::new();
        let (engine, health) = monitor(Arc::new(mem.clone()));
        let syncer = Syncer::start(engine.clone());
        engine.write(put(b"before"), false).unwrap();
        syncer.sync().await.unwrap();
        assert_eq!(health.failure(), None);

        mem.set_failure(Some("EIO".into()));
        assert!(syncer.sync().await.is_err());
        mem.set_failure(None);
        assert!(matches!(engine.write(put(b"after"), false), Err(Error::Unavailable(_))), "writes are refused");
        assert!(matches!(syncer.sync().await, Err(Error::Unavailable(_))), "no durability after a failed sync");
        assert_eq!(mem.get(Keyspace::RaftLog, b"after").unwrap(), None, "the engine was not asked again");
        assert!(health.failure().is_some_and(|f| f.contains("EIO")));
        assert!(health.failed().await.contains("EIO"));
        // Reads still work.
        assert!(engine.get(Keyspace::RaftLog, b"before").unwrap().is_some());
    }

    #[tokio::test]
    async fn a_failed_write_counts_too() {
        let mem = MemEngine::new();
        let (engine, health) = monitor(Arc::new(mem.clone()));
        mem.set_failure(Some("ENOSPC".into()));
        assert!(engine.write(put(b"k"), false).is_err());
        assert!(health.failure().is_some_and(|f| f.contains("ENOSPC")));
    }
}
