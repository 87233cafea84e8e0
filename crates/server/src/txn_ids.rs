//! Removing transactional ids nobody uses any more, on their coordinator's leader.
//!
//! Every `[transactions] transactional-id-expiration-check-interval`, each led
//! `__transaction_state` partition removes the ids with no transaction open and nothing written
//! for `transactional-id-expiration` (Kafka's `transactional.id.expiration.ms`;
//! `rill_coordinator::transactions::remove_idle`). Without it the coordinators' state — and their
//! snapshots — would grow with every transactional id ever used. The removed id's producer id is
//! retired: a producer that comes back under the id gets a new producer id from
//! `InitProducerId`, and a zombie still holding the old pair is refused by the coordinator
//! (`INVALID_PRODUCER_ID_MAPPING`) and, through batch verification, by every partition.

use std::sync::Weak;
use std::time::Duration;

use rill_coordinator::CoordinatorError;

use crate::node::Node;

/// How long one removal may take to be written.
const REMOVE_TIMEOUT: Duration = Duration::from_secs(10);

/// Runs until the node is dropped. Its own task, so a slow proposal (a lost quorum) never delays
/// the transaction timers of `txn_markers`.
pub async fn run(node: Weak<Node>) {
    loop {
        let Some(every) = node.upgrade().map(|n| n.config().transactional_id_expiration.check_every) else { return };
        rill_rt::sleep(every).await;
        let Some(n) = node.upgrade() else { return };
        let expiration = n.config().transactional_id_expiration.expiration;
        let partitions = n.transactions_replicas();
        drop(n);
        for p in partitions {
            // Only the caught-up leader decides; elsewhere `remove_idle` answers not-the-coordinator.
            match rill_coordinator::transactions::remove_idle(&p, expiration, REMOVE_TIMEOUT).await {
                Ok(removed) if removed.is_empty() => {}
                Err(CoordinatorError::NotCoordinator { .. } | CoordinatorError::LoadInProgress) => {}
                Ok(removed) => tracing::info!(
                    partition = p.replica().group(),
                    count = removed.len(),
                    first = %removed[0],
                    "removed expired transactional ids"
                ),
                Err(e) => {
                    tracing::warn!(error = %e, "could not remove expired transactional ids; the next check retries")
                }
            }
        }
    }
}
