//! [`GroupShard`]: the group coordinator of one `__consumer_offsets` partition this node leads.
//!
//! It owns what the leader alone keeps: members' session and rebalance timers
//! (`rill_coordinator::groups::sessions`; a new leader arms a full session for every member, so
//! a failover never shortens one), the groups' turns (one writing heartbeat decision at a time
//! per group), the heartbeats held as long polls, which the partition's machine wakes through
//! its change hook while this shard observes it, and the classic groups' engine with its parked
//! requests and deadlines ([`super::classic`]). Its timers:
//!
//! * every second, members whose session or rebalance timeout ran out are removed — a proposed
//!   command that applies only if the member is still at the epoch its timer saw, so a heartbeat
//!   racing the timer wins;
//! * every `[groups] offsets-retention-check-interval`, the offsets `offsets-retention` has
//!   expired are removed (groups without members only; re-checked in `apply`) and the
//!   transaction marks of producers last marked longer than `[transactions]
//!   transactional-id-expiration` ago are forgotten. Its own task, so a slow proposal (a lost
//!   quorum) never delays the session timers.

use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use rill_broker::StatePartition;
use rill_coordinator::groups::classic::ClassicConfig;
use rill_coordinator::groups::held::HeldHeartbeats;
use rill_coordinator::groups::sessions::Sessions;
use rill_coordinator::groups::GroupTurns;
use rill_coordinator::{CoordinatorError, OffsetsMachine};
use rill_rt::JoinHandle;

use super::classic::ClassicDriver;
use super::{Coordinators, Registry, Shard};
use crate::node::Node;

/// How often timers are checked: a member is removed at most this long after its timeout.
const CHECK_EVERY: Duration = Duration::from_secs(1);
/// How long removing one expired member, or one retention command, may take to be committed.
const FENCE_TIMEOUT: Duration = Duration::from_secs(5);

/// The group coordinator of a `__consumer_offsets` partition this node leads.
pub struct GroupShard {
    partition: Arc<StatePartition<OffsetsMachine>>,
    classic: Arc<ClassicDriver>,
    sessions: Sessions,
    turns: GroupTurns,
    held: Arc<HeldHeartbeats>,
    timers: Mutex<Vec<JoinHandle<()>>>,
}

impl GroupShard {
    /// Members' session and rebalance timers.
    pub fn sessions(&self) -> &Sessions {
        &self.sessions
    }

    /// One writing heartbeat decision at a time per group.
    pub fn turns(&self) -> &GroupTurns {
        &self.turns
    }

    /// The heartbeats held as long polls, woken by the partition's changes.
    pub fn held(&self) -> &HeldHeartbeats {
        &self.held
    }

    /// The classic groups.
    pub fn classic(&self) -> &ClassicDriver {
        &self.classic
    }
}

impl Shard for GroupShard {
    type Machine = OffsetsMachine;

    fn elected(partition: Arc<StatePartition<OffsetsMachine>>, node: &Arc<Node>) -> Option<Arc<Self>> {
        let config = node.config();
        let (classic, classic_tasks) =
            ClassicDriver::start(partition.clone(), node.id(), ClassicConfig::default()).ok()?;
        let held = Arc::new(HeldHeartbeats::default());
        partition.peek(|m| m.observe(Some(held.clone())));
        let sessions = Sessions::new(Duration::from_millis(u64::from(config.groups.session_ms)));
        let group = partition.replica().group();
        // Every member gets a full session from now.
        let _ = partition.read(|m| sessions.adopt(group, m.groups()));
        let shard =
            Arc::new(Self { partition, classic, sessions, turns: GroupTurns::new(), held, timers: Mutex::default() });
        let retention = Retention {
            every: config.offsets_retention.check_every,
            retention_ms: i64::try_from(config.offsets_retention.retention.as_millis()).unwrap_or(i64::MAX),
            marks_horizon: config.transactional_id_expiration.expiration,
        };
        let mut timers = classic_tasks;
        timers.push(rill_rt::spawn(expire_sessions(Arc::downgrade(&shard))));
        timers.push(rill_rt::spawn(expire_offsets(Arc::downgrade(&shard), retention)));
        *shard.timers.lock().unwrap_or_else(PoisonError::into_inner) = timers;
        Some(shard)
    }

    fn partition(&self) -> &Arc<StatePartition<OffsetsMachine>> {
        &self.partition
    }

    fn resign(&self) {
        self.partition.peek(|m| m.observe(None));
        self.classic.resign();
        for timer in self.timers.lock().unwrap_or_else(PoisonError::into_inner).drain(..) {
            timer.abort();
        }
    }

    fn registry(coordinators: &Coordinators) -> &Registry<Self> {
        coordinators.groups()
    }
}

/// Removes members whose session or rebalance timeout ran out, every [`CHECK_EVERY`], while the
/// shard lives.
async fn expire_sessions(shard: Weak<GroupShard>) {
    loop {
        rill_rt::sleep(CHECK_EVERY).await;
        let Some(s) = shard.upgrade() else { return };
        let (p, sessions) = (&s.partition, &s.sessions);
        let group = p.replica().group();
        // Members that appeared since (a snapshot, another path) get their timers too.
        if p.read(|m| sessions.adopt(group, m.groups())).is_err() {
            continue;
        }
        for expired in sessions.expired(rill_rt::now()) {
            // Removing an earlier member may have taken a while: one heard since then stays.
            if !sessions.still_expired(&expired, rill_rt::now()) {
                continue;
            }
            match rill_coordinator::offsets::membership::fence_member(
                p,
                &expired.group_id,
                &expired.member_id,
                expired.epoch,
                FENCE_TIMEOUT,
            )
            .await
            {
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

/// What [`expire_offsets`] removes, and how often.
#[derive(Debug, Clone, Copy)]
struct Retention {
    every: Duration,
    retention_ms: i64,
    marks_horizon: Duration,
}

/// Expires committed offsets and forgets old transaction marks, every `retention.every`, while
/// the shard lives.
async fn expire_offsets(shard: Weak<GroupShard>, retention: Retention) {
    loop {
        rill_rt::sleep(retention.every).await;
        let Some(s) = shard.upgrade() else { return };
        let p = s.partition.clone();
        drop(s);
        match rill_coordinator::offsets::expire(&p, retention.retention_ms, FENCE_TIMEOUT).await {
            Ok(0) | Err(CoordinatorError::NotCoordinator { .. } | CoordinatorError::LoadInProgress) => {}
            Ok(count) => tracing::info!(partition = p.replica().group(), offsets = count, "expired committed offsets"),
            Err(e) => tracing::warn!(error = %e, "could not expire committed offsets; the next check retries"),
        }
        match rill_coordinator::offsets::txn::prune_marks(&p, retention.marks_horizon, FENCE_TIMEOUT).await {
            Ok(0) | Err(CoordinatorError::NotCoordinator { .. } | CoordinatorError::LoadInProgress) => {}
            Ok(count) => {
                tracing::info!(partition = p.replica().group(), producers = count, "forgot old transaction marks")
            }
            Err(e) => tracing::warn!(error = %e, "could not forget old transaction marks; the next check retries"),
        }
    }
}
