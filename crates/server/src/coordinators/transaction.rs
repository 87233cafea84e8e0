//! [`TxnShard`]: the transaction coordinator of one `__transaction_state` partition this node
//! leads.
//!
//! It owns what the leader alone keeps: the additions to its transactions, queued per
//! transactional id so that those arriving together are written together
//! (`rill_coordinator::transactions::Additions`), and the transactions it is finishing, so that
//! an `EndTxn` and the timer never finish the same one twice at once. Finishing — the markers
//! into every partition, then the completion — is `crate::txn_markers`' work. Its timers:
//!
//! * at election and every second, what the partition has prepared is finished (a `Prepare*`
//!   record left by an earlier leader included), and what has outlived its timeout is aborted;
//! * every `[transactions] transactional-id-expiration-check-interval`, the ids with no
//!   transaction open and nothing written for `transactional-id-expiration` (Kafka's
//!   `transactional.id.expiration.ms`) are removed, so the coordinators' state does not grow
//!   with every id ever used. A removed id's producer id is retired: a producer that comes back
//!   under the id gets a new one, and a zombie holding the old pair is refused
//!   (`INVALID_PRODUCER_ID_MAPPING`). Its own task, so a slow proposal never delays the
//!   transaction timers.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use rill_broker::StatePartition;
use rill_coordinator::transactions::{self, Additions, TransactionMetadata};
use rill_coordinator::{CoordinatorError, TransactionsMachine};
use rill_rt::JoinHandle;

use super::{Coordinators, Registry, Shard};
use crate::node::Node;

/// How often the partition is checked for transactions to finish or expire.
const CHECK_EVERY: Duration = Duration::from_secs(1);
/// How long one coordinator write may take.
const STEP_TIMEOUT: Duration = Duration::from_secs(10);

/// The transaction coordinator of a `__transaction_state` partition this node leads.
pub struct TxnShard {
    partition: Arc<StatePartition<TransactionsMachine>>,
    node: Weak<Node>,
    additions: Additions,
    /// The transactions being finished: (transactional id, the transaction's name).
    finishing: Mutex<HashSet<(String, u64)>>,
    /// The tasks finishing them, stopped at resignation (the next leader finishes again what
    /// they had not), so that two shards of this node never finish one transaction at once.
    finishers: Mutex<Vec<JoinHandle<()>>>,
    /// Set at resignation: nothing more is started.
    resigned: AtomicBool,
    timers: Mutex<Vec<JoinHandle<()>>>,
}

impl TxnShard {
    /// Additions to this partition's transactions, queued per transactional id.
    pub fn additions(&self) -> &Additions {
        &self.additions
    }

    /// Writes the markers of `prepared` (the `Prepare*` record of `transactional_id`) in the
    /// background and records its completion; nothing when it is being finished already, or
    /// once the shard resigned. A task of its own, stopped at resignation (the next leader —
    /// perhaps this node again, in a new term — finishes the transaction; markers are
    /// idempotent and completion a compare-and-set).
    pub fn finish(self: &Arc<Self>, transactional_id: String, prepared: TransactionMetadata) {
        // Checked under the same lock as resignation aborts the finishers.
        let mut finishers = self.finishers.lock().unwrap_or_else(PoisonError::into_inner);
        if self.resigned.load(Ordering::SeqCst) {
            // The next leader's shard finishes it.
            return;
        }
        // By transaction: the next one of the same id may be decided as soon as this one's
        // completion applies, before this task has left.
        let key = (transactional_id, prepared.txn_start_version);
        if !self.finishing.lock().unwrap_or_else(PoisonError::into_inner).insert(key.clone()) {
            return;
        }
        let shard = Arc::downgrade(self);
        let (partition, node) = (self.partition.clone(), self.node.clone());
        finishers.retain(|f| !f.is_finished());
        finishers.push(rill_rt::spawn(async move {
            let id = key.0.clone();
            match crate::txn_markers::finish(&node, &partition, &id, &prepared).await {
                Ok(true) => {
                    tracing::debug!(transactional_id = %id, state = prepared.state.name(), "transaction completed")
                }
                Ok(false) => {}
                Err(e) => {
                    tracing::info!(transactional_id = %id, error = %e, "transaction left for the next leader to finish")
                }
            }
            if let Some(s) = shard.upgrade() {
                s.finishing.lock().unwrap_or_else(PoisonError::into_inner).remove(&key);
            }
        }));
    }
}

impl Shard for TxnShard {
    type Machine = TransactionsMachine;

    fn elected(partition: Arc<StatePartition<TransactionsMachine>>, node: &Arc<Node>) -> Option<Arc<Self>> {
        let expiration = node.config().transactional_id_expiration;
        let shard = Arc::new(Self {
            partition,
            node: Arc::downgrade(node),
            additions: Additions::new(),
            finishing: Mutex::default(),
            finishers: Mutex::default(),
            resigned: AtomicBool::new(false),
            timers: Mutex::default(),
        });
        let timers = vec![
            rill_rt::spawn(finish_prepared(Arc::downgrade(&shard))),
            rill_rt::spawn(remove_idle_ids(Arc::downgrade(&shard), expiration.check_every, expiration.expiration)),
        ];
        *shard.timers.lock().unwrap_or_else(PoisonError::into_inner) = timers;
        Some(shard)
    }

    fn partition(&self) -> &Arc<StatePartition<TransactionsMachine>> {
        &self.partition
    }

    fn resign(&self) {
        let mut finishers = self.finishers.lock().unwrap_or_else(PoisonError::into_inner);
        self.resigned.store(true, Ordering::SeqCst);
        for task in finishers.drain(..).chain(self.timers.lock().unwrap_or_else(PoisonError::into_inner).drain(..)) {
            task.abort();
        }
    }

    fn registry(coordinators: &Coordinators) -> &Registry<Self> {
        coordinators.transactions()
    }
}

/// Finishes what the partition has prepared and aborts what has outlived its timeout: at once,
/// then every [`CHECK_EVERY`], while the shard lives.
async fn finish_prepared(shard: Weak<TxnShard>) {
    loop {
        let Some(s) = shard.upgrade() else { return };
        match transactions::to_finish(&s.partition, STEP_TIMEOUT).await {
            Ok(records) => {
                for (id, record) in records {
                    s.finish(id, record);
                }
            }
            Err(e) => tracing::debug!(group = s.partition.replica().group(), error = %e, "transactions not checked"),
        }
        drop(s);
        rill_rt::sleep(CHECK_EVERY).await;
    }
}

/// Removes the transactional ids idle past `expiration`, every `every`, while the shard lives.
async fn remove_idle_ids(shard: Weak<TxnShard>, every: Duration, expiration: Duration) {
    loop {
        rill_rt::sleep(every).await;
        let Some(s) = shard.upgrade() else { return };
        let p = s.partition.clone();
        drop(s);
        match transactions::remove_idle(&p, expiration, STEP_TIMEOUT).await {
            Ok(removed) if removed.is_empty() => {}
            Err(CoordinatorError::NotCoordinator { .. } | CoordinatorError::LoadInProgress) => {}
            Ok(removed) => tracing::info!(
                partition = p.replica().group(),
                count = removed.len(),
                first = %removed[0],
                "removed expired transactional ids"
            ),
            Err(e) => tracing::warn!(error = %e, "could not remove expired transactional ids; the next check retries"),
        }
    }
}
