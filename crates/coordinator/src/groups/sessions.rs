//! Session and rebalance timers of consumer group members: the coordinator leader's soft state,
//! never replicated.
//!
//! * Every answered heartbeat restarts the member's **session** (the node's `[groups]
//!   session-timeout`, 45 s by default); a
//!   member not heard from for that long is removed and its partitions reassigned.
//! * A member that must revoke partitions has its **rebalance timeout** from the first answer that
//!   asked it to: if it has not revoked them by then it is removed too (fenced), so a stuck
//!   member cannot hold partitions a new owner waits for.
//!
//! A new leader of a coordinator partition knows no timers: [`Sessions::adopt`] arms a fresh
//! session for every member it finds (and a fresh rebalance timeout for a member revoking), so a
//! failover gives every member a full session to find the new coordinator — never less. Each
//! timer remembers the member's epoch, and removing a member is a compare on that epoch
//! ([`super::heartbeat::fence`]), so a timer that lost a race with a heartbeat does nothing.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

use rill_raft::GroupId;
use rill_rt::Instant;

use super::group::{ConsumerGroups, Member, MemberState};
#[cfg(test)]
use super::heartbeat::SESSION_TIMEOUT_MS;

/// One member's timers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Timer {
    /// The member's epoch when last heard from.
    epoch: i32,
    /// When its session ends.
    session_ends: Instant,
    /// When it must have revoked what it was asked to (with the epoch it was asked at).
    revoke_by: Option<Instant>,
}

/// A member whose session or rebalance timeout ran out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Expired {
    /// The coordinator partition's Raft group.
    pub partition: GroupId,
    /// The consumer group.
    pub group_id: String,
    /// The member.
    pub member_id: String,
    /// Its epoch when its timer was armed: it is removed only if still at it.
    pub epoch: i32,
    /// Why: the session, or the rebalance timeout.
    pub reason: &'static str,
}

type Key = (GroupId, String, String);

/// The timers of every member of the groups of a coordinator partition this node leads (its
/// coordinator shard's, made at election; keyed by partition all the same).
#[derive(Debug)]
pub struct Sessions {
    timers: Mutex<BTreeMap<Key, Timer>>,
    session: Duration,
}

impl Sessions {
    /// No timers; sessions last `session`.
    pub fn new(session: Duration) -> Self {
        Self { timers: Mutex::new(BTreeMap::new()), session }
    }

    fn timers(&self) -> std::sync::MutexGuard<'_, BTreeMap<Key, Timer>> {
        // A panic while holding the lock leaves plain data behind: keep using it.
        self.timers.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A heartbeat of `group_id` on `partition` was answered; `member` is the member after it
    /// (`None`: it left). Restarts its session, and arms its rebalance timeout when it has just
    /// been asked to revoke.
    pub fn heard(&self, partition: GroupId, group_id: &str, member_id: &str, member: Option<&Member>) {
        let key = (partition, group_id.to_string(), member_id.to_string());
        let mut timers = self.timers();
        let Some(member) = member else {
            timers.remove(&key);
            return;
        };
        let key = (partition, group_id.to_string(), member.member_id.clone());
        let now = rill_rt::now();
        let previous = timers.get(&key).copied();
        timers.insert(key, arm(member, now, previous, self.session));
    }

    /// For `partition` (which this node now leads, with its log applied): arms a fresh session
    /// for every member that has no timer, and drops the timers of members no longer there.
    pub fn adopt(&self, partition: GroupId, groups: &ConsumerGroups) {
        let now = rill_rt::now();
        let mut timers = self.timers();
        let mut present = BTreeMap::new();
        for g in groups.iter() {
            for m in g.members.values() {
                let key = (partition, g.group_id.clone(), m.member_id.clone());
                let timer = match timers.get(&key) {
                    Some(t) if t.epoch == m.epoch => *t,
                    previous => arm(m, now, previous.copied(), self.session),
                };
                present.insert(key, timer);
            }
        }
        timers.retain(|(p, _, _), _| *p != partition);
        timers.extend(present);
    }

    /// This node no longer leads `partition`: its timers go (the next leader arms its own).
    pub fn forget(&self, partition: GroupId) {
        self.timers().retain(|(p, _, _), _| *p != partition);
    }

    /// The members whose session or rebalance timeout has run out at `now`.
    pub fn expired(&self, now: Instant) -> Vec<Expired> {
        self.timers()
            .iter()
            .filter_map(|((partition, group_id, member_id), t)| {
                let reason = if t.session_ends <= now {
                    "its session timed out"
                } else if t.revoke_by.is_some_and(|by| by <= now) {
                    "it did not revoke its partitions within its rebalance timeout"
                } else {
                    return None;
                };
                Some(Expired {
                    partition: *partition,
                    group_id: group_id.clone(),
                    member_id: member_id.clone(),
                    epoch: t.epoch,
                    reason,
                })
            })
            .collect()
    }

    /// True while `expired`'s timer (of that member at that epoch) has still run out at `now`:
    /// a heartbeat heard since restarted it, and the member must not be removed.
    pub fn still_expired(&self, expired: &Expired, now: Instant) -> bool {
        let key = (expired.partition, expired.group_id.clone(), expired.member_id.clone());
        self.timers().get(&key).is_some_and(|t| {
            t.epoch == expired.epoch && (t.session_ends <= now || t.revoke_by.is_some_and(|by| by <= now))
        })
    }

    /// Number of members with timers.
    pub fn len(&self) -> usize {
        self.timers().len()
    }

    /// True when there are none.
    pub fn is_empty(&self) -> bool {
        self.timers().is_empty()
    }
}

/// The timer of `member` heard from (or adopted) at `now`: a fresh session; a rebalance timeout
/// kept from before while it is still revoking at the same epoch, armed anew when it starts.
fn arm(member: &Member, now: Instant, previous: Option<Timer>, session: Duration) -> Timer {
    let revoking = member.state == MemberState::UnrevokedPartitions;
    let revoke_by = match previous {
        _ if !revoking => None,
        Some(t) if t.epoch == member.epoch && t.revoke_by.is_some() => t.revoke_by,
        _ => Some(now + Duration::from_millis(u64::from(member.rebalance_timeout_ms))),
    };
    Timer { epoch: member.epoch, session_ends: now + session, revoke_by }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::groups::group::ConsumerGroup;

    fn member(id: &str, epoch: i32, state: MemberState) -> Member {
        Member { member_id: id.into(), epoch, state, rebalance_timeout_ms: 10_000, ..Default::default() }
    }

    #[test]
    fn sessions_expire_unless_heard_and_revocations_have_a_deadline() {
        let s = Sessions::new(Duration::from_millis(u64::from(SESSION_TIMEOUT_MS)));
        let start = rill_rt::now();
        s.heard(1, "g", "a", Some(&member("a", 3, MemberState::Stable)));
        s.heard(1, "g", "b", Some(&member("b", 3, MemberState::UnrevokedPartitions)));
        assert!(s.expired(start).is_empty());
        let after_revoke = start + Duration::from_millis(10_500);
        let late = s.expired(after_revoke);
        assert_eq!(late.len(), 1, "{late:?}");
        assert_eq!((late[0].member_id.as_str(), late[0].epoch), ("b", 3));
        // Heard again while still revoking at the same epoch: the deadline is not pushed back.
        s.heard(1, "g", "b", Some(&member("b", 3, MemberState::UnrevokedPartitions)));
        assert_eq!(s.expired(after_revoke).len(), 1);
        // Revoked: no deadline any more.
        s.heard(1, "g", "b", Some(&member("b", 4, MemberState::Stable)));
        assert!(s.expired(after_revoke).is_empty());
        let after_session = rill_rt::now() + Duration::from_millis(u64::from(SESSION_TIMEOUT_MS) + 1);
        let expired = s.expired(after_session);
        assert_eq!(expired.len(), 2);
        assert!(s.still_expired(&expired[0], after_session));
        // Heard again before the removal was proposed: it stays.
        s.heard(
            1,
            "g",
            &expired[0].member_id,
            Some(&member(&expired[0].member_id, expired[0].epoch, MemberState::Stable)),
        );
        assert!(!s.still_expired(&expired[0], rill_rt::now() + Duration::from_secs(1)));
        // A member that left has no timer.
        s.heard(1, "g", "a", None);
        assert_eq!(s.len(), 1);
    }

    #[test]
    fn a_new_leader_adopts_every_member_with_a_full_session() {
        let mut groups = ConsumerGroups::default();
        let mut g = ConsumerGroup { group_id: "g".into(), ..Default::default() };
        for (id, epoch) in [("a", 2), ("b", 2)] {
            g.members.insert(id.into(), member(id, epoch, MemberState::Stable));
        }
        let change = rill_proto::coordinator::ConsumerGroupChange {
            group_id: "g".into(),
            expect_version: 0,
            meta: Some(g.meta_to_proto()),
            upsert_members: g.members.values().map(crate::groups::group::member_to_proto).collect(),
            ..Default::default()
        };
        groups.apply(&change);
        let s = Sessions::new(Duration::from_millis(u64::from(SESSION_TIMEOUT_MS)));
        s.heard(7, "g", "gone", Some(&member("gone", 1, MemberState::Stable)));
        s.heard(8, "other", "x", Some(&member("x", 1, MemberState::Stable)));
        s.adopt(7, &groups);
        assert_eq!(s.len(), 3, "a and b adopted, gone dropped, the other partition untouched");
        let soon = rill_rt::now() + Duration::from_millis(u64::from(SESSION_TIMEOUT_MS) - 1_000);
        assert!(s.expired(soon).is_empty());
        s.forget(7);
        assert_eq!(s.len(), 1);
    }
}
