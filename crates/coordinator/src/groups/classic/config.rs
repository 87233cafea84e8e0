//! The classic group coordinator's settings, with Kafka's defaults.

use crate::groups::heartbeat::MAX_MEMBERS_PER_GROUP;

/// Shortest session timeout a member may ask for (Kafka's `group.min.session.timeout.ms`): a
/// shorter one makes members flap on any pause (a GC, a slow disk) and rebalances churn.
pub const MIN_SESSION_TIMEOUT_MS: u32 = 6_000;
/// Longest session timeout a member may ask for (Kafka's `group.max.session.timeout.ms`): a dead
/// member holds its partitions at most this long.
pub const MAX_SESSION_TIMEOUT_MS: u32 = 30 * 60 * 1000;
/// How long the first rebalance of an empty group waits for more members (Kafka's
/// `group.initial.rebalance.delay.ms`): consumers started together land in one generation instead
/// of one rebalance each.
pub const INITIAL_REBALANCE_DELAY_MS: u32 = 3_000;
/// How long a new member's parked JoinGroup may wait for the join phase before the member is
/// dropped (Kafka's fixed `GroupCoordinator.NewMemberJoinTimeoutMs`): a new member cannot
/// heartbeat while its join is parked, and a client that timed out and retried would otherwise
/// leave a defunct member behind every time.
pub const NEW_MEMBER_JOIN_TIMEOUT_MS: u32 = 5 * 60 * 1000;

/// The classic group coordinator's settings (the node's `[groups]` settings).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClassicConfig {
    /// Shortest session timeout accepted.
    pub min_session_timeout_ms: u32,
    /// Longest session timeout accepted.
    pub max_session_timeout_ms: u32,
    /// How long the first rebalance of an empty group waits for more members, and how much each
    /// new member extends it (never past the group's rebalance timeout).
    pub initial_rebalance_delay_ms: u32,
    /// Most members of one group (Kafka's `group.max.size`; Rill's limit for every group).
    pub max_size: usize,
    /// How long a new member's parked JoinGroup may wait.
    pub new_member_join_timeout_ms: u32,
}

impl Default for ClassicConfig {
    fn default() -> Self {
        Self {
            min_session_timeout_ms: MIN_SESSION_TIMEOUT_MS,
            max_session_timeout_ms: MAX_SESSION_TIMEOUT_MS,
            initial_rebalance_delay_ms: INITIAL_REBALANCE_DELAY_MS,
            max_size: MAX_MEMBERS_PER_GROUP,
            new_member_join_timeout_ms: NEW_MEMBER_JOIN_TIMEOUT_MS,
        }
    }
}
