//! Group commit: many callers, one sync.
//!
//! A caller writes its batch unsynced (so it is readable at once), then awaits
//! [`Syncer::sync`]. One task performs syncs back to back; every request that arrived before a
//! sync started is answered by that sync. Under load, one fsync covers the writes of many
//! produce requests and many partitions.
//!
//! Guarantee: when `sync()` returns `Ok`, every write that returned before `sync()` was called is
//! durable.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use rill_rt::sync::{mpsc, oneshot};

use crate::{Engine, Error, Result};

type Waiter = oneshot::Sender<Result<()>>;

/// Counters for observing how well syncs are shared.
#[derive(Debug, Default)]
pub struct SyncStats {
    /// `sync()` calls answered.
    pub requests: AtomicU64,
    /// Engine syncs performed.
    pub syncs: AtomicU64,
}

/// Handle to the node's group-commit task. Cheap to clone.
#[derive(Clone)]
pub struct Syncer {
    tx: mpsc::UnboundedSender<Waiter>,
    stats: Arc<SyncStats>,
}

impl Syncer {
    /// Spawns the sync task for `engine` on the current runtime.
    pub fn start(engine: Arc<dyn Engine>) -> Self {
        Self::start_with_latency(engine, Duration::ZERO)
    }

    /// Like [`Syncer::start`], but every sync first waits `latency`. The simulation uses this
    /// to give its in-memory disk a realistic fsync time, so acknowledging before a sync has a
    /// window in which a power failure can catch it.
    pub fn start_with_latency(engine: Arc<dyn Engine>, latency: Duration) -> Self {
        let (tx, rx) = mpsc::unbounded_channel();
        let stats = Arc::new(SyncStats::default());
        rill_rt::spawn(run(engine, rx, stats.clone(), latency));
        Self { tx, stats }
    }

    /// Returns once every write that returned before this call is durable.
    pub async fn sync(&self) -> Result<()> {
        let (tx, rx) = oneshot::channel();
        self.tx.send(tx).map_err(|_| Error::Unavailable("sync task stopped".into()))?;
        rx.await.map_err(|_| Error::Unavailable("sync task stopped".into()))?
    }

    /// Counters so far.
    pub fn stats(&self) -> &SyncStats {
        &self.stats
    }
}

async fn run(
    engine: Arc<dyn Engine>,
    mut rx: mpsc::UnboundedReceiver<Waiter>,
    stats: Arc<SyncStats>,
    latency: Duration,
) {
    while let Some(first) = rx.recv().await {
        if !latency.is_zero() {
            rill_rt::sleep(latency).await;
        }
        let mut waiters = vec![first];
        while let Ok(more) = rx.try_recv() {
            waiters.push(more);
        }
        let engine = engine.clone();
        let result = rill_rt::blocking(move || engine.sync()).await;
        if let Err(e) = &result {
            tracing::error!(error = %e, "storage sync failed");
        }
        stats.syncs.fetch_add(1, Ordering::Relaxed);
        stats.requests.fetch_add(waiters.len() as u64, Ordering::Relaxed);
        for w in waiters {
            // The caller may have given up; that is fine.
            let _ = w.send(result.clone());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Keyspace, MemEngine, WriteBatch};

    #[tokio::test]
    async fn sync_makes_earlier_writes_durable() {
        let mem = MemEngine::new();
        let syncer = Syncer::start(Arc::new(mem.clone()));
        let mut b = WriteBatch::new();
        b.put(Keyspace::RaftLog, b"a".to_vec(), b"1".to_vec());
        mem.write(b, false).unwrap();
        assert_eq!(mem.durable_get(Keyspace::RaftLog, b"a"), None);
        syncer.sync().await.unwrap();
        assert_eq!(mem.durable_get(Keyspace::RaftLog, b"a").as_deref(), Some(&b"1"[..]));
    }

    #[tokio::test]
    async fn concurrent_callers_share_syncs() {
        let mem = MemEngine::new();
        let syncer = Syncer::start(Arc::new(mem.clone()));
        let calls: Vec<_> = (0..64)
            .map(|_| {
                let s = syncer.clone();
                tokio::spawn(async move { s.sync().await })
            })
            .collect();
        for c in calls {
            c.await.unwrap().unwrap();
        }
        let st = syncer.stats();
        assert_eq!(st.requests.load(Ordering::Relaxed), 64);
        assert!(st.syncs.load(Ordering::Relaxed) <= 64);
    }

    #[tokio::test]
    async fn sync_failure_reaches_every_waiter() {
        let mem = MemEngine::new();
        let syncer = Syncer::start(Arc::new(mem.clone()));
        mem.set_failure(Some("EIO".into()));
        assert!(matches!(syncer.sync().await, Err(Error::Io(_))));
    }
}
