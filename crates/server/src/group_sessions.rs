//! Consumer groups' timers on the coordinator's leader: members' session and rebalance timers,
//! and the expiry of empty groups' offsets.
//!
//! Every second, for each `__consumer_offsets` partition this node hosts: while it leads the
//! partition with its log applied, every member of its groups has a timer (a new leader arms a
//! full session for each — `rill_coordinator::groups::sessions`); otherwise its timers are
//! dropped. Expired members are removed by a proposed command that applies only if the member is
//! still at the epoch its timer saw, so a heartbeat racing the timer wins.
//!
//! Every `[groups] offsets-retention-check-interval`, each led partition removes the offsets
//! `offsets-retention` has expired (`rill_coordinator::offsets::expire`: groups without members
//! only; re-checked in `apply`, so a member joining meanwhile keeps them), and forgets the
//! transaction marks of producers last marked longer ago than `[transactions]
//! transactional-id-expiration` (`rill_coordinator::txn_offsets::prune_marks`).

use std::sync::Weak;
use std::time::Duration;

use rill_coordinator::{groups, CoordinatorError};

use crate::node::Node;

/// How often timers are checked: a member is removed at most this long after its timeout.
const CHECK_EVERY: Duration = Duration::from_secs(1);
/// How long removing one expired member may take to be committed.
const FENCE_TIMEOUT: Duration = Duration::from_secs(5);

/// Runs until the node is dropped.
pub async fn run(node: Weak<Node>) {
    loop {
        rill_rt::sleep(CHECK_EVERY).await;
        let Some(n) = node.upgrade() else { return };
        let sessions = n.group_sessions();
        let mut led = Vec::new();
        for p in n.offsets_replicas() {
            let group = p.replica().group();
            match p.read(|m| sessions.adopt(group, m.groups())) {
                Ok(()) => led.push(p),
                Err(_) => sessions.forget(group),
            }
        }
        for expired in sessions.expired(rill_rt::now()) {
            let Some(p) = led.iter().find(|p| p.replica().group() == expired.partition) else { continue };
            // Removing an earlier member may have taken a while: one heard since then stays.
            if !sessions.still_expired(&expired, rill_rt::now()) {
                continue;
            }
            match groups::fence_member(p, &expired.group_id, &expired.member_id, expired.epoch, FENCE_TIMEOUT).await {
                Ok(true) => tracing::info!(
                    group = %expired.group_id,
                    member = %expired.member_id,
                    epoch = expired.epoch,
                    "removed a consumer group member: {}",
                    expired.reason
                ),
                Ok(false) => {}
                Err(e) => tracing::warn!(
                    group = %expired.group_id,
                    member = %expired.member_id,
                    error = %e,
                    "could not remove an expired consumer group member; retrying"
                ),
            }
        }
    }
}

/// Expires committed offsets, and forgets old transaction marks, every `[groups]
/// offsets-retention-check-interval` on the `__consumer_offsets` partitions this node leads,
/// until the node is dropped. Its own task, so a slow proposal (a lost quorum) never delays the
/// session timers.
pub async fn run_offsets_retention(node: Weak<Node>) {
    loop {
        let Some(every) = node.upgrade().map(|n| n.config().offsets_retention.check_every) else { return };
        rill_rt::sleep(every).await;
        let Some(n) = node.upgrade() else { return };
        let retention_ms = i64::try_from(n.config().offsets_retention.retention.as_millis()).unwrap_or(i64::MAX);
        let marks_horizon = n.config().transactional_id_expiration.expiration;
        let offsets = n.offsets_replicas();
        drop(n);
        for p in offsets {
            // Only the caught-up leader decides; elsewhere `expire` answers not-the-coordinator.
            match rill_coordinator::offsets::expire(&p, retention_ms, FENCE_TIMEOUT).await {
                Ok(0) | Err(CoordinatorError::NotCoordinator { .. } | CoordinatorError::LoadInProgress) => {}
                Ok(count) => {
                    tracing::info!(partition = p.replica().group(), offsets = count, "expired committed offsets")
                }
                Err(e) => tracing::warn!(error = %e, "could not expire committed offsets; the next check retries"),
            }
            match rill_coordinator::txn_offsets::prune_marks(&p, marks_horizon, FENCE_TIMEOUT).await {
                Ok(0) | Err(CoordinatorError::NotCoordinator { .. } | CoordinatorError::LoadInProgress) => {}
                Ok(count) => {
                    tracing::info!(partition = p.replica().group(), producers = count, "forgot old transaction marks")
                }
                Err(e) => tracing::warn!(error = %e, "could not forget old transaction marks; the next check retries"),
            }
        }
    }
}
